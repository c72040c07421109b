"""Expiry (domain/expiry.py): which events and to-dos a policy expires, and the view without them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from user_memory.domain.expiry import ExpiryPolicy, expired, without_expired

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)
POLICY = ExpiryPolicy(events_after=timedelta(days=7), todos_after=timedelta(days=3))


def at(days_ago: float) -> str:
    return (NOW - timedelta(days=days_ago)).isoformat()


def test_events_expire_after_their_end_and_recurring_ones_after_their_last_occurrence():
    document = {
        "events": {
            "ended": {"summary": "a", "start": at(9), "end": at(8)},
            "no-end": {"summary": "b", "start": at(8)},
            "just-ended": {"summary": "c", "start": at(7), "end": at(6)},
            "finite": {"summary": "d", "start": at(60), "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=2"]},
            "forever": {"summary": "e", "start": at(60), "recurrence": ["RRULE:FREQ=WEEKLY"]},
            "unreadable": {"summary": "f", "start": "yesterday"},
        }
    }
    assert sorted(expired(document, POLICY, NOW)) == [("events", "ended"), ("events", "finite"), ("events", "no-end")]


def test_todos_expire_only_when_done_or_cancelled_and_stamped():
    document = {
        "todos": {
            "done-old": {"text": "a", "status": "done", "completed_at": at(4)},
            "cancelled-old": {"text": "b", "status": "cancelled", "completed_at": at(4)},
            "done-new": {"text": "c", "status": "done", "completed_at": at(2)},
            "open-old": {"text": "d", "status": "open", "completed_at": at(40)},
            "done-unstamped": {"text": "e", "status": "done"},
        }
    }
    assert sorted(expired(document, POLICY, NOW)) == [("todos", "cancelled-old"), ("todos", "done-old")]


def test_a_policy_that_keeps_everything_expires_nothing():
    document = {"events": {"e": {"summary": "a", "start": at(900)}}}
    assert expired(document, ExpiryPolicy(), NOW) == [] and not ExpiryPolicy.from_days(0, 0).active


@given(
    events=st.dictionaries(st.text("abc", min_size=1, max_size=3), st.floats(-30, 30), max_size=6),
    todos=st.dictionaries(
        st.text("xyz", min_size=1, max_size=3), st.tuples(st.sampled_from(["open", "done"]), st.floats(0, 30))
    ),
)
def test_the_view_drops_exactly_what_expired_and_is_left_with_nothing_expired(events, todos):
    document = {
        "summary": "kept",
        "events": {k: {"summary": k, "start": at(days)} for k, days in events.items()},
        "todos": {k: {"text": k, "status": s, "completed_at": at(days)} for k, (s, days) in todos.items()},
    }
    gone = set(expired(document, POLICY, NOW))
    view = without_expired(document, POLICY, NOW)
    assert expired(view, POLICY, NOW) == []
    kept = {("events", k) for k in view["events"]} | {("todos", k) for k in view["todos"]}
    everything = {("events", k) for k in events} | {("todos", k) for k in todos}
    assert kept == everything - gone and view["summary"] == "kept"
    assert len(document["events"]) == len(events)  # the document itself is untouched

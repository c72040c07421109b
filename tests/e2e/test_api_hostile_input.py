"""Hostile input through the companion routes and the worker cannot stall a user or poison the
next run: the API handler with real HTTP API v2 events and the worker handler with real SQS
records, over the session's PostgreSQL, DOCUMENT_SCHEMA=companion.

Every request is timed inside the test and must answer within BOUND_SECONDS (a bound on hostile
input, not a benchmark) and never with a 5xx; whatever a request stored must read back (the
element, the document, the queries), export (GET /me/export), and be summarized again (the
nightly worker run for that user, with an activity and a rating to fold, fails nothing). Calls
that used to hang run in a daemon thread (tests/bounds.py), so that they fail instead of
stalling the suite.

First, one test per finding of the hostile-input pass (each fails on the code before the fix);
then property-based tests (hypothesis) over every element route, the Google Calendar import and
the recurrence rules.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from user_memory.config import ApiSettings, WorkerSettings
from user_memory.http.app import MemoryApi, create_api
from user_memory.http.problems import TYPE_BASE
from user_memory.jobs.companion import make_digest
from user_memory.runtime import build_api, build_worker
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext, sqs_record

from tests.api_client import ApiClient, Reply
from tests.bounds import finishing
from tests.e2e.helpers import MERGE_PATCH, TIMED, events_list_page, google_event

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

WORKER_SECONDS = 5.0  # one user's nightly run (summary, feedback, digest), hostile or not
SENSITIVE_EMAIL = "colleague@example.com"


# -- a client whose every request is bounded ----------------------------------------------------------


class Bounded:
    """Requests as one user; each must answer within BOUND_SECONDS and never with a 5xx."""

    def __init__(self, api: MemoryApi, user: uuid.UUID | None = None) -> None:
        self.client = ApiClient(api, user or uuid.uuid4())
        self.user = uuid.UUID(self.client.user_id or "")

    def request(self, method: str, path: str, **kw: Any) -> Reply:
        reply, error, _ = finishing(lambda: self.client.request(method, path, **kw))
        assert error is None, repr(error)
        assert reply.status < 500, f"{method} {path}: {reply.status} {reply.text[:300]}"
        return reply  # type: ignore[no-any-return]

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Reply:
        return self.request("POST", path, **kw)

    def delete(self, path: str, **kw: Any) -> Reply:
        return self.request("DELETE", path, **kw)

    def merge(self, path: str, body: Any) -> Reply:
        return self.request("PATCH", path, body=json.dumps(body), headers=MERGE_PATCH)


def ok(reply: Reply) -> Any:
    assert reply.status == 200, reply.text[:500]
    return reply.json


def problem(reply: Reply, status: int, slug: str) -> dict[str, Any]:
    assert reply.status == status, reply.text[:500]
    body = reply.json
    assert body["type"] == TYPE_BASE + slug, body
    return body  # type: ignore[no-any-return]


class Nightly:
    """The worker's nightly run for one user at a time (rule-based summarizer, companion schema)."""

    def __init__(self, database_url: str, pool: Any) -> None:
        settings_ = WorkerSettings.from_env(
            {}, database_url=database_url, summarizer="rules", document_schema="companion"
        )
        self.services = build_worker(settings_, pool=pool)

    def run(self, *users: uuid.UUID) -> dict[str, Any]:
        now = datetime.now(UTC)
        body = {
            "type": "refresh_user",
            "user_ids": [str(u) for u in users],
            "window": {"start": (now - timedelta(days=1)).isoformat(), "end": (now + timedelta(minutes=1)).isoformat()},
            "run_key": f"hostile:{uuid.uuid4().hex}",
        }
        event = {"Records": [sqs_record(message_id="m0", body=json.dumps(body))]}
        result, error, _ = finishing(
            lambda: worker_handler(event, FakeLambdaContext(), services=self.services), WORKER_SECONDS
        )
        assert error is None, repr(error)
        return result  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def api(pool: Any) -> MemoryApi:
    settings_ = ApiSettings.from_env({"DOCUMENT_SCHEMA": "companion"})
    return create_api(build_api(settings_, pool=pool), settings_)


@pytest.fixture(scope="module")
def nightly(database_url: str, pool: Any) -> Nightly:
    return Nightly(database_url, pool)


@pytest.fixture(scope="module")
def store(nightly: Nightly) -> Any:
    return nightly.services.store


def readable(user: Bounded) -> dict[str, Any]:
    """Everything the user has reads back and exports, each within the bound; the document."""
    document = ok(user.get("/me/memory"))["document"]
    for collection in ("goals", "todos", "events"):
        for element_id in (document.get(collection) or {}) if isinstance(document, dict) else {}:
            ok(user.get(f"/me/{collection}/{element_id}"))
    ok(user.get("/me/export"))
    now = datetime.now(UTC).replace(microsecond=0)
    for start in (now, datetime(1900, 1, 1, tzinfo=UTC), datetime(2999, 12, 20, tzinfo=UTC)):
        ok(user.get("/me/events", query={"from": start.isoformat(), "to": (start + timedelta(days=10)).isoformat()}))
    ok(user.get("/me/todos/due"))
    ok(user.get("/me/goals"))
    ok(user.get("/me/memory/search", query={"q": "hostile event plan", "mode": "fts"}))
    return document if isinstance(document, dict) else {}


def summarized_again(user: Bounded, nightly: Nightly) -> None:
    """The user's nightly run, with an activity to summarize and a rating to fold, fails nothing."""
    now = datetime.now(UTC) - timedelta(hours=1)
    activity = {"occurred_at": now.isoformat(), "kind": "mood", "payload": {"mood": "curious"}}
    ok(user.post("/me/activity", json_body={"items": [{**activity, "external_id": uuid.uuid4().hex}]}))
    ok(user.post("/me/ratings", json_body={"interaction_id": uuid.uuid4().hex, "rating": 4, "comment": "fine"}))
    assert nightly.run(user.user) == {"batchItemFailures": []}
    ok(user.get("/me/digest"))
    readable(user)


def digest_of(nightly: Nightly, user: Bounded) -> dict[str, Any]:
    """The user's digest made now by the nightly run's own step, within the bound (the worker skips
    a stored document that no longer validates, so it is called directly here)."""
    services = nightly.services
    _, error, _ = finishing(
        lambda: make_digest(user.user, store=services.store, companion=services.companion, now=datetime.now(UTC))
    )
    assert error is None, repr(error)
    return ok(user.get("/me/digest"))["digest"]  # type: ignore[no-any-return]


def walk_json(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) pair of a JSON value, at any depth."""
    pairs: list[tuple[str, Any]] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            pairs.extend(node.items())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return pairs


# -- one test per finding --------------------------------------------------------------------------------

NEVER_ADVANCES = "RRULE:FREQ=DAILY;INTERVAL=0"
NEVER_MATCHES = "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"


def hostile_event(rule: str, event_id: str = "stall") -> dict[str, Any]:
    return {"id": event_id, "summary": "Hostile", "start": "2026-01-05T09:00:00Z", "recurrence": [rule]}


def test_a_kilobyte_of_copies_of_the_whole_document_is_a_413_that_writes_nothing(api):
    # Given a new user (the copies double whatever there is: here the empty document)
    client = ApiClient(api, uuid.uuid4())
    before = ok(client.get("/me/memory"))
    # When they send the finding's patch: 22 copies of the whole document into new members, under
    # 1 KB, which doubled the document per operation (25 s and 503 MB before the 413)
    patch = [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(22)]
    body = json.dumps(patch)
    assert len(body) < 1024
    tracemalloc.start()
    try:
        reply = client.request(
            "PATCH", "/me/memory", body=body, headers={"Content-Type": "application/json-patch+json"}
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Then it is a 413 naming the operation that would have crossed twice the size limit, which the
    # request never built: its memory stays within what Python takes for that many bytes of JSON (an
    # empty object is 2 bytes of JSON and 64 of Python: at most a few dozen times; bounded by memory,
    # not time)
    body_ = problem(reply, 413, "too-large")
    assert body_["detail"].startswith("operation ") and "while it applies" in body_["detail"]
    limit = 2 * ApiSettings.from_env({}).max_document_bytes
    assert peak < 64 * limit, f"the request took {peak:,} bytes at its peak"
    # And nothing was written
    after = ok(client.get("/me/memory"))
    assert after["version"] == before["version"] and after["document"] == before["document"]


def test_adds_and_moves_that_nest_the_document_too_deep_are_a_422_not_a_500(api):
    # Given a new user, When they send 12 KB of adds of 90-level chains (the body's nesting is
    # within 100) and moves of each into the next one's tail: 1,100 levels once applied, whose size
    # check failed with RecursionError (a 500)
    client = ApiClient(api, uuid.uuid4())
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/a", "value": _chain(90)}]
    for i in range(12):
        source, target = ("/a", "/b") if i % 2 == 0 else ("/b", "/a")
        ops += [{"op": "add", "path": target, "value": _chain(90)}]
        ops += [{"op": "move", "from": source, "path": target + "/k" * 90}]
    reply = client.request(
        "PATCH", "/me/memory", body=json.dumps(ops), headers={"Content-Type": "application/json-patch+json"}
    )
    # Then it is refused as over the appliers' bounds, and nothing is written
    assert "levels deep" in problem(reply, 422, "invalid-input")["detail"]
    assert ok(client.get("/me/memory"))["version"] == 0


def _chain(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


def test_a_rule_that_never_advances_is_refused_without_stalling_the_request(api):
    # Given a user; When they create an event whose rule never advances (it used to hang)
    user = Bounded(api)
    reply = user.post("/me/events", json_body=hostile_event(NEVER_ADVANCES))
    # Then it is a 422 naming the rule's INTERVAL, within the bound, and nothing is written
    body = problem(reply, 422, "invalid-document")
    assert "recurrence" in body["detail"] and "INTERVAL" in body["detail"]
    assert ok(user.get("/me/memory"))["version"] == 0


def test_a_rule_that_never_advances_in_an_activity_stalls_neither_the_worker_nor_the_next_user(api, nightly):
    # Given a user whose day brought an event with such a rule (as activity), and a user after them
    hostile, next_user = Bounded(api), Bounded(api)
    at = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    event = {"summary": "Hostile", "start": "2026-01-05T09:00:00Z", "recurrence": [NEVER_ADVANCES]}
    ok(hostile.post("/me/activity", json_body={"items": [
        {"occurred_at": at, "kind": "event_added", "payload": event, "external_id": "a1"},
        {"occurred_at": at, "kind": "win", "payload": {"text": "Finished the report"}, "external_id": "a2"},
    ]}))  # fmt: skip
    ok(next_user.post("/me/activity", json_body={"items": [
        {"occurred_at": at, "kind": "todo_added", "payload": {"text": "Call the plumber"}, "external_id": "b1"},
    ]}))  # fmt: skip
    # When one message carries both users to the worker (it used to hang on the first)
    assert nightly.run(hostile.user, next_user.user) == {"batchItemFailures": []}
    # Then both are summarized: the hostile event is left out, the rest of each day is in
    mine = ok(hostile.get("/me/memory"))["document"]
    assert mine["events"] == {} and mine["current_state"]["recent_wins"] == ["Finished the report"]
    theirs = ok(next_user.get("/me/memory"))["document"]
    assert [t["text"] for t in theirs["todos"].values()] == ["Call the plumber"]


def test_a_rule_that_never_matches_is_refused_at_once_and_a_stored_one_stalls_nothing(api, nightly, store):
    # Given a user; When they create an event whose rule matches no day (it took seconds, then stored)
    user = Bounded(api)
    refused = user.post("/me/events", json_body=hostile_event(NEVER_MATCHES))
    # Then it is refused as over its budget, within the bound
    assert "recurrence" in problem(refused, 422, "budget-exceeded")["detail"]
    # Given such an event already stored (written before the check), beside a to-do
    stored = {
        "todos": {"t": {"id": "t", "text": "Water the plants"}},
        "events": {"stall": hostile_event(NEVER_MATCHES)},
    }
    store.append(user.user, stored, expected_version=0, source="seed")
    # When the user reads their week: it answers within the bound, naming the event it could not expand
    week = ok(user.get("/me/events"))
    assert week["items"] == [] and week["unexpanded"] == ["stall"]
    # And their digest (which expands the same week) is made within the bound, naming it too
    assert digest_of(nightly, user)["events_not_expanded"] == ["stall"]
    # And their nightly run fails nothing (it reports the stored document as invalid, and skips it)
    assert nightly.run(user.user) == {"batchItemFailures": []}
    # And a later write answers at once, naming the event to fix instead of taking seconds
    blocked = user.post("/me/todos", json_body={"text": "Buy seeds"})
    assert "events.stall" in problem(blocked, 422, "budget-exceeded")["detail"]
    # And removing the event lets every write through again
    assert ok(user.delete("/me/events/stall"))["status"] == "written"
    assert ok(user.post("/me/todos", json_body={"text": "Buy seeds"}))["status"] == "written"
    summarized_again(user, nightly)


def test_many_stored_rules_that_never_match_share_one_budget_per_read(api, nightly, store):
    # Given forty events stored with rules that never match (each alone within its own budget)
    user = Bounded(api)
    events = {f"e{n}": hostile_event(NEVER_MATCHES, f"e{n}") for n in range(40)}
    events["ok"] = {
        "id": "ok",
        "summary": "Standup",
        "start": "2026-01-05T09:00:00Z",
        "recurrence": ["RRULE:FREQ=DAILY"],
    }
    store.append(user.user, {"events": events}, expected_version=0, source="seed")
    # When the user reads a week, Then it answers within the bound: the daily event's seven
    # occurrences, and every hostile event named as not expanded
    week = ok(user.get("/me/events", query={"from": "2026-03-02T00:00:00Z", "to": "2026-03-09T00:00:00Z"}))
    assert [o["id"] for o in week["items"]] == ["ok"] * 7
    assert sorted(week["unexpanded"]) == sorted(f"e{n}" for n in range(40))
    # And the digest is bounded the same way
    assert sorted(digest_of(nightly, user)["events_not_expanded"]) == sorted(f"e{n}" for n in range(40))


def test_a_range_whose_occurrences_would_pass_the_response_limit_is_cut_with_where_to_go_on(api):
    # Given a daily event of about 40 KB (a long description, two hundred attendees)
    user = Bounded(api)
    attendees = [{"email": f"p{n}@example.com", "displayName": "A" * 150} for n in range(200)]
    big = google_event("big1", summary="Daily", description="d" * 8000, attendees=attendees,
                       recurrence=["RRULE:FREQ=DAILY"], start={"dateTime": "2026-01-01T09:00:00Z"},
                       end={"dateTime": "2026-01-01T09:15:00Z"})  # fmt: skip
    ok(user.post("/me/events/import", json_body=[big]))
    # When a year of it is read (366 occurrences, about 15 MB)
    year = user.get("/me/events", query={"from": "2026-01-01T00:00:00Z", "to": "2027-01-01T00:00:00Z"})
    # Then the answer stays under the limit, cut where the next request goes on
    body = ok(year)
    assert len(year.text) < 6 * 1024 * 1024
    assert 0 < len(body["items"]) < 366 and body["next_from"] is not None
    seen = [o["occurrence_start"] for o in body["items"]]
    while body["next_from"] is not None:
        body = ok(user.get("/me/events", query={"from": body["next_from"], "to": "2027-01-01T00:00:00Z"}))
        seen.extend(o["occurrence_start"] for o in body["items"] if o["occurrence_start"] not in seen)
    assert len(seen) == 365 and seen == sorted(seen)


def rating(at: str) -> dict[str, Any]:
    return {"interaction_id": "i", "rating": 3, "rated_at": at}


def activity(at: str) -> dict[str, Any]:
    return {"items": [{"occurred_at": at, "kind": "mood", "payload": {"mood": "ok"}, "external_id": "a"}]}


BYEASTER = {"summary": "x", "start": "2026-01-05T09:00:00Z", "recurrence": ["RRULE:FREQ=YEARLY;BYEASTER=500"]}
EDGE_TIMES = [
    pytest.param("/me/ratings", rating("0001-01-01T00:00:00+01:00"), id="rating-year-0-in-utc"),
    pytest.param("/me/ratings", rating("9999-12-31T23:59:59-01:00"), id="rating-year-10000-in-utc"),
    pytest.param("/me/activity", activity("0001-01-01T00:30:00+01:00"), id="activity-year-0-in-utc"),
    pytest.param("/me/activity", activity("9999-12-31T23:30:00-01:00"), id="activity-year-10000-in-utc"),
    pytest.param("/me/events", {"summary": "x", "start": "2026-01-01T00:00:00+05:30:15.5"}, id="event-offset-fraction"),
    pytest.param("/me/events", BYEASTER, id="event-byeaster"),
    pytest.param("/me/events", {"summary": "x", "start": "9999-12-31T23:59:59-01:00"}, id="event-year-10000-in-utc"),
    pytest.param("/me/todos", {"text": "x", "due_date": "0001-01-01T00:00:00+14:00"}, id="todo-year-0-in-utc"),
    pytest.param("/me/todos", {"text": "x", "due_date": "2026-W10-1T10:00:00Z"}, id="todo-week-date"),
    pytest.param("/me/goals", {"title": "x", "target_date": "9999-12-31"}, id="goal-year-9999"),
]


@pytest.mark.parametrize(("path", "body"), EDGE_TIMES)
def test_times_at_the_edges_are_refused_so_the_export_and_the_nightly_run_keep_working(api, nightly, path, body):
    # Given a user; When they send a time at the edge of what Python and PostgreSQL hold
    user = Bounded(api)
    reply = user.post(path, json_body=body)
    # Then it is a 422 within the bound (it was a 500, or stored and then unreadable)
    assert reply.status == 422, reply.text
    # And their export and nightly run work
    ok(user.get("/me/export"))
    summarized_again(user, nightly)


HUGE = "x" * 100_000

EVENT_BASE = {"summary": "x", "start": "2026-01-05"}
LONG_EXDATE = "EXDATE:" + ",".join(["20260112T090000Z"] * 6000)  # 100 KB
HUGE_ENTRIES = [
    pytest.param("POST", "/me/todos", {"text": "x", "tags": [HUGE]}, id="todo-tag"),
    pytest.param("PATCH", "/me/memory", {"current_state": {"skills": [HUGE]}}, id="skill"),
    pytest.param("PATCH", "/me/memory", {"current_state": {"recent_wins": ["ok", HUGE]}}, id="win"),
    pytest.param("PATCH", "/me/memory", {"advanced_info": {"languages": [HUGE]}}, id="language"),
    pytest.param("PATCH", "/me/memory", {"advanced_info": {"preferences": {"food": [HUGE]}}}, id="preference"),
    pytest.param("PATCH", "/me/memory", {"advanced_info": {"other_attributes": {"x": HUGE}}}, id="attribute"),
    pytest.param("PATCH", "/me/memory", {"feedback": {"positives": [HUGE]}}, id="feedback-line"),
    pytest.param("POST", "/me/events", {**EVENT_BASE, "recurrence": ["RRULE:FREQ=DAILY", LONG_EXDATE]}, id="exdate"),
]


@pytest.mark.parametrize(("method", "path", "body"), HUGE_ENTRIES)
def test_an_entry_of_100_kb_in_a_list_field_is_refused(api, method, path, body):
    # Given a user; When a list field of an element gets one entry of 100 KB
    user = Bounded(api)
    reply = user.post(path, json_body=body) if method == "POST" else user.merge(path, body)
    # Then it is refused, naming the field, and nothing is written
    assert reply.status == 422, reply.text[:300]
    assert ok(user.get("/me/memory"))["version"] == 0


SERIES = google_event(
    "weekly1",
    summary="Team sync",
    recurrence=["RRULE:FREQ=WEEKLY;BYDAY=MO"],
    start={"dateTime": "2026-06-01T10:00:00+01:00", "timeZone": "Europe/Lisbon"},
    end={"dateTime": "2026-06-01T10:30:00+01:00", "timeZone": "Europe/Lisbon"},
)
CANCELLED_INSTANCE = {
    "kind": "calendar#event",
    "id": "weekly1_20260608T090000Z",
    "status": "cancelled",
    "recurringEventId": "weekly1",
    "originalStartTime": {"dateTime": "2026-06-08T10:00:00+01:00", "timeZone": "Europe/Lisbon"},
}
MOVED_INSTANCE = google_event(
    "weekly1_20260615T090000Z",
    summary="Team sync (moved)",
    recurringEventId="weekly1",
    originalStartTime={"dateTime": "2026-06-15T10:00:00+01:00", "timeZone": "Europe/Lisbon"},
    start={"dateTime": "2026-06-16T10:00:00+01:00", "timeZone": "Europe/Lisbon"},
    end={"dateTime": "2026-06-16T10:30:00+01:00", "timeZone": "Europe/Lisbon"},
)
OLDER_COPY = {**SERIES, "summary": "Team sync (old title)", "updated": "2026-04-01T08:00:00.000Z"}


def test_a_google_import_does_the_same_whatever_the_order_of_its_page(api):
    # Given a page with a series, one of its instances cancelled and one moved, and an older copy of the series
    page = [SERIES, CANCELLED_INSTANCE, MOVED_INSTANCE, OLDER_COPY]
    outcomes = set()
    # When every order of the page is imported, each by a new user
    for order in itertools.permutations(page):
        user = Bounded(api)
        body = ok(user.post("/me/events/import", json_body=events_list_page(list(order))))
        events = ok(user.get("/me/memory"))["document"]["events"]
        counts = (body["created"], body["updated"], body["unchanged"], body["deleted"])
        outcomes.add((json.dumps(events, sort_keys=True), counts))
    # Then every order gives the same events and the same counts: the series skips both dates
    [(events_json, counts)] = outcomes
    events = json.loads(events_json)
    assert events["weekly1"]["summary"] == "Team sync"
    assert events["weekly1"]["recurrence"] == ["RRULE:FREQ=WEEKLY;BYDAY=MO", "EXDATE:20260608T090000Z,20260615T090000Z"]
    assert events["weekly1_20260615T090000Z"]["summary"] == "Team sync (moved)"
    assert counts == (2, 0, 0, 1)


GOOGLE_EDGE_TIMES = [
    pytest.param(
        [SERIES, {**CANCELLED_INSTANCE, "originalStartTime": {"dateTime": "0001-01-01T00:00:00Z"}}],
        id="cancelled-occurrence-in-year-1",
    ),
    pytest.param(
        [{**CANCELLED_INSTANCE, "originalStartTime": {"date": "9999-12-31"}}], id="cancelled-orphan-year-9999"
    ),
    pytest.param([{**SERIES, "updated": "0001-01-01T00:00:00+01:00"}], id="updated-year-0-in-utc"),
    pytest.param([{**SERIES, "updated": "2026-04-01T08:00:00"}], id="updated-without-offset"),
    pytest.param([{**MOVED_INSTANCE, "originalStartTime": {"dateTime": "3000-01-01T00:00:00Z"}}], id="moved-from-3000"),
]


@pytest.mark.parametrize("page", GOOGLE_EDGE_TIMES)
def test_a_google_import_carrying_a_time_outside_the_rule_is_a_422_and_writes_nothing(api, page):
    # Given a user; When a Google page carries a time the service cannot store, even one it would only skip
    user = Bounded(api)
    reply = user.post("/me/events/import", json_body=events_list_page(page))
    # Then the import is refused as invalid input, naming the field, and nothing is written
    body = problem(reply, 422, "invalid-input")
    assert "originalStartTime" in body["detail"] or "updated" in body["detail"]
    assert ok(user.get("/me/memory"))["version"] == 0


QUERY_EDGE_TIMES = [
    pytest.param("/me/memory", {"as_of": "0001-01-01T00:00:00+01:00"}, id="as-of-year-0-in-utc"),
    pytest.param("/me/memory", {"as_of": "9999-12-31T23:59:59-01:00"}, id="as-of-year-10000-in-utc"),
    pytest.param("/me/events", {"from": "0001-01-01T00:00:00+01:00"}, id="events-from-year-0-in-utc"),
    pytest.param("/me/events", {"from": "9999-12-31T00:00:00Z"}, id="events-from-year-9999"),
    pytest.param("/me/events", {"to": "0001-01-01T00:00:00Z"}, id="events-to-year-1"),
    pytest.param("/me/todos/due", {"on": "9999-12-31"}, id="todos-due-on-9999-12-31"),
    pytest.param("/me/todos/due", {"on": "0001-01-01"}, id="todos-due-on-0001-01-01"),
    pytest.param("/me/digest", {"day": "0001-01-01"}, id="digest-of-0001-01-01"),
]


@pytest.mark.parametrize(("path", "query"), QUERY_EDGE_TIMES)
def test_a_time_or_day_outside_the_rule_in_a_query_is_a_400_naming_it(api, path, query):
    # Given a user with an event and a to-do; When they ask with a time or day outside the rule
    user = Bounded(api)
    ok(user.post("/me/events", json_body={"summary": "x", "start": "2026-06-01T10:00:00Z"}))
    reply = user.get(path, query=query)
    # Then it is a 400 naming the parameter and the range (never a 5xx, nor an answer computed on it)
    body = problem(reply, 400, "bad-request")
    assert next(iter(query)) in body["detail"] and "1900" in body["detail"], body["detail"]


def test_an_attendees_email_never_comes_back_in_search_results_or_queries(api, nightly):
    # Given an imported event with attendees (their emails are sensitive fields)
    user = Bounded(api)
    ok(user.post("/me/events/import", json_body=events_list_page([TIMED])))
    # When the user searches for it, and reads the range it falls in and their digest
    found = ok(user.get("/me/memory/search", query={"q": "quarterly planning", "mode": "fts"}))
    week = ok(user.get("/me/events", query={"from": "2026-06-01T00:00:00Z", "to": "2026-06-08T00:00:00Z"}))
    summarized_again(user, nightly)
    digest = ok(user.get("/me/digest"))
    # Then the event is found, and no result carries an email
    assert [hit["path"] for hit in found["items"]] == ["/events/7bq3m2timed"]
    assert [o["id"] for o in week["items"]] == ["7bq3m2timed"]
    for answer in (found, week, digest):
        assert SENSITIVE_EMAIL not in json.dumps(answer)
        assert "email" not in {key for key, _ in walk_json(answer)}
    # And the event itself, read as the element it is, keeps them
    attendees = ok(user.get("/me/events/7bq3m2timed"))["element"]["attendees"]
    assert [a["email"] for a in attendees] == ["calendar-owner@example.com", SENSITIVE_EMAIL]


# -- property-based: every element route, the import, the recurrence rules ----------------------------

PROPERTIES = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

YEARS = ["0001", "1899", "1900", "1999", "2026", "2999", "3000", "9999"]
OFFSETS = ["Z", "+00:00", "+01:00", "-05:00", "+14:00", "-12:00", "+15:59", "-16:00", "+23:59", "+05:30:15.5", ""]

times = st.one_of(
    st.builds(lambda y, rest: f"{y}{rest}", st.sampled_from(YEARS), st.sampled_from(["-01-01", "-12-31", "-02-29"])),
    st.builds(
        lambda y, d, t, o: f"{y}-{d}T{t}{o}",
        st.sampled_from(YEARS),
        st.sampled_from(["01-01", "06-10", "12-31", "02-30"]),
        st.sampled_from(["00:00:00", "23:59:59", "09:00", "10:00:00.123", "10:00:00.1234567", "24:00:00"]),
        st.sampled_from(OFFSETS),
    ),
    st.sampled_from(["2026-W10-1T10:00:00Z", "20260101T100000Z", "tomorrow", "", "2026-06-10t09:00:00z"]),
    st.datetimes(min_value=datetime(1850, 1, 1), max_value=datetime(3100, 1, 1), timezones=st.just(UTC)).map(
        lambda d: d.isoformat()
    ),
    st.integers(-(2**40), 2**40),
    st.none(),
)
texts = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["Hostile event plan", "x" * 101, "x" * 501, "x" * 2001, "x" * 8001, HUGE]),
)
short_lists = st.one_of(st.lists(texts, max_size=3), st.just(["x"] * 60), st.just([HUGE]))
ids = st.one_of(st.none(), st.sampled_from(["a", "b-1", "x" * 129, "with space", "ü"]), st.text(max_size=10))

RULE_PARTS = [
    "FREQ=DAILY", "FREQ=WEEKLY", "FREQ=MONTHLY", "FREQ=YEARLY", "FREQ=SECONDLY", "FREQ=NOPE",
    "INTERVAL=0", "INTERVAL=1", "INTERVAL=2", "INTERVAL=-1", "INTERVAL=99999999999",
    "COUNT=3", "COUNT=0", "COUNT=5000", "COUNT=1000000", "UNTIL=20270101T000000Z", "UNTIL=20270101",
    "UNTIL=00010101T000000Z", "UNTIL=99991231T235959Z", "BYMONTH=2", "BYMONTH=13", "BYMONTHDAY=30",
    "BYMONTHDAY=-1", "BYMONTHDAY=0", "BYDAY=MO", "BYDAY=1MO,-1FR", "BYDAY=99MO", "BYSETPOS=40", "BYSETPOS=-1",
    "BYYEARDAY=366", "BYWEEKNO=53", "BYWEEKNO=1", "BYWEEKNO=60", "BYHOUR=25", "BYHOUR=0,12",
    "BYMINUTE=0,15,30,45", "BYSECOND=0,1,2,3,4,5,6,7,8,9", "BYEASTER=500", "WKST=SU", "X-NAME=1",
]  # fmt: skip
rule_lines = st.one_of(
    st.builds(
        lambda head, freq, parts: head + ";".join([freq, *parts]),
        st.sampled_from(["RRULE:", "RRULE:", "EXRULE:", "rrule:"]),
        st.sampled_from(["FREQ=DAILY", "FREQ=WEEKLY", "FREQ=MONTHLY", "FREQ=YEARLY", "FREQ=HOURLY"]),
        st.lists(st.sampled_from(RULE_PARTS), max_size=4),
    ),
    st.sampled_from(
        [
            "RDATE:20260110T090000Z",
            "RDATE:00010101T000000Z",
            "EXDATE:20260112T090000Z,20260119T090000Z",
            "EXDATE;TZID=Europe/Lisbon:20260112T090000",
            "EXDATE;TZID=Nowhere/Else:20260112T090000",
            "EXDATE;VALUE=DATE:20260112",
            "RDATE;VALUE=PERIOD:20260110T090000Z/PT1H",
            "EXDATE:" + ",".join(["20260112T090000Z"] * 1500),
            NEVER_ADVANCES,
            NEVER_MATCHES,
            "DTSTART:20260101T000000Z",
        ]
    ),
)
recurrences = st.lists(rule_lines, max_size=4) | st.just([NEVER_MATCHES] * 10) | st.just(["RRULE:FREQ=DAILY"] * 11)
zones = st.sampled_from(["", "Europe/Lisbon", "Pacific/Kiritimati", "Nowhere/Else", "UTC"])
# Mostly starts that validate, so that what comes after them (an end, the rules) is reached.
starts = st.one_of(st.sampled_from(["2026-01-05T09:00:00Z", "1900-01-01", "2999-12-31T23:00:00-01:00"]), times)


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with any subset of these fields."""
    return st.fixed_dictionaries({}, optional=fields)


ELEMENTS = {
    "todos": optional(
        id=ids, text=texts, due_date=times, tags=short_lists, notes=texts,
        status=st.sampled_from(["open", "done", "x"]), priority=st.sampled_from(["low", "high", "urgent"]),
        size=st.sampled_from(["small", None]),
        category=texts, goal_id=ids,
    ),
    "goals": optional(
        id=ids, title=texts, description=texts, target_date=times, category=texts, parent_id=ids,
        status=st.sampled_from(["active", "completed", "x"]),
        progress=st.lists(optional(at=times, note=texts, percent=st.integers(-5, 105)), max_size=3),
    ),
    "events": optional(
        id=ids, summary=texts, description=texts, start=starts, end=times, timezone=zones, location=texts,
        recurrence=recurrences, status=st.sampled_from(["confirmed", "cancelled", "x"]),
        attendees=st.lists(optional(name=texts, email=texts, response_status=texts), max_size=3),
    ),
}  # fmt: skip
REQUIRED = {"todos": {"text": "Hostile event plan"}, "goals": {"title": "Hostile event plan"},
            "events": {"summary": "Hostile event plan", "start": "2026-01-05T09:00:00Z"}}  # fmt: skip


def element_routes(user: Bounded, collection: str, fields: dict[str, Any], change: dict[str, Any]) -> None:
    """Create, read, update, complete and delete one element, each read back after it is written."""
    created = user.post(f"/me/{collection}", json_body={**REQUIRED[collection], **fields})
    if created.status != 200:
        assert created.status in (400, 409, 413, 422), created.text[:300]
        readable(user)
        return
    element_id = created.json["id"]
    path = f"/me/{collection}/{element_id}"
    assert ok(user.get(path))["element"] == created.json["element"]
    readable(user)
    updated = user.merge(path, change)
    assert updated.status in (200, 400, 409, 413, 415, 422), updated.text[:300]
    readable(user)
    assert user.post(f"{path}/complete").status in (200, 422)
    readable(user)
    assert ok(user.delete(path))["status"] == "written"


@pytest.mark.parametrize("collection", ["todos", "goals", "events"])
def test_every_element_route_answers_hostile_input_within_the_bound_and_keeps_the_user_readable(
    api, nightly, collection
):
    @PROPERTIES
    @given(fields=ELEMENTS[collection], change=ELEMENTS[collection])
    def property_(fields: dict[str, Any], change: dict[str, Any]) -> None:
        user = Bounded(api)
        element_routes(user, collection, fields, change)
        summarized_again(user, nightly)

    property_()


google_times = st.one_of(
    st.builds(lambda t: {"dateTime": t}, times),
    st.builds(lambda t: {"date": t}, times),
    st.builds(lambda t, z: {"dateTime": t, "timeZone": z}, times, zones),
    texts,
    st.none(),
)
google_events = st.builds(
    lambda base, extra: {**base, **extra},
    st.fixed_dictionaries({"id": st.sampled_from(["s1", "s2", "s1_20260112T090000Z", "x" * 300])}),
    optional(
        status=st.sampled_from(["confirmed", "cancelled", "tentative"]),
        summary=texts,
        description=texts,
        updated=times,
        start=google_times,
        end=google_times,
        recurrence=recurrences,
        recurringEventId=st.sampled_from(["s1", "s2", "nope"]),
        originalStartTime=google_times,
        attendees=st.lists(optional(email=texts, displayName=texts, responseStatus=texts), max_size=3),
    ),
)


@PROPERTIES
@given(page=st.lists(google_events, min_size=1, max_size=5), shuffle=st.randoms(use_true_random=False))
def test_a_google_import_of_hostile_pages_answers_within_the_bound_in_any_order(api, nightly, page, shuffle):
    # Given a hostile page and the same page in another order, each imported by a new user
    first, second = Bounded(api), Bounded(api)
    shuffled = list(page)
    shuffle.shuffle(shuffled)
    replies = [first.post("/me/events/import", json_body={"items": page}),
               second.post("/me/events/import", json_body={"items": shuffled})]  # fmt: skip
    # Then both answer alike (never a 5xx, within the bound), and store the same events
    assert replies[0].status == replies[1].status, (replies[0].text[:300], replies[1].text[:300])
    documents = [readable(first), readable(second)]
    assert documents[0].get("events") == documents[1].get("events")
    if replies[0].status == 200:
        counts = [{k: r.json[k] for k in ("created", "updated", "unchanged", "deleted")} for r in replies]
        assert counts[0] == counts[1]
    summarized_again(first, nightly)


@PROPERTIES
@given(recurrence=recurrences, start=starts, zone=zones)
def test_hostile_recurrence_rules_are_refused_or_expanded_within_the_bound(
    api, nightly, store, recurrence, start, zone
):
    # Given a hostile recurrence through the API, and the same stored as it is (written before any check)
    user, seeded = Bounded(api), Bounded(api)
    event = {"summary": "Hostile event plan", "start": start, "timezone": zone, "recurrence": recurrence}
    reply = user.post("/me/events", json_body=event)
    assert reply.status in (200, 400, 413, 422), reply.text[:300]
    store.append(seeded.user, {"events": {"e": {**event, "id": "e"}}}, expected_version=0, source="seed")
    # Then both users read back, and their nightly runs fail nothing
    for who in (user, seeded):
        readable(who)
        ok(who.get("/me/events", query={"from": "2026-01-01T00:00:00Z", "to": "2026-12-31T00:00:00Z"}))
    summarized_again(user, nightly)
    assert nightly.run(seeded.user) == {"batchItemFailures": []}

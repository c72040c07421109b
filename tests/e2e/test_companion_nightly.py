"""The companion layer's nightly part end to end: the real fan-out and worker handlers over moto's SQS
and the session's PostgreSQL, with DOCUMENT_SCHEMA=companion.

The database is shared with the rest of the session, so the fan-out lists other tests' users too:
each test takes from the queue only the messages that name its own users (one user a message)
and hands those to the worker, and checks only its own rows, never totals. The nightly clock
(`companion_tasks.datetime`) is frozen at NOW so the digest's day and windows are exact.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.adapters.companion import PostgresCompanion
from user_memory.config import ApiSettings
from user_memory.domain.companion.elements import Rating, complete
from user_memory.domain.companion.items import document_items
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.patching import copy_json
from user_memory.domain.model import Activity
from user_memory.domain.ports import SummaryResult
from user_memory.http.app import create_api
from user_memory.jobs import companion as companion_tasks
from user_memory.runtime import build_api

from tests.api_client import ApiClient
from tests.conftest import EVENTS
from tests.e2e import helpers
from tests.e2e.helpers import naming
from tests.fake_embeddings import hash_embedding

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]

# The nightly run's clock: a Wednesday, 13:00 in the user's Lisbon (UTC+1 in May).
NOW = datetime(2031, 5, 14, 0, 15, tzinfo=UTC)  # the schedule's time (Lisbon: 01:15, the day ahead is today)
# The schedule fires just after midnight UTC: window 2031-05-13, run key daily:2031-05-13.
SCHEDULED = {**json.loads((EVENTS / "scheduled_event.json").read_text()), "time": "2031-05-14T00:15:00Z"}
RUN_KEY = "daily:2031-05-13"
RATED_AT = datetime(2031, 5, 13, 9, 0, tzinfo=UTC)
POSITIVE = "Loved the morning check-in"
NEGATIVE = "The reminder came far too late"
SUGGESTION = "You should send the plan the evening before"
DATE_OF_BIRTH = "1987-04-23"
EMAIL = "owner.private@example.org"
PHONE = "+351 912 345 678"


class FrozenClock(datetime):
    """`datetime` whose now() is NOW (the nightly run reads the time through it)."""

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        return NOW if tz is None else NOW.astimezone(tz)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(companion_tasks, "datetime", FrozenClock)


class Stack(helpers.Stack):
    """The jobs' stack with a companion-schema worker."""

    def versions(self, user: uuid.UUID) -> list[tuple[int, str]]:
        return [(h.version, h.source) for h in reversed(self.store.history(user))]


@pytest.fixture
def stack(database_url, pool, sqs):
    return Stack(database_url, pool, sqs, document_schema="companion")


def fail_first_marking(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker's first marking of ratings dies (the connection lost after the feedback version
    was committed); the versions each marking was asked for, in order."""
    real_mark = stack.worker_services.companion.mark_ratings
    calls: list[int] = []

    def mark_once_failing(user_id: uuid.UUID, ids: list[int], version: int) -> int:
        calls.append(version)
        if len(calls) == 1:
            raise ConnectionError("server closed the connection unexpectedly")
        return real_mark(user_id, ids, version)

    monkeypatch.setattr(stack.worker_services.companion, "mark_ratings", mark_once_failing)
    return calls


def companion_memory(**basic_info: Any) -> dict[str, Any]:
    """To-dos overdue, due today, due next month and done; a twice-weekly event and a one-off far
    away; a goal 10 days from its target and one 60 days from it."""
    return validate_document(
        {
            "basic_info": {"timezone": "Europe/Lisbon", **basic_info},
            "todos": {
                "insurance": {"id": "insurance", "text": "Renew the car insurance", "due_date": "2031-05-10"},
                "pharmacy": {
                    "id": "pharmacy",
                    "text": "Pick up the prescription",
                    "due_date": "2031-05-14T18:00:00+01:00",
                },
                "boiler": {"id": "boiler", "text": "Service the boiler", "due_date": "2031-06-20"},
                "tax": {"id": "tax", "text": "File the tax return", "status": "done", "due_date": "2031-05-01"},
            },
            "events": {
                "yoga": {
                    "id": "yoga",
                    "summary": "Yoga class",
                    "start": "2031-05-05T09:00:00Z",
                    "end": "2031-05-05T10:00:00Z",
                    "location": "Riverside studio",
                    "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO,TH"],
                },
                "wedding": {"id": "wedding", "summary": "Cousin's wedding", "start": "2031-07-05"},
            },
            "goals": {
                "savings": {"id": "savings", "title": "Save for the summer trip", "target_date": "2031-05-24"},
                "language": {"id": "language", "title": "Hold a conversation in Italian", "target_date": "2031-07-13"},
            },
        },
        "companion",
    )


def rate(companion: PostgresCompanion, user: uuid.UUID) -> None:
    for n, (stars, comment) in enumerate([(5, POSITIVE), (1, NEGATIVE), (3, SUGGESTION)]):
        rating = Rating(
            interaction_id=f"chat-{n}", rating=stars, comment=comment, rated_at=RATED_AT + timedelta(minutes=n)
        )
        assert companion.record_rating(user, rating) == "created"


def seed_companion_user(stack: Stack, **basic_info: Any) -> uuid.UUID:
    """A user with the companion memory (version 1) and three unsummarized ratings, and no activity."""
    user = uuid.uuid4()
    stack.store.append(user, companion_memory(**basic_info), expected_version=0, source="seed")
    rate(stack.companion, user)
    return user


def quiet_user(stack: Stack) -> uuid.UUID:
    """A user with nothing open: a done to-do, a completed goal, a past one-off event; no ratings, no activity."""
    user = uuid.uuid4()
    doc = validate_document(
        {
            "todos": {"tax": {"id": "tax", "text": "File the tax return", "status": "done"}},
            "goals": {"run": {"id": "run", "title": "Run a 10k", "status": "completed"}},
            "events": {"party": {"id": "party", "summary": "Party", "start": "2031-01-01T20:00:00Z"}},
        },
        "companion",
    )
    stack.store.append(user, doc, expected_version=0, source="seed")
    return user


def summarized_versions(pool: Any, user: uuid.UUID) -> list[int | None]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT summarized_version FROM feedback_ratings WHERE user_id = %s ORDER BY id", (user,)
        ).fetchall()
    return [r[0] for r in rows]


def digest_rows(pool: Any, user: uuid.UUID) -> list[tuple[Any, int]]:
    with pool.connection() as conn:
        return [tuple(r) for r in conn.execute("SELECT day, version FROM daily_digests WHERE user_id = %s", (user,))]


EXPECTED_FEEDBACK = {
    "positives": [POSITIVE],
    "negatives": [NEGATIVE],
    "suggestions": [SUGGESTION],
    "ratings_count": 3,
    "average_rating": 3.0,
    "last_summarized_at": "2031-05-14T00:15:00Z",
}


def expected_digest(version: int, *, overdue: bool = True) -> dict[str, Any]:
    yoga = {"id": "yoga", "summary": "Yoga class", "location": "Riverside studio"}
    return {
        "day": "2031-05-14",
        "timezone": "Europe/Lisbon",
        "version": version,
        "generated_at": "2031-05-14T00:15:00+00:00",
        "todos_overdue": (
            [{"id": "insurance", "text": "Renew the car insurance", "due_date": "2031-05-10"}] if overdue else []
        ),
        "todos_due_today": [
            {"id": "pharmacy", "text": "Pick up the prescription", "due_date": "2031-05-14T18:00:00+01:00"}
        ],
        "events_next_7_days": [
            {**yoga, "start": "2031-05-15T09:00:00+00:00", "end": "2031-05-15T10:00:00+00:00"},
            {**yoga, "start": "2031-05-19T09:00:00+00:00", "end": "2031-05-19T10:00:00+00:00"},
        ],
        "events_left_out": 0,
        "events_not_expanded": [],
        "goals_near_target": [{"id": "savings", "title": "Save for the summer trip", "target_date": "2031-05-24"}],
    }


# -- who the fan-out lists ---------------------------------------------------------------------------------------


def test_a_user_with_open_items_and_ratings_but_no_activity_is_listed_and_one_with_nothing_is_not(stack):
    # Given a companion user with open to-dos, events, goals and ratings but no activity, and a user with nothing open
    busy = seed_companion_user(stack)
    quiet = quiet_user(stack)
    # When the scheduled fan-out runs
    bodies = stack.fanned_out(SCHEDULED)
    # Then exactly one message names the busy user, for the scheduled day's run, and none the quiet one
    [body] = naming(bodies, busy)
    assert (body["type"], body["user_ids"], body["run_key"]) == ("refresh_user", [str(busy)], RUN_KEY)
    assert body["window"] == {"start": "2031-05-13T00:15:00+00:00", "end": "2031-05-14T00:15:00+00:00"}
    assert naming(bodies, quiet) == []


@pytest.mark.parametrize("only", ["ratings", "todo", "goal", "recurring event"])
def test_each_reason_alone_lists_the_user(stack, only):
    # Given a user with just one thing to look at tonight
    user = uuid.uuid4()
    elements = {
        "todo": {"todos": {"t": {"id": "t", "text": "Water the plants"}}},
        "goal": {"goals": {"g": {"id": "g", "title": "Sleep eight hours"}}},
        "recurring event": {
            "events": {
                "e": {
                    "id": "e",
                    "summary": "Choir",
                    "start": "2030-01-07T19:00:00Z",
                    "recurrence": ["RRULE:FREQ=WEEKLY"],
                }
            }
        },
        "ratings": {},
    }[only]
    stack.store.append(user, validate_document(elements, "companion"), expected_version=0, source="seed")
    if only == "ratings":
        stack.companion.record_rating(user, Rating(interaction_id="c", rating=4, comment="ok", rated_at=RATED_AT))
    # When the scheduled fan-out runs, Then it names the user once
    assert len(naming(stack.fanned_out(SCHEDULED), user)) == 1


# -- the nightly run -----------------------------------------------------------------------------------------------


def test_the_nightly_run_folds_the_ratings_into_feedback_and_makes_the_digest(stack, pool, logs):
    # Given a companion user with open items and three ratings, and no activity
    user = seed_companion_user(stack)
    # When the scheduled fan-out runs and the worker takes the user's message
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then one version folds the ratings into feedback, under source daily:feedback (no summary version: no activity)
    assert stack.versions(user) == [(1, "seed"), (2, "daily:feedback")]
    head = stack.store.head(user)
    assert head.document["feedback"] == EXPECTED_FEEDBACK
    assert head.document["todos"] == companion_memory()["todos"]
    # And the ratings are marked as summarized by it
    assert summarized_versions(pool, user) == [2, 2, 2]
    # And the day's digest lists exactly the overdue and due-today to-dos, the event's next 7 days, the near goal
    assert stack.companion.digest(user) == expected_digest(2)
    assert digest_rows(pool, user) == [(datetime(2031, 5, 14).date(), 2)]
    # And the batch line counts them
    [done] = logs.named("batch done")
    assert (done["ratings_summarized"], done["digests"], done["failed"]) == (3, 1, 0)


def test_the_digest_is_served_by_the_api(stack, pool):
    # Given a user whose nightly run made the digest
    user = seed_companion_user(stack)
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "companion"})
    client = ApiClient(create_api(build_api(settings, pool=pool), settings), user)
    # When the user asks for it, latest and by day
    latest = client.get("/me/digest")
    by_day = client.get("/me/digest", query={"day": "2031-05-14"})
    # Then both are the stored digest; another day is a 404, and another user sees none
    assert latest.status == 200, latest.text
    assert latest.json == {"user_id": str(user), "digest": expected_digest(2)}
    assert by_day.status == 200 and by_day.json == latest.json
    assert client.get("/me/digest", query={"day": "2031-05-13"}).status == 404
    assert client.as_user(uuid.uuid4()).get("/me/digest").status == 404


def test_a_second_night_writes_no_version_and_replaces_the_digest(stack, pool):
    # Given a user whose nightly run is done, and who then completes the overdue to-do (version 3)
    user = seed_companion_user(stack)
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    head = stack.store.head(user)
    stack.store.append(
        user, complete("todos", "insurance", NOW)(head.document), expected_version=2, source="api: complete"
    )
    # When the nightly run comes again (the message redelivered)
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then no version is written, the ratings keep their version, and the day has one digest, the new one
    assert stack.versions(user) == [(1, "seed"), (2, "daily:feedback"), (3, "api: complete")]
    assert stack.store.head(user).document["feedback"] == EXPECTED_FEEDBACK
    assert summarized_versions(pool, user) == [2, 2, 2]
    assert digest_rows(pool, user) == [(datetime(2031, 5, 14).date(), 3)]
    assert stack.companion.digest(user) == expected_digest(3, overdue=False)


def test_a_crash_between_the_feedback_version_and_marking_the_ratings_is_retried_without_a_second_version(
    stack, pool, logs, monkeypatch
):
    # Given a worker whose first marking of the ratings dies (after the feedback version is committed)
    user = seed_companion_user(stack)
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    calls = fail_first_marking(stack, monkeypatch)
    # When the worker runs the message
    assert stack.deliver(body) == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    # Then the version is there, the ratings are not marked, and the failure is logged with the user
    assert stack.versions(user) == [(1, "seed"), (2, "daily:feedback")]
    assert summarized_versions(pool, user) == [None, None, None]
    [failed] = logs.named("companion nightly failed")
    assert (failed["user_id"], failed["run_key"], failed["error"]) == (str(user), RUN_KEY, "ConnectionError")
    assert stack.companion.digest(user) is None
    # When SQS delivers the message again
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then the ratings are marked with the version already written, and no second version is made
    assert calls == [2, 2]
    assert stack.versions(user) == [(1, "seed"), (2, "daily:feedback")]
    assert summarized_versions(pool, user) == [2, 2, 2]
    assert stack.store.head(user).document["feedback"]["ratings_count"] == 3
    assert stack.companion.digest(user) == expected_digest(2)


def test_a_rating_recorded_between_the_crash_and_the_retry_does_not_count_the_batch_twice(stack, pool, monkeypatch):
    # Given a nightly run whose marking of the three ratings died after the feedback version was written
    user = seed_companion_user(stack)
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    fail_first_marking(stack, monkeypatch)
    assert stack.deliver(body) == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    # And the user rates once more before SQS delivers the message again
    late = Rating(interaction_id="chat-late", rating=5, tags=("fast",), rated_at=NOW)
    assert stack.companion.record_rating(user, late) == "created"
    # When the message is retried
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then the feedback counts four ratings, each once (not the first three twice: 7 ratings, average 3.29)
    feedback = stack.store.head(user).document["feedback"]
    assert (feedback["ratings_count"], feedback["average_rating"]) == (4, 3.5)
    assert feedback["positives"] == [POSITIVE, "fast"]
    head = stack.store.head(user).version
    assert summarized_versions(pool, user) == [2, 2, 2, head]


class MoodSummarizer:
    """A companion-schema summarizer (the rule-based one knows user_state only): the day's activity
    sets the current mood."""

    name = "mood"

    def __init__(self, fail_with: str | None = None) -> None:
        self.fail_with = fail_with
        self.calls = 0

    def summarize(self, document, activities, *, feedback=None, timeout=None) -> SummaryResult:
        self.calls += 1
        if self.fail_with is not None:
            raise ValueError(self.fail_with)
        doc = copy_json(document)
        doc.setdefault("current_state", {})["mood"] = f"{len(activities)} check-ins"
        return SummaryResult(document=doc, model="mood")


def record_activity(stack: Stack, user: uuid.UUID, kind: str, payload: dict[str, Any], at: datetime, key: str) -> None:
    """One activity of the user from the app (`key`: its external id after the user's)."""
    stack.worker_services.activity.record(
        [Activity(user_id=user, occurred_at=at, kind=kind, payload=payload, source="app", external_id=f"{user}:{key}")]
    )


def record_session(stack: Stack, user: uuid.UUID) -> None:
    record_activity(stack, user, "session", {"note": "checked in"}, datetime(2031, 5, 13, 8, 0, tzinfo=UTC), "s")


def test_the_nightly_run_summarizes_the_days_activity_first_then_the_feedback(stack, pool):
    # Given a companion user with ratings and activity on the scheduled day, and a companion summarizer
    user = seed_companion_user(stack)
    record_session(stack, user)
    stack.worker_services.summarizer = MoodSummarizer()
    # When the scheduled fan-out runs and the worker takes the user's message
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then the day's summary comes first, then the feedback version on top of it
    versions = stack.versions(user)
    assert [v for v, _ in versions] == [1, 2, 3]
    assert versions[1][1].startswith("daily summary 2031-05-13, 1 activities, model mood")
    assert versions[2][1] == "daily:feedback"
    head = stack.store.head(user)
    assert (head.document["current_state"]["mood"], head.document["feedback"]) == ("1 check-ins", EXPECTED_FEEDBACK)
    assert summarized_versions(pool, user) == [3, 3, 3]
    assert stack.companion.digest(user) == expected_digest(3)


def test_with_the_rule_based_summarizer_a_done_to_do_leaves_the_digest(stack, pool):
    # Given a companion user with ratings, whose day's activity marks the overdue to-do done
    user = seed_companion_user(stack)
    record_activity(stack, user, "todo_done", {"id": "insurance"}, datetime(2031, 5, 13, 19, 0, tzinfo=UTC), "done")
    # When the scheduled fan-out runs and the (rule-based, companion) worker takes the user's message
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then the summary completes the to-do, the feedback version follows, and the digest no longer lists it
    versions = stack.versions(user)
    assert [v for v, _ in versions] == [1, 2, 3] and versions[2][1] == "daily:feedback"
    assert versions[1][1].startswith("daily summary 2031-05-13, 1 activities, model rules")
    head = stack.store.head(user)
    assert head.document["todos"]["insurance"]["status"] == "done"
    assert head.document["feedback"] == EXPECTED_FEEDBACK
    assert summarized_versions(pool, user) == [3, 3, 3]
    assert stack.companion.digest(user) == expected_digest(3, overdue=False)


def test_a_user_whose_summary_fails_gets_no_feedback_or_digest_until_the_retry(stack, pool, logs):
    # Given a companion user with ratings and activity, and a summarizer that fails
    user = seed_companion_user(stack)
    record_session(stack, user)
    stack.worker_services.summarizer = MoodSummarizer(fail_with="model down")
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    # When the worker takes the user's message
    assert stack.deliver(body) == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    # Then nothing is written: the nightly part waits for the summary
    assert stack.versions(user) == [(1, "seed")]
    assert summarized_versions(pool, user) == [None, None, None]
    assert stack.companion.digest(user) is None
    [failed] = logs.named("user refresh failed")
    assert (failed["user_id"], failed["error"]) == (str(user), "ValueError")
    # When SQS delivers it again and the summarizer works
    stack.worker_services.summarizer = MoodSummarizer()
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then the summary, the feedback and the digest are all made
    assert [s for _, s in stack.versions(user)][2:] == ["daily:feedback"]
    assert summarized_versions(pool, user) == [3, 3, 3]
    assert stack.companion.digest(user) == expected_digest(3)


# -- embeddings after the night ------------------------------------------------------------------------------------


class CountingEmbedder:
    """An embedder that records every call (vectors from the test endpoint's hashing embedder)."""

    model = "test-embedding"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail:
            raise TimeoutError("the embeddings endpoint timed out")
        return [hash_embedding(t) for t in texts]


def embedded_count(pool: Any, user: uuid.UUID) -> int:
    with pool.connection() as conn:
        return int(conn.execute("SELECT count(*) FROM memory_embeddings WHERE user_id = %s", (user,)).fetchone()[0])


def test_the_nights_new_texts_are_embedded_once(stack, pool):
    # Given a user whose memory's texts are already embedded, and a worker with an embedder
    user = seed_companion_user(stack)
    embedder = CountingEmbedder()
    stack.worker_services.search.embedder = embedder
    assert stack.worker_services.search.embed_pending(user).inputs == len(
        {i.text for i in document_items(companion_memory()).values()}
    )
    embedder.calls.clear()
    # When the nightly run writes the feedback version
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then exactly the feedback's new texts are embedded, in one call
    assert [sorted(c) for c in embedder.calls] == [
        sorted([f"positives: {POSITIVE}", f"negatives: {NEGATIVE}", f"suggestions: {SUGGESTION}"])
    ]
    total = len({i.text for i in document_items(stack.store.head(user).document).values()})
    assert embedded_count(pool, user) == total
    # And the message redelivered embeds nothing again
    assert stack.deliver(body) == {"batchItemFailures": []}
    assert len(embedder.calls) == 1


def test_an_embedder_that_fails_leaves_the_users_run_successful_and_is_logged(stack, pool, logs):
    # Given a worker whose embeddings endpoint fails
    user = seed_companion_user(stack)
    embedder = CountingEmbedder(fail=True)
    stack.worker_services.search.embedder = embedder
    # When the nightly run takes the user
    [body] = naming(stack.fanned_out(SCHEDULED), user)
    result = stack.deliver(body)
    # Then the record succeeds: the feedback version, the marked ratings and the digest are all there
    assert result == {"batchItemFailures": []}
    assert len(embedder.calls) == 1
    assert stack.versions(user) == [(1, "seed"), (2, "daily:feedback")]
    assert summarized_versions(pool, user) == [2, 2, 2]
    assert stack.companion.digest(user) == expected_digest(2)
    assert embedded_count(pool, user) == 0
    # And the failure is logged with the user and the error type, never failing the user
    [failed] = logs.named("embedding failed")
    assert (failed["user_id"], failed["error"]) == (str(user), "TimeoutError")
    assert not logs.named("companion nightly failed") and not logs.named("record failed")


# -- sensitive data ------------------------------------------------------------------------------------------------


def test_the_nightly_run_logs_no_date_of_birth_email_or_phone(stack, pool, logs, caplog, capfd, monkeypatch):
    # Given a user whose basic_info holds a date of birth, an email and a phone, with ratings and activity,
    # a summarizer whose failure quotes them, a marking that fails once quoting them, and debug logging
    caplog.set_level(logging.DEBUG, logger="user-memory")
    emitted = io.StringIO()  # what the service's JSON log handler writes (its stream was bound at import)
    for handler in logging.getLogger("user-memory").handlers:
        if isinstance(handler, logging.StreamHandler):
            monkeypatch.setattr(handler, "stream", emitted)
    user = seed_companion_user(stack, date_of_birth=DATE_OF_BIRTH, email=EMAIL, phone=PHONE)
    other = seed_companion_user(stack, date_of_birth=DATE_OF_BIRTH, email=EMAIL, phone=PHONE)
    record_session(stack, other)
    stack.worker_services.summarizer = MoodSummarizer(fail_with=f"cannot summarize {DATE_OF_BIRTH} {EMAIL} {PHONE}")
    real_mark = stack.worker_services.companion.mark_ratings
    failed_once: list[bool] = []

    def mark(user_id: uuid.UUID, ids: list[int], version: int) -> int:
        if not failed_once:
            failed_once.append(True)
            raise RuntimeError(f"constraint failed for {EMAIL} {PHONE} {DATE_OF_BIRTH}")
        return real_mark(user_id, ids, version)

    monkeypatch.setattr(stack.worker_services.companion, "mark_ratings", mark)
    stack.worker_services.search.embedder = CountingEmbedder(fail=True)
    # When the whole nightly run goes: the fan-out, the worker (a failing record, a failing user), the retry
    bodies = stack.fanned_out(SCHEDULED)
    mine = naming(bodies, user) + naming(bodies, other)
    assert len(mine) == 2
    first = stack.deliver(*mine)
    stack.worker_services.summarizer = MoodSummarizer()
    second = stack.deliver(*mine)
    # Then the run did fail, and then succeeded, so the failure paths were logged
    assert len(first["batchItemFailures"]) == 2 and second == {"batchItemFailures": []}
    assert logs.named("companion nightly failed") and logs.named("user refresh failed")
    assert logs.named("record failed") and logs.named("embedding failed")
    assert stack.store.head(user).document["basic_info"]["email"] == EMAIL
    # And no log line, record attribute, stdout or stderr holds any of the three values
    out, err = capfd.readouterr()
    lines = [json.loads(line) for line in emitted.getvalue().splitlines()]
    assert {"fan-out done", "companion nightly failed", "user refreshed", "batch done"} <= {
        line["message"] for line in lines
    }
    assert "user refreshed" in caplog.text
    texts = [emitted.getvalue(), out, err, caplog.text] + [r.getMessage() + repr(r.__dict__) for r in logs.records]
    for value in (DATE_OF_BIRTH, EMAIL, PHONE):
        assert all(value not in t for t in texts), value
    assert len(logs.records) >= 6

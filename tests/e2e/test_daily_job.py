"""The daily job end to end: real handlers, real JSON events, real PostgreSQL, moto's SQS.

The handlers are imported like any module and given their services (`services=`), composed
here from the session's pool; nothing reaches into their module globals.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool
from user_memory.config import FanoutSettings, WorkerSettings
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import RunStatus, Window
from user_memory.domain.summary.pipeline import refresh_user
from user_memory.domain.summary.rules import RuleBasedSummarizer
from user_memory.errors import SendFailed, StorageUnavailable
from user_memory.observability import metrics
from user_memory.runtime import build_fanout, build_worker
from user_memory_functions.fanout.app import handler as fanout_handler
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext

from tests.api_client import ApiClient
from tests.conftest import EVENTS
from tests.e2e.helpers import MAX_RECEIVES, emitted_metrics, refresh_body, seed_users, sqs_event, worker_services
from tests.fake_openai import fake_openai_server

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]


def versions_for(conn: psycopg.Connection, run_key: str) -> int:
    row = conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,)).fetchone()
    return int(row[0])


def test_scheduled_fanout_then_worker_writes_one_version_per_active_user(stack, pool):
    # Given 12 users active on the scheduled day
    event = json.loads((EVENTS / "scheduled_event.json").read_text())
    day = datetime(2026, 11, 21, 0, 15, tzinfo=UTC)
    users = seed_users(pool, 12, day, f"sched-{uuid.uuid4()}")
    # When the fan-out runs on the real scheduled event and the queue is drained through the worker
    result = stack.fanout(event)
    assert result["run_key"] == "daily:2026-11-21" and result["users"] >= 12
    report = stack.poller().drain()
    # Then each has one version with the day's summary
    assert report.to_dlq == 0
    for u in users:
        head = stack.store.head(u)
        assert head.version == 1 and "planner" in head.document["parts"]
        assert head.source.startswith("daily summary 2026-11-21, 3 activities, model rules")


def test_worker_event_from_file_reports_exactly_the_bad_records(stack, logs):
    event = json.loads((EVENTS / "worker_batch.json").read_text())
    result = stack.worker(event)
    assert result == {
        "batchItemFailures": [
            {"itemIdentifier": "33333333-3333-3333-3333-333333333333"},
            {"itemIdentifier": "44444444-4444-4444-4444-444444444444"},
        ]
    }
    head = stack.store.head("0b7e6a2c-52a4-4c55-9d4e-3f0c1f6f0a01")
    assert head.document["parts"]["planner"]["goals"] == [{"goal": "keep a weekly plan"}]
    failed = {r["message_id"]: r for r in logs.named("record failed")}
    assert set(failed) == {"33333333-3333-3333-3333-333333333333", "44444444-4444-4444-4444-444444444444"}
    assert all(r["error"] == "InvalidMessage" and r["reason"] for r in failed.values())


def test_poison_message_reaches_dlq_after_max_receives_while_batch_mates_succeed(stack, pool, conn):
    day = datetime(2030, 2, 1, tzinfo=UTC)
    users = seed_users(pool, 4, day, f"poison-{uuid.uuid4()}")
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody='{"type": "refresh_user", "user_ids": "oops"}')
    for u in users:
        stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=refresh_body([u], day, "daily:2030-02-01"))
    report = stack.poller().drain()
    assert report.to_dlq == 1 and report.failed_attempts == MAX_RECEIVES
    dlq = stack.sqs.receive_message(QueueUrl=stack.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dlq] == ['{"type": "refresh_user", "user_ids": "oops"}']
    assert versions_for(conn, "daily:2030-02-01") == 4


class CrashingOnce(MemoryStore):
    """A store whose first append dies (the process crashing between the LLM call and the commit)."""

    crashed = False

    def append(self, *a: Any, **k: Any):
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("process died before commit")
        return super().append(*a, **k)


def test_crash_after_llm_before_commit_is_retried_into_exactly_one_version(stack, pool):
    day = datetime(2030, 3, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"crash-{uuid.uuid4()}")
    calls = []

    class Counting(RuleBasedSummarizer):
        def summarize(self, *a, **k):
            calls.append(1)
            return super().summarize(*a, **k)

    stack.worker_services.summarizer = Counting()
    stack.worker_services.store = CrashingOnce(PostgresRecorder(pool))
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=refresh_body([user], day, "daily:2030-03-01"))
    report = stack.poller().drain()
    assert report.failed_attempts == 1 and report.to_dlq == 0
    assert len(calls) == 2
    assert [h.version for h in stack.store.history(user)] == [1]


def test_two_workers_on_the_same_user_and_run_key_write_one_version(pool):
    day = datetime(2030, 4, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"twins-{uuid.uuid4()}")
    barrier = threading.Barrier(2)

    class Slow(RuleBasedSummarizer):
        def summarize(self, *a, **k):
            barrier.wait(timeout=10)  # both have passed the run-key check before either writes
            return super().summarize(*a, **k)

    outcomes = []

    def work() -> None:
        outcomes.append(
            refresh_user(
                user,
                Window.day(day.date()),
                "daily:2030-04-01",
                store=MemoryStore(PostgresRecorder(pool)),
                activity=PostgresActivity(pool),
                summarizer=Slow(),
                cfg=WorkerSettings().pipeline(),
            )
        )

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o.status for o in outcomes) == [RunStatus.ALREADY_DONE, RunStatus.WRITTEN]
    assert [h.version for h in MemoryStore(PostgresRecorder(pool)).history(user)] == [1]


def test_one_users_failure_does_not_block_the_others_and_only_it_is_retried(stack, pool, conn, logs):
    # Given a message for three users, the second of whom the summarizer fails on
    day = datetime(2030, 8, 1, tzinfo=UTC)
    users = seed_users(pool, 3, day, f"multi-{uuid.uuid4()}")
    summarized: list[uuid.UUID] = []

    class FailsForOne(RuleBasedSummarizer):
        def summarize(self, document, activities, **k):
            summarized.append(activities[0].user_id)
            if activities[0].user_id == users[1]:
                raise StorageUnavailable("simulated outage for one user")
            return super().summarize(document, activities, **k)

    stack.worker_services.summarizer = FailsForOne()
    event = sqs_event(refresh_body(users, day, "daily:2030-08-01"))
    # When the worker processes it
    assert stack.worker(event) == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    # Then the other two are written, the failure is logged with the user and the message
    assert versions_for(conn, "daily:2030-08-01") == 2
    [failed_user] = logs.named("user refresh failed")
    assert (failed_user["user_id"], failed_user["message_id"], failed_user["error"]) == (
        str(users[1]),
        "m0",
        "StorageUnavailable",
    )
    # And on redelivery only the failed user is summarized again
    summarized.clear()
    stack.worker_services.summarizer = RuleBasedSummarizer()
    assert stack.worker(event) == {"batchItemFailures": []}
    assert versions_for(conn, "daily:2030-08-01") == 3


def test_a_summary_that_drops_every_part_is_written_with_the_parts_restored_and_counted(stack, pool, conn, logs):
    # Given a user with 5 parts and safety notes, a day that names the planner and sets its goal,
    # and a summarizer whose every answer drops all the parts and clears the notes
    day = datetime(2030, 6, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"guard-{uuid.uuid4()}")
    parts = {f"p{i}": {"name": f"P{i}", "status": "active", "goals": []} for i in range(5)}
    stack.store.append(user, {"parts": parts, "safety_notes": "careful"}, expected_version=0, source="seed")
    calls = []

    class Forgetful(RuleBasedSummarizer):
        def summarize(self, document, activities, **k):
            calls.append(k.get("feedback"))
            result = super().summarize(document, activities, **k)
            return type(result)(document={**result.document, "parts": {}, "safety_notes": ""}, model=result.model)

    stack.worker_services.summarizer = Forgetful()
    # When the worker runs the day's message
    assert stack.worker(sqs_event(refresh_body([user], day, "daily:2030-06-01"))) == {"batchItemFailures": []}
    # Then the version is written, not refused: the parts and notes restored, the day's part and goal
    # (which the summarizer was asked for once more, then left out again) filled in
    head = stack.store.head(user)
    assert head.version == 2 and sorted(head.document["parts"]) == ["p0", "p1", "p2", "p3", "p4", "planner"]
    assert head.document["safety_notes"] == "careful"
    assert head.document["parts"]["planner"]["goals"] == [{"goal": "plan"}]
    assert len(calls) == 2 and calls[0] is None and "part_named" in calls[1] and "goal_set" in calls[1]
    # And the version's provenance in PostgreSQL says so, and the batch line counts it
    provenance = conn.execute(
        "SELECT provenance FROM user_memory_snapshots WHERE user_id = %s AND version = 2", (user,)
    ).fetchone()[0]
    assert [r["path"] for r in provenance["restored"]] == [f"/parts/p{i}" for i in range(5)] + ["/safety_notes"]
    assert [f["kind"] for f in provenance["filled"]] == ["part_named", "goal_set"]
    [done] = logs.named("batch done")
    assert (done["facts_restored"], done["facts_filled"]) == (6, 2) and not logs.named("record failed")


def test_worker_stops_taking_records_near_the_deadline(stack, pool, conn, logs):
    day = datetime(2030, 7, 1, tzinfo=UTC)
    users = seed_users(pool, 2, day, f"deadline-{uuid.uuid4()}")
    event = sqs_event(*(refresh_body([u], day, "daily:2030-07-01") for u in users))
    almost_out = FakeLambdaContext(timeout_seconds=5)  # below the 15 s margin
    assert stack.worker(event, almost_out) == {
        "batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m1"}]
    }
    assert versions_for(conn, "daily:2030-07-01") == 0
    assert [r["error"] for r in logs.named("record failed")] == ["DeadlineReached", "DeadlineReached"]


@pytest.mark.parametrize("failure", ["connection refused", "http 500", "hang"])
def test_every_llm_failure_is_logged_with_the_message_id_and_counted(
    database_url, pool, failure, logs, capsys, monkeypatch
):
    # Given a worker whose OpenAI endpoint refuses, answers 500, or hangs past the timeout
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2030, 9, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"llm-{failure}-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        if failure == "connection refused":
            url = "http://127.0.0.1:9/v1"
        for _ in range(4):
            fake.reply({"error": {"message": "boom"}}, status=500, delay=3.0 if failure == "hang" else 0.0)
        services = worker_services(
            database_url, pool, openai_base_url=url, openai_api_key="k", openai_timeout_seconds=1, openai_max_retries=1
        )
        event = sqs_event(refresh_body([user], day, "daily:2030-09-01"))
        metrics.clear_metrics()  # earlier tests ran with metrics disabled, which never flushes them
        capsys.readouterr()
        # When the worker runs the record
        result = worker_handler(event, FakeLambdaContext(), services=services)
    # Then the record fails alone, its log line names it, its error type and why, and a metric counts it
    assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    [line] = logs.named("record failed")
    assert (line["message_id"], line["error"]) == ("m0", "SummarizerUnavailable")
    assert {"connection refused": "cannot reach", "http 500": "HTTP 500", "hang": "timed out"}[failure] in line[
        "reason"
    ]
    emf = emitted_metrics(capsys)
    assert emf["RecordsFailed"] in (1.0, [1.0]) and emf["UsersFailed"] in (1.0, [1.0])


def test_each_users_run_takes_one_connection_from_the_pool(database_url, conn):
    # Given a pool of one connection, as in Lambda, that counts its checkouts, and three users
    # with a day of activity in one message
    pool = open_pool(database_url)
    checkouts: list[float] = []
    take = pool.getconn

    def counted(timeout: float | None = None) -> psycopg.Connection:
        checkouts.append(1)
        return take(timeout)

    pool.getconn = counted  # type: ignore[method-assign]
    try:
        day = datetime(2030, 9, 1, tzinfo=UTC)
        users = seed_users(pool, 3, day, f"checkouts-{uuid.uuid4()}")
        services = build_worker(WorkerSettings.from_env({}, database_url=database_url), pool=pool)
        checkouts.clear()
        # When the worker processes the message
        result = worker_handler(
            sqs_event(refresh_body(users, day, "daily:2030-09-01")), FakeLambdaContext(), services=services
        )
        metrics.clear_metrics()
    finally:
        pool.close()
    # Then every user's version is written, each run's three statements on one checkout
    assert result == {"batchItemFailures": []}
    assert versions_for(conn, "daily:2030-09-01") == 3
    assert len(checkouts) == 3


def test_a_database_outage_fails_and_reports_every_record(database_url, logs):
    # Given a worker whose pool is gone (the database went away)
    dead = open_pool(database_url)
    services = build_worker(WorkerSettings.from_env({}, database_url=database_url), pool=dead)
    dead.close()
    day = datetime(2030, 10, 1, tzinfo=UTC)
    event = sqs_event(refresh_body([uuid.uuid4()], day, "daily:x"), refresh_body([uuid.uuid4()], day, "daily:x"))
    # Then each record fails, logged as StorageUnavailable
    assert len(worker_handler(event, FakeLambdaContext(), services=services)["batchItemFailures"]) == 2
    assert [r["error"] for r in logs.named("record failed")] == ["StorageUnavailable", "StorageUnavailable"]


def test_a_worker_that_cannot_start_reports_every_record_failed(monkeypatch, logs):
    # Given no database configured at all (the handler builds its own services)
    for name in ("DATABASE_URL", "DATABASE_SECRET_NAME", "DATABASE_URL_PARAMETER"):
        monkeypatch.delenv(name, raising=False)
    event = sqs_event('{"type": "refresh_user"}', '{"type": "record_activity"}')
    result = worker_handler(event, FakeLambdaContext())
    assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m1"}]}
    assert {r["error"] for r in logs.named("record failed")} == {"ConfigError"}


class FailingAfter:
    """An SQS client that accepts `ok_batches` batches, then fails every entry."""

    def __init__(self, real: Any, ok_batches: int) -> None:
        self.real, self.ok_batches = real, ok_batches

    def get_queue_attributes(self, **kw: Any) -> dict[str, Any]:
        return self.real.get_queue_attributes(**kw)

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        if self.ok_batches <= 0:
            return {"Successful": [], "Failed": [{"Id": e["Id"], "Code": "ServiceUnavailable"} for e in kw["Entries"]]}
        self.ok_batches -= 1
        return self.real.send_message_batch(**kw)


def test_a_fanout_that_fails_midway_and_is_retried_summarizes_no_one_twice(stack, database_url, pool, conn, logs):
    # Given 25 users to summarize for a day nobody else uses, and an SQS that fails after one batch of 10
    day = datetime(1975, 6, 1, tzinfo=UTC)
    users = seed_users(pool, 25, day, f"fanout-retry-{uuid.uuid4()}")
    event = {"date": "1975-06-01", "user_ids": [str(u) for u in users]}
    broken = build_fanout(
        FanoutSettings.from_env({}, database_url=database_url, queue_url=stack.queue_url),
        sqs_client=FailingAfter(stack.sqs, ok_batches=1),
        pool=pool,
    )
    broken.sender.sleep = lambda _s: None
    with pytest.raises(SendFailed, match="10 sent before"):
        fanout_handler(event, FakeLambdaContext(function_name="fanout"), services=broken)
    assert logs.named("fan-out failed")[0]["error"] == "SendFailed"
    # When the fan-out is retried whole (as EventBridge does) and the queue drained
    stack.fanout(event)
    report = stack.poller().drain()
    # Then 35 messages were processed, but each user has exactly one version
    assert report.received == 35 and report.to_dlq == 0
    assert versions_for(conn, "daily:1975-06-01") == 25
    rows = conn.execute(
        "SELECT user_id, count(*) FROM user_memory_snapshots WHERE idempotency_key = 'daily:1975-06-01' GROUP BY 1"
    ).fetchall()
    assert {r[1] for r in rows} == {1}


@pytest.mark.parametrize("event", [[], "2026-11-21", {"date": "soon"}, {"detail-type": "Scheduled Event"}])
def test_a_malformed_fanout_event_is_refused_logged_and_counted(stack, event, logs):
    from user_memory.errors import InvalidEvent

    with pytest.raises(InvalidEvent):
        stack.fanout(event)
    [line] = logs.named("fan-out failed")
    assert line["error"] == "InvalidEvent" and line["reason"]


SECRET = "fear of her father"


class LeaksIntoErrors(RuleBasedSummarizer):
    """A summarizer whose failures carry personal text: a part id the schema refuses, or a raw error."""

    def __init__(self, how: str) -> None:
        self.how = how

    def summarize(self, document, activities, **k):
        if self.how == "unexpected":
            raise KeyError(SECRET)
        result = super().summarize(document, activities, **k)
        doc = {
            **result.document,
            "triggers_and_goals": [{"trigger": "t", "desired_outcome": "o", "related_parts": [SECRET]}],
        }
        return type(result)(document=doc, model=result.model)


@pytest.mark.parametrize("how", ["invalid output", "unexpected"])
def test_failure_logs_never_carry_document_or_activity_content(stack, pool, logs, capsys, how):
    # Given a summarizer whose failure messages would quote personal text
    day = datetime(2030, 11, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"leak-{how}-{uuid.uuid4()}")
    stack.worker_services.summarizer = LeaksIntoErrors(how)
    # When the record fails
    assert stack.worker(sqs_event(refresh_body([user], day, "daily:2030-11-01")))["batchItemFailures"]
    # Then the failure is logged with its id and type, and no log line holds the text
    [line] = logs.named("record failed")
    assert line["error"] == {"invalid output": "SummarizerError", "unexpected": "KeyError"}[how]
    assert SECRET not in capsys.readouterr().out
    assert all(SECRET not in r.getMessage() and SECRET not in str(r.__dict__) for r in logs.records)


def test_deferred_records_are_counted_apart_from_failures(stack, pool, capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2030, 12, 1, tzinfo=UTC)
    users = seed_users(pool, 2, day, f"defer-{uuid.uuid4()}")
    metrics.clear_metrics()
    capsys.readouterr()
    stack.worker(
        sqs_event(*(refresh_body([u], day, "daily:2030-12-01") for u in users)), FakeLambdaContext(timeout_seconds=5)
    )
    emf = emitted_metrics(capsys)
    assert emf["RecordsDeferred"] in ([1.0, 1.0], 2.0) and "RecordsFailed" not in emf


def test_a_fanout_that_cannot_start_is_logged_and_counted(monkeypatch, logs):
    # Given no queue configured (the fan-out builds its own services)
    monkeypatch.delenv("QUEUE_URL", raising=False)
    from user_memory.errors import ConfigError

    with pytest.raises(ConfigError):
        fanout_handler({"date": "2026-11-21"}, FakeLambdaContext(function_name="fanout"))
    [line] = logs.named("fan-out failed")
    assert line["error"] == "ConfigError" and "QUEUE_URL" in line["reason"]


def test_edit_mode_through_the_worker_logs_and_counts_applied_and_refused_edits(
    database_url, pool, conn, logs, capsys, monkeypatch
):
    # Given a user with memory (safety notes included) and a day of activity, and a worker whose
    # OpenAI-compatible endpoint answers with three edits, one of which clears the safety notes
    from tests.fake_openai import edit, edits_completion

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2031, 1, 5, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"edits-{uuid.uuid4()}")
    seed = {"summary": "s", "parts": {"critic": {"name": "Critic", "status": "active"}}, "safety_notes": "careful"}
    MemoryStore(PostgresRecorder(pool)).append(user, seed, expected_version=0, source="seed")
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
                edit("add", "/parts/planner/goals/-", {"goal": "plan"}, "goal_set"),
                edit("replace", "/safety_notes", "", "stale"),
                prompt_tokens=700,
            )
        )
        services = worker_services(database_url, pool, openai_base_url=url, openai_api_key="k")
        metrics.clear_metrics()
        capsys.readouterr()
        # When the worker runs the day's message
        result = worker_handler(
            sqs_event(refresh_body([user], day, "daily:2031-01-05")), FakeLambdaContext(), services=services
        )
    # Then the record succeeds: the refused edit did not fail it
    assert result == {"batchItemFailures": []}
    assert fake.response_format()["json_schema"]["name"] == "memory_edits"
    head = MemoryStore(PostgresRecorder(pool)).head(user)
    assert head.version == 2 and head.document["parts"]["planner"]["goals"] == [{"goal": "plan"}]
    assert head.document["safety_notes"] == "careful"
    # And the version carries its provenance in PostgreSQL
    provenance = conn.execute(
        "SELECT provenance FROM user_memory_snapshots WHERE user_id = %s AND version = 2", (user,)
    ).fetchone()[0]
    assert provenance["mode"] == "edit" and len(provenance["edits"]) == 2
    assert [r["path"] for r in provenance["refused"]] == ["/safety_notes"]
    # And the batch line counts the edits and the prompt tokens, and the metrics too
    [done] = logs.named("batch done")
    assert (done["edits_applied"], done["edits_refused"], done["prompt_tokens"]) == (2, 1, 700)
    emf = emitted_metrics(capsys)
    assert emf["EditsRefused"] in (1.0, [1.0]) and emf["EditsApplied"] in (2.0, [2.0])
    assert emf["LLMPromptTokens"] in (700.0, [700.0])


def _related(a: str, b: str) -> bool:
    """Whether one JSON Pointer is the other or lies under it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def test_a_rule_based_version_says_which_activity_each_change_folds_in(stack, pool, conn):
    # Given a user with memory (one part) and a day naming the planner, setting its goal, a session
    day = datetime(2031, 2, 3, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"reasons-{uuid.uuid4()}")
    seed = validate_document({"parts": {"critic": {"name": "Critic", "status": "active"}}}, "user_state")
    stack.store.append(user, seed, expected_version=0, source="seed")
    # When the rule-based worker runs the day's message through its handler
    assert stack.worker(sqs_event(refresh_body([user], day, "daily:2031-02-03"))) == {"batchItemFailures": []}
    # Then the version's provenance lists its edits, each naming the activity (kind and id) it folds in
    provenance, patch = conn.execute(
        "SELECT provenance, patch FROM user_memory_snapshots WHERE user_id = %s AND version = 2", (user,)
    ).fetchone()
    summarized = dict(
        conn.execute(
            "SELECT id, kind FROM user_activity WHERE user_id = %s AND summarized_version = 2", (user,)
        ).fetchall()
    )
    assert provenance["mode"] == "document" and provenance["refused"] == []
    assert len(provenance["edits"]) == 4
    for e in provenance["edits"]:
        if e["path"] == "/summary":
            assert all(f"1 {kind}" in e["reason"] for kind in summarized.values())
            assert all(str(i) in e["reason"] for i in summarized)
        else:
            kind, n = e["reason"].removeprefix("folds in ").split(" activity ")
            assert summarized[int(n)] == kind
    # And their pointers are the stored patch's: each edit's is one of the patch's (or above or under
    # it), and each of the patch's but the service's (recency, the stamp) is an edit's
    edited = [e["path"] for e in provenance["edits"]]
    stored = [op["path"] for op in patch]
    assert all(any(_related(p, q) for q in stored) for p in edited)
    service = [p for p in stored if p.endswith("/recency_score") or p == "/last_updated_by"]
    assert all(any(_related(p, q) for q in edited) for p in stored if p not in service)


def test_the_consoles_timeline_and_stats_show_why_a_rule_based_version_changed(stack, pool, make_api):
    # Given a user whose day the rule-based worker summarized
    day = datetime(2031, 2, 4, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"timeline-{uuid.uuid4()}")
    assert stack.worker(sqs_event(refresh_body([user], day, "daily:2031-02-04"))) == {"batchItemFailures": []}
    # When the console reads the user's timeline and figures through the API
    me = ApiClient(make_api("user_state"), user)
    history = me.get("/me/memory/history")
    stats = me.get("/me/memory/stats", query={"days": 7})
    # Then the version carries its edits, each with a reason naming activity, and the day counts them
    assert history.status == 200 and stats.status == 200
    [item] = history.json["items"]
    edits = item["provenance"]["edits"]
    assert len(edits) == 4 and all(
        re.match(r"(folds in \w+ activity \d+|counts the activity)", e["reason"]) for e in edits
    )
    assert [d["edits_applied"] for d in stats.json["per_day"]] == [4]

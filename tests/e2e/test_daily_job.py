"""The daily job end to end: real handlers, real JSON events, real PostgreSQL, moto's SQS."""

from __future__ import annotations

import io
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import psycopg
import pytest
from moto import mock_aws
from user_memory.activity import Activity, record_activity
from user_memory.config import Settings
from user_memory.local.demo import run_demo
from user_memory.local.handlers import load_function
from user_memory.local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues
from user_memory.messages import Window
from user_memory.pipeline import refresh_user
from user_memory.runtime import Runtime
from user_memory.store import MemoryStore
from user_memory.summarizer.rules import RuleBasedSummarizer

from tests.conftest import EVENTS

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def aws_env(monkeypatch):
    for k, v in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def stack(database_url):
    """Queues in moto and both handlers wired to the test database."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs)
        settings = Settings.from_env({}, database_url=database_url, queue_url=queue_url, summarizer="rules")
        fanout, worker = load_function("fanout"), load_function("worker")
        fanout._runtime = Runtime.build(settings, sqs=sqs, summarizer=object())
        worker._runtime = Runtime.build(settings)

        class Stack:
            pass

        s = Stack()
        s.sqs, s.queue_url, s.dlq_url, s.fanout, s.worker, s.settings = (
            sqs,
            queue_url,
            dlq_url,
            fanout,
            worker,
            settings,
        )
        s.poller = lambda: LambdaSqsPoller(sqs, queue_url, dlq_url, worker.handler)
        yield s
        for m in (fanout, worker):
            m._runtime.close()
            m._runtime = None


def versions_for(conn: psycopg.Connection, run_key: str) -> int:
    return conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,)).fetchone()[
        0
    ]


def seed_users(conn, n: int, day: datetime, tag: str) -> list[uuid.UUID]:
    users = [uuid.uuid4() for _ in range(n)]
    record_activity(
        conn,
        [
            Activity(u, day + timedelta(hours=2 + i), kind, payload, tag, f"{u}:{i}")
            for u in users
            for i, (kind, payload) in enumerate(
                [
                    ("part_named", {"part_id": "planner", "name": "Planner"}),
                    ("goal_set", {"part_id": "planner", "goal": "plan"}),
                    ("session", {}),
                ]
            )
        ],
    )
    return users


def refresh_body(users, day: datetime, run_key: str) -> str:
    return json.dumps(
        {
            "type": "refresh_user",
            "user_ids": [str(u) for u in users],
            "run_key": run_key,
            "window": {"start": day.isoformat(), "end": (day + timedelta(days=1)).isoformat()},
        }
    )


def test_demo_for_50_users_then_rerun_writes_nothing(database_url, conn):
    # Given 50 demo users with a day of activity, When the demo runs twice for the same day
    out = io.StringIO()
    assert run_demo(database_url, users=50, date="2030-01-15", progress=False, out=out, seed_value=7) == 0
    first = versions_for(conn, "daily:2030-01-15")
    report = out.getvalue()
    active = int(next(line.split()[-1] for line in report.splitlines() if line.startswith("users active")))
    # Then every active user got exactly one version
    assert 30 < active <= 50 and first == active
    assert "in DLQ" in report and "latest patch:" in report
    out2 = io.StringIO()
    assert run_demo(database_url, users=50, date="2030-01-15", progress=False, out=out2, seed_value=7) == 0
    assert versions_for(conn, "daily:2030-01-15") == first
    assert any(line.split()[-1] == "0" for line in out2.getvalue().splitlines() if line.startswith("versions written"))


def test_scheduled_fanout_then_worker_writes_one_version_per_active_user(stack, conn):
    event = json.loads((EVENTS / "scheduled_event.json").read_text())
    day = datetime(2026, 11, 21, 0, 15, tzinfo=UTC)
    users = seed_users(conn, 12, day, f"sched-{uuid.uuid4()}")
    result = stack.fanout.handler(event, FakeLambdaContext(function_name="fanout"))
    assert result["run_key"] == "daily:2026-11-21" and result["users"] >= 12
    report = stack.poller().drain()
    assert report.to_dlq == 0
    store = MemoryStore(conn)
    for u in users:
        head = store.head(u)
        assert head.version == 1 and "planner" in head.document["parts"]
        assert head.source.startswith("daily summary 2026-11-21, 3 activities, model rules")


def test_worker_event_from_file_reports_exactly_the_bad_records(stack, conn):
    event = json.loads((EVENTS / "worker_batch.json").read_text())
    result = stack.worker.handler(event, FakeLambdaContext())
    assert result == {
        "batchItemFailures": [
            {"itemIdentifier": "33333333-3333-3333-3333-333333333333"},
            {"itemIdentifier": "44444444-4444-4444-4444-444444444444"},
        ]
    }
    head = MemoryStore(conn).head("0b7e6a2c-52a4-4c55-9d4e-3f0c1f6f0a01")
    assert head.document["parts"]["planner"]["goals"] == [{"goal": "keep a weekly plan"}]


def test_poison_message_reaches_dlq_after_max_receives_while_batch_mates_succeed(stack, conn):
    day = datetime(2030, 2, 1, tzinfo=UTC)
    users = seed_users(conn, 4, day, f"poison-{uuid.uuid4()}")
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody='{"type": "refresh_user", "user_ids": "oops"}')
    for u in users:
        stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=refresh_body([u], day, "daily:2030-02-01"))
    report = stack.poller().drain()
    assert report.to_dlq == 1 and report.failed_attempts == 3
    dlq = stack.sqs.receive_message(QueueUrl=stack.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dlq] == ['{"type": "refresh_user", "user_ids": "oops"}']
    assert versions_for(conn, "daily:2030-02-01") == 4


def test_crash_after_llm_before_commit_is_retried_into_exactly_one_version(stack, conn):
    day = datetime(2030, 3, 1, tzinfo=UTC)
    [user] = seed_users(conn, 1, day, f"crash-{uuid.uuid4()}")
    rt = stack.worker._runtime
    calls = {"summarize": 0, "append": 0}

    class CountingSummarizer(RuleBasedSummarizer):
        def summarize(self, *a, **k):
            calls["summarize"] += 1
            return super().summarize(*a, **k)

    class CrashingStore(MemoryStore):
        def append(self, *a, **k):
            calls["append"] += 1
            if calls["append"] == 1:
                raise RuntimeError("process died before commit")
            return super().append(*a, **k)

    rt.summarizer, rt.store = CountingSummarizer(), CrashingStore(rt.conn)
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=refresh_body([user], day, "daily:2030-03-01"))
    report = stack.poller().drain()
    assert report.failed_attempts == 1 and report.to_dlq == 0
    assert calls["summarize"] == 2
    assert [h.version for h in MemoryStore(conn).history(user)] == [1]


def test_two_workers_on_the_same_user_and_run_key_write_one_version(database_url, conn):
    day = datetime(2030, 4, 1, tzinfo=UTC)
    [user] = seed_users(conn, 1, day, f"twins-{uuid.uuid4()}")
    barrier = threading.Barrier(2)

    class Slow(RuleBasedSummarizer):
        def summarize(self, *a, **k):
            barrier.wait(timeout=10)  # both have passed the run-key check before either writes
            return super().summarize(*a, **k)

    outcomes = []

    def work() -> None:
        with psycopg.connect(database_url, autocommit=True) as c:
            outcomes.append(refresh_user(MemoryStore(c), c, Slow(), user, Window.day(day.date()), "daily:2030-04-01"))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o.status for o in outcomes) == ["already_done", "written"]
    assert [h.version for h in MemoryStore(conn).history(user)] == [1]


def test_concurrent_user_edit_is_preserved_by_rebase(database_url, conn):
    day = datetime(2030, 5, 1, tzinfo=UTC)
    [user] = seed_users(conn, 1, day, f"rebase-{uuid.uuid4()}")
    store = MemoryStore(conn)
    store.append(
        user,
        {
            "version": 1,
            "last_updated_by": "user",
            "summary": "",
            "parts": {},
            "triggers_and_goals": [],
            "safety_notes": "",
        },
        expected_version=0,
        source="seed",
    )

    class EditMeanwhile(RuleBasedSummarizer):
        def summarize(self, document, activities, **k):
            result = super().summarize(document, activities, **k)
            with psycopg.connect(database_url, autocommit=True) as c:  # the user edits during the LLM call
                MemoryStore(c).append_patch(
                    user,
                    [{"op": "replace", "path": "/safety_notes", "value": "no calls"}],
                    expected_version=1,
                    source="user edit",
                )
            return result

    outcome = refresh_user(store, conn, EditMeanwhile(), user, Window.day(day.date()), "daily:2030-05-01")
    assert (outcome.status, outcome.version, outcome.rebased) == ("written", 3, 1)
    head = store.head(user).document
    assert head["safety_notes"] == "no calls"  # the user's edit survived
    assert "planner" in head["parts"]  # and so did the summary


def test_guardrail_refusal_fails_the_message_and_writes_nothing(stack, conn):
    day = datetime(2030, 6, 1, tzinfo=UTC)
    [user] = seed_users(conn, 1, day, f"guard-{uuid.uuid4()}")
    store = MemoryStore(conn)
    parts = {
        f"p{i}": {
            "name": f"P{i}",
            "status": "active",
            "recency_score": 0.5,
            "influence_score": 0.5,
            "goals": [],
        }
        for i in range(5)
    }
    store.append(
        user,
        {
            "version": 1,
            "last_updated_by": "x",
            "summary": "",
            "parts": parts,
            "triggers_and_goals": [],
            "safety_notes": "careful",
        },
        expected_version=0,
        source="seed",
    )

    class Forgetful(RuleBasedSummarizer):
        def summarize(self, document, activities, **k):
            result = super().summarize(document, activities, **k)
            return type(result)({**result.document, "parts": {}}, result.model)

    stack.worker._runtime.summarizer = Forgetful()
    stack.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=refresh_body([user], day, "daily:2030-06-01"))
    report = stack.poller().drain()
    assert report.to_dlq == 1
    assert store.head(user).version == 1


def test_worker_stops_taking_records_near_the_deadline(stack, conn):
    day = datetime(2030, 7, 1, tzinfo=UTC)
    users = seed_users(conn, 2, day, f"deadline-{uuid.uuid4()}")
    event = {
        "Records": [
            {
                "messageId": str(i),
                "receiptHandle": "r",
                "body": refresh_body([u], day, "daily:2030-07-01"),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:1:q",
                "awsRegion": "us-east-1",
            }
            for i, u in enumerate(users)
        ]
    }
    almost_out = FakeLambdaContext(timeout_seconds=5)  # below the 15 s margin
    result = stack.worker.handler(event, almost_out)
    assert result == {"batchItemFailures": [{"itemIdentifier": "0"}, {"itemIdentifier": "1"}]}
    assert versions_for(conn, "daily:2030-07-01") == 0

"""`user-memory demo`: the daily job end to end on local stand-ins.

Embedded (or given) PostgreSQL, moto's SQS, the real fan-out and worker handlers, and the
poller that plays Lambda's SQS event source.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from user_memory.activity import Activity, record_activity

DEMO_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4b7a-9a51-0d4c1b2e7f10")
PARTS = [
    ("critic", "Inner critic"),
    ("planner", "Planner"),
    ("carer", "Carer"),
    ("rebel", "Rebel"),
    ("worrier", "Worrier"),
    ("explorer", "Explorer"),
]
GOALS = [
    "rest before deadlines",
    "ask for help early",
    "keep a weekly plan",
    "walk every morning",
    "say no to extra work",
    "call family on Sundays",
]
TRIGGERS = [
    ("late-night email", "stay offline after 9pm"),
    ("criticism at work", "pause before replying"),
    ("crowded places", "take a short walk"),
    ("unplanned weekends", "pick one small plan"),
]


def demo_user_id(n: int, seed_value: int = 42) -> uuid.UUID:
    return uuid.uuid5(DEMO_NAMESPACE, f"{seed_value}:user-{n}")


def seed(conn: psycopg.Connection, users: int, day: date, *, seed_value: int = 42) -> int:
    """Create `users` demo users with a varied, deterministic day of activity; return activities."""
    rng = random.Random(f"{seed_value}:{day.isoformat()}")
    ids = [demo_user_id(n, seed_value) for n in range(users)]
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany("INSERT INTO users (id) VALUES (%s) ON CONFLICT DO NOTHING", [(u,) for u in ids])
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    activities: list[Activity] = []
    for uid in ids:
        # About one user in eight was only active the day before: found by nobody today.
        offset = timedelta(days=-1) if rng.random() < 0.125 else timedelta(0)
        for i in range(rng.randint(1, 8)):
            at = start + offset + timedelta(minutes=rng.randint(0, 24 * 60 - 1))
            kind = rng.choice(
                [
                    "session",
                    "message",
                    "part_named",
                    "goal_set",
                    "trigger_noted",
                    "insight_interaction",
                    "safety_note" if rng.random() < 0.1 else "message",
                ]
            )
            part_id, part_name = rng.choice(PARTS)
            payloads: dict[str, dict[str, Any]] = {
                "session": {"minutes": rng.randint(5, 60)},
                "message": {"chars": rng.randint(10, 400)},
                "part_named": {"part_id": part_id, "name": part_name},
                "goal_set": {"part_id": part_id, "goal": rng.choice(GOALS)},
                "trigger_noted": dict(zip(("trigger", "desired_outcome"), rng.choice(TRIGGERS), strict=True)),
                "insight_interaction": {"insight": f"insight-{rng.randint(1, 20)}", "action": "saved"},
                "safety_note": {"note": "mentioned trouble sleeping; suggest professional support if it persists"},
            }
            payload = payloads[kind]
            activities.append(Activity(uid, at, kind, payload, "demo", f"{uid}:{(start + offset).date()}:{i}"))
    record_activity(conn, activities)
    return len(activities)


def scheduled_event(day: date) -> dict[str, Any]:
    """The EventBridge payload the daily rule sends at midnight after `day`."""
    fire = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid5(DEMO_NAMESPACE, fire.isoformat())),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": fire.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/user-memory-daily"],
        "detail": {},
    }


def _count(conn: psycopg.Connection, run_key: str) -> int:
    row = conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,)).fetchone()
    return int(row[0]) if row else 0


def run_demo(
    dsn: str,
    *,
    users: int = 200,
    date: str | None = None,
    summarizer: str | None = None,
    progress: bool = True,
    out: Any = None,
    seed_value: int = 42,
) -> int:
    """Seed, fan out, drain; print the report. Returns 0 when nothing ended in the DLQ."""
    import boto3
    from moto import mock_aws

    from user_memory.config import Settings
    from user_memory.db import migrate
    from user_memory.local.handlers import load_function
    from user_memory.local.poller import LambdaSqsPoller, create_queues
    from user_memory.runtime import Runtime

    print_ = (lambda *a: print(*a, file=out)) if out else print
    day = datetime.strptime(date, "%Y-%m-%d").date() if date else (datetime.now(UTC) - timedelta(days=1)).date()
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    started = time.perf_counter()
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        n_activities = seed(conn, users, day, seed_value=seed_value)
        with mock_aws():
            sqs = boto3.client("sqs", region_name="us-east-1")
            queue_url, dlq_url = create_queues(sqs)
            settings = Settings.from_env(database_url=dsn, queue_url=queue_url, summarizer=summarizer)
            fanout: Any = load_function("fanout")
            worker: Any = load_function("worker")
            fanout._runtime = Runtime.build(settings, sqs=sqs, summarizer=object())
            worker._runtime = Runtime.build(settings)
            run_key = f"daily:{day.isoformat()}"
            before = _count(conn, run_key)
            summary = fanout.handler(scheduled_event(day), _context("fanout"))
            poller = LambdaSqsPoller(sqs, queue_url, dlq_url, worker.handler)
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=summary["messages"], unit="msg", desc="worker", leave=False)
            report = poller.drain(
                on_batch=lambda _n: bar.update(poller.report.succeeded + poller.report.to_dlq - bar.n) if bar else None
            )
            if bar:
                bar.close()
            dlq = int(
                sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])[
                    "Attributes"
                ]["ApproximateNumberOfMessages"]
            )
            fanout._runtime.close()
            worker_name = worker._runtime.summarizer.name
            worker._runtime.close()
            fanout._runtime = worker._runtime = None
        written = _count(conn, run_key) - before
        wall = time.perf_counter() - started
        rows = [
            ("day", day.isoformat()),
            ("run key", run_key),
            ("summarizer", worker_name),
            ("users seeded", users),
            ("activities seeded", n_activities),
            ("users active", summary["users"]),
            ("messages sent", summary["messages"]),
            ("worker invocations", report.invocations),
            ("versions written", written),
            ("skipped (already done / unchanged)", summary["users"] - written - dlq),
            ("failed attempts", report.failed_attempts),
            ("in DLQ", dlq),
            ("wall time", f"{wall:.1f} s"),
        ]
        width = max(len(k) for k, _ in rows)
        print_("\nuser-memory demo\n" + "-" * (width + 24))
        for k, v in rows:
            print_(f"{k:<{width}}  {v}")
        sample = conn.execute(
            """SELECT h.user_id, h.version, h.document, s.patch, s.source_description
                 FROM user_memory_heads h JOIN user_memory_snapshots s
                   ON s.user_id = h.user_id AND s.version = h.version
                WHERE s.idempotency_key = %s
                ORDER BY h.user_id LIMIT 1""",
            (run_key,),
        ).fetchone()
        if sample:
            print_(f"\nuser {sample[0]} at version {sample[1]} ({sample[4]})")
            print_(json.dumps(sample[2], indent=2, ensure_ascii=False))
            print_("latest patch:")
            print_(json.dumps(sample[3], indent=2, ensure_ascii=False))
            print_(f"\nsee more: user-memory history {sample[0]}")
    return 0 if dlq == 0 else 1


def _context(name: str) -> Any:
    from user_memory.local.poller import FakeLambdaContext

    return FakeLambdaContext(function_name=name)

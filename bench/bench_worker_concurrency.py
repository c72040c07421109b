"""One worker invocation against a model endpoint with a fixed latency: wall time by LLM_CONCURRENCY.

    .venv/bin/python bench/bench_worker_concurrency.py [--users 10] [--latency 2.0] [--concurrency 1,10]
                                                       [--shape records|message] [--runs 1]

The real worker handler (`user_memory_functions.worker.app.handler`) and the real `openai` client
against the local scripted endpoint of the tests (tests/fake_openai.py), which answers every
chat completion after `--latency` seconds with the edits a seeded day asks for (one call per
user), on a fresh embedded PostgreSQL database. Each run seeds `--users` new users with a day of
activity (a part named, its goal set, a session) and hands them to one invocation: one user per
record (`records`, UsersPerMessage=1 and a batch of that many messages), or one message with all
of them (`message`). The worker's pool is the one `build_worker` opens (up to LLM_CONCURRENCY
connections). Printed per concurrency: the invocation's wall time, the most calls the endpoint
answered at once, and the versions written.
"""

from __future__ import annotations

import os

# Read by Powertools when the handler module is first imported (Logger, Tracer); set before.
os.environ.update(
    {
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }
)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fake_openai: the scripted endpoint
import psycopg  # noqa: E402
from _common import fresh_database  # noqa: E402
from user_memory.adapters.postgres import PostgresActivity, open_pool  # noqa: E402
from user_memory.config import WorkerSettings  # noqa: E402
from user_memory.domain.model import Activity  # noqa: E402
from user_memory.observability import metrics  # noqa: E402
from user_memory.runtime import build_worker  # noqa: E402
from user_memory_functions.worker.app import handler  # noqa: E402
from user_memory_local.poller import FakeLambdaContext, sqs_record  # noqa: E402

from tests.fake_openai import edit, edits_completion, fake_openai_server  # noqa: E402

DAY = datetime(2026, 11, 21, tzinfo=UTC)
ANSWER = edits_completion(
    edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
    edit("add", "/parts/planner/goals/-", {"goal": "plan"}, "goal_set"),
)
STEPS = [
    ("part_named", {"part_id": "planner", "name": "Planner"}),
    ("goal_set", {"part_id": "planner", "goal": "plan"}),
    ("session", {}),
]


def seed(dsn: str, n: int) -> list[uuid.UUID]:
    users = [uuid.uuid4() for _ in range(n)]
    pool = open_pool(dsn)
    try:
        PostgresActivity(pool).record(
            Activity(
                user_id=u,
                occurred_at=DAY + timedelta(hours=2 + i),
                kind=kind,
                payload=payload,
                source="bench",
                external_id=f"{u}:{i}",
            )
            for u in users
            for i, (kind, payload) in enumerate(STEPS)
        )
    finally:
        pool.close()
    return users


def body(users: list[uuid.UUID], run_key: str) -> str:
    window = {"start": DAY.isoformat(), "end": (DAY + timedelta(days=1)).isoformat()}
    return json.dumps(
        {"type": "refresh_user", "user_ids": [str(u) for u in users], "window": window, "run_key": run_key}
    )


def event(users: list[uuid.UUID], shape: str, run_key: str) -> dict[str, Any]:
    bodies = [body([u], run_key) for u in users] if shape == "records" else [body(users, run_key)]
    return {"Records": [sqs_record(message_id=f"m{i}", body=b) for i, b in enumerate(bodies)]}


def run_once(dsn: str, url: str, fake: Any, concurrency: int, users: int, shape: str) -> tuple[float, int, int, int]:
    """(wall seconds, most calls in flight, versions written, records failed) of one invocation."""
    seeded = seed(dsn, users)
    run_key = f"daily:bench-{uuid.uuid4()}"
    settings = WorkerSettings.from_env(
        {}, database_url=dsn, openai_base_url=url, openai_api_key="k", llm_concurrency=concurrency
    )
    services = build_worker(settings)
    fake.max_in_flight = 0
    try:
        t0 = time.perf_counter()
        response = handler(event(seeded, shape, run_key), FakeLambdaContext(), services=services)
        wall = time.perf_counter() - t0
    finally:
        metrics.clear_metrics()
        services.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,)
        ).fetchone()
    return wall, fake.max_in_flight, int(row[0]) if row else 0, len(response["batchItemFailures"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds the endpoint takes per call")
    parser.add_argument("--concurrency", default="1,10", help="comma-separated LLM_CONCURRENCY values")
    parser.add_argument("--shape", choices=["records", "message"], default="records")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    dsn = fresh_database("user_memory_bench_worker_concurrency")
    rows = []
    with fake_openai_server() as (fake, url):
        fake.default, fake.default_delay = ANSWER, args.latency
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            runs = [run_once(dsn, url, fake, concurrency, args.users, args.shape) for _ in range(args.runs)]
            rows.append((concurrency, runs))
    print(
        f"\nOne worker invocation, {args.users} users ({args.shape}), endpoint latency {args.latency:g} s per call, "
        "real openai client, embedded PostgreSQL"
    )
    print(f"{'LLM_CONCURRENCY':>16}{'wall s (median)':>17}{'runs':>20}{'max in flight':>15}{'written':>9}{'failed':>8}")
    for concurrency, runs in rows:
        walls = [r[0] for r in runs]
        print(
            f"{concurrency:>16}{statistics.median(walls):>17.2f}{' '.join(f'{w:.2f}' for w in walls):>20}"
            f"{max(r[1] for r in runs):>15}{min(r[2] for r in runs):>9}{max(r[3] for r in runs):>8}"
        )


if __name__ == "__main__":
    main()

"""Pipeline benchmark: round trips per user, fan-out paging rate, the worker's cold import time,
the OpenAI path's prompt/completion size, and a small fan-out + worker run through moto's SQS.

    .venv/bin/python bench/bench_pipeline.py [--users 300] [--paging-users 100000]

`--users` is the size of the moto end-to-end run (0 skips it). moto's SQS spends time per call
that grows with the queue, so that run measures moto more than this code; the worker's own
throughput, without moto, is bench/bench_worker.py's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, fresh_database, table, traced, user_state_document
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool
from user_memory.config import WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, Window
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.pipeline import refresh_user

DAY = datetime(2026, 11, 21, tzinfo=UTC)


class InstantSummarizer:
    """Adds today's activity count to the summary: no model, near-zero cost."""

    name = "instant"

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        doc = {
            "version": 1,
            "last_updated_by": "instant",
            "parts": {},
            "triggers_and_goals": [],
            "safety_notes": "",
            **document,
        }
        doc["summary"] = f"{len(activities)} activities on {activities[0].occurred_at.date()}"
        return SummaryResult(document=doc, model="instant")


class NextDaySummarizer(InstantSummarizer):
    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        result = super().summarize(document, activities)
        return SummaryResult(
            document={**result.document, "summary": result.document["summary"] + " (next day)"}, model="instant"
        )


@contextmanager
def pool_of(dsn: str, size: int = 1) -> Iterator[ConnectionPool]:
    pool = open_pool(dsn, size=size)
    try:
        yield pool
    finally:
        pool.close()


def seed(pool: ConnectionPool, users: int, per_user: int, tag: str) -> list[uuid.UUID]:
    activity = PostgresActivity(pool)
    ids: list[uuid.UUID] = []
    batch: list[Activity] = []
    for _ in range(users):
        u = uuid.uuid4()
        ids.append(u)
        batch += [
            Activity(
                user_id=u,
                occurred_at=DAY + timedelta(minutes=7 * i + 1),
                kind="session",
                payload={"minutes": 10},
                source=tag,
                external_id=f"{u}:{i}",
            )
            for i in range(per_user)
        ]
        if len(batch) >= 20_000:
            activity.record(batch)
            batch = []
    activity.record(batch)
    return ids


def quiet(handler: Any, services: Any) -> Any:
    """The handler bound to its services; with metrics disabled Powertools never clears its
    metric set (and prints it once a metric holds 100 values), so it is cleared after each call."""
    from user_memory.observability import metrics

    @functools.wraps(handler)
    def invoke(event: Any, context: Any) -> Any:
        try:
            return handler(event, context, services=services)
        finally:
            metrics.clear_metrics()

    return invoke


def pipeline_throughput(dsn: str, users: int) -> list[tuple[str, str]]:
    if users <= 0:
        return [("users through fan-out + worker (moto SQS)", "skipped (--users 0)")]
    import boto3
    from moto import mock_aws
    from user_memory.config import FanoutSettings
    from user_memory.runtime import build_fanout, build_worker
    from user_memory_functions.fanout.app import handler as fanout_handler
    from user_memory_functions.worker.app import handler as worker_handler
    from user_memory_local.demo import scheduled_event
    from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues

    with pool_of(dsn, size=2) as pool:
        seed(pool, users, 4, "bench-pipeline")
        with mock_aws():
            sqs = boto3.client("sqs", region_name="us-east-1")
            queue_url, dlq_url = create_queues(sqs)
            fanout_services = build_fanout(
                FanoutSettings.from_env({}, database_url=dsn, queue_url=queue_url), sqs_client=sqs, pool=pool
            )
            worker_services = build_worker(
                WorkerSettings.from_env({}, database_url=dsn, summarizer="rules"),
                summarizer=InstantSummarizer(),
                pool=pool,
            )
            fanout = quiet(fanout_handler, fanout_services)
            t0 = time.perf_counter()
            result = fanout(scheduled_event(DAY.date()), FakeLambdaContext(function_name="fanout"))
            fanout_s = time.perf_counter() - t0
            poller = LambdaSqsPoller(sqs, queue_url, dlq_url, quiet(worker_handler, worker_services))
            t1 = time.perf_counter()
            report = poller.drain()
            worker_s = time.perf_counter() - t1
    return [
        ("users through fan-out + worker", f"{result['users']:,} ({report.to_dlq} in DLQ)"),
        ("fan-out handler (incl. moto SendMessageBatch)", f"{fanout_s:.1f} s"),
        ("worker handler via poller (incl. moto receive/delete)", f"{worker_s:.1f} s"),
        ("end to end", f"{result['users'] / (fanout_s + worker_s):,.0f} users/s"),
    ]


def round_trips(dsn: str, users: int = 200) -> list[tuple[str, str]]:
    """Network round trips per user, counted from libpq's protocol trace (not estimated)."""
    results = []
    with pool_of(dsn) as pool:  # one connection: every statement of the run goes through it
        ids = seed(pool, users, 5, "bench-rt")
        store = MemoryStore(PostgresRecorder(pool))
        activity = PostgresActivity(pool)
        cfg = WorkerSettings().pipeline()
        window = Window.day(DAY.date())
        with pool.connection() as conn:
            pass

        def run(user: uuid.UUID, run_key: str) -> None:
            summarizer = InstantSummarizer() if run_key == "daily:rt1" else NextDaySummarizer()
            refresh_user(user, window, run_key, store=store, activity=activity, summarizer=summarizer, cfg=cfg)

        for label, run_key in (
            ("first version", "daily:rt1"),
            ("redelivered", "daily:rt1"),
            ("next version", "daily:rt2"),
            ("next version after a person's edit", "daily:rt3"),
        ):
            if run_key == "daily:rt3":
                # a person's edit since the summary: the run reads the newest versions' changed
                # pointers once (facts.human_edits), and keeps what the person set
                for u in ids:
                    head = store.head(u)
                    edited = {**head.document, "summary": "written by the user"}
                    store.append(u, edited, expected_version=head.version, source="api", base=head)
            if run_key in ("daily:rt2", "daily:rt3"):
                # new activity after the first version, so that the next run has something to summarize
                seed_more = [
                    Activity(
                        user_id=u,
                        occurred_at=DAY + timedelta(hours=20),
                        kind="session",
                        payload={"minutes": 5},
                        source="bench-rt",
                        external_id=f"{u}:late:{run_key}",
                    )
                    for u in ids
                ]
                activity.record(seed_more)
            run(ids[0], run_key)  # warm-up: prepared statements are prepared on first use
            with traced(conn) as trips:
                for u in ids[1:]:
                    run(u, run_key)
            results.append((f"round trips per user, {label}", f"{trips.count / (len(ids) - 1):.1f}"))
    return results


def paging_rate(dsn: str, users: int) -> list[tuple[str, str]]:
    import psycopg

    with pool_of(dsn) as pool:
        seed(pool, users, 3, "bench-paging")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE user_activity")
        window = Window.day(DAY.date())
        t0 = time.perf_counter()
        found = pages = 0
        for page in PostgresActivity(pool).active_user_pages(window, page_size=1000):
            found += len(page)
            pages += 1
        s = time.perf_counter() - t0
    return [
        ("fan-out paging (database side)", f"{found:,} users in {pages} pages, {s:.2f} s = {found / s:,.0f} users/s")
    ]


def import_time() -> list[tuple[str, str]]:
    code = (
        "import time; t = time.perf_counter();"
        "from user_memory_functions.worker.app import handler;"
        "print(time.perf_counter() - t)"
    )
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}
    runs = sorted(
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout)
        for _ in range(5)
    )
    detail = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
    ).stderr.splitlines()
    top = sorted(
        (
            parts
            for parts in (line.split("|") for line in detail if line.startswith("import time:") and "|" in line[12:])
            # the handler module and its packages are the whole import, not a part of it
            if not parts[2].strip().startswith("user_memory_functions")
        ),
        key=lambda p: -int(p[1]) if p[1].strip().isdigit() else 0,
    )[:3]
    heavy = ", ".join(f"{p[2].strip()} {int(p[1]) / 1e6:.2f} s" for p in top)
    return [("worker cold import (median of 5)", f"{runs[2]:.2f} s"), ("largest cumulative imports", heavy)]


def openai_tokens() -> list[tuple[str, str]]:
    """Prompt and completion size for a ~10 KB memory and a typical day, through the real client."""
    sys.path.insert(0, str(ROOT))
    import random

    from user_memory.adapters.openai_summarizer import OpenAISummarizer, to_llm_shape

    from tests.fake_openai import completion, fake_openai_server

    doc = user_state_document(random.Random(3))
    u = uuid.uuid4()
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session", {"minutes": 25}),
        ("message", {"text": "I kept putting off the report again"}),
        ("part_named", {"part_id": "part_3", "name": "Procrastinator"}),
        ("goal_set", {"part_id": "part_3", "goal": "start with ten minutes"}),
        ("insight_interaction", {"insight": "avoidance-loop", "action": "saved"}),
        ("message", {"text": "Felt calmer after the walk"}),
        ("session", {"minutes": 15}),
        ("trigger_noted", {"trigger": "vague deadlines", "desired_outcome": "ask for a date"}),
    ]
    day = [
        Activity(
            user_id=u,
            occurred_at=DAY + timedelta(minutes=30 * i),
            kind=kind,
            payload=payload,
            source="bench",
            external_id=str(i),
        )
        for i, (kind, payload) in enumerate(steps * 3)
    ]
    answer = json.dumps(to_llm_shape(doc), separators=(",", ":"))
    with fake_openai_server() as (fake, url):
        fake.default = completion(answer, 0, 0)
        # The whole-document mode: this measures what a full document costs (edit mode's answer is
        # measured by bench/sim_30_days.py).
        settings = WorkerSettings.from_env({}, openai_base_url=url, openai_api_key="k", summary_mode="document")
        summarizer = OpenAISummarizer.from_settings(settings)
        summarizer.summarize(doc, day)
        sent = fake.requests[0]["body"]
    prompt_chars = sum(len(m["content"]) for m in sent["messages"]) + len(json.dumps(sent["response_format"]))
    return [
        ("OpenAI path: memory / activities", f"{len(json.dumps(doc)) / 1024:.1f} KB / {len(day)} items"),
        ("prompt size (messages + schema)", f"{prompt_chars:,} chars = ~{prompt_chars // 4:,} tokens at 4 chars/token"),
        ("completion size (full document)", f"{len(answer):,} chars = ~{len(answer) // 4:,} tokens at 4 chars/token"),
    ]


def main() -> None:
    # Before any handler module is imported: no X-Ray, no metric lines on stdout.
    for k, v in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(k, v)
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=300, help="users through fan-out + worker on moto (0: skip)")
    parser.add_argument("--paging-users", type=int, default=100_000)
    args = parser.parse_args()
    rows = import_time()
    rows += openai_tokens()
    rows += round_trips(fresh_database("user_memory_bench_round_trips"))
    rows += pipeline_throughput(fresh_database("user_memory_bench_pipeline"), args.users)
    rows += paging_rate(fresh_database("user_memory_bench_paging"), args.paging_users)
    table(f"Pipeline benchmark (instant summarizer, embedded PostgreSQL, moto SQS), {args.users:,} users", rows)


if __name__ == "__main__":
    main()

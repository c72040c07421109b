"""Pipeline benchmark: fan-out + worker throughput, round trips per user, fan-out paging rate,
the worker's cold import time, and the OpenAI path's prompt/completion size.

    .venv/bin/python bench/bench_pipeline.py [--users 10000] [--paging-users 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, fresh_database, table  # noqa: E402
from user_memory.activity import Activity, active_user_pages, record_activity  # noqa: E402
from user_memory.messages import Window  # noqa: E402
from user_memory.pipeline import refresh_user  # noqa: E402
from user_memory.store import MemoryStore  # noqa: E402
from user_memory.summarizer.base import SummaryResult  # noqa: E402

DAY = datetime(2026, 11, 21, tzinfo=UTC)


class InstantSummarizer:
    """Adds today's activity count to the summary: no model, near-zero cost."""

    name = "instant"

    def summarize(self, document: dict[str, Any], activities: list[Activity], *, feedback: str | None = None):
        doc = {
            "version": 1,
            "last_updated_by": "instant",
            "parts": {},
            "triggers_and_goals": [],
            "safety_notes": "",
            **document,
        }
        doc["summary"] = f"{len(activities)} activities on {activities[0].occurred_at.date()}"
        return SummaryResult(doc, "instant")


def count_round_trips(trace_path: Path) -> int:
    """Round trips in a libpq protocol trace: each switch from client (F) to server (B) messages."""
    trips, last = 0, ""
    for line in trace_path.read_text().splitlines():
        parts = line.split("\t")
        direction = parts[1] if len(parts) > 2 else ""
        if direction == "B" and last == "F":
            trips += 1
        if direction in ("F", "B"):
            last = direction
    return trips


def seed(conn: psycopg.Connection, users: int, per_user: int, tag: str) -> None:
    batch: list[Activity] = []
    for _ in range(users):
        u = uuid.uuid4()
        batch += [
            Activity(u, DAY + timedelta(minutes=7 * i + 1), "session", {"minutes": 10}, tag, f"{u}:{i}")
            for i in range(per_user)
        ]
        if len(batch) >= 20_000:
            record_activity(conn, batch)
            batch = []
    record_activity(conn, batch)


def pipeline_throughput(dsn: str, users: int) -> list[tuple[str, str]]:
    import boto3
    from moto import mock_aws
    from user_memory.config import Settings
    from user_memory.local.demo import scheduled_event
    from user_memory.local.handlers import load_function
    from user_memory.local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues
    from user_memory.runtime import Runtime

    with psycopg.connect(dsn, autocommit=True) as conn:
        seed(conn, users, 4, "bench-pipeline")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs)
        settings = Settings.from_env({}, database_url=dsn, queue_url=queue_url, summarizer="rules")
        fanout: Any = load_function("fanout")
        worker: Any = load_function("worker")
        fanout._runtime = Runtime.build(settings, sqs=sqs, summarizer=object())
        worker._runtime = Runtime.build(settings, summarizer=InstantSummarizer())
        t0 = time.perf_counter()
        result = fanout.handler(scheduled_event(DAY.date()), FakeLambdaContext(function_name="fanout"))
        fanout_s = time.perf_counter() - t0
        poller = LambdaSqsPoller(sqs, queue_url, dlq_url, worker.handler)
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
    import tempfile

    with psycopg.connect(dsn, autocommit=True) as conn:
        seed(conn, users, 5, "bench-rt")
        ids = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM user_activity WHERE source = 'bench-rt'")]
    conn = psycopg.connect(dsn, autocommit=True)
    store = MemoryStore(conn)
    window = Window.day(DAY.date())
    results = []
    for label, run_key in (("first version", "daily:rt1"), ("redelivered", "daily:rt1"), ("next version", "daily:rt2")):
        with tempfile.NamedTemporaryFile("w+", suffix=".trace") as trace:
            conn.pgconn.trace(trace.fileno())
            for u in ids:
                summarizer = InstantSummarizer() if run_key == "daily:rt1" else NextDaySummarizer()
                refresh_user(store, conn, summarizer, u, window, run_key)
            conn.pgconn.untrace()
            trace.flush()
            results.append((f"round trips per user, {label}", f"{count_round_trips(Path(trace.name)) / len(ids):.1f}"))
    conn.close()
    return results


class NextDaySummarizer(InstantSummarizer):
    def summarize(self, document: dict[str, Any], activities: list[Activity], *, feedback: str | None = None):
        result = super().summarize(document, activities)
        return SummaryResult({**result.document, "summary": result.document["summary"] + " (next day)"}, "instant")


def paging_rate(dsn: str, users: int) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed(conn, users, 3, "bench-paging")
        conn.execute("VACUUM ANALYZE user_activity")
        window = Window.day(DAY.date())
        t0 = time.perf_counter()
        found = pages = 0
        for page in active_user_pages(conn, window.start, window.end, page_size=1000):
            found += len(page)
            pages += 1
        s = time.perf_counter() - t0
    return [
        ("fan-out paging (database side)", f"{found:,} users in {pages} pages, {s:.2f} s = {found / s:,.0f} users/s")
    ]


def import_time() -> list[tuple[str, str]]:
    code = (
        "import time; t = time.perf_counter();"
        "from user_memory.local.handlers import load_function; load_function('worker');"
        "print(time.perf_counter() - t)"
    )
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}
    runs = sorted(
        float(
            subprocess.run(
                [sys.executable, code and "-c", code], capture_output=True, text=True, env=env, check=True
            ).stdout
        )
        for _ in range(5)
    )
    detail = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
    ).stderr.splitlines()
    top = sorted(
        (line.split("|") for line in detail if line.startswith("import time:") and "|" in line[12:]),
        key=lambda p: -int(p[1]) if p[1].strip().isdigit() else 0,
    )[:3]
    heavy = ", ".join(f"{p[2].strip()} {int(p[1]) / 1e6:.2f} s" for p in top)
    return [("worker cold import (median of 5)", f"{runs[2]:.2f} s"), ("largest cumulative imports", heavy)]


def openai_tokens() -> list[tuple[str, str]]:
    """Prompt and completion size for a ~10 KB memory and a typical day, through the real client."""
    sys.path.insert(0, str(ROOT))
    import random

    from user_memory.config import Settings
    from user_memory.summarizer.openai_summarizer import OpenAISummarizer, to_llm_shape

    from bench.bench_store import initial_document
    from tests.fake_openai import completion, fake_openai_server

    rng = random.Random(3)
    doc = initial_document(rng)
    doc["parts"] = {k: {**v, "recency_score": 0.5, "influence_score": 0.5} for k, v in doc["parts"].items()}
    u = uuid.uuid4()
    day = [
        Activity(u, DAY + timedelta(minutes=30 * i), kind, payload, "bench", str(i))
        for i, (kind, payload) in enumerate(
            [
                ("session", {"minutes": 25}),
                ("message", {"text": "I kept putting off the report again"}),
                ("part_named", {"part_id": "part_3", "name": "Procrastinator"}),
                ("goal_set", {"part_id": "part_3", "goal": "start with ten minutes"}),
                ("insight_interaction", {"insight": "avoidance-loop", "action": "saved"}),
                ("message", {"text": "Felt calmer after the walk"}),
                ("session", {"minutes": 15}),
                ("trigger_noted", {"trigger": "vague deadlines", "desired_outcome": "ask for a date"}),
            ]
            * 3
        )
    ]
    answer = json.dumps(to_llm_shape(doc), separators=(",", ":"))
    with fake_openai_server() as (fake, url):
        fake.default = completion(answer, 0, 0)
        summarizer = OpenAISummarizer.from_settings(Settings.from_env({}, openai_base_url=url, openai_api_key="k"))
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
    parser.add_argument("--users", type=int, default=10_000)
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

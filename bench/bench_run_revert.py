"""Undoing a bad night across every user it touched, through the queue (issue 23, section 2).

    .venv/bin/python bench/bench_run_revert.py [--users 10000] [--edited 0.3] [--same-path 0.5]
        [--lanes 4] [--parts 32]

A fresh database; `--users` users, each with a person's first version (a user_state document of
`--parts` parts) and the run `daily:bench`'s version that damaged it (the summary rewritten, the
safety notes cleared, one part's goals lost). After the run, a share `--edited` of the users was
edited by a person: `--same-path` of them rewrote the summary (the run changed it: a conflict),
the others renamed a part the run did not touch (the run's change is inverted on top). Then the
undo runs as deployed: the operator's start (adapters/runs.py: its users recorded pending), one
`revert_run` message on moto's SQS, the worker's handler draining the queue (the fan-out into
`revert_run_users` messages of 100 users, each user undone in the worker's lanes). Printed: the
time from the start to the queue drained, versions written, conflicts found, failures, and each
count checked against what the seeding made.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fresh_database, table, user_state_document  # noqa: E402

RUN_KEY = "daily:bench"


def damaged(doc: dict[str, Any]) -> dict[str, Any]:
    out = {**doc, "summary": "(nothing known)", "safety_notes": ""}
    first = next(iter(doc["parts"]))
    out["parts"] = {**doc["parts"], first: {**doc["parts"][first], "goals": []}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--edited", type=float, default=0.3)
    parser.add_argument("--same-path", type=float, default=0.5)
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--parts", type=int, default=32)
    args = parser.parse_args()

    import os

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    for k, v in {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        os.environ.setdefault(k, v)

    import boto3
    from moto import mock_aws
    from user_memory.adapters.postgres import PostgresRecorder, open_pool
    from user_memory.adapters.runs import PostgresRuns
    from user_memory.config import WorkerSettings
    from user_memory.domain.memory.repository import MemoryStore
    from user_memory.domain.messages import RevertRun
    from user_memory.jobs.worker import process_batch
    from user_memory.runtime import build_worker
    from user_memory_local.poller import LambdaSqsPoller, create_queues

    dsn = fresh_database("bench_run_revert")
    pool = open_pool(dsn, size=args.lanes + 2)
    store = MemoryStore(PostgresRecorder(pool))
    rng = random.Random(23)
    users = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(args.users)]
    edited = rng.sample(users, round(args.users * args.edited))
    same = set(edited[: round(len(edited) * args.same_path)])
    elsewhere = set(edited) - same
    docs = {u: user_state_document(random.Random(u.int), parts=args.parts, recent=0) for u in users}

    def seed(user: uuid.UUID) -> None:
        good = docs[user]
        store.append(user, good, expected_version=0, source="api")
        bad = damaged(good)
        store.append(user, bad, expected_version=1, source="daily summary", idempotency_key=RUN_KEY)
        if user in same:
            store.append(user, {**bad, "summary": "a person's own words"}, expected_version=2, source="api")
        elif user in elsewhere:
            last = list(bad["parts"])[-1]
            parts = {**bad["parts"], last: {**bad["parts"][last], "name": "renamed by a person"}}
            store.append(user, {**bad, "parts": parts}, expected_version=2, source="api")

    started = time.perf_counter()
    with ThreadPoolExecutor(args.lanes) as threads:
        list(threads.map(seed, users))
    seeded = time.perf_counter() - started

    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs, name="bench-run-revert")
        settings = WorkerSettings.from_env(
            {}, database_url=dsn, queue_url=queue_url, summarizer="rules", llm_concurrency=args.lanes
        )
        services = build_worker(settings, pool=pool, sqs_client=sqs)
        poller = LambdaSqsPoller(sqs, queue_url, dlq_url, lambda e, c: process_batch(e, c, services))
        runs = PostgresRuns(pool)
        with pool.connection() as conn:
            before = conn.execute("SELECT count(*) FROM user_memory_snapshots").fetchone()[0]
        started = time.perf_counter()
        revert_id = runs.start(RUN_KEY, None, "bench")["revert_id"]
        sqs.send_message(
            QueueUrl=queue_url, MessageBody=RevertRun(type="revert_run", revert_id=revert_id).model_dump_json()
        )
        report = poller.drain()
        elapsed = time.perf_counter() - started
        status = runs.status(revert_id)
        with pool.connection() as conn:
            written = conn.execute("SELECT count(*) FROM user_memory_snapshots").fetchone()[0] - before
            kinds = dict(
                conn.execute(
                    "SELECT provenance->>'undo', count(*) FROM user_memory_snapshots"
                    " WHERE source_description = %s GROUP BY 1",
                    (f"run-revert:{RUN_KEY}",),
                ).fetchall()
            )
            sources = conn.execute(
                "SELECT count(*) FROM user_memory_snapshots WHERE source_description = %s", (f"run-revert:{RUN_KEY}",)
            ).fetchone()[0]

    expected_conflicts = len(same)
    checks = [
        ("conflicts are exactly the users who rewrote the summary", status["conflict"] == expected_conflicts),
        ("every other user reverted", status["reverted"] == args.users - expected_conflicts),
        (
            "no failure, nothing pending, nothing to the DLQ",
            (status["failed"], status["pending"], report.to_dlq) == (0, 0, 0),
        ),
        ("one version per reverted user", written == sources == status["reverted"]),
        ("inverses exactly for the users edited elsewhere", kinds.get("inverse", 0) == len(elsewhere)),
    ]
    table(
        f"Undo of {RUN_KEY}: {args.users:,} users, {len(edited):,} edited after it ({len(same):,} on the run's paths), "
        f"{args.lanes} lanes",
        [
            ("seeding (not the undo)", f"{seeded:.1f} s"),
            ("undo, start to queue drained", f"{elapsed:.1f} s ({elapsed / args.users * 1000:.2f} ms a user)"),
            ("worker invocations / messages", f"{report.invocations:,} / {report.received:,}"),
            ("versions written", f"{written:,}"),
            ("users reverted", f"{status['reverted']:,}"),
            ("  of which revert / inverse", f"{kinds.get('revert', 0):,} / {kinds.get('inverse', 0):,}"),
            ("conflicts found", f"{status['conflict']:,}"),
            ("failures", f"{status['failed']:,}"),
            *[(name, "yes" if ok else "NO") for name, ok in checks],
        ],
    )
    services.close()
    pool.close()
    if not all(ok for _, ok in checks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""Worker benchmark without moto: the real worker handler on SQS-shaped batch events, against
the bare floor of the same work, on one embedded PostgreSQL database.

    .venv/bin/python bench/bench_worker.py [--users 10000] [--sizes small,10kb] [--head-by summary|person]
                                           [--profile] [--profile-users 2000] [--llm-concurrency 1]

Two document sizes, each its own set of users:
  small  the demo's day of activity (1-8 activities), first version of an empty memory
  10kb   a ~10 KB user_state memory pre-seeded as version 1, then a day of activity, so the
         run writes version 2 (about 5% of the bytes change)

The worker: `user_memory_functions.worker.app.handler(event, context, services=...)`, 10
records per event, one refresh_user message per user, the rule-based summarizer, a pool of
one connection (as in Lambda before LLM_CONCURRENCY; `--llm-concurrency N`: N connections and
LLM_CONCURRENCY=N, the invocation's users side by side in N lanes), Powertools as production
runs it (metrics and tracing disabled, logs at INFO; the log lines go to a counting sink instead
of stdout).

The floor, per user, on a plain connection with prepared statements, through the adapter's own
SQL: read the message body; the head with the run key's recorded version (the adapter's head
query: a user whose run is recorded is skipped); when the head is not a summary's, the newest
versions' sources and changed pointers (the adapter's query; the seeded memories are a summary's,
as last night's run leaves them, so neither side takes it; `--head-by person` seeds them as a
person's, and both take it); the unsummarized activity (the
adapter's query); the same rule-based summarizer call; one unverified `jsonpatch.make_patch`;
`user_memory_append` with the adapter's statement (insert with the run key and a provenance record
of the worker's shape + head update + activity marks in one statement, one round trip, no item
rows: since migration 022 the store sends none); and the search index's catch-up with the
adapter's statement (`user_memory_index_catch_up`, the rows derived in SQL from the stored head,
as the worker's store calls it right after the append). No
validation, no verification, no fact floor, no batch machinery, no logging. Worker and floor
alternate event by event (10 users each) over different users of the same shape, so both see the
same database state.

Each side is timed by wall clock (the ratio the target is about) and by CPU: this process's
thread (time.thread_time; the whole process's with lanes) plus the side's PostgreSQL backends
(/proc/<pid>/schedstat, Linux),
which other load on a shared machine stretches far less than wall time. The last lines
(`summary`) are one line per size, for collecting repeats.

`--profile` adds a sampled profile (pyinstrument) of a separate worker pass and floor pass,
grouped by what the time is spent on.
"""

from __future__ import annotations

import os

# Read by Powertools when the handler module is first imported (Logger, Tracer); set before.
os.environ.update(
    {
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }
)

import argparse
import functools
import json
import random
import resource
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import jsonpatch
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, sentence, traced, user_state_document
from user_memory.adapters.postgres import (
    _APPEND,
    _CATCH_UP,
    _CHANGES,
    _HEAD,
    _UNSUMMARIZED,
    PostgresActivity,
    open_pool,
)
from user_memory.config import WorkerSettings
from user_memory.domain.fanout import FanoutPlan, refresh_bodies
from user_memory.domain.memory.document import encode
from user_memory.domain.model import MAX_CHANGED_PATH_CHARS, MAX_CHANGED_PATHS, Activity, Window
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.facts import MAX_HUMAN_VERSIONS
from user_memory.domain.summary.pipeline import is_summary_source
from user_memory.domain.summary.rules import RuleBasedSummarizer
from user_memory.observability import logger, metrics
from user_memory.runtime import WorkerServices, build_worker
from user_memory_functions.worker.app import handler
from user_memory_local.poller import FakeLambdaContext as Context
from user_memory_local.poller import sqs_record

RECORDS_PER_EVENT = 10
SMALL_DAY = date(2026, 11, 21)
LARGE_DAY = date(2026, 11, 22)
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:user-memory-work"


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


# -- events and context ------------------------------------------------------------------------


def bench_record(body: str, rng: random.Random, sent_ms: int) -> dict[str, Any]:
    """One record as Lambda's SQS event source delivers it, with an id and a receipt of SQS's shape."""
    return sqs_record(
        message_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        body=body,
        receipt_handle="AQEB"
        + "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/") for _ in range(180)),
        attributes={
            "ApproximateReceiveCount": "1",
            "SentTimestamp": str(sent_ms),
            "SenderId": "AROAEXAMPLEFANOUT:user-memory-fanout",
            "ApproximateFirstReceiveTimestamp": str(sent_ms + 40),
        },
        queue_arn=QUEUE_ARN,
    )


def sqs_events(users: list[uuid.UUID], day: date, seed: int) -> list[dict[str, Any]]:
    """Events of 10 records, one refresh_user message per user, bodies as the fan-out writes them."""
    plan = FanoutPlan(window=Window.day(day), run_key=f"daily:{day.isoformat()}")
    bodies = refresh_bodies(users, plan, users_per_message=1)
    rng = random.Random(seed)
    sent = int(datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC).timestamp() * 1000)
    return [
        {"Records": [bench_record(b, rng, sent + i) for b in bodies[i : i + RECORDS_PER_EVENT]]}
        for i in range(0, len(bodies), RECORDS_PER_EVENT)
    ]


class LineSink:
    """Where the handler's log lines go during the bench: counted, not printed."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)

    def flush(self) -> None:
        pass


def route_logs(stream: Any) -> None:
    for h in logger.handlers:
        if hasattr(h, "setStream"):
            h.setStream(stream)


# -- seeding -------------------------------------------------------------------------------------


def new_ids(rng: random.Random, n: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n)]


def seed_small(pool: Any, n: int, seed_value: int) -> list[uuid.UUID]:
    """`n` demo users with the demo's day of activity (1-8 activities, no memory yet)."""
    from user_memory_local.demo import demo_user_id, seed

    seed(pool, n, SMALL_DAY, seed_value=seed_value)
    return [demo_user_id(i, seed_value) for i in range(n)]


def large_day(rng: random.Random, user: uuid.UUID, doc: dict[str, Any]) -> list[Activity]:
    """A day for a user with a ~10 KB memory: a session, messages, an existing part named again,
    a new goal for a recent part, an insight, sometimes a new trigger."""
    recent = [k for k, p in doc["parts"].items() if p["recency_score"] > 0.004]
    part = rng.choice(recent)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session", {"minutes": rng.randint(5, 60)}),
        ("message", {"chars": rng.randint(10, 400)}),
        ("part_named", {"part_id": part, "name": doc["parts"][part]["name"]}),
        ("goal_set", {"part_id": part, "goal": sentence(rng, 6)}),
        ("insight_interaction", {"insight": f"insight-{rng.randint(1, 20)}", "action": "saved"}),
        ("message", {"chars": rng.randint(10, 400)}),
    ]
    if rng.random() < 0.25:
        steps.append(
            (
                "trigger_noted",
                {"trigger": sentence(rng, 5), "desired_outcome": sentence(rng, 6), "related_parts": [part]},
            )
        )
    start = datetime.combine(LARGE_DAY, datetime.min.time(), tzinfo=UTC)
    return [
        Activity(
            user_id=user,
            occurred_at=start + timedelta(minutes=30 + 90 * i),
            kind=kind,
            payload=payload,
            source="bench",
            external_id=f"{user}:{LARGE_DAY}:{i}",
        )
        for i, (kind, payload) in enumerate(steps)
    ]


_SEED_APPEND = "SELECT status FROM user_memory_append(%s, 0, %s, false, %s::jsonb, %s, NULL, NULL)"
# Who wrote version 1 of the ~10 KB memories (--head-by). By default the previous night's summary:
# the steady state of a nightly job. A head a person wrote (the API) costs both sides one more
# round trip, the newest versions' changed pointers (the fields people set since the last summary).
SEED_SOURCES = {
    "summary": f"daily summary {LARGE_DAY - timedelta(days=1)}, 6 activities, model rules (no LLM configured)",
    "person": "api",
}


def seed_large(pool: Any, dsn: str, n: int, seed_value: int, source: str) -> list[uuid.UUID]:
    """`n` users with a ~10 KB memory as version 1 and a day of activity after it."""
    rng = random.Random(seed_value)
    users = new_ids(rng, n)
    activity = PostgresActivity(pool)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for first in range(0, n, 500):
            chunk = users[first : first + 500]
            docs = [user_state_document(rng) for _ in chunk]
            rows = [
                (u, Jsonb([{"op": "add", "path": f"/{k}", "value": v} for k, v in d.items()]), encode(d), source)
                for u, d in zip(chunk, docs, strict=True)
            ]
            with conn.pipeline(), conn.cursor() as cur:
                cur.executemany(_SEED_APPEND, rows)
            activity.record([a for u, d in zip(chunk, docs, strict=True) for a in large_day(rng, u, d)])
    return users


# -- the floor -----------------------------------------------------------------------------------


class Floor:
    """The same work per user with nothing around it (see the module's docstring). Each step is
    a method so that the timed breakdown can wrap it; the calls cost nanoseconds."""

    def __init__(self, dsn: str, summarizer: RuleBasedSummarizer, limit: int) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.summarizer = summarizer
        self.limit = limit

    def run_event(self, event: dict[str, Any]) -> None:
        for record in event["Records"]:
            users, start, end, run_key = self.message(record["body"])
            for user in users:
                version, old, source, recorded = self.head(user, run_key)
                if recorded is not None:
                    continue
                if version and not is_summary_source(source):
                    self.changes(user)
                activities = self.activities(user, end)
                if not activities:
                    continue
                result = self.summarize(old, activities)
                new = result.document
                patch = self.diff(old, new)
                self.append(
                    user,
                    version,
                    patch,
                    self.encode(new),
                    self.source(start, activities, result.model, run_key),
                    activities,
                    run_key,
                    self.provenance(result, activities),
                )
                self.index(user)

    def message(self, body: str) -> tuple[list[uuid.UUID], datetime, datetime, str]:
        message = json.loads(body)
        window = message["window"]
        start, end = datetime.fromisoformat(window["start"]), datetime.fromisoformat(window["end"])
        return [uuid.UUID(u) for u in message["user_ids"]], start, end, message["run_key"]

    def head(self, user: uuid.UUID, run_key: str) -> tuple[int, dict[str, Any], str | None, int | None]:
        """The adapter's head query: the head and the version the run key produced, one round trip."""
        row = self.conn.execute(_HEAD, {"u": user, "k": run_key}, prepare=True).fetchone()
        if row is None or row[0] is None:
            return 0, {}, None, row[4] if row else None
        return row[0], row[1], row[3], row[4]

    def changes(self, user: uuid.UUID) -> None:
        """The adapter's query of the newest versions' sources and changed pointers (a head a person wrote)."""
        params = {"u": user, "limit": MAX_HUMAN_VERSIONS, "paths": MAX_CHANGED_PATHS, "chars": MAX_CHANGED_PATH_CHARS}
        self.conn.execute(_CHANGES, params).fetchall()

    def activities(self, user: uuid.UUID, end: datetime) -> list[Activity]:
        rows = self.conn.execute(_UNSUMMARIZED, (user, end, 0, self.limit), prepare=True).fetchall()
        return [
            Activity(id=r[0], user_id=r[1], occurred_at=r[2], kind=r[3], payload=r[4], source=r[5], external_id=r[6])
            for r in rows
        ]

    def summarize(self, old: dict[str, Any], activities: list[Activity]) -> SummaryResult:
        return self.summarizer.summarize(old, activities)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
        return jsonpatch.make_patch(old, new).patch

    def index(self, user: uuid.UUID) -> None:
        """The adapter's statement that brings the search index up to the head (migration 022): the
        index is part of the same work, and since 022 the store writes it after the append, not in it."""
        self.conn.execute(_CATCH_UP, (user,), prepare=True).fetchone()

    def encode(self, document: dict[str, Any]) -> str:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False)

    def source(self, start: datetime, activities: list[Activity], model: str, run_key: str) -> str:
        """The version's source description, as the pipeline words it."""
        label = "daily summary" if run_key.startswith("daily:") else f"summary ({run_key})"
        return f"{label} {start.date().isoformat()}, {len(activities)} activities, model {model}"

    def provenance(self, result: SummaryResult, activities: list[Activity]) -> dict[str, Any]:
        """A provenance record of the worker's shape for a whole-document answer that needed nothing
        restored, filled or kept (what the rule-based summarizer's answers are)."""
        return {
            "mode": "document",
            "model": result.model,
            "restored": [],
            "filled": [],
            "unreflected": [],
            "kept_human_edits": [],
            "ignored_requests": [],
            "recency_set": 0,
            "activities": len(activities),
            "activity_cut": result.activity_cut,
            "activity_duplicates": result.activity_duplicates,
            "calls": 1,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
        }

    def append(
        self,
        user: uuid.UUID,
        version: int,
        patch: list[dict[str, Any]],
        document_json: str,
        source: str,
        activities: list[Activity],
        run_key: str,
        provenance: dict[str, Any],
    ) -> None:
        """The adapter's statement: user_memory_append with the run key and the provenance, no item
        rows (the store's since migration 022)."""
        self.conn.execute(
            _APPEND,
            (
                user,
                version,
                Jsonb(patch),
                (version + 1) % 50 == 0,
                document_json,
                source,
                run_key,
                [a.id for a in activities],
                Jsonb(provenance),
                None,
            ),
            prepare=True,
        ).fetchone()


# -- runs ----------------------------------------------------------------------------------------


def invoke(services: WorkerServices, event: dict[str, Any]) -> float:
    """One handler invocation, timed; the metric set is cleared after it, outside the timing
    (with metrics disabled, Powertools never flushes it: see user_memory_local.demo.quiet_metrics)."""
    context = Context(function_name="user-memory-worker")
    t0 = time.perf_counter()
    response = handler(event, context, services=services)
    seconds = time.perf_counter() - t0
    metrics.clear_metrics()
    if response["batchItemFailures"]:
        raise SystemExit(f"the worker failed records: {response['batchItemFailures'][:3]}")
    return seconds


def floor_event(floor: Floor, event: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    floor.run_event(event)
    return time.perf_counter() - t0


def backend_cpu_ns(pid: int) -> int | None:
    """Nanoseconds a PostgreSQL backend has run on a CPU (Linux's /proc/<pid>/schedstat), or None."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Side:
    """Per event: wall seconds, and CPU seconds of this process's thread and of the side's backend."""

    backend_pids: list[int]
    wall: list[float]
    python_cpu: list[float]
    server_cpu: list[float]
    # The worker's lanes run in threads of their own: then the process's CPU, not this thread's.
    clock: Callable[[], int] = time.thread_time_ns

    def run(self, work: Callable[[], float]) -> None:
        b0 = [backend_cpu_ns(pid) for pid in self.backend_pids]
        c0 = self.clock()
        self.wall.append(work())
        c1 = self.clock()
        b1 = [backend_cpu_ns(pid) for pid in self.backend_pids]
        self.python_cpu.append((c1 - c0) / 1e9)
        spent = [b - a for a, b in zip(b0, b1, strict=True) if a is not None and b is not None]
        self.server_cpu.append(sum(spent) / 1e9 if len(spent) == len(b0) else float("nan"))

    @property
    def cpu(self) -> float:
        return sum(self.python_cpu) + sum(self.server_cpu)


@dataclass
class RunResult:
    users: int
    worker: Side
    floor: Side

    @property
    def worker_s(self) -> float:
        return sum(self.worker.wall)

    @property
    def floor_s(self) -> float:
        return sum(self.floor.wall)

    @property
    def worker_events(self) -> list[float]:
        return self.worker.wall

    @property
    def floor_events(self) -> list[float]:
        return self.floor.wall


def worker_connections(services: WorkerServices) -> list[psycopg.Connection]:
    """Every connection of the worker's pool (all opened at start): the ones its statements use."""
    pool = services.store.recorder.pool.pool  # type: ignore[attr-defined]  # HeldConnections' pool
    conns = [pool.getconn() for _ in range(pool.max_size)]
    for conn in conns:
        pool.putconn(conn)
    return conns


def measured_run(services: WorkerServices, floor: Floor, worker_events: list, floor_events: list) -> RunResult:
    """Worker and floor alternate, one event (10 users) each, taking turns at going first."""
    pids = [int(c.info.backend_pid) for c in worker_connections(services)]
    w = Side(pids, [], [], [], clock=time.process_time_ns if services.concurrency > 1 else time.thread_time_ns)
    f = Side([int(floor.conn.info.backend_pid)], [], [], [])
    users = sum(len(e["Records"]) for e in worker_events)
    for i, (we, fe) in enumerate(zip(worker_events, floor_events, strict=True)):
        # who goes first alternates, so that neither always runs right after the other
        if i % 2:
            f.run(functools.partial(floor_event, floor, fe))
        w.run(functools.partial(invoke, services, we))
        if not i % 2:
            f.run(functools.partial(floor_event, floor, fe))
        if (i + 1) % 200 == 0:
            done = (i + 1) * RECORDS_PER_EVENT
            progress(f"{done:,}/{users:,} users (worker {sum(w.wall):.1f} s, floor {sum(f.wall):.1f} s)")
    return RunResult(users=users, worker=w, floor=f)


def round_trips(services: WorkerServices, floor: Floor, worker_events: list, floor_events: list) -> tuple[float, float]:
    conns = worker_connections(services)  # the connections every statement of the worker uses
    # The first event of each warms up (prepared statements, pydantic, caches); the rest is traced.
    invoke(services, worker_events[0])
    floor.run_event(floor_events[0])
    users = sum(len(e["Records"]) for e in worker_events[1:])
    with traced(*conns) as worker_trips:
        for e in worker_events[1:]:
            invoke(services, e)
    with traced(floor.conn) as floor_trips:
        for e in floor_events[1:]:
            floor.run_event(e)
    return worker_trips.count / users, floor_trips.count / users


def document_stats(dsn: str, users: list[uuid.UUID], version: int) -> tuple[float, float, float, float]:
    """Mean compact-JSON bytes of the document before and after the run, of the run's patch and of
    its provenance record with the source description."""
    sample = users[:500]
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = conn.execute(
            "SELECT document FROM user_memory_heads WHERE user_id = ANY(%s) AND version = %s", (sample, version)
        ).fetchall()
        patches = conn.execute(
            "SELECT patch, provenance, source_description FROM user_memory_snapshots"
            " WHERE user_id = ANY(%s) AND version = %s",
            (sample, version),
        ).fetchall()
    if len(after) != len(sample):
        raise SystemExit(f"{len(sample) - len(after)} of {len(sample)} sampled users are not at version {version}")
    after_b = statistics.fmean(len(encode(r[0]).encode()) for r in after)
    patch_b = statistics.fmean(len(encode(r[0]).encode()) for r in patches)
    provenance_b = statistics.fmean(len(encode(r[1] or {}).encode()) + len(r[2].encode()) for r in patches)
    if version == 1:
        before_b = 0.0
    else:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT patch FROM user_memory_snapshots WHERE user_id = ANY(%s) AND version = 1",
                (sample,),
            ).fetchall()
        # version 1 was seeded as one `add` per top-level member
        before_b = statistics.fmean(len(encode({op["path"][1:]: op["value"] for op in r[0]}).encode()) for r in rows)
    return before_b, after_b, patch_b, provenance_b


# -- timed breakdown ------------------------------------------------------------------------------

DB = "database round trips"
DIFF = "diff + verification (make_patch)"
VALIDATION = "validation (validate_document)"
JSON_CAT = "JSON encoding/decoding"
LOGGING = "logging"
BATCH = "Powertools batch machinery"
SUMMARIZER = "summarizer"
FACTS = "fact floor and recency"
OTHER = "other"


class Timers:
    """Exclusive time per (category, item): each wrapped call's time minus its wrapped callees'.
    A wrapper costs about a microsecond; there are ~20 wrapped calls per user."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self._children: list[float] = []

    def wrap(self, fn: Callable[..., Any], category: str, item: str) -> Callable[..., Any]:
        return _Timed(self, fn, (category, item))

    def by_category(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (cat, _), t in self.totals.items():
            out[cat] += t
        return out


class _Timed:
    """A timed call (an object rather than a closure: psycopg warns about closures as json hooks)."""

    def __init__(self, timers: Timers, fn: Callable[..., Any], key: tuple[str, str]) -> None:
        self.timers, self.fn, self.key = timers, fn, key

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        timers, children = self.timers, self.timers._children
        t0 = time.perf_counter()
        children.append(0.0)
        try:
            return self.fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - t0
            timers.totals[self.key] += elapsed - children.pop()
            timers.calls[self.key] += 1
            if children:
                children[-1] += elapsed


@contextmanager
def json_hooks(timers: Timers, conn: psycopg.Connection) -> Iterator[None]:
    """Time psycopg's jsonb loading (result documents, payloads) and dumping (Jsonb parameters)."""
    from psycopg.types.json import set_json_dumps, set_json_loads

    set_json_loads(timers.wrap(json.loads, JSON_CAT, "psycopg: json.loads of jsonb results"), conn)
    set_json_dumps(timers.wrap(json.dumps, JSON_CAT, "psycopg: json.dumps of Jsonb parameters"), conn)
    try:
        yield
    finally:
        set_json_loads(json.loads, conn)
        set_json_dumps(json.dumps, conn)


def timed_passes(
    services: WorkerServices, floor: Floor, worker_events: list[dict[str, Any]], floor_events: list[dict[str, Any]]
) -> tuple[Timers, Timers, float]:
    """The worker and the floor with their steps timed, alternating event by event as in the
    measured run. Worker: the adapters' calls, the summarizer, validation, the store's diff,
    each compact-JSON encode, logging, and the rest of refresh_user and of the handler.
    Also returns one pool checkout + return, in seconds (the worker takes one per statement)."""
    import user_memory.domain.memory.document as document_module
    import user_memory.domain.memory.patching as patching_module
    import user_memory.domain.memory.repository as repository_module
    import user_memory.domain.summary.pipeline as pipeline_module
    import user_memory.jobs.worker as worker_module

    worker, base = Timers(), Timers()
    recorder, activity, summarizer = services.store.recorder, services.activity, services.summarizer
    pool = recorder.pool  # type: ignore[attr-defined]
    with pool.connection() as conn:
        pass
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        with pool.connection():
            pass
    checkout = (time.perf_counter() - t0) / n
    worker_patches = [
        (recorder, "read_head", DB, "PostgresRecorder.read_head (head + run key)"),
        (activity, "unsummarized", DB, "PostgresActivity.unsummarized"),
        (recorder, "insert", DB, "PostgresRecorder.insert (user_memory_append)"),
        (recorder, "mark_summarized", DB, "PostgresRecorder.mark_summarized"),
        (summarizer, "summarize", SUMMARIZER, "RuleBasedSummarizer.summarize"),
        (pipeline_module, "stored_document_valid", VALIDATION, "stored_document_valid: the head's size + schema"),
        (pipeline_module, "validate_document", VALIDATION, "pipeline -> validate_document (pydantic)"),
        (repository_module, "make_patch", DIFF, "make_patch: json_equal pre-check + jsonpatch.make_patch"),
        (patching_module, "_reproduces", DIFF, "make_patch -> _reproduces (apply_patch + json_equal)"),
        (document_module, "encode", JSON_CAT, "validate_document -> check_size -> encode"),
        (repository_module, "encode", JSON_CAT, "MemoryStore._write -> encode"),
        (pipeline_module, "lines_chars", JSON_CAT, "prompt_chunks -> lines_chars (one encoding of the lines)"),
        (pipeline_module, "activity_chars", JSON_CAT, "prompt_chunks -> activity_chars (a line that splits)"),
        (pipeline_module, "restore_facts", FACTS, "restore_facts"),
        (pipeline_module, "unreflected", FACTS, "unreflected"),
        (pipeline_module, "set_recency", FACTS, "set_recency"),
        (logger, "info", LOGGING, "logger.info"),
        (logger, "debug", LOGGING, "logger.debug"),
        (logger, "warning", LOGGING, "logger.warning"),
        (worker_module, "refresh_user", OTHER, "refresh_user, MemoryStore.append (the rest)"),
    ]
    floor_steps = [
        ("message", OTHER, "json.loads of the body, ids, window"),
        ("head", DB, "the adapter's head query (head + run key)"),
        ("changes", DB, "the adapter's changed-pointers query (a head a person wrote)"),
        ("activities", DB, "the adapter's unsummarized query"),
        ("summarize", SUMMARIZER, "RuleBasedSummarizer.summarize"),
        ("diff", DIFF, "jsonpatch.make_patch (unverified)"),
        ("encode", JSON_CAT, "json.dumps of the document"),
        ("source", OTHER, "the source description and the provenance record"),
        ("provenance", OTHER, "the source description and the provenance record"),
        ("append", DB, "user_memory_append (the adapter's statement, with the run key and provenance)"),
        ("index", DB, "user_memory_index_catch_up (the adapter's statement, after the append)"),
    ]
    with ExitStack() as stack:
        for obj, name, cat, item in worker_patches:
            stack.enter_context(patch.object(obj, name, worker.wrap(getattr(obj, name), cat, item)))
        for name, cat, item in floor_steps:
            stack.enter_context(patch.object(floor, name, base.wrap(getattr(floor, name), cat, item)))
        stack.enter_context(json_hooks(worker, conn))
        stack.enter_context(json_hooks(base, floor.conn))
        timed_handler = worker.wrap(handler, BATCH, "handler, batch processor, record parsing (the rest)")
        timed_floor = base.wrap(floor.run_event, OTHER, "the loop")
        for i, (we, fe) in enumerate(zip(worker_events, floor_events, strict=True)):
            if i % 2:
                timed_floor(fe)
            response = timed_handler(we, Context(function_name="user-memory-worker"), services=services)
            metrics.clear_metrics()
            if response["batchItemFailures"]:
                raise SystemExit(f"the worker failed records: {response['batchItemFailures'][:3]}")
            if not i % 2:
                timed_floor(fe)
    return worker, base, checkout


def print_timed(
    title: str, worker: Timers, floor: Timers, checkout: float, users: int, measured: tuple[float, float]
) -> None:
    wc, fc = worker.by_category(), floor.by_category()
    wt, ft = sum(wc.values()) / users * 1000, sum(fc.values()) / users * 1000
    print(f"\n{title}")
    print(
        f"timed per call (perf_counter around each step, exclusive of wrapped callees), {users:,} users each; "
        f"ms per user. Unwrapped run: worker {measured[0]:.3f}, floor {measured[1]:.3f}"
    )
    print(f"{'category':<36}{'worker':>10}{'share':>8}{'floor':>10}{'excess':>10}{'of excess':>11}")
    excess_total = wt - ft
    for cat in CATEGORIES:
        w, f = wc.get(cat, 0.0) / users * 1000, fc.get(cat, 0.0) / users * 1000
        share_of_excess = (w - f) / excess_total if excess_total else 0.0
        print(f"{cat:<36}{w:>10.3f}{w / wt:>8.1%}{f:>10.3f}{w - f:>+10.3f}{share_of_excess:>11.0%}")
    print(f"{'total':<36}{wt:>10.3f}{1:>8.0%}{ft:>10.3f}{excess_total:>+10.3f}{1:>11.0%}")
    for who, timers in (("worker", worker), ("floor", floor)):
        print(f"\n  {who}: item (calls per user)")
        for cat in CATEGORIES:
            for (c, item), t in sorted(timers.totals.items(), key=lambda kv: -kv[1]):
                if c == cat and timers.calls[(c, item)]:
                    calls = timers.calls[(c, item)] / users
                    print(f"    {t / users * 1000:8.3f}  {cat[:12]:<12}  {item} ({calls:.1f})")
    print(
        f"\n  one pool checkout + return (no statement): {checkout * 1e6:.1f} us; the worker takes one per user "
        "(HeldConnections, held for the run)"
    )


# -- profile -------------------------------------------------------------------------------------

CATEGORIES = [
    "database round trips",
    "diff + verification (make_patch)",
    "validation (validate_document)",
    "JSON encoding/decoding",
    "logging",
    "Powertools batch machinery",
    "summarizer",
    "fact floor and recency",
    "other",
]


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    cls: str

    @property
    def module(self) -> str:
        path = self.file.replace("\\", "/")
        for marker in ("site-packages/", "layers/core/", "functions/", "/lib/python3.11/", "/lib/python3.12/"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        else:
            path = Path(path).name
        return path.removesuffix(".py").replace("/", ".")

    @property
    def name(self) -> str:
        return f"{self.module}.{self.cls + '.' if self.cls else ''}{self.function}"

    @property
    def short(self) -> str:
        return f"{self.cls + '.' if self.cls else ''}{self.function}"


def parse_frame(identifier: str) -> Frame:
    head, *attrs = identifier.split("\x01")
    function, file, *_ = (head.split("\x00") + ["", ""])[:3]
    cls = next((a[1:] for a in attrs if a.startswith("c")), "")
    return Frame(function, file, cls)


def is_logging(f: Frame) -> bool:
    p = f.file.replace("\\", "/")
    return "aws_lambda_powertools/logging/" in p or (
        "/logging/" in p and "site-packages" not in p
    )  # the standard library's logging


def category_of(f: Frame) -> str | None:
    """The category a frame settles, or None when it only passes time on (pydantic, builtins...)."""
    p = f.file.replace("\\", "/")
    if ("/json/" in p and "site-packages" not in p) or p.endswith("psycopg/types/json.py"):
        return "JSON encoding/decoding"
    if p.endswith("user_memory/domain/memory/document.py"):
        if f.function in ("encode", "document_size"):
            return "JSON encoding/decoding"
        if f.function in ("validate_document", "check_size", "get_schema"):
            return "validation (validate_document)"
        return None  # empty_document: whoever asked for it
    if p.endswith("user_memory/domain/memory/patching.py"):
        return None if f.function == "copy_json" else "diff + verification (make_patch)"
    if p.endswith(("/jsonpatch.py", "/jsonpointer.py")):
        return "diff + verification (make_patch)"
    if p.endswith("user_memory/domain/summary/rules.py"):
        return "summarizer"
    if p.endswith(("user_memory/domain/summary/facts.py", "user_memory/domain/summary/requests.py")):
        return "fact floor and recency"
    if "/psycopg/" in p or "/psycopg_pool/" in p or "/psycopg_binary/" in p or p.endswith("adapters/postgres.py"):
        return "database round trips"
    if "aws_lambda_powertools/" in p or p.endswith(("user_memory/jobs/worker.py", "worker/app.py")):
        return "Powertools batch machinery"
    if p.endswith(("domain/summary/pipeline.py", "domain/memory/repository.py", "bench_worker.py")):
        return "other"
    return None


def is_project(f: Frame) -> bool:
    return "user_memory" in f.file or f.file.endswith("bench_worker.py")


def classify(stack: list[Frame]) -> tuple[str, str]:
    """(category, label) of one sample.

    Logging: a logging frame below the innermost project frame (the handler's
    `inject_lambda_context` wrapper sits above everything and does not count). Otherwise the
    innermost frame that settles a category. The label names the frame that settled it and the
    nearest project caller, which says what the time was for (e.g. whose JSON was encoded).
    """
    last_own = max((i for i, f in enumerate(stack) if is_project(f)), default=-1)
    for f in stack[last_own + 1 :]:
        if is_logging(f):
            caller = stack[last_own].short if last_own >= 0 else "?"
            return "logging", f"{f.name} < {caller}"
    for i in range(len(stack) - 1, -1, -1):
        cat = category_of(stack[i])
        if cat is None:
            continue
        matched = stack[i]
        if cat == "JSON encoding/decoding":
            # jsonpatch's DiffBuilder compares values and list items by their json.dumps text:
            # that encoding is the diff's own work (the floor's diff does it too).
            outer = next((g for g in reversed(stack[:i]) if "/json/" not in g.file.replace("\\", "/")), None)
            if outer is not None and outer.file.endswith("jsonpatch.py"):
                return "diff + verification (make_patch)", f"json.dumps < {outer.name}"
        callers = stack[:i] if is_project(matched) else stack[: i + 1]
        own = next(
            (g for g in reversed(callers) if is_project(g) and g.function not in ("<genexpr>", "<listcomp>")), None
        )
        label = matched.name if own is None else f"{matched.name} < {own.short}"
        return cat, label
    return "other", stack[-1].name if stack else "?"


@dataclass
class Profile:
    users: int
    seconds: float
    by_category: dict[str, float]
    by_label: dict[str, dict[str, float]]


def profile_passes(
    services: WorkerServices, floor: Floor, worker_events: list[dict[str, Any]], floor_events: list[dict[str, Any]]
) -> tuple[Profile, Profile]:
    """pyinstrument over the worker and the floor, alternating event by event."""
    from pyinstrument import Profiler

    profilers = (Profiler(interval=0.001), Profiler(interval=0.001))

    def run_floor(event: dict[str, Any]) -> None:
        profilers[1].start()
        floor.run_event(event)
        profilers[1].stop()

    for i, (we, fe) in enumerate(zip(worker_events, floor_events, strict=True)):
        if i % 2:
            run_floor(fe)
        context = Context(function_name="user-memory-worker")
        profilers[0].start()
        response = handler(we, context, services=services)
        profilers[0].stop()
        metrics.clear_metrics()
        if response["batchItemFailures"]:
            raise SystemExit(f"the worker failed records: {response['batchItemFailures'][:3]}")
        if not i % 2:
            run_floor(fe)
    users = sum(len(e["Records"]) for e in worker_events)
    return summarize_profile(profilers[0], users), summarize_profile(profilers[1], users)


def summarize_profile(profiler: Any, users: int) -> Profile:
    by_category: dict[str, float] = defaultdict(float)
    by_label: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for identifiers, t in profiler.last_session.frame_records:
        stack = [parse_frame(i) for i in identifiers[1:]]  # [0] is the thread
        cat, label = classify(stack)
        by_category[cat] += t
        by_label[cat][label] += t
    return Profile(users=users, seconds=profiler.last_session.duration, by_category=by_category, by_label=by_label)


def print_profile(title: str, worker: Profile, floor: Profile, top: int = 6) -> None:
    """What is inside each category of the worker's time, from samples; the split itself is the
    timed table's (the profiler's per-call hook slows call-heavy Python, the diffs and
    json_equal, far more than waiting on the server)."""
    wt = sum(worker.by_category.values())
    print(f"\n{title}")
    print(
        f"{wt:.1f} s sampled over {worker.users:,} users = {wt / worker.users * 1000:.2f} ms/user (the profiler's"
        " hook slows call-heavy Python most: take the split from the timed table, and from here what is inside)"
    )
    print("top items per category, ms per user ('a < b': time in a, called from b)")
    for cat in CATEGORIES:
        labels = sorted(worker.by_label.get(cat, {}).items(), key=lambda kv: -kv[1])[:top]
        labels = [(label, t) for label, t in labels if t / worker.users * 1000 >= 0.005]
        if not labels:
            continue
        print(f"  {cat}  (sampled {worker.by_category[cat] / worker.users * 1000:.3f})")
        for label, t in labels:
            print(f"    {t / worker.users * 1000:8.3f}  {label}")


# -- main ----------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    label: str
    run: RunResult
    trips: tuple[float, float]
    docs: tuple[float, float, float, float]
    floor_docs: tuple[float, float, float, float]
    activities: float
    rss_mb: float
    log_lines: int
    timed: tuple[Timers, Timers, float] | None = None
    profile: tuple[Profile, Profile] | None = None


def users_and_events(
    pool: Any, dsn: str, size: str, n: int, seed_value: int, day: date, head_by: str = "summary"
) -> tuple[list[uuid.UUID], list[dict[str, Any]]]:
    source = SEED_SOURCES[head_by]
    users = seed_small(pool, n, seed_value) if size == "small" else seed_large(pool, dsn, n, seed_value, source)
    return users, sqs_events(users, day, seed_value)


def run_size(
    size: str, dsn: str, services: WorkerServices, floor: Floor, args: argparse.Namespace, sink: LineSink
) -> SizeResult:
    pool = services.store.recorder.pool  # type: ignore[attr-defined]
    day = SMALL_DAY if size == "small" else LARGE_DAY
    version = 1 if size == "small" else 2
    base = 100 if size == "small" else 200
    t0 = time.perf_counter()
    progress(f"{size}: seeding {args.users:,} + {args.users:,} users")
    seeded = functools.partial(users_and_events, pool, dsn, size, day=day, head_by=args.head_by)
    w_users, w_events = seeded(args.users, base + 1)
    f_users, f_events = seeded(args.users, base + 2)
    t_w_users, t_w_events = seeded(args.trace_users, base + 3)
    t_f_users, t_f_events = seeded(args.trace_users, base + 4)
    if args.profile:
        timed_w_users, timed_w_events = seeded(args.profile_users, base + 5)
        timed_f_users, timed_f_events = seeded(args.profile_users, base + 6)
        if has_pyinstrument():
            p_w_users, p_w_events = seeded(args.profile_users, base + 7)
            p_f_users, p_f_events = seeded(args.profile_users, base + 8)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT count(*)::float / %s FROM user_activity WHERE user_id = ANY(%s)", (len(w_users), w_users)
        ).fetchone()
        activities = row[0] if row else 0.0
    progress(f"{size}: seeded in {time.perf_counter() - t0:.0f} s; round trips (also the warm-up)")
    trips = round_trips(services, floor, t_w_events, t_f_events)
    progress(f"{size}: measured run")
    lines_before = sink.lines
    run = measured_run(services, floor, w_events, f_events)
    log_lines = sink.lines - lines_before
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = SizeResult(
        label=size,
        run=run,
        trips=trips,
        docs=document_stats(dsn, w_users, version),
        floor_docs=document_stats(dsn, f_users, version),
        activities=activities,
        rss_mb=rss_mb,
        log_lines=log_lines,
    )
    if args.profile:
        progress(f"{size}: timed breakdown ({args.profile_users:,} users each)")
        result.timed = timed_passes(services, floor, timed_w_events, timed_f_events)
        if has_pyinstrument():
            progress(f"{size}: sampled profile ({args.profile_users:,} users each)")
            result.profile = profile_passes(services, floor, p_w_events, p_f_events)
    return result


def has_pyinstrument() -> bool:
    try:
        import pyinstrument  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000, help="users per run, worker and floor each")
    parser.add_argument("--sizes", default="small,10kb", help="comma-separated: small, 10kb")
    parser.add_argument("--trace-users", type=int, default=110, help="users whose round trips are counted")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time the steps of separate passes, and sample them with pyinstrument when it is installed",
    )
    parser.add_argument("--profile-users", type=int, default=2000)
    parser.add_argument(
        "--llm-concurrency",
        type=int,
        default=1,
        help="LLM_CONCURRENCY, with a pool of as many connections (1: one connection, as before the setting)",
    )
    parser.add_argument(
        "--head-by",
        choices=sorted(SEED_SOURCES),
        default="summary",
        help="who wrote version 1 of the ~10 KB memories: last night's summary, or a person (one more read each)",
    )
    args = parser.parse_args()
    if args.profile and args.llm_concurrency > 1:
        parser.error("--profile times the steps of one thread: use it with --llm-concurrency 1")
    for n in (args.users, args.trace_users, args.profile_users):
        if n % RECORDS_PER_EVENT or n < 2 * RECORDS_PER_EVENT:
            parser.error(f"user counts must be multiples of {RECORDS_PER_EVENT}, at least {2 * RECORDS_PER_EVENT}")

    dsn = fresh_database("user_memory_bench_worker")
    settings = WorkerSettings.from_env({}, database_url=dsn, summarizer="rules", llm_concurrency=args.llm_concurrency)
    pool = open_pool(dsn, size=args.llm_concurrency)  # one connection per lane, all opened at once
    services = build_worker(settings, pool=pool)
    floor = Floor(dsn, RuleBasedSummarizer(), settings.max_activities_per_run)
    sink = LineSink()
    route_logs(sink)
    results = [run_size(size, dsn, services, floor, args, sink) for size in args.sizes.split(",")]
    route_logs(sys.stdout)
    floor.conn.close()
    pool.close()

    print(
        f"\nWorker benchmark: handler on SQS-shaped events ({RECORDS_PER_EVENT} records each, one user per "
        f"message), rule-based summarizer, embedded PostgreSQL, no moto; LLM_CONCURRENCY={services.concurrency}"
    )
    print("Powertools: POWERTOOLS_METRICS_DISABLED=true, POWERTOOLS_TRACE_DISABLED=true, POWERTOOLS_LOG_LEVEL=INFO")
    print(
        "floor: the adapter's head + run key query, its activity query, the same summarizer call, "
        "jsonpatch.make_patch, user_memory_append with the run key and a provenance record and no item rows "
        "(the adapter's statement), then the index's catch-up (the adapter's statement), plain connection"
    )
    print(
        "CPU: this process's thread and the side's PostgreSQL backend (/proc/<pid>/schedstat), which other "
        "load on the machine does not stretch as it stretches wall time"
    )
    print(
        f"\n{'documents':<10}{'':<8}{'users':>8}{'seconds':>10}{'users/s':>10}{'ms/user':>10}{'trips/user':>12}"
        f"{'CPU ms/user':>13}{'(python':>9}{'+ server)':>10}"
    )
    for r in results:
        for who, side, trips in (("worker", r.run.worker, r.trips[0]), ("floor", r.run.floor, r.trips[1])):
            s, n = sum(side.wall), r.run.users
            py, pg = sum(side.python_cpu) / n * 1000, sum(side.server_cpu) / n * 1000
            print(
                f"{r.label:<10}{who:<8}{n:>8,}{s:>10.1f}{n / s:>10.0f}{s / n * 1000:>10.3f}{trips:>12.1f}"
                f"{py + pg:>13.3f}{py:>9.3f}{pg:>10.3f}"
            )
        ratio = r.run.floor_s / r.run.worker_s
        cpu_ratio = r.run.floor.cpu / r.run.worker.cpu
        print(
            f"{r.label:<10}{'ratio':<8}{'worker/floor throughput':>28} = {ratio:.1%}  (target >= 80%); "
            f"by CPU time {cpu_ratio:.1%}"
        )
    print("\nper run")
    for r in results:
        wb, wa, wp, wv = r.docs
        fb, fa, fp, fv = r.floor_docs
        w_p50 = statistics.median(r.run.worker_events) * 1000
        f_p50 = statistics.median(r.run.floor_events) * 1000
        print(
            f"  {r.label}: {r.activities:.1f} activities/user; document {wb:,.0f} -> {wa:,.0f} B, patch {wp:,.0f} B "
            f"({wp / wa:.1%} of the document), provenance + source {wv:,.0f} B; floor wrote {fb:,.0f} -> "
            f"{fa:,.0f} B, patch {fp:,.0f} B, provenance + source {fv:,.0f} B"
        )
        print(
            f"  {r.label}: event (10 users) p50 worker {w_p50:.1f} ms, floor {f_p50:.1f} ms; "
            f"{r.log_lines / len(r.run.worker_events):.1f} log lines per invocation; max RSS {r.rss_mb:.0f} MB"
        )
    print("\nsummary (ratio = floor / worker):")
    for r in results:
        print(
            f"  {r.label} users={r.run.users} wall={r.run.floor_s / r.run.worker_s:.4f} "
            f"cpu={r.run.floor.cpu / r.run.worker.cpu:.4f} worker_ms={r.run.worker_s / r.run.users * 1000:.3f} "
            f"floor_ms={r.run.floor_s / r.run.users * 1000:.3f} load1={os.getloadavg()[0]:.2f}"
        )
    for r in results:
        if r.timed:
            measured = (r.run.worker_s / r.run.users * 1000, r.run.floor_s / r.run.users * 1000)
            print_timed(f"Where the time goes, {r.label} documents", *r.timed, args.profile_users, measured)
        if r.profile:
            print_profile(f"Sampled profile, {r.label} documents (pyinstrument, 1 ms samples)", *r.profile)
        elif r.timed:
            print("\n(no sampled profile: pyinstrument is not installed; .venv/bin/pip install pyinstrument)")


if __name__ == "__main__":
    main()

"""The nightly run at scale, time-compressed: fan-out, queue, N concurrent worker invocations, PostgreSQL.

What is real: the fan-out and worker handlers (`user_memory_functions.*.app.handler`, composed
with `runtime.build_fanout`/`build_worker` as the end-to-end tests' Stack does), moto's SQS (the
worker queue and its DLQ as template.yaml declares them), Lambda's SQS event source
(`user_memory_local.poller.LambdaSqsPoller`: batches, partial batch failures, visibility, DLQ),
the `openai` client and the adapters' retry loop and Retry-After gate, and the embedded
PostgreSQL: every row is written as in production, and its time is not compressed.

What is scripted: the model (`model.ScriptedModel`, behaving: it answers the correct edits for
the day in the prompt) served over HTTP with a latency drawn per call from a log-normal spread
(p50 1.5 s, p99 8 s by default) and an occasional 429 with Retry-After, every wait divided by
`compression`. Wall times are reported as measured and multiplied back by `compression`; the
second figure is what the LLM-bound part would take at real latencies, and overstates whatever
was bound by the database or the CPU (not compressed).

Each of the N invocation threads plays one concurrent Lambda invocation of the worker: an
execution environment of its own (its WorkerServices: pool of up to LLM_CONCURRENCY connections,
its openai client) polling the queue with the template's batch size until the queue is empty.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Any

import boto3
import psycopg
from moto import mock_aws
from user_memory.adapters.postgres import PostgresActivity, open_pool
from user_memory.config import FanoutSettings, WorkerSettings
from user_memory.domain.model import Activity
from user_memory.domain.plan import Plan
from user_memory.observability import metrics
from user_memory.runtime import build_fanout, build_worker
from user_memory_functions.fanout.app import handler as fanout_handler
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues

from tests.fake_http import JsonHandler, serving

from .fast_moto import linear_sqs
from .model import Rates, ScriptedModel
from .tokens import load_tokenizer

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


@dataclass(frozen=True)
class Latency:
    """The scripted endpoint's timing, in real seconds (divided by `compression` when served)."""

    p50: float = 1.5
    p99: float = 8.0
    rate_429: float = 0.01  # share of calls answered 429 instead
    retry_after: float = 2.0  # the Retry-After a 429 carries
    compression: float = 50.0

    def draw(self, rng: random.Random) -> float:
        """One call's latency in real seconds: log-normal with this p50 and p99."""
        sigma = math.log(self.p99 / self.p50) / Z99
        return self.p50 * math.exp(rng.gauss(0.0, sigma))

    def slowest_of(self, k: int, samples: int = 20_000, seed: int = 0) -> float:
        """The expected slowest of `k` calls at once (real seconds): an invocation's users run
        together, and the invocation ends with its slowest."""
        rng = random.Random(seed)
        return sum(max(self.draw(rng) for _ in range(k)) for _ in range(samples)) / samples

    @property
    def mean(self) -> float:
        sigma = math.log(self.p99 / self.p50) / Z99
        return self.p50 * math.exp(sigma * sigma / 2)


@dataclass
class Endpoint:
    """What the served model saw: calls answered, 429s sent, most in flight at once."""

    calls: int = 0
    answered_429: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def serve_model(model: ScriptedModel, latency: Latency, seed: int) -> Iterator[tuple[str, Endpoint]]:
    """`model` over HTTP on 127.0.0.1 with `latency`'s spread and 429s (compressed); (base URL, tally)."""
    endpoint = Endpoint()
    rng = random.Random(seed)
    rng_lock = threading.Lock()

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # http.server's name
            request = self.read_json()
            with rng_lock:
                wait, limited = latency.draw(rng), rng.random() < latency.rate_429
            with endpoint.lock:
                endpoint.in_flight += 1
                endpoint.max_in_flight = max(endpoint.max_in_flight, endpoint.in_flight)
            try:
                if limited:
                    with endpoint.lock:
                        endpoint.answered_429 += 1
                    # retry-after-ms: the compressed Retry-After (the client honours either header)
                    ms = str(max(1, round(latency.retry_after * 1000 / latency.compression)))
                    body = json.dumps({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}})
                    self.send_json(429, body.encode(), {"retry-after-ms": ms})
                    return
                time.sleep(wait / latency.compression)
                try:
                    status, payload = 200, model.answer(request)
                except Exception as err:  # a request the model cannot read is a 400, as OpenAI's are
                    model.errors.append(f"{type(err).__name__}: {err}")
                    status, payload = 400, {"error": {"message": f"{type(err).__name__}: {err}"}}
                with endpoint.lock:
                    endpoint.calls += 1
                self.send_json(status, json.dumps(payload).encode())
            finally:
                with endpoint.lock:
                    endpoint.in_flight -= 1

    with serving(Handler) as url:
        yield url, endpoint


class LockedSqs:
    """A boto3 SQS client whose calls run one at a time: moto's in-memory queues are not written
    for concurrent callers (N invocation threads and the worker's own re-sends)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


STEPS = [
    ("part_named", {"part_id": "planner", "name": "Planner"}),
    ("goal_set", {"part_id": "planner", "goal": "plan the week"}),
    ("session", {}),
]


def seed_users(dsn: str, users: int, day: date, chunk: int = 5000) -> list[uuid.UUID]:
    """`users` new users, each with a day of activity on `day` (a part named, its goal, a session)."""
    ids = [uuid.uuid4() for _ in range(users)]
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    pool = open_pool(dsn, max_size=2)
    try:
        store = PostgresActivity(pool)
        for i in range(0, users, chunk):
            store.record(
                Activity(
                    user_id=u,
                    occurred_at=start + timedelta(hours=2 + k),
                    kind=kind,
                    payload=payload,
                    source="sim-scale",
                    external_id=f"{u}:{k}",
                )
                for u in ids[i : i + chunk]
                for k, (kind, payload) in enumerate(STEPS)
            )
    finally:
        pool.close()
    return ids


class DatabaseProbe:
    """The database's side of the run: WAL written, backends' CPU, connections in use (sampled)."""

    def __init__(self, dsn: str, interval: float = 0.2) -> None:
        self.dsn = dsn
        self.interval = interval
        self.peak_connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            self.database = str(conn.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        self.postmaster = _ppid(pid)
        self._wal0 = 0
        self._cpu0: float | None = None
        self.wal_bytes = 0
        self.cpu_seconds: float | None = None

    def _lsn(self) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]

    def start(self) -> None:
        self._lsn0 = self._lsn()
        self._cpu0 = server_cpu_seconds(self.postmaster)
        self._thread.start()

    def _sample(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(self.interval):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.database,),
                ).fetchone()
                self.peak_connections = max(self.peak_connections, int(row[0]) if row else 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        cpu1 = server_cpu_seconds(self.postmaster)
        self.cpu_seconds = cpu1 - self._cpu0 if cpu1 is not None and self._cpu0 is not None else None
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (self._lsn0,)).fetchone()
        self.wal_bytes = int(row[0]) if row else 0


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # the fields after the command name


def _ppid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def server_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU seconds of the PostgreSQL server: the postmaster with its reaped children, and its live
    children (backends, WAL writer, checkpointer); None where /proc cannot say (another host)."""
    if postmaster is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    own = _stat(postmaster)
    if own is None:
        return None
    total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / tick


@dataclass
class Result:
    """One simulated night."""

    users: int
    invocations: int
    llm_concurrency: int
    batch_size: int
    users_per_message: int
    compression: float
    drain_seconds: float  # measured, compressed
    written: int  # users with one version for the run key
    lost: int  # seeded users with no version for the run key
    twice: int  # users with more than one version for the run key
    dlq: int
    worker_invocations: int
    failed_attempts: int
    llm_calls: int
    answered_429: int
    max_llm_in_flight: int
    peak_connections: int
    wal_bytes: int
    db_cpu_seconds: float | None
    harness_cpu_seconds: float
    model_errors: list[str] = field(default_factory=list)

    @property
    def simulated_drain_seconds(self) -> float:
        """The drain time at real LLM latencies (the measured wall time times the compression)."""
        return self.drain_seconds * self.compression

    @property
    def appends_per_second(self) -> float:
        return self.written / self.drain_seconds

    def per_user(self, value: float) -> float:
        return value / max(1, self.written)


def count_versions(dsn: str, run_key: str, users: list[uuid.UUID]) -> tuple[int, int, int]:
    """(written once, lost, written twice) of `users` for `run_key`."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT user_id, count(*) FROM user_memory_snapshots WHERE idempotency_key = %s GROUP BY user_id",
            (run_key,),
        ).fetchall()
    counts = {r[0]: int(r[1]) for r in rows}
    once = sum(1 for u in users if counts.get(u) == 1)
    lost = sum(1 for u in users if u not in counts)
    twice = sum(1 for n in counts.values() if n > 1)
    return once, lost, twice


def simulate(
    dsn: str,
    *,
    users: int,
    invocations: int,
    latency: Latency | None = None,
    llm_concurrency: int = 10,
    batch_size: int = 10,
    users_per_message: int = 1,
    day: date = date(2026, 11, 21),
    seed: int = 22,
    on_progress: Callable[[str], None] | None = None,
) -> Result:
    """Seed `users` active on `day`, fan out that day, drain the queue with `invocations`
    concurrent worker invocations; what it took and what it wrote."""
    latency = latency or Latency()
    say = on_progress or (lambda _: None)
    t0 = time.perf_counter()
    seeded = seed_users(dsn, users, day)
    say(f"seeded {users:,} users in {time.perf_counter() - t0:.1f} s")
    model = ScriptedModel(seed, Rates.none(), load_tokenizer(estimate=True))
    with mock_aws(), linear_sqs(), serve_model(model, latency, seed) as (url, endpoint):
        sqs = LockedSqs(boto3.client("sqs", region_name="us-east-1"))
        queue_url, dlq_url = create_queues(sqs, name=f"sim-{uuid.uuid4().hex[:8]}")
        fanout_settings = FanoutSettings.from_env(
            {},
            database_url=dsn,
            queue_url=queue_url,
            users_per_message=users_per_message,
            worker_maximum_concurrency=max(2, invocations),
            worker_batch_size=batch_size,
            llm_concurrency=llm_concurrency,
        )
        fanout = build_fanout(fanout_settings, sqs_client=sqs)
        try:
            answer = fanout_handler(
                {"date": day.isoformat()}, FakeLambdaContext(function_name="fanout"), services=fanout
            )
        finally:
            fanout.close()
        run_key = f"daily:{day.isoformat()}"
        say(f"fanned out: {answer}")
        worker_settings = WorkerSettings.from_env(
            {},
            database_url=dsn,
            summarizer="openai",
            openai_base_url=url,
            openai_api_key="sim",
            queue_url=queue_url,
            llm_concurrency=llm_concurrency,
        )
        environments = [build_worker(worker_settings, sqs_client=sqs) for _ in range(invocations)]
        pollers = [
            LambdaSqsPoller(sqs, queue_url, dlq_url, partial(worker_handler, services=s), batch_size=batch_size)
            for s in environments
        ]
        probe = DatabaseProbe(dsn)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        probe.start()
        start = time.perf_counter()
        errors: list[BaseException] = []

        def drain(poller: LambdaSqsPoller) -> None:
            try:
                poller.drain()
            except BaseException as err:  # surfaced after the join
                errors.append(err)

        threads = [threading.Thread(target=drain, args=(p,)) for p in pollers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # A record left invisible by a failed invocation comes back at once (the poller sets its
        # visibility to 0); a last pass catches what came back after the others stopped.
        while pollers[0].poll_once():
            pass
        drain_seconds = time.perf_counter() - start
        probe.stop()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        metrics.clear_metrics()
        for s in environments:
            s.close()
        if errors:
            raise errors[0]
        dlq = int(
            sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
        )
    once, lost, twice = count_versions(dsn, run_key, seeded)
    return Result(
        users=users,
        invocations=invocations,
        llm_concurrency=llm_concurrency,
        batch_size=batch_size,
        users_per_message=users_per_message,
        compression=latency.compression,
        drain_seconds=drain_seconds,
        written=once,
        lost=lost,
        twice=twice,
        dlq=dlq,
        worker_invocations=sum(p.report.invocations for p in pollers),
        failed_attempts=sum(p.report.failed_attempts for p in pollers),
        llm_calls=endpoint.calls,
        answered_429=endpoint.answered_429,
        max_llm_in_flight=endpoint.max_in_flight,
        peak_connections=probe.peak_connections,
        wal_bytes=probe.wal_bytes,
        db_cpu_seconds=probe.cpu_seconds,
        harness_cpu_seconds=(cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
        model_errors=list(model.errors),
    )


@dataclass(frozen=True)
class AtScale:
    """The database load a planned deployment needs, from a run's figures per user."""

    plan: Plan
    appends_per_second: float
    wal_bytes_per_second: float
    db_cpu_cores: float | None
    connections: int  # the plan's worker connections at peak (invocations x LLM_CONCURRENCY)


def at_scale(result: Result, plan: Plan) -> AtScale:
    """`result`'s per-user database work at `plan`'s drain rate (users a second at full concurrency)."""
    rate = plan.users_per_second
    cpu = result.per_user(result.db_cpu_seconds) * rate if result.db_cpu_seconds is not None else None
    return AtScale(
        plan=plan,
        appends_per_second=rate,  # one version a user
        wal_bytes_per_second=result.per_user(result.wal_bytes) * rate,
        db_cpu_cores=cpu,
        connections=plan.worker_concurrency * plan.llm_concurrency,
    )

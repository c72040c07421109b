"""`user-memory demo`: the daily job end to end on local stand-ins.

PostgreSQL (embedded or given), moto's SQS, the real fan-out and worker handlers called with
services composed here, and the poller that plays Lambda's SQS event source. The caller (the
CLI, a test) composes the stack and hands in the handlers; `run_demo` seeds, fans out, drains
the queue and prints the report.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, TextIO

from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import PostgresActivity, open_pool
from user_memory.adapters.sqs import SQS_BATCH
from user_memory.config import FanoutSettings, WorkerSettings
from user_memory.domain.fanout import plan_from_event
from user_memory.domain.model import Activity
from user_memory.domain.ports import QueueSender, Summarizer
from user_memory.runtime import FanoutServices, WorkerServices, build_fanout, build_worker

from user_memory_local.command import cli_command
from user_memory_local.logs import service_logs_to
from user_memory_local.poller import MAX_RECEIVE_COUNT, FakeLambdaContext, Handler, LambdaSqsPoller, create_queues

# A handler as the demo calls it: `handler(event, context, services=...)`.
ServicesHandler = Callable[..., Any]

REGION = "us-east-1"
DEMO_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4b7a-9a51-0d4c1b2e7f10")
SEED_CHUNK = 100  # users recorded per transaction while seeding
# FanoutSettings require a queue URL; the demo's queue exists only once moto runs, so the
# settings are checked with this stand-in and get the real URL in local_stack().
PENDING_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/created-by-the-demo"

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


# -- the environment the handlers see ------------------------------------------------------------


def prepare_environment() -> None:
    """Environment defaults for running the handlers locally; call before importing them.

    Powertools reads the log level when `user_memory.observability` creates its Logger, i.e.
    when a handler module is first imported (the tracer switch matters only with
    XRAY_SDK_TRACING). The metrics
    switch is read at every flush, but it does not stop metrics from accumulating: see
    `quiet_metrics`. Values already set in the environment win.
    """
    for name, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ.setdefault(name, value)


def quiet_metrics(handler: Handler) -> Handler:
    """The handler, with the metrics dropped before and after each invocation instead of printed.

    With POWERTOOLS_METRICS_DISABLED, `log_metrics` neither prints nor clears the metric set,
    and the set is shared by every Metrics instance in the process. Values then pile up across
    invocations until one metric holds 100, when `add_metric` prints the EMF blob to stdout
    whatever the switch says (and an empty set makes every flush warn). Clearing the set
    around each invocation does what a flush does, minus the print.
    """
    from user_memory.observability import metrics

    @functools.wraps(handler)
    def invoke(event: dict[str, Any], context: Any) -> Any:
        metrics.clear_metrics()
        try:
            return handler(event, context)
        finally:
            metrics.clear_metrics()

    return invoke


# -- demo data -----------------------------------------------------------------------------------


def demo_user_id(n: int, seed_value: int = 42) -> uuid.UUID:
    """The n-th demo user's id: the same for the same seed, run after run."""
    return uuid.uuid5(DEMO_NAMESPACE, f"{seed_value}:user-{n}")


def _user_day(rng: random.Random, uid: uuid.UUID, day: date) -> list[Activity]:
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    # About one user in eight was active only the day before and not summarized since: the
    # fan-out finds unsummarized activity, so today's run picks that user up too.
    offset = timedelta(days=-1) if rng.random() < 0.125 else timedelta(0)
    activities = []
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
        activities.append(
            Activity(
                user_id=uid,
                occurred_at=at,
                kind=kind,
                payload=payloads[kind],
                source="demo",
                external_id=f"{uid}:{(start + offset).date()}:{i}",
            )
        )
    return activities


def seed(
    pool: ConnectionPool,
    users: int,
    day: date,
    *,
    seed_value: int = 42,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Create `users` demo users with a varied, deterministic day of activity; return how many
    activities the day has. Seeding the same day again records nothing new (same external ids).

    `progress(users_done, new_activities)` is called after each chunk of users is recorded.
    """
    rng = random.Random(f"{seed_value}:{day.isoformat()}")
    activity = PostgresActivity(pool)
    total = 0
    for first in range(0, users, SEED_CHUNK):
        ids = [demo_user_id(n, seed_value) for n in range(first, min(users, first + SEED_CHUNK))]
        with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany("INSERT INTO users (id) VALUES (%s) ON CONFLICT DO NOTHING", [(u,) for u in ids])
        chunk = [a for uid in ids for a in _user_day(rng, uid, day)]
        new = activity.record(chunk)
        total += len(chunk)
        if progress is not None:
            progress(len(ids), new)
    return total


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
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:123456789012:rule/user-memory-daily"],
        "detail": {},
    }


# -- the local stack -----------------------------------------------------------------------------


def demo_settings(
    *, summarizer: str | None = None, environ: dict[str, str] | None = None
) -> tuple[WorkerSettings, FanoutSettings]:
    """Both functions' settings from the environment, checked before anything is started or
    written (ConfigError names every invalid variable). The fan-out's queue is set later."""
    worker = WorkerSettings.from_env(environ, summarizer=summarizer)
    fanout = FanoutSettings.from_env(environ, queue_url=PENDING_QUEUE_URL)
    return worker, fanout


@dataclass(frozen=True, kw_only=True)
class LocalStack:
    """What the demo runs on: a pool, moto's worker queue and DLQ, and both functions' services."""

    pool: ConnectionPool
    sqs: Any
    queue_url: str
    dlq_url: str
    fanout_services: FanoutServices
    worker_services: WorkerServices
    max_receive_count: int = MAX_RECEIVE_COUNT


@contextmanager
def local_stack(
    dsn: str,
    *,
    worker_settings: WorkerSettings,
    fanout_settings: FanoutSettings,
    summarizer: Summarizer | None = None,
    max_receive_count: int = MAX_RECEIVE_COUNT,
) -> Iterator[LocalStack]:
    """Compose the services over one pool and moto's SQS (active while the block runs).

    `dsn` replaces the settings' database URL and moto's queue their queue URL; the
    summarizer is built from the settings unless given.
    """
    import boto3
    from moto import mock_aws

    pool = open_pool(dsn, size=2)
    try:
        with mock_aws():
            sqs = boto3.client("sqs", region_name=REGION)
            queue_url, dlq_url = create_queues(sqs, max_receive_count=max_receive_count)
            fanout_settings = FanoutSettings.model_validate(
                {**fanout_settings.model_dump(), "queue_url": queue_url, "database_url": dsn}
            )
            # The worker re-sends conversations that failed to its own queue (moto's, here).
            worker_settings = WorkerSettings.model_validate(
                {**worker_settings.model_dump(), "database_url": dsn, "queue_url": queue_url}
            )
            yield LocalStack(
                pool=pool,
                sqs=sqs,
                queue_url=queue_url,
                dlq_url=dlq_url,
                fanout_services=build_fanout(fanout_settings, sqs_client=sqs, pool=pool),
                worker_services=build_worker(worker_settings, summarizer=summarizer, pool=pool, sqs_client=sqs),
                max_receive_count=max_receive_count,
            )
    finally:
        pool.close()


class _ProgressSender:
    """The fan-out's sender, reporting each SQS call's sent messages so progress moves per call."""

    def __init__(self, inner: QueueSender, on_sent: Callable[[int], Any]) -> None:
        self._inner = inner
        self._on_sent = on_sent

    @property
    def calls(self) -> int:
        return self._inner.calls

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        sent = 0
        for i in range(0, len(bodies), SQS_BATCH):
            n = self._inner.send(bodies[i : i + SQS_BATCH], delay_seconds=delay_seconds)
            sent += n
            self._on_sent(n)
        return sent


# -- the run -------------------------------------------------------------------------------------


def _scalar(pool: ConnectionPool, query: str, params: tuple[Any, ...]) -> int:
    with pool.connection() as conn:
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _versions(pool: ConnectionPool, run_key: str) -> int:
    return _scalar(pool, "SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,))


def _unsummarized(pool: ConnectionPool, before: datetime) -> int:
    return _scalar(
        pool, "SELECT count(*) FROM user_activity WHERE summarized_version IS NULL AND occurred_at < %s", (before,)
    )


def _dead_letters(sqs: Any, dlq_url: str) -> tuple[int, int]:
    """(messages, users named in them) in the DLQ; the messages stay hidden afterwards."""
    messages = users = 0
    while True:
        batch = sqs.receive_message(
            QueueUrl=dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=3600, WaitTimeSeconds=0
        ).get("Messages", [])
        if not batch:
            return messages, users
        for m in batch:
            messages += 1
            with suppress(ValueError, AttributeError):  # a malformed body names no users
                users += len(json.loads(m["Body"]).get("user_ids") or [])


def run_demo(
    stack: LocalStack,
    *,
    fanout_handler: ServicesHandler,
    worker_handler: ServicesHandler,
    users: int = 200,
    day: date | None = None,
    progress: bool = True,
    out: TextIO | None = None,
    seed_value: int = 42,
) -> int:
    """Seed `users` demo users for `day` (default: yesterday, UTC), run the fan-out handler on the
    scheduled event, drain the queue through the worker handler, print the report to `out`.

    The handlers are called with `services=` from `stack`. Returns 0 when nothing ended in the
    DLQ, else 1. Progress bars go to stderr unless `progress` is false.
    """
    from tqdm import tqdm

    out = out or sys.stdout
    day = day or (datetime.now(UTC) - timedelta(days=1)).date()
    event = scheduled_event(day)
    # The run key and window as the fan-out will derive them (WINDOW_HOURS may differ from 24).
    plan = plan_from_event(event, window_hours=stack.fanout_services.settings.window_hours)
    run_key, window_end = plan.run_key, plan.window.end
    bar = functools.partial(tqdm, file=sys.stderr, leave=False, disable=not progress, dynamic_ncols=True)
    started = time.perf_counter()

    with warnings.catch_warnings(), service_logs_to(sys.stderr):
        # An invocation that added no metric makes Powertools warn at its flush.
        warnings.filterwarnings("ignore", message="No application metrics to publish")

        new_activities = 0
        with bar(total=users, unit="user", desc="seed") as seeding:

            def seeded(n: int, new: int) -> None:
                nonlocal new_activities
                new_activities += new
                seeding.update(n)

            n_activities = seed(stack.pool, users, day, seed_value=seed_value, progress=seeded)

        versions_before = _versions(stack.pool, run_key)
        unsummarized_before = _unsummarized(stack.pool, window_end)

        with bar(unit="msg", desc="fan-out") as sending:
            fanout_services = dataclasses.replace(
                stack.fanout_services, sender=_ProgressSender(stack.fanout_services.sender, sending.update)
            )
            fanout = quiet_metrics(functools.partial(fanout_handler, services=fanout_services))
            summary = fanout(event, FakeLambdaContext(function_name="fanout", timeout_seconds=300))

        worker = quiet_metrics(functools.partial(worker_handler, services=stack.worker_services))
        poller = LambdaSqsPoller(
            stack.sqs, stack.queue_url, stack.dlq_url, worker, max_receive_count=stack.max_receive_count
        )
        with bar(total=summary["messages"], unit="msg", desc="worker") as working:
            report = poller.drain(on_batch=lambda _n: working.update(_finished(poller) - working.n))

    dlq_messages, dlq_users = _dead_letters(stack.sqs, stack.dlq_url)
    written = _versions(stack.pool, run_key) - versions_before
    summarized = unsummarized_before - _unsummarized(stack.pool, window_end)
    wall = time.perf_counter() - started
    rows = [
        ("day", day.isoformat()),
        ("run key", run_key),
        ("summarizer", _summarizer_label(stack.worker_services.summarizer)),
        ("users seeded", f"{users:,}"),
        ("activities seeded", f"{n_activities:,} ({new_activities:,} new)"),
        ("users active (to summarize)", f"{summary['users']:,}"),
        ("messages sent", f"{summary['messages']:,}"),
        ("worker invocations", f"{report.invocations:,}"),
        ("versions written", f"{written:,}"),
        ("users skipped (done/unchanged)", f"{max(0, summary['users'] - written - dlq_users):,}"),
        ("activities summarized", f"{summarized:,}"),
        ("failed attempts", f"{report.failed_attempts:,}"),
        ("in DLQ", f"{dlq_messages:,}"),
        ("wall time", f"{wall:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\nuser-memory demo\n" + "-" * (width + 24), file=out)
    for k, v in rows:
        print(f"{k:<{width}}  {v}", file=out)
    _print_sample(stack, run_key, out)
    if dlq_messages:
        print(
            f"error: {dlq_messages:,} message(s) ended in the DLQ after {stack.max_receive_count} receives each; "
            "the worker's warnings above say why",
            file=sys.stderr,
        )
        return 1
    return 0


def _summarizer_label(summarizer: Summarizer) -> str:
    model = getattr(summarizer, "model", None)
    return f"{summarizer.name} ({model})" if model else summarizer.name


def _finished(poller: LambdaSqsPoller) -> int:
    """Messages the poller has finished with: deleted after success, or moved to the DLQ."""
    return poller.report.succeeded + poller.report.to_dlq


def _print_sample(stack: LocalStack, run_key: str, out: TextIO) -> None:
    """One user this run wrote, with its latest patch."""
    with stack.pool.connection() as conn:
        row = conn.execute(
            """SELECT user_id, version, patch, source_description, provenance FROM user_memory_snapshots
                WHERE idempotency_key = %s ORDER BY user_id LIMIT 1""",
            (run_key,),
        ).fetchone()
    if row is None:
        return
    user_id, version, patch, source, provenance = row
    document = stack.worker_services.store.at(user_id, version).document
    print(f"\nuser {user_id} at version {version} ({source})", file=out)
    print(json.dumps(document, indent=2, ensure_ascii=False), file=out)
    print("latest patch:", file=out)
    ops = [json.dumps(op, ensure_ascii=False) for op in patch]  # one operation a line
    print("[\n  " + ",\n  ".join(ops) + "\n]" if ops else "[]", file=out)
    edits = (provenance or {}).get("edits") or []
    print(f"why ({len(edits)} edits applied, {len((provenance or {}).get('refused') or [])} refused):", file=out)
    for e in edits:  # the reasons name activity by kind and id, never its content
        print(f"  {e['op']} {e['path']}: {e['reason']}", file=out)
    print(f"\nsee more: {cli_command()} history {user_id}", file=out)

"""`user-memory trigger-conversations`: the conversation-memory trigger, on a real queue or locally.

With a queue URL, the trigger sends GENERATE_MEMORY_BATCH messages to that queue (your AWS
credentials) and prints what it sent. Without one, it runs on the demo's local stand-ins: moto's
SQS, the real fan-out handler on the conversation-memory schedule's event, then the queue
drained through the real worker handler the way Lambda's SQS event source would (the messages
would otherwise vanish with moto when the command ends), and prints what was written.
`--seed N` first records N demo conversations that went quiet three hours ago.
"""

from __future__ import annotations

import functools
import json
import random
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from psycopg_pool import ConnectionPool
from user_memory.adapters.conversations import PostgresConversations
from user_memory.config import ConversationTriggerSettings, FanoutSettings, WorkerSettings
from user_memory.domain.conversations.model import NewMessage

SEED_NAMESPACE = uuid.UUID("3d8b1f0e-6a41-4c52-9a7e-5b0c2d1e4f60")
_EXCHANGES = [
    ("I'm training for a half marathon in March and my knee hurts after long runs.", "Let's lower the long run."),
    ("I prefer running in the morning before work.", "Mornings it is; keep the easy pace."),
    ("I'll try the new plan next week. Can you remind me to book a physio?", "I will remind you on Monday."),
    ("Thanks, that helps a lot!", "Glad it helps."),
    ("My manager keeps moving deadlines and I'm stressed.", "What would make this week manageable?"),
    ("I decided to block two focus hours every morning.", "Good plan; tell your team."),
    ("What should I cook for my sister's birthday?", "What does she like?"),
]


def seed_conversations(pool: ConnectionPool, n: int, *, quiet_since: datetime, seed_value: int = 7) -> int:
    """Record `n` demo conversations (4 to 8 messages each) whose last message is at `quiet_since`."""
    rng = random.Random(seed_value)
    messages: list[NewMessage] = []
    for i in range(n):
        user = uuid.uuid5(SEED_NAMESPACE, f"user-{i % max(1, n // 3)}")
        conversation = f"demo-conversation-{i}"
        turns = rng.sample(_EXCHANGES, k=rng.randint(2, 4))
        start = quiet_since - timedelta(minutes=2 * len(turns))
        for t, (said, answer) in enumerate(turns):
            for r, (role, text) in enumerate((("user", said), ("assistant", answer))):
                messages.append(
                    NewMessage(
                        user_id=user,
                        conversation_id=conversation,
                        message_id=f"{conversation}:{t}:{r}",
                        role=role,
                        text=text,
                        occurred_at=start + timedelta(minutes=2 * t + r),
                        source="demo",
                    )
                )
    store = PostgresConversations(pool)
    return sum(store.record(messages[i : i + 500]) for i in range(0, len(messages), 500))


def sqs_client(queue_url: str) -> Any:
    """A boto3 SQS client for the queue `queue_url` names (boto3's default credentials): an AWS
    queue's region comes from its URL, another endpoint's (LocalStack, ElasticMQ) from AWS_REGION
    or AWS_DEFAULT_REGION. ConfigError, one line, when the URL is not a queue's or no region is known."""
    import boto3
    from user_memory.adapters.sqs import parse_queue_url
    from user_memory.errors import ConfigError

    address = parse_queue_url(queue_url)
    if address.region is not None:
        return boto3.client("sqs", region_name=address.region)
    region = boto3.session.Session().region_name
    if not region:
        raise ConfigError(
            f"the queue's endpoint {address.endpoint_url} is not AWS's, so its URL names no region: "
            "set AWS_REGION (or AWS_DEFAULT_REGION)"
        )
    return boto3.client("sqs", region_name=region, endpoint_url=address.endpoint_url)


def trigger_on_queue(
    database_url: Callable[[], str], queue_url: str, settings: ConversationTriggerSettings
) -> dict[str, Any]:
    """The trigger against a real queue (boto3's default credentials; the region from the URL);
    `database_url()` gives the DSN, asked for once the queue is known to be one."""
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.sqs import SqsSender
    from user_memory.jobs.conversations import trigger_memory_generation

    client = sqs_client(queue_url)  # before the database: a bad URL or region fails first
    pool = open_pool(database_url())
    try:
        report = trigger_memory_generation(PostgresConversations(pool), SqsSender(queue_url, client), settings)
    finally:
        pool.close()
    return {"queue_url": queue_url, **report.as_dict()}


def trigger_locally(
    dsn: str,
    *,
    threshold_minutes: int | None,
    summarizer: str | None = None,
    seed: int = 0,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Seed (optionally), trigger through the fan-out handler on moto's SQS, drain the queue through
    the worker handler; returns the report (also the command's output)."""
    from user_memory_local import demo

    worker_settings = WorkerSettings.from_env(None, summarizer=summarizer, conversation_retry_delay_seconds=0)
    fanout_settings = FanoutSettings.from_env(
        None, queue_url=demo.PENDING_QUEUE_URL, inactivity_threshold_minutes=threshold_minutes
    )
    from user_memory.runtime import build_conversation_summarizer

    conversation_summarizer = build_conversation_summarizer(worker_settings)  # a bad key fails before any write
    demo.prepare_environment()
    from user_memory_functions.fanout.app import handler as fanout_handler
    from user_memory_functions.worker.app import handler as worker_handler

    from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller

    started = datetime.now(UTC)
    wall = time.perf_counter()
    with demo.local_stack(dsn, worker_settings=worker_settings, fanout_settings=fanout_settings) as stack:
        stack.worker_services.conversation_summarizer = conversation_summarizer
        seeded = seed_conversations(stack.pool, seed, quiet_since=started - timedelta(hours=3)) if seed else 0
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No application metrics to publish")
            fanout = demo.quiet_metrics(functools.partial(fanout_handler, services=stack.fanout_services))
            event: dict[str, Any] = {"task_type": "TRIGGER_MEMORY_GENERATION"}
            if threshold_minutes:
                event["threshold_minutes"] = threshold_minutes
            triggered = fanout(event, FakeLambdaContext(function_name="fanout", timeout_seconds=300))
            worker = demo.quiet_metrics(functools.partial(worker_handler, services=stack.worker_services))
            poller = LambdaSqsPoller(
                stack.sqs, stack.queue_url, stack.dlq_url, worker, max_receive_count=stack.max_receive_count
            )
            drained = poller.drain()
        with stack.pool.connection() as conn:
            row = conn.execute("SELECT count(*) FROM conversation_memories WHERE updated_at >= %s", (started,))
            written = int(row.fetchone()[0])  # type: ignore[index]
    report = {
        **{k: v for k, v in triggered.items() if k != "task_type"},
        "seeded_messages": seeded,
        "summarizer": conversation_summarizer.name,
        "worker_invocations": drained.invocations,
        "memories_written": written,
        "failed_attempts": drained.failed_attempts,
        "in_dlq": drained.to_dlq,
        "seconds": round(time.perf_counter() - wall, 2),
    }
    if out is not None:
        print(json.dumps(report, indent=2), file=out)
    return report

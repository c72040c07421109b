"""`user-memory refresh USER`: a user's refresh now (run key `ondemand:<time>`), on a real queue or
locally, rate-limited per user as `POST /admin/users/{id}/memory/refresh` (the operators' route).

With a queue URL, the refresh_user message goes to that queue (your AWS credentials) and the
command prints the refresh's answer: queued, or the one already queued within the interval. Without
one, it runs on the demo's local stand-ins: moto's SQS, then the queue drained through the real
worker handler the way Lambda's SQS event source would, and prints what was written.
"""

from __future__ import annotations

import functools
import uuid
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from user_memory.config import FanoutSettings, WorkerSettings


def _answer(queued: Any) -> dict[str, Any]:
    return {
        "user_id": str(queued.user_id),
        "run_key": queued.run_key,
        "status": queued.status,
        "requested_at": queued.requested_at.isoformat(),
        "next_allowed_at": queued.next_allowed_at.isoformat(),
    }


def refresh_on_queue(
    database_url: Callable[[], str], queue_url: str, user: uuid.UUID, *, interval_seconds: int
) -> dict[str, Any]:
    """The refresh queued on a real queue (boto3's default credentials; the region from the URL);
    `database_url()` gives the DSN, asked for once the queue is known to be one."""
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.refreshes import PostgresRefreshes
    from user_memory.adapters.sqs import SqsSender
    from user_memory.jobs.refresh import queue_refresh

    from user_memory_local.conversations import sqs_client

    client = sqs_client(queue_url)  # before the database: a bad URL or region fails first
    pool = open_pool(database_url())
    try:
        queued = queue_refresh(
            user,
            claims=PostgresRefreshes(pool),
            sender=SqsSender(queue_url, client),
            interval=timedelta(seconds=interval_seconds),
            by="operator",
        )
    finally:
        pool.close()
    return {"queue_url": queue_url, **_answer(queued)}


def refresh_locally(dsn: str, user: uuid.UUID, *, interval_seconds: int, summarizer: str | None) -> dict[str, Any]:
    """The refresh queued on moto's SQS and drained through the worker handler; its answer, and
    the user's head after it."""
    from user_memory.adapters.refreshes import PostgresRefreshes
    from user_memory.adapters.sqs import SqsSender
    from user_memory.jobs.refresh import queue_refresh
    from user_memory_functions.worker.app import handler as worker_handler

    from user_memory_local import demo
    from user_memory_local.poller import LambdaSqsPoller

    worker_settings = WorkerSettings.from_env(None, summarizer=summarizer)
    fanout_settings = FanoutSettings.from_env(None, queue_url=demo.PENDING_QUEUE_URL)
    demo.prepare_environment()
    with demo.local_stack(dsn, worker_settings=worker_settings, fanout_settings=fanout_settings) as stack:
        queued = queue_refresh(
            user,
            claims=PostgresRefreshes(stack.pool),
            sender=SqsSender(stack.queue_url, stack.sqs),
            interval=timedelta(seconds=interval_seconds),
            by="operator",
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No application metrics to publish")
            worker = demo.quiet_metrics(functools.partial(worker_handler, services=stack.worker_services))
            drained = LambdaSqsPoller(
                stack.sqs, stack.queue_url, stack.dlq_url, worker, max_receive_count=stack.max_receive_count
            ).drain()
        head = stack.worker_services.store.head(user)
    return {
        **_answer(queued),
        "version": head.version,
        "source": head.source,
        "worker_invocations": drained.invocations,
        "in_dlq": drained.to_dlq,
    }

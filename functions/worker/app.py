"""Worker Lambda: an SQS batch -> one run per user, activity recorded, or a batch of conversation memories;
partial batch response."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import WorkerSettings
from user_memory.jobs.worker import fail_all, process_batch
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import WorkerServices, build_worker

_services: WorkerServices | None = None


def _cold_start_services() -> WorkerServices:
    """Built on the first invocation and reused while the execution environment lives."""
    global _services
    if _services is None:
        _services = build_worker(WorkerSettings.from_env())
    return _services


@logger.inject_lambda_context(log_event=False)
@traced
@metrics.log_metrics
def handler(
    event: dict[str, Any], context: LambdaContext, services: WorkerServices | None = None
) -> PartialItemFailureResponse:
    """`services` is for callers that compose their own (tests, the local kit); Lambda passes none."""
    try:
        services = services or _cold_start_services()
    except Exception as err:  # no services (config, database): every record is reported failed
        return fail_all(event, err)
    return process_batch(event, context, services)

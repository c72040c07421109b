"""Retention Lambda: a daily scheduled event -> purge of expired and stale key-value entries, then
the search index's upkeep (reindex users left behind, purge orphaned vectors)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import RetentionSettings
from user_memory.jobs.retention import run_retention
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import RetentionServices, build_retention

_services: RetentionServices | None = None


def _cold_start_services() -> RetentionServices:
    """Built on the first invocation and reused while the execution environment lives."""
    global _services
    if _services is None:
        _services = build_retention(RetentionSettings.from_env())
    return _services


@logger.inject_lambda_context(log_event=False)
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext, services: RetentionServices | None = None) -> dict[str, Any]:
    """`services` is for callers that compose their own (tests, the local kit); Lambda passes none.

    The event's content is not used: the purge runs against the clock at the time it runs.
    """
    return run_retention(services or _cold_start_services)

"""The daily key-value retention job: purge expired and stale entries, log and count the outcome."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.errors import describe_failure
from user_memory.observability import logger, metrics
from user_memory.runtime import RetentionServices


def purge_kv(services: RetentionServices | Callable[[], RetentionServices]) -> dict[str, Any]:
    """Delete every key-value entry that has expired, or was not updated for KV_MAX_AGE_DAYS days.

    A failure (building the services included) is logged, counted and raised, so the invocation
    fails: EventBridge and Lambda retry it (the purge is idempotent), then the event goes to the
    schedule's dead-letter queue, and the errors alarm fires.
    """
    try:
        if callable(services):
            services = services()
        max_age_days = services.settings.kv_max_age_days
        started = time.perf_counter()
        deleted = services.kv.purge(max_age_days=max_age_days)
        seconds = time.perf_counter() - started
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("retention failed", error_type=error, reason=reason)
        metrics.add_metric(name="RetentionFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info("kv purged", deleted=deleted, max_age_days=max_age_days, seconds=round(seconds, 3))
    metrics.add_metric(name="KvEntriesPurged", unit=MetricUnit.Count, value=deleted)
    return {"deleted": deleted, "max_age_days": max_age_days}

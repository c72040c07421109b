"""Fan-out Lambda: a scheduled (or manual) event -> refresh_user messages; the conversation schedule's
event ({"task_type": "TRIGGER_MEMORY_GENERATION"}) -> GENERATE_MEMORY_BATCH messages for quiet conversations."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import FanoutSettings
from user_memory.jobs.fanout import fan_out
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import FanoutServices, build_fanout

_services: FanoutServices | None = None


def _cold_start_services() -> FanoutServices:
    """Built on the first invocation and reused while the execution environment lives."""
    global _services
    if _services is None:
        _services = build_fanout(FanoutSettings.from_env())
    return _services


@logger.inject_lambda_context(log_event=False)
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext, services: FanoutServices | None = None) -> dict[str, Any]:
    """`services` is for callers that compose their own (tests, the local kit); Lambda passes none."""
    return fan_out(event, services or _cold_start_services)

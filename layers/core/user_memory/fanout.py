"""The fan-out's job: plan from the event, queue the refresh messages, log and count the outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.domain.fanout import plan_from_event, run_fanout
from user_memory.errors import describe_failure
from user_memory.observability import logger, metrics
from user_memory.runtime import FanoutServices


def fan_out(event: object, services: FanoutServices | Callable[[], FanoutServices]) -> dict[str, Any]:
    """Queue refresh_user messages for the event's window; a failure (building the services
    included) is logged, counted and raised (EventBridge retries the invocation, then sends the
    event to the schedule's DLQ)."""
    try:
        if callable(services):
            services = services()
        settings = services.settings
        plan = plan_from_event(event, window_hours=settings.window_hours)
        report = run_fanout(
            plan,
            reader=services.activity,
            sender=services.sender,
            page_size=settings.fanout_page_size,
            users_per_message=settings.users_per_message,
        )
    except Exception as err:
        error, reason = describe_failure(err)
        event_id = event.get("id") if isinstance(event, dict) else None
        logger.error("fan-out failed", event_id=event_id, error=error, reason=reason)
        metrics.add_metric(name="FanoutFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info(
        "fan-out done",
        run_key=report.run_key,
        users=report.users,
        messages=report.messages,
        pages=report.pages,
        seconds=round(report.seconds, 3),
        send_calls=services.sender.calls,
    )
    metrics.add_metric(name="UsersFound", unit=MetricUnit.Count, value=report.users)
    metrics.add_metric(name="MessagesSent", unit=MetricUnit.Count, value=report.messages)
    metrics.add_metric(name="FanoutSeconds", unit=MetricUnit.Seconds, value=report.seconds)
    return report.as_dict()

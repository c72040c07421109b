"""The fan-out's job: plan from the event, queue the refresh messages, log and count the outcome.

Its conversation-memory schedule sends `{"task_type": "TRIGGER_MEMORY_GENERATION"}` (optionally
with `"threshold_minutes": N`): then it runs the conversation-memory trigger instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from user_memory.domain.fanout import Backlog, plan_from_event, run_fanout
from user_memory.domain.plan import backlog_limit
from user_memory.errors import FanoutRefused, InvalidEvent, describe_failure, describe_validation_error
from user_memory.jobs.conversations import TRIGGER_EVENT_TASK, is_trigger_event, trigger_memory_generation
from user_memory.observability import logger, metrics
from user_memory.runtime import FanoutServices


class TriggerEvent(BaseModel):
    """The conversation-memory schedule's event (template.yaml: the fan-out's ConversationMemories)."""

    model_config = ConfigDict(extra="forbid")
    task_type: str = Field(pattern=f"^{TRIGGER_EVENT_TASK}$")
    threshold_minutes: int | None = Field(default=None, ge=1, le=60 * 24 * 31)


def _trigger(event: dict[str, Any], services: FanoutServices) -> dict[str, Any]:
    try:
        request = TriggerEvent.model_validate(event)
    except ValidationError as err:
        raise InvalidEvent(f"invalid trigger event: {describe_validation_error(err)}") from err
    report = trigger_memory_generation(
        services.conversations, services.sender, services.settings, threshold_minutes=request.threshold_minutes
    )
    return {"task_type": TRIGGER_EVENT_TASK, **report.as_dict()}


def fan_out(event: object, services: FanoutServices | Callable[[], FanoutServices]) -> dict[str, Any]:
    """Queue refresh_user messages for the event's window; a failure (building the services
    included) is logged, counted and raised (EventBridge retries the invocation, then sends the
    event to the schedule's DLQ)."""
    try:
        if callable(services):
            services = services()
        settings = services.settings
        if is_trigger_event(event):
            return _trigger(event, services)  # type: ignore[arg-type]  # a dict: is_trigger_event checked
        plan = plan_from_event(event, window_hours=settings.window_hours)
        backlog = Backlog(
            waiting_messages=services.queue.backlog(),
            users_per_message=settings.users_per_message,
            users_per_second=settings.users_per_second(),
            limit_seconds=backlog_limit(settings.queue_retention_seconds),
        )
        report = run_fanout(
            plan,
            reader=services.activity,
            sender=services.sender,
            page_size=settings.fanout_page_size,
            users_per_message=settings.users_per_message,
            backlog=backlog,
        )
    except FanoutRefused as err:
        # Not a failure of the fan-out: the queue is too far behind (alarmed, apart from errors).
        logger.error(
            "fan-out refused",
            run_key=err.run_key,
            error=type(err).__name__,
            reason=str(err)[:300],
            waiting_messages=err.waiting_messages,
            users_queued=err.users_queued,
            drain_days=round(err.drain_days, 1),
        )
        metrics.add_metric(name="FanoutRefused", unit=MetricUnit.Count, value=1)
        raise
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

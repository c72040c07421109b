"""Fan-out Lambda: scheduled (or manual) event -> refresh_user messages on the worker queue."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import Settings
from user_memory.fanout import SqsSender, plan_from_event, run_fanout
from user_memory.observability import logger, metrics, tracer
from user_memory.runtime import Runtime

_runtime: Runtime | None = None


def runtime() -> Runtime:
    """Built on the first invocation and reused while the execution environment lives."""
    global _runtime
    if _runtime is None or not _runtime.usable:
        _runtime = Runtime.build(Settings.from_env(), summarizer=object())
    return _runtime


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rt = runtime()
    settings = rt.settings
    if not settings.queue_url:
        raise ValueError("QUEUE_URL is not set")
    plan = plan_from_event(event, window_hours=settings.window_hours)
    sender = SqsSender(settings.queue_url, rt.sqs)
    report = run_fanout(
        rt.conn,
        sender,
        plan,
        page_size=settings.fanout_page_size,
        users_per_message=settings.users_per_message,
    )
    logger.info(
        "fan-out done",
        run_key=plan.run_key,
        users=report.users,
        messages=report.messages,
        pages=report.pages,
        seconds=round(report.seconds, 3),
        send_calls=sender.calls,
    )
    metrics.add_metric(name="UsersFound", unit=MetricUnit.Count, value=report.users)
    metrics.add_metric(name="MessagesSent", unit=MetricUnit.Count, value=report.messages)
    metrics.add_metric(name="FanoutPages", unit=MetricUnit.Count, value=report.pages)
    metrics.add_metric(name="FanoutSeconds", unit=MetricUnit.Seconds, value=report.seconds)
    return {
        "run_key": plan.run_key,
        "window": {"start": plan.window.start.isoformat(), "end": plan.window.end.isoformat()},
        "users": report.users,
        "messages": report.messages,
        "pages": report.pages,
    }

"""Events Lambda: a schedule (every minute) -> the outbox's memory-changed events relayed to
EventBridge and to the operators' webhooks (jobs/events.py), each call ending before the
invocation's deadline."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.adapters.http_deadline import invocation_left, within
from user_memory.config import EventsSettings
from user_memory.jobs.events import relay_events, relay_failed
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import EventsServices, build_events

_services: EventsServices | None = None


def _cold_start_services() -> EventsServices:
    """Built on the first invocation and reused while the execution environment lives."""
    global _services
    if _services is None:
        _services = build_events(EventsSettings.from_env())
    return _services


@logger.inject_lambda_context(log_event=False)
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext, services: EventsServices | None = None) -> dict[str, Any]:
    """`services` is for callers that compose their own (tests, the local kit); Lambda passes none.

    The event's content is not used: the relay sends whatever the outbox holds.
    """
    try:
        built = services or _cold_start_services()
    except Exception as err:  # configuration, the database: logged and counted like a run's failure
        relay_failed(err)
        raise
    with within(invocation_left(context, built.settings.deadline_margin_ms / 1000)):
        return relay_events(built.relay)

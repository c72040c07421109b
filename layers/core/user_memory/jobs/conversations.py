"""The conversation-memory trigger: find the quiet conversations, queue their ids, log and count.

One function for every way it is started: the operators' API route
(`POST /tasks/trigger-memory-generation`), the fan-out function's optional schedule
(`{"task_type": "TRIGGER_MEMORY_GENERATION"}`) and `user-memory trigger-conversations`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.config import ConversationTriggerSettings
from user_memory.domain.conversations.ports import ConversationStore, Sender
from user_memory.domain.conversations.trigger import TriggerReport, run_trigger
from user_memory.errors import describe_failure
from user_memory.observability import logger, metrics

# The fan-out function's event for the conversation-memory schedule (template.yaml's Input).
TRIGGER_EVENT_TASK = "TRIGGER_MEMORY_GENERATION"


def is_trigger_event(event: object) -> bool:
    """The fan-out's conversation-memory event: {"task_type": "TRIGGER_MEMORY_GENERATION"}."""
    return isinstance(event, dict) and event.get("task_type") == TRIGGER_EVENT_TASK


def trigger_memory_generation(
    store: ConversationStore,
    sender: Sender,
    settings: ConversationTriggerSettings,
    *,
    threshold_minutes: int | None = None,
    now: datetime | None = None,
) -> TriggerReport:
    """Queue GENERATE_MEMORY_BATCH messages for every conversation quiet for longer than the
    threshold (INACTIVITY_THRESHOLD_MINUTES unless given) whose memory is missing or stale.

    Logged as `memory generation triggered` (counts, never ids) and counted in
    `ConversationsFound` and `MemoryBatchesSent`; a failure is logged as `memory trigger failed`,
    counted in `MemoryTriggerFailed` and raised (what was sent stays sent: sending the same ids
    again costs the worker a read, never a second memory).
    """
    minutes = threshold_minutes or settings.inactivity_threshold_minutes
    try:
        report = run_trigger(
            store,
            sender,
            threshold=timedelta(minutes=minutes),
            per_message=settings.conversations_per_message,
            page_size=settings.conversation_page_size,
            now=now,
        )
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("memory trigger failed", threshold_minutes=minutes, error=error, reason=reason)
        metrics.add_metric(name="MemoryTriggerFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info(
        "memory generation triggered",
        threshold_minutes=minutes,
        quiet_before=report.quiet_before.isoformat(),
        conversations=report.conversations,
        messages=report.messages,
        pages=report.pages,
        seconds=round(report.seconds, 3),
    )
    metrics.add_metric(name="ConversationsFound", unit=MetricUnit.Count, value=report.conversations)
    metrics.add_metric(name="MemoryBatchesSent", unit=MetricUnit.Count, value=report.messages)
    return report

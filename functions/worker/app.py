"""Worker Lambda: SQS batch -> one pipeline run per user; partial batch response."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.activity import Activity, record_activity
from user_memory.config import Settings
from user_memory.errors import UserMemoryError
from user_memory.messages import RecordActivity, RefreshUser, parse_message
from user_memory.observability import logger, metrics, tracer
from user_memory.pipeline import refresh_user
from user_memory.runtime import Runtime

# A batch whose records all failed still returns its failures: retries stay per message.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
_runtime: Runtime | None = None
_context: LambdaContext | None = None


class DeadlineReached(UserMemoryError):
    """Too little time is left in this invocation to start another record."""


def runtime() -> Runtime:
    """Built on the first invocation and reused while the execution environment lives."""
    global _runtime
    if _runtime is None or not _runtime.usable:
        _runtime = Runtime.build(Settings.from_env())
    return _runtime


def record_handler(record: SQSRecord) -> dict[str, Any]:
    rt = runtime()
    if _context is not None and _context.get_remaining_time_in_millis() < rt.settings.deadline_margin_ms:
        raise DeadlineReached(f"message {record.message_id} left for a later invocation")
    try:
        message = parse_message(record.body)
    except UserMemoryError:
        logger.warning("malformed message", message_id=record.message_id, size=len(record.body or ""))
        metrics.add_metric(name="MalformedMessages", unit=MetricUnit.Count, value=1)
        raise
    if isinstance(message, RecordActivity):
        new = record_activity(rt.conn, [Activity(**a.model_dump()) for a in message.activities])
        logger.info("activity recorded", message_id=record.message_id, received=len(message.activities), new=new)
        metrics.add_metric(name="ActivitiesRecorded", unit=MetricUnit.Count, value=new)
        return {"recorded": new}
    assert isinstance(message, RefreshUser)
    outcomes = []
    for user_id in message.user_ids:
        try:
            outcome = refresh_user(
                rt.store, rt.conn, rt.summarizer, user_id, message.window, message.run_key, rt.pipeline
            )
        except UserMemoryError as err:
            logger.warning(
                "user refresh failed",
                message_id=record.message_id,
                user_id=str(user_id),
                run_key=message.run_key,
                error=type(err).__name__,
                reason=str(err)[:300],
            )
            metrics.add_metric(name="RefreshFailed", unit=MetricUnit.Count, value=1)
            raise
        logger.info(
            "user refreshed",
            user_id=str(user_id),
            run_key=message.run_key,
            status=outcome.status,
            version=outcome.version,
            activities=outcome.activities,
            ops=outcome.ops,
            tokens=outcome.tokens,
            rebased=outcome.rebased,
            seconds=round(outcome.seconds, 3),
        )
        metrics.add_metric(name=f"Users_{outcome.status}", unit=MetricUnit.Count, value=1)
        if outcome.tokens:
            metrics.add_metric(name="LLMTokens", unit=MetricUnit.Count, value=outcome.tokens)
        outcomes.append(outcome.status)
    return {"statuses": outcomes}


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _context
    _context = context
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)

"""The worker's batch: Powertools BatchProcessor over a pydantic record model, partial failures.

Every failed record is logged once with its messageId, the error type and a short reason
(never document or activity content) and counted in the `RecordsFailed` metric, whatever the
exception. A record is not started when the invocation is too close to its deadline; it fails
as DeadlineReached and comes back after the visibility timeout. Every outbound call of the batch
ends before that deadline (the scope `process_batch` opens, adapters/openai_calls).

The invocation's users run side by side in LLM_CONCURRENCY lanes (`Lanes`), so a batch takes
about one LLM latency rather than one per user: consecutive refresh_user records run at once and
each of their users in a lane of its own, on its own pooled connection held for the run; any
other record runs alone, in the event's order, its work in a lane. No user starts once the time
left is below the margin (DeadlineReached); a record fails when one of its users failed, and is
deferred when one of them was. The log lines, the tally and the metrics are the same as one
after another (the tally and the metrics are counted under locks); only their order follows
the lanes. The partial batch response lists failures in the event's order.

Each user's run leaves one INFO line (`user refreshed`: user id, run key, outcome written /
unchanged / skipped and why, version, edits applied and refused, facts restored and filled; never
content). A user whose stored document no longer validates is skipped, not failed: logged
(`stored document invalid`) and counted (`InvalidStoredDocument`, alarmed) on each run that meets
it, its activity left for the run after a valid version replaces the document.

A GENERATE_MEMORY_BATCH record is one batch of conversations (user id and conversation id each);
inside it each item is isolated. An item that names no conversation (malformed: not an object of
a UUID and a valid id) or none that exists (never recorded, or erased) is refused alone: logged
(`batch item refused`: message id, its position and ids, error type, short reason), counted
(`Conversations_refused`, `Conversations_missing`) and not re-sent, since no retry can change
it. Every conversation that fails is logged (`conversation memory failed`: message id, user
and conversation id, error type, short reason) and counted (`ConversationsFailed`); the failed
ones, and the ones the invocation had no time to start, are re-sent to the queue as a new
message with only them (`attempt` + 1 for failures), and the record succeeds. The record fails,
so that SQS retries it and finally moves it to the DLQ, only when re-sending fails or is not
configured, or when its conversations have used CONVERSATION_MAX_ATTEMPTS: a conversation is
never dropped.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse, PartialItemFailures
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import BeforeValidator, Json

from user_memory.adapters.http_deadline import within
from user_memory.adapters.search import embed_after_write
from user_memory.domain.conversations.batch import BatchRun, run_batch
from user_memory.domain.conversations.model import MAX_CONVERSATIONS_PER_MESSAGE
from user_memory.domain.conversations.trigger import GenerateMemoryBatch, RefusedItem, batch_bodies
from user_memory.domain.messages import (
    CollectBatch,
    ExportUser,
    ImportUser,
    Message,
    RecordActivity,
    RefreshUser,
    RevertRun,
    RevertRunUsers,
    check_body_size,
)
from user_memory.domain.model import RunStatus
from user_memory.domain.summary.pipeline import Deadline, RunOutcome, refresh_user
from user_memory.errors import (
    ConfigError,
    ConversationsFailed,
    DeadlineReached,
    InvalidMessage,
    UnknownConversation,
    UsersFailed,
    describe_failure,
)
from user_memory.jobs.companion import companion_nightly
from user_memory.jobs.refresh import refresh_after_memories
from user_memory.jobs.tally import Tally, user_line_fields
from user_memory.observability import logger, metrics
from user_memory.runtime import WorkerServices

T = TypeVar("T")


class QueueRecord(SqsRecordModel):
    """An SQS record whose body is one of our messages (size-checked, then parsed)."""

    body: Annotated[Json[Message], BeforeValidator(check_body_size)]  # type: ignore[assignment]


class Lanes:
    """The invocation's bounded concurrency: at most `size` pieces of work at once (a user's run,
    or a record of another kind), each in a thread of its own with the caller's context (the
    deadline scope of adapters/http_deadline) and, while it runs, a pooled connection of its own
    (the pool holds at least `size`). Nothing starts once the time left is below the deadline's
    margin: it fails as DeadlineReached. With size 1 the work runs inline, in order, as before."""

    def __init__(self, size: int, deadline: Deadline) -> None:
        self.size = size
        self.deadline = deadline
        self._executor = ThreadPoolExecutor(size, thread_name_prefix="worker-lane") if size > 1 else None

    def start(self, work: Callable[[], T], what: str = "this user") -> Future[T]:
        """`work` in the next free lane; its future holds its result or error."""

        def run() -> T:
            if self.deadline.left() <= 0:
                raise DeadlineReached(f"too close to the invocation's deadline to start {what}")
            return work()

        if self._executor is not None:
            return self._executor.submit(contextvars.copy_context().run, run)
        done: Future[T] = Future()
        try:
            done.set_result(run())
        except Exception as err:
            done.set_exception(err)
        return done

    def run(self, work: Callable[[], T], what: str) -> T:
        """`work` in a lane, waited for (a record's own work: its database use counts in the bound)."""
        return self.start(work, what).result()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


class WorkerProcessor(BatchProcessor):
    """BatchProcessor whose failure handler logs and counts every failed record, and whose records
    run side by side (their work bounded by `lanes`), reported in the event's order."""

    def __init__(self, lanes: Lanes | None = None) -> None:
        # A batch whose records all failed still returns its failures: retries stay per message.
        super().__init__(event_type=EventType.SQS, model=QueueRecord, raise_on_entire_batch_failure=False)
        self.lanes = lanes

    def process(self) -> list[tuple[Any, ...]]:
        size = min(self.lanes.size if self.lanes else 1, len(self.records))
        if size <= 1:
            return super().process()
        results: list[tuple[Any, ...]] = []
        with ThreadPoolExecutor(size, thread_name_prefix="worker-record") as threads:
            for group in _side_by_side(self.records):
                # A record's thread waits for its work in the lanes; it runs in a copy of this
                # thread's context, taken here (a pool's thread starts with an empty one).
                started = [threads.submit(contextvars.copy_context().run, self._process_record, r) for r in group]
                results += [f.result() for f in started]
        order = {record.get("messageId"): i for i, record in enumerate(self.records) if isinstance(record, dict)}
        self.fail_messages.sort(key=lambda m: order.get(_message_id(m), len(order)))
        return results

    def failure_handler(self, record: Any, exception: Any) -> Any:
        report_failed_record(_message_id(record), exception[1])
        return super().failure_handler(record, exception)


def _message_id(record: Any) -> str | None:
    return getattr(record, "messageId", None) or getattr(record, "message_id", None)


def _side_by_side(records: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The records in the event's order, in groups that may run at once: consecutive refresh_user
    records together, any other record alone (an activity recorded before a refresh in the same
    batch is summarized by it, as when the records ran one after another)."""
    group: list[dict[str, Any]] = []
    for record in records:
        if _is_refresh(record):
            group.append(record)
            continue
        if group:
            yield group
            group = []
        yield [record]
    if group:
        yield group


def _is_refresh(record: Any) -> bool:
    try:
        return bool(json.loads(record["body"]).get("type") == "refresh_user")
    except Exception:  # not ours to judge here: the record's own processing reports it
        return False


def report_failed_record(message_id: str | None, exc: BaseException) -> None:
    """Log one failed record (id, error type, reason; never content) and count it."""
    error, reason = describe_failure(exc)
    logger.warning("record failed", message_id=message_id, error=error, reason=reason)
    # A deferral is counted apart: it is routine when a batch outlasts the invocation, and
    # the RecordsFailed alarm must mean that something is wrong.
    name = "RecordsDeferred" if isinstance(exc, DeadlineReached) else "RecordsFailed"
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


def refresh_users(
    message: RefreshUser, message_id: str, services: WorkerServices, deadline: Deadline, tally: Tally, lanes: Lanes
) -> None:
    """One run per user, side by side in the lanes; a user's failure does not stop the others, and a
    retry skips the done ones. The record fails when one of its users failed, and is deferred
    (DeadlineReached) when one of them could not start or finish its LLM calls in time."""
    failures: dict[str, str] = {}
    errors: list[BaseException] = []
    stop = threading.Event()  # once one user ran out of time, the message's others do not start
    runs = [
        (user_id, lanes.start(partial(refresh_one, user_id, message, message_id, services, deadline, tally, stop)))
        for user_id in message.user_ids
    ]
    deferred: DeadlineReached | None = None
    for user_id, run in runs:
        try:
            failure = run.result()
        except DeadlineReached as err:
            deferred = deferred or err
            continue
        if failure is None:
            continue
        what, failed = failure
        error, reason = describe_failure(failed)
        logger.warning(
            what, message_id=message_id, user_id=str(user_id), run_key=message.run_key, error=error, reason=reason
        )
        metrics.add_metric(name="UsersFailed", unit=MetricUnit.Count, value=1)
        failures[str(user_id)] = f"{error}: {reason}"
        errors.append(failed)
    if deferred is not None:
        raise deferred  # the rest of the message waits for the retry
    if len(errors) == 1 and len(message.user_ids) == 1:
        raise errors[0]
    if failures:
        raise UsersFailed(failures)


def refresh_one(
    user_id: Any,
    message: RefreshUser,
    message_id: str,
    services: WorkerServices,
    deadline: Deadline,
    tally: Tally,
    stop: threading.Event,
) -> tuple[str, BaseException] | None:
    """One user's run and its nightly companions, in a lane: its log line and counts, or what failed
    (the step's log message, the error). DeadlineReached is raised: the record is deferred."""
    if stop.is_set():
        raise DeadlineReached("another user of the message ran out of time; retried later")
    try:
        with services.hold():  # one connection for the run's statements
            outcome = refresh_user(
                user_id,
                message.window,
                message.run_key,
                store=services.store,
                activity=services.activity,
                summarizer=services.summarizer,
                cfg=services.pipeline,
                deadline=deadline,
            )
    except DeadlineReached:
        stop.set()
        raise
    except Exception as err:  # one user's failure, whatever it is, must not stop the others
        return "user refresh failed", err
    tally.add(outcome)
    log_run(outcome, message.run_key, message_id)
    if outcome.over_budget:
        report_over_budget(outcome, message.run_key, message_id, services.settings.max_tokens_per_user_day)
    if outcome.status is RunStatus.INVALID_STORED_DOCUMENT:
        report_invalid_document(outcome, message.run_key, message_id, services.settings.document_schema)
        return None  # nothing builds on that document: not the companion's part, not embeddings
    if outcome.status is RunStatus.OVER_BUDGET:
        return None  # nothing written: the companion's part and embeddings wait with the activity
    try:
        _after_summary(user_id, message.run_key, services, tally)
    except DeadlineReached:
        stop.set()
        raise
    except Exception as err:  # as a summary's failure: logged, counted, retried
        return "companion nightly failed", err
    if outcome.deferred:
        logger.warning(
            "activity deferred to the next run",
            message_id=message_id,
            user_id=str(user_id),
            summarized=outcome.activities,
            deferred=outcome.deferred,
        )
    return None


# What a user's run did, as its log line says it: a version written, the memory unchanged (every
# edit refused, or nothing to change), or the run skipped (and why).
_OUTCOMES = {
    RunStatus.WRITTEN: ("written", None),
    RunStatus.UNCHANGED: ("unchanged", None),
    RunStatus.NO_ACTIVITY: ("skipped", "no_activity"),
    RunStatus.ALREADY_DONE: ("skipped", "already_done"),
    RunStatus.INVALID_STORED_DOCUMENT: ("skipped", "invalid_stored_document"),
    RunStatus.OVER_BUDGET: ("skipped", "over_budget"),
}


def log_run(outcome: RunOutcome, run_key: str, message_id: str) -> None:
    """One INFO line per user and run: ids, the outcome and counts, never content. A run whose
    every edit was refused, or that changed nothing, is visible for that user here."""
    result, skipped = _OUTCOMES[outcome.status]
    logger.info(
        "user refreshed",
        user_id=str(outcome.user_id),
        run_key=run_key,
        message_id=message_id,
        outcome=result,
        skipped=skipped,
        version=outcome.version,
        ops=outcome.ops,
        rebased=outcome.rebased,
        **user_line_fields(outcome),
        seconds=round(outcome.seconds, 4),
    )


def report_over_budget(outcome: RunOutcome, run_key: str, message_id: str, budget: int) -> None:
    """A day past the user's token budget: what did not fit is deferred to the next run, never cut;
    reported once per run (log line with ids and counts, TokenBudgetDeferred)."""
    logger.warning(
        "token budget reached",
        user_id=str(outcome.user_id),
        run_key=run_key,
        message_id=message_id,
        budget=budget,
        tokens_today=outcome.tokens_today,
        tokens=outcome.tokens,
        summarized=outcome.activities,
        deferred=outcome.deferred,
    )
    metrics.add_metric(name="TokenBudgetDeferred", unit=MetricUnit.Count, value=1)


def report_invalid_document(outcome: RunOutcome, run_key: str, message_id: str, schema: str) -> None:
    """A stored document that no longer validates: reported (log line, InvalidStoredDocument, an
    alarm) once per run that meets it, never failed (the DLQ would only repeat it every night)."""
    logger.warning(
        "stored document invalid",
        user_id=str(outcome.user_id),
        run_key=run_key,
        message_id=message_id,
        version=outcome.version,
        schema=schema,
        reason="the head no longer validates against the schema; the user's runs wait for a valid version",
    )
    metrics.add_metric(name="InvalidStoredDocument", unit=MetricUnit.Count, value=1)


def _after_summary(user_id: Any, run_key: str, services: WorkerServices, tally: Tally) -> None:
    """The companion layer's nightly part (feedback from ratings, the digest), then the texts the
    night's versions added are embedded (a failure there is logged and counted, never fails the
    user: the texts stay pending and search still finds them by their words)."""
    if services.settings.document_schema == "companion":
        done = companion_nightly(
            user_id,
            run_key,
            store=services.store,
            companion=services.companion,
            max_document_bytes=services.settings.max_document_bytes,
        )
        tally.count(ratings=done.ratings, digests=1 if done.digest_day else 0)
    if services.search.embedder is not None:
        embed_after_write(services.search, user_id)


def record_activity(message: RecordActivity, services: WorkerServices, tally: Tally) -> None:
    """Activity to user_activity; conversation messages (kind `message` with a conversation_id)
    to their conversations. Both are idempotent, so a retried record records nothing twice."""
    messages = [a.to_message() for a in message.activities if a.is_message]  # checked before anything is written
    activities = [a.to_activity() for a in message.activities if not a.is_message]
    if activities:
        tally.count(recorded=services.activity.record(activities))
    if messages:
        tally.count(messages_recorded=services.conversations.record(messages))


def generate_memories(
    message: GenerateMemoryBatch, message_id: str, services: WorkerServices, deadline: Deadline, tally: Tally
) -> None:
    """One batch of conversations, each isolated; malformed items are refused alone, the failed and
    the not-started conversations are re-sent."""
    keys, refused = message.keys()
    _report_refused(refused, message_id, tally)
    run = run_batch(
        keys,
        store=services.conversations,
        summarizer=services.conversation_summarizer,
        cfg=services.settings.memory_config(),
        deadline=deadline,
    )
    _tally_conversations(run, message_id, message.attempt, tally)
    seconds = services.settings.refresh_after_conversation_seconds
    if seconds and services.sender is not None and services.refreshes is not None:
        written = [o.key.user_id for o in run.outcomes if o.status in ("written", "partial")]
        refresh_after_memories(
            written, claims=services.refreshes, sender=services.sender, seconds=seconds, now=services.clock()
        )
    if not run.failures and not run.deferred:
        return
    failures = {str(f.key): "{}: {}".format(*describe_failure(f.error)) for f in run.failures}
    settings = services.settings
    if run.failures and message.attempt + 1 >= settings.conversation_max_attempts:
        # Used their attempts: the message fails, SQS retries it, then moves it to the DLQ.
        raise ConversationsFailed(
            failures, why=f"attempt {message.attempt + 1} of {settings.conversation_max_attempts}"
        )
    if services.sender is None:
        if run.failures:
            raise ConversationsFailed(failures, why="no QUEUE_URL to re-send them to; the message is retried")
        raise DeadlineReached(f"{len(run.deferred)} conversation(s) not started before the deadline; retried later")
    # Failed ones again after the retry delay, with one more attempt; ones not started at once, as they were.
    groups = []
    if run.failures:
        groups.append((run.failed_keys, message.attempt + 1, settings.conversation_retry_delay_seconds))
    if run.deferred:
        groups.append((run.deferred, message.attempt, 0))
    sent = 0
    try:
        for group, attempt, delay in groups:
            bodies = batch_bodies(group, per_message=MAX_CONVERSATIONS_PER_MESSAGE, attempt=attempt)
            sent += services.sender.send(bodies, delay_seconds=delay)
    except Exception as err:
        error, reason = describe_failure(err)
        logger.warning("conversation re-send failed", message_id=message_id, error=error, reason=reason)
        raise ConversationsFailed(
            {**failures, **{str(key): "DeadlineReached: not started" for key in run.deferred}},
            why=f"re-sending them failed ({error})",
        ) from err
    logger.info(
        "conversations re-sent",
        message_id=message_id,
        failed=len(run.failures),
        deferred=len(run.deferred),
        attempt=message.attempt + 1 if run.failures else message.attempt,
        messages=sent,
    )
    if run.failures:
        metrics.add_metric(name="ConversationsRetried", unit=MetricUnit.Count, value=len(run.failures))
    if run.deferred:
        metrics.add_metric(name="ConversationsDeferred", unit=MetricUnit.Count, value=len(run.deferred))


def _report_refused(refused: list[RefusedItem], message_id: str, tally: Tally) -> None:
    """Items that name no conversation: each logged and counted, never re-sent (no retry mends them)."""
    for item in refused:
        logger.warning(
            "batch item refused",
            message_id=message_id,
            item=item.position,
            user_id=item.user_id,
            conversation_id=item.conversation_id,
            error=InvalidMessage.__name__,
            reason=item.reason,
        )
    if refused:
        tally.count_keyed("conversations", "refused", len(refused))


def _tally_conversations(run: BatchRun, message_id: str, attempt: int, tally: Tally) -> None:
    for outcome in run.outcomes:
        tally.count_keyed("conversations", outcome.status)
        tally.count(conversation_tokens=outcome.prompt_tokens + outcome.completion_tokens)
        if outcome.status == "missing":
            logger.warning(
                "batch item refused",
                message_id=message_id,
                user_id=str(outcome.key.user_id),
                conversation_id=outcome.key.conversation_id,
                error=UnknownConversation.__name__,
                reason="this user has no such conversation (never recorded, or erased)",
            )
        logger.debug(
            "conversation memory",
            user_id=str(outcome.key.user_id),
            conversation_id=outcome.key.conversation_id,
            status=outcome.status,
            messages=outcome.messages,
            calls=outcome.calls,
            seconds=round(outcome.seconds, 4),
        )
    for failure in run.failures:
        error, reason = describe_failure(failure.error)
        logger.warning(
            "conversation memory failed",
            message_id=message_id,
            user_id=str(failure.key.user_id),
            conversation_id=failure.key.conversation_id,
            attempt=attempt,
            error=error,
            reason=reason,
        )
        tally.count_keyed("conversations", "failed")
    if run.failures:
        metrics.add_metric(name="ConversationsFailed", unit=MetricUnit.Count, value=len(run.failures))
    if run.deferred:
        tally.count_keyed("conversations", "deferred", len(run.deferred))


def handle_record(
    record: QueueRecord, services: WorkerServices, deadline: Deadline, tally: Tally, lanes: Lanes
) -> None:
    """Do what one message asks, its work in the lanes."""
    if deadline.left() <= 0:
        raise DeadlineReached("too close to the invocation's deadline to start this record")
    message = record.body
    if isinstance(message, RecordActivity):
        lanes.run(partial(record_activity, message, services, tally), "this record")
        return
    if isinstance(message, GenerateMemoryBatch):
        lanes.run(partial(generate_memories, message, record.messageId, services, deadline, tally), "this record")
        return
    if isinstance(message, RevertRun | RevertRunUsers):
        revert_run(message, services, lanes)
        return
    if isinstance(message, ExportUser):
        lanes.run(partial(export_user, message, services), "this record")
        return
    if isinstance(message, ImportUser):
        lanes.run(partial(import_user, message, services), "this record")
        return
    if isinstance(message, CollectBatch) or services.batches is not None:
        _batch_delivery(message, record.messageId, services, deadline, tally, lanes)
        return
    refresh_users(message, record.messageId, services, deadline, tally, lanes)


def revert_run(message: RevertRun | RevertRunUsers, services: WorkerServices, lanes: Lanes) -> None:
    """An operator's undo of a run (jobs/run_revert.py): queue its pending users, or undo these
    users side by side in the lanes, each on one held connection. A user that failed is recorded
    failed with its reason (the operation's report lists it; starting the undo again retries it)."""
    from user_memory.jobs.run_revert import UserUndone, count, fan_out, undo_user  # only when used: cold start

    book = services.runs
    if book is None:
        raise ConfigError("a run revert reached a worker without the runs' bookkeeping")
    if isinstance(message, RevertRun):
        if services.sender is None:
            raise ConfigError("a revert_run message reached a worker without QUEUE_URL: it cannot fan out")
        lanes.run(partial(fan_out, message, book, services.sender.send), "this record")
        return
    settings = services.settings

    def one(user_id: Any) -> UserUndone:
        with services.hold():
            return undo_user(
                book,
                services.store,
                message.revert_id,
                user_id,
                schema=settings.document_schema,
                max_bytes=settings.max_document_bytes,
            )

    count([run.result() for run in [lanes.start(partial(one, u)) for u in message.user_ids]])


def export_user(message: ExportUser, services: WorkerServices) -> None:
    """One export job (jobs/export.py); a failure fails the record (SQS retries, then the DLQ)."""
    from user_memory.adapters.exports import PostgresExports
    from user_memory.jobs.export import run_export  # only when used: cold start

    if services.exports is None or services.export_db is None:
        raise ConfigError("an export_user message reached a worker without EXPORT_BUCKET or EXPORT_DIR")
    run_export(PostgresExports(services.export_db), services.exports, str(message.export_id))


def import_user(message: ImportUser, services: WorkerServices) -> None:
    """One import job (jobs/imports.py); a typed failure fails the job, anything else the record too."""
    from user_memory.jobs.imports import run_import_job  # only when used: cold start

    if services.exports is None or services.export_db is None:
        raise ConfigError("an import_user message reached a worker without EXPORT_BUCKET or EXPORT_DIR")
    run_import_job(services.export_db, services.exports, str(message.import_id))


def _batch_delivery(
    message: RefreshUser | CollectBatch,
    message_id: str,
    services: WorkerServices,
    deadline: Deadline,
    tally: Tally,
    lanes: Lanes,
) -> None:
    """SUMMARY_DELIVERY=batch (jobs/summary_batch.py): a refresh_user message's requests go into a
    batch, a collect_batch message runs its answers through this module's per-user loop."""

    def run_online(users: RefreshUser, on: WorkerServices) -> None:
        refresh_users(users, message_id, on, deadline, tally, lanes)

    if services.batches is None:
        raise ConfigError("a collect_batch message reached a worker whose SUMMARY_DELIVERY is not batch")
    from user_memory.jobs.summary_batch import collect_batch, submit_batch  # only when used: cold start

    if isinstance(message, CollectBatch):
        collect_batch(message, message_id, services, services.batches, deadline, run_online)
    else:
        submit_batch(message, message_id, services, services.batches, deadline, run_online)


def process_batch(event: dict[str, Any], context: Any, services: WorkerServices) -> PartialItemFailureResponse:
    """Process one SQS event; returns the partial batch response."""
    deadline = Deadline(context.get_remaining_time_in_millis, services.settings.deadline_margin_ms / 1000)
    tally = Tally()
    lanes = Lanes(services.concurrency, deadline)

    def record_handler(record: QueueRecord) -> None:
        handle_record(record, services, deadline, tally, lanes)

    # Every outbound call of the batch (the model, the embeddings) ends before the deadline
    # margin, however slowly an endpoint answers (adapters/openai_calls).
    try:
        with within(deadline.left()):
            response = process_partial_response(
                event=event, record_handler=record_handler, processor=WorkerProcessor(lanes), context=context
            )
    finally:
        lanes.close()
    failed = len(response.get("batchItemFailures", []))
    logger.info(
        "batch done",
        records=len(event.get("Records", [])),
        failed=failed,
        **tally.log_fields(),
    )
    tally.emit()
    return response


def fail_all(event: dict[str, Any], exc: BaseException) -> PartialItemFailureResponse:
    """Every record failed before processing could start (e.g. the database is down at cold start):
    each is logged and counted, and all come back after the visibility timeout."""
    failures: list[PartialItemFailures] = []
    for record in event.get("Records", []) if isinstance(event, dict) else []:
        message_id = record.get("messageId") if isinstance(record, dict) else None
        report_failed_record(message_id, exc)
        if message_id:
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}

"""The nightly run through the Batch API (SUMMARY_DELIVERY=batch): a refresh_user message's
requests go into one batch, and a collect_batch message runs the answers through the pipeline.

Submitting (a refresh_user message): each user's run goes through the pipeline exactly as online
(domain/summary/pipeline.refresh_user: the run key, the stored document's check, the people's
edits, the activity and its chunks) up to its first summarizer call, where the request the
online summarizer would send is taken instead (`RequestCaptured`; nothing is written). The
users are claimed for the run key in one statement (adapters/summary_batches.py: a redelivered
or duplicate message finds them claimed and submits nothing new), the batch is created, the
claims get its id, and a collect_batch message is queued after BATCH_POLL_SECONDS. Users whose
run needs no call (no activity, done already, an invalid stored document), or whose request
could not be built, run online at once (the same per-user handling, log line and counts as the
online worker); when the batch cannot be created, so do all of them.

Collecting (a collect_batch message): while the batch runs, the message is queued again after
BATCH_POLL_SECONDS. Once it has ended (completed, expired, failed, cancelled), or after
BATCH_GIVE_UP_HOURS, its users run through the online worker's own per-user loop with two
differences: the summarizer serves the batch's answer for the very request it answers and asks
the online endpoint for anything else (a failed or missing item, the fact floor's retry:
adapters/openai_batch.PrecomputedAnswers), and the run's first read of the head is the version
the request was built on (`PinnedHeads`), so a head that a person moved meanwhile is rebased onto
by the pipeline's own replay (their edit kept), as if it had landed during an online run. A claim
is deleted once its user's run is done; a redelivered collect message finds the users done (the
run key) or their claims gone. The collection is bounded by the invocation's deadline: the users
it could not start or finish go on in a fresh collect message (the record succeeds), so a batch
too large for one invocation is collected over several without its message reaching the DLQ.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.adapters.openai_batch import (
    BatchOutput,
    PrecomputedAnswers,
    SummaryBatches,
    batch_line,
    request_sha256,
)
from user_memory.adapters.summary_batches import Claim
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.messages import CollectBatch, RefreshUser
from user_memory.domain.model import Activity, Document, MemoryVersion, VersionChange, parse_user_id
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.pipeline import Deadline, refresh_user
from user_memory.errors import DeadlineReached, UnknownVersion, UsersFailed, describe_failure
from user_memory.observability import logger, metrics
from user_memory.runtime import WorkerServices

# Runs the online worker's per-user loop for a message on these services (jobs/worker.refresh_users).
RunOnline = Callable[[RefreshUser, WorkerServices], None]


class RequestCaptured(Exception):
    """Not an error: a run reached its first summarizer call, whose request goes into the batch."""

    def __init__(self, document: Document, activities: list[Activity]) -> None:
        super().__init__("request captured for a batch")
        self.document = document
        self.activities = activities


class _Capture:
    """The summarizer of the submitting pass: it takes the first request and stops the run."""

    name = "batch"
    leaves_input_unchanged = True

    def summarize(
        self,
        document: Document,
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        raise RequestCaptured(document, list(activities))


class _HeadsRead:
    """The store, noting the head each run read (the version its request is built on)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.head: MemoryVersion | None = None

    def head_for_run(self, user_id: object, run_key: str) -> tuple[MemoryVersion, int | None]:
        head, recorded = self._store.head_for_run(user_id, run_key)
        self.head = head
        return head, recorded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class PinnedHeads:
    """The store, with each pinned user's first head read at the version the batch's request was
    built on: the answer is applied to that version and the pipeline rebases it onto a head that
    moved meanwhile. The people's edits found for that pass are the ones up to that version; the
    rebase's read sees the real head and everything since."""

    def __init__(self, store: MemoryStore, pins: dict[uuid.UUID, int]) -> None:
        self._store = store
        self._pins = dict(pins)
        self._pinned: dict[uuid.UUID, int] = {}

    def head_for_run(self, user_id: object, run_key: str) -> tuple[MemoryVersion, int | None]:
        uid = parse_user_id(user_id)
        head, recorded = self._store.head_for_run(uid, run_key)
        self._pinned.pop(uid, None)
        pin = self._pins.pop(uid, None)  # the first read only
        if recorded is not None or pin is None or pin >= head.version:
            return head, recorded
        try:
            pinned = self._store.at(uid, pin)
        except UnknownVersion:  # history went back (an erasure): the head as it is
            return head, recorded
        self._pinned[uid] = pin
        return pinned, recorded

    def recent_changes(self, user_id: object, *, limit: int) -> list[VersionChange]:
        uid = parse_user_id(user_id)
        changes = self._store.recent_changes(uid, limit=limit)
        pin = self._pinned.get(uid)
        return changes if pin is None else [c for c in changes if c.version <= pin]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass(frozen=True)
class _Request:
    user_id: uuid.UUID
    base_version: int
    body: dict[str, Any]

    @property
    def claim(self) -> Claim:
        return Claim(self.user_id, self.base_version, request_sha256(self.body))


def first_request(
    user_id: uuid.UUID, message: RefreshUser, services: WorkerServices, batches: SummaryBatches, deadline: Deadline
) -> _Request | None:
    """The request a run of this user would send first, built by the pipeline itself; None when
    the run needs no call (no activity, done already, an invalid stored document)."""
    heads = _HeadsRead(services.store)
    try:
        refresh_user(
            user_id,
            message.window,
            message.run_key,
            store=cast(MemoryStore, heads),
            activity=services.activity,
            summarizer=_Capture(),
            cfg=services.pipeline,
            deadline=deadline,
        )
    except RequestCaptured as captured:
        assert heads.head is not None  # the run read it before any call
        body, _ = batches.online.request(captured.document, captured.activities)
        return _Request(user_id, heads.head.version, body)
    return None


def _collect_body(message: RefreshUser | CollectBatch, batch_id: str, polls: int) -> str:
    return CollectBatch(
        type="collect_batch", batch_id=batch_id, window=message.window, run_key=message.run_key, polls=polls
    ).model_dump_json()


def submit_batch(
    message: RefreshUser,
    message_id: str,
    services: WorkerServices,
    batches: SummaryBatches,
    deadline: Deadline,
    run_online: RunOnline,
) -> None:
    """Put the message's users' requests into one batch (each user once per run key), queue its
    collection; the users that need no call, or that cannot go into a batch, run online now."""
    run_key = message.run_key
    claimed = batches.requests.claimed(run_key, message.user_ids)
    in_batch = {user: batch for user, batch in claimed.items() if batch is not None}
    # A claim without a batch is a submission that stopped before its batch existed: online
    # (the run key keeps a duplicate delivery still submitting from writing twice).
    online = [u for u in message.user_ids if u in claimed and claimed[u] is None]
    requests: list[_Request] = []
    for user_id in message.user_ids:
        if user_id in claimed:
            continue
        try:
            with services.hold():
                request = first_request(user_id, message, services, batches, deadline)
        except DeadlineReached:
            raise
        except Exception:  # the online run meets it again, and reports it as an online run does
            request = None
        if request is None:
            online.append(user_id)
        else:
            requests.append(request)
    if requests:
        mine = batches.requests.claim(run_key, [r.claim for r in requests])
        requests = [r for r in requests if r.user_id in mine]  # the rest: another delivery's
    if requests:
        users = [r.user_id for r in requests]
        try:
            lines = [batch_line(str(r.user_id), r.body) for r in requests]
            batch_id = batches.endpoint.submit(lines, run_key=run_key, budget=max(deadline.left(), 0.0))
        except DeadlineReached:
            batches.requests.release(run_key, users)
            raise
        except Exception as err:  # no batch: these users are summarized online, now
            error, reason = describe_failure(err)
            logger.warning(
                "batch submit failed",
                message_id=message_id,
                run_key=run_key,
                users=len(users),
                error=error,
                reason=reason,
            )
            metrics.add_metric(name="BatchSubmitFailed", unit=MetricUnit.Count, value=1)
            batches.requests.release(run_key, users)
            online.extend(users)
        else:
            batches.requests.assign(run_key, users, batch_id)
            in_batch.update(dict.fromkeys(users, batch_id))
            logger.info("batch submitted", message_id=message_id, run_key=run_key, batch_id=batch_id, users=len(users))
            metrics.add_metric(name="BatchesSubmitted", unit=MetricUnit.Count, value=1)
            metrics.add_metric(name="BatchRequests", unit=MetricUnit.Count, value=len(users))
    # Also for a batch found claimed: a delivery that stopped before queueing its collection
    # would leave it uncollected; a second collection chain ends with the batch.
    bodies = [_collect_body(message, batch_id, 0) for batch_id in dict.fromkeys(in_batch.values())]
    if bodies:
        assert services.sender is not None  # settings: SUMMARY_DELIVERY=batch needs QUEUE_URL
        services.sender.send(bodies, delay_seconds=batches.poll_seconds)
    if online:
        run_online(message.model_copy(update={"user_ids": online}), services)


def collect_batch(
    message: CollectBatch,
    message_id: str,
    services: WorkerServices,
    batches: SummaryBatches,
    deadline: Deadline,
    run_online: RunOnline,
) -> None:
    """Look at the batch again later while it runs; once it has ended, run its users through the
    pipeline on its answers (online for what it did not answer)."""
    claims = batches.requests.pending(message.batch_id, message.run_key)
    if not claims:
        logger.info("batch already collected", message_id=message_id, batch_id=message.batch_id)
        return
    state = batches.endpoint.state(message.batch_id, budget=max(deadline.left(), 0.0))
    overdue = time.time() - state.created_at >= batches.give_up_seconds
    if state.running and not overdue:
        assert services.sender is not None  # settings: SUMMARY_DELIVERY=batch needs QUEUE_URL
        services.sender.send(
            [_collect_body(message, message.batch_id, message.polls + 1)], delay_seconds=batches.poll_seconds
        )
        logger.info("batch running", message_id=message_id, batch_id=message.batch_id, status=state.status)
        return
    if state.running:  # given up: stopped, so that answers nobody will read are not paid for
        _cancel(message, message_id, batches, deadline)
    output = batches.endpoint.output(state, budget=max(deadline.left(), 0.0)) if not state.running else BatchOutput()
    by_user = {str(c.user_id): c for c in claims}
    answers = {by_user[cid].request_sha256: body for cid, body in output.answers.items() if cid in by_user}
    failed = len(claims) - len(answers)
    logger.info(
        "batch collected",
        message_id=message_id,
        run_key=message.run_key,
        batch_id=message.batch_id,
        status=state.status if not state.running else f"{state.status} (given up)",
        users=len(claims),
        answered=len(answers),
        failed=failed,
        failures=sorted(set(output.failed.values()))[:5],
    )
    if failed:
        metrics.add_metric(name="BatchItemsFailed", unit=MetricUnit.Count, value=failed)
    summarizer = PrecomputedAnswers(batches.online, answers)
    pins = {c.user_id: c.base_version for c in claims}
    pinned = replace(services, summarizer=summarizer, store=cast(MemoryStore, PinnedHeads(services.store, pins)))
    users = [c.user_id for c in claims]
    try:
        run_online(
            RefreshUser(type="refresh_user", user_ids=users, window=message.window, run_key=message.run_key), pinned
        )
    except DeadlineReached:
        # A whole batch's users may not fit one invocation (an expired batch runs them all online):
        # the rest goes on in a fresh collect message, which finds the ones done here done (their
        # run key) and their claims still pending, so none is lost or written twice, and no
        # redelivery of this message counts towards the DLQ for a batch that is progressing.
        assert services.sender is not None  # settings: SUMMARY_DELIVERY=batch needs QUEUE_URL
        services.sender.send([_collect_body(message, message.batch_id, message.polls + 1)])
        logger.info(
            "batch collection continues",
            message_id=message_id,
            run_key=message.run_key,
            batch_id=message.batch_id,
            users=len(users),
        )
        return
    except UsersFailed as err:  # the others are done; the failed ones come back with the message
        batches.requests.done(message.batch_id, message.run_key, [u for u in users if str(u) not in err.failures])
        raise
    finally:
        _count(summarizer)
    batches.requests.done(message.batch_id, message.run_key, users)


def _cancel(message: CollectBatch, message_id: str, batches: SummaryBatches, deadline: Deadline) -> None:
    try:
        batches.endpoint.cancel(message.batch_id, budget=max(deadline.left(), 0.0))
    except Exception as err:  # its users are summarized online either way
        error, reason = describe_failure(err)
        logger.warning(
            "batch cancel failed", message_id=message_id, batch_id=message.batch_id, error=error, reason=reason
        )


def _count(summarizer: PrecomputedAnswers) -> None:
    if summarizer.served:
        metrics.add_metric(name="BatchAnswersUsed", unit=MetricUnit.Count, value=summarizer.served)
    if summarizer.asked_online:
        metrics.add_metric(name="BatchFallbackCalls", unit=MetricUnit.Count, value=summarizer.asked_online)

"""Refreshes on demand, logged and counted: the API's and the CLI's (`queue_refresh`) and the
worker's after a conversation memory when the deployment opts in (`refresh_after_memories`).

Each refresh asked for leaves one INFO line (`refresh requested`: user id, run key, who asked,
queued or already queued; never content) and counts `RefreshesQueued` when it queued one; a
failure is logged (`refresh queue failed`: user id, error type, short reason), counted
(`RefreshQueueFailed`) and, for the API, raised (503: nothing was recorded, the request may be
repeated). After a conversation memory it is never the record's failure: the memory is written,
and the next refresh or the nightly run takes it in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.domain.refresh import RefreshClaims, RefreshQueued, Requester, Sender, request_refresh
from user_memory.errors import describe_failure
from user_memory.observability import logger, metrics


def queue_refresh(
    user_id: uuid.UUID,
    *,
    claims: RefreshClaims,
    sender: Sender,
    interval: timedelta,
    by: Requester,
    now: datetime | None = None,
    delay_seconds: int = 0,
) -> RefreshQueued:
    """`request_refresh`, logged and counted; a failure is logged, counted and raised."""
    try:
        queued = request_refresh(
            user_id, claims=claims, sender=sender, interval=interval, by=by, now=now, delay_seconds=delay_seconds
        )
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("refresh queue failed", user_id=str(user_id), requested_by=by, error=error, reason=reason)
        metrics.add_metric(name="RefreshQueueFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info(
        "refresh requested",
        user_id=str(user_id),
        run_key=queued.run_key,
        requested_by=by,
        status=queued.status,
        delay_seconds=delay_seconds if queued.queued else None,
    )
    if queued.queued:
        metrics.add_metric(name="RefreshesQueued", unit=MetricUnit.Count, value=1)
    return queued


def refresh_after_memories(
    users: Iterable[uuid.UUID],
    *,
    claims: RefreshClaims,
    sender: Sender,
    seconds: int,
    now: datetime | None = None,
) -> int:
    """Each user whose conversation memory was just written: a refresh delivered `seconds` later
    (REFRESH_AFTER_CONVERSATION_SECONDS), unless one still to run covers it. Returns how many were
    queued; a user's failure is logged and counted, and the others go on."""
    queued = 0
    for user_id in dict.fromkeys(users):
        try:
            done = queue_refresh(
                user_id,
                claims=claims,
                sender=sender,
                interval=timedelta(0),  # the delayed window is the debounce (domain/refresh.py)
                by="conversation",
                now=now,
                delay_seconds=seconds,
            )
        except Exception:  # logged and counted in queue_refresh; the memory is written, the night takes it in
            continue
        queued += done.queued
    return queued

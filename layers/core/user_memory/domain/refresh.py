"""A user's refresh now rather than at night: one refresh_user message with its own run key
(`ondemand:<time>`), at most one per user per minimum interval.

The same message the nightly fan-out sends, so the worker runs the same checks, writes the same
provenance and counts the same tokens and cost; its window ends when the refresh was asked for
(or, after a conversation memory, when its delay ends), and the run marks the activity it
summarized, so the night's fan-out finds nothing left for that user.

Who asks: the user (`POST /me/memory/refresh`), an operator (`POST /admin/users/{id}/memory/refresh`,
`user-memory refresh`), or the worker after writing a conversation memory when the deployment
opts in (REFRESH_AFTER_CONVERSATION_SECONDS). The claim and the send are one unit: the store
claims the user's row only when the last refresh is older than the interval, and the row is kept
only when the message went out (`RefreshClaims.claim` runs the send inside its transaction).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from user_memory.domain.model import Window
from user_memory.errors import SendFailed

RUN_KEY_PREFIX = "ondemand:"
Requester = Literal["user", "operator", "conversation"]
# The hours before its end a refresh's window names (the run summarizes everything unsummarized
# before the end, whatever the start; the start only labels the version, as the nightly's does).
WINDOW_HOURS = 24
# SQS's longest DelaySeconds: a refresh after a conversation memory waits at most this long.
MAX_DELAY_SECONDS = 900


def run_key(at: datetime) -> str:
    """The run key of a refresh asked for at `at`: `ondemand:` and the UTC time to the second
    (unique per user: a user's refreshes are at least one second apart)."""
    return RUN_KEY_PREFIX + at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """What the store answers a claim: the user's refresh run key and when it was asked for;
    `new` when this claim queued it, else the one already queued within the interval."""

    run_key: str
    requested_at: datetime
    new: bool


class RefreshClaims(Protocol):
    """The last refresh queued per user (migration 024)."""

    def claim(
        self,
        user_id: uuid.UUID,
        *,
        run_key: str,
        at: datetime,
        window_end: datetime,
        interval: timedelta,
        by: Requester,
        send: Callable[[], None],
    ) -> Claimed:
        """Record `run_key` as the user's refresh when the last one was asked for at least
        `interval` before `at` (and, `by` a conversation, when the last one's window ends by `at`:
        one still to run covers the memory), and call `send` in the same transaction (its failure
        leaves the last one in place); else the last one, unsent again."""
        ...


class RefreshUpkeep(Protocol):
    """The retention job's side of the refresh rows."""

    def purge(self, before: datetime) -> int:
        """Delete the rows whose window ended before `before`; how many."""
        ...


# A row older than this cannot refuse any claim (REFRESH_MIN_INTERVAL_SECONDS is at most a day, a
# refresh's delay at most 900 s): the retention job removes it, so a user's row outlives the
# user's last refresh by at most about two days (erased users included).
KEEP_ROWS = timedelta(days=1)


class Sender(Protocol):
    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int: ...


@dataclass(frozen=True, kw_only=True)
class RefreshQueued:
    """A refresh's answer: its run key, when it was asked for, whether this request queued it
    (else it was queued already, within the interval), and the earliest time of a next one."""

    user_id: uuid.UUID
    run_key: str
    requested_at: datetime
    queued: bool
    next_allowed_at: datetime

    @property
    def status(self) -> Literal["queued", "already_queued"]:
        return "queued" if self.queued else "already_queued"


def refresh_body(user_id: uuid.UUID, key: str, end: datetime) -> str:
    """The refresh_user message of one user's refresh, its window ending at `end`."""
    window = Window.ending(end, WINDOW_HOURS)
    return json.dumps(
        {
            "type": "refresh_user",
            "user_ids": [str(user_id)],
            "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
            "run_key": key,
        }
    )


def request_refresh(
    user_id: uuid.UUID,
    *,
    claims: RefreshClaims,
    sender: Sender,
    interval: timedelta,
    by: Requester,
    now: datetime | None = None,
    delay_seconds: int = 0,
) -> RefreshQueued:
    """Queue one refresh_user message for the user unless one was queued less than `interval` ago
    (then that one's run key is the answer). With `delay_seconds`, the message is delivered that
    much later and its window ends then, so what arrives meanwhile rides with it."""
    if not 0 <= delay_seconds <= MAX_DELAY_SECONDS:
        raise ValueError(f"a refresh's delay is 0 to {MAX_DELAY_SECONDS} seconds")
    at = (now or datetime.now(UTC)).astimezone(UTC)
    key = run_key(at)
    end = at + timedelta(seconds=delay_seconds)

    def send() -> None:
        try:
            sender.send([refresh_body(user_id, key, end)], delay_seconds=delay_seconds)
        except SendFailed:
            raise
        except Exception as err:  # the queue's client failed (refused, unreachable): the same answer, 503
            raise SendFailed(f"the refresh could not be queued ({type(err).__name__})") from err

    claimed = claims.claim(user_id, run_key=key, at=at, window_end=end, interval=interval, by=by, send=send)
    return RefreshQueued(
        user_id=user_id,
        run_key=claimed.run_key,
        requested_at=claimed.requested_at,
        queued=claimed.new,
        next_allowed_at=claimed.requested_at + interval,
    )

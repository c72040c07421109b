"""Fan-out: turn a schedule (or a manual request) into refresh_user messages.

A fan-out that fails after sending some messages is retried whole (EventBridge's retry
policy, or the operator); the re-sent messages carry the same run key, so a user already
summarized is skipped by the worker, never summarized twice.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from user_memory.domain.companion.times import StorableDate, StorableTime
from user_memory.domain.messages import RUN_KEY_MAX
from user_memory.domain.model import Window
from user_memory.domain.ports import ActivityReader, MessageSender
from user_memory.errors import FanoutRefused, InvalidEvent, describe_validation_error


class ScheduledEvent(BaseModel):
    """EventBridge's scheduled event; its `time` ends the window."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    detail_type: Literal["Scheduled Event"] = Field(alias="detail-type")
    time: StorableTime


class ManualRequest(BaseModel):
    """A manual fan-out (a backfill): a date, or a window, and optionally a list of users."""

    model_config = ConfigDict(extra="forbid")
    date: StorableDate | None = None
    window: Window | None = None
    user_ids: list[uuid.UUID] | None = Field(default=None, min_length=1)
    run_key: str | None = Field(default=None, min_length=1, max_length=RUN_KEY_MAX)

    @model_validator(mode="after")
    def _one_range(self) -> ManualRequest:
        if (self.date is None) == (self.window is None):
            raise ValueError("a manual fan-out names exactly one of `date` or `window`")
        return self


_MANUAL = TypeAdapter(ManualRequest)


def _run_key(window: Window) -> str:
    """`daily:<day>` for a 24-hour window, else the window itself: two runs never share a key."""
    if window.end - window.start == dt.timedelta(hours=24):
        return f"daily:{window.start.date().isoformat()}"
    return f"window:{window.start.isoformat()}/{window.end.isoformat()}"


@dataclass(frozen=True, kw_only=True)
class FanoutPlan:
    """Which window, under which run key, for which users (None: everyone with activity to summarize)."""

    window: Window
    run_key: str
    user_ids: list[uuid.UUID] | None = None


def plan_from_event(event: object, *, window_hours: int) -> FanoutPlan:
    """Plan from an EventBridge scheduled event or a manual request; InvalidEvent names what is wrong."""
    if not isinstance(event, dict):
        raise InvalidEvent(
            f"a fan-out event must be a JSON object (a scheduled event or a manual request), got {type(event).__name__}"
        )
    kind = "scheduled event" if "detail-type" in event else "manual fan-out request"
    try:
        if "detail-type" in event:
            scheduled = ScheduledEvent.model_validate(event)
            window = Window.ending(scheduled.time, window_hours)
            return FanoutPlan(window=window, run_key=_run_key(window))
        manual = _MANUAL.validate_python(event)
        if manual.date is not None:
            window = Window.day(manual.date)
    except ValidationError as err:
        raise InvalidEvent(f"invalid {kind}: {describe_validation_error(err)}") from err
    except OverflowError as err:  # a window that ends past year 9999 or starts before year 1
        raise InvalidEvent(f"invalid {kind}: the window falls outside the supported dates") from err
    if manual.date is not None:
        key = f"daily:{manual.date.isoformat()}"
    elif manual.window is not None:
        window = manual.window
        key = f"window:{window.start.isoformat()}/{window.end.isoformat()}"
    else:  # pragma: no cover - the model's validator requires one of them
        raise InvalidEvent("a manual fan-out names exactly one of `date` or `window`")
    return FanoutPlan(window=window, run_key=manual.run_key or key, user_ids=manual.user_ids)


@dataclass(frozen=True, kw_only=True)
class FanoutReport:
    run_key: str
    window: Window
    users: int
    messages: int
    pages: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "window": {"start": self.window.start.isoformat(), "end": self.window.end.isoformat()},
            "users": self.users,
            "messages": self.messages,
            "pages": self.pages,
        }


def _chunks(items: list[uuid.UUID], size: int) -> Iterator[list[uuid.UUID]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def refresh_bodies(user_ids: Iterable[uuid.UUID], plan: FanoutPlan, users_per_message: int) -> list[str]:
    """refresh_user message bodies, `users_per_message` users each."""
    window = {"start": plan.window.start.isoformat(), "end": plan.window.end.isoformat()}
    return [
        json.dumps(
            {"type": "refresh_user", "user_ids": [str(u) for u in chunk], "window": window, "run_key": plan.run_key}
        )
        for chunk in _chunks(list(user_ids), users_per_message)
    ]


@dataclass(frozen=True, kw_only=True)
class Backlog:
    """What the worker queue already holds and how fast the worker drains it (domain/plan.py), so
    a day is queued only while its messages can be received before the queue's retention ends."""

    waiting_messages: int
    users_per_message: int
    users_per_second: float
    limit_seconds: int  # the retention less a margin (plan.backlog_limit)

    def seconds(self, more_users: int) -> float:
        """Seconds the worker needs for the backlog and `more_users` more, at the planned rate."""
        return (self.waiting_messages * self.users_per_message + more_users) / self.users_per_second

    def refuse(self, run_key: str, queued: int, more: int) -> FanoutRefused:
        """The error refusing `more` users after `queued` were queued for `run_key`."""
        seconds = self.seconds(queued + more)
        return FanoutRefused(
            f"run {run_key}: {self.waiting_messages:,} messages on the worker queue and {queued + more:,} of the "
            f"day's users would take {_span(seconds)} to drain at {self.users_per_second:,.2f} users a second, "
            f"over the {_span(self.limit_seconds)} a backlog may last (the queue's retention less a day); "
            f"{queued:,} users queued, the rest refused: their activity waits for the next run",
            run_key=run_key,
            waiting_messages=self.waiting_messages,
            users_queued=queued,
            drain_days=seconds / 86400,
        )


def _span(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:,.1f} days"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def run_fanout(
    plan: FanoutPlan,
    *,
    reader: ActivityReader,
    sender: MessageSender,
    page_size: int,
    users_per_message: int,
    backlog: Backlog | None = None,
    on_page: Any = None,
) -> FanoutReport:
    """Page through the users with activity to summarize (or the named ones) and queue refresh
    messages; with a `backlog`, FanoutRefused before the first page the queue could not drain in
    time (the pages before it are queued: they fit)."""
    started = time.perf_counter()
    users = messages = pages = 0
    source: Iterable[list[uuid.UUID]] = (
        _chunks(plan.user_ids, page_size)
        if plan.user_ids is not None
        else reader.active_user_pages(plan.window, page_size=page_size)
    )
    for page in source:
        if backlog is not None and backlog.seconds(users + len(page)) > backlog.limit_seconds:
            raise backlog.refuse(plan.run_key, users, len(page))
        pages += 1
        users += len(page)
        messages += sender.send(refresh_bodies(page, plan, users_per_message))
        if on_page is not None:
            on_page(len(page))
    return FanoutReport(
        run_key=plan.run_key,
        window=plan.window,
        users=users,
        messages=messages,
        pages=pages,
        seconds=time.perf_counter() - started,
    )

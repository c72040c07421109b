"""Fan-out: turn a schedule (or a manual request) into refresh_user messages on SQS."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from user_memory.activity import active_user_pages
from user_memory.errors import InvalidMessage, UserMemoryError
from user_memory.messages import Window

SQS_BATCH = 10
SEND_ATTEMPTS = 4


class SendFailed(UserMemoryError):
    """Some messages could not be sent after retries."""


class ManualRequest(BaseModel):
    """A manual fan-out: a date, or a window, and optionally a list of users."""

    model_config = ConfigDict(extra="forbid")
    date: dt.date | None = None
    window: Window | None = None
    user_ids: list[uuid.UUID] | None = Field(default=None, min_length=1)
    run_key: str | None = Field(default=None, min_length=1, max_length=200)


class ScheduledEvent(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    detail_type: str = Field(alias="detail-type")
    time: AwareDatetime


@dataclass(frozen=True)
class FanoutPlan:
    window: Window
    run_key: str
    user_ids: list[uuid.UUID] | None = None


def plan_from_event(event: dict[str, Any], *, window_hours: int = 24) -> FanoutPlan:
    """EventBridge scheduled event (its `time` ends the window) or a manual request."""
    try:
        if event.get("detail-type") == "Scheduled Event":
            scheduled = ScheduledEvent.model_validate(event)
            window = Window.ending(scheduled.time, window_hours)
            return FanoutPlan(window, f"daily:{window.start.date().isoformat()}")
        manual = ManualRequest.model_validate(event)
    except ValidationError as err:
        raise InvalidMessage(f"fan-out event is neither a scheduled event nor a manual request: {err}") from err
    if (manual.date is None) == (manual.window is None):
        raise InvalidMessage("a manual fan-out names exactly one of `date` or `window`")
    if manual.date is not None:
        window = Window.day(manual.date)
        key = f"daily:{manual.date.isoformat()}"
    else:
        assert manual.window is not None
        window = manual.window
        key = f"window:{window.start.isoformat()}/{window.end.isoformat()}"
    return FanoutPlan(window, manual.run_key or key, manual.user_ids)


class SqsSender:
    """SendMessageBatch, 10 entries a call, per-entry failures retried with backoff."""

    def __init__(self, queue_url: str, client: Any = None, *, sleep: Any = time.sleep) -> None:
        if client is None:
            import boto3

            client = boto3.client("sqs")
        self.client = client
        self.queue_url = queue_url
        self.sleep = sleep
        self.calls = 0

    def send(self, bodies: list[str]) -> int:
        """Send every body; raise SendFailed naming how many could not be sent."""
        sent = 0
        for i in range(0, len(bodies), SQS_BATCH):
            pending = {str(n): body for n, body in enumerate(bodies[i : i + SQS_BATCH])}
            for attempt in range(SEND_ATTEMPTS):
                entries = [{"Id": k, "MessageBody": v} for k, v in pending.items()]
                self.calls += 1
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
                for ok in response.get("Successful", []):
                    pending.pop(ok["Id"], None)
                    sent += 1
                if not pending:
                    break
                self.sleep(min(2.0, 0.1 * 2**attempt))
            if pending:
                raise SendFailed(f"{len(pending)} message(s) could not be sent after {SEND_ATTEMPTS} attempts")
        return sent


@dataclass
class FanoutReport:
    users: int = 0
    messages: int = 0
    pages: int = 0
    seconds: float = 0.0


def _chunks(items: list[uuid.UUID], size: int) -> Iterator[list[uuid.UUID]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def refresh_bodies(user_ids: Iterable[uuid.UUID], plan: FanoutPlan, users_per_message: int) -> list[str]:
    window = {"start": plan.window.start.isoformat(), "end": plan.window.end.isoformat()}
    return [
        json.dumps(
            {
                "type": "refresh_user",
                "user_ids": [str(u) for u in chunk],
                "window": window,
                "run_key": plan.run_key,
            }
        )
        for chunk in _chunks(list(user_ids), users_per_message)
    ]


def run_fanout(
    conn: psycopg.Connection,
    sender: SqsSender,
    plan: FanoutPlan,
    *,
    page_size: int = 1000,
    users_per_message: int = 1,
) -> FanoutReport:
    """Page through the window's active users (or the named ones) and queue refresh messages."""
    started = time.perf_counter()
    report = FanoutReport()
    pages: Iterable[list[uuid.UUID]] = (
        _chunks(plan.user_ids, page_size)
        if plan.user_ids is not None
        else active_user_pages(conn, plan.window.start, plan.window.end, page_size=page_size)
    )
    for page in pages:
        report.pages += 1
        report.users += len(page)
        report.messages += sender.send(refresh_bodies(page, plan, users_per_message))
    report.seconds = time.perf_counter() - started
    return report

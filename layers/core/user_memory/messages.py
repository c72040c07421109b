"""Queue message bodies: a discriminated union on `type`.

{"type": "refresh_user", "user_ids": ["<uuid>"], "window": {"start": "...", "end": "..."},
 "run_key": "daily:2026-11-21"}
{"type": "record_activity", "activities": [{"user_id": "<uuid>", "occurred_at": "...",
 "kind": "session", "payload": {...}, "source": "chat", "external_id": "msg-123"}]}
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel, ValidationError, model_validator

from user_memory.errors import InvalidMessage


class Window(BaseModel):
    """A half-open time range [start, end)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    start: AwareDatetime
    end: AwareDatetime

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end <= self.start:
            raise ValueError("window end must be after its start")
        if self.end - self.start > timedelta(days=31):
            raise ValueError("a window may span at most 31 days")
        return self

    @classmethod
    def day(cls, day: date) -> Window:
        start = datetime.combine(day, time(0), tzinfo=UTC)
        return cls(start=start, end=start + timedelta(days=1))

    @classmethod
    def ending(cls, end: datetime, hours: int = 24) -> Window:
        return cls(start=end - timedelta(hours=hours), end=end)


class RefreshUser(BaseModel):
    """Summarize these users' activity in the window into a new memory version each."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["refresh_user"]
    user_ids: list[uuid.UUID] = Field(min_length=1, max_length=100)
    window: Window
    run_key: str = Field(min_length=1, max_length=200)

    @model_validator(mode="before")
    @classmethod
    def _single_user(cls, data: Any) -> Any:
        if isinstance(data, dict) and "user_id" in data and "user_ids" not in data:
            data = {**data, "user_ids": [data["user_id"]]}
            del data["user_id"]
        return data


class ActivityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: uuid.UUID
    occurred_at: AwareDatetime
    kind: str = Field(min_length=1, max_length=100)
    payload: dict[str, Any] = Field(default_factory=dict)
    source: str = Field(min_length=1, max_length=100)
    external_id: str = Field(min_length=1, max_length=300)


class RecordActivity(BaseModel):
    """Activity sent by another service; idempotent on (source, external_id)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["record_activity"]
    activities: list[ActivityIn] = Field(min_length=1, max_length=500)


Message = Annotated[RefreshUser | RecordActivity, Field(discriminator="type")]


class QueueBody(RootModel[Message]):
    pass


def parse_message(body: str) -> RefreshUser | RecordActivity:
    """Parse one SQS body; anything malformed or unknown raises InvalidMessage."""
    try:
        return QueueBody.model_validate_json(body).root
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors()[:5])
        raise InvalidMessage(f"invalid message: {problems}") from err

"""Queue message bodies: a discriminated union on `type`, with documented size limits.

{"type": "refresh_user", "user_ids": ["<uuid>"], "window": {"start": "...", "end": "..."},
 "run_key": "daily:2026-11-21"}
{"type": "record_activity", "activities": [{"user_id": "<uuid>", "occurred_at": "...",
 "kind": "session", "payload": {...}, "source": "chat", "external_id": "msg-123"}]}
{"type": "collect_batch", "batch_id": "batch_...", "run_key": "daily:2026-11-21", "window": {...},
 "polls": 0}   (the worker's own, SUMMARY_DELIVERY=batch: jobs/summary_batch.py)
{"type": "revert_run", "revert_id": "<uuid>"}   (an operator's undo of a run: jobs/run_revert.py)
{"type": "revert_run_users", "revert_id": "<uuid>", "user_ids": ["<uuid>", ...]}
{"task_type": "GENERATE_MEMORY_BATCH", "conversations": [{"user_id": "<uuid>",
 "conversation_id": "<the user's conversation id>"}, ...]}

An activity of kind `message` whose payload names a `conversation_id` is a conversation message
(payload exactly {conversation_id, role, text}; external_id is the message id): it is stored with
its conversation (domain/conversations/), not as user activity.

The queue is the service's own door: only the deployment's services can send to it, so it is the
one door a memory_reset may come through (domain/summary/requests.py). A forget request that names no part
is refused here like any invalid activity: the message fails alone, naming it.

Limits: a body is at most MAX_MESSAGE_BYTES (SQS's own maximum), an activity payload at most
MAX_ACTIVITY_PAYLOAD_BYTES of compact JSON, a record_activity message at most
MAX_ACTIVITIES_PER_MESSAGE activities, a refresh_user message at most MAX_USERS_PER_MESSAGE users.
Over a limit, the message fails alone with a typed error naming it. Inside a GENERATE_MEMORY_BATCH
each item is checked alone (domain/conversations/): a malformed item is refused, the others run.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from user_memory.domain.companion.times import StorableTime
from user_memory.domain.conversations.model import (
    TASK_GENERATE_MEMORY_BATCH,
    MessagePayload,
    NewMessage,
    is_conversation_message,
    new_message,
)
from user_memory.domain.conversations.trigger import GenerateMemoryBatch
from user_memory.domain.model import Activity, Window
from user_memory.domain.storable import unstorable
from user_memory.domain.summary.requests import request_problem
from user_memory.errors import InvalidMessage, MessageTooLarge, describe_validation_error

MAX_MESSAGE_BYTES = 256 * 1024
MAX_ACTIVITY_PAYLOAD_BYTES = 16 * 1024
MAX_ACTIVITIES_PER_MESSAGE = 500
MAX_USERS_PER_MESSAGE = 100
RUN_KEY_MAX = 200


def check_payload_size(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload`, when its compact JSON is at most MAX_ACTIVITY_PAYLOAD_BYTES (a ValueError names its size)."""
    size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_ACTIVITY_PAYLOAD_BYTES:
        raise ValueError(f"payload is {size:,} bytes, over the limit of {MAX_ACTIVITY_PAYLOAD_BYTES:,}")
    return payload


class RefreshUser(BaseModel):
    """Summarize these users' unsummarized activity up to the window's end, one version each."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["refresh_user"]
    user_ids: list[uuid.UUID] = Field(min_length=1, max_length=MAX_USERS_PER_MESSAGE)
    window: Window
    run_key: str = Field(min_length=1, max_length=RUN_KEY_MAX)


class CollectBatch(BaseModel):
    """The worker's own: collect a Batch API batch of a run's summaries (SUMMARY_DELIVERY=batch),
    or look again after the delay while it runs (`polls`: how many times it has been looked at)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["collect_batch"]
    batch_id: str = Field(min_length=1, max_length=200)
    window: Window
    run_key: str = Field(min_length=1, max_length=RUN_KEY_MAX)
    polls: int = Field(default=0, ge=0)


class RevertRun(BaseModel):
    """Queue the pending users of an operator's undo of a run (adapters/runs.py), a page a message."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["revert_run"]
    revert_id: uuid.UUID


class RevertRunUsers(BaseModel):
    """Undo a run's version of these users, each alone (jobs/run_revert.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["revert_run_users"]
    revert_id: uuid.UUID
    user_ids: list[uuid.UUID] = Field(min_length=1, max_length=MAX_USERS_PER_MESSAGE)


class ActivityIn(BaseModel):
    """One activity as other services send it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    user_id: uuid.UUID
    occurred_at: StorableTime  # aware, and in the range PostgreSQL and psycopg read back (domain/companion/times.py)
    kind: str = Field(min_length=1, max_length=100)
    payload: dict[str, Any] = Field(default_factory=dict)
    source: str = Field(min_length=1, max_length=100)
    external_id: str = Field(min_length=1, max_length=300)

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, payload: dict[str, Any]) -> dict[str, Any]:
        return check_payload_size(payload)

    @model_validator(mode="after")
    def _conversation_message(self) -> ActivityIn:
        # What jsonb and text cannot store fails here, named, rather than as a database error
        # that SQS retries until the dead-letter queue.
        stored = {"kind": self.kind, "source": self.source, "external_id": self.external_id, "payload": self.payload}
        if reason := unstorable(stored, "an activity"):
            raise ValueError(reason)
        problem = request_problem(self.kind, self.payload)  # a reset is trusted here: the service's queue
        if problem is not None:
            raise ValueError(problem)
        if is_conversation_message(self.kind, self.payload):
            try:
                MessagePayload.model_validate(self.payload)
            except ValidationError as err:  # named as the payload's fields, never their values
                raise ValueError(f"a conversation message's payload: {describe_validation_error(err)}") from None
        return self

    @property
    def is_message(self) -> bool:
        """A conversation message (kind `message`, a payload naming a conversation_id)."""
        return is_conversation_message(self.kind, self.payload)

    def to_message(self) -> NewMessage:
        return new_message(
            user_id=self.user_id,
            occurred_at=self.occurred_at,
            payload=self.payload,
            source=self.source,
            external_id=self.external_id,
        )

    def to_activity(self) -> Activity:
        return Activity(
            user_id=self.user_id,
            occurred_at=self.occurred_at,
            kind=self.kind,
            payload=self.payload,
            source=self.source,
            external_id=self.external_id,
        )


class RecordActivity(BaseModel):
    """Activity sent by another service; idempotent on (user_id, source, external_id)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["record_activity"]
    activities: list[ActivityIn] = Field(min_length=1, max_length=MAX_ACTIVITIES_PER_MESSAGE)


class ExportUser(BaseModel):
    """Run one export job (POST /me/export, the operators' route): its id only, never user data."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["export_user"]
    export_id: uuid.UUID


class ImportUser(BaseModel):
    """Run one import job (POST /admin/imports/{id}/start): its id only, never user data."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["import_user"]
    import_id: uuid.UUID


def _message_tag(value: Any) -> str | None:
    """`type` names the service's own messages; GENERATE_MEMORY_BATCH comes as `task_type`."""
    if isinstance(value, dict):
        tag = value.get("type", value.get("task_type"))
    else:
        tag = getattr(value, "type", None) or getattr(value, "task_type", None)
    return tag if isinstance(tag, str) else None


AnyMessage = (
    RefreshUser
    | RecordActivity
    | CollectBatch
    | GenerateMemoryBatch
    | RevertRun
    | RevertRunUsers
    | ExportUser
    | ImportUser
)
Message = Annotated[
    Annotated[RefreshUser, Tag("refresh_user")]
    | Annotated[RecordActivity, Tag("record_activity")]
    | Annotated[CollectBatch, Tag("collect_batch")]
    | Annotated[GenerateMemoryBatch, Tag(TASK_GENERATE_MEMORY_BATCH)]
    | Annotated[RevertRun, Tag("revert_run")]
    | Annotated[RevertRunUsers, Tag("revert_run_users")]
    | Annotated[ExportUser, Tag("export_user")]
    | Annotated[ImportUser, Tag("import_user")],
    Discriminator(
        _message_tag,
        custom_error_type="invalid_message_type",
        custom_error_message=(
            "type must be refresh_user, record_activity, collect_batch, revert_run, revert_run_users or"
            " export_user, import_user, or task_type GENERATE_MEMORY_BATCH"
        ),
    ),
]
_MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def check_body_size(body: str) -> str:
    """Refuse a body over MAX_MESSAGE_BYTES before parsing it."""
    size = len(body.encode()) if isinstance(body, str) else 0
    if size > MAX_MESSAGE_BYTES:
        raise MessageTooLarge(f"message body is {size:,} bytes, over the limit of {MAX_MESSAGE_BYTES:,}")
    return body


def parse_message(body: str) -> AnyMessage:
    """Parse one queue body; anything malformed, unknown or too large raises InvalidMessage."""
    if not isinstance(body, str):
        raise InvalidMessage(f"a message body must be a JSON string, got {type(body).__name__}")
    check_body_size(body)
    try:
        return _MESSAGE.validate_json(body)
    except ValidationError as err:
        raise InvalidMessage(f"invalid message: {describe_validation_error(err)}") from err

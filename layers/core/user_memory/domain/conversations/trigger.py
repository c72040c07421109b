"""The trigger's side: GENERATE_MEMORY_BATCH messages (their items, refused ones, bodies that fit
SQS) and one trigger run over the quiet, pending conversations."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from user_memory.domain.conversations.model import (
    MAX_BATCH_MESSAGE_BYTES,
    MAX_CONVERSATIONS_PER_MESSAGE,
    TASK_GENERATE_MEMORY_BATCH,
    ConversationId,
    ConversationKey,
)
from user_memory.domain.conversations.ports import ConversationStore, Sender
from user_memory.errors import describe_validation_error

# -- the trigger -------------------------------------------------------------------------------------------------


class BatchItem(BaseModel):
    """One conversation a GENERATE_MEMORY_BATCH names: {"user_id": ..., "conversation_id": ...}."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    user_id: uuid.UUID
    conversation_id: ConversationId

    @property
    def key(self) -> ConversationKey:
        return ConversationKey(self.user_id, self.conversation_id)


_BATCH_ITEM: TypeAdapter[BatchItem] = TypeAdapter(BatchItem)


@dataclass(frozen=True, kw_only=True)
class RefusedItem:
    """An item of a GENERATE_MEMORY_BATCH that does not name a conversation: its place in the
    message, what of it can be logged (ids cut and escaped, None when absent or not a string),
    and why (fields named, never values)."""

    position: int
    user_id: str | None
    conversation_id: str | None
    reason: str


def _loggable(value: Any) -> str | None:
    """An id from a malformed item as a log can carry it: escaped, at most 100 characters."""
    if not isinstance(value, str):
        return None
    shown = json.dumps(value, ensure_ascii=True)[1:-1]
    return shown if len(shown) <= 100 else shown[:99] + "…"


class GenerateMemoryBatch(BaseModel):
    """{"task_type": "GENERATE_MEMORY_BATCH", "conversations": [{"user_id": ..., "conversation_id": ...}]}:
    summarize these conversations.

    The message's own shape is checked here (a body that is not this message fails as a whole);
    each item is checked alone by `keys()`, so one malformed item is refused without failing the
    others. `attempt` counts re-sends of conversations that failed (0 for the trigger's and other
    services' messages). The shape before migration 014 (`conversation_ids`, ids alone) is
    refused with a message saying so: an id alone no longer names a conversation.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    task_type: Literal["GENERATE_MEMORY_BATCH"]
    conversations: list[Any] = Field(min_length=1, max_length=MAX_CONVERSATIONS_PER_MESSAGE)
    attempt: int = Field(default=0, ge=0, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _ids_alone(cls, data: Any) -> Any:
        if isinstance(data, dict) and "conversation_ids" in data:
            raise ValueError(
                "conversation_ids (ids alone) is no longer accepted: a conversation is named by its user,"
                ' as "conversations": [{"user_id": ..., "conversation_id": ...}]'
            )
        return data

    def keys(self) -> tuple[list[ConversationKey], list[RefusedItem]]:
        """The conversations named (each once, in order) and the items refused."""
        keys: dict[ConversationKey, None] = {}
        refused: list[RefusedItem] = []
        for n, item in enumerate(self.conversations):
            try:
                keys[_BATCH_ITEM.validate_python(item).key] = None
            except ValidationError as err:
                fields = item if isinstance(item, dict) else {}
                refused.append(
                    RefusedItem(
                        position=n,
                        user_id=_loggable(fields.get("user_id")),
                        conversation_id=_loggable(fields.get("conversation_id")),
                        reason=describe_validation_error(err)[:300],
                    )
                )
        return list(keys), refused


def _item_json(key: ConversationKey) -> str:
    """One item as the body holds it (a UUID needs no escaping; the id is JSON-encoded once)."""
    return f'{{"user_id":"{key.user_id}","conversation_id":{json.dumps(key.conversation_id, ensure_ascii=False)}}}'


def _body(items: Sequence[str], attempt: int) -> str:
    more = f',"attempt":{attempt}' if attempt else ""
    return f'{{"task_type":"{TASK_GENERATE_MEMORY_BATCH}","conversations":[{",".join(items)}]{more}}}'


def batch_bodies(
    keys: Iterable[ConversationKey],
    *,
    per_message: int,
    max_bytes: int = MAX_BATCH_MESSAGE_BYTES,
    attempt: int = 0,
) -> list[str]:
    """GENERATE_MEMORY_BATCH bodies of at most `per_message` conversations and `max_bytes` bytes each.

    Sizes are measured on the encoded JSON (ids with quotes and escapes), so a body is never over
    the limit whatever the ids hold; each item is encoded once.
    """
    per_message = max(1, min(per_message, MAX_CONVERSATIONS_PER_MESSAGE))
    empty = len(_body([], attempt).encode())
    bodies: list[str] = []
    chunk: list[str] = []
    size = empty
    for key in keys:
        encoded = _item_json(key)
        item = len(encoded.encode()) + (1 if chunk else 0)
        if chunk and (len(chunk) >= per_message or size + item > max_bytes):
            bodies.append(_body(chunk, attempt))
            chunk, size = [], empty
            item -= 1
        if empty + item > max_bytes:
            raise ValueError("a conversation alone does not fit a message")
        chunk.append(encoded)
        size += item
    if chunk:
        bodies.append(_body(chunk, attempt))
    return bodies


@dataclass(frozen=True, kw_only=True)
class TriggerReport:
    quiet_before: datetime
    threshold_minutes: int
    conversations: int
    messages: int
    pages: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "quiet_before": self.quiet_before.isoformat(),
            "threshold_minutes": self.threshold_minutes,
            "conversations": self.conversations,
            "messages": self.messages,
            "pages": self.pages,
        }


def run_trigger(
    store: ConversationStore,
    sender: Sender,
    *,
    threshold: timedelta,
    per_message: int,
    page_size: int = 1000,
    now: datetime | None = None,
) -> TriggerReport:
    """Find every conversation quiet for longer than `threshold` whose memory is missing or stale,
    and send their keys in GENERATE_MEMORY_BATCH messages; a page's messages are sent before the
    next page is read. A failed send raises SendFailed (what was sent stays sent: the worker skips
    conversations whose memory is already current)."""
    started = time.perf_counter()
    quiet_before = (now or datetime.now(UTC)) - threshold
    conversations = messages = pages = 0
    for page in store.pending_pages(quiet_before, page_size=page_size):
        pages += 1
        conversations += len(page)
        messages += sender.send(batch_bodies(page, per_message=per_message))
    return TriggerReport(
        quiet_before=quiet_before,
        threshold_minutes=int(threshold.total_seconds() // 60),
        conversations=conversations,
        messages=messages,
        pages=pages,
        seconds=time.perf_counter() - started,
    )

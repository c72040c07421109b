"""A conversation (the user's own id for it), its messages and its memory: the schema, the
bounds, and what the store returns and an export holds."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from user_memory.errors import InvalidDocument, describe_validation_error

TASK_GENERATE_MEMORY_BATCH = "GENERATE_MEMORY_BATCH"
# SQS's own limit (user_memory.domain.messages.MAX_MESSAGE_BYTES, repeated to keep this module standalone).
MAX_BATCH_MESSAGE_BYTES = 256 * 1024
# Conversations one GENERATE_MEMORY_BATCH message may name. Each is one or more LLM calls, and
# the worker re-sends what it cannot start before its deadline, so this bounds a message's
# size, not its time; the trigger's own default (CONVERSATIONS_PER_MESSAGE) is sized to the time.
MAX_CONVERSATIONS_PER_MESSAGE = 100
MAX_CONVERSATION_ID_CHARS = 200
MAX_MESSAGE_ID_CHARS = 300
DEFAULT_INACTIVITY_THRESHOLD_MINUTES = 120
MAX_INACTIVITY_THRESHOLD_MINUTES = 60 * 24 * 31  # a month
# A message's line in the prompt is cut beyond this, with a marker saying how much was cut.
MAX_MESSAGE_LINE_CHARS = 4_000
# What a memory may hold (the model is asked for less; longer answers are cut, not refused).
MAX_MEMORY_ITEMS = 20
MAX_MEMORY_ITEM_CHARS = 500
MAX_DISCUSSED_CHARS = 2_000
MAX_TONE_CHARS = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _identifier(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


ConversationId = Annotated[str, Field(min_length=1, max_length=MAX_CONVERSATION_ID_CHARS), AfterValidator(_identifier)]


@dataclass(frozen=True, order=True)
class ConversationKey:
    """A conversation: the user's own id for it. Another user's conversation of the same id is
    another conversation."""

    user_id: uuid.UUID
    conversation_id: str

    def as_json(self) -> dict[str, str]:
        return {"user_id": str(self.user_id), "conversation_id": self.conversation_id}

    def __str__(self) -> str:
        return f"{self.user_id}/{self.conversation_id}"


# -- the memory --------------------------------------------------------------------------------------


class ConversationMemory(BaseModel):
    """What one conversation left behind: the structured memory stored per conversation.

    Strict structured output takes this schema as it is (every field required, no other keys).
    """

    model_config = ConfigDict(extra="forbid")
    discussed: str = Field(description="What the conversation was about, in a few sentences.")
    learned_about_user: list[str] = Field(
        description="Facts, preferences and circumstances the user revealed about themselves, one per item."
    )
    decisions: list[str] = Field(description="What the user decided or agreed to, one per item.")
    open_loops: list[str] = Field(
        description="Questions left unanswered, promises and follow-ups still to do, one per item."
    )
    tone: str = Field(description="The user's tone and mood, in a few words.")

    def normalized(self) -> ConversationMemory:
        """Whitespace trimmed, empty and repeated items dropped, every field cut to its limit."""
        return ConversationMemory(
            discussed=cut_text(" ".join(self.discussed.split()), MAX_DISCUSSED_CHARS),
            learned_about_user=_items(self.learned_about_user),
            decisions=_items(self.decisions),
            open_loops=_items(self.open_loops),
            tone=cut_text(" ".join(self.tone.split()), MAX_TONE_CHARS),
        )


def cut_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _items(values: Iterable[str], limit: int = MAX_MEMORY_ITEMS) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for value in values:
        item = cut_text(" ".join(str(value).split()), MAX_MEMORY_ITEM_CHARS)
        key = item.casefold()
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out[-limit:]  # the newest items are kept when a long conversation overflows


def parse_memory(data: Any) -> ConversationMemory:
    """A memory from stored or model-written JSON; InvalidDocument naming the fields when it is not one."""
    try:
        return ConversationMemory.model_validate(data).normalized()
    except ValidationError as err:
        raise InvalidDocument(f"not a conversation memory: {describe_validation_error(err)}") from err


# -- messages and conversations ------------------------------------------------------------------------


class MessagePayload(BaseModel):
    """The payload of an activity of kind `message` that belongs to a conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    conversation_id: ConversationId
    role: Literal["user", "assistant", "system", "tool"]
    text: str


def is_conversation_message(kind: str, payload: Any) -> bool:
    """An activity is a conversation message when its kind is `message` and its payload names a conversation."""
    return kind == "message" and isinstance(payload, dict) and "conversation_id" in payload


@dataclass(frozen=True, kw_only=True)
class NewMessage:
    """A message to record (from an activity of kind `message`)."""

    user_id: uuid.UUID
    conversation_id: str
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str

    def as_json(self) -> dict[str, Any]:
        return {
            "user_id": str(self.user_id),
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "role": self.role,
            "text": self.text,
            "occurred_at": self.occurred_at.isoformat(),
            "source": self.source,
        }


def new_message(
    *, user_id: uuid.UUID, occurred_at: datetime, payload: dict[str, Any], source: str, external_id: str
) -> NewMessage:
    """The message an activity of kind `message` carries; InvalidDocument names what is wrong."""
    try:
        parsed = MessagePayload.model_validate(payload)
    except ValidationError as err:
        raise InvalidDocument(f"a conversation message's payload: {describe_validation_error(err)}") from err
    if len(external_id) > MAX_MESSAGE_ID_CHARS or _CONTROL.search(external_id):
        raise InvalidDocument(f"a message id is 1 to {MAX_MESSAGE_ID_CHARS} characters without control characters")
    if "\x00" in parsed.text:
        raise InvalidDocument("a message's text may not contain U+0000")
    return NewMessage(
        user_id=user_id,
        conversation_id=parsed.conversation_id,
        message_id=external_id,
        role=parsed.role,
        text=parsed.text,
        occurred_at=occurred_at,
        source=source,
    )


@dataclass(frozen=True, kw_only=True)
class ConversationMessage:
    """A stored message: `seq` is its number in its conversation, in the order it was recorded."""

    conversation_id: str
    seq: int
    message_id: str
    role: str
    text: str
    occurred_at: datetime


@dataclass(frozen=True, kw_only=True)
class ConversationState:
    """What the worker reads first: the owner, the message count, and the current memory if any."""

    conversation_id: str
    user_id: uuid.UUID
    messages: int
    last_message_at: datetime
    memory_through: int | None = None
    memory: dict[str, Any] | None = None

    @property
    def key(self) -> ConversationKey:
        return ConversationKey(self.user_id, self.conversation_id)

    @property
    def up_to_date(self) -> bool:
        return (self.memory_through or 0) >= self.messages


@dataclass(frozen=True, kw_only=True)
class StoredMemory:
    """One row of conversation_memories, as other code reads it (the daily summary, the export)."""

    conversation_id: str
    user_id: uuid.UUID
    memory: dict[str, Any]
    last_message_seq: int
    last_message_id: str
    last_message_at: datetime
    model: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class ExportedMessage:
    """A message as the export shows it."""

    seq: int
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str


@dataclass(frozen=True, kw_only=True)
class ExportedConversation:
    """A conversation as the export shows it: its messages in seq order, and its memory."""

    conversation_id: str
    first_message_at: datetime
    last_message_at: datetime
    created_at: datetime
    messages: list[ExportedMessage]
    memory: StoredMemory | None

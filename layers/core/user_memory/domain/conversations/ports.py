"""What conversation memories talk to: the store, the summarizer, the sender and the clock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from user_memory.domain.conversations.model import (
    ConversationKey,
    ConversationMemory,
    ConversationMessage,
    ConversationState,
    NewMessage,
    StoredMemory,
)

# -- ports -------------------------------------------------------------------------------------------------


class ConversationStore(Protocol):
    """Where conversations, their messages and memories are kept."""

    def record(self, messages: Sequence[NewMessage]) -> int:
        """Store messages; a repeat of (user_id, conversation_id, message_id) is ignored. Returns rows new."""
        ...

    def pending_pages(self, quiet_before: datetime, *, page_size: int) -> Iterator[list[ConversationKey]]:
        """Pages of conversations whose last message occurred before `quiet_before` and whose
        memory is missing or older than their last message, oldest quiet first."""
        ...

    def state(self, key: ConversationKey) -> ConversationState | None:
        """The conversation and its memory; None when the user has no such conversation (or was erased)."""
        ...

    def messages(
        self, key: ConversationKey, *, after_seq: int, through_seq: int, limit: int
    ) -> list[ConversationMessage]:
        """Messages with after_seq < seq <= through_seq, in seq order, at most `limit`."""
        ...

    def save_memory(
        self, state: ConversationState, memory: dict[str, Any], last: ConversationMessage, *, model: str
    ) -> Literal["written", "unchanged", "missing"]:
        """Upsert the memory as covering messages up to `last` (one statement): `written`, `unchanged`
        when a memory covering as much is recorded already, `missing` when the conversation is gone."""
        ...

    def memories_updated(self, user_id: uuid.UUID, start: datetime, end: datetime) -> list[StoredMemory]:
        """The user's conversation memories updated in [start, end), oldest update first."""
        ...


@dataclass(frozen=True, kw_only=True)
class ConversationSummary:
    """What a summarizer proposes for a conversation, and what it cost."""

    memory: ConversationMemory
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ConversationSummarizer(Protocol):
    """Folds a conversation's new messages into its memory (None: the first memory)."""

    name: str

    def summarize_conversation(
        self,
        previous: ConversationMemory | None,
        messages: Sequence[ConversationMessage],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> ConversationSummary: ...


class Sender(Protocol):
    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int: ...


class Clock(Protocol):
    def left(self) -> float: ...

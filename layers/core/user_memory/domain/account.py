"""One user's activity and account: recording activity (conversation messages to their
conversations), the export of everything stored about the user, and its erasure."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from user_memory.domain.companion.ports import CompanionData
from user_memory.domain.conversations.model import (
    ExportedConversation,
    NewMessage,
    is_conversation_message,
    new_message,
)
from user_memory.domain.kv import KvEntry
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity
from user_memory.domain.ports import ActivityWriter
from user_memory.domain.summary.requests import check_activity
from user_memory.errors import InvalidActivity, InvalidRequest


class AccountData(Protocol):
    """What an export reads beside the memory's versions, and the erasure."""

    def activity(self, user_id: uuid.UUID) -> list[Activity]:
        """Every activity row of the user, oldest first."""
        ...

    def kv_entries(self, user_id: uuid.UUID) -> list[KvEntry]:
        """Every live key-value entry of the user, by namespace and key."""
        ...

    def conversations(self, user_id: uuid.UUID) -> list[ExportedConversation]:
        """Every conversation of the user with its messages and memory."""
        ...

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        """Delete every row of the user (history included) in one transaction; rows per relation."""
        ...


class MessageWriter(Protocol):
    def record(self, messages: list[NewMessage]) -> int:
        """Store conversation messages; a repeat of (user_id, conversation_id, message_id) is ignored.
        Returns rows new."""
        ...


class AccountService:
    """One user's activity, export and erasure, on one unit of work."""

    def __init__(
        self,
        *,
        user_id: uuid.UUID,
        store: MemoryStore,
        activity: ActivityWriter,
        account: AccountData,
        conversations: MessageWriter | None = None,
        companion: CompanionData | None = None,
    ) -> None:
        self.user_id = user_id
        self._store = store
        self._activity = activity
        self._account = account
        self._conversations = conversations
        self._companion = companion

    def record_activity(self, items: Iterable[Activity]) -> tuple[int, int]:
        """Store the user's activity (every item must be this user's); (received, new).

        An activity of kind `message` whose payload names a `conversation_id` is a conversation
        message: it is stored with the user's conversation of that id (idempotent on the
        conversation and the message id, its external_id), not as activity. Conversation ids are
        the user's own: another user's conversation of the same id is another conversation.
        Every item is checked before any is stored: a forget request must name its part
        (InvalidActivity), and an end user never records a memory_reset (ResetNotAllowed;
        domain/summary/requests.py).
        """
        records = list(items)
        if any(a.user_id != self.user_id for a in records):
            raise InvalidRequest("activity can only be recorded for the caller")
        for n, a in enumerate(records, 1):
            try:  # an end user's own activity: never a trusted source (domain/summary/requests.py)
                check_activity(a.kind, a.payload, trusted=False)
            except InvalidActivity as err:
                raise InvalidActivity(f"activity {n}: {err}") from None
        messages = [
            new_message(
                user_id=a.user_id,
                occurred_at=a.occurred_at,
                payload=a.payload,
                source=a.source,
                external_id=a.external_id,
            )
            for a in records
            if is_conversation_message(a.kind, a.payload)
        ]
        activities = [a for a in records if not is_conversation_message(a.kind, a.payload)]
        if messages and self._conversations is None:
            raise InvalidRequest("this deployment keeps no conversations")
        new = self._activity.record(activities) if activities else 0
        if messages and self._conversations is not None:
            new += self._conversations.record(messages)
        return len(records), new

    def export(self) -> dict[str, Any]:
        """Everything stored about the user: every version, key-value entries, activity, conversations."""
        versions = list(self._store.versions(self.user_id))
        return {
            "user_id": str(self.user_id),
            "versions": versions,
            "kv": self._account.kv_entries(self.user_id),
            "activity": self._account.activity(self.user_id),
            "conversations": self._account.conversations(self.user_id),
            "ratings": self._companion.ratings(self.user_id) if self._companion is not None else [],
            "digests": self._companion.digests(self.user_id) if self._companion is not None else [],
        }

    def erase(self) -> dict[str, int]:
        """Every row of the user removed, history included, in one transaction; rows per relation."""
        return self._account.erase(self.user_id)

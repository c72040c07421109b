"""A user's account as a whole: its service (activity recorded, the export, the erasure), the
erasure's receipt, and where finished exports live.

An erasure answers a receipt (`ErasureReceipt`): rows deleted per relation, when, at whose
request and a salted hash of the user id, never content; the database stores it in the same
transaction as the deletes (migration 027). Exports are files of JSON Lines written outside the
database (`ExportObjects`: S3, or a folder locally), so an erasure deletes them first and counts
them in its receipt (`export_objects`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
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

# Who asked for an erasure: the end user itself, an operator (by the token's subject), the CLI.
REQUESTED_BY_SELF = "self"
MAX_REQUESTER_CHARS = 300


def operator_requester(subject: str) -> str:
    """The receipt's requester for an operator acting through the API."""
    return f"operator:{subject}"[:MAX_REQUESTER_CHARS]


@dataclass(frozen=True, kw_only=True)
class ErasureReceipt:
    """What an erasure deleted (rows per relation, export objects), when, at whose request."""

    id: str
    user_hash: str
    erased_at: datetime
    requested_by: str
    deleted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "user_hash": self.user_hash,
            "erased_at": self.erased_at,
            "requested_by": self.requested_by,
            "deleted": dict(self.deleted),
        }


class ExportObjects(Protocol):
    """Where an export's JSON Lines go: S3 (adapters/exports.py) or a local folder."""

    def write(self, key: str, lines: Iterator[bytes]) -> int:
        """Store the lines under `key`, streaming; the bytes written."""
        ...

    def url(self, key: str, *, expires_in: int) -> str:
        """A URL that reads the object without credentials (pre-signed), valid `expires_in` seconds."""
        ...

    def delete(self, keys: list[str]) -> int:
        """Delete the objects (a missing one is not an error); how many were asked to go."""
        ...

    def read(self, key: str) -> Iterator[bytes]:
        """The object's lines, streaming (an import reads an export back)."""
        ...

    def upload_url(self, key: str, *, expires_in: int) -> str:
        """Where a client puts an object without credentials (a pre-signed PUT; locally a file path)."""
        ...


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

    def export_keys(self, user_id: uuid.UUID) -> list[str]:
        """The objects the user's export jobs wrote (S3 keys or local file names)."""
        ...

    def erase_with_receipt(self, user_id: uuid.UUID, requested_by: str, *, export_objects: int = 0) -> ErasureReceipt:
        """`erase`, answering the receipt it stored (an end user's names itself: `self`)."""
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
        operator: str | None = None,
        exports: ExportObjects | None = None,
    ) -> None:
        self.user_id = user_id
        self.operator = operator  # who acts with the service's rights (None: the end user itself)
        self._exports = exports
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

    def erase(self) -> ErasureReceipt:
        """Every row of the user removed, history included, in one transaction, and the export
        objects its jobs wrote; answers the receipt stored with the deletes.

        The objects go first: when the transaction then fails, the user is left with fewer
        copies, never with a copy the receipt says is gone."""
        keys = self._account.export_keys(self.user_id)
        deleted = self._exports.delete(keys) if self._exports is not None and keys else 0
        requested_by = operator_requester(self.operator) if self.operator else REQUESTED_BY_SELF
        return self._account.erase_with_receipt(self.user_id, requested_by, export_objects=deleted)

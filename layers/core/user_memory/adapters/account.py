"""A user's account as a whole: what an export reads beside the versions, and the erasure.

`PostgresAccount` runs either as the service (any user: operators' exports and erasures) or as
the end user (`end_user=True`, inside a transaction that runs as role authenticated): then the
erase goes through user_memory_erase_me(), which only ever erases auth.uid(), and every read is
narrowed by row-level security as well as by its WHERE clause.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime

from user_memory.adapters.conversations import export_conversations
from user_memory.adapters.kv import _COLUMNS as _KV_COLUMNS
from user_memory.adapters.kv import InMemoryKv, _entry
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.postgres import ConnectionSource, _Database
from user_memory.domain.account import REQUESTED_BY_SELF, ErasureReceipt
from user_memory.domain.conversations.model import ExportedConversation
from user_memory.domain.kv import Clock, KvEntry, utc_now
from user_memory.domain.model import Activity
from user_memory.errors import AccessDenied

_ACTIVITY = """
SELECT id, user_id, occurred_at, kind, payload, source, external_id FROM user_activity
 WHERE user_id = %s ORDER BY id
"""

_KV = f"""
SELECT {_KV_COLUMNS} FROM user_memory_kv
 WHERE user_id = %s AND (expires_at IS NULL OR expires_at > %s)
 ORDER BY namespace, key
"""


_RECEIPT_COLUMNS = "id::text, user_hash, erased_at, requested_by, deleted"

# Migration 027: the end user's erase names no user (auth.uid()); the service's names its requester.
_ERASE_ME = f"SELECT {_RECEIPT_COLUMNS} FROM user_memory_erase_me_with_receipt(%s)"
_ERASE = f"SELECT {_RECEIPT_COLUMNS} FROM user_memory_erase_with_receipt(%s, %s, %s)"

# The objects of the user's export jobs (an erase deletes them before the rows) and, since
# migration 029, the files uploaded for its imports (a done import deleted its own).
_EXPORT_KEYS = """
SELECT object_key FROM (
  SELECT object_key, created_at FROM user_memory_exports WHERE user_id = %(u)s AND object_key IS NOT NULL
  UNION ALL
  SELECT object_key, created_at FROM user_memory_imports WHERE user_id = %(u)s AND status <> 'done'
) k ORDER BY created_at
"""

# Receipts newest first, keyset on (erased_at, id); optionally one user's, by the receipts' hash.
_RECEIPTS = f"""
SELECT {_RECEIPT_COLUMNS} FROM user_memory_erasure_receipts
 WHERE (%(user)s::uuid IS NULL OR user_hash = user_memory_user_hash(%(user)s::uuid))
   AND (%(before_at)s::timestamptz IS NULL OR (erased_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
 ORDER BY erased_at DESC, id DESC
 LIMIT %(limit)s
"""


def _receipt(row: tuple) -> ErasureReceipt:  # type: ignore[type-arg]
    return ErasureReceipt(
        id=row[0],
        user_hash=row[1],
        erased_at=row[2],
        requested_by=row[3],
        deleted={k: int(v) for k, v in row[4].items()},
    )


class PostgresAccount(_Database):
    """AccountData on PostgreSQL."""

    def __init__(self, pool: ConnectionSource, *, end_user: bool = False, now: Clock = utc_now) -> None:
        super().__init__(pool)
        self.end_user = end_user
        self._clock = now

    def activity(self, user_id: uuid.UUID) -> list[Activity]:
        with self.connection() as conn:
            rows = conn.execute(_ACTIVITY, (user_id,)).fetchall()
        return [
            Activity(id=r[0], user_id=r[1], occurred_at=r[2], kind=r[3], payload=r[4], source=r[5], external_id=r[6])
            for r in rows
        ]

    def kv_entries(self, user_id: uuid.UUID) -> list[KvEntry]:
        now: datetime = self._clock()
        with self.connection() as conn:
            rows = conn.execute(_KV, (user_id, now)).fetchall()
        return [_entry(r) for r in rows]

    def conversations(self, user_id: uuid.UUID) -> list[ExportedConversation]:
        return export_conversations(self, user_id)

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        with self.connection() as conn:
            if self.end_user:
                rows = conn.execute("SELECT relation, deleted FROM user_memory_erase_me()").fetchall()
            else:
                rows = conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (user_id,)).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def export_keys(self, user_id: uuid.UUID) -> list[str]:
        with self.connection() as conn:
            return [r[0] for r in conn.execute(_EXPORT_KEYS, {"u": user_id}).fetchall()]

    def erase_with_receipt(self, user_id: uuid.UUID, requested_by: str, *, export_objects: int = 0) -> ErasureReceipt:
        with self.connection() as conn:
            if self.end_user:
                row = conn.execute(_ERASE_ME, (export_objects,)).fetchone()
            else:
                row = conn.execute(_ERASE, (user_id, requested_by, export_objects)).fetchone()
        assert row is not None  # the functions return exactly one row or raise
        return _receipt(row)

    def receipts(
        self, *, limit: int, before: tuple[datetime, str] | None = None, user_id: uuid.UUID | None = None
    ) -> list[ErasureReceipt]:
        """Operators: erasure receipts newest first (one user's, when named)."""
        params = {
            "user": user_id,
            "before_at": before[0] if before else None,
            "before_id": before[1] if before else None,
            "limit": limit,
        }
        with self.connection() as conn:
            return [_receipt(r) for r in conn.execute(_RECEIPTS, params).fetchall()]


_SALT = secrets.token_hex(32)  # the in-memory kit's receipts: a salt per process


class InMemoryAccount:
    """AccountData over the in-memory recorder, activity and key-value store."""

    def __init__(
        self,
        recorder: InMemoryRecorder,
        activity: InMemoryActivity,
        kv: InMemoryKv,
        *,
        end_user: uuid.UUID | None = None,
    ) -> None:
        self._recorder = recorder
        self._activity = activity
        self._kv = kv
        self._end_user = end_user

    def activity(self, user_id: uuid.UUID) -> list[Activity]:
        return self._activity.rows_of(user_id)

    def kv_entries(self, user_id: uuid.UUID) -> list[KvEntry]:
        return self._kv.entries_of(user_id)

    def conversations(self, user_id: uuid.UUID) -> list[ExportedConversation]:
        return []  # the in-memory kit keeps no conversations (MemoryService refuses their messages)

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        if self._end_user is not None and user_id != self._end_user:
            raise AccessDenied("user_memory_erase_me: may only erase own data")
        counts = self._recorder.erase(user_id)
        if self._recorder.activity is not self._activity:  # the recorder erased only its own activity
            counts["user_activity"] += self._activity.erase(user_id)
        counts["user_memory_kv"] = self._kv.erase(user_id)
        return counts

    def export_keys(self, user_id: uuid.UUID) -> list[str]:
        return []  # the in-memory kit writes no export objects

    def erase_with_receipt(self, user_id: uuid.UUID, requested_by: str, *, export_objects: int = 0) -> ErasureReceipt:
        counts = self.erase(user_id)
        return ErasureReceipt(
            id=str(uuid.uuid4()),
            user_hash=hashlib.sha256(f"{_SALT}:{user_id}".encode()).hexdigest(),
            erased_at=utc_now(),
            requested_by=REQUESTED_BY_SELF if self._end_user is not None else requested_by,
            deleted={**counts, "export_objects": export_objects},
        )

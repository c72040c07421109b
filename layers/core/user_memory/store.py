"""MemoryStore: each user's memory document as a chain of RFC 6902 patches on PostgreSQL.

Version n's row holds the patch from n-1 to n; every `checkpoint_interval` versions (and
whenever a patch is large relative to the document) the row also holds the full document.
`user_memory_heads` keeps the latest document per user: reads of the head are one query,
and writers lock that row, so concurrent writers serialize and a stale writer gets
VersionConflict. The store accepts any JSON object; schemas are validated a layer above.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from user_memory.document import DEFAULT_MAX_BYTES, check_size, document_size
from user_memory.errors import InvalidDocument, InvalidUserId, UnknownVersion, VersionConflict
from user_memory.patching import apply_patch, json_equal, make_patch

Document = dict[str, Any]
Patch = list[dict[str, Any]]

# A patch bigger than this share of the new document's size makes its row a checkpoint:
# rebuilding through such a patch costs about as much as storing the document.
LARGE_PATCH_RATIO = 0.5


@dataclass(frozen=True)
class MemoryVersion:
    """One version of a user's memory document."""

    version: int
    document: Document
    created_at: datetime | None
    source: str | None


@dataclass(frozen=True)
class HistoryEntry:
    """One row of a user's history, newest first."""

    version: int
    patch: Patch
    source: str | None
    created_at: datetime
    is_checkpoint: bool


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the resulting head, its patch, and whether a row was written."""

    version: int
    document: Document
    patch: Patch
    written: bool
    is_checkpoint: bool = False
    reason: str = "written"  # written | unchanged | idempotent


def _uid(user_id: Any) -> uuid.UUID:
    if isinstance(user_id, uuid.UUID):
        return user_id
    try:
        return uuid.UUID(str(user_id))
    except ValueError:
        raise InvalidUserId(f"user id {user_id!r} is not a UUID") from None


_HEAD = "SELECT version, document, updated_at, source_description FROM user_memory_heads WHERE user_id = %s"

# Lock, check, insert and move the head in one statement (migrations/004_append_function.sql).
_APPEND = "SELECT status, version, created_at FROM user_memory_append(%s, %s, %s, %s, %s, %s, %s)"

_RECORDED = "SELECT version FROM user_memory_snapshots WHERE user_id = %s AND idempotency_key = %s"

# Latest checkpoint at or below the version, then every row after it up to the version.
_REBUILD = """
SELECT version, patch, is_full_snapshot, full_snapshot_content, created_at, source_description
  FROM user_memory_snapshots
 WHERE user_id = %(user_id)s AND version <= %(version)s
   AND version >= coalesce((SELECT max(version) FROM user_memory_snapshots
                             WHERE user_id = %(user_id)s AND is_full_snapshot
                               AND version <= %(version)s), 1)
 ORDER BY version
"""


class MemoryStore:
    """Versioned memory documents on PostgreSQL (psycopg 3).

    Args:
        database: a DSN, an open psycopg connection (autocommit), or a psycopg_pool pool.
        checkpoint_interval: store the full document every this many versions.
        max_document_bytes: documents larger than this are refused with DocumentTooLarge.
    """

    def __init__(
        self,
        database: str | psycopg.Connection | ConnectionPool,
        *,
        checkpoint_interval: int = 50,
        max_document_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if checkpoint_interval < 1:
            raise ValueError("checkpoint_interval must be at least 1")
        self.checkpoint_interval = checkpoint_interval
        self.max_document_bytes = max_document_bytes
        self._pool: ConnectionPool | None = database if isinstance(database, ConnectionPool) else None
        self._dsn = database if isinstance(database, str) else None
        self._conn: psycopg.Connection | None = database if isinstance(database, psycopg.Connection) else None
        self._owns_conn = False
        self._lock = threading.RLock()

    # -- connections -------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
            return
        with self._lock:  # one connection: one transaction at a time
            if self._conn is None or self._conn.closed:
                assert self._dsn is not None
                self._conn = psycopg.connect(self._dsn, autocommit=True)
                self._owns_conn = True
            yield self._conn

    def close(self) -> None:
        """Close the connection the store opened itself (pools and given connections stay open)."""
        if self._owns_conn and self._conn is not None:
            self._conn.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------------

    def head(self, user_id: Any) -> MemoryVersion:
        """Latest version in one query; version 0 and `{}` for an unknown user."""
        with self._connection() as conn:
            row = conn.execute(_HEAD, (_uid(user_id),), prepare=True).fetchone()
        if row is None:
            return MemoryVersion(0, {}, None, None)
        return MemoryVersion(row[0], row[1], row[2], row[3])

    def head_for_run(self, user_id: Any, idempotency_key: str) -> tuple[MemoryVersion, int | None]:
        """The head and, in the same query, the version `idempotency_key` produced (or None)."""
        uid = _uid(user_id)
        with self._connection() as conn:
            row = conn.execute(
                """SELECT h.version, h.document, h.updated_at, h.source_description,
                          (SELECT s.version FROM user_memory_snapshots s
                            WHERE s.user_id = %(u)s AND s.idempotency_key = %(k)s)
                     FROM (SELECT 1) one
                     LEFT JOIN user_memory_heads h ON h.user_id = %(u)s""",
                {"u": uid, "k": idempotency_key},
                prepare=True,
            ).fetchone()
        assert row is not None
        if row[0] is None:
            return MemoryVersion(0, {}, None, None), row[4]
        return MemoryVersion(row[0], row[1], row[2], row[3]), row[4]

    def at(self, user_id: Any, version: int) -> MemoryVersion:
        """The document at `version`: latest checkpoint at or below it, then its patches."""
        uid = _uid(user_id)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise UnknownVersion(str(uid), version, -1)
        if version == 0:
            return MemoryVersion(0, {}, None, None)
        with self._connection() as conn:
            rows = conn.execute(_REBUILD, {"user_id": uid, "version": version}, prepare=True).fetchall()
            if not rows or rows[-1][0] != version:
                head = conn.execute(_HEAD, (uid,)).fetchone()
                raise UnknownVersion(str(uid), version, head[0] if head else 0)
        return self._rebuild(rows)

    @staticmethod
    def _rebuild(rows: list[tuple[Any, ...]]) -> MemoryVersion:
        document: Document = {}
        start = 0
        if rows[0][2] and rows[0][3] is not None:
            document, start = rows[0][3], 1
        # Freshly loaded rows belong to us: apply every patch in one pass, without copies.
        ops = [op for row in rows[start:] for op in row[1]]
        document = apply_patch(document, ops, in_place=True)
        last = rows[-1]
        return MemoryVersion(last[0], document, last[4], last[5])

    def as_of(self, user_id: Any, timestamp: datetime) -> MemoryVersion:
        """The document as it was at `timestamp` (version 0 before the first write)."""
        uid = _uid(user_id)
        with self._connection() as conn:
            row = conn.execute(
                "SELECT max(version) FROM user_memory_snapshots WHERE user_id = %s AND created_at <= %s",
                (uid, timestamp),
            ).fetchone()
        version = row[0] if row and row[0] is not None else 0
        return self.at(uid, version)

    def history(self, user_id: Any, *, limit: int = 50, before_version: int | None = None) -> list[HistoryEntry]:
        """Versions newest first, at most `limit`, optionally only those below `before_version`."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT version, patch, source_description, created_at, is_full_snapshot
                     FROM user_memory_snapshots
                    WHERE user_id = %s AND (%s::int IS NULL OR version < %s::int)
                    ORDER BY version DESC LIMIT %s""",
                (_uid(user_id), before_version, before_version, limit),
            ).fetchall()
        return [HistoryEntry(*row) for row in rows]

    def diff(self, user_id: Any, from_version: int, to_version: int) -> Patch:
        """One patch turning version `from_version` into version `to_version`."""
        return make_patch(self.at(user_id, from_version).document, self.at(user_id, to_version).document)

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        user_id: Any,
        document: Document,
        *,
        expected_version: int,
        source: str,
        idempotency_key: str | None = None,
        base: MemoryVersion | None = None,
    ) -> AppendResult:
        """Write `document` as the next version, in one transaction.

        Raises VersionConflict when `expected_version` is not the head. A recorded
        `idempotency_key` returns the version it produced and writes nothing; a document
        equal to the head writes nothing. `base` is the head the caller already read, which
        saves a round trip; the database still checks that it is current.
        """
        if not isinstance(document, dict):
            raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
        return self._write(user_id, lambda _head: document, expected_version, source, idempotency_key, base)

    def append_patch(
        self,
        user_id: Any,
        patch: Patch,
        *,
        expected_version: int,
        source: str,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Apply `patch` to the head and write the result as the next version (PatchError if it fails)."""

        def next_document(head: Document) -> Document:
            document = apply_patch(head, patch)
            if not isinstance(document, dict):
                raise InvalidDocument("the patch turns the document into something other than a JSON object")
            return document

        return self._write(user_id, next_document, expected_version, source, idempotency_key)

    def revert(
        self, user_id: Any, to_version: int, *, source: str, expected_version: int | None = None
    ) -> AppendResult:
        """Write a new version whose document equals `to_version`'s; history is never rewritten."""
        target = self.at(user_id, to_version).document
        expected = self.head(user_id).version if expected_version is None else expected_version
        return self.append(user_id, target, expected_version=expected, source=source)

    def delete_user(self, user_id: Any) -> int:
        """Delete every memory and activity row of the user in one transaction; return rows deleted."""
        uid = _uid(user_id)
        with self._connection() as conn, conn.transaction():
            deleted = 0
            for statement in (
                "DELETE FROM user_memory_heads WHERE user_id = %s",
                "DELETE FROM user_memory_snapshots WHERE user_id = %s",
                "DELETE FROM user_activity WHERE user_id = %s",
            ):
                deleted += conn.execute(statement, (uid,)).rowcount
        return deleted

    def _write(
        self,
        user_id: Any,
        next_document: Any,
        expected_version: int,
        source: str,
        key: str | None,
        base: MemoryVersion | None = None,
    ) -> AppendResult:
        uid = _uid(user_id)
        if not isinstance(expected_version, int) or expected_version < 0:
            raise ValueError("expected_version must be a non-negative integer")
        # The diff is computed against the head read here (or handed in by the caller); the
        # append statement re-checks under a row lock that this head is still current.
        head = base if base is not None and base.version == expected_version else self.head(uid)
        if head.version != expected_version:
            if key is not None:
                with self._connection() as conn:
                    recorded = conn.execute(_RECORDED, (uid, key)).fetchone()
                    if recorded:
                        return self._idempotent(conn, uid, recorded[0])
            raise VersionConflict(str(uid), expected_version, head.version)
        document = next_document(head.document)
        size = check_size(document, self.max_document_bytes)
        if json_equal(document, head.document):
            return AppendResult(head.version, head.document, [], written=False, reason="unchanged")
        patch = make_patch(head.document, document)
        version = head.version + 1
        checkpoint = version % self.checkpoint_interval == 0 or document_size(patch) > LARGE_PATCH_RATIO * size
        params = (uid, expected_version, Jsonb(patch), checkpoint, Jsonb(document), source, key)
        try:
            with self._connection() as conn:
                row = conn.execute(_APPEND, params, prepare=True).fetchone()
                assert row is not None
                status, number, _created = row
                if status == "idempotent":
                    return self._idempotent(conn, uid, number)
        except pgerrors.UniqueViolation as err:
            # A concurrent first write for this user (no head row to lock yet) got there first.
            if key is not None and "idempotency" in (err.diag.constraint_name or ""):
                with self._connection() as conn:
                    recorded = conn.execute(_RECORDED, (uid, key)).fetchone()
                    if recorded:
                        return self._idempotent(conn, uid, recorded[0])
            raise VersionConflict(str(uid), expected_version, self.head(uid).version) from err
        if status == "conflict":
            raise VersionConflict(str(uid), expected_version, number)
        return AppendResult(version, document, patch, written=True, is_checkpoint=checkpoint)

    def _idempotent(self, conn: psycopg.Connection, uid: uuid.UUID, version: int) -> AppendResult:
        rows = conn.execute(_REBUILD, {"user_id": uid, "version": version}).fetchall()
        rebuilt = self._rebuild(rows)
        return AppendResult(version, rebuilt.document, rows[-1][1], written=False, reason="idempotent")

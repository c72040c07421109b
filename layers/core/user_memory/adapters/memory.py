"""In-memory recorder and activity store: the same contracts as PostgreSQL, no sockets.

For unit tests of the domain (rebase, guardrail, retries, chunking) in milliseconds, and as
the second implementation the contract tests hold the PostgreSQL adapters to. Rows are kept
as JSON text, so callers can never alias what is stored.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from user_memory.domain.model import (
    MAX_CHANGED_PATH_CHARS,
    MAX_CHANGED_PATHS,
    Activity,
    HistoryEntry,
    MemoryVersion,
    VersionChange,
    Window,
)
from user_memory.domain.ports import InsertOutcome, NewVersion, StoredRow


@dataclass
class _Row:
    version: int
    patch: str
    checkpoint: str | None
    created_at: datetime
    source: str | None
    key: str | None
    provenance: str | None = None


@dataclass
class _User:
    rows: list[_Row] = field(default_factory=list)
    head: str = "{}"
    head_source: str | None = None


class InMemoryRecorder:
    """MemoryRecorder in a dict; writes are atomic under one lock."""

    def __init__(self, activity: InMemoryActivity | None = None) -> None:
        self._users: dict[uuid.UUID, _User] = {}
        self._lock = threading.Lock()
        self.activity = activity
        self.inserts = 0

    def read_head(self, user_id: uuid.UUID, key: str | None = None) -> tuple[MemoryVersion | None, int | None]:
        with self._lock:
            user = self._users.get(user_id)
            if user is None or not user.rows:
                return None, None
            recorded = next((r.version for r in user.rows if key is not None and r.key == key), None)
            last = user.rows[-1]
            head = MemoryVersion(
                version=last.version, document=json.loads(user.head), created_at=last.created_at, source=last.source
            )
            return head, recorded

    def read_rows(self, user_id: uuid.UUID, version: int) -> list[StoredRow]:
        with self._lock:
            rows = [r for r in self._users.get(user_id, _User()).rows if r.version <= version]
        start = max((i for i, r in enumerate(rows) if r.checkpoint is not None), default=0)
        return [_stored(r) for r in rows[start:]]

    def read_span(self, user_id: uuid.UUID, first: int, last: int) -> list[StoredRow]:
        with self._lock:
            rows = [r for r in self._users.get(user_id, _User()).rows if first <= r.version <= last]
        return [_stored(r) for r in rows]

    def version_at(self, user_id: uuid.UUID, timestamp: datetime) -> int:
        with self._lock:
            rows = self._users.get(user_id, _User()).rows
            return max((r.version for r in rows if r.created_at <= timestamp), default=0)

    def read_history(self, user_id: uuid.UUID, *, limit: int, before_version: int | None) -> list[HistoryEntry]:
        with self._lock:
            rows = list(self._users.get(user_id, _User()).rows)
        picked = [r for r in reversed(rows) if before_version is None or r.version < before_version][:limit]
        return [
            HistoryEntry(
                version=r.version,
                patch=json.loads(r.patch),
                source=r.source,
                created_at=r.created_at,
                is_checkpoint=r.checkpoint is not None,
                provenance=json.loads(r.provenance) if r.provenance is not None else None,
            )
            for r in picked
        ]

    def read_changes(self, user_id: uuid.UUID, *, limit: int) -> list[VersionChange]:
        with self._lock:
            rows = list(self._users.get(user_id, _User()).rows)[::-1][:limit]
        return [
            VersionChange(
                version=r.version,
                source=r.source,
                created_at=r.created_at,
                summary=_summary_mode(r.provenance),
                paths=_changed_paths(r.patch),
            )
            for r in rows
        ]

    def read_tokens(self, user_id: uuid.UUID, since: datetime) -> int:
        with self._lock:
            rows = [r for r in self._users.get(user_id, _User()).rows if r.created_at >= since]
        total = 0
        for r in rows:
            record = json.loads(r.provenance) if r.provenance is not None else None
            if isinstance(record, dict):
                total += sum(
                    int(v)
                    for k in ("prompt_tokens", "completion_tokens")
                    if isinstance(v := record.get(k), int | float) and not isinstance(v, bool)
                )
        return total

    def catch_up_index(self, user_id: uuid.UUID) -> str:
        return "current"  # no search index in memory

    def insert(self, new: NewVersion) -> InsertOutcome:
        with self._lock:
            user = self._users.setdefault(new.user_id, _User())
            current = user.rows[-1].version if user.rows else 0
            if new.idempotency_key is not None:
                for r in user.rows:
                    if r.key == new.idempotency_key:
                        return InsertOutcome(status="idempotent", version=r.version)
            if current != new.expected_version:
                return InsertOutcome(status="conflict", version=current)
            if new.activity_ids is not None and (
                self.activity is None or not self.activity.all_unsummarized(new.user_id, new.activity_ids)
            ):
                return InsertOutcome(status="stale", version=current)
            now = datetime.now(UTC)
            version = current + 1
            user.rows.append(
                _Row(
                    version=version,
                    patch=json.dumps(new.patch),
                    checkpoint=new.document_json if new.checkpoint else None,
                    created_at=now,
                    source=new.source,
                    key=new.idempotency_key,
                    provenance=json.dumps(new.provenance) if new.provenance is not None else None,
                )
            )
            user.head = new.document_json
            self.inserts += 1
            if new.activity_ids and self.activity is not None:
                self.activity.mark(new.user_id, version, new.activity_ids)
            return InsertOutcome(status="written", version=version, created_at=now)

    def mark_summarized(self, user_id: uuid.UUID, version: int, activity_ids: Sequence[int]) -> int:
        return self.activity.mark(user_id, version, activity_ids) if self.activity is not None else 0

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        with self._lock:
            user = self._users.pop(user_id, _User())
        activity = self.activity.erase(user_id) if self.activity is not None else 0
        return {
            "user_memory_heads": 1 if user.rows else 0,
            "user_memory_snapshots": len(user.rows),
            "user_activity": activity,
        }


def _stored(r: _Row) -> StoredRow:
    """A row as the recorder port returns it (new objects: the stored JSON is never shared)."""
    return StoredRow(
        version=r.version,
        patch=json.loads(r.patch),
        checkpoint=json.loads(r.checkpoint) if r.checkpoint is not None else None,
        created_at=r.created_at,
        source=r.source,
    )


def _summary_mode(provenance: str | None) -> bool:
    record = json.loads(provenance) if provenance is not None else None
    return isinstance(record, dict) and record.get("mode") in ("edit", "document")


def _changed_paths(patch: str) -> tuple[str, ...]:
    """As the PostgreSQL recorder's query: each operation's path (and a move's from), bounded."""
    ops = json.loads(patch)
    paths: list[str] = []
    for op in ops if isinstance(ops, list) else []:
        if not isinstance(op, dict):
            continue
        for value in (op.get("path"), op.get("from") if op.get("op") == "move" else None):
            if isinstance(value, str):
                paths.append(value[:MAX_CHANGED_PATH_CHARS])
    return tuple(paths[:MAX_CHANGED_PATHS])


class InMemoryActivity:
    """ActivityReader and ActivityWriter in a list; ids increase like an identity column."""

    def __init__(self) -> None:
        self._rows: list[Activity] = []
        self._summarized: dict[int, int] = {}
        self._keys: set[tuple[uuid.UUID, str, str]] = set()
        self._lock = threading.Lock()
        self._next_id = 1

    def record(self, activities: Iterable[Activity]) -> int:
        new = 0
        with self._lock:
            for a in activities:
                key = (a.user_id, a.source, a.external_id)
                if key in self._keys:
                    continue
                self._keys.add(key)
                self._rows.append(replace(a, id=self._next_id, payload=json.loads(json.dumps(a.payload))))
                self._next_id += 1
                new += 1
        return new

    def active_user_pages(self, window: Window, *, page_size: int) -> Iterator[list[uuid.UUID]]:
        with self._lock:
            users = sorted(
                {a.user_id for a in self._rows if a.id not in self._summarized and a.occurred_at < window.end}
            )
        for i in range(0, len(users), page_size):
            yield users[i : i + page_size]

    def unsummarized(self, user_id: uuid.UUID, *, before: datetime, after_id: int = 0, limit: int) -> list[Activity]:
        with self._lock:
            rows = [
                a
                for a in self._rows
                if a.user_id == user_id
                and a.id is not None
                and a.id > after_id
                and a.id not in self._summarized
                and a.occurred_at < before
            ]
        return rows[:limit]

    def mark(self, user_id: uuid.UUID, version: int, ids: Sequence[int]) -> int:
        wanted = set(ids)
        marked = 0
        with self._lock:
            for a in self._rows:
                if a.user_id == user_id and a.id in wanted and a.id not in self._summarized:
                    self._summarized[a.id] = version
                    marked += 1
        return marked

    def all_unsummarized(self, user_id: uuid.UUID, ids: Sequence[int]) -> bool:
        """Every id is a row of this user and none is summarized yet."""
        with self._lock:
            present = {a.id for a in self._rows if a.user_id == user_id and a.id not in self._summarized}
        return set(ids) <= present

    def rows_of(self, user_id: uuid.UUID) -> list[Activity]:
        """Every row of the user, oldest first (an export)."""
        with self._lock:
            return [replace(a, payload=json.loads(json.dumps(a.payload))) for a in self._rows if a.user_id == user_id]

    def summarized_version(self, activity_id: int) -> int | None:
        return self._summarized.get(activity_id)

    def erase(self, user_id: uuid.UUID) -> int:
        with self._lock:
            kept = [a for a in self._rows if a.user_id != user_id]
            removed = len(self._rows) - len(kept)
            self._rows = kept
            self._keys = {k for k in self._keys if k[0] != user_id}
        return removed

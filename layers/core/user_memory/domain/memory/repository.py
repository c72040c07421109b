"""MemoryStore: each user's memory document as a chain of RFC 6902 patches, over a recorder.

Version n's row holds the patch from n-1 to n; every `checkpoint_interval` versions the row
also holds the full document, so a version is rebuilt from the latest checkpoint at or below
it plus at most interval-1 patches. The head (the latest document) is kept whole by the
recorder: reads of the head are one query, and writers serialize on it. The store accepts any
JSON object; schemas are validated a layer above (the pipeline, the API).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from user_memory.domain.memory.document import document_size, encode, utf8_size
from user_memory.domain.memory.patching import PatchBudget, apply_patch, copy_json, make_patch, storable_patch
from user_memory.domain.model import (
    DEFAULT_CHECKPOINT_INTERVAL,
    DEFAULT_MAX_DOCUMENT_BYTES,
    MAX_VERSION,
    AppendResult,
    Document,
    HistoryEntry,
    MemoryVersion,
    Patch,
    VersionChange,
    WriteStatus,
    empty_version,
    parse_user_id,
)
from user_memory.domain.ports import MemoryRecorder, NewVersion, StoredRow
from user_memory.errors import (
    ActivityChanged,
    DocumentTooLarge,
    InvalidArgument,
    InvalidDocument,
    UnknownVersion,
    VersionConflict,
)


def rebuild(rows: list[StoredRow]) -> MemoryVersion:
    """The document at the last row: its checkpoint (or {}), then the patches after it."""
    document: Document = {}
    start = 0
    if rows[0].checkpoint is not None:
        document, start = rows[0].checkpoint, 1
    # Freshly loaded rows belong to us: apply every patch in one pass, without copies.
    ops = [op for row in rows[start:] for op in row.patch]
    document = apply_patch(document, ops, in_place=True)
    last = rows[-1]
    return MemoryVersion(version=last.version, document=document, created_at=last.created_at, source=last.source)


class MemoryStore:
    """Versioned memory documents: the domain rules over a MemoryRecorder.

    Args:
        recorder: where rows live (PostgresRecorder, InMemoryRecorder).
        checkpoint_interval: store the full document every this many versions.
        max_document_bytes: documents larger than this (compact JSON) are refused with DocumentTooLarge.
    """

    def __init__(
        self,
        recorder: MemoryRecorder,
        *,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        if checkpoint_interval < 1:
            raise ValueError("checkpoint_interval must be at least 1")
        self.recorder = recorder
        self.checkpoint_interval = checkpoint_interval
        self.max_document_bytes = max_document_bytes

    def is_checkpoint(self, version: int) -> bool:
        """Checkpoint policy: every interval-th version. Version 1 is not one (its patch from {} is
        the whole document already, so storing both would keep it twice)."""
        return version % self.checkpoint_interval == 0

    # -- reads -------------------------------------------------------------------------------

    def head(self, user_id: object) -> MemoryVersion:
        """Latest version in one query; version 0 and `{}` for an unknown user."""
        head, _ = self.recorder.read_head(parse_user_id(user_id))
        return head or empty_version()

    def head_for_run(self, user_id: object, run_key: str) -> tuple[MemoryVersion, int | None]:
        """The head and, in the same query, the version `run_key` produced (or None)."""
        head, recorded = self.recorder.read_head(parse_user_id(user_id), run_key)
        return head or empty_version(), recorded

    def at(self, user_id: object, version: int) -> MemoryVersion:
        """The document at `version`: latest checkpoint at or below it, then its patches."""
        uid = parse_user_id(user_id)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise UnknownVersion(uid, version, self.head(uid).version)
        if version == 0:
            return empty_version()
        rows = self.recorder.read_rows(uid, version)
        if not rows or rows[-1].version != version:
            raise UnknownVersion(uid, version, self.head(uid).version)
        return rebuild(rows)

    def as_of(self, user_id: object, timestamp: datetime) -> MemoryVersion:
        """The document as it was at `timestamp` (version 0 before the first write)."""
        uid = parse_user_id(user_id)
        return self.at(uid, self.recorder.version_at(uid, timestamp))

    def history(self, user_id: object, *, limit: int = 50, before_version: int | None = None) -> list[HistoryEntry]:
        """Versions newest first, at most `limit`, optionally only those below `before_version`."""
        if not isinstance(limit, int) or limit < 1:
            raise ValueError("limit must be at least 1")
        if before_version is not None and not 1 <= before_version <= MAX_VERSION:
            raise InvalidArgument("before", f"must be a version from 1 to {MAX_VERSION}, got {before_version}")
        return self.recorder.read_history(parse_user_id(user_id), limit=limit, before_version=before_version)

    def recent_changes(self, user_id: object, *, limit: int) -> list[VersionChange]:
        """The newest `limit` versions, newest first: who wrote each and which pointers it changed
        (one query; bounded, never a document)."""
        if not isinstance(limit, int) or limit < 1:
            raise ValueError("limit must be at least 1")
        return self.recorder.read_changes(parse_user_id(user_id), limit=limit)

    def tokens_since(self, user_id: object, since: datetime) -> int:
        """The LLM tokens the user's versions created at or after `since` spent (the daily budget's)."""
        return self.recorder.read_tokens(parse_user_id(user_id), since)

    def versions(self, user_id: object, *, page_size: int = 200) -> Iterator[MemoryVersion]:
        """Every version from 1 to the head, oldest first, each rebuilt once (an export's walk)."""
        uid = parse_user_id(user_id)
        last = self.head(uid).version
        document: Document = {}
        first = 1
        while first <= last:
            rows = self.recorder.read_span(uid, first, min(first + page_size - 1, last))
            if not rows:
                return
            for row in rows:
                document = row.checkpoint if row.checkpoint is not None else apply_patch(document, row.patch)
                yield MemoryVersion(
                    version=row.version, document=copy_json(document), created_at=row.created_at, source=row.source
                )
            first = rows[-1].version + 1

    def walk(self, user_id: object, first: int, last: int) -> Iterator[tuple[int, Document, Document]]:
        """Each version from `first` to `last` (>= 1) with the document before it and its own, oldest
        first: two reads (the document at `first` - 1, then the span's rows). The documents share
        their untouched parts and are read-only."""
        uid = parse_user_id(user_id)
        document = self.at(uid, first - 1).document
        for row in self.recorder.read_span(uid, first, last):
            # Not in place: the document before a version is handed out beside the version's own.
            after = row.checkpoint if row.checkpoint is not None else apply_patch(document, row.patch, share=True)
            yield row.version, document, after
            document = after

    def sizes(self, user_id: object, *, points: int, byte_budget: int) -> list[tuple[int, datetime | None, int]]:
        """The compact JSON size of each of the newest versions, oldest first: (version, time, bytes).

        At most `points` versions, fewer when measuring them would serialize more than
        `byte_budget` bytes in all (the head's size times the versions): one rebuild, then one
        patch a version."""
        uid = parse_user_id(user_id)
        head = self.head(uid)
        if head.version == 0:
            return []
        head_bytes = document_size(head.document)
        count = max(1, min(points, head.version, byte_budget // max(head_bytes, 1)))
        first = head.version - count + 1
        start = self.at(uid, first)
        document = start.document
        found = [(first, start.created_at, document_size(document))]
        if first < head.version:
            for row in self.recorder.read_span(uid, first + 1, head.version):
                document = (
                    row.checkpoint if row.checkpoint is not None else apply_patch(document, row.patch, in_place=True)
                )
                found.append((row.version, row.created_at, document_size(document)))
        return found

    def diff(self, user_id: object, from_version: int, to_version: int) -> Patch:
        """One patch turning version `from_version` into version `to_version`."""
        uid = parse_user_id(user_id)
        return make_patch(self.at(uid, from_version).document, self.at(uid, to_version).document)

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        user_id: object,
        document: Document,
        *,
        expected_version: int,
        source: str,
        idempotency_key: str | None = None,
        base: MemoryVersion | None = None,
        activity_ids: Sequence[int] | None = None,
        provenance: dict[str, Any] | None = None,
    ) -> AppendResult:
        """Write `document` as the next version, atomically.

        Raises VersionConflict when `expected_version` is not the head. A recorded
        `idempotency_key` returns the version it produced and writes nothing; a document
        equal to the head writes nothing. `base` is the head the caller already read, which
        saves a round trip; the recorder still checks that it is current. `activity_ids` are
        marked as summarized by the new version in the same transaction; ActivityChanged when
        any of them was summarized by another run or erased meanwhile (nothing is written).
        `provenance` (a JSON object: what produced the version) is stored with the version row
        and comes back in `history`; only the service records it (an end user's append with
        provenance is refused by the database).
        """
        if not isinstance(document, dict):
            raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
        return self._write(
            parse_user_id(user_id),
            lambda _head: document,
            expected_version,
            source,
            idempotency_key,
            base,
            activity_ids,
            provenance,
        )

    def append_patch(
        self,
        user_id: object,
        patch: Patch,
        *,
        expected_version: int,
        source: str,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Apply `patch` to the head and write the result as the next version (PatchError if it fails;
        PatchOverBounds or DocumentGrowsTooLarge when it is over the applier's budget)."""

        def next_document(head: Document) -> Document:
            document = apply_patch(head, patch, budget=PatchBudget(2 * self.max_document_bytes))
            if not isinstance(document, dict):
                raise InvalidDocument("the patch turns the document into something other than a JSON object")
            return document

        return self._write(parse_user_id(user_id), next_document, expected_version, source, idempotency_key)

    def revert(
        self, user_id: object, to_version: int, *, source: str, expected_version: int | None = None
    ) -> AppendResult:
        """Write a new version whose document equals `to_version`'s; history is never rewritten."""
        uid = parse_user_id(user_id)
        target = self.at(uid, to_version).document
        head = self.head(uid)
        expected = head.version if expected_version is None else expected_version
        return self.append(uid, target, expected_version=expected, source=source, base=head)

    def mark_summarized(self, user_id: object, version: int, activity_ids: Sequence[int]) -> int:
        """Record that `activity_ids` were summarized without changing the document."""
        if not activity_ids:
            return 0
        return self.recorder.mark_summarized(parse_user_id(user_id), version, activity_ids)

    def erase(self, user_id: object) -> dict[str, int]:
        """Delete every memory and activity row of the user in one transaction (a service operation)."""
        return self.recorder.erase(parse_user_id(user_id))

    def _write(
        self,
        uid: uuid.UUID,
        next_document: Callable[[Document], Document],
        expected_version: int,
        source: str,
        key: str | None,
        base: MemoryVersion | None = None,
        activity_ids: Sequence[int] | None = None,
        provenance: dict[str, Any] | None = None,
    ) -> AppendResult:
        if provenance is not None and not isinstance(provenance, dict):
            raise ValueError("provenance must be a JSON object or None")
        if not isinstance(expected_version, int) or isinstance(expected_version, bool) or expected_version < 0:
            raise ValueError("expected_version must be a non-negative integer")
        # The diff is computed against the head read here (or handed in by the caller); the
        # recorder re-checks atomically that this head is still current.
        if base is not None and base.version == expected_version:
            head = base
        else:
            stored, recorded = self.recorder.read_head(uid, key)
            head = stored or empty_version()
            if recorded is not None:
                return self._idempotent(uid, recorded)
            if head.version != expected_version:
                raise VersionConflict(uid, expected_version, head.version)
        document = next_document(head.document)
        document_json = encode(document)  # encoded once: size check and insert
        size = utf8_size(document_json)
        if size > self.max_document_bytes:
            raise DocumentTooLarge(size, self.max_document_bytes)
        patch = make_patch(head.document, document)
        if not patch:
            return AppendResult(status=WriteStatus.UNCHANGED, version=head.version, document=head.document)
        # The database applies an end user's patch to the head (migrations/015), within bounds a
        # diff of a large rewrite can pass: such a version's patch replaces the whole document.
        patch = storable_patch(patch, document)
        version = head.version + 1
        checkpoint = self.is_checkpoint(version)
        outcome = self.recorder.insert(
            NewVersion(
                user_id=uid,
                expected_version=expected_version,
                patch=patch,
                document=document,
                document_json=document_json,
                checkpoint=checkpoint,
                source=source,
                idempotency_key=key,
                activity_ids=activity_ids,
                provenance=provenance,
            )
        )
        if outcome.status == "idempotent":
            return self._idempotent(uid, outcome.version)
        if outcome.status == "conflict":
            raise VersionConflict(uid, expected_version, outcome.version)
        if outcome.status == "stale":
            raise ActivityChanged(f"user {uid}: activity this summary covers was summarized or erased meanwhile")
        # The index is not the append's: it catches up right after, from the stored document
        # (migration 022), so the head's lock is not held for it and a failure here (outside a
        # transaction) leaves the version written and the index behind for the next catch-up.
        self.recorder.catch_up_index(uid)
        return AppendResult(
            status=WriteStatus.WRITTEN, version=version, document=document, patch=patch, is_checkpoint=checkpoint
        )

    def _idempotent(self, uid: uuid.UUID, version: int) -> AppendResult:
        rows = self.recorder.read_rows(uid, version)
        patch = copy_json(rows[-1].patch)  # the rebuild below applies the rows' values in place
        rebuilt = rebuild(rows)
        return AppendResult(status=WriteStatus.IDEMPOTENT, version=version, document=rebuilt.document, patch=patch)

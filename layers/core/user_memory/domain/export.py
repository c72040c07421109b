"""A user's export as JSON Lines, and reading one back (no I/O).

One JSON object per line, each with its `kind`: a `header` (format, user id, time), then every
`version` oldest first exactly as stored (patch, checkpoint, created_at, source, idempotency key,
provenance), every live `kv` entry, every `activity` row, and an `end` line with the counts, so a
truncated file is refused. Writing and reading both stream: neither holds more than one version's
document (and a page of rows) at a time, whatever the history's length.

An import rebuilds every version by applying its patch to the one before and compares each
checkpoint with the rebuilt document (json_equal: types exact), so what it writes back reads
byte-equal to what was exported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from user_memory.domain.kv import KvEntry
from user_memory.domain.memory.patching import apply_patch, json_equal
from user_memory.domain.model import Activity
from user_memory.errors import InvalidExport, PatchError

FORMAT = "user-memory-export"
FORMAT_VERSION = 1
IMPORT_PAGE_ROWS = 500  # version rows per import statement (and what an import holds at once)
MAX_LINE_BYTES = 8 * 1024 * 1024  # a checkpoint is at most the document limit (512 KiB by default)


@dataclass(frozen=True, kw_only=True)
class VersionRow:
    """One stored version row, as exported."""

    version: int
    patch: list[Any]
    checkpoint: dict[str, Any] | None
    created_at: datetime
    source: str | None
    idempotency_key: str | None
    provenance: Any


@dataclass
class ExportCounts:
    """What an export wrote (or an import read): lines, versions, entries, activity rows, bytes."""

    lines: int = 0
    versions: int = 0
    kv: int = 0
    activity: int = 0
    bytes: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def export_lines(
    user_id: object,
    exported_at: datetime,
    versions: Iterable[VersionRow],
    kv: Iterable[KvEntry],
    activity: Iterable[Activity],
    counts: ExportCounts | None = None,
) -> Iterator[bytes]:
    """The export's lines, streamed; `counts` (when given) is filled as they are produced."""
    c = counts if counts is not None else ExportCounts()

    def emit(obj: dict[str, Any]) -> bytes:
        data = _line(obj)
        c.lines += 1
        c.bytes += len(data)
        return data

    yield emit(
        {"kind": "header", "format": FORMAT, "format_version": FORMAT_VERSION, "user_id": str(user_id),
         "exported_at": exported_at.isoformat()}
    )  # fmt: skip
    for v in versions:
        c.versions += 1
        yield emit(
            {"kind": "version", "version": v.version, "patch": v.patch, "checkpoint": v.checkpoint,
             "created_at": v.created_at.isoformat(), "source": v.source, "idempotency_key": v.idempotency_key,
             "provenance": v.provenance}
        )  # fmt: skip
    for e in kv:
        c.kv += 1
        yield emit(
            {"kind": "kv", "namespace": e.namespace, "key": e.key, "value": e.value,
             "created_at": e.created_at.isoformat(), "updated_at": e.updated_at.isoformat(),
             "expires_at": e.expires_at.isoformat() if e.expires_at else None}
        )  # fmt: skip
    for a in activity:
        c.activity += 1
        yield emit(
            {"kind": "activity", "occurred_at": a.occurred_at.isoformat(), "activity_kind": a.kind,
             "payload": a.payload, "source": a.source, "external_id": a.external_id}
        )  # fmt: skip
    yield emit({"kind": "end", "versions": c.versions, "kv": c.kv, "activity": c.activity, "lines": c.lines + 1})


@dataclass(frozen=True, kw_only=True)
class ImportPage:
    """A page of version rows to write back, and the document of its last version (the new head)."""

    rows: list[VersionRow]
    head: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ImportedKv:
    namespace: str
    key: str
    value: Any
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class ImportedActivity:
    occurred_at: datetime
    kind: str
    payload: dict[str, Any]
    source: str
    external_id: str


Record = ImportPage | ImportedKv | ImportedActivity


def read_export(lines: Iterable[bytes], *, page_rows: int = IMPORT_PAGE_ROWS) -> Iterator[Record]:
    """The records of an export, in order: pages of rebuilt, checked versions, then entries and
    activity. Raises InvalidExport on anything that is not a whole, consistent export (the last
    check, the `end` line's counts, comes after every record: an importer writes in one
    transaction, or resumes, see adapters/exports.py)."""
    reader = _Reader(page_rows)
    for raw in lines:
        yield from reader.line(raw)
    yield from reader.flush()
    if not reader.header:
        raise InvalidExport("the file is empty")
    if not reader.ended:
        raise InvalidExport("the file ends before its end line (truncated)")


class _Reader:
    """read_export's state between lines: the line number, the counts, the document the versions
    rebuild and the page of rows not yet yielded."""

    def __init__(self, page_rows: int) -> None:
        self.page_rows = page_rows
        self.n = 0
        self.header = False
        self.ended = False
        self.counts = ExportCounts()
        self.document: Any = {}
        self.page: list[VersionRow] = []

    def line(self, raw: bytes) -> Iterator[Record]:
        self.n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise InvalidExport(f"line {self.n} is longer than {MAX_LINE_BYTES:,} bytes")
        if not raw.strip():
            return
        if self.ended:
            raise InvalidExport(f"line {self.n} follows the end line")
        try:
            obj = json.loads(raw)
        except ValueError:
            raise InvalidExport(f"line {self.n} is not JSON") from None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        self.counts.lines += 1
        if not self.header:
            if kind != "header" or obj.get("format") != FORMAT or obj.get("format_version") != FORMAT_VERSION:
                raise InvalidExport(f"line {self.n}: not a {FORMAT} (version {FORMAT_VERSION}) header")
            self.header = True
            return
        step = {"version": self._version, "kv": self._kv, "activity": self._activity, "end": self._end}.get(
            kind if isinstance(kind, str) else ""
        )
        if step is None:
            raise InvalidExport(f"line {self.n}: unknown kind {str(kind)[:40]!r}")
        try:
            yield from step(obj)
        except InvalidExport:
            raise
        except (KeyError, TypeError, ValueError):
            raise InvalidExport(f"line {self.n}: a {str(kind)[:40]} line without its fields") from None

    def flush(self) -> Iterator[Record]:
        if self.page:
            yield ImportPage(rows=self.page, head=self.document)
            self.page = []

    def _version(self, obj: dict[str, Any]) -> Iterator[Record]:
        n, counts = self.n, self.counts
        row = _version_row(obj)
        if row.version != counts.versions + 1:
            raise InvalidExport(f"line {n}: version {row.version} follows {counts.versions}")
        if counts.kv or counts.activity:
            raise InvalidExport(f"line {n}: a version after the entries")
        try:  # copies only what the patch writes into: the previous document is not kept
            self.document = apply_patch(self.document, row.patch, share=True)
        except PatchError:
            raise InvalidExport(f"line {n}: version {row.version}'s patch does not apply") from None
        if not isinstance(self.document, dict):
            raise InvalidExport(f"line {n}: version {row.version} is not a JSON object")
        if row.checkpoint is not None and not json_equal(row.checkpoint, self.document):
            raise InvalidExport(f"line {n}: version {row.version}'s checkpoint differs from its patches")
        counts.versions += 1
        self.page.append(row)
        if len(self.page) >= self.page_rows:
            yield from self.flush()

    def _kv(self, obj: dict[str, Any]) -> Iterator[Record]:
        yield from self.flush()
        self.counts.kv += 1
        yield ImportedKv(
            namespace=_str(obj, "namespace"),
            key=_str(obj, "key"),
            value=obj["value"],
            created_at=_time(obj, "created_at"),
            updated_at=_time(obj, "updated_at"),
            expires_at=_time(obj, "expires_at") if obj.get("expires_at") is not None else None,
        )

    def _activity(self, obj: dict[str, Any]) -> Iterator[Record]:
        yield from self.flush()
        self.counts.activity += 1
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            raise InvalidExport(f"line {self.n}: an activity's payload must be an object")
        yield ImportedActivity(
            occurred_at=_time(obj, "occurred_at"),
            kind=_str(obj, "activity_kind"),
            payload=payload,
            source=_str(obj, "source"),
            external_id=_str(obj, "external_id"),
        )

    def _end(self, obj: dict[str, Any]) -> Iterator[Record]:
        counts = self.counts
        expected = (obj.get("versions"), obj.get("kv"), obj.get("activity"), obj.get("lines"))
        if expected != (counts.versions, counts.kv, counts.activity, counts.lines):
            raise InvalidExport(f"line {self.n}: the end line's counts differ from the lines read")
        self.ended = True
        yield from ()


def _str(obj: dict[str, Any], name: str) -> str:
    value = obj[name]
    if not isinstance(value, str):
        raise InvalidExport(f"{name} must be a string")
    return value


def _time(obj: dict[str, Any], name: str) -> datetime:
    value = datetime.fromisoformat(_str(obj, name))
    if value.tzinfo is None:
        raise InvalidExport(f"{name} needs a time zone")
    return value


def _version_row(obj: dict[str, Any]) -> VersionRow:
    version, patch, checkpoint = obj["version"], obj["patch"], obj.get("checkpoint")
    if not isinstance(version, int) or isinstance(version, bool) or not isinstance(patch, list):
        raise InvalidExport("a version line needs an integer version and a patch (a list)")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise InvalidExport("a checkpoint must be a JSON object")
    source, key = obj.get("source"), obj.get("idempotency_key")
    if not isinstance(source, str | None) or not isinstance(key, str | None):
        raise InvalidExport("source and idempotency_key must be strings")
    return VersionRow(
        version=version,
        patch=patch,
        checkpoint=checkpoint,
        created_at=_time(obj, "created_at"),
        source=source,
        idempotency_key=key,
        provenance=obj.get("provenance"),
    )

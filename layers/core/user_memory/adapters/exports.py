"""Exports and imports: the export jobs' rows, a user's rows read in pages and written back, and
where the JSON Lines go (S3, or a folder on a laptop).

`PostgresExports` runs with the service's rights (the API's `as_service`, the CLI's owner): it
creates, claims and finishes export jobs (migration 027), streams a user's version rows in keyset
pages (never the whole history at once) and writes an import's pages back through
user_memory_import_versions (migration 028). `S3ExportObjects` and `LocalExportObjects` implement
the domain's `ExportObjects` port.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from user_memory.adapters.kv import _COLUMNS as _KV_COLUMNS
from user_memory.adapters.kv import _entry
from user_memory.adapters.postgres import ConnectionSource, _Database
from user_memory.domain.export import ImportedActivity, ImportedKv, ImportPage, VersionRow
from user_memory.domain.kv import KvEntry
from user_memory.domain.model import Activity
from user_memory.errors import ImportTargetNotEmpty, NotFound, StorageError

VERSION_PAGE_ROWS = 1000  # rows per read while an export streams a history
PART_BYTES = 8 * 1024 * 1024  # S3 multipart parts (at least 5 MiB but the last; at most 10,000 parts)
CONTENT_TYPE = "application/jsonl"

_VERSIONS = """
SELECT version, patch, CASE WHEN is_full_snapshot THEN full_snapshot_content END, created_at, source_description,
       idempotency_key, provenance
  FROM user_memory_snapshots
 WHERE user_id = %s AND version > %s
 ORDER BY version
 LIMIT %s
"""

_KV = f"""
SELECT {_KV_COLUMNS} FROM user_memory_kv
 WHERE user_id = %s AND (expires_at IS NULL OR expires_at > %s) AND (namespace, key) > (%s, %s)
 ORDER BY namespace, key
 LIMIT %s
"""

_ACTIVITY = """
SELECT id, user_id, occurred_at, kind, payload, source, external_id FROM user_activity
 WHERE user_id = %s AND id > %s ORDER BY id LIMIT %s
"""

_JOB_COLUMNS = "id::text, user_id, requested_by, status, object_key, lines, bytes, error, created_at, finished_at"

_CREATE = f"INSERT INTO user_memory_exports (user_id, requested_by) VALUES (%s, %s) RETURNING {_JOB_COLUMNS}"
_GET = f"SELECT {_JOB_COLUMNS} FROM user_memory_exports WHERE id = %s"
# Claimed once: a job another run took (or finished) is not started again.
_CLAIM = "UPDATE user_memory_exports SET status = 'running' WHERE id = %s AND status = 'pending' RETURNING user_id"
_FINISH = f"""
UPDATE user_memory_exports SET status = 'done', object_key = %s, lines = %s, bytes = %s, finished_at = now()
 WHERE id = %s AND status = 'running'
RETURNING {_JOB_COLUMNS}
"""
_FAIL = f"""
UPDATE user_memory_exports SET status = 'failed', error = %s, finished_at = now() WHERE id = %s
RETURNING {_JOB_COLUMNS}
"""

_IMPORT = "SELECT user_memory_import_versions(%s, %s, %s)"
_HEAD = "SELECT version FROM user_memory_heads WHERE user_id = %s"
_IMPORT_KV = """
INSERT INTO user_memory_kv (user_id, namespace, key, value, created_at, updated_at, expires_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, namespace, key) DO NOTHING
"""
_IMPORT_ACTIVITY = """
INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, source, external_id) DO NOTHING
"""
_CATCH_UP = "SELECT status FROM user_memory_index_catch_up(%s)"


@dataclass(frozen=True, kw_only=True)
class ExportJob:
    """One export job as stored (no content)."""

    id: str
    user_id: uuid.UUID
    requested_by: str
    status: str
    object_key: str | None
    lines: int | None
    bytes: int | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None


def _job(row: Any) -> ExportJob:
    return ExportJob(
        id=row[0], user_id=row[1], requested_by=row[2], status=row[3], object_key=row[4], lines=row[5],
        bytes=row[6], error=row[7], created_at=row[8], finished_at=row[9],
    )  # fmt: skip


class PostgresExports(_Database):
    """Export jobs, a user's rows in pages, and an import's writes (the service's rights)."""

    def __init__(self, pool: ConnectionSource) -> None:
        super().__init__(pool)

    # -- jobs ----------------------------------------------------------------------------------------

    def create(self, user_id: uuid.UUID, requested_by: str) -> ExportJob:
        with self.connection() as conn:
            return _job(conn.execute(_CREATE, (user_id, requested_by)).fetchone())

    def get(self, export_id: str) -> ExportJob:
        try:
            uuid.UUID(export_id)
        except ValueError:
            raise NotFound("no such export") from None
        with self.connection() as conn:
            row = conn.execute(_GET, (export_id,)).fetchone()
        if row is None:
            raise NotFound("no such export")
        return _job(row)

    def claim(self, export_id: str) -> uuid.UUID | None:
        with self.connection() as conn:
            row = conn.execute(_CLAIM, (export_id,)).fetchone()
        return row[0] if row else None

    def finish(self, export_id: str, key: str, lines: int, size: int) -> ExportJob | None:
        """The job done; None when its row is gone (the user was erased while it ran)."""
        with self.connection() as conn:
            row = conn.execute(_FINISH, (key, lines, size, export_id)).fetchone()
        return _job(row) if row else None

    def fail(self, export_id: str, reason: str) -> None:
        with self.connection() as conn:
            conn.execute(_FAIL, (reason[:500], export_id))

    # -- a user's rows, streamed -----------------------------------------------------------------

    def versions(self, user_id: uuid.UUID, *, page: int = VERSION_PAGE_ROWS) -> Iterator[VersionRow]:
        after = 0
        while True:
            with self.connection() as conn:
                rows = conn.execute(_VERSIONS, (user_id, after, page)).fetchall()
            for r in rows:
                yield VersionRow(
                    version=r[0], patch=r[1], checkpoint=r[2], created_at=r[3], source=r[4], idempotency_key=r[5],
                    provenance=r[6],
                )  # fmt: skip
            if len(rows) < page:
                return
            after = rows[-1][0]

    def kv(self, user_id: uuid.UUID, now: datetime, *, page: int = VERSION_PAGE_ROWS) -> Iterator[KvEntry]:
        after = ("", "")
        while True:
            with self.connection() as conn:
                rows = conn.execute(_KV, (user_id, now, *after, page)).fetchall()
            entries = [_entry(r) for r in rows]
            yield from entries
            if len(rows) < page:
                return
            after = (entries[-1].namespace, entries[-1].key)

    def activity(self, user_id: uuid.UUID, *, page: int = VERSION_PAGE_ROWS) -> Iterator[Activity]:
        after = 0
        while True:
            with self.connection() as conn:
                rows = conn.execute(_ACTIVITY, (user_id, after, page)).fetchall()
            for r in rows:
                yield Activity(
                    id=r[0], user_id=r[1], occurred_at=r[2], kind=r[3], payload=r[4], source=r[5], external_id=r[6]
                )
            if len(rows) < page:
                return
            after = rows[-1][0]

    # -- an import's writes --------------------------------------------------------------------------

    def head_version(self, user_id: uuid.UUID) -> int:
        with self.connection() as conn:
            row = conn.execute(_HEAD, (user_id,)).fetchone()
        return int(row[0]) if row else 0

    def write_page(self, user_id: uuid.UUID, page: ImportPage) -> int:
        rows = [
            {
                "version": r.version, "patch": r.patch, "checkpoint": r.checkpoint,
                "created_at": r.created_at.isoformat(), "source": r.source, "idempotency_key": r.idempotency_key,
                "provenance": r.provenance,
            }
            for r in page.rows
        ]  # fmt: skip
        with self.connection() as conn:
            row = conn.execute(_IMPORT, (user_id, Jsonb(rows), Jsonb(page.head))).fetchone()
        return int(row[0]) if row else 0

    def write_kv(self, user_id: uuid.UUID, e: ImportedKv) -> None:
        with self.connection() as conn:
            conn.execute(
                _IMPORT_KV,
                (user_id, e.namespace, e.key, Jsonb(e.value), e.created_at, e.updated_at, e.expires_at),
            )

    def write_activity(self, user_id: uuid.UUID, a: ImportedActivity) -> None:
        with self.connection() as conn:
            conn.execute(_IMPORT_ACTIVITY, (user_id, a.occurred_at, a.kind, Jsonb(a.payload), a.source, a.external_id))

    def catch_up(self, user_id: uuid.UUID) -> None:
        with self.connection() as conn:
            conn.execute(_CATCH_UP, (user_id,))


def check_empty(exports: PostgresExports, user_id: uuid.UUID) -> None:
    """An import writes only into a user without history (ImportTargetNotEmpty)."""
    version = exports.head_version(user_id)
    if version:
        raise ImportTargetNotEmpty(f"user {user_id} already has {version} versions: import into an empty memory")


# -- where the lines go -------------------------------------------------------------------------------


class LocalExportObjects:
    """Exports as files in a folder (the local kit: $USER_MEMORY_HOME/exports); URLs are file://."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        path = (self.folder / key).resolve()
        if self.folder.resolve() not in path.parents:
            raise StorageError("an export key must name a file inside the exports folder")
        return path

    def write(self, key: str, lines: Iterator[bytes]) -> int:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        size = 0
        partial = path.with_suffix(path.suffix + ".partial")
        with partial.open("wb") as out:
            for line in lines:
                out.write(line)
                size += len(line)
        partial.replace(path)  # a reader never sees half a file
        return size

    def url(self, key: str, *, expires_in: int) -> str:
        return self._path(key).as_uri()

    def delete(self, keys: list[str]) -> int:
        for key in keys:
            self._path(key).unlink(missing_ok=True)
        return len(keys)

    def read(self, key: str) -> Iterator[bytes]:
        with self._path(key).open("rb") as f:
            yield from f

    def upload_url(self, key: str, *, expires_in: int) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return str(path)  # the operator copies the file there (same machine)


class S3ExportObjects:
    """Exports as S3 objects (EXPORT_BUCKET); URLs are pre-signed GETs."""

    def __init__(self, bucket: str, client: Any = None) -> None:
        self.bucket = bucket
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.client = client

    def write(self, key: str, lines: Iterator[bytes]) -> int:
        # Streamed in parts of PART_BYTES (S3's multipart upload; a small export is one PUT):
        # memory holds one part, never the file, and the function's /tmp is not used at all.
        part = bytearray()
        size = 0
        upload_id: str | None = None
        etags: list[dict[str, Any]] = []
        try:
            for line in lines:
                part += line
                size += len(line)
                if len(part) >= PART_BYTES:
                    if upload_id is None:
                        upload_id = self.client.create_multipart_upload(
                            Bucket=self.bucket, Key=key, ContentType=CONTENT_TYPE
                        )["UploadId"]
                    etags.append(self._part(key, upload_id, len(etags) + 1, bytes(part)))
                    part.clear()
            if upload_id is None:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(part), ContentType=CONTENT_TYPE)
                return size
            if part:
                etags.append(self._part(key, upload_id, len(etags) + 1, bytes(part)))
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": etags}
            )
        except BaseException:
            if upload_id is not None:  # no half-written object, and no parts left to pay for
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise
        return size

    def _part(self, key: str, upload_id: str, number: int, body: bytes) -> dict[str, Any]:
        answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)
        return {"ETag": answer["ETag"], "PartNumber": number}

    def url(self, key: str, *, expires_in: int) -> str:
        return str(
            self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in
            )
        )

    def delete(self, keys: list[str]) -> int:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            chunk = keys[start : start + 1000]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk]})
        return len(keys)

    def read(self, key: str) -> Iterator[bytes]:
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        yield from body.iter_lines(keepends=True)

    def upload_url(self, key: str, *, expires_in: int) -> str:
        return str(
            self.client.generate_presigned_url(
                "put_object", Params={"Bucket": self.bucket, "Key": key, "ContentType": CONTENT_TYPE},
                ExpiresIn=expires_in,
            )
        )  # fmt: skip

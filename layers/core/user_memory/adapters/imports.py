"""Import jobs on PostgreSQL (migration 029): an operator's import of an export file into an empty
memory, started through the API. The rows hold the state, the uploaded object's key and what was
written; never content. Runs with the service's rights (the API's `as_service`, the worker's pool).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from user_memory.adapters.postgres import ConnectionSource, _Database
from user_memory.errors import NotFound

_COLUMNS = """id::text, user_id, requested_by, status, object_key, versions, kv, error_type, error, created_at,
started_at, finished_at"""

_CREATE = f"""
INSERT INTO user_memory_imports (id, user_id, requested_by, object_key) VALUES (%s, %s, %s, %s)
RETURNING {_COLUMNS}
"""
_GET = f"SELECT {_COLUMNS} FROM user_memory_imports WHERE id = %s"
# Queued once per upload: an import queued, running or done is not queued again (the route answers
# it as it is); a failed one may be started again (the file fixed and uploaded anew).
_QUEUE = f"""
UPDATE user_memory_imports SET status = 'queued', error_type = NULL, error = NULL, finished_at = NULL
 WHERE id = %s AND status IN ('awaiting_upload', 'failed')
RETURNING {_COLUMNS}
"""
# Claimed once: a job another run took (or finished) is not run again.
_CLAIM = """
UPDATE user_memory_imports SET status = 'running', started_at = now() WHERE id = %s AND status = 'queued'
RETURNING user_id, object_key
"""
# The import's transaction holds its job's row: an erase of the user waits for it (migration 029).
_HOLD = "SELECT 1 FROM user_memory_imports WHERE id = %s AND status = 'running' FOR UPDATE"
_FINISH = f"""
UPDATE user_memory_imports SET status = 'done', versions = %s, kv = %s, finished_at = now()
 WHERE id = %s AND status = 'running'
RETURNING {_COLUMNS}
"""
_FAIL = f"""
UPDATE user_memory_imports SET status = 'failed', error_type = %s, error = %s, finished_at = now()
 WHERE id = %s
RETURNING {_COLUMNS}
"""


@dataclass(frozen=True, kw_only=True)
class ImportJob:
    """One import job as stored (no content)."""

    id: str
    user_id: uuid.UUID
    requested_by: str
    status: str
    object_key: str
    versions: int | None
    kv: int | None
    error_type: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


def _job(row: Any) -> ImportJob:
    return ImportJob(
        id=row[0], user_id=row[1], requested_by=row[2], status=row[3], object_key=row[4], versions=row[5], kv=row[6],
        error_type=row[7], error=row[8], created_at=row[9], started_at=row[10], finished_at=row[11],
    )  # fmt: skip


def import_object_key(import_id: str) -> str:
    """Where an import's file is uploaded: by the job's random id, never the user's."""
    return f"imports/{import_id}.jsonl"


class PostgresImports(_Database):
    """Import jobs (the service's rights)."""

    def __init__(self, pool: ConnectionSource) -> None:
        super().__init__(pool)

    def create(self, user_id: uuid.UUID, requested_by: str) -> ImportJob:
        import_id = str(uuid.uuid4())
        with self.connection() as conn:
            return _job(
                conn.execute(_CREATE, (import_id, user_id, requested_by, import_object_key(import_id))).fetchone()
            )

    def get(self, import_id: str) -> ImportJob:
        try:
            uuid.UUID(import_id)
        except ValueError:
            raise NotFound("no such import") from None
        with self.connection() as conn:
            row = conn.execute(_GET, (import_id,)).fetchone()
        if row is None:
            raise NotFound("no such import")
        return _job(row)

    def queue(self, import_id: str) -> ImportJob | None:
        """The job queued; None when it was queued, running or done already (not queued twice)."""
        self.get(import_id)  # NotFound first
        with self.connection() as conn:
            row = conn.execute(_QUEUE, (import_id,)).fetchone()
        return _job(row) if row else None

    def claim(self, import_id: str) -> tuple[uuid.UUID, str] | None:
        with self.connection() as conn:
            row = conn.execute(_CLAIM, (import_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def hold(self, import_id: str) -> bool:
        """Lock the running job's row for the import's transaction; False when it is gone (erased)."""
        with self.connection() as conn:
            return conn.execute(_HOLD, (import_id,)).fetchone() is not None

    def finish(self, import_id: str, versions: int, kv: int) -> ImportJob | None:
        """The job done; None when its row is gone (the user was erased while it ran)."""
        with self.connection() as conn:
            row = conn.execute(_FINISH, (versions, kv, import_id)).fetchone()
        return _job(row) if row else None

    def fail(self, import_id: str, error_type: str, reason: str) -> ImportJob | None:
        with self.connection() as conn:
            row = conn.execute(_FAIL, (error_type[:100], reason[:500], import_id)).fetchone()
        return _job(row) if row else None

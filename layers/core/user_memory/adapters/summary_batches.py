"""Which users of a run are in which Batch API batch (migration 021), on PostgreSQL.

The claim is the idempotency: one statement inserts a row per (run key, user) that has none and
returns the users it inserted, so of two deliveries of the same refresh_user message only one
puts a user into a batch. A claim gets its batch id once the batch exists, and is deleted once
the user's answer went through the pipeline (the run key on the version is the record from then on).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from user_memory.adapters.postgres import _Database

_CLAIMED = """
SELECT user_id, batch_id FROM summary_batch_requests WHERE run_key = %s AND user_id = ANY(%s)
"""

_CLAIM = """
INSERT INTO summary_batch_requests (run_key, user_id, base_version, request_sha256)
SELECT %s, u, v, h FROM unnest(%s::uuid[], %s::integer[], %s::text[]) AS c(u, v, h)
ON CONFLICT (run_key, user_id) DO NOTHING
RETURNING user_id
"""

_ASSIGN = """
UPDATE summary_batch_requests SET batch_id = %s WHERE run_key = %s AND user_id = ANY(%s) AND batch_id IS NULL
"""

_RELEASE = "DELETE FROM summary_batch_requests WHERE run_key = %s AND user_id = ANY(%s) AND batch_id IS NULL"

_PENDING = """
SELECT user_id, base_version, request_sha256 FROM summary_batch_requests
 WHERE batch_id = %s AND run_key = %s ORDER BY user_id
"""

_DONE = "DELETE FROM summary_batch_requests WHERE batch_id = %s AND run_key = %s AND user_id = ANY(%s)"


@dataclass(frozen=True)
class Claim:
    """A user's request in a batch: the head version it was built on and its body's SHA-256."""

    user_id: uuid.UUID
    base_version: int
    request_sha256: str


class PostgresBatchRequests(_Database):
    """The claims of summary_batch_requests."""

    def claimed(self, run_key: str, users: Sequence[uuid.UUID]) -> dict[uuid.UUID, str | None]:
        """The users of `users` already claimed for `run_key`, with their batch id (None: being created)."""
        with self.connection() as conn:
            rows = conn.execute(_CLAIMED, (run_key, list(users))).fetchall()
        return {r[0]: r[1] for r in rows}

    def claim(self, run_key: str, claims: Sequence[Claim]) -> set[uuid.UUID]:
        """Claim these users for `run_key` in one statement; the ones this call claimed (not another's)."""
        if not claims:
            return set()
        args = (
            run_key,
            [c.user_id for c in claims],
            [c.base_version for c in claims],
            [c.request_sha256 for c in claims],
        )
        with self.connection() as conn:
            return {r[0] for r in conn.execute(_CLAIM, args).fetchall()}

    def assign(self, run_key: str, users: Sequence[uuid.UUID], batch_id: str) -> None:
        """The batch these claims went into."""
        with self.connection() as conn:
            conn.execute(_ASSIGN, (batch_id, run_key, list(users)))

    def release(self, run_key: str, users: Sequence[uuid.UUID]) -> None:
        """Claims whose batch could not be created: gone, so the users run online."""
        with self.connection() as conn:
            conn.execute(_RELEASE, (run_key, list(users)))

    def pending(self, batch_id: str, run_key: str) -> list[Claim]:
        """The batch's users whose answer has not been collected yet."""
        with self.connection() as conn:
            rows = conn.execute(_PENDING, (batch_id, run_key)).fetchall()
        return [Claim(user_id=r[0], base_version=r[1], request_sha256=r[2]) for r in rows]

    def done(self, batch_id: str, run_key: str, users: Sequence[uuid.UUID]) -> None:
        """These users' answers went through the pipeline: their claims are no longer needed."""
        with self.connection() as conn:
            conn.execute(_DONE, (batch_id, run_key, list(users)))

"""Runs and their undo on PostgreSQL (migration 025): the runs listed newest first, an undo's
users and outcomes. SQL only; every answer bounded. Runs with the service's rights."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from user_memory.adapters.overview import PostgresOverview
from user_memory.adapters.postgres import _Database
from user_memory.errors import UnknownRun, UnknownRunRevert

MAX_RUNS_PAGE = 100
MAX_LISTED_USERS = 100

# The service's run keys, one probe of the partial index (migration 025) per distinct key (a
# loose index scan: the versions of a run are not read), each with its newest version's time.
# The predicate repeats the index's own so the planner may use it.
_RUNS = """
WITH RECURSIVE keys(k) AS (
  (SELECT idempotency_key FROM user_memory_snapshots
    WHERE idempotency_key IS NOT NULL AND left(idempotency_key, 4) <> 'api:'
    ORDER BY idempotency_key LIMIT 1)
  UNION ALL
  SELECT (SELECT s.idempotency_key FROM user_memory_snapshots s
           WHERE s.idempotency_key > keys.k AND s.idempotency_key IS NOT NULL AND left(s.idempotency_key, 4) <> 'api:'
           ORDER BY s.idempotency_key LIMIT 1)
    FROM keys WHERE keys.k IS NOT NULL
), runs AS (
  SELECT k, (SELECT max(s.created_at) FROM user_memory_snapshots s
              WHERE s.idempotency_key = keys.k AND s.idempotency_key IS NOT NULL
                AND left(s.idempotency_key, 4) <> 'api:') AS last_at
    FROM keys WHERE k IS NOT NULL
)
SELECT k, last_at FROM runs
 WHERE %(after_at)s::timestamptz IS NULL OR (last_at, k) < (%(after_at)s, %(after_key)s)
 ORDER BY last_at DESC, k DESC
 LIMIT %(limit)s
"""

_START = """
INSERT INTO run_reverts (revert_id, run_key, user_id, requested_by) VALUES (%(id)s, %(key)s, %(u)s, %(by)s)
ON CONFLICT (revert_id) DO UPDATE SET queued_at = now()
"""

# The run's users (all, or the one named): its version of each. A resume sends failed users again.
_USERS = """
WITH added AS (
  INSERT INTO run_revert_users (revert_id, user_id, run_version)
  SELECT %(id)s, s.user_id, s.version FROM user_memory_snapshots s
   WHERE s.idempotency_key = %(key)s AND s.idempotency_key IS NOT NULL AND left(s.idempotency_key, 4) <> 'api:'
     AND (%(u)s::uuid IS NULL OR s.user_id = %(u)s)
  ON CONFLICT (revert_id, user_id) DO NOTHING
  RETURNING 1
), retried AS (
  UPDATE run_revert_users SET outcome = 'pending', error = NULL, updated_at = now()
   WHERE revert_id = %(id)s AND outcome = 'failed'
  RETURNING 1
)
-- The statement's snapshot does not see the rows `added` inserts: they are counted on top.
SELECT (SELECT count(*) FROM added), (SELECT count(*) FROM retried),
       (SELECT count(*) FROM run_revert_users WHERE revert_id = %(id)s) + (SELECT count(*) FROM added)
"""

_PENDING = """
SELECT user_id FROM run_revert_users
 WHERE revert_id = %(id)s AND outcome = 'pending' AND user_id > %(after)s
 ORDER BY user_id LIMIT %(limit)s
"""

_USER = """
SELECT r.run_key, u.run_version, u.outcome FROM run_revert_users u JOIN run_reverts r USING (revert_id)
 WHERE u.revert_id = %s AND u.user_id = %s
"""

_RECORD = """
UPDATE run_revert_users SET outcome = %(outcome)s, version = %(version)s, kind = %(kind)s, paths = %(paths)s,
       error = %(error)s, updated_at = now()
 WHERE revert_id = %(id)s AND user_id = %(u)s
"""

_OPERATION = "SELECT run_key, user_id, requested_by, created_at, queued_at FROM run_reverts WHERE revert_id = %s"

_COUNTS = """
SELECT outcome, count(*), max(updated_at) FROM run_revert_users WHERE revert_id = %s GROUP BY outcome
"""

_LISTED = """
SELECT user_id, paths, error FROM run_revert_users
 WHERE revert_id = %s AND outcome = %s ORDER BY user_id LIMIT %s
"""

OUTCOMES = ("pending", "reverted", "unchanged", "conflict", "failed")


def revert_id_of(run_key: str, user_id: uuid.UUID | None) -> uuid.UUID:
    """The one undo of a run (for one user, or every user): starting it again resumes it."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"user-memory:run-revert:{run_key}:{user_id or '*'}")


class PostgresRuns(_Database):
    """Runs listed and read, and their undo's bookkeeping (RunReverts)."""

    def list_runs(self, *, limit: int, after: tuple[datetime, str] | None) -> list[dict[str, Any]]:
        """The runs newest first (by their newest version), each with its totals."""
        params = {
            "after_at": after[0] if after else None,
            "after_key": after[1] if after else None,
            "limit": min(limit, MAX_RUNS_PAGE),
        }
        with self.connection() as conn:
            keys = [r[0] for r in conn.execute(_RUNS, params).fetchall()]
        overview = PostgresOverview(self.pool)
        return [overview.run_report(k) for k in keys]

    def start(self, run_key: str, user_id: uuid.UUID | None, requested_by: str | None) -> dict[str, Any]:
        """Record the undo of `run_key` (every user it wrote a version for, or the one named) with
        its users pending; started again, it sends its failed users once more (a resume)."""
        revert_id = revert_id_of(run_key, user_id)
        params = {"id": revert_id, "key": run_key, "u": user_id, "by": requested_by}
        with self.connection() as conn:
            conn.execute(_START, params)
            row = conn.execute(_USERS, params).fetchone()
            assert row is not None  # one row of counts
            if row[2] == 0:  # nothing to undo: leave no operation behind
                conn.execute("DELETE FROM run_reverts WHERE revert_id = %s", (revert_id,))
        if row[2] == 0:
            raise UnknownRun(run_key, user_id)
        return {"revert_id": revert_id, "users": int(row[2]), "added": int(row[0]), "retried": int(row[1])}

    def pending(self, revert_id: uuid.UUID, *, after: uuid.UUID | None = None, limit: int = 100) -> list[uuid.UUID]:
        """A page of the operation's users still to undo, by user id."""
        params = {"id": revert_id, "after": after or uuid.UUID(int=0), "limit": limit}
        with self.connection() as conn:
            return [r[0] for r in conn.execute(_PENDING, params).fetchall()]

    def user(self, revert_id: uuid.UUID, user_id: uuid.UUID) -> tuple[str, int, str] | None:
        """The run key, the run's version of this user and the user's outcome so far (None: not in it)."""
        with self.connection() as conn:
            row = conn.execute(_USER, (revert_id, user_id)).fetchone()
        return (row[0], row[1], row[2]) if row else None

    def record(
        self,
        revert_id: uuid.UUID,
        user_id: uuid.UUID,
        outcome: str,
        *,
        version: int | None = None,
        kind: str | None = None,
        paths: list[str] | None = None,
        error: str | None = None,
    ) -> None:
        params = {
            "id": revert_id,
            "u": user_id,
            "outcome": outcome,
            "version": version,
            "kind": kind,
            "paths": Jsonb(paths) if paths is not None else None,
            "error": error[:500] if error else None,
        }
        with self.connection() as conn:
            conn.execute(_RECORD, params)

    def status(self, revert_id: uuid.UUID) -> dict[str, Any]:
        """The operation's report: its users by outcome, the conflicts with their paths and the
        failures with their reason (the first MAX_LISTED_USERS of each)."""
        with self.connection() as conn:
            op = conn.execute(_OPERATION, (revert_id,)).fetchone()
            if op is None:
                raise UnknownRunRevert(revert_id)
            counts = {r[0]: (int(r[1]), r[2]) for r in conn.execute(_COUNTS, (revert_id,)).fetchall()}
            conflicts = conn.execute(_LISTED, (revert_id, "conflict", MAX_LISTED_USERS)).fetchall()
            failures = conn.execute(_LISTED, (revert_id, "failed", MAX_LISTED_USERS)).fetchall()
        n = {o: counts.get(o, (0, None))[0] for o in OUTCOMES}
        updated = [t for _, t in counts.values() if t is not None]
        return {
            "revert_id": str(revert_id),
            "run_key": op[0],
            "user_id": str(op[1]) if op[1] else None,
            "requested_by": op[2],
            "created_at": op[3],
            "queued_at": op[4],
            "updated_at": max(updated) if updated else None,
            "done": n["pending"] == 0,
            "users": sum(n.values()),
            **n,
            "conflicts": [{"user_id": str(r[0]), "paths": r[1] or []} for r in conflicts],
            "failures": [{"user_id": str(r[0]), "error": r[2] or ""} for r in failures],
        }

"""PostgreSQL adapter of on-demand refreshes (migration 024) and of the prompt's recent memories.

SQL only. `PostgresRefreshes.claim` is the per-user rate limit: one upsert that takes the user's
row only when its last refresh is older than the interval, with the message sent inside the same
transaction (a send that fails rolls the claim back). `PostgresRecent.rows` reads the
conversation memories noted as the user's activity that the prompt may still need (those of the
conversations with a memory no summary consumed yet), in the caller's transaction (an end user's
reads stay its own under row-level security).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from user_memory.adapters.postgres import _Database
from user_memory.domain.memory.recent import MAX_RECENT_CONVERSATIONS, NotedMemory
from user_memory.domain.refresh import Claimed, Requester
from user_memory.errors import StorageError

# Takes the user's row when there is none or its refresh is older than the interval (and, after a
# conversation memory, only when the last refresh's window ends before now: one still waiting to
# run takes the memory in); the conflicting row is locked either way, so a concurrent claim waits
# and then sees this one.
_CLAIM = """
INSERT INTO user_memory_refreshes AS r (user_id, run_key, requested_at, window_end, requested_by)
VALUES (%(u)s, %(key)s, %(at)s, %(end)s, %(by)s)
ON CONFLICT (user_id) DO UPDATE
   SET run_key = EXCLUDED.run_key, requested_at = EXCLUDED.requested_at, window_end = EXCLUDED.window_end,
       requested_by = EXCLUDED.requested_by
 WHERE r.requested_at <= EXCLUDED.requested_at - %(interval)s
   AND (NOT %(uncovered)s OR r.window_end <= EXCLUDED.requested_at)
RETURNING run_key, requested_at
"""

_LAST = "SELECT run_key, requested_at FROM user_memory_refreshes WHERE user_id = %s"

# Rows no claim can be refused by any more (the interval is at most a day, the delay 900 s).
_PURGE = "DELETE FROM user_memory_refreshes WHERE window_end < %s"

# The newest noted memory of each conversation that has one no summary consumed
# (summarized_version IS NULL), and the newest a summary did consume; the pending ones' newest
# conversations first, at most MAX_RECENT_CONVERSATIONS of them, each row with the head's version
# as the same statement saw it. Served by the user's rows of idx_user_activity_user_occurred.
_RECENT = """
WITH pending AS (
  SELECT payload->>'conversation_id' AS cid, max(occurred_at) AS at
    FROM user_activity
   WHERE user_id = %(u)s AND kind = 'conversation_memory' AND source = 'conversations'
     AND summarized_version IS NULL AND jsonb_typeof(payload->'memory') = 'object'
   GROUP BY 1
   ORDER BY 2 DESC, 1
   LIMIT %(limit)s
)
SELECT DISTINCT ON (p.cid, a.summarized_version IS NULL)
       p.cid, a.summarized_version IS NULL, a.occurred_at, a.payload->'memory',
       (SELECT h.version FROM user_memory_heads h WHERE h.user_id = %(u)s)
  FROM pending p
  JOIN user_activity a
    ON a.user_id = %(u)s AND a.kind = 'conversation_memory' AND a.source = 'conversations'
   AND a.payload->>'conversation_id' = p.cid AND jsonb_typeof(a.payload->'memory') = 'object'
 ORDER BY p.cid, a.summarized_version IS NULL,
          CASE WHEN jsonb_typeof(a.payload->'through_message') = 'number'
               THEN (a.payload->>'through_message')::numeric END DESC NULLS LAST,
          a.id DESC
"""


class PostgresRefreshes(_Database):
    """RefreshClaims on PostgreSQL (the service's rights: end users have no rights on the table)."""

    def claim(
        self,
        user_id: uuid.UUID,
        *,
        run_key: str,
        at: datetime,
        window_end: datetime,
        interval: timedelta,
        by: Requester,
        send: Callable[[], None],
    ) -> Claimed:
        params = {
            "u": user_id,
            "key": run_key,
            "at": at,
            "end": window_end,
            "by": by,
            "interval": interval,
            "uncovered": by == "conversation",
        }
        for _ in range(2):  # a claim committed between this statement's snapshot and its conflict: read again
            with self.connection() as conn, conn.transaction():
                row = conn.execute(_CLAIM, params).fetchone()
                if row is not None:
                    send()  # inside the transaction: a send that fails leaves the previous row
                    return Claimed(run_key=row[0], requested_at=row[1], new=True)
                last = conn.execute(_LAST, (user_id,)).fetchone()
            if last is not None:
                return Claimed(run_key=last[0], requested_at=last[1], new=False)
        raise StorageError("the refresh row was neither claimed nor found twice (deleted meanwhile)")

    def purge(self, before: datetime) -> int:
        with self.connection() as conn:
            return conn.execute(_PURGE, (before,)).rowcount


class PostgresRecent(_Database):
    """RecentMemories on PostgreSQL, in the caller's transaction."""

    def noted(self, user_id: uuid.UUID) -> tuple[list[NotedMemory], int | None]:
        with self.connection() as conn:
            rows = conn.execute(_RECENT, {"u": user_id, "limit": MAX_RECENT_CONVERSATIONS}).fetchall()
        memories = [NotedMemory(conversation_id=r[0], pending=r[1], occurred_at=r[2], memory=r[3]) for r in rows]
        return memories, (rows[0][4] or 0) if rows else None

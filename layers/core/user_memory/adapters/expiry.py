"""The users the deployment's expiry may concern, from the search index (memory_items): events
whose end (a recurring one's last occurrence, recur_until) is before the cutoff, and done or
cancelled to-dos. A coarse filter: the document decides (domain/expiry.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from user_memory.adapters.postgres import _Database

_USERS = """
SELECT DISTINCT user_id FROM memory_items i
 WHERE (%(after)s::uuid IS NULL OR i.user_id > %(after)s::uuid)
   AND ((i.kind = 'event' AND %(events)s::timestamptz IS NOT NULL
         AND CASE WHEN i.recurring THEN i.recur_until ELSE coalesce(i.ends_at, i.starts_at) END < %(events)s)
        OR (i.kind = 'todo' AND %(todos)s AND i.status IN ('done', 'cancelled')))
 ORDER BY user_id
 LIMIT %(limit)s
"""


class PostgresExpiry(_Database):
    """ExpiryCandidates on PostgreSQL (the service's rights)."""

    def users(
        self, *, events_ended_before: datetime | None, todos: bool, after: uuid.UUID | None, limit: int
    ) -> list[uuid.UUID]:
        params = {"after": after, "events": events_ended_before, "todos": todos, "limit": limit}
        with self.connection() as conn:
            return [r[0] for r in conn.execute(_USERS, params).fetchall()]

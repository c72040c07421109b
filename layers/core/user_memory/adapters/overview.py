"""What the console reads beside the memory routes: per-day figures of a user's versions, the
key-value namespaces, the conversations with their memories. SQL only; every answer bounded.

Runs in the request's transaction: as the end user (row-level security narrows every read to
its own rows, besides the WHERE clause) or, for an operator, with the service's rights.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from user_memory.adapters.postgres import _Database
from user_memory.domain.cost import COST_DECIMALS

MAX_NAMESPACES = 1000
MAX_CONVERSATIONS_PAGE = 100

# One row per UTC day: versions, the summaries' applied and refused edits, their tokens (prompt,
# completion, of the prompt cached) and their cost at the prices of the run that wrote them (the
# provenance only the service records; a value of another JSON type counts as nothing).
_DAILY = """
SELECT (created_at AT TIME ZONE 'UTC')::date AS day,
       count(*),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'edits') = 'array'
                         THEN jsonb_array_length(provenance->'edits') END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'refused') = 'array'
                         THEN jsonb_array_length(provenance->'refused') END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'prompt_tokens') = 'number'
                         THEN (provenance->>'prompt_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'completion_tokens') = 'number'
                         THEN (provenance->>'completion_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'cached_prompt_tokens') = 'number'
                         THEN (provenance->>'cached_prompt_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'cost_usd') = 'number'
                         THEN (provenance->>'cost_usd')::numeric END), 0)
  FROM user_memory_snapshots
 WHERE user_id = %s AND created_at >= %s
 GROUP BY 1
 ORDER BY 1
"""

# One run's totals over the versions it wrote (every user's row carrying the run key), from their
# provenance. The service's run keys have an index of their own (migration 025, partial: not the
# end users' `api:` keys), which the repeated predicate lets the planner use.
_RUN = """
SELECT count(*), count(DISTINCT user_id), min(created_at), max(created_at),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'activities') = 'number'
                         THEN (provenance->>'activities')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'calls') = 'number'
                         THEN (provenance->>'calls')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'prompt_tokens') = 'number'
                         THEN (provenance->>'prompt_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'completion_tokens') = 'number'
                         THEN (provenance->>'completion_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'cached_prompt_tokens') = 'number'
                         THEN (provenance->>'cached_prompt_tokens')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'cost_usd') = 'number'
                         THEN (provenance->>'cost_usd')::numeric END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'refused') = 'array'
                         THEN jsonb_array_length(provenance->'refused') END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'restored') = 'array'
                         THEN jsonb_array_length(provenance->'restored') END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'filled') = 'array'
                         THEN jsonb_array_length(provenance->'filled') END), 0),
       coalesce(sum(CASE WHEN jsonb_typeof(provenance->'edits') = 'array'
                         THEN jsonb_array_length(provenance->'edits') END), 0)
  FROM user_memory_snapshots
 WHERE idempotency_key = %s AND idempotency_key IS NOT NULL AND left(idempotency_key, 4) <> 'api:'
"""

_NAMESPACES = """
SELECT namespace, count(*), max(updated_at), min(expires_at) FROM user_memory_kv
 WHERE user_id = %s AND (expires_at IS NULL OR expires_at > %s)
 GROUP BY namespace
 ORDER BY namespace
 LIMIT %s
"""

# Newest conversations first (keyset on last_message_at, conversation_id), each with its memory.
_CONVERSATIONS = """
SELECT c.conversation_id, c.first_message_at, c.last_message_at, c.messages, coalesce(c.memory_through, 0),
       m.memory, m.model, m.updated_at
  FROM conversations c
  LEFT JOIN conversation_memories m ON m.user_id = c.user_id AND m.conversation_id = c.conversation_id
 WHERE c.user_id = %(u)s
   AND (%(after_at)s::timestamptz IS NULL OR (c.last_message_at, c.conversation_id) < (%(after_at)s, %(after_id)s))
 ORDER BY c.last_message_at DESC, c.conversation_id DESC
 LIMIT %(limit)s
"""


class PostgresOverview(_Database):
    """The console's reads on PostgreSQL (OverviewData)."""

    def daily(self, user_id: uuid.UUID, since: datetime) -> list[dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute(_DAILY, (user_id, since)).fetchall()
        return [
            {
                "day": r[0].isoformat(),
                "versions": r[1],
                "edits_applied": int(r[2]),
                "edits_refused": int(r[3]),
                "tokens": int(r[4]) + int(r[5]),
                "prompt_tokens": int(r[4]),
                "completion_tokens": int(r[5]),
                "cached_prompt_tokens": int(r[6]),
                "cost_usd": round(float(r[7]), COST_DECIMALS),
            }
            for r in rows
        ]

    def run_report(self, run_key: str) -> dict[str, Any]:
        """One run's totals over the versions it wrote (every user): users, activities, calls,
        tokens and their cost, edits refused, facts restored and filled. Runs with the service's
        rights (an operator's report)."""
        with self.connection() as conn:
            r = conn.execute(_RUN, (run_key,)).fetchone()
        assert r is not None  # an aggregate answers one row
        return {
            "run_key": run_key,
            "versions": r[0],
            "users": r[1],
            "first_written_at": r[2],
            "last_written_at": r[3],
            "activities": int(r[4]),
            "calls": int(r[5]),
            "prompt_tokens": int(r[6]),
            "completion_tokens": int(r[7]),
            "cached_prompt_tokens": int(r[8]),
            "tokens": int(r[6]) + int(r[7]),
            "cost_usd": round(float(r[9]), COST_DECIMALS),
            "edits_refused": int(r[10]),
            "facts_restored": int(r[11]),
            "facts_filled": int(r[12]),
            "edits_applied": int(r[13]),
        }

    def kv_namespaces(self, user_id: uuid.UUID, now: datetime) -> list[dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute(_NAMESPACES, (user_id, now, MAX_NAMESPACES)).fetchall()
        return [{"namespace": r[0], "entries": r[1], "updated_at": r[2], "next_expiry": r[3]} for r in rows]

    def conversations(
        self, user_id: uuid.UUID, *, limit: int, after: tuple[datetime, str] | None
    ) -> list[dict[str, Any]]:
        params = {
            "u": user_id,
            "after_at": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": min(limit, MAX_CONVERSATIONS_PAGE),
        }
        with self.connection() as conn:
            rows = conn.execute(_CONVERSATIONS, params).fetchall()
        return [
            {
                "conversation_id": r[0],
                "first_message_at": r[1],
                "last_message_at": r[2],
                "messages": r[3],
                "memory_through": r[4],
                "memory": r[5],
                "model": r[6],
                "memory_updated_at": r[7],
            }
            for r in rows
        ]

"""The companion layer on PostgreSQL: element queries from memory_items, ratings, digests.

Every query reads the memory_items rows the versions wrote (never the documents): to-dos due
through idx_memory_items_todos_open, events through idx_memory_items_events, active goals
through idx_memory_items_goals_active. Run as the end user (the API), row-level security
narrows every read to auth.uid() on top of the WHERE clause. Recurring events come back as
stored: expanding them is the domain's (`elements.events_between`); keeping the index in step
is the search adapter's (adapters/search.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from psycopg.types.json import Jsonb

from user_memory.adapters.postgres import _Database
from user_memory.domain.companion.elements import Rating
from user_memory.domain.companion.items import MAX_ELEMENTS, ElementRow, redacted

_TODOS_DUE = """
SELECT path, version, value FROM memory_items
 WHERE user_id = %s AND kind = 'todo' AND status IN ('open', 'in_progress') AND due_at < %s
 ORDER BY due_at, path
 LIMIT %s
"""

# Served by idx_memory_items_events (user_id, starts_at): every event that starts before the
# range's end; those that end before its start are dropped unless they recur past it.
_EVENTS = """
SELECT path, version, value FROM memory_items
 WHERE user_id = %(u)s AND kind = 'event' AND starts_at < %(end)s
   AND (ends_at >= %(start)s OR (recurring AND (recur_until IS NULL OR recur_until >= %(start)s)))
   AND status IS DISTINCT FROM 'cancelled'
 ORDER BY starts_at, path
"""

_GOALS_ACTIVE = """
SELECT path, version, value FROM memory_items
 WHERE user_id = %s AND kind = 'goal' AND status = 'active' AND (%s::timestamptz IS NULL OR due_at < %s)
 ORDER BY due_at NULLS LAST, path
 LIMIT %s
"""


class PostgresCompanion(_Database):
    """Queries, ratings and digests of the companion layer."""

    # -- element queries (from the index) -----------------------------------------------------------

    def todos_due(self, user_id: uuid.UUID, before: datetime, *, limit: int = MAX_ELEMENTS) -> list[ElementRow]:
        """Open and in-progress to-dos due before `before`, soonest first."""
        with self.connection() as conn:
            rows = conn.execute(_TODOS_DUE, (user_id, before, limit), prepare=True).fetchall()
        return [ElementRow(path=r[0], version=r[1], value=redacted(r[2])) for r in rows]

    def event_rows(self, user_id: uuid.UUID, start: datetime, end: datetime) -> list[ElementRow]:
        """The events that may have an occurrence in [start, end), by start: those starting before
        its end that end after its start or recur past it (not cancelled), as stored."""
        with self.connection() as conn:
            rows = conn.execute(_EVENTS, {"u": user_id, "start": start, "end": end}, prepare=True).fetchall()
        return [ElementRow(path=r[0], version=r[1], value=redacted(r[2])) for r in rows]

    def active_goals(
        self, user_id: uuid.UUID, *, target_before: datetime | None = None, limit: int = MAX_ELEMENTS
    ) -> list[ElementRow]:
        """Active goals, nearest target date first (those without one last); only those whose
        target is before `target_before` when given."""
        with self.connection() as conn:
            rows = conn.execute(_GOALS_ACTIVE, (user_id, target_before, target_before, limit), prepare=True).fetchall()
        return [ElementRow(path=r[0], version=r[1], value=redacted(r[2])) for r in rows]

    # -- ratings -------------------------------------------------------------------------------------

    def record_rating(self, user_id: uuid.UUID, rating: Rating) -> str:
        """'created', 'updated' (summarized again) or 'unchanged'."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT user_memory_record_rating(%s, %s, %s, %s, %s, %s)",
                (user_id, rating.interaction_id, rating.rating, list(rating.tags), rating.comment, rating.rated_at),
            ).fetchone()
        return str(row[0]) if row else "unchanged"

    def unsummarized_ratings(self, user_id: uuid.UUID, *, limit: int = 1000) -> list[Rating]:
        with self.connection() as conn:
            rows = conn.execute(
                """SELECT id, interaction_id, rating, tags, comment, rated_at FROM feedback_ratings
                    WHERE user_id = %s AND summarized_version IS NULL ORDER BY id LIMIT %s""",
                (user_id, limit),
            ).fetchall()
        return [
            Rating(id=r[0], interaction_id=r[1], rating=r[2], tags=tuple(r[3]), comment=r[4], rated_at=r[5])
            for r in rows
        ]

    def mark_ratings(self, user_id: uuid.UUID, ids: Sequence[int], version: int) -> int:
        with self.connection() as conn:
            cur = conn.execute(
                """UPDATE feedback_ratings SET summarized_version = %s
                    WHERE user_id = %s AND id = ANY(%s) AND summarized_version IS NULL""",
                (version, user_id, list(ids)),
            )
        return cur.rowcount

    def feedback_versions_of(self, user_id: uuid.UUID, rating_ids: Sequence[int]) -> dict[int, int]:
        """The feedback version (source daily:feedback) whose provenance names each of these
        ratings, for those one does: {rating id: version}."""
        if not rating_ids:
            return {}
        with self.connection() as conn:
            rows = conn.execute(
                """SELECT r.id::bigint, max(s.version) FROM user_memory_snapshots s
                     CROSS JOIN LATERAL jsonb_array_elements_text(s.provenance -> 'rating_ids') AS r(id)
                     JOIN feedback_ratings f ON f.user_id = s.user_id AND f.id = r.id::bigint
                    WHERE s.user_id = %s AND s.source_description = 'daily:feedback'
                      AND jsonb_typeof(s.provenance -> 'rating_ids') = 'array'
                      AND r.id::bigint = ANY(%s)
                      AND f.recorded_at <= s.created_at  -- a rating changed since is summarized again
                    GROUP BY r.id""",
                (user_id, list(rating_ids)),
            ).fetchall()
        return {int(r[0]): int(r[1]) for r in rows}

    def rating_totals(self, user_id: uuid.UUID) -> tuple[int, float | None]:
        """How many ratings the user has and their average (each interaction once, as last rated)."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT count(*), avg(rating)::float FROM feedback_ratings WHERE user_id = %s", (user_id,)
            ).fetchone()
        return (int(row[0]), float(row[1]) if row[1] is not None else None) if row else (0, None)

    def ratings(self, user_id: uuid.UUID) -> list[dict[str, Any]]:
        """Every rating of the user (an export)."""
        with self.connection() as conn:
            rows = conn.execute(
                """SELECT interaction_id, rating, tags, comment, rated_at, recorded_at, summarized_version
                     FROM feedback_ratings WHERE user_id = %s ORDER BY id""",
                (user_id,),
            ).fetchall()
        keys = ("interaction_id", "rating", "tags", "comment", "rated_at", "recorded_at", "summarized_version")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # -- digests -------------------------------------------------------------------------------------

    def save_digest(self, user_id: uuid.UUID, day: date, digest: dict[str, Any], version: int) -> None:
        with self.connection() as conn:
            conn.execute(
                """INSERT INTO daily_digests (user_id, day, digest, version) VALUES (%s, %s, %s, %s)
                   ON CONFLICT (user_id, day) DO UPDATE
                      SET digest = EXCLUDED.digest, version = EXCLUDED.version, created_at = now()""",
                (user_id, day, Jsonb(digest), version),
            )

    def digest(self, user_id: uuid.UUID, day: date | None = None) -> dict[str, Any] | None:
        """The digest of `day`, or the latest one."""
        with self.connection() as conn:
            if day is None:
                row = conn.execute(
                    "SELECT digest FROM daily_digests WHERE user_id = %s ORDER BY day DESC LIMIT 1", (user_id,)
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT digest FROM daily_digests WHERE user_id = %s AND day = %s", (user_id, day)
                ).fetchone()
        return row[0] if row else None

    def digests(self, user_id: uuid.UUID) -> list[dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT digest FROM daily_digests WHERE user_id = %s ORDER BY day", (user_id,)
            ).fetchall()
        return [r[0] for r in rows]

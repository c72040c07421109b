"""Activity: record it idempotently, find who was active in a window, read a user's window."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


@dataclass(frozen=True)
class Activity:
    """One thing that happened to a user."""

    user_id: uuid.UUID
    occurred_at: datetime
    kind: str
    payload: dict[str, Any]
    source: str
    external_id: str


_INSERT = """
INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (source, external_id) DO NOTHING
"""

# Keyset page of distinct users with activity in [start, end): walks the (user_id, occurred_at)
# index in user order; never OFFSET.
_ACTIVE_PAGE = """
SELECT DISTINCT user_id FROM user_activity
 WHERE user_id > %(after)s AND occurred_at >= %(start)s AND occurred_at < %(end)s
 ORDER BY user_id
 LIMIT %(limit)s
"""

_WINDOW = """
SELECT user_id, occurred_at, kind, payload, source, external_id FROM user_activity
 WHERE user_id = %s AND occurred_at >= %s AND occurred_at < %s
 ORDER BY occurred_at, id
 LIMIT %s
"""

_NIL = uuid.UUID(int=0)


def record_activity(conn: psycopg.Connection, activities: Iterable[Activity]) -> int:
    """Insert activities in one transaction; duplicates of (source, external_id) are ignored.

    Returns how many rows were new.
    """
    rows = [(a.user_id, a.occurred_at, a.kind, Jsonb(a.payload), a.source, a.external_id) for a in activities]
    if not rows:
        return 0
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(_INSERT, rows, returning=False)
        return max(cur.rowcount, 0)


def active_user_pages(
    conn: psycopg.Connection, start: datetime, end: datetime, *, page_size: int = 1000
) -> Iterator[list[uuid.UUID]]:
    """Yield pages of user ids active in [start, end), in id order (keyset pagination)."""
    after = _NIL
    while True:
        rows = conn.execute(
            _ACTIVE_PAGE, {"after": after, "start": start, "end": end, "limit": page_size}, prepare=True
        ).fetchall()
        if not rows:
            return
        page = [r[0] for r in rows]
        yield page
        if len(page) < page_size:
            return
        after = page[-1]


def window_activity(
    conn: psycopg.Connection, user_id: uuid.UUID, start: datetime, end: datetime, *, limit: int = 500
) -> list[Activity]:
    """A user's activity in [start, end), oldest first, at most `limit` rows."""
    rows = conn.execute(_WINDOW, (user_id, start, end, limit), prepare=True).fetchall()
    return [Activity(*row) for row in rows]

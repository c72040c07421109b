"""Activity on real PostgreSQL: idempotent ingestion, keyset paging of active users, window reads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from user_memory.activity import Activity, active_user_pages, record_activity, window_activity

pytestmark = pytest.mark.integration
DAY = datetime(2031, 5, 4, tzinfo=UTC)  # a day no other test writes to


def test_ingestion_is_idempotent_on_source_and_external_id(conn):
    u = uuid.uuid4()
    source = f"src-{uuid.uuid4()}"
    acts = [Activity(u, DAY + timedelta(hours=i), "session", {"n": i}, source, f"e{i}") for i in range(3)]
    assert record_activity(conn, acts) == 3
    assert record_activity(conn, acts + [Activity(u, DAY, "session", {}, source, "e9")]) == 1
    assert len(window_activity(conn, u, DAY, DAY + timedelta(days=1))) == 4


def test_window_activity_is_in_time_order_and_bounded(conn):
    u = uuid.uuid4()
    times = [DAY + timedelta(hours=h) for h in (5, 1, 23, 3)]
    record_activity(conn, [Activity(u, t, "message", {}, "order", f"{u}:{i}") for i, t in enumerate(times)])
    record_activity(conn, [Activity(u, DAY + timedelta(days=1), "message", {}, "order", f"{u}:next")])
    got = window_activity(conn, u, DAY, DAY + timedelta(days=1))
    assert [a.occurred_at for a in got] == sorted(times)
    assert len(window_activity(conn, u, DAY, DAY + timedelta(days=1), limit=2)) == 2


def test_active_users_page_by_keyset_without_gaps_or_repeats(conn):
    start = DAY + timedelta(days=30)
    active = sorted(uuid.uuid4() for _ in range(23))
    inactive = [uuid.uuid4() for _ in range(5)]
    rows = [
        Activity(u, start + timedelta(minutes=i), "session", {}, "keyset", f"{u}:{i}") for u in active for i in range(2)
    ]
    rows += [Activity(u, start - timedelta(hours=1), "session", {}, "keyset", f"{u}:before") for u in inactive]
    record_activity(conn, rows)
    pages = list(active_user_pages(conn, start, start + timedelta(days=1), page_size=5))
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [u for p in pages for u in p] == active


def test_active_users_query_uses_an_index(conn):
    plan = conn.execute(
        """EXPLAIN SELECT DISTINCT user_id FROM user_activity
            WHERE user_id > '00000000-0000-0000-0000-000000000000' AND occurred_at >= now() - interval '1 day'
              AND occurred_at < now() ORDER BY user_id LIMIT 1000"""
    ).fetchall()
    text = "\n".join(r[0] for r in plan)
    conn.execute("SET enable_seqscan = off")
    forced = "\n".join(
        r[0]
        for r in conn.execute(
            """EXPLAIN SELECT user_id, occurred_at FROM user_activity
            WHERE user_id = '00000000-0000-0000-0000-000000000001' AND occurred_at >= now() - interval '1 day'
            ORDER BY occurred_at"""
        ).fetchall()
    )
    conn.execute("RESET enable_seqscan")
    assert "idx_user_activity" in forced
    assert "Limit" in text

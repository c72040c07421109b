"""The activity queries on PostgreSQL are served by indexes, not by scanning all history."""

from __future__ import annotations

import pytest
from user_memory.adapters import postgres

pytestmark = pytest.mark.integration


def plan(conn, query: str, params: dict | tuple) -> str:
    """The plan over a table shaped like production's: most history summarized, a day unsummarized.

    The session's database holds whatever earlier tests left, often mostly unsummarized rows
    (there the partial index is rightly not chosen), so the shape is made here, in a transaction
    that is rolled back: 20,000 summarized rows, fresh statistics, then EXPLAIN.
    """
    with conn.transaction(force_rollback=True):
        conn.execute(
            """INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id, summarized_version)
               SELECT gen_random_uuid(), now() - make_interval(days => g % 365), 'session', 'plan-shape', g::text, 1
                 FROM generate_series(1, 20000) g"""
        )
        conn.execute("ANALYZE user_activity")
        conn.execute("SET LOCAL enable_seqscan = off")  # a small test table would otherwise always be scanned
        rows = conn.execute("EXPLAIN " + query, params).fetchall()
    return "\n".join(r[0] for r in rows)


# The window's end as a run sees it: after (nearly) every stored row, so the time condition
# selects nothing away and only the partial index of unsummarized rows narrows the scan. (An end
# before most of the test database's rows would rightly be served by the occurred_at index.)
END = "2100-01-01T00:00:00Z"


def test_users_to_summarize_are_paged_from_the_partial_index_of_unsummarized_rows(conn):
    text = plan(
        conn,
        postgres._ACTIVE_PAGE,
        {"after": "00000000-0000-0000-0000-000000000000", "end": END, "limit": 1000},
    )
    assert "idx_user_activity_unsummarized" in text and "Limit" in text


def test_a_users_unsummarized_activity_is_read_from_the_same_index(conn):
    text = plan(conn, postgres._UNSUMMARIZED, ("00000000-0000-0000-0000-000000000001", END, 0, 500))
    assert "idx_user_activity_unsummarized" in text

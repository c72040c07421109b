"""The worker benchmark's floor (bench/bench_worker.py) does the store's database work since
migration 022: its append sends no item rows, and the search index catches up in the adapter's
statement after it, as the worker's store does; so worker and floor compare like with like."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any
from unittest.mock import patch

import pytest
from user_memory.adapters.postgres import _APPEND, _CATCH_UP, open_pool
from user_memory.domain.summary.rules import RuleBasedSummarizer

from tests.conftest import ROOT
from tests.e2e.helpers import new_database

pytestmark = pytest.mark.e2e


class Recording:
    """The floor's connection, recording each statement it sends with its parameters."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sent: list[tuple[str, Any]] = []

    def execute(self, query: str, params: Any = None, **kwargs: Any) -> Any:
        self.sent.append((query, params))
        return self.conn.execute(query, params, **kwargs)


def test_the_worker_benchmarks_floor_appends_without_items_and_catches_the_index_up_after(database_url):
    # Given the benchmark's 10 KB users (version 1 seeded, a day of activity after it)
    with patch.dict(os.environ), patch.object(sys, "path", [str(ROOT / "bench"), *sys.path]):
        import bench_worker  # sets Powertools' variables for itself: kept inside this block
    with new_database(database_url, f"user_memory_bench_floor_{uuid.uuid4().hex[:8]}", migrated=True) as dsn:
        pool = open_pool(dsn)
        try:
            users, events = bench_worker.users_and_events(
                pool, dsn, "10kb", 3, 5, bench_worker.LARGE_DAY, head_by="summary"
            )
        finally:
            pool.close()
        floor = bench_worker.Floor(dsn, RuleBasedSummarizer(), 200)
        recording = Recording(floor.conn)
        floor.conn = recording  # type: ignore[assignment]

        # When the floor runs the users' event
        try:
            floor.run_event(events[0])
            heads = recording.conn.execute(
                "SELECT user_id, version, indexed_version FROM user_memory_heads WHERE user_id = ANY (%s)", (users,)
            ).fetchall()
        finally:
            recording.conn.close()

    # Then each user's append sent no item rows, and the adapter's catch-up followed it
    appends = [params for query, params in recording.sent if query == _APPEND]
    assert len(appends) == len(users)
    assert [params[-1] for params in appends] == [None] * len(users)
    caught_up = [params[0] for query, params in recording.sent if query == _CATCH_UP]
    assert sorted(caught_up) == sorted(users)
    # And every head is version 2 with its index at it
    assert sorted((version, indexed) for _, version, indexed in heads) == [(2, 2)] * len(users)

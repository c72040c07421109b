"""The watchdog that ends a migrate run by its deadline (adapters/watchdog.py), on a real connection."""

from __future__ import annotations

import threading

import psycopg
import pytest
from user_memory.adapters.watchdog import Watchdog

pytestmark = pytest.mark.integration


def test_from_its_deadline_every_statement_of_the_run_is_cancelled_then_none_after_it(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Given a run watched by a watchdog whose deadline is near
        with Watchdog(0.2) as watchdog:
            watchdog.watch(conn)
            # When the run goes on past it, statement after statement
            for _ in range(3):
                # Then each is cancelled, the ones started after the first cancel too
                with pytest.raises(psycopg.errors.QueryCanceled):
                    conn.execute("SELECT pg_sleep(10)")
            assert watchdog.expired
        # And once the run has ended, the connection's statements run again
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_last_word_is_said_once_only_when_the_run_outlives_the_grace_period():
    said: list[str] = []
    # Given a run that ends before its deadline
    with Watchdog(5.0, grace=0.1, last_word=lambda: said.append("late")) as on_time:
        pass
    # Then nothing is said
    assert said == [] and not on_time.expired
    # Given a run stuck past its deadline and the grace period
    stuck = threading.Event()
    with Watchdog(0.1, grace=0.1, last_word=lambda: (said.append("late"), stuck.set())) as late:
        assert stuck.wait(10)
    # Then the last word was said, once
    assert said == ["late"] and late.expired


def test_a_deadline_moved_before_it_passes_is_the_one_kept():
    # Given a watchdog whose first deadline is near, moved later once the run knows its margin
    with Watchdog(0.2) as watchdog:
        watchdog.reset(30.0, grace=0.0)
        # Then the first deadline passes without expiring it
        assert not threading.Event().wait(0.5)
        assert not watchdog.expired

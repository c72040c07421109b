"""HeldConnections: the worker's statements for one user share one checked-out connection."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import HeldConnections, PostgresActivity, open_pool
from user_memory.errors import StorageUnavailable


class Counted:
    """A pool that counts its checkouts."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.checkouts = 0

    def connection(self):  # type: ignore[no-untyped-def]
        self.checkouts += 1
        return self.pool.connection()


@pytest.fixture
def small_pool(database_url: str) -> Iterator[ConnectionPool]:
    pool = open_pool(database_url, size=2)
    yield pool
    pool.close()


def backend(source: HeldConnections) -> int:
    with source.connection() as conn:
        return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]


def test_outside_a_hold_every_statement_takes_a_checkout_of_its_own(small_pool):
    # Given connections from a counted pool
    counted = Counted(small_pool)
    source = HeldConnections(counted)
    # When three statements run outside a hold
    for _ in range(3):
        backend(source)
    # Then each took a checkout
    assert counted.checkouts == 3


def test_inside_a_hold_every_statement_and_a_nested_hold_share_one_checkout(small_pool):
    # Given connections from a counted pool
    counted = Counted(small_pool)
    source = HeldConnections(counted)
    # When statements run inside a hold, some in a nested one
    with source.hold():
        pids = {backend(source)}
        with source.hold():
            pids.add(backend(source))
        pids.add(backend(source))
    # Then they ran on one connection, checked out once
    assert len(pids) == 1 and counted.checkouts == 1


def test_a_hold_is_this_threads_own(small_pool):
    # Given a hold on this thread
    source = HeldConnections(small_pool)
    seen: list[int] = []
    with source.hold():
        mine = backend(source)
        # When another thread runs a statement meanwhile
        other = threading.Thread(target=lambda: seen.append(backend(source)))
        other.start()
        other.join(timeout=10)
    # Then it ran on a connection of its own
    assert seen and seen[0] != mine


def test_a_connection_that_breaks_during_a_hold_is_replaced_for_the_next_one(database_url):
    # Given a pool of one connection, as in Lambda, and a user's run whose held connection is
    # killed between two of its statements
    pool = open_pool(database_url, size=1)
    source = HeldConnections(pool)
    activity = PostgresActivity(source)
    try:
        with pytest.raises(StorageUnavailable), source.hold():
            victim = backend(source)
            with psycopg.connect(database_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
            activity.unsummarized(uuid.uuid4(), before=datetime.now(UTC), limit=1)
        # When the next run holds a connection
        with source.hold():
            after = backend(source)
    finally:
        pool.close()
    # Then the run's statement failed as a storage error, and the pool gave the next run a new connection
    assert after != victim


def test_a_hold_on_a_closed_pool_is_a_storage_error(database_url):
    # Given a pool that was closed (the database went away)
    pool = open_pool(database_url, size=1)
    pool.close()
    # When a hold is taken, Then it fails as the adapters' statements do
    with pytest.raises(StorageUnavailable), HeldConnections(pool).hold():
        pass

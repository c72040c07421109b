"""Shared fixtures: one real PostgreSQL per test session (embedded by default, or DATABASE_URL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool
from user_memory.adapters.migrations import migrate
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.domain.memory.repository import MemoryStore

from tests import owners

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "tests" / "events"


@pytest.fixture(scope="session")
def owner_mode() -> str:
    """Who owns the test database: superuser, rds or supabase (tests/owners.py); `url` when
    DATABASE_URL names a database of its own."""
    return "url" if os.environ.get("DATABASE_URL") else owners.mode()


@pytest.fixture(scope="session")
def cluster_admin_url(owner_mode: str) -> Iterator[str | None]:
    """The embedded cluster's superuser (a cluster per owner mode), or None with DATABASE_URL."""
    if owner_mode == "url":
        yield None
        return
    from user_memory_local.embedded import start_embedded

    folder = "test" if owner_mode == "superuser" else f"test-{owner_mode}"
    server, _ = start_embedded(ROOT / ".pgdata" / folder, database="postgres")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture(scope="session")
def database_url(owner_mode: str, cluster_admin_url: str | None) -> Iterator[str]:
    """A migrated, empty database for this session, owned as the mode says; dropped afterwards
    when embedded."""
    if cluster_admin_url is None:
        url = os.environ["DATABASE_URL"]
        migrate(url)
        yield url
        return
    name = f"user_memory_test_{os.getpid()}"
    url = owners.create_database(cluster_admin_url, name, owner_mode)
    migrate(url)
    owners.after_migrations(url, owner_mode)
    yield url
    with psycopg.connect(cluster_admin_url, autocommit=True) as conn:
        owners.drop_database(conn, name)


@pytest.fixture(scope="session")
def pool(database_url: str) -> Iterator[ConnectionPool]:
    """A small pool of autocommit connections for the whole session."""
    p = open_pool(database_url, size=4)
    yield p
    p.close()


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as c:
        yield c


@pytest.fixture
def store(pool: ConnectionPool) -> MemoryStore:
    return MemoryStore(PostgresRecorder(pool))


@pytest.fixture
def user_id() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def fresh_db(database_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database next to the session's one (one per test module), owned like it; dropped after."""
    name = f"user_memory_{request.module.__name__.rsplit('.', 1)[-1]}"[:63]
    admin = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        owners.drop_database(c, name)
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(database_url, dbname=name)
    with psycopg.connect(admin, autocommit=True) as c:
        owners.drop_database(c, name)

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
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool
from user_memory.domain.repository import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "tests" / "events"


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A migrated, empty database for this session; dropped afterwards when embedded."""
    url = os.environ.get("DATABASE_URL")
    if url:
        migrate(url)
        yield url
        return
    from user_memory_local.embedded import start_embedded

    server, _ = start_embedded(ROOT / ".pgdata" / "test", database="postgres")
    name = f"user_memory_test_{os.getpid()}"
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = server.get_uri(name)
    migrate(url)
    yield url
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    server.cleanup()


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
def pg_activity(pool: ConnectionPool) -> PostgresActivity:
    return PostgresActivity(pool)


@pytest.fixture
def user_id() -> str:
    return str(uuid.uuid4())

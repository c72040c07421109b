"""Fixtures the integration tier shares."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql


@pytest.fixture
def fresh_db(database_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database next to the session's one (one per test module), owned like it; dropped after."""
    name = f"user_memory_{request.module.__name__.rsplit('.', 1)[-1]}"[:63]
    admin = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(database_url, dbname=name)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

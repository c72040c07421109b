"""What the integration tests share besides fixtures: acting as a database role inside a test's
transaction, fresh user ids, the JWT claims that name no end user, and waiting until a backend
waits on a lock."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

# Claims that name no end user: none, empty, without a sub, a sub that is not a UUID, not JSON.
UNUSABLE_CLAIMS = [
    pytest.param(None, id="no-claims"),
    pytest.param("", id="empty-claims"),
    pytest.param('{"role": "authenticated"}', id="claims-without-sub"),
    pytest.param('{"sub": "not-a-uuid"}', id="sub-not-a-uuid"),
    pytest.param("not json", id="claims-not-json"),
]


def new_user() -> str:
    """A fresh user id, as text."""
    return str(uuid.uuid4())


def as_role(
    conn: psycopg.Connection,
    role: str,
    sub: str | uuid.UUID | None = None,
    claims: str | None = None,
    *,
    legacy: bool = False,
) -> None:
    """Become `role` for this transaction only, with JWT claims set transaction-locally (`sub`:
    {"sub": sub, "role": role}, or the legacy request.jwt.claim.sub setting with `legacy`; else
    `claims` as given)."""
    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
    if sub is not None and legacy:
        conn.execute("SELECT set_config('request.jwt.claim.sub', %s, true)", (str(sub),))
        return
    if sub is not None:
        claims = json.dumps({"sub": str(sub), "role": role})
    if claims is not None:
        conn.execute("SELECT set_config('request.jwt.claims', %s, true)", (claims,))


def waits_on_a_lock(conn: psycopg.Connection, pid: Callable[[], int], seconds: float = 10.0) -> bool:
    """Whether the backend `pid()` names (asked again each time: another thread sets it) comes to
    wait on a lock within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", (pid(),)
        ).fetchone()
        if row and row[0]:
            return True
        time.sleep(0.02)
    return False

"""What the integration tests share besides fixtures: acting as a database role inside a test's
transaction, fresh user ids, the JWT claims that name no end user, waiting until a backend
waits on a lock, and a user's search-index rows beside what the service's items give."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from user_memory.domain.companion.items import document_items

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


# -- the search index (memory_items) -------------------------------------------------------------

COLUMNS = "path, version, kind, text, value, status, due_at, starts_at, ends_at, recurring, recur_until"


def rows(conn: psycopg.Connection, user: uuid.UUID) -> dict[str, dict[str, Any]]:
    """The user's memory_items, read as the owner: path -> its columns."""
    found = conn.execute(f"SELECT {COLUMNS} FROM memory_items WHERE user_id = %s", (user,)).fetchall()
    names = COLUMNS.split(", ")
    return {r[0]: dict(zip(names, r, strict=True)) for r in found}


def expected_rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the service's items computation gives for `document`, in the same shape (no version)."""
    return {
        path: {
            "path": path,
            "kind": item.kind,
            "text": item.text,
            "value": item.value,
            "status": item.status,
            "due_at": item.due_at,
            "starts_at": item.starts_at,
            "ends_at": item.ends_at,
            "recurring": item.recurring,
            "recur_until": item.recur_until,
        }
        for path, item in document_items(document).items()
    }


def without(found: dict[str, dict[str, Any]], *columns: str) -> dict[str, dict[str, Any]]:
    return {path: {k: v for k, v in row.items() if k not in columns} for path, row in found.items()}


def head(conn: psycopg.Connection, user: uuid.UUID) -> tuple[int, int, dict[str, Any]]:
    row = conn.execute(
        "SELECT version, indexed_version, document FROM user_memory_heads WHERE user_id = %s", (user,)
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]

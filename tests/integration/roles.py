"""Acting as a database role inside a test's transaction, and fresh user ids: shared by the
integration tests of row-level security and privileges."""

from __future__ import annotations

import json
import uuid

import psycopg
from psycopg import sql


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

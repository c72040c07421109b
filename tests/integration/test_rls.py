"""Row-level security with real roles: users see only their own memory and write it only through
user_memory_append (migration 006; tests/integration/test_security.py covers the function)."""

from __future__ import annotations

import json
import uuid

import pytest
from psycopg import errors as pgerrors

from tests.integration.roles import as_role
from tests.owners import SERVICE_POLICY

pytestmark = pytest.mark.integration


@pytest.fixture
def two_users(conn):
    """Two users with version 1 each, written as the owner through user_memory_append."""
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    for u, owner in ((a, "a"), (b, "b")):
        row = conn.execute(
            "SELECT status FROM user_memory_append(%s, 0, '[]', true, %s, 't', NULL)", (u, json.dumps({"owner": owner}))
        ).fetchone()
        assert row == ("written",)
    return a, b


@pytest.mark.parametrize("legacy", [False, True])
def test_authenticated_user_reads_only_own_rows(conn, two_users, legacy):
    a, b = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a, legacy=legacy)
        rows = conn.execute("SELECT user_id::text FROM user_memory_snapshots WHERE user_id IN (%s, %s)", (a, b))
        assert {r[0] for r in rows} == {a}
        heads = conn.execute("SELECT user_id::text FROM user_memory_heads WHERE user_id IN (%s, %s)", (a, b))
        assert {r[0] for r in heads} == {a}


def test_authenticated_user_cannot_insert_rows_directly_not_even_its_own(conn, two_users):
    a, b = two_users
    # Direct INSERT is no longer granted: writes go through user_memory_append (migration 006)
    for user in (a, b):
        with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied"), conn.transaction():
            as_role(conn, "authenticated", a)
            conn.execute("INSERT INTO user_memory_snapshots (user_id, version, patch) VALUES (%s, 2, '[]')", (user,))


def test_authenticated_user_cannot_update_or_delete_any_rows(conn, two_users):
    a, b = two_users
    for statement, user in (
        ("UPDATE user_memory_heads SET document = '{}' WHERE user_id = %s", b),
        ("DELETE FROM user_memory_snapshots WHERE user_id = %s", b),
        ("DELETE FROM user_memory_heads WHERE user_id = %s", b),
        ("DELETE FROM user_memory_heads WHERE user_id = %s", a),
    ):
        with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied"), conn.transaction():
            as_role(conn, "authenticated", a)
            conn.execute(statement, (user,))
    assert conn.execute("SELECT document FROM user_memory_heads WHERE user_id = %s", (b,)).fetchone()[0] == {
        "owner": "b"
    }


def test_anon_sees_nothing(conn, two_users):
    # anon has no privilege on the tables at all (migration 006): reads are refused, not filtered
    for table in ("user_memory_snapshots", "user_memory_heads"):
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "anon")
            conn.execute(f"SELECT count(*) FROM {table}")  # table names are constants of this test


def test_service_role_sees_all(conn, two_users):
    a, b = two_users
    with conn.transaction():
        as_role(conn, "service_role")
        rows = conn.execute("SELECT user_id::text FROM user_memory_heads WHERE user_id IN (%s, %s)", (a, b))
        assert {r[0] for r in rows} == {a, b}


def test_claims_do_not_outlive_the_transaction(conn, two_users):
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a)
        assert conn.execute("SELECT auth.uid()::text").fetchone()[0] == a
    assert conn.execute("SELECT auth.uid()").fetchone()[0] is None
    assert conn.execute("SELECT current_user").fetchone()[0] != "authenticated"


def test_rls_is_enabled_on_every_table(conn):
    rows = conn.execute(
        """SELECT relname, relrowsecurity FROM pg_class
            WHERE relname IN ('user_memory_snapshots', 'user_memory_heads', 'user_activity', 'users')
              AND relnamespace = 'public'::regnamespace"""
    ).fetchall()
    assert dict(rows) == {
        "user_memory_snapshots": True,
        "user_memory_heads": True,
        "user_activity": True,
        "users": True,
    }
    # History: SELECT and INSERT policies only: UPDATE and DELETE have none, so RLS refuses them
    # (migration 006). Key-value entries are the user's own to change: all four (migration 008).
    # Export jobs (027) and import jobs (029) are the user's own to read only.
    policies = conn.execute(
        "SELECT tablename, count(*) FROM pg_policies WHERE tablename LIKE 'user_memory_%%'"
        f" AND policyname <> '{SERVICE_POLICY}' GROUP BY 1"
    ).fetchall()
    assert dict(policies) == {
        "user_memory_snapshots": 2,
        "user_memory_heads": 2,
        "user_memory_kv": 4,
        "user_memory_exports": 1,
        "user_memory_imports": 1,
    }

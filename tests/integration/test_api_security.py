"""What the HTTP API's end users may do in the database (migration 009), with real roles and claims.

Rows are written first as the table owner (the fixture connection), then read and written as
anon, authenticated and service_role with SET LOCAL ROLE and transaction-local claims, the way
PostgREST does it (and the way `user_memory.adapters.postgres.transaction` does it for the API).
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import errors as pgerrors

from tests.integration.roles import UNUSABLE_CLAIMS, as_role, new_user
from tests.owners import SERVICE_POLICY

pytestmark = pytest.mark.integration

ACTIVITY_COLUMNS = ["user_id", "occurred_at", "kind", "payload", "source", "external_id"]
INSERT_ACTIVITY = """INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
                     VALUES (%s, now(), 'message', '{"text": "hi"}', 'app', %s)"""
ERASE_ME = "SELECT relation, deleted FROM user_memory_erase_me()"
NO_ACTIVITY_PRIVILEGE = "permission denied for table user_activity"
NO_ERASE_ME_PRIVILEGE = "permission denied for function user_memory_erase_me"
NO_END_USER = "no end user in the request's claims"


def counts_of(conn: psycopg.Connection, user: str) -> dict[str, int]:
    """Rows of the user per relation, counted as the owner (no row-level security)."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM user_memory_heads WHERE user_id = %(u)s),
                  (SELECT count(*) FROM user_memory_snapshots WHERE user_id = %(u)s),
                  (SELECT count(*) FROM user_activity WHERE user_id = %(u)s),
                  (SELECT count(*) FROM user_memory_kv WHERE user_id = %(u)s),
                  (SELECT count(*) FROM conversation_memories WHERE user_id = %(u)s),
                  (SELECT count(*) FROM conversation_messages WHERE user_id = %(u)s),
                  (SELECT count(*) FROM conversations WHERE user_id = %(u)s),
                  (SELECT count(*) FROM memory_items WHERE user_id = %(u)s),
                  (SELECT count(*) FROM memory_embeddings WHERE user_id = %(u)s),
                  (SELECT count(*) FROM feedback_ratings WHERE user_id = %(u)s),
                  (SELECT count(*) FROM daily_digests WHERE user_id = %(u)s)""",
        {"u": user},
    ).fetchone()
    assert row is not None
    relations = ("user_memory_heads", "user_memory_snapshots", "user_activity", "user_memory_kv")
    relations += ("conversation_memories", "conversation_messages", "conversations")
    relations += ("memory_items", "memory_embeddings", "feedback_ratings", "daily_digests")
    return dict(zip(relations, row, strict=True))


@pytest.fixture
def two_users(conn):
    """Two users, each with two versions, three activity rows and two key-value entries (as the owner)."""
    a, b = new_user(), new_user()
    for u in (a, b):
        for v in (1, 2):
            row = conn.execute(
                "SELECT status FROM user_memory_append(%s, %s, '[]', true, %s, 'api: test', NULL)",
                (u, v - 1, json.dumps({"owner": u, "v": v})),
            ).fetchone()
            assert row == ("written",)
        for i in range(3):
            conn.execute(
                "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id) "
                "VALUES (%s, now(), 'session', 'seed', %s)",
                (u, f"seed-{i}"),
            )
        for key in ("k1", "k2"):
            conn.execute("INSERT INTO user_memory_kv (user_id, key, value) VALUES (%s, %s, '1')", (u, key))
    return a, b


# -- activity: an end user records its own ---------------------------------------------------------


def test_authenticated_inserts_its_own_activity_and_the_database_fills_the_rest(conn, two_users):
    a, _ = two_users
    external = f"msg-{uuid.uuid4()}"
    with conn.transaction():
        # Given user a's claims
        as_role(conn, "authenticated", a)
        # When a inserts an activity row of its own, the way PostgresActivity does (twice)
        inserted = conn.execute(INSERT_ACTIVITY, (a, external)).rowcount
        again = conn.execute(
            INSERT_ACTIVITY + " ON CONFLICT (user_id, source, external_id) DO NOTHING", (a, external)
        ).rowcount
        # And a reads it back through its SELECT policy
        seen = conn.execute("SELECT kind FROM user_activity WHERE external_id = %s", (external,)).fetchall()
    # Then one row is stored, unsummarized, with an id and a recorded_at of the database's own
    assert (inserted, again, seen) == (1, 0, [("message",)])
    row = conn.execute(
        "SELECT user_id::text, payload, summarized_version, id > 0, recorded_at IS NOT NULL "
        "FROM user_activity WHERE external_id = %s",
        (external,),
    ).fetchone()
    assert row == (a, {"text": "hi"}, None, True, True)


def test_authenticated_cannot_insert_activity_for_another_user(conn, two_users):
    a, b = two_users
    # Given user a's claims, When a inserts an activity row for b, Then row-level security refuses it
    with pytest.raises(pgerrors.InsufficientPrivilege, match="row-level security") as err, conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(INSERT_ACTIVITY, (b, "planted"))
    assert err.value.sqlstate == "42501"
    assert counts_of(conn, b)["user_activity"] == 3


def test_authenticated_cannot_record_a_memory_reset_and_the_service_can(conn, two_users):
    a, _ = two_users
    reset = """INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
               VALUES (%s, now(), 'memory_reset', '{}', 'service', %s)"""
    # Given user a's claims, When a inserts a memory_reset of its own (as the Data API would let it),
    # Then the restrictive policy of migration 016 refuses the row: a reset is the service's alone
    with pytest.raises(pgerrors.InsufficientPrivilege, match="row-level security"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(reset, (a, "planted-reset"))
    assert counts_of(conn, a)["user_activity"] == 3
    # And the service records one
    with conn.transaction():
        as_role(conn, "service_role")
        assert conn.execute(reset, (a, f"reset-{uuid.uuid4()}")).rowcount == 1


@pytest.mark.parametrize(
    ("claims", "error"),
    [
        pytest.param(None, pgerrors.InsufficientPrivilege, id="no-claims"),
        pytest.param('{"role": "authenticated"}', pgerrors.InsufficientPrivilege, id="claims-without-sub"),
        # auth.uid() casts the sub: the policy fails with the cast's error (22P02) instead of 42501
        pytest.param('{"sub": "not-a-uuid"}', pgerrors.InvalidTextRepresentation, id="sub-not-a-uuid"),
    ],
)
def test_authenticated_without_a_usable_sub_cannot_insert_activity(conn, two_users, claims, error):
    a, _ = two_users
    # Given the role without a sub that names a, When it inserts a's activity, Then it is refused
    with pytest.raises(error), conn.transaction():
        as_role(conn, "authenticated", claims=claims)
        conn.execute(INSERT_ACTIVITY, (a, "no-sub"))
    assert counts_of(conn, a)["user_activity"] == 3


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param(
            "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id, summarized_version) "
            "VALUES ({a}, now(), 'message', 'app', 'x', 1)",
            id="summarized_version",
        ),
        pytest.param(
            "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id, summarized_version) "
            "VALUES ({a}, now(), 'message', 'app', 'x', NULL)",
            id="summarized_version-null",
        ),
        pytest.param(
            "INSERT INTO user_activity (id, user_id, occurred_at, kind, source, external_id) "
            "OVERRIDING SYSTEM VALUE VALUES (-1, {a}, now(), 'message', 'app', 'x')",
            id="id",
        ),
        pytest.param(
            "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id, recorded_at) "
            "VALUES ({a}, now(), 'message', 'app', 'x', now() - interval '1 year')",
            id="recorded_at",
        ),
    ],
)
def test_authenticated_cannot_set_the_columns_an_activity_record_does_not_have(conn, two_users, statement):
    a, _ = two_users
    # Given user a's claims, When a sets a column outside the grant on its own row, Then the privilege is missing
    with pytest.raises(pgerrors.InsufficientPrivilege, match=NO_ACTIVITY_PRIVILEGE), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(statement.format(a=f"'{a}'"))
    assert counts_of(conn, a)["user_activity"] == 3


def test_an_identity_id_cannot_be_chosen_without_overriding_and_overriding_needs_the_privilege(conn, two_users):
    a, _ = two_users
    # Given user a's claims, When a names the id without OVERRIDING SYSTEM VALUE
    with pytest.raises(pgerrors.GeneratedAlways), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(
            "INSERT INTO user_activity (id, user_id, occurred_at, kind, source, external_id) "
            "VALUES (-1, %s, now(), 'message', 'app', 'x')",
            (a,),
        )
    # Then the identity column refuses it (GENERATED ALWAYS), before any privilege is checked
    assert conn.execute("SELECT count(*) FROM user_activity WHERE id = -1").fetchone()[0] == 0


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE user_activity SET payload = '{{}}' WHERE user_id = {a}",
        "UPDATE user_activity SET summarized_version = NULL WHERE user_id = {a}",
        "UPDATE user_activity SET user_id = {b} WHERE user_id = {a}",
        "DELETE FROM user_activity WHERE user_id = {a}",
        "DELETE FROM user_activity WHERE user_id = {b}",
        "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id) "
        "VALUES ({a}, now(), 'session', 'seed', 'seed-0') "
        "ON CONFLICT (user_id, source, external_id) DO UPDATE SET kind = 'changed'",
        "TRUNCATE user_activity",
    ],
)
def test_authenticated_cannot_update_or_delete_activity_not_even_its_own(conn, two_users, statement):
    a, b = two_users
    # Given user a's claims, When a changes or removes activity rows, Then the privilege is missing
    with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(statement.format(a=f"'{a}'", b=f"'{b}'"))
    # And every row is as it was
    for u in (a, b):
        rows = conn.execute("SELECT kind, payload FROM user_activity WHERE user_id = %s", (u,)).fetchall()
        assert rows == [("session", {})] * 3


def test_anon_cannot_insert_activity(conn, two_users):
    a, _ = two_users
    # Given anon, even with a's claims, When it inserts a's activity, Then it holds no privilege
    with pytest.raises(pgerrors.InsufficientPrivilege, match=NO_ACTIVITY_PRIVILEGE), conn.transaction():
        as_role(conn, "anon", a)
        conn.execute(INSERT_ACTIVITY, (a, "anon"))
    assert counts_of(conn, a)["user_activity"] == 3


def test_activity_privileges_and_policies_are_exactly_the_end_users_insert(conn):
    # Given user_activity's column privileges for the end users' roles
    rows = conn.execute(
        """SELECT grantee, privilege_type, array_agg(column_name::text ORDER BY column_name)
             FROM information_schema.column_privileges
            WHERE table_schema = 'public' AND table_name = 'user_activity'
              AND grantee IN ('anon', 'authenticated', 'PUBLIC') AND privilege_type <> 'SELECT'
            GROUP BY 1, 2"""
    ).fetchall()
    # Then authenticated may insert the six columns of an activity record, and nothing else is granted
    assert rows == [("authenticated", "INSERT", sorted(ACTIVITY_COLUMNS))]
    tables = conn.execute(
        """SELECT grantee, string_agg(privilege_type, ',' ORDER BY privilege_type)
             FROM information_schema.role_table_grants
            WHERE table_name = 'user_activity' AND grantee IN ('anon', 'authenticated', 'PUBLIC')
            GROUP BY 1"""
    ).fetchall()
    assert tables == [("authenticated", "SELECT")]
    # And the policies: a's own rows to read, a's own unsummarized rows to insert, never a reset
    policies = conn.execute(
        "SELECT cmd, permissive, roles::text[], qual, with_check FROM pg_policies WHERE tablename = 'user_activity'"
        f" AND policyname <> '{SERVICE_POLICY}' ORDER BY cmd, permissive"
    ).fetchall()
    assert policies == [
        ("INSERT", "PERMISSIVE", ["authenticated"], None, "((auth.uid() = user_id) AND (summarized_version IS NULL))"),
        ("INSERT", "RESTRICTIVE", ["authenticated"], None, "(kind <> 'memory_reset'::text)"),
        ("SELECT", "PERMISSIVE", ["public"], "(auth.uid() = user_id)", None),
    ]


# -- user_memory_erase_me: an end user's erasure -----------------------------------------------------


def test_erase_me_erases_the_caller_and_only_the_caller(conn, two_users):
    a, b = two_users
    before_b = counts_of(conn, b)
    # Given user a's claims, When a calls user_memory_erase_me()
    with conn.transaction():
        as_role(conn, "authenticated", a)
        counts = dict(conn.execute(ERASE_ME).fetchall())
    # Then it reports what it deleted of a, per relation
    assert counts == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 2,
        "user_activity": 3,
        "user_memory_kv": 2,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }
    # And nothing of a is left but the identity row
    assert counts_of(conn, a) == dict.fromkeys(counts, 0)
    assert conn.execute("SELECT count(*) FROM users WHERE id = %s", (a,)).fetchone()[0] == 1
    # And b is untouched
    assert (
        counts_of(conn, b)
        == before_b
        == {
            "user_memory_heads": 1,
            "user_memory_snapshots": 2,
            "user_activity": 3,
            "user_memory_kv": 2,
            "conversation_memories": 0,
            "conversation_messages": 0,
            "conversations": 0,
            "memory_items": 0,
            "memory_embeddings": 0,
            "feedback_ratings": 0,
            "daily_digests": 0,
        }
    )
    # And history is append-only again afterwards
    with pytest.raises(pgerrors.InsufficientPrivilege, match="append-only"), conn.transaction(force_rollback=True):
        conn.execute("DELETE FROM user_memory_snapshots WHERE user_id = %s", (b,))
    # And a can start again from version 1
    with conn.transaction():
        as_role(conn, "authenticated", a)
        row = conn.execute("SELECT status, version FROM user_memory_append(%s, 0, '[]', true, '{}', 'api', NULL)", (a,))
        assert row.fetchone() == ("written", 1)


def test_erase_me_of_a_user_with_nothing_reports_zeros(conn):
    with conn.transaction():
        as_role(conn, "authenticated", new_user())
        counts = dict(conn.execute(ERASE_ME).fetchall())
    assert counts == {
        "user_memory_heads": 0,
        "user_memory_snapshots": 0,
        "user_activity": 0,
        "user_memory_kv": 0,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }


def test_erase_me_runs_in_the_callers_transaction(conn, two_users):
    a, _ = two_users
    # Given a's erase in a transaction that is then rolled back
    with conn.transaction(force_rollback=True):
        as_role(conn, "authenticated", a)
        assert dict(conn.execute(ERASE_ME).fetchall())["user_memory_snapshots"] == 2
        # Inside it, a sees nothing of its own any more
        assert conn.execute("SELECT count(*) FROM user_memory_heads").fetchone()[0] == 0
    # Then nothing was erased
    assert counts_of(conn, a) == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 2,
        "user_activity": 3,
        "user_memory_kv": 2,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }


@pytest.mark.parametrize(
    "claims",
    [*UNUSABLE_CLAIMS, pytest.param('{"sub": ""}', id="empty-sub")],
)
def test_erase_me_without_a_usable_sub_is_refused(conn, two_users, claims):
    a, b = two_users
    # Given the role authenticated without a sub that is a UUID
    with pytest.raises(pgerrors.InsufficientPrivilege, match=NO_END_USER) as err, conn.transaction():
        as_role(conn, "authenticated", claims=claims)
        # When it calls user_memory_erase_me()
        conn.execute(ERASE_ME)
    # Then it is refused with 42501 and nobody was erased
    assert err.value.sqlstate == "42501"
    for u in (a, b):
        assert counts_of(conn, u)["user_memory_snapshots"] == 2


@pytest.mark.parametrize("role", ["anon", "service_role"])
def test_anon_and_the_service_cannot_execute_erase_me(conn, two_users, role):
    a, _ = two_users
    # Given anon or service_role, even with a's claims, When it calls user_memory_erase_me()
    with pytest.raises(pgerrors.InsufficientPrivilege, match=NO_ERASE_ME_PRIVILEGE), conn.transaction():
        as_role(conn, role, a)
        conn.execute(ERASE_ME)
    # Then EXECUTE was never granted (anon) or was revoked (service_role: it erases with user_memory_erase)
    assert counts_of(conn, a)["user_memory_snapshots"] == 2
    assert (
        conn.execute("SELECT has_function_privilege(%s, 'user_memory_erase_me()', 'EXECUTE')", (role,)).fetchone()[0]
        is False
    )


def test_erase_me_takes_no_user_and_runs_as_its_owner_with_a_fixed_search_path(conn):
    rows = conn.execute(
        """SELECT pg_get_function_identity_arguments(oid), prosecdef, proconfig,
                  pg_get_function_result(oid)
             FROM pg_proc WHERE proname = 'user_memory_erase_me'"""
    ).fetchall()
    # Then there is one, with no argument a caller could point at another user
    assert rows == [("", True, ["search_path=pg_catalog, public, pg_temp"], "TABLE(relation text, deleted bigint)")]
    granted = {
        role: conn.execute(
            "SELECT has_function_privilege(%s, 'user_memory_erase_me()', 'EXECUTE')", (role,)
        ).fetchone()[0]
        for role in ("public", "anon", "authenticated", "service_role")
    }
    assert granted == {"public": False, "anon": False, "authenticated": True, "service_role": False}

"""Security of key-value memory (migration 008), with real roles and real JWT claims.

Rows are written as the table owner (the fixture connection) or through PostgresKv, then read
and written as anon, authenticated and service_role with SET LOCAL ROLE and transaction-local
claims, the way PostgREST does it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors as pgerrors
from user_memory.adapters import kv as kv_adapter
from user_memory.adapters.kv import PostgresKv, kv_error_for_check
from user_memory.adapters.postgres import open_pool
from user_memory.domain.kv import DEFAULT_NAMESPACE, KvPut
from user_memory.errors import AccessDenied, InvalidKvEntry, KvValueTooLarge

from tests.integration.roles import as_role, new_user
from tests.owners import SERVICE_POLICY

pytestmark = pytest.mark.integration

# The purge deletes across every user: the purges here run in a time of their own, before any
# row the other tests write (the contract tests' clocks start in 1999 at the earliest).
ERA = datetime(1990, 6, 1, 12, 0, tzinfo=UTC)


def put_row(conn: psycopg.Connection, user: str, key: str, value: object = 1, namespace: str = "default") -> None:
    conn.execute(
        "INSERT INTO user_memory_kv (user_id, namespace, key, value) VALUES (%s, %s, %s, %s::jsonb)",
        (user, namespace, key, json.dumps(value)),
    )


def keys_of(conn: psycopg.Connection, user: str) -> list[str]:
    rows = conn.execute("SELECT key FROM user_memory_kv WHERE user_id = %s ORDER BY key", (user,)).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def two_users(conn):
    """Two users with two entries each, written by the owner."""
    a, b = new_user(), new_user()
    for u in (a, b):
        put_row(conn, u, "k1", {"owner": u})
        put_row(conn, u, "k2", {"owner": u}, namespace="other")
    return a, b


# -- end users: their own rows only ----------------------------------------------------------------


def test_authenticated_reads_only_its_own_entries(conn, two_users):
    a, b = two_users
    with conn.transaction():
        # Given user a's claims, When a reads both users' entries
        as_role(conn, "authenticated", a)
        rows = conn.execute(
            "SELECT user_id::text, key FROM user_memory_kv WHERE user_id IN (%s, %s) ORDER BY key", (a, b)
        ).fetchall()
    # Then only a's come back
    assert rows == [(a, "k1"), (a, "k2")]


def test_authenticated_writes_its_own_entries(conn, two_users):
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When a inserts, upserts, updates and deletes its own entries
        put_row(conn, a, "k3", "new")
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, key, value) VALUES (%s, 'k3', '"again"')
               ON CONFLICT (user_id, namespace, key) DO UPDATE SET value = EXCLUDED.value""",
            (a,),
        )
        updated = conn.execute("UPDATE user_memory_kv SET value = '2' WHERE user_id = %s AND key = 'k1'", (a,))
        assert updated.rowcount == 1
        deleted = conn.execute("DELETE FROM user_memory_kv WHERE user_id = %s AND key = 'k2'", (a,))
        assert deleted.rowcount == 1
    # Then the rows are as a left them
    rows = conn.execute("SELECT key, value FROM user_memory_kv WHERE user_id = %s ORDER BY key", (a,)).fetchall()
    assert rows == [("k1", 2), ("k3", "again")]


def test_authenticated_cannot_insert_an_entry_for_another_user(conn, two_users):
    a, b = two_users
    # Given user a's claims, When a inserts an entry for b, Then row-level security refuses it
    with pytest.raises(pgerrors.InsufficientPrivilege, match="row-level security") as err, conn.transaction():
        as_role(conn, "authenticated", a)
        put_row(conn, b, "planted")
    assert err.value.sqlstate == "42501"
    assert keys_of(conn, b) == ["k1", "k2"]


def test_authenticated_updates_and_deletes_of_another_users_entries_affect_nothing(conn, two_users):
    a, b = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When a updates and deletes b's entries, and everything it can name
        assert conn.execute("UPDATE user_memory_kv SET value = '0' WHERE user_id = %s", (b,)).rowcount == 0
        assert conn.execute("DELETE FROM user_memory_kv WHERE user_id = %s", (b,)).rowcount == 0
        assert conn.execute("DELETE FROM user_memory_kv WHERE key = 'k1'").rowcount == 1  # its own only
    # Then b's entries are untouched
    rows = conn.execute("SELECT key, value FROM user_memory_kv WHERE user_id = %s ORDER BY key", (b,)).fetchall()
    assert rows == [("k1", {"owner": b}), ("k2", {"owner": b})]


def test_authenticated_cannot_give_its_entry_to_another_user(conn, two_users):
    a, b = two_users
    with pytest.raises(pgerrors.InsufficientPrivilege, match="row-level security"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute("UPDATE user_memory_kv SET user_id = %s WHERE user_id = %s", (b, a))
    assert keys_of(conn, a) == ["k1", "k2"] and keys_of(conn, b) == ["k1", "k2"]


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(None, id="no-claims"),
        pytest.param('{"role": "authenticated"}', id="claims-without-sub"),
    ],
)
def test_authenticated_without_a_sub_sees_and_writes_nothing(conn, two_users, claims):
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated", claims=claims)
        assert conn.execute("SELECT count(*) FROM user_memory_kv WHERE user_id = %s", (a,)).fetchone()[0] == 0
        assert conn.execute("DELETE FROM user_memory_kv WHERE user_id = %s", (a,)).rowcount == 0
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
        as_role(conn, "authenticated", claims=claims)
        put_row(conn, a, "k9")
    assert keys_of(conn, a) == ["k1", "k2"]


def test_an_end_users_timestamps_are_the_databases(conn, two_users):
    a, _ = two_users
    created = conn.execute("SELECT created_at FROM user_memory_kv WHERE user_id = %s AND key = 'k1'", (a,))
    created_at = created.fetchone()[0]
    far = datetime(2099, 1, 1, tzinfo=UTC)
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When a writes its own timestamps, to keep an entry from the purge or rewrite its age
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, key, value, created_at, updated_at)
               VALUES (%s, 'k-new', '1', %s, %s)""",
            (a, far, far),
        )
        conn.execute(
            "UPDATE user_memory_kv SET created_at = %s, updated_at = %s WHERE user_id = %s AND key = 'k1'",
            (far, far, a),
        )
        now = conn.execute("SELECT now()").fetchone()[0]
    # Then the database stamped them: created now (or kept), updated now
    rows = conn.execute(
        "SELECT key, created_at, updated_at FROM user_memory_kv WHERE user_id = %s AND key IN ('k1', 'k-new')",
        (a,),
    ).fetchall()
    assert {r[0]: (r[1], r[2]) for r in rows} == {"k-new": (now, now), "k1": (created_at, now)}


@pytest.mark.parametrize(
    ("column", "value", "constraint"),
    [
        pytest.param("namespace", "Not-Valid", "user_memory_kv_namespace_check", id="namespace"),
        pytest.param("key", "", "user_memory_kv_key_check", id="key-empty"),
        pytest.param("key", "k" * 257, "user_memory_kv_key_check", id="key-257"),
        pytest.param("key", "a\u0085b", "user_memory_kv_key_check", id="key-control"),
        pytest.param("value", json.dumps("x" * 16_383), "user_memory_kv_value_size_check", id="value-16385"),
        pytest.param("expires_at", "1999-01-01T00:00:00Z", "user_memory_kv_expiry_check", id="expired-before-written"),
        pytest.param("expires_at", "2999-01-01T00:00:00Z", "user_memory_kv_expiry_check", id="expiry-over-365-days"),
    ],
)
def test_the_limits_hold_for_direct_writers_too(conn, column, value, constraint):
    a = new_user()
    # Given an end user writing directly (not through the service)
    with pytest.raises(pgerrors.CheckViolation) as err, conn.transaction():
        as_role(conn, "authenticated", a)
        row = {"namespace": "default", "key": "k", "value": "1", "expires_at": None} | {column: value}
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, namespace, key, value, expires_at)
               VALUES (%s, %s, %s, %s::jsonb, %s)""",
            (a, row["namespace"], row["key"], row["value"], row["expires_at"]),
        )
    # Then the constraint of that limit refuses the row
    assert err.value.diag.constraint_name == constraint
    # And the service's adapter names the field, never the row
    mapped = kv_error_for_check(err.value)
    assert isinstance(mapped, InvalidKvEntry)
    assert mapped.field == {"expires_at": "ttl_seconds"}.get(column, column)
    assert "x" * 20 not in str(mapped) and "Not-Valid" not in str(mapped)


def test_the_value_limit_measures_jsonb_text_and_takes_a_full_service_value(conn):
    # A value at the service's limit whose text grows most in jsonb's form (a space after each ',')
    a = new_user()
    value = "[" + ",".join(["0"] * 5119) + "]"  # 10,239 bytes compact, 15,357 as jsonb text
    put_row(conn, a, "k", json.loads(value))
    size = conn.execute("SELECT octet_length(value::text) FROM user_memory_kv WHERE user_id = %s", (a,)).fetchone()[0]
    assert size == 15_357


def test_the_adapter_reports_a_check_violation_as_invalid_kv_entry(pool, monkeypatch):
    # Given a put that gets past the domain's checks (as if they had a gap)
    def unchecked(user_id, namespace, key, value, ttl_seconds=None):
        return KvPut(user_id=uuid.UUID(str(user_id)), namespace=namespace, key=key, value_json=json.dumps(value))

    monkeypatch.setattr(kv_adapter, "validate_put", unchecked)
    store = PostgresKv(pool)
    user = new_user()
    # When the database's constraints refuse it
    with pytest.raises(InvalidKvEntry) as bad_namespace:
        store.put(user, "Secret Namespace", "k", 1)
    with pytest.raises(KvValueTooLarge) as too_large:
        store.put(user, DEFAULT_NAMESPACE, "k", "secret " * 3000)
    # Then the error names the field, quotes nothing of the row and carries no driver error
    assert bad_namespace.value.field == "namespace" and "Secret" not in str(bad_namespace.value)
    assert too_large.value.field == "value" and too_large.value.size is None
    assert "secret" not in str(too_large.value)
    for err in (bad_namespace.value, too_large.value):
        assert err.__cause__ is None and err.__suppress_context__
    # And nothing was written
    monkeypatch.undo()
    assert store.list(user, DEFAULT_NAMESPACE, limit=10).entries == ()


# -- anon -------------------------------------------------------------------------------------------


def test_anon_has_no_privilege_and_no_access(conn, two_users):
    a, _ = two_users
    # Given the table, Then anon and PUBLIC hold no privilege on it
    granted = conn.execute(
        """SELECT count(*) FROM information_schema.role_table_grants
            WHERE grantee IN ('anon', 'PUBLIC') AND table_name = 'user_memory_kv'"""
    ).fetchone()[0]
    assert granted == 0
    # And every statement as anon is refused outright, not filtered to nothing
    for statement in (
        "SELECT count(*) FROM user_memory_kv",
        "INSERT INTO user_memory_kv (user_id, key, value) VALUES ({a}, 'x', '1')",
        "UPDATE user_memory_kv SET value = '0'",
        "DELETE FROM user_memory_kv",
    ):
        with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied"), conn.transaction():
            as_role(conn, "anon", a)
            conn.execute(statement.format(a=f"'{a}'"))
    assert keys_of(conn, a) == ["k1", "k2"]


def test_each_role_holds_exactly_its_table_privileges(conn):
    rows = conn.execute(
        """SELECT grantee, string_agg(privilege_type, ',' ORDER BY privilege_type)
             FROM information_schema.role_table_grants
            WHERE table_name = 'user_memory_kv' AND grantee IN ('anon', 'authenticated', 'service_role', 'PUBLIC')
            GROUP BY grantee"""
    ).fetchall()
    assert dict(rows) == {"authenticated": "DELETE,INSERT,SELECT,UPDATE", "service_role": "DELETE,INSERT,SELECT,UPDATE"}
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'user_memory_kv'::regclass").fetchone()[0]
    policies = conn.execute(
        "SELECT cmd, qual, with_check FROM pg_policies WHERE tablename = 'user_memory_kv'"
        f" AND policyname <> '{SERVICE_POLICY}'"
    )
    by_command = {cmd: (qual, check) for cmd, qual, check in policies.fetchall()}
    assert set(by_command) == {"SELECT", "INSERT", "UPDATE", "DELETE"}
    own = "(auth.uid() = user_id)"
    assert by_command == {
        "SELECT": (own, None),
        "INSERT": (None, own),
        "UPDATE": (own, own),
        "DELETE": (own, None),
    }


# -- the service ------------------------------------------------------------------------------------


def test_service_role_reads_and_writes_every_users_entries(conn, two_users):
    a, b = two_users
    with conn.transaction():
        as_role(conn, "service_role")
        assert conn.execute("SELECT count(*) FROM user_memory_kv WHERE user_id IN (%s, %s)", (a, b)).fetchone()[0] == 4
        assert conn.execute("UPDATE user_memory_kv SET value = '0' WHERE user_id = %s", (b,)).rowcount == 2
        # Its own timestamps are kept (it passes its clock), unlike an end user's
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, key, value, created_at, updated_at)
               VALUES (%s, 'svc', '1', %s, %s)""",
            (a, ERA, ERA),
        )
    row = conn.execute("SELECT created_at, updated_at FROM user_memory_kv WHERE user_id = %s AND key = 'svc'", (a,))
    assert row.fetchone() == (ERA, ERA)
    conn.execute("DELETE FROM user_memory_kv WHERE user_id = %s AND key = 'svc'", (a,))


# -- the purge function: the service's --------------------------------------------------------------


@pytest.mark.parametrize("role", ["anon", "authenticated"])
def test_only_the_service_can_run_the_purge(conn, two_users, role):
    a, _ = two_users
    with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied for function"), conn.transaction():
        as_role(conn, role, a)
        conn.execute("SELECT user_memory_kv_purge(1, %s)", (ERA,))
    for grantee in ("public", "anon", "authenticated"):
        assert (
            conn.execute(
                "SELECT has_function_privilege(%s, 'user_memory_kv_purge(integer, timestamptz)', 'EXECUTE')",
                (grantee,),
            ).fetchone()[0]
            is False
        ), grantee
    assert conn.execute(
        "SELECT has_function_privilege('service_role', 'user_memory_kv_purge(integer, timestamptz)', 'EXECUTE')"
    ).fetchone()[0]


def test_the_purge_runs_as_its_owner_with_a_fixed_search_path(conn):
    row = conn.execute(
        """SELECT prosecdef, proconfig, pg_get_function_identity_arguments(oid), prorettype::regtype::text
             FROM pg_proc WHERE proname = 'user_memory_kv_purge'"""
    ).fetchall()
    assert row == [
        (
            True,
            ["search_path=pg_catalog, public, pg_temp"],
            "p_max_age_days integer, p_now timestamp with time zone",
            "bigint",
        )
    ]


def test_the_service_purges_expired_and_stale_entries(conn):
    a, b = new_user(), new_user()
    insert = """INSERT INTO user_memory_kv (user_id, key, value, created_at, updated_at, expires_at)
                VALUES (%s, %s, '1', %s, %s, %s)"""
    for user, key, updated, expires in (
        (a, "stale", ERA - timedelta(days=31), None),
        (a, "expired", ERA - timedelta(hours=2), ERA - timedelta(hours=1)),
        (a, "fresh", ERA - timedelta(days=29), None),
        (b, "alive", ERA - timedelta(hours=2), ERA + timedelta(hours=1)),
        (b, "stale", ERA - timedelta(days=40), ERA + timedelta(days=1)),
    ):
        conn.execute(insert, (user, key, updated, updated, expires))
    # When the service runs the retention job at ERA with a 30-day age
    with conn.transaction():
        as_role(conn, "service_role")
        purged = conn.execute("SELECT user_memory_kv_purge(30, %s)", (ERA,)).fetchone()[0]
    # Then the expired and the stale entries are gone, and only those
    assert purged == 3
    assert keys_of(conn, a) == ["fresh"] and keys_of(conn, b) == ["alive"]
    # And a bad age is refused
    with pytest.raises(pgerrors.InvalidParameterValue, match="max age must be 1 to 36500 days"):
        conn.execute("SELECT user_memory_kv_purge(0, %s)", (ERA,))
    conn.execute("DELETE FROM user_memory_kv WHERE user_id IN (%s, %s)", (a, b))


def test_the_purge_is_found_through_its_indexes(conn):
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                """EXPLAIN DELETE FROM user_memory_kv
                    WHERE expires_at <= %s OR updated_at <= %s""",
                (ERA, ERA - timedelta(days=30)),
            )
        )
    assert "idx_user_memory_kv_expires_at" in plan and "idx_user_memory_kv_updated_at" in plan, plan


def test_an_end_user_cannot_reach_the_purge_through_the_adapter_either(database_url, conn, two_users):
    # Given the service's adapter on connections that act as authenticated from the start
    a, _ = two_users
    url = psycopg.conninfo.make_conninfo(database_url, options="-c role=authenticated")
    pool = open_pool(url)
    try:
        # When it runs the purge, Then the database refuses it, reported as AccessDenied
        with pytest.raises(AccessDenied, match="permission denied for function"):
            PostgresKv(pool, now=lambda: ERA).purge(max_age_days=1)
    finally:
        pool.close()
    assert keys_of(conn, a) == ["k1", "k2"]


# -- erase ------------------------------------------------------------------------------------------


def test_erase_removes_the_users_entries_and_reports_them(conn, two_users):
    a, b = two_users
    put_row(conn, a, "k3")
    conn.execute(
        "INSERT INTO user_memory_kv (user_id, key, value, updated_at, expires_at) VALUES (%s, 'gone', '1', %s, %s)",
        (a, ERA, ERA + timedelta(seconds=1)),
    )  # expired long ago, not yet purged: erased too
    # When the service erases user a
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
    # Then it reports a's four entries beside the memory relations, and none are left
    assert counts["user_memory_kv"] == 4
    assert set(counts) == {"user_memory_heads", "user_memory_snapshots", "user_activity", "user_memory_kv"} | {
        "conversation_memories",
        "conversation_messages",
        "conversations",
        "memory_items",
        "memory_embeddings",
        "feedback_ratings",
        "daily_digests",
    }
    assert keys_of(conn, a) == []
    # And b's entries are untouched
    assert keys_of(conn, b) == ["k1", "k2"]


def test_erase_of_a_user_with_only_entries_and_of_nobody(conn):
    a = new_user()
    put_row(conn, a, "only")
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
        nothing = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (new_user(),)).fetchall())
    assert counts == {
        "user_memory_heads": 0,
        "user_memory_snapshots": 0,
        "user_activity": 0,
        "user_memory_kv": 1,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }
    assert nothing == dict.fromkeys(counts, 0)


def test_erase_still_empties_memory_and_activity_and_keeps_its_grants(conn):
    a = new_user()
    conn.execute("SELECT user_memory_append(%s, 0, '[]', true, '{\"n\": 1}', 'api: test', NULL)", (a,))
    conn.execute(
        "INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id) VALUES (%s, now(), 's', 't', %s)",
        (a, str(uuid.uuid4())),
    )
    put_row(conn, a, "k")
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
    assert counts == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 1,
        "user_activity": 1,
        "user_memory_kv": 1,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }
    for role in ("anon", "authenticated"):
        with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied for function"), conn.transaction():
            as_role(conn, role, a)
            conn.execute("SELECT * FROM user_memory_erase(%s)", (a,))
    config = conn.execute("SELECT prosecdef, proconfig FROM pg_proc WHERE proname = 'user_memory_erase'").fetchall()
    assert config == [(True, ["search_path=pg_catalog, public, pg_temp"])]


# -- an end user's time to live (migration 009) -------------------------------------------------------


def test_an_end_users_ttl_is_kept_on_the_databases_clock(conn):
    # Given an end user writing an entry whose expiry is a full year after its own updated_at, a
    # moment after the transaction started (the API's clock runs ahead of the transaction's now())
    user = new_user()
    with conn.transaction():
        as_role(conn, "authenticated", sub=user)
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, namespace, key, value, updated_at, expires_at)
               SELECT %s, 'default', 'year', '1', t, t + interval '31536000 seconds'
                 FROM (SELECT clock_timestamp() + interval '2 seconds' AS t) later""",
            (user,),
        )
        # Then the row is accepted, stamped with the database's now(), and keeps its one-year TTL
        row = conn.execute(
            "SELECT expires_at - updated_at, updated_at = now() FROM user_memory_kv WHERE user_id = %s", (user,)
        ).fetchone()
    assert row[0].total_seconds() == 31_536_000
    assert row[1] is True


def test_an_end_user_cannot_stretch_a_ttl_with_an_old_updated_at(conn):
    # Given an end user claiming its entry was written years ago and expires tomorrow
    user = new_user()
    # Then the time to live it asked for (years) is what the CHECK bounds: refused
    with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
        as_role(conn, "authenticated", sub=user)
        conn.execute(
            """INSERT INTO user_memory_kv (user_id, namespace, key, value, updated_at, expires_at)
               VALUES (%s, 'default', 'old', '1', now() - interval '3 years', now() + interval '1 day')""",
            (user,),
        )

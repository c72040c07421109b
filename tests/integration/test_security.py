"""Security and storage rules of migrations 005-007, with real roles and real JWT claims.

Rows are written first as the table owner (the fixture connection) through
user_memory_append, then read and written as anon, authenticated and service_role with
SET LOCAL ROLE and transaction-local claims, the way PostgREST does it.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.types.json import Jsonb

from tests import owners
from tests.integration.roles import UNUSABLE_CLAIMS, as_role, new_user, waits_on_a_lock
from tests.owners import SERVICE_POLICY

pytestmark = pytest.mark.integration

APPEND = "SELECT status, version FROM user_memory_append(%s, %s, %s, %s, %s, %s, %s, %s::bigint[])"
OWN_FUNCTIONS = """
SELECT p.oid, n.nspname || '.' || p.proname AS name
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname IN ('public', 'auth')
   AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
"""


def append(
    conn: psycopg.Connection,
    user: str,
    expected: int,
    document: Any,
    *,
    patch: Any = None,
    key: str | None = None,
    activity_ids: list[int] | None = None,
    checkpoint: bool = False,
    source: str = "api: test",
) -> tuple[str, int]:
    if patch is None:  # a patch that gives the document, whatever the head (an end user's is applied)
        patch = [{"op": "replace", "path": "", "value": document}]
    row = conn.execute(
        APPEND, (user, expected, Jsonb(patch), checkpoint, Jsonb(document), source, key, activity_ids)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def add_activity(conn: psycopg.Connection, user: str, n: int, source: str = "test") -> list[int]:
    rows = conn.execute(
        """INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id)
           SELECT %s, now() - make_interval(mins => g), 'session', %s, %s || g
             FROM generate_series(1, %s) g
           RETURNING id""",
        (user, source, f"{uuid.uuid4()}:", n),
    ).fetchall()
    return [r[0] for r in rows]


def versions(conn: psycopg.Connection, user: str) -> list[int]:
    rows = conn.execute("SELECT version FROM user_memory_snapshots WHERE user_id = %s ORDER BY version", (user,))
    return [r[0] for r in rows]


@pytest.fixture
def two_users(conn):
    """Two users with one version, one head, two activity rows and a users row each."""
    a, b = new_user(), new_user()
    for u in (a, b):
        assert append(conn, u, 0, {"owner": u}) == ("written", 1)
        add_activity(conn, u, 2)
    return a, b


# -- reads ----------------------------------------------------------------------------------------


def test_authenticated_reads_only_its_own_rows_in_every_table(conn, two_users):
    a, b = two_users
    with conn.transaction():
        # Given user a's claims
        as_role(conn, "authenticated", a)
        # When a reads every table, asking for both users
        for table in ("user_memory_snapshots", "user_memory_heads", "user_activity"):
            got = conn.execute(
                sql.SQL("SELECT DISTINCT user_id::text FROM {} WHERE user_id IN (%s, %s)").format(
                    sql.Identifier(table)
                ),
                (a, b),
            ).fetchall()
            # Then only a's rows come back
            assert {r[0] for r in got} == {a}, table
        users = conn.execute("SELECT id::text FROM users WHERE id IN (%s, %s)", (a, b)).fetchall()
        assert [r[0] for r in users] == [a]


def test_anon_has_no_privilege_on_any_table(conn, two_users):
    # Given the tables
    for table in (
        "user_memory_snapshots",
        "user_memory_heads",
        "user_activity",
        "users",
        "conversations",
        "conversation_messages",
        "conversation_memories",
    ):
        # Then anon holds no privilege on them at all
        granted = conn.execute(
            """SELECT count(*) FROM information_schema.role_table_grants
                WHERE grantee IN ('anon', 'PUBLIC') AND table_name = %s""",
            (table,),
        ).fetchone()[0]
        assert granted == 0, table
        # And a read as anon is refused outright rather than filtered to nothing
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "anon")
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))


# -- direct writes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO user_memory_snapshots (user_id, version, patch) VALUES ({a}, 2, '[]')",
        "UPDATE user_memory_snapshots SET patch = '[]' WHERE user_id = {a}",
        "DELETE FROM user_memory_snapshots WHERE user_id = {a}",
        "INSERT INTO user_memory_heads (user_id, version, document) VALUES ({a}, 9, '{{}}') "
        "ON CONFLICT (user_id) DO UPDATE SET version = 9",
        "UPDATE user_memory_heads SET document = '{{}}' WHERE user_id = {a}",
        "DELETE FROM user_memory_heads WHERE user_id = {a}",
        "UPDATE user_activity SET summarized_version = 1 WHERE user_id = {a}",
        "INSERT INTO users (id) VALUES (gen_random_uuid())",
    ],
)
def test_authenticated_cannot_write_tables_directly_even_its_own_rows(conn, two_users, statement):
    a, _ = two_users
    # Given user a's claims, When a writes its own rows directly, Then the privilege is missing
    with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(statement.format(a=f"'{a}'"))
    # And nothing changed
    assert versions(conn, a) == [1]
    assert conn.execute("SELECT version FROM user_memory_heads WHERE user_id = %s", (a,)).fetchone()[0] == 1


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE user_memory_snapshots SET patch = '[]' WHERE user_id = {a}",
        "DELETE FROM user_memory_snapshots WHERE user_id = {a}",
        "TRUNCATE user_memory_snapshots",
    ],
)
def test_service_role_cannot_change_or_remove_version_rows(conn, two_users, statement):
    a, _ = two_users
    # Given the service's role, When it changes or removes history directly, Then it is refused
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction(force_rollback=True):
        as_role(conn, "service_role")
        conn.execute(statement.format(a=f"'{a}'"))
    assert versions(conn, a) == [1]


def test_service_role_still_appends_version_rows_and_reads_everything(conn, two_users):
    a, b = two_users
    with conn.transaction():
        as_role(conn, "service_role")
        rows = conn.execute("SELECT count(DISTINCT user_id) FROM user_memory_heads WHERE user_id IN (%s, %s)", (a, b))
        assert rows.fetchone()[0] == 2
        assert append(conn, a, 1, {"owner": a, "n": 2}, key="daily:2031-01-01") == ("written", 2)
    assert versions(conn, a) == [1, 2]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE user_memory_snapshots SET source_description = 'edited' WHERE user_id = {a}",
        "DELETE FROM user_memory_snapshots WHERE user_id = {a}",
        "TRUNCATE user_memory_snapshots",
    ],
)
def test_even_the_owner_cannot_change_or_remove_version_rows_by_hand(conn, two_users, statement):
    a, _ = two_users
    # Given the owner's connection (a superuser here), When it edits history by hand
    with pytest.raises(pgerrors.InsufficientPrivilege, match="append-only"), conn.transaction(force_rollback=True):
        conn.execute(statement.format(a=f"'{a}'"))
    # Then the trigger refused it and the row is as it was
    assert conn.execute("SELECT source_description FROM user_memory_snapshots WHERE user_id = %s", (a,)).fetchall() == [
        ("api: test",)
    ]


def test_the_erase_setting_of_one_user_does_not_open_another_users_history(conn, two_users):
    a, b = two_users
    # Given the setting user_memory_erase uses, set for user a
    with pytest.raises(pgerrors.InsufficientPrivilege, match="append-only"), conn.transaction(force_rollback=True):
        conn.execute("SELECT set_config('user_memory.erase_user_id', %s, true)", (a,))
        # When the owner deletes user b's history, Then it is still refused
        conn.execute("DELETE FROM user_memory_snapshots WHERE user_id = %s", (b,))
    assert versions(conn, b) == [1]


def test_deleting_the_users_row_takes_the_history_with_it(conn, two_users):
    a, b = two_users
    # When the platform deletes user a's identity row (ON DELETE CASCADE)
    conn.execute("DELETE FROM users WHERE id = %s", (a,))
    # Then a's head and history went with it, and b's are untouched
    assert versions(conn, a) == []
    assert conn.execute("SELECT count(*) FROM user_memory_heads WHERE user_id = %s", (a,)).fetchone()[0] == 0
    assert versions(conn, b) == [1]


# -- user_memory_append as an end user ------------------------------------------------------------


def test_authenticated_appends_its_own_version_through_the_function(conn, two_users):
    a, _ = two_users
    # Given user a's claims, set transaction-locally
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When a appends through the function, with no key and then with an api: key
        assert append(conn, a, 1, {"owner": a, "n": 2}) == ("written", 2)
        assert append(conn, a, 2, {"owner": a, "n": 3}, key="api:req-1") == ("written", 3)
        # And repeats the api: key
        assert append(conn, a, 3, {"owner": a, "n": 4}, key="api:req-1") == ("idempotent", 3)
        # And writes from a stale version
        assert append(conn, a, 1, {"owner": a, "n": 9}) == ("conflict", 3)
    # Then the versions and the head are there, written by the function as its owner
    assert versions(conn, a) == [1, 2, 3]
    assert conn.execute("SELECT document FROM user_memory_heads WHERE user_id = %s", (a,)).fetchone()[0] == {
        "owner": a,
        "n": 3,
    }


def test_a_new_end_user_can_make_its_first_write(conn):
    u = new_user()
    # Given a user with no users row and no memory
    with conn.transaction():
        as_role(conn, "authenticated", u)
        # When it writes version 1
        assert append(conn, u, 0, {"first": True}) == ("written", 1)
    # Then its users row was created too
    assert conn.execute("SELECT count(*) FROM users WHERE id = %s", (u,)).fetchone()[0] == 1


@pytest.mark.parametrize("claims", UNUSABLE_CLAIMS)
def test_authenticated_without_a_usable_sub_cannot_append(conn, two_users, claims):
    a, _ = two_users
    with pytest.raises(pgerrors.InsufficientPrivilege, match="may only write own memory"), conn.transaction():
        as_role(conn, "authenticated", claims=claims)
        append(conn, a, 1, {"x": 1})
    assert versions(conn, a) == [1]


def test_authenticated_cannot_append_to_another_users_memory(conn, two_users):
    a, b = two_users
    # Given user a's claims, When a writes b's memory, Then it is refused with 42501
    with pytest.raises(pgerrors.InsufficientPrivilege, match="may only write own memory") as err, conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, b, 1, {"owner": "a was here"})
    assert err.value.sqlstate == "42501"
    assert versions(conn, b) == [1]


@pytest.mark.parametrize("key", ["daily:2026-11-21", "window:x/y", "API:upper", "apix", ""])
def test_authenticated_cannot_claim_a_service_idempotency_key(conn, two_users, key):
    a, _ = two_users
    # Given user a's claims, When a writes with a run key, Then it is refused: the key is the service's
    with pytest.raises(pgerrors.InsufficientPrivilege, match="is reserved for the service"), conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, a, 1, {"n": 2}, key=key)
    assert versions(conn, a) == [1]


def test_authenticated_cannot_mark_activity_as_summarized(conn, two_users):
    a, _ = two_users
    ids = conn.execute("SELECT array_agg(id) FROM user_activity WHERE user_id = %s", (a,)).fetchone()[0]
    with pytest.raises(pgerrors.InsufficientPrivilege, match="marks activity"), conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, a, 1, {"n": 2}, activity_ids=ids)
    # And with an empty list too: only NULL is allowed
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, a, 1, {"n": 2}, activity_ids=[])
    assert (
        conn.execute(
            "SELECT count(*) FROM user_activity WHERE user_id = %s AND summarized_version IS NOT NULL", (a,)
        ).fetchone()[0]
        == 0
    )


@pytest.fixture
def member_of_authenticated(conn, database_url):
    """A login role that inherits authenticated's privileges (a login a platform could use); yields
    its connection string."""
    name = f"um_test_member_{os.getpid()}"
    password = secrets.token_urlsafe(24)
    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN INHERIT PASSWORD {} IN ROLE authenticated").format(
            sql.Identifier(name), sql.Literal(password)
        )
    )
    yield psycopg.conninfo.make_conninfo(database_url, user=name, password=password)
    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_role_that_is_not_the_service_is_an_end_user_even_without_set_role(conn, two_users, member_of_authenticated):
    a, b = two_users
    # Given a session whose user merely inherits authenticated (role setting 'none')
    with psycopg.connect(member_of_authenticated, autocommit=True) as member:
        with member.transaction():
            assert member.execute("SELECT current_setting('role')").fetchone()[0] == "none"
            member.execute("SELECT set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": a}),))
            # Then it may write its own memory as an end user
            assert append(member, a, 1, {"n": 2}) == ("written", 2)
        # But not another user's, nor with a run key
        for kwargs, user in (({}, b), ({"key": "daily:2031-01-01"}, a)):
            head = versions(conn, user)[-1]
            with pytest.raises(pgerrors.InsufficientPrivilege), member.transaction():
                member.execute("SELECT set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": a}),))
                append(member, user, head, {"n": 3}, **kwargs)
    assert versions(conn, a) == [1, 2] and versions(conn, b) == [1]


# -- 010: provenance --------------------------------------------------------------------------------

APPEND_WITH_PROVENANCE = "SELECT status, version FROM user_memory_append(%s, %s, %s, false, %s, %s, %s, NULL, %s)"
PROVENANCE = {"mode": "edit", "model": "m", "edits": [{"op": "add", "path": "/summary", "reason": "said so"}]}


def provenance_of(conn: psycopg.Connection, user: str, version: int) -> Any:
    row = conn.execute(
        "SELECT provenance FROM user_memory_snapshots WHERE user_id = %s AND version = %s", (user, version)
    ).fetchone()
    return row[0] if row else "no row"


def append_with_provenance(conn: psycopg.Connection, user: str, provenance: Any, **kw: Any) -> tuple[str, int]:
    patch = Jsonb([{"op": "replace", "path": "", "value": {"n": 2}}])
    args = (user, 1, patch, Jsonb({"n": 2}), kw.get("source", "api"), kw.get("key"), provenance)
    row = conn.execute(APPEND_WITH_PROVENANCE, args).fetchone()
    assert row is not None
    return row[0], row[1]


def test_the_service_records_provenance_with_a_version(conn, two_users):
    a, _ = two_users
    # Given the service's role
    with conn.transaction():
        as_role(conn, "service_role")
        # When it appends a version with its provenance
        written = append_with_provenance(conn, a, Jsonb(PROVENANCE), source="daily summary", key="daily:2031-05-01")
    # Then the row carries it, and the version written without one carries NULL
    assert written == ("written", 2)
    assert provenance_of(conn, a, 2) == PROVENANCE
    assert provenance_of(conn, a, 1) is None


def test_an_end_user_cannot_record_provenance_but_still_appends_without_it(conn, two_users):
    a, _ = two_users
    # Given user a's claims, When a appends with provenance, Then it is refused with 42501
    refused = pytest.raises(pgerrors.InsufficientPrivilege, match="only the service records provenance")
    with refused as err, conn.transaction():
        as_role(conn, "authenticated", a)
        append_with_provenance(conn, a, Jsonb(PROVENANCE))
    assert err.value.sqlstate == "42501"
    assert versions(conn, a) == [1]
    # And the same append with a NULL provenance is taken, and the user reads its own rows' column
    with conn.transaction():
        as_role(conn, "authenticated", a)
        assert append_with_provenance(conn, a, None) == ("written", 2)
        counted = conn.execute("SELECT count(provenance) FROM user_memory_snapshots WHERE user_id = %s", (a,))
        assert counted.fetchone()[0] == 0
    assert provenance_of(conn, a, 2) is None


@pytest.mark.parametrize("role", ["authenticated", "service_role", None])
@pytest.mark.parametrize("bad", [[1, 2], "text", 3], ids=["array", "string", "number"])
def test_provenance_that_is_not_a_json_object_is_refused(conn, two_users, role, bad):
    a, _ = two_users
    # Given a trusted caller (or an end user, whose provenance is refused before its shape)
    expected = pgerrors.InsufficientPrivilege if role == "authenticated" else pgerrors.InvalidParameterValue
    with pytest.raises(expected) as err, conn.transaction():
        if role is not None:
            as_role(conn, role, a)
        append_with_provenance(conn, a, Jsonb(bad))
    # Then nothing is written
    assert err.value.sqlstate == ("42501" if role == "authenticated" else "22023")
    if role != "authenticated":
        assert "provenance must be a JSON object or NULL" in str(err.value)
    assert versions(conn, a) == [1]


# -- argument checks (every caller) ----------------------------------------------------------------


BAD_ARGUMENTS = [
    pytest.param({"document": [1, 2]}, "document must be a JSON object, got array", id="document-array"),
    pytest.param({"document": "text"}, "document must be a JSON object, got string", id="document-string"),
    pytest.param({"patch": {"op": "add"}}, "patch must be a JSON array, got object", id="patch-object"),
    pytest.param({"expected": -1}, "expected version must be 0 or more", id="negative-expected"),
]


@pytest.mark.parametrize("role", ["authenticated", "service_role", None])
@pytest.mark.parametrize(("change", "message"), BAD_ARGUMENTS)
def test_append_refuses_malformed_arguments_from_every_caller(conn, two_users, role, change, message):
    a, _ = two_users
    args: dict[str, Any] = {"document": {"n": 2}, "patch": [], "expected": 1} | change
    document = None if args["document"] is None else Jsonb(args["document"])
    with pytest.raises(pgerrors.InvalidParameterValue, match=message) as err, conn.transaction():
        if role is not None:
            as_role(conn, role, a)
        conn.execute(APPEND, (a, args["expected"], Jsonb(args["patch"]), False, document, "api", None, None))
    assert err.value.sqlstate == "22023"
    assert versions(conn, a) == [1]


# Each argument of the service's call: a valid value and the faulty ones, with the message of the
# check that refuses it; the checks run in this order (migrations/020).
ARGUMENT_FAULTS: list[tuple[str, list[tuple[Any, str | None]]]] = [
    ("user", [(None, "user id is required")]),
    ("expected", [(None, "expected version must be 0 or more, got NULL"), (-1, "expected version must be 0 or more")]),
    ("checkpoint", [(None, "checkpoint flag is required")]),
    (
        "document",
        [
            ([1], "the document must be a JSON object, got array"),
            ("x", "the document must be a JSON object, got string"),
        ],
    ),
    (
        "patch",
        [
            (None, "the patch must be a JSON array, got NULL"),
            ({"op": "add"}, "the patch must be a JSON array, got object"),
        ],
    ),
    (
        "items",
        [({}, "items must be a JSON array or NULL, got object"), (3, "items must be a JSON array or NULL, got number")],
    ),
    (
        "provenance",
        [
            ([], "provenance must be a JSON object or NULL, got array"),
            (True, "provenance must be a JSON object or NULL, got boolean"),
        ],
    ),
]
APPEND_ALL = "SELECT status, version FROM user_memory_append(%s, %s, %s, %s, %s, %s, NULL, NULL, %s, %s)"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    role=st.sampled_from(["service_role", None]),
    faults=st.lists(
        st.sampled_from([(name, i) for name, cases in ARGUMENT_FAULTS for i in range(len(cases))]),
        min_size=1,
        max_size=4,
        unique_by=lambda f: f[0],
    ),
)
def test_any_mix_of_faulty_arguments_is_refused_by_the_first_check_in_order_and_writes_nothing(
    conn, two_users, role, faults
):
    a, _ = two_users
    # Given a service call (the owner's or service_role's) with one or more faulty arguments
    args: dict[str, Any] = {
        "user": a,
        "expected": 1,
        "checkpoint": False,
        "document": {"n": 2},
        "patch": [],
        "items": None,
        "provenance": None,
    }
    for name, i in faults:
        args[name] = dict(ARGUMENT_FAULTS)[name][i][0]
    first = min(faults, key=lambda f: [n for n, _ in ARGUMENT_FAULTS].index(f[0]))
    message = dict(ARGUMENT_FAULTS)[first[0]][first[1]][1]

    def jsonb(value: Any) -> Jsonb | None:
        return None if value is None else Jsonb(value)

    # When it calls user_memory_append
    with pytest.raises(pgerrors.InvalidParameterValue) as err, conn.transaction():
        if role is not None:
            as_role(conn, role, a)
        conn.execute(
            APPEND_ALL,
            (
                args["user"],
                args["expected"],
                jsonb(args["patch"]),
                args["checkpoint"],
                jsonb(args["document"]),
                "api",
                jsonb(args["provenance"]),
                jsonb(args["items"]),
            ),
        )
    # Then the first check in order refuses it, with its own message, and nothing is written
    assert err.value.sqlstate == "22023"
    assert f"user_memory_append: {message}" in str(err.value)
    assert versions(conn, a) == [1]


@pytest.mark.parametrize("role", ["authenticated", "service_role", None])
def test_append_refuses_a_document_over_the_default_limit(conn, two_users, role):
    a, _ = two_users
    big = {"text": "x" * 524_288}  # its text is 524,300 bytes: {"text": "xxx..."}
    too_big = r"document is 524300 bytes, over the limit of 524288"
    with pytest.raises(pgerrors.InvalidParameterValue, match=too_big), conn.transaction():
        if role is not None:
            as_role(conn, role, a)
        append(conn, a, 1, big)
    # And one just under it is taken
    fits = {"text": "x" * (524_288 - 12)}
    with conn.transaction():
        if role is not None:
            as_role(conn, role, a)
        assert append(conn, a, 1, fits) == ("written", 2)


def test_the_limit_measures_jsonb_text_and_a_caller_cannot_raise_it(conn, two_users):
    a, _ = two_users
    doc = {"a": 1, "b": "é" * 300_000}  # jsonb text over 524,288 bytes (é is 2)
    # Given an end user who raises the limit in its own session
    with pytest.raises(pgerrors.InvalidParameterValue, match="over the limit of 524288"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute("SELECT set_config('user_memory.max_document_bytes', '2000000000', true)")
        append(conn, a, 1, doc)
    # Then the function's own setting still applies; only its owner changes it (ALTER FUNCTION)
    assert versions(conn, a) == [1]


# -- functions: who may execute what --------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM user_memory_append(gen_random_uuid(), 0, '[]', false, '{}', 's', NULL)",
        "SELECT user_memory_mark_summarized(gen_random_uuid(), 1, ARRAY[1]::bigint[])",
        "SELECT * FROM user_memory_erase(gen_random_uuid())",
        "SELECT * FROM user_memory_record_messages('[]')",
        "SELECT auth.uid()",
    ],
)
def test_anon_cannot_execute_any_function(conn, call):
    with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied for function"), conn.transaction():
        as_role(conn, "anon")
        conn.execute(call)


@pytest.mark.parametrize(
    "call",
    [
        "SELECT user_memory_mark_summarized(%s, 1, ARRAY[1]::bigint[])",
        "SELECT * FROM user_memory_erase(%s)",
    ],
)
def test_authenticated_cannot_execute_the_service_functions(conn, two_users, call):
    a, _ = two_users
    with pytest.raises(pgerrors.InsufficientPrivilege, match="permission denied for function"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(call, (a,))
    assert versions(conn, a) == [1]


def test_no_function_of_ours_is_executable_by_public_or_anon_and_each_role_gets_only_its_own(conn):
    # Given every function our migrations created in public and auth
    functions = conn.execute(OWN_FUNCTIONS).fetchall()
    names = {name for _, name in functions}
    assert {
        "public.user_memory_append",
        "public.user_memory_mark_summarized",
        "public.user_memory_erase",
        "public.user_memory_erase_me",
        "public.user_memory_snapshots_append_only",
        "public.user_memory_record_messages",
        "public.user_memory_check_owner",
        "public.user_memory_reindex",
    } <= names

    def executable_by(role: str) -> set[str]:
        return {
            name
            for oid, name in functions
            if conn.execute("SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)).fetchone()[0]
        }

    # Then PUBLIC and anon can execute none of them
    assert executable_by("public") == set()
    assert executable_by("anon") == set()
    # And authenticated and service_role exactly what they need
    uid = {"auth.uid"} if "auth.uid" in names else set()
    assert (
        executable_by("authenticated")
        == {
            "public.user_memory_append",
            "public.user_memory_erase_me",
            "public.user_memory_erase_me_with_receipt",
            "public.user_memory_index_catch_up",
            "public.user_memory_record_messages",
            "public.user_memory_record_rating",
        }
        | uid
    )
    assert (
        executable_by("service_role")
        == {
            "public.user_memory_append",
            "public.user_memory_mark_summarized",
            "public.user_memory_erase",
            "public.user_memory_erase_with_receipt",
            "public.user_memory_import_versions",
            "public.user_memory_index_catch_up",
            "public.user_memory_kv_purge",
            "public.user_memory_record_messages",
            "public.user_memory_record_rating",
            "public.user_memory_reindex",
            "public.user_memory_store_embeddings",
            "public.user_memory_user_hash",
        }
        | uid
    )


@pytest.fixture
def supabase_like_database(database_url):
    """An empty database whose default privileges grant everything to the API roles, as Supabase's do."""
    name = f"user_memory_default_privileges_{os.getpid()}"
    admin = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        owners.drop_database(c, name)
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = psycopg.conninfo.make_conninfo(database_url, dbname=name)
    with psycopg.connect(url, autocommit=True) as c:
        for objects, privilege in (("TABLES", "ALL"), ("SEQUENCES", "ALL"), ("FUNCTIONS", "EXECUTE")):
            c.execute(
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {privilege} ON {objects} "
                "TO anon, authenticated, service_role"
            )
    yield url
    with psycopg.connect(admin, autocommit=True) as c:
        owners.drop_database(c, name)


def test_the_migrations_revoke_what_default_privileges_grant(supabase_like_database):
    from user_memory.adapters.migrations import migrate

    # Given default privileges that grant ALL on new tables and EXECUTE on new functions to every API role
    migrate(supabase_like_database)
    with psycopg.connect(supabase_like_database, autocommit=True) as c:
        # Then anon still holds nothing on our tables (the migrations' own included), sequences or functions
        tables = c.execute(
            """SELECT table_name, privilege_type FROM information_schema.role_table_grants
                WHERE grantee = 'anon' AND table_schema = 'public'"""
        ).fetchall()
        assert tables == []
        sequence = c.execute(
            "SELECT has_sequence_privilege('anon', pg_get_serial_sequence('user_activity', 'id'), 'USAGE')"
        ).fetchone()[0]
        assert sequence is False
        functions = c.execute(OWN_FUNCTIONS).fetchall()
        for role in ("public", "anon"):
            assert [
                name
                for oid, name in functions
                if c.execute("SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)).fetchone()[0]
            ] == [], role
        # And authenticated reads only, and may not run the service's functions
        tables = (
            "'user_memory_snapshots', 'user_memory_heads', 'user_activity', 'users', "
            "'conversations', 'conversation_messages', 'conversation_memories'"
        )
        privileges = c.execute(
            f"""SELECT DISTINCT privilege_type FROM information_schema.role_table_grants
                WHERE grantee = 'authenticated' AND table_schema = 'public' AND table_name IN ({tables})"""
        ).fetchall()
        assert privileges == [("SELECT",)]
        # Beyond SELECT, authenticated holds only INSERT of an activity record's own columns
        columns = c.execute(
            f"""SELECT table_name, privilege_type, array_agg(column_name::text ORDER BY column_name)
                 FROM information_schema.column_privileges
                WHERE grantee = 'authenticated' AND table_schema = 'public' AND privilege_type <> 'SELECT'
                  AND table_name IN ({tables})
                GROUP BY 1, 2"""
        ).fetchall()
        assert columns == [
            ("user_activity", "INSERT", ["external_id", "kind", "occurred_at", "payload", "source", "user_id"])
        ]
        # And nothing on the activity id's sequence (an identity column: inserting needs none)
        sequence_privileges = {
            privilege: c.execute(
                "SELECT has_sequence_privilege('authenticated', pg_get_serial_sequence('user_activity', 'id'), %s)",
                (privilege,),
            ).fetchone()[0]
            for privilege in ("USAGE", "SELECT", "UPDATE")
        }
        assert sequence_privileges == {"USAGE": False, "SELECT": False, "UPDATE": False}
        for function in ("user_memory_mark_summarized(uuid, integer, bigint[])", "user_memory_erase(uuid)"):
            assert (
                c.execute("SELECT has_function_privilege('authenticated', %s, 'EXECUTE')", (function,)).fetchone()[0]
                is False
            )
        # And the service cannot run the end user's erase, whatever the default privileges granted
        erase_me = "SELECT has_function_privilege('service_role', 'user_memory_erase_me()', 'EXECUTE')"
        assert c.execute(erase_me).fetchone()[0] is False
        # And the service writes conversations but removes them only through the erase
        for table in ("conversations", "conversation_messages", "conversation_memories"):
            held = {
                privilege
                for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "TRIGGER", "REFERENCES")
                if c.execute("SELECT has_table_privilege('service_role', %s, %s)", (table, privilege)).fetchone()[0]
            }
            assert held == {"SELECT", "INSERT", "UPDATE"}, table
        # And service_role cannot change or remove version rows
        for privilege in ("UPDATE", "DELETE", "TRUNCATE", "TRIGGER", "REFERENCES"):
            assert (
                c.execute(
                    "SELECT has_table_privilege('service_role', 'user_memory_snapshots', %s)", (privilege,)
                ).fetchone()[0]
                is False
            ), privilege


def test_the_write_functions_run_as_their_owner_with_a_fixed_search_path(conn):
    rows = conn.execute(
        """SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p
            WHERE p.pronamespace = 'public'::regnamespace
              AND p.proname IN ('user_memory_append', 'user_memory_mark_summarized', 'user_memory_erase',
                                'user_memory_record_messages', 'user_memory_reindex', 'user_memory_record_rating',
                                'user_memory_store_embeddings', 'user_memory_check_owner')"""
    ).fetchall()
    assert len(rows) == 8
    for name, definer, config in rows:
        assert definer, name
        assert config[0] == "search_path=pg_catalog, public, pg_temp", name
    # And no function sets a custom parameter (only a superuser may create one that does): the
    # append's size limit is the owner's row in user_memory_settings, which no other role can touch
    assert all(config == ["search_path=pg_catalog, public, pg_temp"] for _name, _definer, config in rows)
    assert conn.execute("SELECT value FROM user_memory_settings WHERE name = 'max_document_bytes'").fetchone() == (
        "524288",
    )
    for role in ("anon", "authenticated", "service_role"):
        assert not conn.execute(
            "SELECT has_table_privilege(%s, 'user_memory_settings', 'SELECT, INSERT, UPDATE, DELETE')", (role,)
        ).fetchone()[0]
    # And there is one user_memory_append, the 10-argument one (010 added p_provenance, 012 p_items)
    signatures = conn.execute(
        "SELECT pg_get_function_identity_arguments(oid) FROM pg_proc WHERE proname = 'user_memory_append'"
    ).fetchall()
    assert signatures == [
        (
            "p_user_id uuid, p_expected integer, p_patch jsonb, p_checkpoint boolean, p_document jsonb, "
            "p_source text, p_key text, p_activity_ids bigint[], p_provenance jsonb, p_items jsonb",
        )
    ]
    # And its last three arguments default to NULL, so 7- to 9-argument callers still resolve
    defaults = conn.execute("SELECT pronargdefaults FROM pg_proc WHERE proname = 'user_memory_append'")
    assert defaults.fetchone()[0] == 3


def test_claims_and_role_do_not_outlive_their_transaction(conn, two_users):
    a, _ = two_users
    # Given a transaction as user a that appends
    with conn.transaction():
        as_role(conn, "authenticated", a)
        assert conn.execute("SELECT auth.uid()::text").fetchone()[0] == a
        assert append(conn, a, 1, {"n": 2}) == ("written", 2)
    # Then on the same connection afterwards the claims and the role are gone
    assert conn.execute("SELECT auth.uid()").fetchone()[0] is None
    assert conn.execute("SELECT current_setting('role'), current_user").fetchone() != ("authenticated", "authenticated")
    assert conn.execute("SELECT current_setting('request.jwt.claims', true)").fetchone()[0] in (None, "")
    # And a next transaction as authenticated that sets no claims is refused
    with pytest.raises(pgerrors.InsufficientPrivilege, match="may only write own memory"), conn.transaction():
        conn.execute("SET LOCAL ROLE authenticated")
        append(conn, a, 2, {"n": 3})
    assert versions(conn, a) == [1, 2]


# -- erase ------------------------------------------------------------------------------------------


def test_service_role_erases_a_user_and_only_that_user(conn, two_users):
    a, b = two_users
    assert append(conn, a, 1, {"n": 2}) == ("written", 2)
    before_b = conn.execute(
        """SELECT (SELECT count(*) FROM user_memory_snapshots WHERE user_id = %(b)s),
                  (SELECT count(*) FROM user_memory_heads WHERE user_id = %(b)s),
                  (SELECT count(*) FROM user_activity WHERE user_id = %(b)s)""",
        {"b": b},
    ).fetchone()
    # When the service erases user a
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
    # Then it reports what it deleted, per relation
    assert counts == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 2,
        "user_activity": 2,
        "user_memory_kv": 0,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 0,
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
    }
    # And nothing of a is left but the identity row
    left = conn.execute(
        """SELECT (SELECT count(*) FROM user_memory_snapshots WHERE user_id = %(a)s),
                  (SELECT count(*) FROM user_memory_heads WHERE user_id = %(a)s),
                  (SELECT count(*) FROM user_activity WHERE user_id = %(a)s),
                  (SELECT count(*) FROM users WHERE id = %(a)s)""",
        {"a": a},
    ).fetchone()
    assert left == (0, 0, 0, 1)
    # And b is untouched
    after_b = conn.execute(
        """SELECT (SELECT count(*) FROM user_memory_snapshots WHERE user_id = %(b)s),
                  (SELECT count(*) FROM user_memory_heads WHERE user_id = %(b)s),
                  (SELECT count(*) FROM user_activity WHERE user_id = %(b)s)""",
        {"b": b},
    ).fetchone()
    assert after_b == before_b == (1, 1, 2)
    # And the erase left no open door: history is append-only again in the same transaction
    with pytest.raises(pgerrors.InsufficientPrivilege, match="append-only"), conn.transaction(force_rollback=True):
        conn.execute("SELECT * FROM user_memory_erase(%s)", (new_user(),))
        conn.execute("DELETE FROM user_memory_snapshots WHERE user_id = %s", (b,))
    # And an erased user can start again from version 1
    assert append(conn, a, 0, {"again": True}) == ("written", 1)


def test_erasing_a_user_with_nothing_reports_zeros(conn):
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (new_user(),)).fetchall())
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


def test_an_erase_waits_for_an_append_in_flight_and_removes_its_version_too(conn, database_url, two_users):
    a, _ = two_users
    # Given an append of version 2 whose transaction is still open (it holds the head's row lock)
    writer = psycopg.connect(database_url)
    try:
        assert append(writer, a, 1, {"n": 2}) == ("written", 2)
        result: dict[str, Any] = {}

        def erase() -> None:
            with psycopg.connect(database_url, autocommit=True) as c, c.transaction():
                as_role(c, "service_role")
                result["pid"] = c.info.backend_pid
                result["counts"] = dict(
                    c.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall()
                )

        thread = threading.Thread(target=erase)
        # When the service erases the user meanwhile
        thread.start()
        if not waits_on_a_lock(conn, lambda: result.get("pid", 0)):
            pytest.fail("the erase did not wait for the append's lock")
        # And the append commits
        writer.commit()
        thread.join(10)
    finally:
        writer.close()
    # Then the erase saw version 2 and nothing of the user is left
    assert result["counts"]["user_memory_snapshots"] == 2
    assert versions(conn, a) == []


# -- 005: activity idempotency per user and marking -------------------------------------------------


def test_activity_idempotency_is_per_user(conn):
    a, b = new_user(), new_user()
    source, external = f"src-{uuid.uuid4()}", "message-1"
    insert = """INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id)
                VALUES (%s, now(), 'message', %s, %s)
                ON CONFLICT (user_id, source, external_id) DO NOTHING"""
    # When two users carry the same (source, external_id), and user a's arrives twice
    inserted = [conn.execute(insert, (u, source, external)).rowcount for u in (a, b, a)]
    # Then both users' rows are stored, a's once
    assert inserted == [1, 1, 0]
    rows = conn.execute(
        "SELECT user_id::text, count(*) FROM user_activity WHERE source = %s GROUP BY 1", (source,)
    ).fetchall()
    assert dict(rows) == {a: 1, b: 1}
    # And a plain duplicate names the new constraint
    with pytest.raises(pgerrors.UniqueViolation) as err:
        conn.execute(insert.split("ON CONFLICT")[0], (a, source, external))
    assert err.value.diag.constraint_name == "user_activity_user_source_external_id_key"
    constraints = {
        r[0] for r in conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'user_activity'::regclass")
    }
    assert "user_activity_source_external_id_key" not in constraints


def test_append_marks_the_given_activity_with_the_new_version(conn, two_users):
    a, b = two_users
    mine = add_activity(conn, a, 3)
    others = conn.execute("SELECT array_agg(id) FROM user_activity WHERE user_id = %s", (b,)).fetchone()[0]
    # When a summary run names one of b's rows among a's, nothing is written (the input is stale)
    stale = append(conn, a, 1, {"n": 2}, key="daily:2031-02-01", activity_ids=[mine[0], others[0]])
    assert stale == ("stale", 1)
    # When it names two of a's rows, version 2 is written
    assert append(conn, a, 1, {"n": 2}, key="daily:2031-02-01", activity_ids=[mine[0], mine[1]]) == ("written", 2)
    marks = dict(
        conn.execute("SELECT id, summarized_version FROM user_activity WHERE id = ANY(%s)", (mine + others,)).fetchall()
    )
    # Then a's two rows carry version 2; a's third row and b's row are not marked
    assert [marks[i] for i in mine] == [2, 2, None]
    assert all(marks[i] is None for i in others)
    # And a second run naming a row the first one summarized is stale: nothing is summarized twice
    assert append(conn, a, 2, {"n": 3}, key="daily:2031-02-02", activity_ids=[mine[1], mine[2]]) == ("stale", 2)


def test_an_idempotent_or_conflicting_append_marks_nothing(conn, two_users):
    a, _ = two_users
    ids = add_activity(conn, a, 2)
    assert append(conn, a, 1, {"n": 2}, key="daily:2031-03-01") == ("written", 2)
    # When the run is redelivered, and when a stale run writes
    assert append(conn, a, 2, {"n": 3}, key="daily:2031-03-01", activity_ids=ids) == ("idempotent", 2)
    assert append(conn, a, 1, {"n": 3}, key="daily:2031-03-02", activity_ids=ids) == ("conflict", 2)
    # Then the rows are still unsummarized
    marks = conn.execute("SELECT summarized_version FROM user_activity WHERE id = ANY(%s)", (ids,)).fetchall()
    assert marks == [(None,), (None,)]


def test_mark_summarized_marks_unmarked_rows_with_the_given_version(conn, two_users):
    a, b = two_users
    ids = add_activity(conn, a, 3)
    other = add_activity(conn, b, 1)
    with conn.transaction():
        as_role(conn, "service_role")
        # When a run whose summary changed nothing marks two rows against version 1 (and names b's row)
        assert conn.execute("SELECT user_memory_mark_summarized(%s, 1, %s)", (a, ids[:2] + other)).fetchone()[0] == 2
        # And another marks all three against version 7
        assert conn.execute("SELECT user_memory_mark_summarized(%s, 7, %s)", (a, ids)).fetchone()[0] == 1
    # Then the first two keep version 1, the third has 7, b's row is untouched
    marks = dict(conn.execute("SELECT id, summarized_version FROM user_activity WHERE id = ANY(%s)", (ids + other,)))
    assert [marks[i] for i in ids] == [1, 1, 7]
    assert marks[other[0]] is None
    with pytest.raises(pgerrors.InvalidParameterValue, match="version must be 0 or more"):
        conn.execute("SELECT user_memory_mark_summarized(%s, -1, %s)", (a, ids))


def test_a_seven_argument_append_still_resolves(conn):
    u = new_user()
    # Given a caller written against migration 004's signature
    row = conn.execute(
        "SELECT status, version FROM user_memory_append(%s, 0, '[]', true, '{}', 'old caller', NULL)", (u,)
    ).fetchone()
    assert row == ("written", 1)


def test_activity_indexes_for_the_worker_and_the_fan_out(conn):
    indexes = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'user_activity'"))
    assert indexes["idx_user_activity_unsummarized"].endswith(
        "USING btree (user_id, id) WHERE (summarized_version IS NULL)"
    )
    assert "idx_user_activity_recorded" not in indexes  # late activity is found through the partial index
    comment = conn.execute(
        "SELECT col_description('user_activity'::regclass, attnum) FROM pg_attribute "
        "WHERE attrelid = 'user_activity'::regclass AND attname = 'summarized_version'"
    ).fetchone()[0]
    assert "memory version" in comment


# -- 006: row-level security on users, policies -----------------------------------------------------


def test_policies_allow_only_reads_and_own_inserts(conn):
    policies = conn.execute(
        """SELECT tablename, cmd, count(*) FROM pg_policies
            WHERE tablename IN ('user_memory_snapshots', 'user_memory_heads', 'user_activity', 'users',
                                'conversations', 'conversation_messages', 'conversation_memories')
              AND policyname <> %s
            GROUP BY 1, 2""",
        (SERVICE_POLICY,),
    ).fetchall()
    assert {(t, c): n for t, c, n in policies} == {
        ("user_memory_snapshots", "SELECT"): 1,
        ("user_memory_snapshots", "INSERT"): 1,
        ("user_memory_heads", "SELECT"): 1,
        ("user_memory_heads", "INSERT"): 1,
        ("user_activity", "SELECT"): 1,
        # an end user's own activity (migration 009), never a memory_reset (016, restrictive)
        ("user_activity", "INSERT"): 2,
        ("users", "SELECT"): 1,
        # Conversations (migration 011): end users read their own; messages go in through
        # user_memory_record_messages, memories are the service's
        ("conversations", "SELECT"): 1,
        ("conversation_messages", "SELECT"): 1,
        ("conversation_memories", "SELECT"): 1,
    }
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'users'::regclass").fetchone()[0] is True


# -- 007: storage -----------------------------------------------------------------------------------


def test_covered_index_is_gone_and_checkpoints_are_indexed_by_version(conn):
    indexes = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'user_memory_snapshots'"))
    # The (user_id) index is covered by the unique (user_id, version) one
    assert "idx_user_memory_snapshots_user_id" not in indexes
    assert "UNIQUE" in indexes["idx_user_memory_snapshots_user_version"]
    # The checkpoint index answers "latest checkpoint at or below v", and carries the checkpoints'
    # times for as_of (015: no index of every row's time any more)
    assert indexes["idx_user_memory_snapshots_checkpoints"].endswith(
        "USING btree (user_id, version) INCLUDE (created_at) WHERE (is_full_snapshot = true)"
    )
    assert "idx_user_memory_snapshots_user_created_at" not in indexes
    # Idempotency keys are found through a hash index of "<user> <key>"
    assert "USING hash" in indexes["idx_user_memory_snapshots_user_idempotency_key"]


def test_a_version_is_never_stamped_before_the_one_before_it(conn):
    # Given a user whose last version is stamped an hour ahead of the clock (a clock that stepped back)
    u = new_user()
    append(conn, u, 0, {"v": 1})
    conn.execute("UPDATE user_memory_heads SET updated_at = now() + interval '1 hour' WHERE user_id = %s", (u,))
    ahead = conn.execute("SELECT updated_at FROM user_memory_heads WHERE user_id = %s", (u,)).fetchone()[0]
    # When the next version is written, Then it is stamped no earlier than that
    append(conn, u, 1, {"v": 2})
    stamped = conn.execute(
        "SELECT created_at FROM user_memory_snapshots WHERE user_id = %s AND version = 2", (u,)
    ).fetchone()[0]
    assert stamped >= ahead


def test_as_of_reads_the_checkpoints_index_and_at_most_an_interval_of_rows(conn, store):
    # Given 200 versions with a checkpoint every 20
    u = new_user()
    for v in range(1, 201):
        append(conn, u, v - 1, {"v": v}, checkpoint=v % 20 == 0)
    stamps = dict(conn.execute("SELECT version, created_at FROM user_memory_snapshots WHERE user_id = %s", (u,)))
    # Then as_of any version's time is that version, before the first is 0, after the last the head
    for v in (1, 19, 20, 21, 99, 100, 101, 200):
        assert store.as_of(u, stamps[v]).version == v
    assert store.as_of(u, stamps[1] - timedelta(microseconds=1)).version == 0
    # And the lookup finds its checkpoints through their index, and reads at most the 20 rows between two
    from user_memory.adapters.postgres import _VERSION_AT

    plan = [
        r[0]
        for r in conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ") + sql.SQL(_VERSION_AT),
            {"u": u, "t": stamps[101]},
        )
    ]
    assert sum("idx_user_memory_snapshots_checkpoints" in line for line in plan) == 2, plan
    scan = next(i for i, line in enumerate(plan) if "using idx_user_memory_snapshots_user_version" in line)
    read = int(plan[scan].split("rows=")[1].split()[0])
    removed = [line for line in plan[scan + 1 : scan + 4] if "Rows Removed by Filter" in line]
    assert read + (int(removed[0].split(":")[1]) if removed else 0) <= 20, plan


def test_the_rebuild_finds_its_checkpoint_through_the_checkpoint_index(conn):
    u = new_user()
    for v in range(1, 8):
        append(conn, u, v - 1, {"v": v}, checkpoint=v % 3 == 0)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                """EXPLAIN SELECT max(version) FROM user_memory_snapshots
                    WHERE user_id = %s AND is_full_snapshot AND version <= %s""",
                (u, 5),
            )
        )
        got = conn.execute(
            "SELECT max(version) FROM user_memory_snapshots WHERE user_id = %s AND is_full_snapshot AND version <= 5",
            (u,),
        ).fetchone()[0]
    # Then both conditions are index conditions: one descent, not a walk over the user's checkpoints
    lines = plan.splitlines()
    scan = next(i for i, line in enumerate(lines) if "idx_user_memory_snapshots_checkpoints" in line)
    assert "Index Cond:" in lines[scan + 1] and "version <=" in lines[scan + 1], plan
    assert got == 3


def test_large_values_use_lz4_where_the_server_has_it(conn):
    # Given whether this server was built with lz4
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("CREATE TEMP TABLE lz4_probe (v text COMPRESSION lz4)")
        lz4 = True
    except pgerrors.FeatureNotSupported:
        lz4 = False
    # Then the three large columns use it there, and the default elsewhere (the migration applied)
    rows = conn.execute(
        """SELECT attrelid::regclass::text || '.' || attname, attcompression FROM pg_attribute
            WHERE (attrelid = 'user_memory_snapshots'::regclass AND attname IN ('patch', 'full_snapshot_content'))
               OR (attrelid = 'user_memory_heads'::regclass AND attname = 'document')"""
    ).fetchall()
    assert len(rows) == 3
    assert {c for _, c in rows} == ({"l"} if lz4 else {""})


# -- end users cannot write history that does not rebuild, nor pose as the service ----------------


def snapshot_row(conn: psycopg.Connection, user: str, version: int) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT is_full_snapshot, patch, full_snapshot_content FROM user_memory_snapshots"
        " WHERE user_id = %s AND version = %s",
        (user, version),
    ).fetchone()


def rebuilt_versions(conn: psycopg.Connection, user: str) -> list[Any]:
    """Every version of the user rebuilt by the store (checkpoints and patches), oldest first."""
    from user_memory.adapters.postgres import PostgresRecorder, open_pool
    from user_memory.domain.memory.repository import MemoryStore

    pool = open_pool(conn.info.dsn)
    try:
        return [v.document for v in MemoryStore(PostgresRecorder(pool)).versions(user)]
    finally:
        pool.close()


def head_document(conn: psycopg.Connection, user: str) -> Any:
    return conn.execute("SELECT document FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()[0]


def test_an_end_users_version_is_stored_as_its_patch_not_as_a_checkpoint(conn, two_users):
    # Given an end user whose patch gives its document
    a, _ = two_users
    patch = [{"op": "add", "path": "/likes", "value": ["tea"]}]
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When it appends without asking for a checkpoint
        assert append(conn, a, 1, {"owner": a, "likes": ["tea"]}, patch=patch) == ("written", 2)
    # Then the version is the patch alone, and the head is the patch applied
    assert snapshot_row(conn, a, 2) == (False, patch, None)
    assert head_document(conn, a) == {"owner": a, "likes": ["tea"]}
    assert rebuilt_versions(conn, a)[-1] == {"owner": a, "likes": ["tea"]}


@pytest.mark.parametrize(
    ("patch", "document", "sqlstate"),
    [
        pytest.param([{"op": "add", "path": "/n", "value": 1}], {"real": "document"}, "UMP03", id="other-document"),
        pytest.param([{"op": "add", "path": "/n", "value": 1}], {"n": 1, "owner": "x"}, "UMP03", id="other-value"),
        pytest.param([{"op": "remove", "path": "/nope"}], {"real": "document"}, "UMP01", id="patch-does-not-apply"),
        pytest.param([{"op": "test", "path": "/owner", "value": 1}], {"owner": "x"}, "UMP01", id="test-fails"),
        pytest.param([{"op": "replace", "path": "", "value": [1]}], {"a": 1}, "UMP01", id="not-an-object"),
    ],
)
def test_an_end_users_document_that_is_not_its_patch_applied_is_refused(conn, two_users, patch, document, sqlstate):
    # Given an end user who sends a patch that does not give its document (or does not apply)
    a, _ = two_users
    with pytest.raises(psycopg.DatabaseError) as err, conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, a, 1, document, patch=patch)
    # Then it is refused with its own SQLSTATE, and nothing is written
    assert err.value.sqlstate == sqlstate
    assert versions(conn, a) == [1]
    assert head_document(conn, a) == {"owner": a}


def test_a_document_that_differs_from_the_result_only_in_number_spelling_is_stored_as_the_result(conn, two_users):
    # Given an end user whose document says 1.0 where its patch says 1 (equal as jsonb)
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a)
        row = conn.execute(
            APPEND,
            (
                a,
                1,
                Jsonb([{"op": "add", "path": "/n", "value": 1}]),
                False,
                f'{{"owner": "{a}", "n": 1.0}}',
                "api",
                None,
                None,
            ),
        ).fetchone()
    assert tuple(row) == ("written", 2)
    # Then the head is the patch's result, spelled as the patch spells it, so every rebuild equals it
    assert conn.execute("SELECT document->>'n' FROM user_memory_heads WHERE user_id = %s", (a,)).fetchone()[0] == "1"
    assert rebuilt_versions(conn, a)[-1] == head_document(conn, a)


@pytest.mark.parametrize("role", ["authenticated", "service_role"])
def test_a_null_document_is_the_patch_applied_to_the_head(conn, two_users, role):
    # Given a caller that sends only the patch
    a, _ = two_users
    patch = Jsonb([{"op": "add", "path": "/n", "value": 2}])
    with conn.transaction():
        as_role(conn, role, a)
        row = conn.execute(APPEND, (a, 1, patch, False, None, "api", None, None)).fetchone()
    # Then the version's document is the patch applied to version 1
    assert tuple(row) == ("written", 2)
    assert head_document(conn, a) == {"owner": a, "n": 2}
    assert rebuilt_versions(conn, a) == [{"owner": a}, {"owner": a, "n": 2}]


def test_the_services_document_is_trusted_as_before(conn, two_users):
    # Given the service, which diffs and verifies its own patches before it appends
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "service_role")
        # When it sends a document with a patch that the database does not check
        assert append(conn, a, 1, {"n": 2}, patch=[{"op": "add", "path": "/n", "value": 2}]) == ("written", 2)
    # Then the document is stored as given (the fast path: the patch is not applied again)
    assert head_document(conn, a) == {"n": 2}


def test_an_end_user_that_never_asks_for_a_checkpoint_gets_one_every_200_versions(conn):
    # Given an end user who appends 401 versions, never asking for a checkpoint
    u = new_user()
    with conn.transaction():
        as_role(conn, "authenticated", u)
        for v in range(401):
            append(conn, u, v, {"n": v + 1}, patch=[{"op": "add", "path": "/n", "value": v + 1}])
    # Then versions 200 and 400 were made checkpoints, so a rebuild applies at most 199 patches
    checkpoints = conn.execute(
        "SELECT version FROM user_memory_snapshots WHERE user_id = %s AND is_full_snapshot ORDER BY version", (u,)
    ).fetchall()
    assert [c[0] for c in checkpoints] == [200, 400]
    assert snapshot_row(conn, u, 400) == (True, [{"op": "add", "path": "/n", "value": 400}], {"n": 400})


def test_an_end_users_checkpoint_request_is_honoured(conn, two_users):
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated", a)
        assert append(
            conn, a, 1, {"owner": a, "n": 2}, patch=[{"op": "add", "path": "/n", "value": 2}], checkpoint=True
        ) == ("written", 2)
    assert snapshot_row(conn, a, 2) == (True, [{"op": "add", "path": "/n", "value": 2}], {"owner": a, "n": 2})


@pytest.mark.parametrize("source", ["daily summary 2026-11-21, 3 activities, model rules", "summary (backfill)", None])
def test_an_end_user_cannot_pose_as_the_service_in_the_source(conn, two_users, source):
    a, _ = two_users
    with pytest.raises(pgerrors.InsufficientPrivilege, match="source must start with"), conn.transaction():
        as_role(conn, "authenticated", a)
        append(conn, a, 1, {"n": 2}, source=source)
    assert versions(conn, a) == [1]

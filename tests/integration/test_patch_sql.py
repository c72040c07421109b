"""The database's RFC 6902 applier (migrations/015: user_memory_apply_patch) and the end-user
append built on it: the json-patch conformance suite, agreement with the service's applier on any
patch, its bounds, and forged end-user calls that can never leave a history that does not rebuild.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb
from user_memory.adapters.postgres import PostgresRecorder, transaction
from user_memory.domain.memory.patching import MAX_OPERATIONS, PatchBudget, PatchError, apply_patch, json_equal
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.ports import NewVersion
from user_memory.errors import DocumentGrowsTooLarge, PatchMismatch, PatchOverBounds

from tests.json_patch_suite import conformance_cases

pytestmark = pytest.mark.integration

APPLY = "SELECT user_memory_apply_patch(%s, %s)"
APPEND = "SELECT status, version FROM user_memory_append(%s, %s, %s, %s, %s, %s, NULL)"
REFUSED = {"UMP01", "UMP02"}


class Refused(str):
    """The SQLSTATE the database refused a patch with."""


def sql_apply(conn: psycopg.Connection, doc: Any, patch: Any) -> Any:
    """The database's result, or Refused(its SQLSTATE)."""
    try:
        with conn.transaction():
            row = conn.execute(APPLY, (Jsonb(doc), Jsonb(patch))).fetchone()
    except psycopg.DatabaseError as err:
        return Refused(err.sqlstate)
    assert row is not None
    return row[0]


@pytest.mark.parametrize("case", conformance_cases())
def test_rfc6902_conformance_in_the_database(conn, case):
    # Given a record of the public suite, When the database applies its patch
    got = sql_apply(conn, case["doc"], case["patch"])
    # Then it fails where the record says it must (with the applier's own SQLSTATE), else gives `expected`
    if "error" in case:
        assert isinstance(got, Refused) and got in REFUSED, f"should have failed: {case.get('error')}"
    else:
        assert not isinstance(got, Refused), f"refused with {got}"
        if "expected" in case:
            assert json_equal(got, case["expected"])


# -- the database and the service agree on every patch ---------------------------------------------

_text = st.text(alphabet=st.sampled_from(list("ab~/ é01-")), max_size=4)
_numbers = st.sampled_from([0, 1, -1, 2, 1.0, 0.0, 2.5, -0.5, 10])
_json = st.recursive(
    st.none() | st.booleans() | _numbers | _text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "", "0", "~", "/"]), inner, max_size=3)
    ),
    max_leaves=10,
)
# Tokens that RFC 6901 and PostgreSQL's own path operators read differently, escapes, and plain ones.
_token = st.sampled_from(
    ["a", "b", "", "0", "1", "2", "-", "01", "-1", " 1", "+1", "~0", "~1", "~", "~2", "9999999999"]
)
_pointer = st.one_of(
    st.lists(_token, max_size=3).map(lambda t: "".join("/" + x for x in t)),
    st.sampled_from(["a", "a/b", 3, None]),  # not pointers
)


def _op(kind: str, path: Any, value: Any, source: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"op": kind, "path": path}
    if kind in ("add", "replace", "test"):
        op["value"] = value
    if kind in ("move", "copy"):
        op["from"] = source
    return op


_ops = st.one_of(
    st.builds(_op, st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]), _pointer, _json, _pointer),
    st.sampled_from([{"op": "add", "path": "/a"}, {"op": "move", "path": "/a"}, {"op": "nope", "path": ""}, {}, 1]),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=_json | st.sampled_from([[10, 20, 30], {"a": [10, 20, 30], "b": {"0": 1}}]), patch=st.lists(_ops, max_size=4)
)
def test_the_database_and_the_service_apply_any_patch_alike(conn, doc, patch):
    # Given any value and any patch, as the database stores them (numbers read back as it spells them)
    doc, patch = conn.execute("SELECT %s::jsonb, %s::jsonb", (Jsonb(doc), Jsonb(patch))).fetchone()
    # When both appliers apply it
    got = sql_apply(conn, doc, patch)
    try:
        expected: Any = apply_patch(doc, patch)
    except PatchError:
        expected = Refused("PatchError")
    # Then both refuse it, or both give the same value, JSON types included
    if isinstance(expected, Refused):
        assert isinstance(got, Refused) and got in REFUSED, "the database applied what the service refuses"
    else:
        assert not isinstance(got, Refused), f"the database refused ({got}) what the service applies"
        assert json_equal(got, expected)


@pytest.mark.parametrize("token", ["01", " 1", "+1", "-1", "1e0"])
@pytest.mark.parametrize(
    "op",
    [
        {"op": "add", "path": "/a/{}", "value": 0},
        {"op": "replace", "path": "/a/{}", "value": 0},
        {"op": "remove", "path": "/a/{}"},
        {"op": "test", "path": "/a/{}", "value": 20},
        {"op": "copy", "from": "/a/{}", "path": "/b"},
        {"op": "move", "from": "/a/{}", "path": "/b"},
        {"op": "add", "path": "/a/{}/x", "value": 0},
    ],
    ids=["add", "replace", "remove", "test", "copy", "move", "add-below"],
)
def test_tokens_postgresql_reads_as_array_indexes_are_not_indexes(conn, token, op):
    # Given a token PostgreSQL's own path operators would take for index 1 (or -1: the last)
    patch = [json.loads(json.dumps(op).replace("{}", token))]
    # When it names an array element, Then the database refuses it as the service does
    with pytest.raises(PatchError):
        apply_patch({"a": [10, 20, 30]}, patch)
    assert sql_apply(conn, {"a": [10, 20, 30]}, patch) == Refused("UMP01")


# -- bounds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "patch", "message"),
    [
        pytest.param(
            {},
            [{"op": "add", "path": "/a", "value": 1}] * 1001,
            "1001 operations, over the limit of 1000",
            id="operations",
        ),
        pytest.param(
            {}, [{"op": "add", "path": "/" + "a" * 2048, "value": 1}], "over the limit of 2048", id="pointer-bytes"
        ),
        pytest.param(
            {},
            [{"op": "add", "path": "/a" * 101, "value": 1}],
            "101 tokens, over the limit of 100",
            id="pointer-tokens",
        ),
        pytest.param(
            {"a": "x" * 1000},
            [{"op": "copy", "from": "", "path": f"/{i}"} for i in range(30)],
            "grows over 1048576 bytes",
            id="growth",
        ),
    ],
)
def test_a_patch_over_the_bounds_is_refused_with_its_own_sqlstate(conn, doc, patch, message):
    with pytest.raises(psycopg.DatabaseError, match=message) as err:
        conn.execute(APPLY, (Jsonb(doc), Jsonb(patch)))
    assert err.value.sqlstate == "UMP02"


def test_the_bounds_of_the_service_are_the_databases(conn):
    # Given a patch of exactly the service's maximum of operations, Then the database applies it
    patch = [{"op": "add", "path": f"/{i}", "value": i} for i in range(MAX_OPERATIONS)]
    assert len(sql_apply(conn, {}, patch)) == MAX_OPERATIONS
    # And one more is refused
    assert sql_apply(conn, {}, [*patch, {"op": "remove", "path": "/0"}]) == Refused("UMP02")


def test_a_patch_over_twice_the_document_limit_is_refused_before_anything_is_read(conn):
    user = str(uuid.uuid4())
    patch = [{"op": "add", "path": "/a", "value": "x" * 1_100_000}]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="over twice the document limit"):
        conn.execute(APPEND, (user, 0, Jsonb(patch), False, None, "api"))


# -- forged end-user calls -----------------------------------------------------------------------------


def as_end_user(conn: psycopg.Connection, user: str) -> None:
    conn.execute(sql.SQL("SET LOCAL ROLE authenticated"))
    conn.execute("SELECT set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": user}),))


_documents = st.dictionaries(st.sampled_from(["a", "b", "c"]), _json, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(
        st.tuples(st.lists(_ops, max_size=3), _documents | st.none(), st.booleans(), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_forged_end_user_calls_never_leave_a_history_that_does_not_rebuild(conn, store, calls):
    # Given a user with a first version written by the service
    user = str(uuid.uuid4())
    store.append(user, {"a": 1, "b": [1, 2]}, expected_version=0, source="seed")
    for patch, document, honest, checkpoint in calls:
        head = store.head(user)
        if honest and document is None:  # the document the patch gives, when it gives one
            try:
                document = apply_patch(head.document, patch)
            except PatchError:
                document = {"a": 2}
        # When the end user sends any patch with any document (or none), asking for a checkpoint or not
        try:
            with conn.transaction():
                as_end_user(conn, user)
                conn.execute(
                    APPEND,
                    (
                        user,
                        head.version,
                        Jsonb(patch),
                        checkpoint,
                        None if document is None else Jsonb(document),
                        "api",
                    ),
                )
        except psycopg.DatabaseError as err:
            assert err.sqlstate in {"UMP01", "UMP02", "UMP03", "22023"}, err
    # Then every version rebuilds from its checkpoint and patches, and the last one is the head
    versions = list(store.versions(user))
    assert [v.version for v in versions] == list(range(1, store.head(user).version + 1))
    assert json_equal(versions[-1].document, store.head(user).document)
    for earlier, later in zip(versions, versions[1:], strict=False):
        stored = store.history(user, limit=1, before_version=later.version + 1)[0].patch
        assert json_equal(apply_patch(earlier.document, stored), later.document)


def test_the_store_reports_a_refused_patch_and_a_mismatch_by_name(pool):
    user = uuid.uuid4()
    MemoryStore(PostgresRecorder(pool)).append(user, {"a": 1}, expected_version=0, source="seed")

    def insert(patch: list[Any], document: dict[str, Any]) -> None:
        with transaction(pool, end_user=user) as tx:
            PostgresRecorder(tx).insert(
                NewVersion(
                    user_id=user,
                    expected_version=1,
                    patch=patch,
                    document=document,
                    document_json=json.dumps(document),
                    checkpoint=False,
                    source="api",
                )
            )

    with pytest.raises(PatchError, match="operation 0: token 1 of the pointer names a member that does not exist"):
        insert([{"op": "remove", "path": "/nope"}], {})
    with pytest.raises(PatchMismatch, match="the document is not the patch applied to version 1"):
        insert([{"op": "add", "path": "/b", "value": 2}], {"a": 1, "b": 3})


def test_an_end_users_rewrite_beyond_the_bounds_is_stored_as_the_whole_document(pool):
    # Given an end user with 1,200 keys, When it writes a document that changes every one of them
    user = uuid.uuid4()
    old = {f"k{i}": i for i in range(1200)}
    new = {f"k{i}": -i for i in range(1200)}
    with transaction(pool, end_user=user) as tx:
        store = MemoryStore(PostgresRecorder(tx))
        store.append(user, old, expected_version=0, source="api")
        written = store.append(user, new, expected_version=1, source="api")
    # Then its patch (1,200 operations, over the database's 1,000) is one replace of the document
    assert written.patch == [{"op": "replace", "path": "", "value": new}]
    store = MemoryStore(PostgresRecorder(pool))
    assert store.history(user, limit=1)[0].is_checkpoint is False
    assert json_equal(store.at(user, 2).document, new) and json_equal(store.at(user, 1).document, old)


# -- the running budget (migration 019) ----------------------------------------------------------------

APPLY_WITHIN = "SELECT r, pg_column_size(r) FROM user_memory_apply_patch(%s, %s, %s) r"


def test_an_end_users_kilobyte_of_copies_of_the_whole_document_is_refused_and_writes_nothing(conn, store):
    # Given a user with a memory of a few hundred bytes
    user = str(uuid.uuid4())
    store.append(user, {"summary": "Likes tea. " * 20, "parts": {}}, expected_version=0, source="seed")
    # When, as an end user (the Data API's `authenticated`), it sends the finding's patch: 22 copies
    # of the whole document into new members, under 1 KB
    patch = [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(22)]
    assert len(json.dumps(patch)) < 1024
    with (
        pytest.raises(psycopg.DatabaseError, match=r"operation \d+: the document grows over") as err,
        conn.transaction(),
    ):
        as_end_user(conn, user)
        conn.execute(APPEND, (user, 1, Jsonb(patch), False, None, "api"))
    # Then the database refuses it with its bounds' SQLSTATE, and nothing was written
    assert err.value.sqlstate == "UMP02"
    assert store.head(user).version == 1


def test_a_replace_that_grows_the_document_past_the_bound_is_refused(conn):
    # Given a small document, When a replace would take it over the bound (015 never measured one)
    patch = [{"op": "replace", "path": "/a", "value": "x" * 20_000}]
    with pytest.raises(psycopg.DatabaseError, match="operation 0: the document grows over 10000 bytes") as err:
        conn.execute(APPLY_WITHIN, (Jsonb({"a": 1}), Jsonb(patch), 10_000))
    # Then it is refused with the bounds' SQLSTATE
    assert err.value.sqlstate == "UMP02"


def test_the_store_reports_a_document_grown_past_the_bound_as_too_large(pool):
    # Given an end user's memory
    user = uuid.uuid4()
    MemoryStore(PostgresRecorder(pool)).append(user, {"a": "x" * 1000}, expected_version=0, source="seed")

    # When its append's patch copies the document past twice the limit, Then the store names it
    # as the size error (a 413 at the API), not as a patch that does not apply
    def insert(patch: list[Any]) -> None:
        with transaction(pool, end_user=user) as tx:
            new = NewVersion(
                user_id=user,
                expected_version=1,
                patch=patch,
                document={},
                document_json="{}",
                checkpoint=False,
                source="api",
            )
            PostgresRecorder(tx).insert(new)

    with pytest.raises(DocumentGrowsTooLarge, match=r"operation \d+: .*while it applies"):
        insert([{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(22)])
    # And over the operations, the bounds' own error (a 422)
    with pytest.raises(PatchOverBounds, match="over the limit of 1000"):
        insert([{"op": "test", "path": "/a", "value": 1}] * 1001)


_member = st.sampled_from(["/a", "/b", "/c", "/d"])
_growing = st.one_of(
    st.builds(lambda p: {"op": "copy", "from": "", "path": p}, _member),
    st.builds(lambda f, p: {"op": "copy", "from": f, "path": p}, st.sampled_from(["/a", "/b"]), _member),
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, _member, _json),
    st.builds(lambda p, v: {"op": "replace", "path": p, "value": v}, st.sampled_from(["/a", "/b"]), _json),
    st.builds(lambda f, p: {"op": "move", "from": f, "path": p}, st.sampled_from(["/c", "/d"]), _member),
)
_BOUND = 4096


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.fixed_dictionaries({"a": _json, "b": _json}),
    chain=st.lists(_growing, min_size=1, max_size=40),
    repeat=st.integers(1, 30),
)
def test_any_chain_of_copies_moves_and_adds_stays_within_the_databases_bound(conn, doc, chain, repeat):
    # Given any document and a chain of copies (the root's too), moves, adds and replaces, repeated
    patch = (chain * repeat)[:1000]
    # When the database applies it under a bound of 4 KiB
    try:
        with conn.transaction():
            row = conn.execute(APPLY_WITHIN, (Jsonb(doc), Jsonb(patch), _BOUND)).fetchone()
    except psycopg.DatabaseError as err:
        # Then it is refused as not applying (a move from a member that is gone), or at the bound
        assert err.sqlstate in REFUSED, err
        if err.sqlstate == "UMP02":
            assert "the document grows over 4096 bytes" in str(err)
        return
    # Or it applies, and the result (every document along the way: each is refused before it is
    # built) is within the bound, and is what the service's applier gives
    assert row is not None
    result, size = row
    assert size <= _BOUND
    assert json_equal(result, apply_patch(doc, patch))


def _chain(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


def test_an_end_users_adds_and_moves_cannot_nest_the_document_deeper_than_the_service_reads(conn, store):
    # Given a user with a memory
    user = str(uuid.uuid4())
    store.append(user, {"summary": "Likes tea."}, expected_version=0, source="seed")
    # When, as an end user, it sends 12 KB of adds of 90-level chains and moves of each into the
    # next one's tail (1,100 levels once applied: stored, the service could not read it back)
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/a", "value": _chain(90)}]
    for i in range(12):
        source, target = ("/a", "/b") if i % 2 == 0 else ("/b", "/a")
        ops += [{"op": "add", "path": target, "value": _chain(90)}]
        ops += [{"op": "move", "from": source, "path": target + "/k" * 90}]
    with (
        pytest.raises(psycopg.DatabaseError, match="the patch would nest the document more than 512 levels") as err,
        conn.transaction(),
    ):
        as_end_user(conn, user)
        conn.execute(APPEND, (user, 1, Jsonb(ops), False, None, "api"))
    # Then it is refused with the bounds' SQLSTATE and nothing is written; the head reads back
    assert err.value.sqlstate == "UMP02"
    assert store.head(user).version == 1
    # And a value nested more than 255 levels is refused as the service refuses it
    with pytest.raises(psycopg.DatabaseError, match="nested more than 255 levels") as err:
        conn.execute(APPLY_WITHIN, (Jsonb({}), Jsonb([{"op": "add", "path": "/a", "value": _chain(255)}]), 10**6))
    assert err.value.sqlstate == "UMP02"
    with pytest.raises(PatchOverBounds):
        apply_patch({}, [{"op": "add", "path": "/a", "value": _chain(255)}], budget=PatchBudget(10**6))
    assert apply_patch({}, [{"op": "add", "path": "/a", "value": _chain(254)}], budget=PatchBudget(10**6))
    row = conn.execute(APPLY_WITHIN, (Jsonb({}), Jsonb([{"op": "add", "path": "/a", "value": _chain(254)}]), 10**6))
    assert row.fetchone() is not None

"""The search index off the append (migration 022): user_memory_append leaves the index behind and
user_memory_index_catch_up brings it up to the head, from the stored document, right after.

What is stated and tested here: the store (MemoryStore over PostgresRecorder) catches the index up
before its append returns, so a version is searchable, and in the companion queries, when the
write returns (the API's request: in its transaction; the worker: a transaction of its own right
after the append); the catch-up covers every version since the index's (a writer that sent no
items, a catch-up that failed), and takes nothing from its caller but the user id. The handlers'
side is in tests/e2e/test_index_freshness.py.

The session's database is shared, so each test makes its own users and reads only their rows.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors as pgerrors
from psycopg.types.json import Jsonb
from user_memory.adapters.companion import PostgresCompanion
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, transaction
from user_memory.domain.memory.patching import make_patch
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Window
from user_memory.errors import InvalidDocument

from tests.integration.roles import as_role, expected_rows, head, rows, without

pytestmark = pytest.mark.integration

SOURCE = "api: test"


def users_with_work(pool: Any) -> set[uuid.UUID]:
    """Every user the nightly fan-out would visit now (activity, ratings or open elements)."""
    end = datetime.now(UTC) + timedelta(days=1)
    window = Window(start=end - timedelta(days=1), end=end)
    return {u for page in PostgresActivity(pool).active_user_pages(window, page_size=1000) for u in page}


# Documents of the shapes the index walks: element maps (to-dos, goals, events, parts), lists,
# nested objects, sensitive and bookkeeping keys, times and recurrences.
TIMES = ["2031-05-10", "2031-05-10T09:00:00Z", "2031-05-10T09:00:00+01:00", "not a time"]
texts = st.text(alphabet="ab é~/ \t1", max_size=6)
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from([0, 2.5]), texts, st.sampled_from(TIMES))
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["note", "email", "id", "tags", "recency_score"]) | texts, inner, max_size=3)
    ),
    max_leaves=8,
)
elements = st.fixed_dictionaries(
    {},
    optional={
        "text": texts,
        "title": texts,
        "summary": texts,
        "name": texts,
        "tags": st.lists(texts, max_size=3),
        "status": st.sampled_from(["open", "done", "active"]),
        "due_date": st.sampled_from(TIMES),
        "start": st.sampled_from(TIMES),
        "end": st.sampled_from(TIMES),
        "recurrence": st.sampled_from([["RRULE:FREQ=WEEKLY;COUNT=3"], ["RRULE:FREQ=DAILY"]]),
        "phone": texts,
    },
)
element_maps = st.dictionaries(texts, st.one_of(elements, scalars), max_size=3)
TOP_KEYS = ["todos", "goals", "events", "parts", "summary", "list", "a/b"]
documents = st.dictionaries(st.sampled_from(TOP_KEYS) | texts, element_maps | values, max_size=4)


@st.composite
def edited(draw: st.DrawFn, document: dict[str, Any]) -> dict[str, Any]:
    """`document` with a few of its members or elements replaced, added or removed."""
    new = copy.deepcopy(document)
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(new) + TOP_KEYS))
        inside = new.get(key)
        if isinstance(inside, dict) and inside and draw(st.booleans()):
            element = draw(st.sampled_from(sorted(inside)))
            if draw(st.booleans()):
                del inside[element]
            else:
                inside[element] = draw(elements | scalars)
        elif key in new and draw(st.booleans()):
            del new[key]
        else:
            new[key] = draw(element_maps | values)
    return new


def append_without_items(conn: psycopg.Connection, user: uuid.UUID, expected: int, old: Any, new: Any) -> None:
    """`new` over version `expected` (document `old`) as the service, sending no item rows."""
    row = conn.execute(
        "SELECT status FROM user_memory_append(%s, %s, %s, false, %s, 'worker', NULL)",
        (user, expected, Jsonb(make_patch(old, new)), Jsonb(new)),
    ).fetchone()
    assert row == ("written",)


def catch_up(conn: psycopg.Connection, user: uuid.UUID) -> tuple[str, int]:
    row = conn.execute("SELECT status, version FROM user_memory_index_catch_up(%s)", (user,)).fetchone()
    assert row is not None
    return row[0], row[1]


def todo(text: str, due: str, status: str = "open") -> dict[str, Any]:
    return {"text": text, "due_date": due, "status": status}


def test_the_append_writes_no_rows_and_the_catch_up_writes_the_stored_documents(conn):
    user = uuid.uuid4()
    first = {"summary": "Walks the dog", "todos": {"vet": todo("Book the vet", "2031-05-10")}}
    second = {"summary": "Walks the dog daily", "todos": {"gym": todo("Renew the gym pass", "2031-05-12")}}
    # Given two versions written without item rows (the service since migration 022)
    append_without_items(conn, user, 0, {}, first)
    append_without_items(conn, user, 1, first, second)
    # Then the append wrote no row, and the index is behind the head
    assert rows(conn, user) == {}
    assert head(conn, user)[:2] == (2, 0)
    # When the index catches up
    assert catch_up(conn, user) == ("indexed", 2)
    # Then its rows are the stored head's (items.py's rules), at the head's version, and current
    assert without(rows(conn, user), "version") == expected_rows(second)
    assert {r["version"] for r in rows(conn, user).values()} == {2}
    assert head(conn, user)[:2] == (2, 2)
    assert catch_up(conn, user) == ("current", 2)
    # And a user with no memory has nothing to catch up
    assert catch_up(conn, uuid.uuid4()) == ("none", 0)


def test_the_catch_up_removes_the_rows_of_paths_gone_and_keeps_unchanged_rows_versions(conn):
    user = uuid.uuid4()
    first = {"todos": {"vet": todo("Book the vet", "2031-05-10"), "gym": todo("Renew the gym pass", "2031-05-12")}}
    append_without_items(conn, user, 0, {}, first)
    assert catch_up(conn, user) == ("indexed", 1)
    # Given versions behind that remove one to-do and add another (the other untouched)
    second = {"todos": {"gym": first["todos"]["gym"], "tax": todo("File the tax return", "2031-05-20")}}
    append_without_items(conn, user, 1, first, second)
    third = {**second, "summary": "Busy month"}
    append_without_items(conn, user, 2, second, third)
    # When the index catches up over both
    assert catch_up(conn, user) == ("indexed", 3)
    # Then the removed path's row is gone, the new ones are at the head's version, the untouched keeps its own
    found = rows(conn, user)
    assert without(found, "version") == expected_rows(third)
    assert {path: r["version"] for path, r in found.items()} == {"/todos/gym": 1, "/todos/tax": 3, "/summary": 3}


def test_an_unchanged_row_in_a_touched_section_is_not_even_locked(conn):
    user = uuid.uuid4()
    first = {"tags": ["kiln", "glaze"]}
    append_without_items(conn, user, 0, {}, first)
    assert catch_up(conn, user) == ("indexed", 1)
    # Given a version that adds an entry to the list (its section, /tags, is walked again)
    second = {"tags": ["kiln", "glaze", "wheel"]}
    append_without_items(conn, user, 1, first, second)
    # When the index catches up
    assert catch_up(conn, user) == ("indexed", 2)
    # Then the new entry is written, and the unchanged ones were not even locked (a lock is a WAL
    # record of its own): no transaction marked them
    found = conn.execute(
        "SELECT path, version, xmax::text FROM memory_items WHERE user_id = %s ORDER BY path", (user,)
    ).fetchall()
    assert found == [("/tags/0", 1, "0"), ("/tags/1", 1, "0"), ("/tags/2", 2, "0")]


def test_a_pruned_version_in_between_makes_the_catch_up_walk_the_whole_document(conn):
    user = uuid.uuid4()
    first = {"summary": "One", "tags": ["a"]}
    append_without_items(conn, user, 0, {}, first)
    assert catch_up(conn, user) == ("indexed", 1)
    # Given a row the document never had (left by an older writer) and a version behind whose row is gone
    conn.execute(
        "INSERT INTO memory_items (user_id, path, version, kind, text, value)"
        " VALUES (%s, '/stray', 1, 'leaf', 'stray: x', '\"x\"')",
        (user,),
    )
    second = {**first, "summary": "Two"}
    append_without_items(conn, user, 1, first, second)
    conn.execute("ALTER TABLE user_memory_snapshots DISABLE TRIGGER USER")
    try:
        conn.execute("DELETE FROM user_memory_snapshots WHERE user_id = %s AND version = 2", (user,))
    finally:
        conn.execute("ALTER TABLE user_memory_snapshots ENABLE TRIGGER USER")
    # When the index catches up, Then it is the whole stored document's, the stray row gone
    assert catch_up(conn, user) == ("indexed", 2)
    assert without(rows(conn, user), "version") == expected_rows(second)


def test_an_end_user_may_catch_up_only_its_own_index(conn):
    owner, other = uuid.uuid4(), uuid.uuid4()
    append_without_items(conn, owner, 0, {}, {"summary": "Private"})
    # When another end user asks for the owner's index, Then it is refused and nothing is written
    with pytest.raises(pgerrors.InsufficientPrivilege, match="may only index own memory"), conn.transaction():
        as_role(conn, "authenticated", other)
        catch_up(conn, owner)
    assert rows(conn, owner) == {}
    # And the owner may
    with conn.transaction():
        as_role(conn, "authenticated", owner)
        assert catch_up(conn, owner) == ("indexed", 1)
    assert set(rows(conn, owner)) == {"/summary"}
    # And anonymous callers may not execute it at all
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
        as_role(conn, "anon")
        catch_up(conn, owner)


def test_an_end_users_catch_up_over_its_bound_is_refused_before_any_row_is_written(conn):
    user = uuid.uuid4()
    small = {"tags": ["a", "b"]}
    append_without_items(conn, user, 0, {}, small)
    assert catch_up(conn, user) == ("indexed", 1)
    large = {"tags": list("abcdefgh")}
    append_without_items(conn, user, 1, small, large)
    # Given a bound of 5 rows a user, When the user's own catch-up would index 8
    with pytest.raises(pgerrors.InvalidParameterValue, match="search index would hold"), conn.transaction():
        conn.execute("UPDATE user_memory_settings SET value = '5' WHERE name = 'max_index_items'")
        as_role(conn, "authenticated", user)
        catch_up(conn, user)
    # Then nothing was written and the index is still behind
    assert set(rows(conn, user)) == {"/tags/0", "/tags/1"}
    assert head(conn, user)[:2] == (2, 1)


def test_the_api_stores_write_is_indexed_in_its_transaction_and_companion_queries_see_it(conn, pool):
    user = uuid.uuid4()
    document = {"todos": {"vet": todo("Book the vet", "2031-05-10")}}
    # When the API's store writes a version for an end user (in the request's transaction)
    with transaction(pool, end_user=user) as tx:
        MemoryStore(PostgresRecorder(tx)).append(user, document, expected_version=0, source=SOURCE)
        # Then the same transaction's companion query sees it already
        due = PostgresCompanion(tx).todos_due(user, datetime(2031, 5, 11, tzinfo=UTC))
        assert [r.path for r in due] == ["/todos/vet"]
    # And once committed, the index is at the head
    assert head(conn, user)[:2] == (1, 1)


def test_the_api_stores_write_over_the_index_bound_is_refused_whole(conn, pool):
    user = uuid.uuid4()
    conn.execute("UPDATE user_memory_settings SET value = '3' WHERE name = 'max_index_items'")
    try:
        # When the API's store writes 5 items for an end user under a bound of 3
        with pytest.raises(InvalidDocument, match="search index would hold"), transaction(pool, end_user=user) as tx:
            MemoryStore(PostgresRecorder(tx)).append(user, {"tags": list("abcde")}, expected_version=0, source=SOURCE)
    finally:
        conn.execute("UPDATE user_memory_settings SET value = '20000' WHERE name = 'max_index_items'")
    # Then the version went with its index: nothing was written
    assert conn.execute("SELECT count(*) FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone() == (0,)


def test_a_failed_catch_up_outside_a_transaction_leaves_the_version_for_the_next_catch_up(conn, pool, monkeypatch):
    user = uuid.uuid4()
    store = MemoryStore(PostgresRecorder(pool))
    # Given a catch-up statement that fails (the database refuses it)
    monkeypatch.setattr("user_memory.adapters.postgres._CATCH_UP", "SELECT status FROM no_such_catch_up(%s)")
    # When the service's store appends outside a transaction (the worker's)
    result = store.append(user, {"summary": "Written anyway"}, expected_version=0, source="worker")
    # Then the version is written and the index stays behind for the next catch-up
    assert result.version == 1
    assert head(conn, user)[:2] == (1, 0)
    monkeypatch.undo()
    # And the next write's catch-up covers it
    store.append(user, {"summary": "Written anyway", "tags": ["x"]}, expected_version=1, source="worker")
    assert head(conn, user)[:2] == (2, 2)
    assert set(rows(conn, user)) == {"/summary", "/tags/0"}


def test_an_open_to_do_puts_its_user_into_the_fan_out_when_the_append_returns(conn, pool):
    user = uuid.uuid4()
    store = MemoryStore(PostgresRecorder(pool))
    # When the service's store writes an open to-do (outside a transaction, as the worker does)
    store.append(user, {"todos": {"vet": todo("Book the vet", "2031-05-10")}}, expected_version=0, source="worker")
    # Then, when the append returns, the fan-out's users with open elements include the user
    assert user in users_with_work(pool)
    # And once the to-do is done, they no longer do (for it)
    store.append(
        user, {"todos": {"vet": todo("Book the vet", "2031-05-10", "done")}}, expected_version=1, source="worker"
    )
    assert user not in users_with_work(pool)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), first=documents)
def test_the_services_index_is_the_stored_heads_items_after_every_append(pool, conn, data, first):
    # Given any document and any edits of it, written by the service's store
    user = uuid.uuid4()
    store = MemoryStore(PostgresRecorder(pool))
    version = store.append(user, first, expected_version=0, source="worker").version
    document = first
    for _ in range(data.draw(st.integers(1, 3))):
        document = data.draw(edited(document))
        version = store.append(user, document, expected_version=version, source="worker").version
    if version == 0:
        return  # every document was empty: nothing written, nothing to index
    # Then when the append returns, the index is the stored head's items
    stored_version, indexed, stored = head(conn, user)
    assert indexed == stored_version == version
    assert without(rows(conn, user), "version", "recur_until") == without(expected_rows(stored), "recur_until")

"""An end user's search index is its stored document's (migration 020).

As `authenticated` (Supabase's Data API, and the API's own requests), user_memory_append takes
item rows (p_items) for the version; the database derives the rows of the sections the patch
touched from the stored result document itself, whatever was sent: no row for a path the
document does not hold, no row that outlives its path, and the user's rows bounded. The service's
rows are the ones it diffed (tests/integration/test_companion_sql.py).

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
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, transaction
from user_memory.domain.companion.items import item_changes
from user_memory.domain.companion.times import parse_when
from user_memory.domain.memory.patching import make_patch
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Window
from user_memory.errors import InvalidDocument

from tests.integration.roles import as_role, expected_rows, head, rows, without

pytestmark = pytest.mark.integration

SOURCE = "api: test"


def append_as_user(
    conn: psycopg.Connection, user: uuid.UUID, expected: int, old: dict[str, Any], new: dict[str, Any], items: Any
) -> tuple[str, int]:
    """`new` written as the end user `user` over version `expected` (whose document is `old`), with
    `items` as its item rows, in a transaction of its own."""
    with conn.transaction():
        as_role(conn, "authenticated", user)
        row = conn.execute(
            "SELECT status, version FROM user_memory_append(%s, %s, %s, false, %s, %s, NULL, NULL, NULL, %s)",
            (user, expected, Jsonb(make_patch(old, new)), Jsonb(new), SOURCE, Jsonb(items)),
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def open_todo(path: str) -> dict[str, Any]:
    return {
        "path": path,
        "kind": "todo",
        "text": "todo: planted",
        "value": {"text": "planted", "status": "open"},
        "status": "open",
        "due_at": "2026-01-01T00:00:00+00:00",
    }


def users_with_work(pool: Any) -> set[uuid.UUID]:
    """Every user the nightly fan-out would visit now (activity, ratings or open elements)."""
    end = datetime.now(UTC) + timedelta(days=1)
    window = Window(start=end - timedelta(days=1), end=end)
    return {u for page in PostgresActivity(pool).active_user_pages(window, page_size=1000) for u in page}


# -- the reproductions ----------------------------------------------------------------------------


def test_a_tiny_document_gets_no_index_rows_however_many_are_sent(conn):
    user = uuid.uuid4()
    # Given an end user's rows that no document holds: about 7.8 MB of them (within the bound the
    # function puts on what it takes at all)
    limit = conn.execute("SELECT value::integer FROM user_memory_settings WHERE name = 'max_document_bytes'").fetchone()
    assert limit is not None
    budget = min(7_800_000, 15 * limit[0])
    row = {"path": "/x/0", "kind": "leaf", "text": "x: " + "y" * 4000, "value": "y"}
    sent = [row | {"path": f"/x/{i}"} for i in range(budget // 4100)]
    # When it writes a 2-byte document with them
    assert append_as_user(conn, user, 0, {}, {}, sent) == ("written", 1)
    # Then the index holds nothing (the document has no item), and it is in step with the head
    assert rows(conn, user) == {}
    assert head(conn, user)[:2] == (1, 1)


def test_an_injected_open_to_do_does_not_put_the_user_into_the_fan_out(conn, pool):
    user = uuid.uuid4()
    # Given an end user whose document has no to-do, When it sends an open to-do's row with it
    document = {"summary": "likes tea", "todos": {}}
    assert append_as_user(conn, user, 0, {}, document, [open_todo("/todos/planted")]) == ("written", 1)
    # Then the nightly fan-out does not list the user, and there is no such row
    assert user not in users_with_work(pool)
    assert "/todos/planted" not in rows(conn, user)
    # And not either when a later version touches the to-dos and sends the row again
    later = document | {"todos": {"real": {"text": "buy milk", "status": "done"}}}
    assert append_as_user(conn, user, 1, document, later, [open_todo("/todos/planted")]) == ("written", 2)
    assert set(rows(conn, user)) == {"/summary", "/todos/real"}
    assert rows(conn, user)["/todos/real"]["status"] == "done"
    assert user not in users_with_work(pool)


def test_a_row_at_a_path_the_document_no_longer_has_is_removed(conn):
    user = uuid.uuid4()
    first = {"todos": {"a": {"text": "call mum", "status": "open"}, "b": {"text": "pay rent"}}, "note": "hello"}
    assert append_as_user(conn, user, 0, {}, first, item_changes({}, first, make_patch({}, first))) == ("written", 1)
    assert set(rows(conn, user)) == {"/todos/a", "/todos/b", "/note"}
    # When a version removes to-do a and the note, and its rows leave out the removals
    second = {"todos": {"b": {"text": "pay rent"}}}
    assert append_as_user(conn, user, 1, first, second, []) == ("written", 2)
    # Then their rows are gone, and the untouched to-do keeps its row and version
    found = rows(conn, user)
    assert set(found) == {"/todos/b"}
    assert found["/todos/b"]["version"] == 1


# -- what is taken from the rows sent, and what is not ------------------------------------------------


def test_a_row_sent_with_another_status_or_text_is_the_documents(conn):
    user = uuid.uuid4()
    document = {
        "todos": {"a": {"text": "call mum", "status": "done", "due_date": "2026-03-01"}},
        "notes": {"long": "é\u2003" * 2500 + " "},
    }
    sent = [open_todo("/todos/a") | {"text": "todo: something else", "due_at": "2020-01-01T00:00:00+00:00"}]
    assert append_as_user(conn, user, 0, {}, document, sent) == ("written", 1)
    assert without(rows(conn, user), "version") == expected_rows(document)
    assert rows(conn, user)["/todos/a"]["status"] == "done"


def test_a_recurring_events_end_is_taken_from_its_row_within_bounds(conn):
    user = uuid.uuid4()
    event = {"summary": "standup", "start": "2026-02-02T09:00:00Z", "recurrence": ["RRULE:FREQ=DAILY;COUNT=3"]}
    document = {"events": {"s": event}, "note": "x"}
    honest = item_changes({}, document, make_patch({}, document))
    assert append_as_user(conn, user, 0, {}, document, honest) == ("written", 1)
    # The service's computation gives its last occurrence; the database keeps what was sent
    assert rows(conn, user)["/events/s"]["recur_until"] == datetime(2026, 2, 4, 9, tzinfo=UTC)
    assert without(rows(conn, user), "version") == expected_rows(document)
    # When a later version leaves the event alone, its end is kept
    later = document | {"note": "y"}
    assert append_as_user(conn, user, 1, document, later, item_changes(document, later, make_patch(document, later)))
    assert rows(conn, user)["/events/s"]["recur_until"] == datetime(2026, 2, 4, 9, tzinfo=UTC)
    # When an end date out of range, or not a time, is sent for it, the event recurs for ever
    current, version = later, 2
    for n, bad in enumerate(["9999-01-01T00:00:00+00:00", "today", 5]):
        moved = current | {"events": {"s": event | {"summary": f"standup {n}"}}}
        sent = [r | {"recur_until": bad} for r in item_changes(current, moved, make_patch(current, moved))]
        assert append_as_user(conn, user, version, current, moved, sent) == ("written", version + 1)
        assert rows(conn, user)["/events/s"]["recur_until"] is None
        current, version = moved, version + 1


def test_an_unchanged_item_keeps_its_version(conn):
    user = uuid.uuid4()
    first = {"todos": {"a": {"text": "call mum"}, "b": {"text": "pay rent"}}}
    assert append_as_user(conn, user, 0, {}, first, []) == ("written", 1)
    # When the whole document is replaced with one that changes only to-do b
    second = {"todos": {"a": {"text": "call mum"}, "b": {"text": "pay the rent"}}}
    with conn.transaction():
        as_role(conn, "authenticated", user)
        conn.execute(
            "SELECT user_memory_append(%s, 1, %s, false, NULL, %s, NULL, NULL, NULL, '[]')",
            (user, Jsonb([{"op": "replace", "path": "", "value": second}]), SOURCE),
        )
    found = rows(conn, user)
    assert (found["/todos/a"]["version"], found["/todos/b"]["version"]) == (1, 2)


def test_without_rows_the_index_is_left_behind_as_before(conn):
    user = uuid.uuid4()
    document = {"note": "hello"}
    with conn.transaction():
        as_role(conn, "authenticated", user)
        conn.execute(
            "SELECT user_memory_append(%s, 0, %s, false, %s, %s, NULL)",
            (user, Jsonb(make_patch({}, document)), Jsonb(document), SOURCE),
        )
    assert head(conn, user)[:2] == (1, 0)
    assert rows(conn, user) == {}


@pytest.mark.parametrize(("setting", "value"), [("max_index_items", "5"), ("max_index_bytes", "600")])
def test_an_end_users_index_over_its_bound_is_refused_and_nothing_is_written(conn, setting, value):
    user = uuid.uuid4()
    small = {"tags": ["a", "b"]}
    assert append_as_user(conn, user, 0, {}, small, []) == ("written", 1)
    # Given a bound on a user's rows (the owner's settings row), When the user writes a document
    # of more items, or more bytes, than it allows (a long key repeated in every item's text)
    large = {"k" * 200: ["a", "b", "c", "d", "e", "f"]}
    with pytest.raises(pgerrors.InvalidParameterValue, match="search index would hold"), conn.transaction():
        conn.execute("UPDATE user_memory_settings SET value = %s WHERE name = %s", (value, setting))
        as_role(conn, "authenticated", user)
        conn.execute(
            "SELECT user_memory_append(%s, 1, %s, false, %s, %s, NULL, NULL, NULL, '[]')",
            (user, Jsonb(make_patch(small, large)), Jsonb(large), SOURCE),
        )
    # Then the version and its rows were all rolled back
    assert head(conn, user)[:2] == (1, 1)
    assert set(rows(conn, user)) == {"/tags/0", "/tags/1"}


def test_the_api_store_answers_an_index_over_its_bound_as_an_invalid_document(conn, pool):
    user = uuid.uuid4()
    # Given a bound of 3 rows a user, When the API's store writes 5 items for an end user
    conn.execute("UPDATE user_memory_settings SET value = '3' WHERE name = 'max_index_items'")
    try:
        with pytest.raises(InvalidDocument, match="search index would hold"), transaction(pool, end_user=user) as tx:
            MemoryStore(PostgresRecorder(tx)).append(user, {"tags": list("abcde")}, expected_version=0, source=SOURCE)
    finally:
        conn.execute("UPDATE user_memory_settings SET value = '20000' WHERE name = 'max_index_items'")
    # Then it is a typed error the API answers with 422, and nothing was written
    assert conn.execute("SELECT count(*) FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone() == (0,)
    assert rows(conn, user) == {}


# -- the property: an end user's index is what the service computes for the stored document -------

TIMES = [
    "2026-03-01",
    "2026-02-30",
    "2026-03-01T10:00:00+02:00",
    "2026-03-01T10:00Z",
    "2026-03-01T24:00:00Z",
    "2026-03-01T10:00:60Z",
    "2026-03-01T10:00:00.1234567Z",
    "2026-03-01T10:00:00.5-03:30",
    "2026-03-01T10:00:00+05:60",
    "2026-03-01T10:00:00+16:00",
    "2026-03-01t10:00:00z",
    "1899-12-31T23:00:00-01:00",
    "1900-01-01",
    "2999-12-31T23:59:59.999999-00:30",
    "3000-01-01",
    "today",
    "\u0662\u0660\u0662\u0666-03-01",
    " 2026-03-01",
]
RULES = [
    ["RRULE:FREQ=DAILY;COUNT=3"],
    ["RRULE:FREQ=WEEKLY;UNTIL=20260401T000000Z"],
    "RRULE:FREQ=DAILY",
    [],
    [1],
    {"a": 1},
    True,
    5,
    0,
    None,
]
KEYS = ["note", "summary", "name", "id", "email", "phone", "status", "a/b", "t~x", "", "recency_score", "tags"]
TOP_KEYS = ["todos", "goals", "events", "parts", "basic_info", "summary", "email", "version", "a/b", "list"]
ALPHABET = "ab é·~/ \t\n\u2003\u00a0\x1c\u3000\u200b1"

texts = st.text(alphabet=ALPHABET, max_size=6)
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from([0, 0.0, 2, 2.5, -3]), texts, st.sampled_from(TIMES))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | texts, inner, max_size=3),
    max_leaves=8,
)
elements = st.fixed_dictionaries(
    {},
    optional={
        "text": texts,
        "title": texts,
        "summary": texts,
        "name": texts,
        "notes": values,
        "tags": st.lists(texts, max_size=3),
        "goals": values,
        "attendees": st.lists(st.fixed_dictionaries({"name": texts, "email": texts}), max_size=2),
        "status": st.sampled_from(["open", "in_progress", "done", "active", "", 5]),
        "due_date": st.sampled_from(TIMES) | scalars,
        "target_date": st.sampled_from(TIMES),
        "start": st.sampled_from(TIMES) | scalars,
        "end": st.sampled_from(TIMES) | scalars,
        "recurrence": st.sampled_from(RULES),
        "timezone": st.sampled_from(["Europe/Paris", "Nowhere/Zone", 5]),
        "id": texts,
        "recency_score": st.sampled_from([0.5, 0.9]),
        "phone": texts,
    },
)
element_maps = st.dictionaries(texts, st.one_of(elements, scalars), max_size=3)
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


@st.composite
def hostile(draw: st.DrawFn, honest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The honest rows with some left out, some changed, and some planted."""
    sent = [
        row | ({"status": "open", "text": "todo: planted"} if draw(st.booleans()) else {})
        for row in honest
        if draw(st.booleans())
    ]
    planted = draw(st.lists(st.sampled_from(["/todos/planted", "/note", "/goals/x", "/list/0"]), max_size=3))
    return sent + [open_todo(path) for path in planted]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), first=documents)
def test_an_end_users_index_is_the_services_items_of_the_stored_document(conn, data, first):
    user = uuid.uuid4()
    second = data.draw(edited(first))
    honest = data.draw(st.booleans())
    # Given an end user's first version with the service's own rows for it
    assert append_as_user(conn, user, 0, {}, first, item_changes({}, first, make_patch({}, first)))[0] == "written"
    # When the second is written with the service's rows, or with rows changed, left out and planted
    changes = item_changes(first, second, make_patch(first, second))
    sent = changes if honest else data.draw(hostile(changes))
    assert append_as_user(conn, user, 1, first, second, sent)[0] == "written"
    # Then the rows are the service's items of the stored document, in step with the head
    version, indexed, stored = head(conn, user)
    assert (version, indexed) == (2, 2)
    found = rows(conn, user)
    expected = expected_rows(stored)
    if honest:
        assert without(found, "version") == expected
    else:
        # (only a recurring event's end comes from the rows sent; otherwise there is none)
        assert without(found, "version", "recur_until") == without(expected, "recur_until")
        assert all(row["recur_until"] is None for row in found.values() if not row["recurring"])


# -- the database's items.py, directly: the same items and times as the service's for any input ---

unicode_texts = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8)
any_documents = st.dictionaries(
    st.sampled_from(TOP_KEYS) | unicode_texts,
    st.dictionaries(unicode_texts, elements | st.dictionaries(unicode_texts, unicode_texts), max_size=3)
    | st.recursive(
        unicode_texts | st.none(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(unicode_texts, inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)
DIGIT = "[0-9]"
TIME_LIKE = (
    rf"{DIGIT}{{4}}-{DIGIT}{{2}}-{DIGIT}{{2}}"
    rf"(T{DIGIT}{{2}}:{DIGIT}{{2}}(:{DIGIT}{{2}}(\.{DIGIT}{{1,7}})?)?(Z|[+-]{DIGIT}{{2}}:{DIGIT}{{2}})?)?"
)


def parsed(value: str) -> datetime | None:
    try:
        return parse_when(value)
    except ValueError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=any_documents)
def test_the_databases_items_of_any_document_are_the_services(conn, document):
    stored = conn.execute("SELECT %s::jsonb", (Jsonb(document),)).fetchone()
    assert stored is not None
    found = conn.execute(
        "SELECT item_path, item_kind, item_text, item_value, item_status, item_due_at, item_starts_at, item_ends_at,"
        " item_recurring FROM user_memory_index_items(%s, NULL, 1000000)",
        (Jsonb(stored[0]),),
    ).fetchall()
    names = ["path", "kind", "text", "value", "status", "due_at", "starts_at", "ends_at", "recurring"]
    got = {r[0]: dict(zip(names, r, strict=True)) for r in found}
    assert got == without(expected_rows(stored[0]), "recur_until")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.from_regex(TIME_LIKE, fullmatch=True) | st.from_regex(r"\d{4}-\d{2}-\d{2}", fullmatch=True) | texts)
def test_the_databases_times_are_parse_whens(conn, value):
    row = conn.execute("SELECT user_memory_index_when(%s)", (Jsonb(value),)).fetchone()
    assert row is not None
    assert row[0] == parsed(value)

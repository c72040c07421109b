"""The companion layer and the search index on PostgreSQL (migration 012): items written with the
version, the element queries and their partial indexes, row-level security, the functions'
owner checks, reindexing, erase, and digests.

The session's database is shared with every other test, so each test makes its own users (uuid)
and checks only their rows, never table-wide counts.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.types.json import Jsonb
from user_memory.adapters.companion import _EVENTS, _GOALS_ACTIVE, _TODOS_DUE, PostgresCompanion
from user_memory.adapters.search import PostgresSearch
from user_memory.domain.companion.elements import Rating, complete, events_between, update
from user_memory.domain.companion.items import document_items, reindex
from user_memory.domain.memory.document import validate_document
from user_memory.domain.model import MemoryVersion
from user_memory.errors import VersionConflict

from tests.integration.roles import as_role

pytestmark = pytest.mark.integration

SOURCE = "api: test"
RATED_AT = datetime(2026, 3, 3, 12, tzinfo=UTC)


def memory() -> dict[str, Any]:
    """A companion document: to-dos in every status, goals, one-off and recurring events."""
    return validate_document(
        {
            "basic_info": {"name": "Sam", "email": "owner@example.com", "timezone": "America/New_York"},
            "advanced_info": {"occupation": "nurse"},
            "goals": {
                "run": {"id": "run", "title": "Run a marathon", "target_date": "2026-10-01"},
                "read": {"id": "read", "title": "Read 12 books", "target_date": "2026-04-01"},
                "swim": {"id": "swim", "title": "Learn to swim"},
                "paused": {"id": "paused", "title": "Learn the piano", "status": "paused", "target_date": "2026-03-15"},
                "done": {"id": "done", "title": "Quit sugar", "status": "completed", "target_date": "2026-03-10"},
            },
            "todos": {
                "shoes": {"id": "shoes", "text": "Buy running shoes", "due_date": "2026-03-01"},
                "clinic": {
                    "id": "clinic",
                    "text": "Call the clinic",
                    "status": "in_progress",
                    "due_date": "2026-03-02T10:00:00+02:00",
                },
                "tax": {"id": "tax", "text": "File taxes", "status": "done", "due_date": "2026-02-28"},
                "gym": {"id": "gym", "text": "Cancel the gym", "status": "cancelled", "due_date": "2026-02-27"},
                "later": {"id": "later", "text": "Plan the holiday", "due_date": "2026-03-20"},
                "someday": {"id": "someday", "text": "Learn to juggle"},
            },
            "events": {
                "dentist": {
                    "id": "dentist",
                    "summary": "Dentist",
                    "start": "2026-03-10T15:00:00Z",
                    "end": "2026-03-10T16:00:00Z",
                },
                "standup": {
                    "id": "standup",
                    "summary": "Team standup",
                    "start": "2026-02-02T09:00:00-05:00",
                    "end": "2026-02-02T09:15:00-05:00",
                    "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO"],
                },
                "course": {
                    "id": "course",
                    "summary": "First-aid course",
                    "start": "2026-02-03T18:00:00Z",
                    "end": "2026-02-03T20:00:00Z",
                    "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=2"],
                },
                "concert": {"id": "concert", "summary": "Concert", "start": "2026-04-01T20:00:00Z"},
                "trip": {
                    "id": "trip",
                    "summary": "Trip",
                    "start": "2026-03-12",
                    "end": "2026-03-14",
                    "status": "cancelled",
                },
            },
        },
        "companion",
    )


def items(conn: psycopg.Connection, user: uuid.UUID) -> dict[str, tuple[int, str]]:
    """The user's items: path -> (version, text)."""
    rows = conn.execute("SELECT path, version, text FROM memory_items WHERE user_id = %s ORDER BY path", (user,))
    return {r[0]: (r[1], r[2]) for r in rows}


def indexed_version(conn: psycopg.Connection, user: uuid.UUID) -> tuple[int, int]:
    row = conn.execute("SELECT version, indexed_version FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()
    assert row is not None
    return row[0], row[1]


def behind(index: PostgresSearch) -> set[uuid.UUID]:
    return {u for page in index.users_behind(page_size=100) for u in page}


@pytest.fixture
def companion(pool) -> PostgresCompanion:
    return PostgresCompanion(pool)


@pytest.fixture
def index(pool) -> PostgresSearch:
    """The search index's upkeep (every schema's)."""
    return PostgresSearch(pool)


@pytest.fixture
def user(store) -> uuid.UUID:
    """A user whose version 1 is the companion document above."""
    u = uuid.uuid4()
    assert store.append(u, memory(), expected_version=0, source=SOURCE).version == 1
    return u


# -- items are written with the version ------------------------------------------------------------


def test_the_first_version_writes_every_item_in_its_transaction(conn, user):
    # Given a user whose first version was written through the store
    # Then every item of the document is there, at version 1, with its text
    expected = {path: (1, item.text) for path, item in document_items(memory()).items()}
    assert items(conn, user) == expected
    assert "/basic_info/email" not in expected
    assert len(expected) == 19
    # And the index is in step with the head
    assert indexed_version(conn, user) == (1, 1)


def test_an_item_untouched_by_a_later_version_keeps_its_version(conn, store, user):
    # Given version 2 completes one to-do, version 3 renames one event
    head = store.head(user)
    store.append(user, complete("todos", "shoes")(head.document), expected_version=1, source=SOURCE)
    head = store.head(user)
    store.append(
        user,
        update("events", "dentist", {"summary": "Dentist check-up"})(head.document),
        expected_version=2,
        source=SOURCE,
    )
    # Then each changed item carries the version that changed it, and every other item keeps 1
    got = items(conn, user)
    assert got["/todos/shoes"] == (2, "todo: Buy running shoes")
    assert got["/events/dentist"] == (3, "event: Dentist check-up")
    assert {path for path, (version, _) in got.items() if version != 1} == {"/todos/shoes", "/events/dentist"}
    status = conn.execute(
        "SELECT status FROM memory_items WHERE user_id = %s AND path = '/todos/shoes'", (user,)
    ).fetchone()
    assert status == ("done",)
    assert indexed_version(conn, user) == (3, 3)


def test_a_removed_element_leaves_the_index(conn, store, user):
    # Given a version that deletes the concert
    document = store.head(user).document
    del document["events"]["concert"]
    store.append(user, document, expected_version=1, source=SOURCE)
    # Then its item is gone and the others stay
    got = items(conn, user)
    assert "/events/concert" not in got
    assert len(got) == 18


def test_a_conflicting_append_writes_no_items(conn, store, user):
    # Given version 2 is written
    head = store.head(user)
    store.append(
        user, update("todos", "tax", {"text": "File taxes online"})(head.document), expected_version=1, source=SOURCE
    )
    before = items(conn, user)
    # When a writer still holding version 1 appends (its stale head handed in, so the database decides)
    stale = MemoryVersion(version=1, document=memory(), created_at=None, source=SOURCE)
    changed = update("todos", "later", {"text": "Plan the summer"})(memory())
    with pytest.raises(VersionConflict):
        store.append(user, changed, expected_version=1, source=SOURCE, base=stale)
    # Then no item changed and no version was written
    assert items(conn, user) == before
    assert before["/todos/later"] == (1, "todo: Plan the holiday")
    assert indexed_version(conn, user) == (2, 2)


def test_an_append_that_fails_on_an_item_writes_nothing(conn, user):
    # Given version 1, When version 2 arrives with one good item and one that breaks a constraint
    good = document_items(memory())["/todos/tax"].row() | {"text": "todo: File taxes now"}
    bad = good | {"path": "no-leading-slash"}
    with pytest.raises(pgerrors.CheckViolation):
        conn.execute(
            "SELECT * FROM user_memory_append(%s, 1, %s, false, %s, %s, NULL, NULL, NULL, %s)",
            (
                user,
                Jsonb([{"op": "add", "path": "/x", "value": 1}]),
                Jsonb(memory() | {"x": 1}),
                SOURCE,
                Jsonb([good, bad]),
            ),
        )
    # Then the version, the head and the good item were all rolled back
    assert indexed_version(conn, user) == (1, 1)
    assert items(conn, user)["/todos/tax"] == (1, "todo: File taxes")
    assert conn.execute("SELECT max(version) FROM user_memory_snapshots WHERE user_id = %s", (user,)).fetchone() == (1,)


# -- the element queries ----------------------------------------------------------------------------


def test_todos_due_before_a_time_are_the_open_ones_in_due_order(companion, user):
    # Given to-dos open, in progress, done and cancelled, due before and after 5 March, and one undated
    # When those due before 5 March are asked for
    due = companion.todos_due(user, datetime(2026, 3, 5, tzinfo=UTC))
    # Then the open and in-progress ones come back, soonest first, with their version and value
    assert [(r.path, r.version) for r in due] == [("/todos/shoes", 1), ("/todos/clinic", 1)]
    assert due[1].value == memory()["todos"]["clinic"]
    # And the limit and the bound apply
    assert [r.path for r in companion.todos_due(user, datetime(2026, 4, 1, tzinfo=UTC), limit=2)] == [
        "/todos/shoes",
        "/todos/clinic",
    ]
    assert [r.path for r in companion.todos_due(user, datetime(2026, 4, 1, tzinfo=UTC))] == [
        "/todos/shoes",
        "/todos/clinic",
        "/todos/later",
    ]
    assert companion.todos_due(user, datetime(2026, 3, 1, tzinfo=UTC)) == []


def test_events_in_a_range_include_a_recurring_ones_occurrence(companion, user):
    # Given a one-off dentist visit on 10 March, a weekly standup since February, a course that
    # ended in February, a concert in April and a cancelled trip on 12 March
    # When the week of 9 March is asked for
    found = events_between(companion, user, datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 16, tzinfo=UTC))
    # Then the standup's occurrence of that week and the dentist come back, by start
    assert [(o["path"], o["occurrence_start"], o["occurrence_end"], o["version"]) for o in found] == [
        ("/events/standup", "2026-03-09T09:00:00-05:00", "2026-03-09T09:15:00-05:00", 1),
        ("/events/dentist", "2026-03-10T15:00:00+00:00", "2026-03-10T16:00:00+00:00", 1),
    ]
    assert found[0]["event"] == memory()["events"]["standup"]
    # And February's second week has the standup and the course's last occurrence
    february = events_between(companion, user, datetime(2026, 2, 9, tzinfo=UTC), datetime(2026, 2, 16, tzinfo=UTC))
    assert [(o["id"], o["occurrence_start"]) for o in february] == [
        ("standup", "2026-02-09T09:00:00-05:00"),
        ("course", "2026-02-10T18:00:00+00:00"),
    ]


def test_a_recurring_all_day_event_as_google_writes_it_is_found_in_range(store, companion):
    # Given a weekly all-day event with a date UNTIL and a date EXDATE (Google's form for all-day events)
    u = uuid.uuid4()
    market = {
        "id": "market",
        "summary": "Farmers market",
        "start": "2026-03-07",
        "end": "2026-03-08",
        "recurrence": ["RRULE:FREQ=WEEKLY;UNTIL=20260328", "EXDATE;VALUE=DATE:20260314"],
    }
    store.append(u, validate_document({"events": {"market": market}}, "companion"), expected_version=0, source=SOURCE)
    # When March and April are asked for
    found = events_between(companion, u, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    # Then every Saturday through the 28th but the 14th comes back, and April has none
    assert [o["occurrence_start"] for o in found] == [
        "2026-03-07T00:00:00+00:00",
        "2026-03-21T00:00:00+00:00",
        "2026-03-28T00:00:00+00:00",
    ]
    assert events_between(companion, u, datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)) == []


def test_active_goals_are_ordered_by_target_date(companion, user):
    # Given active goals with targets in April and October and one without, a paused and a completed one
    # When the active goals are asked for
    goals = companion.active_goals(user)
    # Then the active ones come back, nearest target first, the undated last
    assert [g.path for g in goals] == ["/goals/read", "/goals/run", "/goals/swim"]
    # And with a bound only those due before it
    assert [g.path for g in companion.active_goals(user, target_before=datetime(2026, 5, 1, tzinfo=UTC))] == [
        "/goals/read"
    ]


def plan(conn: psycopg.Connection, query: str, params: Any) -> str:
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + query, params).fetchall()
    return "\n".join(r[0] for r in rows)


def test_the_queries_use_the_partial_indexes(conn, user):
    # Given the adapter's three queries, with sequential scans off (a small table would not need an index)
    start, end = datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 16, tzinfo=UTC)
    # When they are explained
    todos = plan(conn, _TODOS_DUE, (user, end, 500))
    events = plan(conn, _EVENTS, {"u": user, "start": start, "end": end})
    goals = plan(conn, _GOALS_ACTIVE, (user, None, None, 500))
    goals_before = plan(conn, _GOALS_ACTIVE, (user, end, end, 500))
    # Then each reads its own partial index
    assert "idx_memory_items_todos_open" in todos, todos
    assert "idx_memory_items_events" in events, events
    assert "idx_memory_items_goals_active" in goals, goals
    assert "idx_memory_items_goals_active" in goals_before, goals_before


# -- row-level security -----------------------------------------------------------------------------


@pytest.fixture
def two_users(store, companion):
    """Two users, each with items, a rating and a digest."""
    users = uuid.uuid4(), uuid.uuid4()
    for u in users:
        store.append(u, memory(), expected_version=0, source=SOURCE)
        companion.record_rating(u, Rating(interaction_id="chat-1", rating=5, comment="kind", rated_at=RATED_AT))
        companion.save_digest(u, date(2026, 3, 3), {"todos_due": []}, 1)
    return users


def test_an_end_user_sees_only_its_own_items_ratings_and_digests(conn, two_users):
    a, b = two_users
    with conn.transaction():
        # Given user a's claims
        as_role(conn, "authenticated", a)
        # When a reads each table, asking for both users
        for table in ("memory_items", "feedback_ratings", "daily_digests"):
            got = conn.execute(
                sql.SQL("SELECT user_id, count(*) FROM {} WHERE user_id IN (%s, %s) GROUP BY user_id").format(
                    sql.Identifier(table)
                ),
                (a, b),
            ).fetchall()
            # Then only a's rows come back
            assert [r[0] for r in got] == [a], table
        assert conn.execute("SELECT count(*) FROM memory_items WHERE user_id = %s", (a,)).fetchone() == (19,)


def test_an_end_user_without_claims_sees_nothing(conn, two_users):
    a, _ = two_users
    with conn.transaction():
        as_role(conn, "authenticated")
        assert conn.execute("SELECT count(*) FROM memory_items WHERE user_id = %s", (a,)).fetchone() == (0,)


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param(
            """INSERT INTO memory_items (user_id, path, version, kind, text, value)
               VALUES (%s, '/x', 1, 'leaf', 'x', '1')""",
            id="insert",
        ),
        pytest.param("UPDATE memory_items SET text = 'changed' WHERE user_id = %s", id="update"),
        pytest.param("DELETE FROM memory_items WHERE user_id = %s", id="delete"),
        pytest.param("UPDATE feedback_ratings SET summarized_version = 9 WHERE user_id = %s", id="rating-update"),
        pytest.param("DELETE FROM daily_digests WHERE user_id = %s", id="digest-delete"),
    ],
)
def test_an_end_user_cannot_write_the_tables_directly(conn, two_users, statement):
    a, _ = two_users
    before = items(conn, a)
    # Given user a's claims, When a writes its own rows directly, Then the privilege is missing
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(statement, (a,))
    assert items(conn, a) == before


# -- ratings ----------------------------------------------------------------------------------------


def record(conn: psycopg.Connection, user: uuid.UUID, interaction: str, value: int, comment: str = "") -> str:
    row = conn.execute(
        "SELECT user_memory_record_rating(%s, %s, %s, %s, %s, %s)",
        (user, interaction, value, ["tone"], comment, RATED_AT),
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_an_end_user_cannot_rate_for_another_user(conn, two_users):
    a, b = two_users
    # Given user a's claims, When a records a rating for b, Then it is refused with 42501
    with pytest.raises(pgerrors.InsufficientPrivilege, match="may only write own rows") as err, conn.transaction():
        as_role(conn, "authenticated", a)
        record(conn, b, "chat-9", 1, "from someone else")
    assert err.value.sqlstate == "42501"
    assert conn.execute("SELECT count(*) FROM feedback_ratings WHERE user_id = %s", (b,)).fetchone() == (1,)


def test_an_end_user_records_its_own_ratings(conn, two_users, companion):
    a, _ = two_users
    # Given user a's claims
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # When a rates an interaction, then sends the same rating again
        assert record(conn, a, "chat-2", 2, "too long") == "created"
        assert record(conn, a, "chat-2", 2, "too long") == "unchanged"
    # And the nightly run summarizes it
    rows = conn.execute(
        "SELECT id FROM feedback_ratings WHERE user_id = %s AND interaction_id = 'chat-2'", (a,)
    ).fetchall()
    assert companion.mark_ratings(a, [rows[0][0]], 4) == 1
    with conn.transaction():
        as_role(conn, "authenticated", a)
        # And the same rating again leaves it summarized; a changed one is summarized again
        assert record(conn, a, "chat-2", 2, "too long") == "unchanged"
        assert conn.execute(
            "SELECT summarized_version FROM feedback_ratings WHERE user_id = %s AND interaction_id = 'chat-2'", (a,)
        ).fetchone() == (4,)
        assert record(conn, a, "chat-2", 4, "better after the edit") == "updated"
    # Then the rating holds the new values and waits for the next summary
    row = conn.execute(
        """SELECT rating, tags, comment, summarized_version FROM feedback_ratings
            WHERE user_id = %s AND interaction_id = 'chat-2'""",
        (a,),
    ).fetchone()
    assert row == (4, ["tone"], "better after the edit", None)
    assert [r.interaction_id for r in companion.unsummarized_ratings(a)] == ["chat-1", "chat-2"]


def test_the_adapter_records_ratings_through_the_function(companion):
    u = uuid.uuid4()
    rating = Rating(interaction_id="chat-1", rating=3, tags=("tone",), comment="ok", rated_at=RATED_AT)
    assert companion.record_rating(u, rating) == "created"
    assert companion.record_rating(u, rating) == "unchanged"
    assert companion.record_rating(u, Rating(interaction_id="chat-1", rating=1, rated_at=RATED_AT)) == "updated"
    assert [(r["interaction_id"], r["rating"], r["tags"], r["comment"]) for r in companion.ratings(u)] == [
        ("chat-1", 1, [], "")
    ]


# -- embeddings ---------------------------------------------------------------------------------------


def vector(x: float) -> list[float]:
    return [x] + [0.0] * 255


def store_embeddings(conn: psycopg.Connection, user: uuid.UUID, rows: list[dict[str, Any]]) -> int:
    row = conn.execute("SELECT user_memory_store_embeddings(%s, 'test-model', %s)", (user, Jsonb(rows))).fetchone()
    assert row is not None
    return int(row[0])


def item_md5(conn: psycopg.Connection, user: uuid.UUID, path: str) -> str:
    row = conn.execute("SELECT text_md5 FROM memory_items WHERE user_id = %s AND path = %s", (user, path)).fetchone()
    assert row is not None
    return str(row[0])


def embeddings(conn: psycopg.Connection, user: uuid.UUID) -> list[str]:
    rows = conn.execute("SELECT text_md5 FROM memory_embeddings WHERE user_id = %s ORDER BY text_md5", (user,))
    return [r[0] for r in rows]


def test_an_end_user_cannot_store_vectors_at_all(conn, two_users):
    a, b = two_users
    # Given user a's claims, and a's own item and b's
    own, other = item_md5(conn, a, "/todos/shoes"), item_md5(conn, b, "/todos/shoes")
    # When a tries to store a vector, for its own text or b's
    # Then both are refused: vectors are the service's (a chosen one would take over the operators' search)
    for target, md5 in ((a, own), (b, other)):
        with pytest.raises(pgerrors.InsufficientPrivilege) as err, conn.transaction():
            as_role(conn, "authenticated", a)
            store_embeddings(conn, target, [{"text_md5": md5, "embedding": vector(1.0)}])
        assert err.value.sqlstate == "42501"
    assert embeddings(conn, a) == [] and embeddings(conn, b) == []


def test_only_texts_of_the_users_own_items_get_vectors(conn, two_users):
    a, b = two_users
    own = item_md5(conn, a, "/todos/shoes")
    # Given the service's rights
    with conn.transaction():
        as_role(conn, "service_role")
        # When it stores a vector for a text user a has no item of
        assert store_embeddings(conn, a, [{"text_md5": "0" * 32, "embedding": vector(1.0)}]) == 0
        # And one for a's own item's text
        assert store_embeddings(conn, a, [{"text_md5": own, "embedding": vector(0.5)}]) == 1
    # Then only a's text has a vector, and nothing was stored for b
    assert embeddings(conn, a) == [own]
    assert embeddings(conn, b) == []


def test_an_end_users_item_changes_are_bounded(conn, two_users):
    a, _ = two_users
    # Given user a's claims and a tiny document with far more item rows than any document has
    junk = [{"path": f"/todos/t{i}", "kind": "todo", "text": "x", "value": "x"} for i in range(50_001)]
    # When a appends it directly, then it is refused and nothing is written
    with pytest.raises(pgerrors.InvalidParameterValue, match="item changes are over their limit"), conn.transaction():
        as_role(conn, "authenticated", a)
        conn.execute(
            "SELECT user_memory_append(%s, 1, '[]', true, '{}', 'api', NULL, NULL, NULL, %s)", (a, Jsonb(junk))
        )


def test_a_rating_tag_is_1_to_50_characters_whoever_records_it(conn, user):
    with pytest.raises(pgerrors.InvalidParameterValue, match="a tag is 1 to 50 characters"), conn.transaction():
        as_role(conn, "authenticated", user)
        conn.execute("SELECT user_memory_record_rating(%s, 'i1', 3, %s, '', now())", (user, ["x" * 51]))


# -- reindex ------------------------------------------------------------------------------------------


def test_reindex_is_not_for_end_users(conn, user):
    with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
        as_role(conn, "authenticated", user)
        conn.execute("SELECT user_memory_reindex(%s, 1, '[]')", (user,))
    assert len(items(conn, user)) == 19


def test_reindex_of_a_stale_version_is_a_conflict(conn, user):
    # Given a user at version 1, When a reindex for version 2 (or 0) arrives
    for version in (0, 2):
        status = conn.execute("SELECT user_memory_reindex(%s, %s, '[]')", (user, version)).fetchone()
        # Then it is refused and the items are untouched
        assert status == ("conflict",)
    assert len(items(conn, user)) == 19
    assert conn.execute("SELECT user_memory_reindex(%s, 1, '[]')", (uuid.uuid4(),)).fetchone() == ("conflict",)


def test_an_append_while_the_index_is_behind_brings_it_up_to_the_head(conn, store, companion, index, user):
    # Given a user whose index is behind (a deployment before the index, a writer without items)
    conn.execute("UPDATE user_memory_heads SET indexed_version = 0 WHERE user_id = %s", (user,))
    conn.execute("DELETE FROM memory_items WHERE user_id = %s AND path = '/goals/swim'", (user,))
    assert user in behind(index)
    # When a version is appended (since migration 022 the append writes no items; the store's
    # catch-up right after it covers every version since the index's)
    head = store.head(user)
    store.append(
        user, update("todos", "shoes", {"text": "Buy trail shoes"})(head.document), expected_version=1, source=SOURCE
    )
    # Then the items are the head's, derived from the stored document: the changed and the missing
    # items at version 2, the others keep their version; and the user is no longer behind
    got = items(conn, user)
    expected = {path: item.text for path, item in document_items(store.head(user).document).items()}
    assert {path: text for path, (_, text) in got.items()} == expected
    assert got["/todos/shoes"] == (2, "todo: Buy trail shoes")
    assert got["/goals/swim"] == (2, "goal: Learn to swim")
    assert {path for path, (version, _) in got.items() if version == 2} == {"/todos/shoes", "/goals/swim"}
    assert indexed_version(conn, user) == (2, 2)
    assert user not in behind(index)
    # And the typed columns were rebuilt too
    assert [r.path for r in companion.todos_due(user, datetime(2026, 3, 5, tzinfo=UTC))] == [
        "/todos/shoes",
        "/todos/clinic",
    ]
    # And the next append writes items again
    head = store.head(user)
    store.append(user, complete("goals", "swim")(head.document), expected_version=2, source=SOURCE)
    assert items(conn, user)["/goals/swim"][0] == 3
    assert indexed_version(conn, user) == (3, 3)


def test_reindex_of_an_unknown_user_is_false(index):
    assert reindex(index, uuid.uuid4()) is False


# -- erase and digests -------------------------------------------------------------------------------


def test_erase_removes_items_vectors_ratings_and_digests(conn, store, companion, two_users):
    a, b = two_users
    # Given user a with items, a vector, two ratings and two digests
    store_embeddings(conn, a, [{"text_md5": item_md5(conn, a, "/todos/shoes"), "embedding": vector(1.0)}])
    companion.record_rating(a, Rating(interaction_id="chat-2", rating=1, rated_at=RATED_AT))
    companion.save_digest(a, date(2026, 3, 4), {"todos_due": ["/todos/shoes"]}, 1)
    # When a is erased
    erased = store.erase(a)
    # Then every one of those rows is gone and reported
    assert {k: erased[k] for k in ("memory_items", "memory_embeddings", "feedback_ratings", "daily_digests")} == {
        "memory_items": 19,
        "memory_embeddings": 1,
        "feedback_ratings": 2,
        "daily_digests": 2,
    }
    assert erased["user_memory_heads"] == 1
    for table in ("memory_items", "memory_embeddings", "feedback_ratings", "daily_digests"):
        count = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE user_id = %s").format(sql.Identifier(table)), (a,)
        ).fetchone()
        assert count == (0,), table
    # And b keeps everything
    assert len(items(conn, b)) == 19
    assert companion.digest(b) == {"todos_due": []}
    assert len(companion.ratings(b)) == 1


def test_a_digest_round_trips_latest_and_by_day(companion):
    u, other = uuid.uuid4(), uuid.uuid4()
    # Given digests of two days (written out of order) and another user's later one
    companion.save_digest(u, date(2026, 3, 4), {"day": "2026-03-04", "todos_due": [{"path": "/todos/a"}]}, 3)
    companion.save_digest(u, date(2026, 3, 3), {"day": "2026-03-03", "todos_due": []}, 2)
    companion.save_digest(other, date(2026, 3, 5), {"day": "2026-03-05"}, 1)
    # Then the latest is the 4th's, each day reads back as written, and a day without one is None
    assert companion.digest(u) == {"day": "2026-03-04", "todos_due": [{"path": "/todos/a"}]}
    assert companion.digest(u, date(2026, 3, 3)) == {"day": "2026-03-03", "todos_due": []}
    assert companion.digest(u, date(2026, 3, 5)) is None
    assert companion.digest(uuid.uuid4()) is None
    # When the 3rd is written again (a rerun of the daily run)
    companion.save_digest(u, date(2026, 3, 3), {"day": "2026-03-03", "todos_due": ["again"]}, 4)
    # Then it is replaced, and the list is by day
    assert companion.digests(u) == [
        {"day": "2026-03-03", "todos_due": ["again"]},
        {"day": "2026-03-04", "todos_due": [{"path": "/todos/a"}]},
    ]


def test_a_changed_rating_is_summarized_again_and_counted_once(store, companion, user):
    from user_memory.jobs.companion import summarize_feedback

    # Given a rating of 5 summarized by a first nightly run
    first = Rating(interaction_id="chat-1", rating=5, comment="Loved it", rated_at=datetime(2031, 1, 1, tzinfo=UTC))
    assert companion.record_rating(user, first) == "created"
    now = datetime(2031, 1, 2, tzinfo=UTC)
    assert (
        summarize_feedback(user, "night-1", store=store, companion=companion, max_document_bytes=262144, now=now)[0]
        == 1
    )
    # When the user changes it to 1 and the next night runs
    changed = Rating(
        interaction_id="chat-1", rating=1, comment="Actually it was wrong", rated_at=datetime(2031, 1, 2, tzinfo=UTC)
    )
    assert companion.record_rating(user, changed) == "updated"
    count, version = summarize_feedback(
        user, "night-2", store=store, companion=companion, max_document_bytes=262144, now=now
    )
    # Then the change is folded in (not marked with the old version), and counted once
    assert count == 1 and version == store.head(user).version
    feedback = store.head(user).document["feedback"]
    assert (feedback["ratings_count"], feedback["average_rating"]) == (1, 1.0)
    assert feedback["negatives"] == ["Actually it was wrong"]
    assert companion.unsummarized_ratings(user) == []


def test_the_digest_is_for_the_day_ahead_of_the_user_and_lists_every_overdue_to_do(store, companion):
    from user_memory.jobs.companion import make_digest

    # Given a user in Los Angeles with 600 overdue to-dos, one due on the 14th and one on the 15th
    u = uuid.uuid4()
    todos = {f"old{i}": {"id": f"old{i}", "text": f"old {i}", "due_date": "2031-05-01"} for i in range(600)}
    todos["d14"] = {"id": "d14", "text": "due the 14th", "due_date": "2031-05-14"}
    todos["d15"] = {"id": "d15", "text": "due the 15th", "due_date": "2031-05-15"}
    doc = validate_document({"basic_info": {"timezone": "America/Los_Angeles"}, "todos": todos}, "companion")
    store.append(u, doc, expected_version=0, source=SOURCE)
    # When the nightly run makes the digest at 00:15 UTC (17:15 the evening before, in Los Angeles)
    day = make_digest(u, store=store, companion=companion, now=datetime(2031, 5, 15, 0, 15, tzinfo=UTC))
    # Then the digest is for the day ahead of the user (the 15th there), not the evening's own day
    digest = companion.digest(u)
    assert day == digest["day"] == "2031-05-15"
    assert [t["id"] for t in digest["todos_due_today"]] == ["d15"]
    # And every overdue to-do is listed (the 14th's among them), none cut off by a page limit
    assert len(digest["todos_overdue"]) == 601 and "d14" in {t["id"] for t in digest["todos_overdue"]}
    # And before the user's noon the digest is for their own today
    assert (
        make_digest(u, store=store, companion=companion, now=datetime(2031, 5, 15, 15, 0, tzinfo=UTC)) == "2031-05-15"
    )

"""The memory-changed outbox in PostgreSQL (migration 026): one event per committed version, in the
version's own transaction, never content; none for a write that rolled back; gone with an erase;
the service's alone. Runs under every owner mode (tests/owners.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool
from user_memory.adapters.events import PostgresEvents
from user_memory.adapters.postgres import PostgresRecorder, open_pool, transaction
from user_memory.domain.memory.repository import MemoryStore

from tests.integration.roles import as_role

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service_pool(database_url: str) -> Iterator[ConnectionPool]:
    """The relay's connections: the service's rights (DATABASE_ROLE=service_role), as in Lambda."""
    p = open_pool(database_url, size=2, role="service_role")
    yield p
    p.close()


def events_of(conn: psycopg.Connection, user: str) -> list[tuple]:
    return conn.execute(
        "SELECT version, source, run_key, sections FROM user_memory_events WHERE user_id = %s ORDER BY id", (user,)
    ).fetchall()


def test_every_committed_version_writes_one_event_naming_the_sections_it_touched(store, user_id, conn):
    # Given three versions: a first document, a change of one section with a run key, a removal
    store.append(user_id, {"summary": "a", "parts": {}}, expected_version=0, source="api")
    store.append(user_id, {"summary": "b", "parts": {}}, expected_version=1, source="daily", idempotency_key="daily:x")
    store.append(user_id, {"summary": "b"}, expected_version=2, source="api")
    # Then each has its event, in order, with the user's sections and never a value of the document
    assert events_of(conn, user_id) == [
        (1, "api", None, ["parts", "summary"]),
        (2, "daily", "daily:x", ["summary"]),
        (3, "api", None, ["parts"]),
    ]
    columns = {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'user_memory_events'"
        ).fetchall()
    }
    assert columns == {"id", "user_id", "version", "source", "run_key", "sections", "created_at"}


def test_a_write_that_rolls_back_leaves_no_event(pool, user_id, conn):
    # Given a version written inside a transaction that then fails
    with pytest.raises(RuntimeError), transaction(pool) as tx:
        MemoryStore(PostgresRecorder(tx)).append(user_id, {"summary": "x"}, expected_version=0, source="api")
        raise RuntimeError("the request failed after the write")
    # Then neither the version nor its event is there
    assert conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE user_id = %s", (user_id,)).fetchone()[0] == 0
    assert events_of(conn, user_id) == []


def test_erase_removes_the_users_events_and_their_deliveries_and_no_one_elses(store, conn, service_pool):
    # Given two users with events, both delivered to a sink
    erased, kept = str(uuid.uuid4()), str(uuid.uuid4())
    for user in (erased, kept):
        store.append(user, {"summary": "x"}, expected_version=0, source="api")
        store.append(user, {"summary": "y"}, expected_version=1, source="api")
    outbox = PostgresEvents(service_pool)
    ids = [e.id for e in outbox.pending("eventbridge", after_id=0, limit=100_000) if str(e.user_id) in (erased, kept)]
    outbox.mark_delivered("eventbridge", ids)
    # When one is erased (the service's erase, as the operators' route runs it)
    with transaction(service_pool) as tx, tx.connection() as c:
        c.execute("SELECT * FROM user_memory_erase(%s)", (erased,)).fetchall()
    # Then its events and deliveries are gone, and the other user's stay
    assert events_of(conn, erased) == []
    left = conn.execute(
        """SELECT e.user_id::text, count(d.event_id) FROM user_memory_events e
             JOIN user_memory_event_deliveries d ON d.event_id = e.id
            WHERE e.user_id = ANY(%s::uuid[]) GROUP BY 1""",
        ([erased, kept],),
    ).fetchall()
    assert left == [(kept, 2)]


def test_an_erased_users_event_in_flight_is_not_marked_and_nothing_fails(store, user_id, service_pool, conn):
    # Given an event the relay read, then the user is erased before it marks it delivered
    store.append(user_id, {"summary": "x"}, expected_version=0, source="api")
    outbox = PostgresEvents(service_pool)
    event = next(e for e in outbox.pending("eventbridge", after_id=0, limit=100_000) if str(e.user_id) == user_id)
    with transaction(service_pool) as tx, tx.connection() as c:
        c.execute("SELECT * FROM user_memory_erase(%s)", (user_id,)).fetchall()
    # When the relay marks it
    marked = outbox.mark_delivered("eventbridge", [event.id])
    # Then nothing is recorded, and no error
    assert marked == 0
    assert (
        conn.execute("SELECT count(*) FROM user_memory_event_deliveries WHERE event_id = %s", (event.id,)).fetchone()[0]
        == 0
    )


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM user_memory_events",
        "SELECT count(*) FROM user_memory_webhooks",
        "SELECT count(*) FROM user_memory_event_deliveries",
        "INSERT INTO user_memory_webhooks (id, url, secret_name) VALUES (gen_random_uuid(), 'https://x', 's')",
    ],
)
def test_end_users_hold_nothing_on_the_outbox_or_the_endpoints(database_url, user_id, statement):
    # Given a signed-in end user's transaction
    with psycopg.connect(database_url) as c:
        as_role(c, "authenticated", user_id)
        # Then every read or write of the events' tables is refused
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(statement)


def test_the_service_cannot_write_an_event_itself(service_pool, store, user_id):
    # Given a version of the user
    store.append(user_id, {"summary": "x"}, expected_version=0, source="api")
    # Then an event that no version wrote is refused, even for the service
    with pytest.raises(psycopg.errors.InsufficientPrivilege), service_pool.connection() as c:
        c.execute(
            "INSERT INTO user_memory_events (user_id, version, source, sections) VALUES (%s, 1, 'x', '{}')", (user_id,)
        )


def _pointer_token(text: str) -> str:
    return text.replace("~", "~0").replace("/", "~1")


_keys = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=0, max_size=8)
_ops = st.lists(
    st.tuples(st.sampled_from(["add", "replace", "remove", "move", "copy"]), _keys, st.lists(_keys, max_size=3), _keys),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_the_sections_are_the_first_token_of_every_path_and_from(conn, ops):
    # Given a patch whose operations name sections with any characters (escaped as JSON Pointer does)
    patch = []
    expected: set[str] = set()
    for op, section, rest, source in ops:
        path = "/" + "/".join(_pointer_token(t) for t in [section, *rest])
        entry: dict = {"op": op, "path": path}
        expected.add(section)
        if op in ("move", "copy"):
            entry["from"] = "/" + _pointer_token(source)
            expected.add(source)
        if op in ("add", "replace"):
            entry["value"] = 1
        patch.append(entry)
    # When the database names the sections
    got = conn.execute("SELECT user_memory_patch_sections(%s::jsonb)", (psycopg.types.json.Jsonb(patch),)).fetchone()[0]
    # Then they are each operation's first token, unescaped, once each
    assert set(got) == expected and len(got) == len(expected)

"""The API's unit of work: `ApiServices.session`, one transaction as the end user (or the service).

Each request runs as role authenticated with the user's claims, so PostgreSQL's row-level
security, not only the service's code, keeps one user's data from another; the transaction
commits when the block ends and rolls back when it raises; nothing of the user outlives it on the
pooled connection.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from user_memory.adapters.kv import PostgresKv
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool, transaction
from user_memory.config import ApiSettings
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.patching import json_equal
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, WriteStatus
from user_memory.domain.service import Edit
from user_memory.domain.session import UserSession
from user_memory.errors import AccessDenied, IdempotencyKeyReused, InvalidRequest, VersionConflict
from user_memory.runtime import ApiServices, build_api

from tests.integration.roles import waits_on_a_lock

pytestmark = pytest.mark.integration


def new_user() -> uuid.UUID:
    return uuid.uuid4()


def session_connection(svc: UserSession) -> psycopg.Connection:
    """The connection of the session's transaction (the one every adapter of the session shares)."""
    return svc.memory.store.recorder.pool.conn  # type: ignore[attr-defined]


AFTER_ALL = datetime(2100, 1, 1, tzinfo=UTC)  # after every activity these tests record


def activity(user: uuid.UUID, external_id: str, kind: str = "message") -> Activity:
    return Activity(
        user_id=user,
        # Far after every window the end-to-end tests summarize: these users' documents are not
        # schema documents, and the session's database is shared with the daily job's tests.
        occurred_at=datetime(2099, 5, 1, 9, 30, tzinfo=UTC),
        kind=kind,
        payload={"text": external_id},
        source="app",
        external_id=external_id,
    )


def seed(pool: ConnectionPool, user: uuid.UUID, summary: str = "seeded") -> None:
    """Version 1, a key-value entry and an activity row for `user`, written by the service."""
    MemoryStore(PostgresRecorder(pool)).append(user, {"summary": summary}, expected_version=0, source="seed")
    PostgresKv(pool).put(user, "default", "seed", {"by": "service"})
    PostgresActivity(pool).record([activity(user, f"seed-{user}")])


@pytest.fixture
def api(pool: ConnectionPool) -> ApiServices:
    return build_api(ApiSettings.from_env({}), pool=pool)


@pytest.fixture
def one_connection(database_url: str) -> Iterator[ConnectionPool]:
    """A pool of one connection: every use gets the connection the previous use returned."""
    p = open_pool(database_url, size=1)
    yield p
    p.close()


# -- a user's session: its own memory only ----------------------------------------------------------


def test_a_user_session_reads_and_writes_its_own_memory(api, pool):
    a = new_user()
    # Given user a's session, When it edits its memory twice and records activity
    with api.session(a) as svc:
        first = svc.memory.apply_merge_patch({"summary": "Likes tea."}, Edit())
        second = svc.memory.apply_json_patch([{"op": "replace", "path": "/safety_notes", "value": "none"}], Edit())
        received = svc.account.record_activity([activity(a, "m1"), activity(a, "m1")])
        svc.kv.put("prefs", "drink", "tea")
        # Then within the session it reads back what it wrote
        assert svc.memory.read().version == 2
        assert svc.kv.get("prefs", "drink").value == "tea"
    assert (first.version, second.version, received) == (1, 2, (2, 1))
    # And after the commit the service sees it too, with the end user's source
    head = MemoryStore(PostgresRecorder(pool)).head(a)
    assert (head.version, head.document["summary"], head.document["safety_notes"], head.source) == (
        2,
        "Likes tea.",
        "none",
        "api",
    )
    assert PostgresKv(pool).get(a, "prefs", "drink").value == "tea"
    assert [x.external_id for x in PostgresActivity(pool).unsummarized(a, before=AFTER_ALL, limit=10)] == ["m1"]


@pytest.mark.parametrize("feature", ["kv", "memory", "search", "overview"])
def test_a_request_builds_only_the_feature_service_it_uses(api, feature):
    # Given a user's session
    with api.session(new_user()) as session:
        # When a request uses one feature
        {
            "kv": lambda: session.kv.put("prefs", "drink", "tea"),
            "memory": lambda: session.memory.read(),
            "search": lambda: session.search.search("tea", 3),
            "overview": lambda: session.overview.kv_namespaces(),
        }[feature]()
        built = [
            name for name in ("memory", "kv", "companion", "search", "account", "overview") if name in vars(session)
        ]
    # Then only that feature's service (and what it builds on: the memory store) was built
    assert built == sorted({feature, "memory"} if feature == "overview" else {feature}, key=built.index)


def test_a_user_session_sees_nothing_of_another_user(api, pool):
    a, b = new_user(), new_user()
    seed(pool, b, "b's secret")
    # Given user a's session
    with api.session(a) as svc:
        tx = svc.memory.store.recorder.pool
        # When it reads b's rows through adapters built on its transaction
        store = MemoryStore(PostgresRecorder(tx))
        # Then row-level security hides every one of them
        assert store.head(b).version == 0
        assert store.history(b) == []
        assert PostgresKv(tx).get(b, "default", "seed") is None
        assert PostgresActivity(tx).unsummarized(b, before=AFTER_ALL, limit=10) == []
        assert svc.kv.get("default", "seed") is None


def test_a_write_for_another_user_inside_a_session_is_refused_by_the_database(api, pool):
    a, b = new_user(), new_user()
    seed(pool, b, "b's own")
    with api.session(a) as svc:
        # Given a store on a's transaction that (wrongly) writes for b
        wrong = MemoryStore(PostgresRecorder(svc.memory.store.recorder.pool))
        # When it appends to b's memory, Then the database refuses it
        with pytest.raises(AccessDenied, match="may only write own memory"):
            wrong.append(b, {"summary": "a was here"}, expected_version=0, source="api")
        # And (the append ran in a savepoint) the session's transaction goes on: a's own write commits
        assert svc.memory.apply_merge_patch({"summary": "mine"}, Edit()).version == 1
    store = MemoryStore(PostgresRecorder(pool))
    assert store.head(b).document == {"summary": "b's own"} and store.head(b).version == 1
    assert store.head(a).document["summary"] == "mine"


@pytest.mark.parametrize("write", ["kv", "activity"])
def test_key_value_and_activity_writes_for_another_user_are_refused_by_the_database(api, pool, write):
    a, b = new_user(), new_user()
    # Given a's session, When adapters on its transaction write b's entry or b's activity
    with pytest.raises(AccessDenied, match="row-level security"), api.session(a) as svc:
        svc.kv.put("default", "mine", 1)  # and a's own write came first
        tx = svc.memory.store.recorder.pool
        if write == "kv":
            PostgresKv(tx).put(b, "default", "planted", 1)
        else:
            PostgresActivity(tx).record([activity(b, "planted")])
    # Then nothing was written for b, and a's own write went with the failed request
    assert PostgresKv(pool).get(b, "default", "planted") is None
    assert PostgresActivity(pool).unsummarized(b, before=AFTER_ALL, limit=10) == []
    assert PostgresKv(pool).get(a, "default", "mine") is None


def test_the_service_refuses_activity_of_another_user_before_the_database(api):
    a, b = new_user(), new_user()
    with pytest.raises(InvalidRequest, match="only be recorded for the caller"), api.session(a) as svc:
        svc.account.record_activity([activity(a, "ok"), activity(b, "not a's")])


def test_a_user_session_erases_through_erase_me_and_takes_key_values_too(api, pool):
    a, b = new_user(), new_user()
    for u in (a, b):
        seed(pool, u)
    with api.session(a) as svc:
        svc.memory.apply_merge_patch({"summary": "second"}, Edit())
        svc.kv.put("other", "k", [1, 2])
    # When a erases itself in its own session (as authenticated it can run user_memory_erase_me()
    # only: user_memory_erase and direct deletes are not granted to it)
    with api.session(a) as svc:
        receipt = svc.account.erase()
    # Then every row of a is gone, and reported per relation in a receipt it asked for itself
    assert receipt.requested_by == "self"
    assert receipt.deleted == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 2,
        "user_activity": 1,
        "user_memory_kv": 2,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 1,  # the summary leaf
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
        "user_memory_exports": 0,
        "export_objects": 0,
        "user_memory_events": 2,  # one per version, deleted with them (026; counted since 029)
        "user_memory_event_deliveries": 0,
        "pending_webhook_deliveries": 0,
        "user_memory_imports": 0,
    }
    store = MemoryStore(PostgresRecorder(pool))
    assert store.head(a).version == 0 and store.history(a) == []
    assert PostgresKv(pool).get(a, "default", "seed") is None and PostgresKv(pool).get(a, "other", "k") is None
    # And b is untouched
    assert store.head(b).document == {"summary": "seeded"}
    assert PostgresKv(pool).get(b, "default", "seed") is not None
    assert len(PostgresActivity(pool).unsummarized(b, before=AFTER_ALL, limit=10)) == 1


def test_an_erase_inside_a_session_that_fails_afterwards_erases_nothing(api, pool):
    a = new_user()
    seed(pool, a)
    with pytest.raises(RuntimeError, match="after the erase"), api.session(a) as svc:
        assert svc.account.erase().deleted["user_memory_snapshots"] == 1
        raise RuntimeError("the request failed after the erase")
    assert MemoryStore(PostgresRecorder(pool)).head(a).version == 1
    assert PostgresKv(pool).get(a, "default", "seed") is not None


# -- an operator's session: the service's rights, any user -------------------------------------------


def test_an_operator_session_reads_writes_and_erases_any_user(api, pool):
    a, b = new_user(), new_user()
    for u in (a, b):
        seed(pool, u, f"{u}")
    # Given an operator acting on user b
    with api.session(b, operator="ops@example.com") as svc:
        # When it reads, writes and exports b's memory
        assert svc.memory.read().document == {"summary": str(b)}
        assert svc.memory.apply_merge_patch({"safety_notes": "checked"}, Edit(source="api: operator")).version == 2
        exported = svc.account.export()
        assert [v.version for v in exported["versions"]] == [1, 2]
        assert [e.key for e in exported["kv"]] == ["seed"] and len(exported["activity"]) == 1
    # And then erases b in another request
    with api.session(b, operator="ops@example.com") as svc:
        receipt = svc.account.erase()
    # Then b is gone, at the operator's request, and a is untouched
    assert receipt.requested_by == "operator:ops@example.com"
    assert receipt.deleted == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 2,
        "user_activity": 1,
        "user_memory_kv": 1,
        "conversation_memories": 0,
        "conversation_messages": 0,
        "conversations": 0,
        "memory_items": 2,  # the summary and safety_notes leaves
        "memory_embeddings": 0,
        "feedback_ratings": 0,
        "daily_digests": 0,
        "user_memory_exports": 0,
        "export_objects": 0,
        "user_memory_events": 2,  # one per version, deleted with them (026; counted since 029)
        "user_memory_event_deliveries": 0,
        "pending_webhook_deliveries": 0,
        "user_memory_imports": 0,
    }
    store = MemoryStore(PostgresRecorder(pool))
    assert store.head(b).version == 0
    assert store.head(a).document == {"summary": str(a)}


# -- one transaction: all or nothing ------------------------------------------------------------------


def test_a_session_whose_block_raises_leaves_nothing_written(api, pool):
    a = new_user()
    # Given a session that puts an entry, edits the memory and records activity, then fails
    with pytest.raises(RuntimeError, match="request failed"), api.session(a) as svc:
        svc.kv.put("default", "draft", {"x": 1})
        svc.memory.apply_merge_patch({"summary": "draft"}, Edit())
        svc.account.record_activity([activity(a, "draft")])
        assert svc.kv.get("default", "draft") is not None  # visible inside the transaction
        raise RuntimeError("request failed")
    # Then none of it was committed
    assert PostgresKv(pool).get(a, "default", "draft") is None
    assert MemoryStore(PostgresRecorder(pool)).head(a).version == 0
    assert PostgresActivity(pool).unsummarized(a, before=AFTER_ALL, limit=10) == []


def test_a_transaction_helper_error_is_translated_and_rolls_back(pool):
    a = new_user()
    # Given a transaction as a whose statement fails in the database
    with pytest.raises(AccessDenied), transaction(pool, end_user=a) as tx:
        PostgresKv(tx).put(a, "default", "first", 1)
        with tx.connection() as conn:
            conn.execute("SELECT * FROM user_memory_erase(%s)", (a,))  # the service's, not a's
    # Then the driver's error came out as the library's, and the earlier write was rolled back
    assert PostgresKv(pool).get(a, "default", "first") is None


# -- the pooled connection afterwards ----------------------------------------------------------------


def connection_state(pool: ConnectionPool) -> tuple[Any, ...]:
    with pool.connection() as conn:
        row = conn.execute(
            """SELECT current_setting('request.jwt.claims', true), current_setting('role'),
                      current_user = session_user, auth.uid()"""
        ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("ending", ["commit", "raise"])
def test_claims_and_role_do_not_outlive_a_session_on_the_pooled_connection(one_connection, ending):
    api = build_api(ApiSettings.from_env({}), pool=one_connection)
    a = new_user()
    with one_connection.connection() as conn:
        before_pid = conn.info.backend_pid
    assert connection_state(one_connection) in (("", "none", True, None), (None, "none", True, None))
    # Given a user session on the pool's only connection, running as a
    try:
        with api.session(a) as svc:
            inside = session_connection(svc).execute(
                "SELECT current_user, auth.uid(), current_setting('request.jwt.claims', true)::jsonb ->> 'role'"
            )
            assert inside.fetchone() == ("authenticated", a, "authenticated")
            svc.kv.put("default", "k", 1)
            if ending == "raise":
                raise RuntimeError("request failed")
    except RuntimeError:
        pass
    # When the same connection is used next
    with one_connection.connection() as conn:
        assert conn.info.backend_pid == before_pid
    # Then no claims, no role and no user are left on it
    assert connection_state(one_connection) in (("", "none", True, None), (None, "none", True, None))


def test_an_operators_prepared_reads_do_not_open_another_users_rows_to_a_user_session(pool, one_connection):
    api = build_api(ApiSettings.from_env({}), pool=one_connection)
    a, b = new_user(), new_user()
    seed(pool, b, "b's secret")
    # Given an operator session that read b's head and entry on the only connection (prepared statements)
    for _ in range(2):
        with api.session(b, operator="ops") as svc:
            assert svc.memory.read().version == 1 and svc.kv.get("default", "seed") is not None
    # When a's session runs the same prepared statements for b on that connection
    with api.session(a) as svc:
        tx = svc.memory.store.recorder.pool
        # Then row-level security still applies (the plans were not reused across roles)
        assert MemoryStore(PostgresRecorder(tx)).head(b).version == 0
        assert PostgresKv(tx).get(b, "default", "seed") is None


# -- export ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("operator", [None, "ops"])
def test_export_returns_every_version_the_entries_and_the_activity(api, pool, conn, operator):
    a, other = new_user(), new_user()
    # Given 8 versions written by the service with a checkpoint every 3, and a's entries and activity
    service = MemoryStore(PostgresRecorder(pool), checkpoint_interval=3)
    for v in range(1, 9):
        service.append(a, {"summary": f"v{v}", "n": v, "list": list(range(v % 4))}, expected_version=v - 1, source="s")
    PostgresKv(pool).put(a, "b-namespace", "k2", {"deep": [1, {"x": None}]})
    PostgresKv(pool).put(a, "a-namespace", "k1", "one")
    conn.execute(
        """INSERT INTO user_memory_kv (user_id, namespace, key, value, updated_at, expires_at)
           VALUES (%s, 'a-namespace', 'expired', '1', now() - interval '2 hours', now() - interval '1 hour')""",
        (a,),
    )  # expired, not yet purged: not part of the export
    PostgresActivity(pool).record([activity(a, "first"), activity(a, "second")])
    seed(pool, other)
    # And two more versions written in a's own sessions (end users' versions are always checkpoints)
    for v in (9, 10):
        with api.session(a) as svc:
            svc.memory.store.append(a, {"summary": f"v{v}", "n": v}, expected_version=v - 1, source="api")
    # When a (or an operator) exports a's data
    with api.session(a, operator=operator) as svc:
        exported = svc.account.export()
    # Then every version is there, oldest first, each equal to what the store rebuilds for it
    assert exported["user_id"] == str(a)
    assert [v.version for v in exported["versions"]] == list(range(1, 11))
    for v in exported["versions"]:
        expected = service.at(a, v.version)
        assert json_equal(v.document, expected.document), v.version
        assert (v.created_at, v.source) == (expected.created_at, expected.source)
    # And the live entries by namespace and key, and the activity, oldest first, are a's only
    assert [(e.namespace, e.key, e.value) for e in exported["kv"]] == [
        ("a-namespace", "k1", "one"),
        ("b-namespace", "k2", {"deep": [1, {"x": None}]}),
    ]
    assert [(x.external_id, x.user_id) for x in exported["activity"]] == [("first", a), ("second", a)]
    assert all(x.id is not None for x in exported["activity"])


def test_export_of_a_user_with_nothing_is_empty(api):
    with api.session(new_user()) as svc:
        exported = svc.account.export()
    assert (exported["versions"], exported["kv"], exported["activity"]) == ([], [], [])


# -- a concurrent first write inside a session ------------------------------------------------------


def race_first_write(
    database_url: str, api: ApiServices, user: uuid.UUID, work: Any, *, document: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run `work(svc)` in user's session while another writer's version 1 is uncommitted.

    The other writer (its own connection) appends version 1 and holds its transaction open; the
    session's first write then waits on the other's rows; once it waits, the other commits, and
    the session's INSERT of version 1 fails with a unique violation (there was no head row to
    lock). What `work` returns, or raises, is in the result; the session commits afterwards.
    """
    writer = psycopg.connect(database_url)
    result: dict[str, Any] = {}
    try:
        row = writer.execute(
            "SELECT status FROM user_memory_append(%s, 0, %s, true, %s, 'api: other writer', 'api:other')",
            (user, Jsonb([]), Jsonb(document or {"summary": "other writer", "version": 1})),
        ).fetchone()
        assert row == ("written",)

        def run() -> None:
            try:
                with api.session(user) as svc:
                    result["pid"] = session_connection(svc).info.backend_pid
                    result["value"] = work(svc)
            except Exception as err:  # reported to the test thread
                result["error"] = err

        thread = threading.Thread(target=run)
        thread.start()
        with psycopg.connect(database_url, autocommit=True) as watcher:
            if not waits_on_a_lock(watcher, lambda: result.get("pid", 0)):
                writer.rollback()
                thread.join(10)
                pytest.fail(f"the session's write did not wait for the other writer: {result}")
        writer.commit()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        writer.close()
    return result


def test_a_lost_first_write_race_inside_a_session_is_a_conflict_and_the_session_goes_on(database_url, api, pool):
    a = new_user()

    def work(svc: UserSession) -> Any:
        # When a's first write, made for version 0 (If-Match: 0), loses the race
        with pytest.raises(VersionConflict) as info:
            svc.memory.apply_merge_patch({"summary": "mine"}, Edit(if_match=0))
        # Then the session's transaction survived: it reads the winner and writes on top of it
        head = svc.memory.read()
        svc.kv.put("default", "after-the-race", True)
        written = svc.memory.apply_merge_patch({"safety_notes": "after"}, Edit(if_match=head.version))
        return info.value, head, written

    result = race_first_write(database_url, api, a, work)
    assert "error" not in result, result.get("error")
    conflict, head, written = result["value"]
    assert (conflict.expected, conflict.current) == (0, 1)
    assert (head.version, head.document["summary"]) == (1, "other writer")
    assert written.version == 2
    # And everything the session did after the race was committed
    final = MemoryStore(PostgresRecorder(pool)).head(a)
    assert (final.version, final.document["summary"], final.document["safety_notes"]) == (2, "other writer", "after")
    assert PostgresKv(pool).get(a, "default", "after-the-race").value is True


def test_a_lost_first_write_race_without_if_match_is_rebased_onto_the_winner(database_url, api, pool):
    a = new_user()
    # When a's first write, without If-Match, loses the race
    result = race_first_write(
        database_url, api, a, lambda svc: svc.memory.apply_merge_patch({"safety_notes": "mine"}, Edit())
    )
    # Then it was re-applied to the winner's version as version 2: both writes are kept
    assert "error" not in result, result.get("error")
    assert (result["value"].status, result["value"].version) == (WriteStatus.WRITTEN, 2)
    head = MemoryStore(PostgresRecorder(pool)).head(a)
    assert (head.document["summary"], head.document["safety_notes"]) == ("other writer", "mine")


def test_a_lost_first_write_race_with_the_same_idempotency_key_returns_the_winners_version(database_url, api, pool):
    a = new_user()
    # The winner is the same request (its key and its document), committed first
    winner = {**validate_document({"summary": "retry"}, "user_state"), "last_updated_by": "api"}
    # When a's first write carries the key the winner wrote with (a retried request)
    result = race_first_write(
        database_url,
        api,
        a,
        lambda svc: svc.memory.apply_merge_patch({"summary": "retry"}, Edit(idempotency_key="api:other")),
        document=winner,
    )
    # Then the session answers with the winner's version and writes nothing
    assert "error" not in result, result.get("error")
    assert (result["value"].status, result["value"].version) == (WriteStatus.IDEMPOTENT, 1)
    assert result["value"].document["summary"] == "retry"
    store = MemoryStore(PostgresRecorder(pool))
    assert store.head(a).version == 1 and len(store.history(a)) == 1


def test_a_lost_first_write_race_with_a_reused_idempotency_key_is_refused(database_url, api, pool):
    a = new_user()
    # When a's first write carries the key another request wrote with, and loses the race to it
    result = race_first_write(
        database_url,
        api,
        a,
        lambda svc: svc.memory.apply_merge_patch({"summary": "mine"}, Edit(idempotency_key="api:other")),
    )
    # Then it is refused (not answered as a replay of a request it is not), and writes nothing
    assert isinstance(result.get("error"), IdempotencyKeyReused), result
    store = MemoryStore(PostgresRecorder(pool))
    assert store.head(a).version == 1 and store.head(a).document["summary"] == "other writer"


# -- the agent's tool call in a session ------------------------------------------------------------


def test_an_agent_tool_call_in_a_user_session_is_written_as_the_agent(api, pool):
    a = new_user()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "update_memory",
            "arguments": json.dumps({"section": "summary", "mode": "replace", "value_json": json.dumps("Likes tea.")}),
        },
    }
    with api.session(a) as svc:
        first = svc.memory.tool_call(call)
    with api.session(a) as svc:
        again = svc.memory.tool_call(call)
    assert (first.status, first.version) == (WriteStatus.WRITTEN, 1)
    assert (again.status, again.version) == (WriteStatus.IDEMPOTENT, 1)
    head = MemoryStore(PostgresRecorder(pool)).head(a)
    assert (head.source, head.document["summary"]) == ("agent:update_memory", "Likes tea.")


# -- storage: an end user's versions are patches ----------------------------------------------------


def test_an_end_users_writes_and_tool_calls_are_patches_and_checkpoint_at_the_interval(pool):
    # Given the API's sessions with a checkpoint every 4 versions
    api = build_api(ApiSettings.from_env({}, checkpoint_interval=4), pool=pool)
    a = new_user()
    # When an end user writes 3 versions through the API's edits and 3 through an agent's tool calls
    with api.session(a) as svc:
        svc.memory.apply_merge_patch({"summary": "Likes tea."}, Edit())
        svc.memory.apply_json_patch([{"op": "replace", "path": "/safety_notes", "value": "none"}], Edit())
        svc.memory.apply_merge_patch({"summary": "Likes green tea."}, Edit(idempotency_key="api:key:k1"))
        for n in range(3):
            arguments = {"section": "summary", "mode": "replace", "value_json": json.dumps(f"Tea {n}.")}
            svc.memory.tool_call(
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": "update_memory", "arguments": json.dumps(arguments)},
                }
            )
    # Then version 4 is the only checkpoint; the others hold only their patch
    store = MemoryStore(PostgresRecorder(pool))
    history = store.history(a)
    assert {h.version: h.is_checkpoint for h in history} == {v: v == 4 for v in range(1, 7)}
    rows = session_rows(pool, a)
    assert [v for v, full in rows if full] == [4]
    # And every version rebuilds from its checkpoint and patches to what was written
    assert store.at(a, 6).document["summary"] == "Tea 2." and store.at(a, 3).document["summary"] == "Likes green tea."
    assert json_equal(list(store.versions(a))[-1].document, store.head(a).document)


def session_rows(pool: ConnectionPool, user: uuid.UUID) -> list[tuple[int, bool]]:
    """(version, has its full document) of every version row of the user."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT version, full_snapshot_content IS NOT NULL FROM user_memory_snapshots WHERE user_id = %s"
            " ORDER BY version",
            (user,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]

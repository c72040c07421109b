"""Erasure receipts in SQL (migration 027): every erase stores one, with the rows it deleted per
relation, when, at whose request and a salted hash of the user id; never the id, never content."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors as pgerrors

from tests.integration.roles import as_role, new_user, waits_on_a_lock

pytestmark = pytest.mark.integration

RECEIPT = "SELECT id, user_hash, requested_by, deleted FROM user_memory_erasure_receipts WHERE id = %s"


def seed(conn: psycopg.Connection, user: str) -> None:
    conn.execute(
        "SELECT user_memory_append(%s, 0, '[]', true, '{\"secret\": \"kept private\"}', 'api: t', NULL)", (user,)
    )
    conn.execute(
        """INSERT INTO user_memory_exports (user_id, requested_by, status, object_key)
           VALUES (%s, 'self', 'done', 'exports/x.jsonl')""",
        (user,),
    )


def test_the_service_erase_answers_a_receipt_with_counts_requester_and_hash(conn):
    # Given a user with a version and a finished export
    user = new_user()
    seed(conn, user)
    # When an operator erases it through the service, naming the requester and the objects it deleted
    with conn.transaction():
        as_role(conn, "service_role")
        row = conn.execute(
            "SELECT id, user_hash, requested_by, deleted FROM user_memory_erase_with_receipt(%s, 'operator:op-1', 1)",
            (user,),
        ).fetchone()
        user_hash = conn.execute("SELECT user_memory_user_hash(%s)", (user,)).fetchone()[0]
    assert row is not None
    receipt_id, stored_hash, requested_by, deleted = row
    # Then the receipt counts what went, export jobs and objects included
    assert deleted["user_memory_heads"] == 1 and deleted["user_memory_snapshots"] == 1
    assert deleted["user_memory_exports"] == 1 and deleted["export_objects"] == 1
    assert requested_by == "operator:op-1"
    # And names the user only by the salted hash: not the id, not its plain SHA-256
    assert stored_hash == user_hash and user not in json.dumps(deleted)
    assert stored_hash != hashlib.sha256(user.encode()).hexdigest()
    # And it is stored, without content
    stored = conn.execute(RECEIPT, (receipt_id,)).fetchone()
    assert stored is not None and "kept private" not in json.dumps(stored, default=str)
    assert conn.execute("SELECT count(*) FROM user_memory_exports WHERE user_id = %s", (user,)).fetchone()[0] == 0


def test_the_legacy_erase_keeps_its_answer_and_stores_a_service_receipt(conn):
    user = new_user()
    seed(conn, user)
    with conn.transaction():
        as_role(conn, "service_role")
        rows = conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (user,)).fetchall()
        user_hash = conn.execute("SELECT user_memory_user_hash(%s)", (user,)).fetchone()[0]
    # Then the previous release reads the same eleven relations, in migration 014's order
    assert [r[0] for r in rows] == [
        "user_memory_heads", "user_memory_snapshots", "user_activity", "user_memory_kv",
        "conversation_memories", "conversation_messages", "conversations", "memory_items",
        "memory_embeddings", "feedback_ratings", "daily_digests",
    ]  # fmt: skip
    assert dict(rows)["user_memory_snapshots"] == 1
    # And a receipt requested by the service is stored all the same
    found = conn.execute(
        "SELECT requested_by, deleted->>'user_memory_exports' FROM user_memory_erasure_receipts WHERE user_hash = %s",
        (user_hash,),
    ).fetchall()
    assert found == [("service", "1")]


def test_an_end_user_erases_itself_with_a_receipt_it_cannot_read_or_forge_afterwards(conn):
    user, other = new_user(), new_user()
    seed(conn, user)
    # When the end user erases itself
    with conn.transaction():
        as_role(conn, "authenticated", user)
        row = conn.execute("SELECT requested_by, deleted FROM user_memory_erase_me_with_receipt(0)").fetchone()
    # Then its receipt says it asked itself
    assert row is not None and row[0] == "self" and row[1]["user_memory_snapshots"] == 1
    # And end users read no receipts, list no hashes and write receipts for nobody
    for sql, args in [
        ("SELECT count(*) FROM user_memory_erasure_receipts", ()),
        ("SELECT user_memory_user_hash(%s)", (other,)),
        ("SELECT * FROM user_memory_erase_with_receipt(%s, 'operator:x', 0)", (other,)),
        ("SELECT * FROM user_memory_erase_receipted(%s, 'self', 0)", (other,)),
        (
            "INSERT INTO user_memory_erasure_receipts (user_hash, requested_by, deleted)"
            " VALUES (repeat('a', 64), 'x', '{}')",
            (),
        ),
    ]:
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "authenticated", user)
            conn.execute(sql, args)


def test_the_service_must_name_the_requester_and_never_as_self(conn):
    for requester in ("", "self", "x" * 301):
        with pytest.raises(pgerrors.InvalidParameterValue, match="requester"), conn.transaction():
            as_role(conn, "service_role")
            conn.execute("SELECT * FROM user_memory_erase_with_receipt(%s, %s, 0)", (new_user(), requester))
    with pytest.raises(pgerrors.InvalidParameterValue, match="export objects"), conn.transaction():
        as_role(conn, "service_role")
        conn.execute("SELECT * FROM user_memory_erase_with_receipt(%s, 'cli', -1)", (new_user(),))


def test_end_users_see_only_their_own_export_jobs(conn):
    user, other = new_user(), new_user()
    seed(conn, user)
    seed(conn, other)
    with conn.transaction():
        as_role(conn, "authenticated", user)
        owners = {str(r[0]) for r in conn.execute("SELECT user_id FROM user_memory_exports").fetchall()}
    assert owners == {user}
    for sql in (
        "INSERT INTO user_memory_exports (user_id, requested_by) VALUES (auth.uid(), 'self')",
        "UPDATE user_memory_exports SET status = 'done'",
        "DELETE FROM user_memory_exports",
    ):
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "authenticated", user)
            conn.execute(sql)


# Migration 029: the receipt counts the outbox the erase takes with the versions (migration 026's
# trigger): the user's events, their delivery marks, and the webhook deliveries still owed.
OUTBOX = st.fixed_dictionaries(
    {
        "versions": st.integers(min_value=1, max_value=4),
        # each endpoint: registered before the version with this index (0: before all; versions: after all)
        "endpoints": st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=3),
        "delivered": st.sets(st.tuples(st.integers(-1, 2), st.integers(0, 3)), max_size=8),
    }
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=OUTBOX)
def test_the_receipt_counts_the_events_their_deliveries_and_the_webhook_deliveries_owed(conn, case):
    # Given a user with versions (each an event), endpoints registered before some of them (some
    # disabled), and some events marked delivered to EventBridge (-1) or to an endpoint; everything
    # in one transaction rolled back at the end, so the endpoints are this example's alone
    user, other = new_user(), new_user()
    with conn.transaction(force_rollback=True):
        conn.execute("DELETE FROM user_memory_webhooks")
        events: list[int] = []
        endpoints: list[tuple[str, int]] = []  # (sink, after_event_id)
        for version in range(case["versions"] + 1):
            for n, (before, enabled) in enumerate(case["endpoints"]):
                if min(before, case["versions"]) == version:
                    sink = str(uuid.uuid4())
                    after = events[-1] if events else conn.execute(
                        "SELECT coalesce(max(id), 0) FROM user_memory_events").fetchone()[0]  # fmt: skip
                    conn.execute(
                        """INSERT INTO user_memory_webhooks (id, url, secret_name, enabled, after_event_id)
                           VALUES (%s, 'https://example.test/hook', %s, %s, %s)""",
                        (sink, f"hook-{n}", enabled, after),
                    )
                    endpoints.append((sink, after))
            if version < case["versions"]:
                for who in (user, other):
                    conn.execute(
                        "SELECT user_memory_append(%s, %s, '[]', true, %s, 'api: t', NULL)",
                        (who, version, json.dumps({"v": version})),
                    )
                events.append(
                    conn.execute(
                        "SELECT id FROM user_memory_events WHERE user_id = %s AND version = %s", (user, version + 1)
                    ).fetchone()[0]
                )
        sinks = ["eventbridge"] + [s for s, _ in endpoints]
        marks = {(sinks[s + 1], events[e]) for s, e in case["delivered"] if s + 1 < len(sinks) and e < len(events)}
        for sink, event in marks:
            conn.execute("INSERT INTO user_memory_event_deliveries (sink, event_id) VALUES (%s, %s)", (sink, event))
        owed = sum(1 for s, after in endpoints for e in events if e > after and (s, e) not in marks)
        # When the service erases the user
        as_role(conn, "service_role")
        row = conn.execute("SELECT deleted FROM user_memory_erase_with_receipt(%s, 'operator:op-1', 0)", (user,))
        deleted = row.fetchone()[0]
        # Then the receipt counts the outbox rows, the delivery marks and the deliveries still owed
        assert deleted["user_memory_events"] == len(events) == case["versions"]
        assert deleted["user_memory_event_deliveries"] == len(marks)
        assert deleted["pending_webhook_deliveries"] == owed
        # And they are gone, the other user's outbox untouched
        left = conn.execute(
            "SELECT user_id::text, count(*) FROM user_memory_events WHERE user_id IN (%s, %s) GROUP BY 1",
            (user, other),
        ).fetchall()
        assert left == [(other, case["versions"])]
        assert conn.execute(
            "SELECT count(*) FROM user_memory_event_deliveries WHERE event_id = ANY(%s)", (events,)
        ).fetchone()[0] == 0  # fmt: skip


def test_the_legacy_erase_still_answers_its_eleven_rows_and_its_receipt_counts_the_outbox(conn):
    # Given a user with two versions (two events), one delivered to EventBridge
    user = new_user()
    seed(conn, user)
    conn.execute("SELECT user_memory_append(%s, 1, '[]', true, '{\"v\": 2}', 'api: t', NULL)", (user,))
    first = conn.execute("SELECT min(id) FROM user_memory_events WHERE user_id = %s", (user,)).fetchone()[0]
    conn.execute("INSERT INTO user_memory_event_deliveries (sink, event_id) VALUES ('eventbridge', %s)", (first,))
    # When the previous release's erase runs
    with conn.transaction():
        as_role(conn, "service_role")
        rows = conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (user,)).fetchall()
        user_hash = conn.execute("SELECT user_memory_user_hash(%s)", (user,)).fetchone()[0]
    # Then it reads the same eleven rows as before
    assert len(rows) == 11 and dict(rows)["user_memory_snapshots"] == 2
    # And the stored receipt counts the outbox too
    deleted = conn.execute(
        "SELECT deleted FROM user_memory_erasure_receipts WHERE user_hash = %s", (user_hash,)
    ).fetchone()[0]
    assert (deleted["user_memory_events"], deleted["user_memory_event_deliveries"]) == (2, 1)


def test_an_erase_waits_for_an_import_into_the_user_and_erases_what_it_wrote(conn, database_url):
    # Given an import into a user in progress: its transaction holds the job's row (jobs/imports.py)
    # and has written a version, not yet committed
    user = new_user()
    job = conn.execute(
        """INSERT INTO user_memory_imports (user_id, requested_by, status, object_key)
           VALUES (%s, 'operator:op', 'running', 'imports/x.jsonl') RETURNING id""",
        (user,),
    ).fetchone()[0]
    importer = psycopg.connect(database_url)
    eraser = psycopg.connect(database_url, autocommit=True)
    found: list[dict] = []
    try:
        importer.execute("SELECT 1 FROM user_memory_imports WHERE id = %s FOR UPDATE", (job,))
        importer.execute("SELECT user_memory_append(%s, 0, '[]', true, '{\"v\": 1}', 'import', NULL)", (user,))
        # When the user is erased meanwhile
        erase = threading.Thread(
            target=lambda: found.append(
                eraser.execute(
                    "SELECT deleted FROM user_memory_erase_with_receipt(%s, 'operator:op', 0)", (user,)
                ).fetchone()[0]
            )
        )
        erase.start()
        # Then the erase waits for the import
        assert waits_on_a_lock(conn, lambda: eraser.info.backend_pid)
        importer.commit()
        erase.join(timeout=30)
    finally:
        importer.close()
        eraser.close()
    # And, the import committed, erases what it wrote with the job
    assert found and found[0]["user_memory_snapshots"] == 1 and found[0]["user_memory_imports"] == 1
    left = conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE user_id = %s", (user,)).fetchone()[0]
    assert left == 0

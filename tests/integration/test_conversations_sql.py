"""Conversations, messages and memories on PostgreSQL (migrations 011 and 014): idempotent
storage, conversations per user (the same id under two users is two conversations), the
trigger's selection and its index, the memory upsert, row-level security, erase and export.

The session's database is shared with every other test, so each test makes its own users and
conversations (ids with a uuid) and checks them, never table-wide counts.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors as pgerrors
from psycopg import sql
from user_memory.adapters.account import PostgresAccount
from user_memory.adapters.conversations import PENDING_PAGE, PostgresConversations
from user_memory.adapters.migrations import migrate, packaged_migrations
from user_memory.adapters.postgres import transaction
from user_memory.domain.conversations.model import ConversationKey, ConversationMessage, NewMessage
from user_memory.errors import AccessDenied

from tests.integration.roles import as_role

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)
MEMORY = {"discussed": "d", "learned_about_user": ["l"], "decisions": [], "open_loops": [], "tone": "calm"}


def cid(label: str = "c") -> str:
    return f"{label}-{uuid.uuid4()}"


def msg(
    user: uuid.UUID, conversation: str, n: int, *, at: datetime, role: str = "user", text: str = "hi"
) -> NewMessage:
    return NewMessage(
        user_id=user,
        conversation_id=conversation,
        message_id=f"m{n}",
        role=role,
        text=text,
        occurred_at=at,
        source="chat",
    )


def pending(store: PostgresConversations, quiet_before: datetime) -> set[str]:
    """The ids of the pending conversations (each test's ids are its own)."""
    return {key.conversation_id for page in store.pending_pages(quiet_before, page_size=2) for key in page}


def pending_keys(store: PostgresConversations, quiet_before: datetime) -> set[ConversationKey]:
    return {key for page in store.pending_pages(quiet_before, page_size=2) for key in page}


def write_memory(store: PostgresConversations, user: uuid.UUID, conversation: str, memory=MEMORY) -> str:
    key = ConversationKey(user, conversation)
    state = store.state(key)
    assert state is not None
    last = store.messages(key, after_seq=0, through_seq=state.messages, limit=1000)[-1]
    return store.save_memory(state, memory, last, model="test")


@pytest.fixture
def store(pool) -> PostgresConversations:
    return PostgresConversations(pool)


# -- idempotent storage ------------------------------------------------------------------------------


def test_messages_are_stored_once_per_conversation_and_message_id(store, conn):
    # Given a conversation of three messages
    user, c = uuid.uuid4(), cid()
    first = [msg(user, c, n, at=NOW - timedelta(hours=3, minutes=10 - n)) for n in range(3)]
    assert store.record(first) == 3
    # When the same messages arrive again (a redelivered queue message), with one new one
    again = [*first, msg(user, c, 3, at=NOW - timedelta(hours=3))]
    # Then only the new one is recorded
    assert store.record(again) == 1
    assert store.record(again) == 0
    rows = conn.execute(
        "SELECT seq, message_id FROM conversation_messages WHERE conversation_id = %s ORDER BY seq", (c,)
    ).fetchall()
    assert rows == [(1, "m0"), (2, "m1"), (3, "m2"), (4, "m3")]
    # And the conversation counts them and knows its first and last message
    state = store.state(ConversationKey(user, c))
    assert state is not None and (state.user_id, state.messages, state.memory_through) == (user, 4, None)
    assert state.last_message_at == NOW - timedelta(hours=3)
    # And another conversation may use the same message ids
    other = cid()
    assert store.record([msg(user, other, 0, at=NOW)]) == 1


def test_two_users_using_the_same_conversation_id_each_get_their_own_conversation(store, conn):
    # Given user a's conversation c of two messages
    a, b, c = uuid.uuid4(), uuid.uuid4(), cid()
    assert store.record([msg(a, c, 0, at=NOW - timedelta(hours=4)), msg(a, c, 1, at=NOW - timedelta(hours=4))]) == 2
    # When user b sends messages naming the same id, with the same message ids (no error: nothing
    # tells b that the id is in use)
    assert store.record([msg(b, c, 0, at=NOW - timedelta(hours=3), text="b's"), msg(b, c, 5, at=NOW)]) == 2
    # Then b has a conversation of its own, numbered from 1, and a's is untouched
    rows = conn.execute(
        "SELECT user_id, seq, message_id, text FROM conversation_messages WHERE conversation_id = %s"
        " ORDER BY user_id = %s DESC, seq",
        (c, a),
    ).fetchall()
    assert rows == [(a, 1, "m0", "hi"), (a, 2, "m1", "hi"), (b, 1, "m0", "b's"), (b, 2, "m5", "hi")]
    sa, sb = store.state(ConversationKey(a, c)), store.state(ConversationKey(b, c))
    assert sa is not None and (sa.user_id, sa.messages, sa.last_message_at) == (a, 2, NOW - timedelta(hours=4))
    assert sb is not None and (sb.user_id, sb.messages, sb.last_message_at) == (b, 2, NOW)
    # And each has its own memory: a's written, b's (still active) pending on its own
    assert write_memory(store, a, c, {**MEMORY, "tone": "a"}) == "written"
    assert ConversationKey(a, c) not in pending_keys(store, NOW + timedelta(seconds=1))
    assert ConversationKey(b, c) in pending_keys(store, NOW + timedelta(seconds=1))
    assert write_memory(store, b, c, {**MEMORY, "tone": "b"}) == "written"
    memories = conn.execute(
        "SELECT user_id, memory ->> 'tone', last_message_seq FROM conversation_memories WHERE conversation_id = %s",
        (c,),
    ).fetchall()
    assert sorted(memories, key=lambda r: r[1]) == [(a, "a", 2), (b, "b", 2)]
    # And a batch mixing both users' messages under the one id is recorded into each one's
    assert store.record([msg(b, c, 6, at=NOW), msg(a, c, 6, at=NOW)]) == 2
    assert [store.state(ConversationKey(u, c)).messages for u in (a, b)] == [3, 3]  # type: ignore[union-attr]


def test_whoever_writes_first_under_an_id_locks_no_one_out(store, pool):
    # Given a user who writes first under an id that another user's product will use later
    squatter, owner, c = uuid.uuid4(), uuid.uuid4(), cid()
    with transaction(pool, end_user=squatter) as tx:
        assert PostgresConversations(tx).record([msg(squatter, c, 0, at=NOW)]) == 1
    # When the real owner records its messages under that id, as an end user and through the service
    with transaction(pool, end_user=owner) as tx:
        assert PostgresConversations(tx).record([msg(owner, c, 0, at=NOW), msg(owner, c, 1, at=NOW)]) == 2
    assert store.record([msg(owner, c, 2, at=NOW)]) == 1
    # Then they are recorded, in the owner's own conversation
    state = store.state(ConversationKey(owner, c))
    assert state is not None and state.messages == 3
    # And the owner sees only its own conversation of that id, the squatter only its own
    for user, count in ((owner, 3), (squatter, 1)):
        with transaction(pool, end_user=user) as tx, tx.connection() as conn:
            rows = conn.execute(
                "SELECT user_id, count(*) FROM conversation_messages WHERE conversation_id = %s GROUP BY 1", (c,)
            ).fetchall()
        assert rows == [(user, count)]


def test_an_end_user_records_its_own_messages_through_the_function_and_no_one_elses(pool, conn):
    me, someone = uuid.uuid4(), uuid.uuid4()
    c = cid()
    # Given a transaction as the end user (as the API runs it)
    with transaction(pool, end_user=me) as tx:
        # When it records messages of its own conversation
        assert PostgresConversations(tx).record([msg(me, c, 0, at=NOW), msg(me, c, 1, at=NOW)]) == 2
    assert conn.execute("SELECT user_id FROM conversations WHERE conversation_id = %s", (c,)).fetchall() == [(me,)]
    # And one naming an id another user has is its own conversation too, with no error (no oracle)
    taken = cid()
    PostgresConversations(pool).record([msg(someone, taken, 0, at=NOW)])
    with transaction(pool, end_user=me) as tx:
        assert PostgresConversations(tx).record([msg(me, taken, 0, at=NOW)]) == 1
    # Then a message for another user is refused
    with pytest.raises(AccessDenied, match="own messages"), transaction(pool, end_user=me) as tx:
        PostgresConversations(tx).record([msg(someone, cid(), 0, at=NOW)])
    # And the tables themselves cannot be written directly, even its own rows
    for statement in (
        "UPDATE conversations SET messages = 0 WHERE conversation_id = %s",
        "UPDATE conversations SET memory_through = 2 WHERE conversation_id = %s",
        "DELETE FROM conversation_messages WHERE conversation_id = %s",
        "INSERT INTO conversation_memories (conversation_id, user_id, memory, last_message_seq, last_message_id,"
        " last_message_at, model) SELECT %s, user_id, '{}', 1, 'x', now(), 'me' FROM conversations LIMIT 1",
    ):
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "authenticated", str(me))
            conn.execute(statement, (c,))
    assert conn.execute("SELECT messages FROM conversations WHERE conversation_id = %s", (c,)).fetchone()[0] == 2


# -- the trigger's selection -------------------------------------------------------------------------


def test_the_trigger_takes_quiet_conversations_without_a_memory_or_with_a_stale_one(store):
    # Given conversations quiet for 3 hours: one without a memory, one whose memory is current,
    # one whose memory is older than a message that arrived later; and one active 30 minutes ago
    user = uuid.uuid4()
    quiet, current, stale, active = cid("quiet"), cid("current"), cid("stale"), cid("active")
    three_hours_ago = NOW - timedelta(hours=3)
    for c in (quiet, current, stale):
        store.record([msg(user, c, 0, at=three_hours_ago - timedelta(minutes=5)), msg(user, c, 1, at=three_hours_ago)])
    store.record([msg(user, active, 0, at=NOW - timedelta(minutes=30))])
    assert write_memory(store, user, current) == "written"
    assert write_memory(store, user, stale) == "written"
    # (a message recorded after the memory, though it occurred earlier: the memory does not cover it)
    store.record([msg(user, stale, 2, at=three_hours_ago - timedelta(minutes=1))])
    # When the trigger looks for conversations quiet for more than 2 hours
    found = pending(store, NOW - timedelta(hours=2))
    # Then it takes the one without a memory and the stale one, not the current or the active one
    assert {quiet, stale} <= found
    assert current not in found and active not in found
    # And with a threshold of 10 minutes the active one is quiet too
    assert active in pending(store, NOW - timedelta(minutes=10))


def test_pages_walk_every_pending_conversation_once_in_quiet_order(store):
    # Given 7 pending conversations quiet at distinct times long ago (before every other test's),
    # and at each time the same ids under two more users (ties broken by user, then id)
    users = sorted(uuid.uuid4() for _ in range(3))
    era = datetime(2001, 1, 1, tzinfo=UTC)
    ids = [cid(f"page{i}") for i in range(7)]
    for i, c in enumerate(ids):
        store.record([msg(user, c, 0, at=era + timedelta(minutes=i)) for user in users])
    # When the trigger reads pages of 2 up to just after them
    pages = list(store.pending_pages(era + timedelta(minutes=7), page_size=2))
    # Then every one comes once, oldest quiet first, in pages of at most 2
    flat = [key for page in pages for key in page if key.conversation_id in ids]
    assert flat == [ConversationKey(user, c) for c in ids for user in users]
    assert all(len(page) <= 2 for page in pages)


def test_the_trigger_query_is_served_by_the_partial_pending_index(conn):
    # Given a table shaped like production's (in a transaction rolled back afterwards): 20,000
    # conversations whose memory is current and 500 pending ones, with fresh statistics
    params = {
        "before": NOW - timedelta(hours=2),
        "after_at": datetime(1, 1, 1, tzinfo=UTC),
        "after_user": uuid.UUID(int=0),
        "after_id": "",
        "limit": 1000,
    }
    with conn.transaction(force_rollback=True):
        conn.execute(
            """INSERT INTO conversations (conversation_id, user_id, messages, first_message_at, last_message_at,
                                          memory_through)
               SELECT 'plan-' || g, gen_random_uuid(), 4, now() - interval '3 days', now() - make_interval(mins => g),
                      CASE WHEN g % 41 = 0 THEN NULL ELSE 4 END
                 FROM generate_series(1, 20500) g"""
        )
        conn.execute("ANALYZE conversations")
        conn.execute("SET LOCAL enable_seqscan = off")  # still a small table: priced as a large one
        # When the planner plans one of the trigger's pages
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + PENDING_PAGE, params).fetchall())
    # Then it reads idx_conversations_pending (only pending rows, already in order: no sort)
    # (an index-only scan where the visibility map allows, as in bench/results/conversations.txt)
    assert re.search(r"Index (Only )?Scan using idx_conversations_pending", plan), plan
    assert "Sort" not in plan, plan
    # And the index is partial on exactly the query's pending predicate
    definition = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_conversations_pending'")
    assert definition.fetchone()[0].endswith(
        "USING btree (last_message_at, user_id, conversation_id) WHERE (COALESCE(memory_through, 0) < messages)"
    )


def test_memories_updated_in_a_window_are_read_through_their_index(conn, store):
    # Given a user with two conversation memories
    user = uuid.uuid4()
    a, b = cid(), cid()
    store.record([msg(user, a, 0, at=NOW - timedelta(hours=4)), msg(user, b, 0, at=NOW - timedelta(hours=4))])
    assert write_memory(store, user, a) == write_memory(store, user, b) == "written"
    # When another part of the service reads the user's memories updated in a window
    found = store.memories_updated(user, NOW - timedelta(minutes=5), datetime.now(UTC) + timedelta(seconds=1))
    # Then both come, with what they cover
    assert sorted(m.conversation_id for m in found) == sorted([a, b])
    assert all(m.memory == MEMORY and m.last_message_seq == 1 and m.model == "test" for m in found)
    assert store.memories_updated(user, NOW - timedelta(days=2), NOW - timedelta(days=1)) == []
    # And the query is one range of idx_conversation_memories_user_updated
    conn.execute("SET enable_seqscan = off")
    try:
        rows = conn.execute(
            "EXPLAIN SELECT * FROM conversation_memories WHERE user_id = %s AND updated_at >= %s AND updated_at < %s",
            (user, NOW, NOW),
        ).fetchall()
    finally:
        conn.execute("RESET enable_seqscan")
    assert "idx_conversation_memories_user_updated" in "\n".join(r[0] for r in rows)


# -- the memory upsert -------------------------------------------------------------------------------


def test_a_memory_only_moves_forward_and_takes_its_conversation_out_of_the_pending_set(store, conn):
    user, c = uuid.uuid4(), cid()
    store.record([msg(user, c, n, at=NOW - timedelta(hours=3)) for n in range(3)])
    key = ConversationKey(user, c)
    state = store.state(key)
    assert state is not None
    messages = store.messages(key, after_seq=0, through_seq=3, limit=10)
    assert [m.seq for m in messages] == [1, 2, 3]
    # When a memory covering message 2 is written, then one covering 3, then 2 again
    assert store.save_memory(state, {**MEMORY, "tone": "two"}, messages[1], model="m") == "written"
    assert c in pending(store, NOW)
    assert store.save_memory(state, {**MEMORY, "tone": "three"}, messages[2], model="m") == "written"
    assert store.save_memory(state, {**MEMORY, "tone": "old"}, messages[1], model="m") == "unchanged"
    assert store.save_memory(state, {**MEMORY, "tone": "same"}, messages[2], model="m") == "unchanged"
    # Then the stored memory is the one covering the last message, and the conversation is no longer pending
    row = conn.execute(
        "SELECT memory ->> 'tone', last_message_seq, last_message_id FROM conversation_memories"
        " WHERE conversation_id = %s",
        (c,),
    ).fetchone()
    assert row == ("three", 3, "m2")
    assert c not in pending(store, NOW)
    after = store.state(key)
    assert after is not None and after.memory_through == 3 and after.up_to_date


def test_a_memory_for_an_erased_conversation_is_not_written_into_another_users_of_the_same_id(store, conn):
    user, other, c = uuid.uuid4(), uuid.uuid4(), cid()
    store.record([msg(user, c, 0, at=NOW - timedelta(hours=3))])
    state = store.state(ConversationKey(user, c))
    assert state is not None
    last = ConversationMessage(conversation_id=c, seq=1, message_id="m0", role="user", text="hi", occurred_at=NOW)
    # Given the user is erased after the worker read the conversation
    conn.execute("SELECT * FROM user_memory_erase(%s)", (user,))
    # Then the memory is not written
    assert store.save_memory(state, MEMORY, last, model="m") == "missing"
    # Nor when another user has since started a conversation with the same id (it is not the erased one)
    store.record([msg(other, c, 0, at=NOW)])
    assert store.save_memory(state, MEMORY, last, model="m") == "missing"
    assert (
        conn.execute("SELECT count(*) FROM conversation_memories WHERE conversation_id = %s", (c,)).fetchone()[0] == 0
    )
    assert conn.execute("SELECT count(*) FROM user_activity WHERE user_id = %s", (other,)).fetchone()[0] == 0
    # And the other user's conversation stays pending, untouched
    after = store.state(ConversationKey(other, c))
    assert after is not None and (after.messages, after.memory_through) == (1, None)


# -- row-level security, erase and export --------------------------------------------------------------


@pytest.fixture
def two_users_with_memories(store):
    """Two users, each with a conversation of two messages and a memory, under the same id."""
    users = {}
    c = cid()
    for _ in range(2):
        user = uuid.uuid4()
        said = f"said by {user}"
        store.record(
            [msg(user, c, 0, at=NOW - timedelta(hours=3), text=said), msg(user, c, 1, at=NOW, role="assistant")]
        )
        assert write_memory(store, user, c, {**MEMORY, "tone": said}) == "written"
        users[user] = c
    return users


def test_an_end_user_sees_only_its_own_conversations_messages_and_memories(conn, two_users_with_memories):
    (a, ca), (b, cb) = two_users_with_memories.items()
    for table in ("conversations", "conversation_messages", "conversation_memories"):
        with conn.transaction():
            # Given user a's claims, When a reads the table asking for both conversations
            as_role(conn, "authenticated", str(a))
            rows = conn.execute(
                sql.SQL("SELECT DISTINCT conversation_id, user_id FROM {} WHERE conversation_id IN (%s, %s)").format(
                    sql.Identifier(table)
                ),
                (ca, cb),
            ).fetchall()
        # Then only a's rows come back (b's conversation has the same id)
        assert ca == cb and rows == [(ca, a)], table
        # And anon is refused outright
        with pytest.raises(pgerrors.InsufficientPrivilege), conn.transaction():
            as_role(conn, "anon")
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))


def test_the_erase_removes_a_users_conversations_and_only_that_users(conn, two_users_with_memories):
    (a, ca), (b, cb) = two_users_with_memories.items()
    # When the service erases user a
    with conn.transaction():
        as_role(conn, "service_role")
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
    # Then it reports the conversation, its two messages and its memory
    assert (counts["conversations"], counts["conversation_messages"], counts["conversation_memories"]) == (1, 2, 1)
    for table in ("conversations", "conversation_messages", "conversation_memories"):
        left = conn.execute(
            sql.SQL("SELECT user_id, count(*) FROM {} WHERE conversation_id IN (%s, %s) GROUP BY 1").format(
                sql.Identifier(table)
            ),
            (ca, cb),
        ).fetchall()
        # And b's rows are all there, a's are gone
        assert [r[0] for r in left] == [b], table
    # And the end user's own erase covers them the same way
    with conn.transaction():
        as_role(conn, "authenticated", str(b))
        mine = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase_me()").fetchall())
    assert (mine["conversations"], mine["conversation_messages"], mine["conversation_memories"]) == (1, 2, 1)


def test_an_erase_waits_for_a_memory_being_written_and_removes_it_too(database_url, conn, store):
    user, c = uuid.uuid4(), cid()
    store.record([msg(user, c, 0, at=NOW - timedelta(hours=3))])
    key = ConversationKey(user, c)
    state = store.state(key)
    assert state is not None
    (last,) = store.messages(key, after_seq=0, through_seq=1, limit=1)
    # Given a memory written in a transaction that is still open (it holds the conversation's row lock)
    writer = psycopg.connect(database_url)
    try:
        assert PostgresConversations(_One(writer)).save_memory(state, MEMORY, last, model="m") == "written"
        counts: dict[str, int] = {}

        def erase() -> None:
            with psycopg.connect(database_url, autocommit=True) as other:
                counts.update(other.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (user,)).fetchall())

        eraser = threading.Thread(target=erase)
        eraser.start()
        eraser.join(timeout=0.5)
        # When the erase starts, it waits
        assert eraser.is_alive()
        writer.commit()
        eraser.join(timeout=10)
    finally:
        writer.close()
    # Then, once the memory is committed, the erase removes it with the rest
    assert counts["conversation_memories"] == 1 and counts["conversations"] == 1
    assert (
        conn.execute("SELECT count(*) FROM conversation_memories WHERE conversation_id = %s", (c,)).fetchone()[0] == 0
    )


class _One:
    """A connection source that always hands out the same connection (its transaction left open)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def connection(self):  # a context manager
        from contextlib import nullcontext

        return nullcontext(self.conn)


def test_the_export_holds_each_conversation_with_its_messages_and_memory(pool, two_users_with_memories):
    (a, ca), (b, _) = two_users_with_memories.items()
    # When user a's account is exported as a itself (row-level security on)
    with transaction(pool, end_user=a) as tx:
        exported = PostgresAccount(tx, end_user=True).conversations(a)
    # Then it holds a's conversation, its messages in order and its memory, nothing of b
    assert [c.conversation_id for c in exported] == [ca]
    (conversation,) = exported
    assert [(m.seq, m.role, m.text) for m in conversation.messages] == [
        (1, "user", f"said by {a}"),
        (2, "assistant", "hi"),
    ]
    assert conversation.memory is not None and conversation.memory.memory == {**MEMORY, "tone": f"said by {a}"}
    assert conversation.memory.last_message_seq == 2
    # And as the service for b (operators, no row-level security), b's only, though the ids are the same
    with transaction(pool) as tx:
        [theirs] = PostgresAccount(tx).conversations(b)
    assert theirs.conversation_id == ca and theirs.memory is not None and theirs.memory.user_id == b
    assert [(m.seq, m.text) for m in theirs.messages] == [(1, f"said by {b}"), (2, "hi")]


# -- migration 014 on a database that already has conversations ----------------------------------------


def test_migration_014_keeps_every_existing_conversation_with_its_owner(fresh_db, tmp_path):
    # Given a database migrated up to just before 014, holding conversations under 011's global ids:
    # a's x (two messages, a memory covering the first) and b's y (one message)
    earlier = [p for p in sorted(packaged_migrations().glob("*.sql")) if p.name < "014"]
    for path in earlier:
        (tmp_path / path.name).write_text(path.read_text())
    assert migrate(fresh_db, tmp_path) == [p.stem for p in earlier]
    a, b = uuid.uuid4(), uuid.uuid4()
    at = NOW - timedelta(hours=3)
    old = [msg(a, "x", 0, at=at), msg(a, "x", 1, at=at + timedelta(minutes=1)), msg(b, "y", 0, at=at)]
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(_RECORD_SQL, (json.dumps([m.as_json() for m in old]),))
        conn.execute(
            """INSERT INTO conversation_memories (conversation_id, user_id, memory, last_message_seq, last_message_id,
                                                  last_message_at, model)
               VALUES ('x', %s, %s, 1, 'm0', %s, 'old')""",
            (a, json.dumps(MEMORY), at),
        )
        conn.execute("UPDATE conversations SET memory_through = 1 WHERE conversation_id = 'x'")
        before = _snapshot(conn)
    # When 014 is applied
    (tmp_path / "014_conversations_per_user.sql").write_text(
        (packaged_migrations() / "014_conversations_per_user.sql").read_text()
    )
    assert migrate(fresh_db, tmp_path) == ["014_conversations_per_user"]
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        # Then every row is there as it was, with its owner
        assert _snapshot(conn) == before
        # And the service goes on from there: a's x is pending (its memory covers 1 of 2), keyed by a
        store = PostgresConversations(_One(conn))
        assert pending_keys(store, NOW) == {ConversationKey(a, "x"), ConversationKey(b, "y")}
        state = store.state(ConversationKey(a, "x"))
        assert state is not None and (state.messages, state.memory_through, state.memory) == (2, 1, MEMORY)
        # And b may now use the id x too: its own conversation, a's untouched
        assert store.record([msg(b, "x", 0, at=NOW), msg(a, "x", 1, at=NOW)]) == 1
        assert store.state(ConversationKey(b, "x")).messages == 1  # type: ignore[union-attr]
        assert store.state(ConversationKey(a, "x")).messages == 2  # type: ignore[union-attr]
        # And erasing a removes a's rows only
        counts = dict(conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (a,)).fetchall())
        assert (counts["conversations"], counts["conversation_messages"], counts["conversation_memories"]) == (1, 2, 1)
        assert conn.execute("SELECT user_id, conversation_id FROM conversations ORDER BY 2").fetchall() == [
            (b, "x"),
            (b, "y"),
        ]


_RECORD_SQL = "SELECT * FROM user_memory_record_messages(%s::jsonb)"


def _snapshot(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """Every conversation row, as the three tables hold it."""
    return {
        "conversations": conn.execute(
            "SELECT conversation_id, user_id, messages, first_message_at, last_message_at, memory_through, created_at"
            " FROM conversations ORDER BY conversation_id"
        ).fetchall(),
        "messages": conn.execute(
            "SELECT conversation_id, seq, user_id, message_id, role, text, occurred_at, source"
            " FROM conversation_messages ORDER BY conversation_id, seq"
        ).fetchall(),
        "memories": conn.execute(
            "SELECT conversation_id, user_id, memory, last_message_seq, last_message_id, model"
            " FROM conversation_memories ORDER BY conversation_id"
        ).fetchall(),
    }

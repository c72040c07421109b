"""PostgreSQL adapter of conversations, their messages and memories (migrations 011 and 014).

A conversation is (user_id, conversation_id): every statement names both, so no statement can
reach another user's conversation of the same id.

SQL only. Messages go in through `user_memory_record_messages` (one statement a batch; the only
way in for end users, who run it as themselves under the API's transaction); a memory is
upserted together with its conversation's `memory_through` in one statement; the trigger's
pages walk the partial index of pending conversations (`idx_conversations_pending`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb

from user_memory.adapters.postgres import _Database
from user_memory.domain.conversations.model import (
    ConversationKey,
    ConversationMessage,
    ConversationState,
    ExportedConversation,
    ExportedMessage,
    NewMessage,
    StoredMemory,
)

_RECORD = "SELECT received, recorded FROM user_memory_record_messages(%s)"

# The trigger's keyset page: conversations whose memory does not cover their last message and
# whose last message occurred before the cutoff, oldest quiet first. Served by the partial index
# idx_conversations_pending (last_message_at, user_id, conversation_id) WHERE
# coalesce(memory_through, 0) < messages: the predicate below is the index's own, so only pending
# rows are read, and the row comparison continues after the previous page in the index's order
# (never OFFSET).
PENDING_PAGE = """
SELECT user_id, conversation_id, last_message_at FROM conversations
 WHERE coalesce(memory_through, 0) < messages
   AND last_message_at < %(before)s
   AND (last_message_at, user_id, conversation_id) > (%(after_at)s, %(after_user)s, %(after_id)s)
 ORDER BY last_message_at, user_id, conversation_id
 LIMIT %(limit)s
"""

_STATE = """
SELECT c.messages, c.last_message_at, c.memory_through, m.memory
  FROM conversations c
  LEFT JOIN conversation_memories m ON m.user_id = c.user_id AND m.conversation_id = c.conversation_id
 WHERE c.user_id = %s AND c.conversation_id = %s
"""

_MESSAGES = """
SELECT seq, message_id, role, text, occurred_at FROM conversation_messages
 WHERE user_id = %s AND conversation_id = %s AND seq > %s AND seq <= %s
 ORDER BY seq
 LIMIT %s
"""

# One statement: lock the conversation (still there: not erased meanwhile), insert or move the
# memory forward (never back: a memory covering as much or more is left alone), record how far
# it goes on the conversation, which takes it out of the pending index, and hand the memory to
# the user's next daily summary as a `conversation_memory` activity.
_SAVE = """
WITH conv AS (
  SELECT conversation_id, user_id FROM conversations
   WHERE conversation_id = %(c)s AND user_id = %(u)s AND messages >= %(seq)s
   FOR UPDATE
), saved AS (
  INSERT INTO conversation_memories AS cm
         (conversation_id, user_id, memory, last_message_seq, last_message_id, last_message_at, model)
  SELECT conversation_id, user_id, %(memory)s, %(seq)s, %(mid)s, %(mat)s, %(model)s FROM conv
  ON CONFLICT (user_id, conversation_id) DO UPDATE
     SET memory = EXCLUDED.memory, last_message_seq = EXCLUDED.last_message_seq,
         last_message_id = EXCLUDED.last_message_id, last_message_at = EXCLUDED.last_message_at,
         model = EXCLUDED.model, updated_at = now()
   WHERE cm.last_message_seq < EXCLUDED.last_message_seq
  RETURNING cm.user_id, cm.conversation_id
), marked AS (
  UPDATE conversations c SET memory_through = %(seq)s, updated_at = now()
    FROM saved s
   WHERE c.user_id = s.user_id AND c.conversation_id = s.conversation_id
  RETURNING c.conversation_id
), noted AS (
  -- The user's daily summary takes the memory as input: an activity of kind
  -- conversation_memory, idempotent on the conversation and the last message it covers (the
  -- activity's key is per user already: (user_id, source, external_id)).
  INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
  SELECT conv.user_id, %(mat)s, 'conversation_memory',
         jsonb_build_object('conversation_id', conv.conversation_id, 'through_message', %(seq)s::int,
                            'memory', %(memory)s::jsonb),
         'conversations', conv.conversation_id || ':' || %(seq)s::text
    FROM conv JOIN saved s ON s.user_id = conv.user_id AND s.conversation_id = conv.conversation_id
  ON CONFLICT (user_id, source, external_id) DO NOTHING
)
SELECT (SELECT count(*) FROM conv), (SELECT count(*) FROM marked)
"""

_MEMORY_COLUMNS = ", ".join(
    ("conversation_id", "user_id", "memory", "last_message_seq", "last_message_id", "last_message_at", "model")
    + ("created_at", "updated_at")
)

# Served by idx_conversation_memories_user_updated (user_id, updated_at).
_UPDATED = f"""
SELECT {_MEMORY_COLUMNS} FROM conversation_memories
 WHERE user_id = %s AND updated_at >= %s AND updated_at < %s
 ORDER BY updated_at, conversation_id
"""

_NEVER = datetime.fromisoformat("0001-01-01T00:00:00+00:00")
_NIL = uuid.UUID(int=0)


def _stored(r: Sequence[Any]) -> StoredMemory:
    return StoredMemory(
        conversation_id=r[0],
        user_id=r[1],
        memory=r[2],
        last_message_seq=r[3],
        last_message_id=r[4],
        last_message_at=r[5],
        model=r[6],
        created_at=r[7],
        updated_at=r[8],
    )


class PostgresConversations(_Database):
    """ConversationStore on PostgreSQL (a pool, or one open transaction)."""

    def record(self, messages: Sequence[NewMessage]) -> int:
        if not messages:
            return 0
        with self.connection() as conn:
            row = conn.execute(_RECORD, (Jsonb([m.as_json() for m in messages]),)).fetchone()
        return int(row[1]) if row else 0

    def pending_pages(self, quiet_before: datetime, *, page_size: int) -> Iterator[list[ConversationKey]]:
        after: dict[str, Any] = {"after_at": _NEVER, "after_user": _NIL, "after_id": ""}
        while True:
            with self.connection() as conn:
                rows = conn.execute(
                    PENDING_PAGE, {"before": quiet_before, **after, "limit": page_size}, prepare=True
                ).fetchall()
            if not rows:
                return
            yield [ConversationKey(r[0], r[1]) for r in rows]
            if len(rows) < page_size:
                return
            after = {"after_user": rows[-1][0], "after_id": rows[-1][1], "after_at": rows[-1][2]}

    def state(self, key: ConversationKey) -> ConversationState | None:
        with self.connection() as conn:
            row = conn.execute(_STATE, (key.user_id, key.conversation_id), prepare=True).fetchone()
        if row is None:
            return None
        return ConversationState(
            conversation_id=key.conversation_id,
            user_id=key.user_id,
            messages=row[0],
            last_message_at=row[1],
            memory_through=row[2],
            memory=row[3],
        )

    def messages(
        self, key: ConversationKey, *, after_seq: int, through_seq: int, limit: int
    ) -> list[ConversationMessage]:
        params = (key.user_id, key.conversation_id, after_seq, through_seq, limit)
        with self.connection() as conn:
            rows = conn.execute(_MESSAGES, params, prepare=True).fetchall()
        return [
            ConversationMessage(
                conversation_id=key.conversation_id, seq=r[0], message_id=r[1], role=r[2], text=r[3], occurred_at=r[4]
            )
            for r in rows
        ]

    def save_memory(
        self, state: ConversationState, memory: dict[str, Any], last: ConversationMessage, *, model: str
    ) -> Literal["written", "unchanged", "missing"]:
        params = {
            "c": state.conversation_id,
            "u": state.user_id,
            "seq": last.seq,
            "memory": Jsonb(memory),
            "mid": last.message_id,
            "mat": last.occurred_at,
            "model": model,
        }
        with self.connection() as conn:
            row = conn.execute(_SAVE, params, prepare=True).fetchone()
        if row is None or not row[0]:
            return "missing"
        return "written" if row[1] else "unchanged"

    def memories_updated(self, user_id: uuid.UUID, start: datetime, end: datetime) -> list[StoredMemory]:
        """A user's conversation memories updated in [start, end), oldest update first: the input
        the daily summary takes (one index range scan of idx_conversation_memories_user_updated)."""
        with self.connection() as conn:
            rows = conn.execute(_UPDATED, (user_id, start, end)).fetchall()
        return [_stored(r) for r in rows]


# -- the export ----------------------------------------------------------------------------------


_EXPORT_CONVERSATIONS = """
SELECT conversation_id, first_message_at, last_message_at, created_at FROM conversations
 WHERE user_id = %s ORDER BY created_at, conversation_id
"""

# Messages and memories carry their conversation's user_id (a foreign key on both columns), so
# each table is read by its own user_id: a range of its primary key.
_EXPORT_MESSAGES = """
SELECT conversation_id, seq, message_id, role, text, occurred_at, source FROM conversation_messages
 WHERE user_id = %s
 ORDER BY conversation_id, seq
"""

_EXPORT_MEMORIES = f"""
SELECT {_MEMORY_COLUMNS} FROM conversation_memories WHERE user_id = %s
"""


def export_conversations(db: _Database, user_id: uuid.UUID) -> list[ExportedConversation]:
    """Every conversation of the user with its messages and memory (three statements, one per table)."""
    with db.connection() as conn:
        conversations = conn.execute(_EXPORT_CONVERSATIONS, (user_id,)).fetchall()
        if not conversations:
            return []
        messages: dict[str, list[ExportedMessage]] = {}
        for r in conn.execute(_EXPORT_MESSAGES, (user_id,)):
            messages.setdefault(r[0], []).append(
                ExportedMessage(seq=r[1], message_id=r[2], role=r[3], text=r[4], occurred_at=r[5], source=r[6])
            )
        memories = {r[0]: _stored(r) for r in conn.execute(_EXPORT_MEMORIES, (user_id,))}
    return [
        ExportedConversation(
            conversation_id=r[0],
            first_message_at=r[1],
            last_message_at=r[2],
            created_at=r[3],
            messages=messages.get(r[0], []),
            memory=memories.get(r[0]),
        )
        for r in conversations
    ]

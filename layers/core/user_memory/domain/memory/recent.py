"""What was learned since the last summary: the conversation memories no version has taken in yet,
as the prompt block's recent lines (`recent_items`).

A conversation memory is written when a chat goes quiet and noted as the user's activity (kind
`conversation_memory`, its payload the conversation's whole memory so far); the next summary
(nightly, or a refresh on demand) takes it in and marks it summarized by the version it wrote.
Until then the prompt carries its facts, marked as recent.

What the summary already holds, precisely: an item (learned about the user, a decision, an open
loop) of a conversation's newest pending memory is left out when
1. the conversation's newest memory a version consumed (its activity marked summarized) holds the
   same item (compared without case and extra whitespace): the memory is cumulative, so those
   items went into that version; or
2. the document's own rendered lines already contain it (the summary wrote it in its words).
An item said in two conversations is shown once, from the newest.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

# Conversations whose pending memories one prompt reads (the newest): bounds the read and the block.
MAX_RECENT_CONVERSATIONS = 20
RecentKind = Literal["learned", "decided", "open_loop"]
# The memory's fields the prompt carries, in this order, and their labels.
FIELDS: tuple[tuple[str, RecentKind], ...] = (
    ("learned_about_user", "learned"),
    ("decisions", "decided"),
    ("open_loops", "open_loop"),
)
LABELS: dict[RecentKind, str] = {"learned": "learned", "decided": "decided", "open_loop": "open loop"}


@dataclass(frozen=True, kw_only=True)
class NotedMemory:
    """A conversation memory noted as activity: the newest pending one of a conversation
    (`pending`), or the newest one a version consumed."""

    conversation_id: str
    pending: bool
    occurred_at: datetime
    memory: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class RecentItem:
    """One fact not yet in the summary, from the conversation it was said in."""

    kind: RecentKind
    text: str
    conversation_id: str
    occurred_at: datetime

    @property
    def line(self) -> str:
        return f"Recent - {LABELS[self.kind]}: {self.text}"


class RecentMemories(Protocol):
    """Reads the noted memories of the conversations with a pending one (adapters/refreshes.py)."""

    def noted(self, user_id: uuid.UUID) -> tuple[list[NotedMemory], int | None]:
        """The noted memories, and the head's version as the same read saw it (None: none noted)."""
        ...


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _in(key: str, held: str) -> bool:
    """`key` stands in `held` as whole words (an item "tea" is not held by "steam")."""
    return re.search(r"(?<!\w)" + re.escape(key) + r"(?!\w)", held) is not None


def _texts(memory: dict[str, Any], field: str) -> list[str]:
    values = memory.get(field)
    if not isinstance(values, list):
        return []
    return [" ".join(v.split()) for v in values if isinstance(v, str) and v.strip()]


def recent_items(noted: list[NotedMemory], *, document_text: str = "") -> list[RecentItem]:
    """The pending memories' items the summary does not hold (see the module), the newest
    conversation first, each conversation's items in the memory's order (learned, decided, open
    loops)."""
    consumed: dict[str, set[str]] = {}
    for m in noted:
        if not m.pending:
            consumed[m.conversation_id] = {_key(t) for field, _ in FIELDS for t in _texts(m.memory, field)}
    held = _key(document_text)
    seen: set[str] = set()
    items: list[RecentItem] = []
    pending = sorted((m for m in noted if m.pending), key=lambda m: (m.occurred_at, m.conversation_id), reverse=True)
    for m in pending:
        taken = consumed.get(m.conversation_id, set())
        for field, kind in FIELDS:
            for text in _texts(m.memory, field):
                key = _key(text)
                if key in taken or key in seen or (held and _in(key, held)):
                    continue
                seen.add(key)
                items.append(
                    RecentItem(kind=kind, text=text, conversation_id=m.conversation_id, occurred_at=m.occurred_at)
                )
    return items

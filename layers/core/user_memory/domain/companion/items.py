"""The items of a memory document: what search finds and what the companion's queries read.

An item is an element (a goal, to-do or event of the companion schema, a part of user_state,
an object in a list such as a tutor's areas_to_improve) or a document leaf (a non-empty
string), each at its JSON Pointer. Its text is what full-text search and embeddings see: the
element's words, or the leaf's key and value ("occupation: nurse"). Sensitive fields
(date_of_birth, email, phone) and bookkeeping (versions, scores, ids, timestamps) are never
items, so they never reach the index or an embeddings endpoint; an item's value is kept without
its sensitive fields at any depth (an event's attendees' emails), so no search result or query
that reads the index carries them (`redacted`).

`item_changes(old, new, patch)` is what a version changes in the index: only the sections the
patch touched are walked (`/todos/<id>` for an element, the top-level key otherwise); an item
whose row would be identical is not rewritten, so it keeps its version, and an item that left
is removed with the version that removed it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from user_memory.domain.companion.recurrence import INDEX_STEPS, budget_scope, event_start, parse_when, recurrence_end
from user_memory.domain.memory.patching import escape_token
from user_memory.domain.model import Document, Patch

if TYPE_CHECKING:
    from user_memory.domain.ports import IndexUpkeep

# The companion schema's element collections (maps keyed by id; domain/companion/schema.py), and at most
# how many elements each holds (a user's memory stays one document under its size limit).
ELEMENT_KINDS = {"goals": "goal", "todos": "todo", "events": "event"}
MAX_ELEMENTS = 2000
# Never items (so never in the index, nor sent to an embeddings endpoint), never logged.
SENSITIVE_FIELDS = frozenset({"date_of_birth", "email", "phone"})
# Keys whose values are bookkeeping, not something a person would search for.
SKIPPED_KEYS = frozenset(
    {
        "version",
        "last_updated_by",
        "schema_version",
        "recency_score",
        "influence_score",
        "last_updated",
        "last_modified",
        "last_summarized_at",
        "completed_at",
        "id",
        "response_status",
    }
)
# Keys of an element that describe when or how it stands rather than what it is: typed columns
# for the queries, not words for search.
NON_TEXT_KEYS = frozenset(
    {
        "status",
        "priority",
        "size",
        "start",
        "end",
        "due_date",
        "target_date",
        "recurrence",
        "source",
        "at",
        "percent",
        "parent_id",
        "goal_id",
        "first_noted",
        "last_noted",
        "severity",
    }
)
# The words of an element, in a fixed order (the text, and so its embedding, never depends on
# the order a document's keys come in).
ELEMENT_TEXT = {
    "goal": ("title", "description", "category", "progress"),
    "todo": ("text", "category", "tags", "notes"),
    "event": ("summary", "description", "location", "attendees"),
    "part": ("name", "goals"),
}
# Top-level maps whose values are elements (one item each, at a stable pointer).
ELEMENT_MAPS = {**ELEMENT_KINDS, "parts": "part"}
# Kinds whose whole value the companion's queries return (to-dos due, events, goals): the other
# elements' values leave their bookkeeping out (SKIPPED_KEYS).
_QUERIED_KINDS = frozenset(ELEMENT_KINDS.values())
MAX_TEXT_CHARS = 4000


@dataclass(frozen=True)
class Item:
    """One item: its pointer, kind, text and value, and the typed columns of an element."""

    path: str
    kind: str
    text: str
    value: Any
    status: str | None = None
    due_at: datetime | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    recurring: bool = False
    recur_until: datetime | None = None

    def row(self) -> dict[str, Any]:
        """The item as a JSON object for user_memory_append's p_items (timestamps as ISO text)."""
        return {
            "path": self.path,
            "kind": self.kind,
            "text": self.text,
            "value": self.value,
            "status": self.status,
            "due_at": _iso(self.due_at),
            "starts_at": _iso(self.starts_at),
            "ends_at": _iso(self.ends_at),
            "recurring": self.recurring,
            "recur_until": _iso(self.recur_until),
        }


@dataclass(frozen=True, kw_only=True)
class ElementRow:
    """An element as the index holds it: its pointer, the version that last changed it, its value."""

    path: str
    version: int
    value: dict[str, Any]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _label(key: str) -> str:
    return key.replace("_", " ")


def _words(value: Any, key: str | None = None) -> Iterator[str]:
    """The searchable strings inside a value, sensitive and bookkeeping keys left out."""
    if key is not None and (key in SKIPPED_KEYS or key in SENSITIVE_FIELDS or key in NON_TEXT_KEYS):
        return
    if isinstance(value, str):
        if value.strip():
            yield value.strip()
    elif isinstance(value, dict):
        for k in sorted(value):
            yield from _words(value[k], k)
    elif isinstance(value, list):
        for v in value:
            yield from _words(v, key)


def redacted(value: Any) -> Any:
    """`value` without its sensitive fields, at any depth."""
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items() if k not in SENSITIVE_FIELDS}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def _element(path: str, kind: str, value: Any) -> Item:
    fields = ELEMENT_TEXT.get(kind)
    if fields is not None and isinstance(value, dict):
        words = [w for name in fields for w in _words(value.get(name), name)]
    else:
        words = list(_words(value))
    text = f"{_label(kind)}: " + " · ".join(words)
    typed: dict[str, Any] = {}
    if isinstance(value, dict):
        status = value.get("status")
        typed["status"] = status if isinstance(status, str) else None
        try:
            if kind == "todo" and value.get("due_date"):
                typed["due_at"] = parse_when(value["due_date"])
            elif kind == "goal" and value.get("target_date"):
                typed["due_at"] = parse_when(value["target_date"])
            elif kind == "event" and value.get("start"):
                typed["starts_at"] = parse_when(value["start"])
                typed["ends_at"] = parse_when(value["end"]) if value.get("end") else typed["starts_at"]
                rules = [r for r in value.get("recurrence") or [] if isinstance(r, str)]
                if rules:
                    typed["recurring"] = True
                    typed["recur_until"] = recurrence_end(rules, event_start(value))
        except (TypeError, ValueError, OverflowError):  # never validated, or not since times were checked
            pass
    if kind not in _QUERIED_KINDS and isinstance(value, dict):
        # A score that moves every night is no reason to rewrite the element's row (and its text's
        # vector): a search hit shows what the element says, the document keeps the bookkeeping.
        value = {k: v for k, v in value.items() if k not in SKIPPED_KEYS}
    return Item(path=path, kind=kind, text=text[:MAX_TEXT_CHARS], value=redacted(value), **typed)


def _walk(value: Any, path: str, key: str | None, depth: int) -> Iterator[Item]:
    if key is not None and (key in SKIPPED_KEYS or key in SENSITIVE_FIELDS):
        return
    if depth == 1 and key in ELEMENT_MAPS and isinstance(value, dict):
        for element_id, element in value.items():
            if element is not None:
                yield _element(f"{path}/{escape_token(element_id)}", ELEMENT_MAPS[key], element)
        return
    if isinstance(value, str):
        if value.strip():
            yield Item(
                path=path, kind="leaf", text=f"{_label(key or '')}: {value.strip()}"[:MAX_TEXT_CHARS], value=value
            )
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}/{escape_token(k)}", k, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict):
                yield _element(f"{path}/{i}", "entry", v)
            else:
                yield from _walk(v, f"{path}/{i}", key, depth + 1)


# memory_items.path is a primary-key column: a pointer longer than this (a key of a thousand
# characters somewhere) is not indexed, so the version is still written.
MAX_PATH_BYTES = 1000


def document_items(document: Document, sections: set[str] | None = None) -> dict[str, Item]:
    """The document's items by path; only those under `sections` (pointers) when given. Items
    whose pointer is over MAX_PATH_BYTES are left out (not searchable, never an error)."""
    # Each event's last occurrence has a budget of its own, and all of them this one: past it an
    # event is indexed as recurring for ever (queries then expand it, within their own budget).
    with budget_scope(INDEX_STEPS, "the last occurrences of every event of the document"):
        found = _document_items(document, sections)
    return {path: item for path, item in found.items() if len(path.encode()) <= MAX_PATH_BYTES}


def _document_items(document: Document, sections: set[str] | None) -> dict[str, Item]:
    items: dict[str, Item] = {}
    if not isinstance(document, dict):
        return items
    for key, value in document.items():
        top = f"/{escape_token(key)}"
        if sections is not None and top not in sections:
            wanted = {s for s in sections if s.startswith(top + "/")}
            if not wanted:
                continue
            if key in ELEMENT_MAPS and isinstance(value, dict):
                # An element map: only the elements the patch touched.
                for element_id, element in value.items():
                    path = f"{top}/{escape_token(element_id)}"
                    if path in wanted and element is not None:
                        items[path] = _element(path, ELEMENT_MAPS[key], element)
                continue
            # Not a map of elements here (a schema-free document): the whole section, as walked.
        for item in _walk(value, top, key, 1):
            items[item.path] = item
    return items


def touched_sections(patch: Patch) -> set[str]:
    """The sections a patch touches: `/<collection>/<id>` inside an element map, else `/<key>`."""
    sections: set[str] = set()
    for op in patch:
        for field in ("path", "from"):
            pointer = op.get(field)
            if not isinstance(pointer, str):
                continue
            if pointer == "":
                return set()  # the whole document was replaced: walk all of it
            parts = pointer.split("/")
            top = "/" + parts[1]
            if parts[1] in ELEMENT_MAPS and len(parts) > 2:
                sections.add(f"{top}/{parts[2]}")
            else:
                sections.add(top)
    return sections


def item_changes(old: Document, new: Document, patch: Patch) -> list[dict[str, Any]]:
    """The rows user_memory_append applies for a version: upserts and `{"path", "remove": true}`."""
    sections = touched_sections(patch)
    scope = sections or None
    before = document_items(old, scope)
    after = document_items(new, scope)
    changes: list[dict[str, Any]] = [{"path": path, "remove": True} for path in before if path not in after]
    changes.extend(item.row() for path, item in after.items() if before.get(path) != item)
    return changes


def reindex_rows(document: Document, version: int, indexed: Mapping[str, tuple[int, str]]) -> list[dict[str, Any]]:
    """The index's rows for a head at `version`: every item of the document gets that version,
    except those whose text the index already holds (`indexed`: path -> (version, text)), which
    keep theirs."""
    rows = []
    for item in document_items(document).values():
        row = item.row()
        old = indexed.get(item.path)
        row["version"] = old[0] if old and old[1] == item.text else version
        rows.append(row)
    return rows


def reindex(index: IndexUpkeep, user_id: uuid.UUID) -> bool:
    """Rebuild the user's items from its head. False for a user with no memory, or when the head
    moved meanwhile (the next run finds the user behind again)."""
    source = index.index_source(user_id)
    if source is None:
        return False
    return index.write_index(user_id, source.version, reindex_rows(source.document, source.version, source.indexed))

"""The fact floor: what a summary may not lose, and what the day's activity must leave in memory.

A summarizer (an LLM, in either mode) proposes the next document; the pipeline then holds it to
a floor (`pipeline.summarize_valid`): steps 1 to 3 for the user_state schema, step 4 for every
schema.

1. Protected facts (`restore_facts`). The facts of the document the summarizer was given:

       a part (by id)                   kept unless a forget request names the part, or a reset
       its name                         kept unless a part_named activity names the part
       each goal of a part              kept unless a forget request names the part, or a reset
       each trigger (trigger + desired  kept unless a reset; its desired outcome may change when
         outcome)                       a trigger_noted activity names the trigger
       each line of the safety notes    kept unless a reset

   Requests are domain/summary/requests.py's: a forget request (forget_part, forget_request) covers only
   the part its payload's `part_id` names; one that names no part covers nothing (and is recorded
   as ignored); only a memory_reset, which only the service can record, covers everything. Free
   text in activity is never a request. A protected fact the answer lost or changed without such
   an activity is put back as it was, and each restoration is recorded (`Restored`: the JSON
   Pointer where it now is, and why). A part that reappears under a new id (named by no
   activity, with the lost part's name) is moved back to its id, with whatever the answer
   changed in it.

2. Activity the answer does not reflect (`unreflected`). Each structured activity
   (`rules.FACT_KINDS`) must be reflected in the document after the answer and the restoration:
   part_named (the part, by id, with that name), goal_set (the goal's text in the part's goals),
   trigger_noted (an entry with that trigger), safety_note (the note's text in the safety notes).
   A later forget request naming the same part (or a reset) releases it; a later part_named for
   the same part supersedes an earlier one, and so does a person's later edit of the same field
   (step 4). The pipeline asks the summarizer once more with the unreflected lines named, then
   `fill`s what is still missing with the rule-based fold (`rules.fold`): it only adds (a part, a
   goal, a trigger, a note line) and sets a name the answer left as it was; a name the answer
   chose itself is kept and the activity is recorded as unreflected instead. Each fill is
   recorded (`Filled`: the activity, its kind, why).

3. Recency (`set_recency`), once per run: recency_score is the service's, not the model's. A part
   an activity of the run names (payload `part_id`) gets 1.0; every other part the document had
   before the run gets round(previous x 0.9, 3) (rules.RECENCY_DECAY), whatever the answer wrote.

4. What a person wrote (`human_edits`, `keep_human_edits`). The fields people changed through the
   API or an agent tool (a version whose source starts `api` or `agent:`) since the last summary
   are kept as they left them, unless activity that occurred after their edit asks for a change
   there (user_state: a forget request or a part_named / goal_set naming the part, a
   trigger_noted for the triggers, a safety_note for the notes; a reset for anything; no activity
   asks for the summary. companion: an activity the rule-based fold understands asks for its own
   element or field only (`elements.fold_targets`: a todo_done for its to-do, a mood for the mood),
   any other kind (free text) for anything. Other schemas: any activity after the edit).
   A field is what the person wrote, never the collection around it: a JSON Pointer cut at its
   first list, or at an element of an object keyed by id (a companion goal, to-do or event: one
   field, whole), or that list's element when the element has an identity (`id`, `trigger`,
   `goal` or `topic`). A version whose pointers do not say exactly what it changed (a collection
   or the whole document written as one value, as a memory's first write is; a list, whose
   indexes were that time's; pointers cut at their bounds: `versions_to_compare`) is compared
   with the version before it (`changed_fields`; version 0 is the schema's starting document): its
   fields are the members and elements it added, changed or removed. So an element the answer adds
   from activity stays whenever the activity occurred, and an element the person removed stays
   removed (the answer does not bring it back) unless later activity asks for it.
   When the answer changed a person's field, the later side wins: the activity, when one that asks
   for a change there occurred after the edit (the answer stands); else the person (put back, a
   tie included). Each field put back is recorded (`Kept`: the pointer, the version and source of
   the edit, why), and each change an activity asked for is a conflict recorded either way
   (`Conflict`: also which side won and the activity). The service's own fields (version,
   last_updated_by, a part's recency_score) are not a person's.

Everything here is pure: documents in, new documents and records out (inputs never modified).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from user_memory.domain.memory.document import get_schema
from user_memory.domain.memory.patching import copy_json, escape_token, json_equal, parse_pointer
from user_memory.domain.model import (
    FORGET_KINDS,
    MAX_CHANGED_PATH_CHARS,
    MAX_CHANGED_PATHS,
    Activity,
    Document,
    VersionChange,
)
from user_memory.domain.summary.requests import forgotten_part, has_reset, is_reset
from user_memory.domain.summary.rules import FACT_KINDS, RECENCY_DECAY, fold
from user_memory.errors import PatchError

__all__ = [
    "FLOOR_SCHEMAS",
    "MAX_HUMAN_VERSIONS",
    "Conflict",
    "Filled",
    "FloorResult",
    "HumanEdit",
    "Kept",
    "Restored",
    "changed_fields",
    "fill",
    "human_edits",
    "is_human_source",
    "keep_human_edits",
    "recency_for",
    "restore_facts",
    "set_recency",
    "unreflected",
    "unreflected_feedback",
    "versions_to_compare",
]

# The schemas whose facts the floor knows.
FLOOR_SCHEMAS = frozenset({"user_state"})
# How much of one activity line the feedback to the model quotes.
_FEEDBACK_LINE_CHARS = 1_000


@dataclass(frozen=True)
class Restored:
    """A protected fact put back: where it is in the new document, and why it had to be.

    `lines` (safety notes only): the 0-based lines of the new safety notes that were put back.
    """

    path: str
    why: str
    lines: tuple[int, ...] = ()

    def describe(self) -> dict[str, Any]:
        """What provenance records (never the fact's text)."""
        out: dict[str, Any] = {"path": self.path, "why": self.why}
        if self.lines:
            out["lines"] = list(self.lines)
        return out


@dataclass(frozen=True)
class Filled:
    """An activity whose fact the answer left out: folded in by the service (or, for a name the
    answer chose itself, left unreflected), and why."""

    activity: Activity
    why: str

    def describe(self) -> dict[str, Any]:
        return {"activity_id": self.activity.id, "kind": self.activity.kind, "why": self.why}


@dataclass(frozen=True)
class FloorResult:
    document: Document
    restored: tuple[Restored, ...] = ()


def _ptr(*tokens: str | int) -> str:
    return "".join("/" + escape_token(str(t)) for t in tokens)


def _parts(doc: Any) -> dict[str, Any]:
    parts = doc.get("parts") if isinstance(doc, dict) else None
    return parts if isinstance(parts, dict) else {}


def _triggers(doc: Any) -> list[Any]:
    triggers = doc.get("triggers_and_goals") if isinstance(doc, dict) else None
    return triggers if isinstance(triggers, list) else []


def _notes(doc: Any) -> str:
    notes = doc.get("safety_notes") if isinstance(doc, dict) else None
    return notes if isinstance(notes, str) else ""


def _name(part: Any) -> Any:
    return part.get("name") if isinstance(part, dict) else None


def _goal_texts(part: Any) -> list[str]:
    goals = part.get("goals") if isinstance(part, dict) else None
    if not isinstance(goals, list):
        return []
    return [str(g.get("goal")) for g in goals if isinstance(g, dict) and g.get("goal") is not None]


def _payload(a: Activity) -> dict[str, Any]:
    return a.payload if isinstance(a.payload, dict) else {}


def _named_part(a: Activity) -> str | None:
    pid = _payload(a).get("part_id")
    return None if pid in (None, "") else str(pid)


class _Copy:
    """The new document, copied the first time the floor writes to it."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self._copied = False

    def edit(self) -> Document:
        if not self._copied:
            self.doc = copy_json(self.doc)
            self._copied = True
        return self.doc


# -- 1. protected facts ----------------------------------------------------------------------------


def restore_facts(old: Document, new: Document, activities: Sequence[Activity]) -> FloorResult:
    """`new` with every protected fact of `old` that it lost, or changed, without an activity that
    asks for it put back (see the module's docstring); `new` itself is returned when none was."""
    acts = list(activities)
    old_parts = _parts(old)
    if has_reset(acts) or not (old_parts or _triggers(old) or _notes(old).strip()):
        return FloorResult(new)
    renamed_by_activity = {pid for a in acts if a.kind == "part_named" and (pid := _named_part(a))}
    noted = {str(_payload(a).get("trigger")) for a in acts if a.kind == "trigger_noted"}
    named_ids = {pid for a in acts if (pid := _named_part(a))}
    # With no reset among them, the activity lets exactly these parts go (requests.forget_allows).
    forgettable = {pid for a in acts if (pid := forgotten_part(a)) is not None}
    out = _Copy(new)
    restored: list[Restored] = []
    _restore_parts(out, old, forgettable=forgettable, named_ids=named_ids, restored=restored)
    _restore_names_and_goals(out, old, forgettable=forgettable, renamed=renamed_by_activity, restored=restored)
    _restore_triggers(out, old, noted=noted, restored=restored)
    _restore_notes(out, old, restored=restored)
    return FloorResult(out.doc, tuple(restored))


def _restore_parts(
    out: _Copy, old: Document, *, forgettable: set[str], named_ids: set[str], restored: list[Restored]
) -> None:
    """Parts: a lost part comes back whole, or, when it reappears under a new id, moves back."""
    old_parts, new_parts = _parts(old), _parts(out.doc)
    lost = [pid for pid in old_parts if pid not in new_parts and pid not in forgettable]
    invented = [pid for pid in new_parts if pid not in old_parts and pid not in named_ids]
    for pid in lost:
        moved = next((n for n in invented if _name(_parts(out.doc).get(n)) == _name(old_parts[pid])), None)
        doc = out.edit()
        parts = doc.setdefault("parts", {})
        if moved is not None:
            invented.remove(moved)
            parts[pid] = parts.pop(moved)
            for t in _triggers(doc):
                if isinstance(t, dict) and isinstance(t.get("related_parts"), list):
                    t["related_parts"] = [pid if x == moved else x for x in t["related_parts"]]
            restored.append(Restored(_ptr("parts", pid), f"its id was changed to {moved!r} without a request"))
            continue
        parts[pid] = copy_json(old_parts[pid])
        was_related = {
            str(t.get("trigger"))
            for t in _triggers(old)
            if isinstance(t, dict) and pid in (t.get("related_parts") or [])
        }
        for t in _triggers(doc):
            related = t.get("related_parts") if isinstance(t, dict) else None
            if isinstance(related, list) and str(t.get("trigger")) in was_related and pid not in related:
                related.append(pid)
        restored.append(Restored(_ptr("parts", pid), "removed without a forget request"))


def _restore_names_and_goals(
    out: _Copy, old: Document, *, forgettable: set[str], renamed: set[str], restored: list[Restored]
) -> None:
    """Names and goals of the parts that stay."""
    old_parts = _parts(old)
    for pid, old_part in old_parts.items():
        if pid in forgettable or pid not in _parts(out.doc):
            continue
        if _name(_parts(out.doc)[pid]) != _name(old_part) and pid not in renamed:
            out.edit()["parts"][pid]["name"] = _name(old_part)
            restored.append(Restored(_ptr("parts", pid, "name"), "renamed without a part_named activity for it"))
        old_goals = _goal_texts(old_part)
        if not old_goals:
            continue
        have = set(_goal_texts(_parts(out.doc)[pid]))
        for goal in old_goals:
            if goal in have:
                continue
            goals = out.edit()["parts"][pid].setdefault("goals", [])
            goals.append({"goal": goal})
            have.add(goal)
            restored.append(
                Restored(_ptr("parts", pid, "goals", len(goals) - 1), "removed or reworded without a forget request")
            )


def _restore_triggers(out: _Copy, old: Document, *, noted: set[str], restored: list[Restored]) -> None:
    """Triggers, matched by their text (each old entry to one new entry). Entries are only ever
    appended below, and each one appended is used at once: the positions found here stay true."""
    used: set[int] = set()
    positions: dict[str, list[int]] = {}
    for i, t in enumerate(_triggers(out.doc)):
        if isinstance(t, dict):
            positions.setdefault(str(t.get("trigger")), []).append(i)
    for old_t in _triggers(old):
        if not isinstance(old_t, dict):
            continue
        text = str(old_t.get("trigger"))
        at = next((i for i in positions.get(text, ()) if i not in used), None)
        if at is None:
            doc = out.edit()
            entry = copy_json(old_t)
            entry["related_parts"] = [p for p in entry.get("related_parts") or [] if p in _parts(doc)]
            triggers = doc.setdefault("triggers_and_goals", [])
            triggers.append(entry)
            used.add(len(triggers) - 1)
            restored.append(Restored(_ptr("triggers_and_goals", len(triggers) - 1), "removed without a forget request"))
            continue
        used.add(at)
        current = _triggers(out.doc)
        if current[at].get("desired_outcome") != old_t.get("desired_outcome") and text not in noted:
            out.edit()["triggers_and_goals"][at]["desired_outcome"] = old_t.get("desired_outcome", "")
            restored.append(
                Restored(
                    _ptr("triggers_and_goals", at, "desired_outcome"),
                    "changed without a trigger_noted activity for it",
                )
            )


def _restore_notes(out: _Copy, old: Document, *, restored: list[Restored]) -> None:
    """Safety notes, line by line."""
    notes = _notes(out.doc)
    missing = [line for line in _note_lines(_notes(old)) if line not in notes]
    if missing:
        kept = notes.strip()
        merged = "\n".join([kept, *missing]) if kept else "\n".join(missing)
        out.edit()["safety_notes"] = merged
        first = len(merged.splitlines()) - len(missing)
        why = "cleared without a forget request" if not kept else "lines removed or changed without a forget request"
        restored.append(Restored("/safety_notes", why, lines=tuple(range(first, first + len(missing)))))


def _note_lines(notes: str) -> list[str]:
    return [line.strip() for line in notes.splitlines() if line.strip()]


# -- 2. activity the answer does not reflect -------------------------------------------------------


def _requirement(a: Activity) -> tuple[str, ...] | None:
    p = _payload(a)
    if a.kind == "part_named" and p.get("part_id"):
        return ("part", str(p["part_id"]))
    if a.kind == "goal_set" and p.get("part_id") and p.get("goal"):
        return ("goal", str(p["part_id"]), str(p["goal"]))
    if a.kind == "trigger_noted" and p.get("trigger"):
        return ("trigger", str(p["trigger"]))
    if a.kind == "safety_note" and p.get("note"):
        return ("safety", str(p["note"]))
    return None


def _reflected(key: tuple[str, ...], a: Activity, doc: Document) -> bool:
    kind = key[0]
    if kind == "part":
        part = _parts(doc).get(key[1])
        name = _payload(a).get("name")
        return isinstance(part, dict) and (not name or part.get("name") == str(name))
    if kind == "goal":
        part = _parts(doc).get(key[1])
        return isinstance(part, dict) and key[2] in _goal_texts(part)
    if kind == "trigger":
        return any(isinstance(t, dict) and str(t.get("trigger")) == key[1] for t in _triggers(doc))
    return key[1].strip() in _notes(doc)


def _superseded(key: tuple[str, ...], a: Activity, human: Sequence[HumanEdit]) -> bool:
    """Whether a person changed the field a requirement is about after the activity occurred."""
    field_: tuple[str, ...]
    element: tuple[str, str] | None
    if key[0] == "part":
        field_, element = ("parts", key[1], "name"), None
    elif key[0] == "goal":
        field_, element = ("parts", key[1], "goals"), ("goal", key[2])
    elif key[0] == "trigger":
        field_, element = ("triggers_and_goals",), ("trigger", key[1])
    else:
        field_, element = ("safety_notes",), None
    return any(
        e.at > a.occurred_at
        and _overlap(e.tokens, field_)
        and (e.element is None or len(e.tokens) < len(field_) or e.element == element)
        for e in human
    )


def unreflected(document: Document, activities: Iterable[Activity], human: Sequence[HumanEdit] = ()) -> list[Activity]:
    """The structured activities (rules.FACT_KINDS) whose fact `document` does not hold, in the
    activity's order. A later forget request naming the part (or a reset) releases what it covers;
    a later part_named for the same part supersedes an earlier one, and so does a person's edit of
    the same field made after the activity occurred (`human`)."""
    required: dict[tuple[str, ...], tuple[int, Activity]] = {}
    for i, a in enumerate(activities):
        if is_reset(a):
            required.clear()
            continue
        if a.kind in FORGET_KINDS:
            pid = forgotten_part(a)  # None: a request that names no part, which releases nothing
            for held in list(required):
                if pid is not None and held[0] in ("part", "goal") and held[1] == pid:
                    del required[held]
            continue
        if a.kind not in FACT_KINDS:
            continue
        key = _requirement(a)
        if key is not None and not _superseded(key, a, human):
            required.pop(key, None)
            required[key] = (i, a)
    missing = [(i, a) for key, (i, a) in required.items() if not _reflected(key, a, document)]
    return [a for _, a in sorted(missing, key=lambda x: x[0])]


def unreflected_feedback(missing: Sequence[Activity], render: Any) -> str:
    """The feedback naming what the answer left out (`render`: an activity as its prompt line)."""
    lines = []
    for a in missing:
        line = render(a)
        lines.append(line if len(line) <= _FEEDBACK_LINE_CHARS else line[:_FEEDBACK_LINE_CHARS] + " [cut]")
    return (
        f"the memory after it does not hold what {len(missing)} activity line(s) carry; answer again with "
        "everything the activity calls for, these included: " + " | ".join(lines)
    )


@dataclass(frozen=True)
class FillResult:
    document: Document
    filled: tuple[Filled, ...] = ()
    unreflected: tuple[Filled, ...] = ()  # left as the answer wrote them (a name it chose itself)


def fill(document: Document, missing: Sequence[Activity], before: Document) -> FillResult:
    """Fold the facts of `missing` into `document` with the rule-based fold, adding only: a part
    the answer left out, a goal, a trigger, a note line, or the activity's name for a part whose
    name the answer left as it was in `before`. A name the answer chose itself is kept (recorded
    as unreflected)."""
    if not missing:
        return FillResult(document)
    doc = copy_json(document)
    filled: list[Filled] = []
    kept: list[Filled] = []
    for a in missing:
        key = _requirement(a)
        if key is None or _reflected(key, a, doc):  # an earlier fill wrote it
            continue
        if key[0] == "part" and key[1] in _parts(doc):
            pid, name = key[1], str(_payload(a).get("name"))
            if _name(_parts(doc)[pid]) == _name(_parts(before).get(pid)):
                _parts(doc)[pid]["name"] = name
                filled.append(Filled(a, "the answer left the part's previous name"))
            else:
                kept.append(Filled(a, "the answer gave the part a name of its own; kept"))
            continue
        why = _fill_why(key, doc)
        fold(doc, a)
        filled.append(Filled(a, why))
    return FillResult(doc, tuple(filled), tuple(kept))


def _fill_why(key: tuple[str, ...], doc: Document) -> str:
    kind = key[0]
    if kind == "part":
        return "the answer left the part out"
    if kind == "goal":
        if key[1] not in _parts(doc):
            return "the answer left the goal out (its part, not in the memory, added under its id)"
        return "the answer left the goal out"
    if kind == "trigger":
        return "the answer left the trigger out"
    return "the answer left the safety note out"


# -- 3. recency ------------------------------------------------------------------------------------


def recency_for(previous: Any) -> float:
    """The recency_score of a part no activity of the run names: the previous one decayed."""
    try:
        value = float(previous)
    except (TypeError, ValueError):
        value = 0.0
    return round(min(1.0, max(0.0, value)) * RECENCY_DECAY, 3)


@dataclass(frozen=True)
class RecencyResult:
    document: Document
    changed: int = 0  # parts whose recency_score the service set to something else than the answer had
    active: frozenset[str] = field(default_factory=frozenset)


def set_recency(base: Document, document: Document, activities: Iterable[Activity]) -> RecencyResult:
    """`document` with recency_score set by the service: 1.0 for parts an activity names (payload
    `part_id`), round(base's x 0.9, 3) for the other parts `base` had; parts new to the document and
    named by no activity keep what the answer wrote."""
    active = frozenset(pid for a in activities if (pid := _named_part(a)))
    before = _parts(base)
    wanted: dict[str, float] = {}
    for pid, part in _parts(document).items():
        if not isinstance(part, dict):
            continue
        if pid in active:
            value = 1.0
        elif pid in before and isinstance(before[pid], dict):
            value = recency_for(before[pid].get("recency_score", 0.0))
        else:
            continue
        current = part.get("recency_score")
        if type(current) is not float or current != value:
            wanted[pid] = value
    if not wanted:
        return RecencyResult(document, 0, active)
    out = dict(document)
    out["parts"] = dict(_parts(document))
    for pid, value in wanted.items():
        out["parts"][pid] = {**out["parts"][pid], "recency_score": value}
    return RecencyResult(out, len(wanted), active)


# -- 4. what a person wrote ------------------------------------------------------------------------

# Sources of versions a person wrote: the API (`api`, `api: <app>`) and agent tools (`agent:<tool>`),
# the prefixes the database lets an end user write.
HUMAN_SOURCES = ("api", "agent:")
# Versions read back (one query, newest first) to find a person's edits since the last summary;
# beyond them older edits are not looked for. Fields taken from patch pointers at most, and fields
# in all (a version compared with the one before it can name every element of a collection).
MAX_HUMAN_VERSIONS = 50
MAX_HUMAN_FIELDS = 200
MAX_COMPARED_FIELDS = 5_000
# Top-level fields the service writes on every version; never a person's to keep.
_SERVICE_FIELDS = frozenset({"version", "last_updated_by"})
# Keys that identify an element (of a list, or of an object keyed by id); the first one it has.
_IDENTITY_KEYS = ("id", "trigger", "goal", "topic")
_MISSING = object()

Field = tuple[tuple[str, ...], tuple[str, str] | None]


def is_human_source(source: str | None) -> bool:
    """Whether a version with this source was written by a person (the API, an agent tool)."""
    return isinstance(source, str) and source.startswith(HUMAN_SOURCES)


@dataclass(frozen=True)
class HumanEdit:
    """A field a person changed since the last summary: its pointer (cut at its first list, or at an
    element of an object keyed by id), the list element it changed when that element has an identity
    (`element`: key and value), and the newest version that changed it (when, and through what)."""

    tokens: tuple[str, ...]
    version: int
    at: datetime
    source: str
    element: tuple[str, str] | None = None

    @property
    def path(self) -> str:
        return _ptr(*self.tokens)

    def covers(self, other: HumanEdit) -> bool:
        """Whether this edit's field holds `other`'s (the same field or one inside it)."""
        if other.tokens[: len(self.tokens)] != self.tokens:
            return False
        return len(other.tokens) > len(self.tokens) or self.element is None or self.element == other.element


@dataclass(frozen=True)
class Kept:
    """A field a person set that the answer changed without a later activity asking: put back at
    `path` (for a list element, its place in the new document)."""

    edit: HumanEdit
    path: str
    why: str

    def describe(self) -> dict[str, Any]:
        """What provenance records (never the value, nor an element's identifying text)."""
        return {"path": self.path, "version": self.edit.version, "source": self.edit.source, "why": self.why}


@dataclass(frozen=True)
class Conflict:
    """A field a person set that the answer changed as an activity asks: the later of the person's
    edit and the activity won (`won`: "person" or "activity"; a tie is the person's)."""

    edit: HumanEdit
    path: str
    won: str
    activity: Activity
    why: str

    def describe(self) -> dict[str, Any]:
        """What provenance records (never the value)."""
        return {
            "path": self.path,
            "version": self.edit.version,
            "source": self.edit.source,
            "won": self.won,
            "activity_id": self.activity.id,
            "why": self.why,
        }


def _is_element(value: Any) -> bool:
    return _identity(value) is not None


def _field(tokens: list[str], document: Any) -> Field:
    """The field a pointer changed: the pointer itself, cut at its first list, at an element of an
    object (a member with an identity, `_IDENTITY_KEYS`: a companion goal, to-do or event) and just
    below the first member `document` does not have; and, when the pointer goes into an element of
    that list that has an identity, that identity (the element at that index in `document`)."""
    node = document
    for i, token in enumerate(tokens):
        if isinstance(node, list):
            element = node[int(token)] if token.isdigit() and int(token) < len(node) else None
            return tuple(tokens[:i]), _identity(element)
        if not (isinstance(node, dict) and token in node):
            return tuple(tokens[: i + 1]), None
        node = node[token]
        if i > 0 and _is_element(node):
            return tuple(tokens[: i + 1]), None
    return tuple(tokens), None


def _identities(items: list[Any]) -> dict[tuple[str, str], Any] | None:
    """A list's elements by identity, when every element has one of its own (else None)."""
    out: dict[tuple[str, str], Any] = {}
    for x in items:
        ident = _identity(x)
        if ident is None or ident in out:
            return None
        out[ident] = x
    return out


def changed_fields(before: Any, after: Any, tokens: tuple[str, ...] = ()) -> list[Field]:
    """The fields that differ from `before` to `after` (two versions' documents), cut as a person's
    pointers are (`_field`): a member added, removed or changed, an element (of an object keyed by
    id, or of a list where each element has an identity) as a whole, any other list as a whole."""
    out: list[Field] = []

    def walk(b: Any, a: Any, at: tuple[str, ...]) -> None:
        if b is not _MISSING and a is not _MISSING and json_equal(b, a):
            return
        # A section or collection added or removed whole is its members added or removed (a
        # collection written as one value is still each of its elements).
        if b is _MISSING and not (at and _is_element(a)):
            b = _empty_like(a)
        elif a is _MISSING and not (at and _is_element(b)):
            a = _empty_like(b)
        if isinstance(b, dict) and isinstance(a, dict) and not (at and (_is_element(b) or _is_element(a))):
            for key in dict.fromkeys([*b, *a]):
                walk(b.get(key, _MISSING), a.get(key, _MISSING), (*at, key))
            return
        if isinstance(b, list) and isinstance(a, list):
            old, new = _identities(b), _identities(a)
            if old is not None and new is not None:
                for ident in dict.fromkeys([*old, *new]):
                    if ident not in old or ident not in new or not json_equal(old[ident], new[ident]):
                        out.append((at, ident))
                return
        out.append((at, None))

    walk(before, after, tokens)
    return out


def _empty_like(value: Any) -> Any:
    return {} if isinstance(value, dict) else [] if isinstance(value, list) else _MISSING


def _container(tokens: tuple[str, ...], document: Any) -> bool:
    """Whether a pointer's field (`_field`) may hold more than what the person wrote: an object that
    is not an element (the document, a collection, a section), or a list."""
    value = _get(document, tokens)
    if isinstance(value, list):
        return True  # an index in an older patch may name another element than the head's
    return isinstance(value, dict) and not (tokens and _is_element(value))


def versions_to_compare(changes: Iterable[VersionChange], document: Document) -> set[int]:
    """The people's versions since the last summary whose pointers do not name exactly what they
    changed: a pointer at the document, a collection, a section or a list (an index in an older
    patch names an element of that time), or pointers cut at their bounds. Comparing each with the
    version before it (`changed_fields`) names every element the person added, changed or removed."""
    wanted: set[int] = set()
    for change in changes:
        if change.summary:
            break
        if not is_human_source(change.source):
            continue
        if len(change.paths) >= MAX_CHANGED_PATHS or any(len(p) >= MAX_CHANGED_PATH_CHARS for p in change.paths):
            wanted.add(change.version)
            continue
        for path in change.paths:
            try:
                tokens = _field(parse_pointer(path), document)[0]
            except PatchError:
                continue
            if _container(tokens, document):
                wanted.add(change.version)
                break
    return wanted


def _not_a_persons(tokens: tuple[str, ...], schema: str) -> bool:
    """The service's own fields, and fields the schema does not have (a value that cannot be kept)."""
    if not tokens or tokens[0] in _SERVICE_FIELDS or tokens[0] not in get_schema(schema).model_fields:
        return True
    return schema in FLOOR_SCHEMAS and len(tokens) == 3 and tokens[0] == "parts" and tokens[2] == "recency_score"


def _overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """One pointer is the other or inside it."""
    n = min(len(a), len(b))
    return tuple(a[:n]) == tuple(b[:n])


def _collection(value: Any) -> bool:
    """A list, or an object of objects (parts, goals, to-dos, events by id)."""
    return isinstance(value, list) or (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()))


def _pointer_fields(paths: Iterable[str], document: Document) -> list[Field]:
    """The fields a version's pointers name, read against the head. Without the version's own
    documents (`versions_to_compare`), a pointer at the document, a collection or a list names each
    of the head's members there (what the person left), never the answer's new ones."""
    out: list[Field] = []
    for path in paths:
        try:
            fld = _field(parse_pointer(path), document)
        except PatchError:
            continue  # a pointer cut at its length limit, or not one
        value = _get(document, fld[0])
        if fld[1] is None and (not fld[0] or _collection(value)):
            out.extend(changed_fields(_empty_like(value), value, fld[0]))
        else:
            out.append(fld)
    return out


class _Found:
    """The fields found so far, newest first, and which of them hold a field (`HumanEdit.covers`),
    in time linear in the field's depth."""

    def __init__(self) -> None:
        self.edits: list[HumanEdit] = []
        self._tokens: set[tuple[str, ...]] = set()
        self._keys: set[tuple[tuple[str, ...], tuple[str, str] | None]] = set()

    def held(self, tokens: tuple[str, ...], element: tuple[str, str] | None) -> bool:
        if any(tokens[:n] in self._tokens for n in range(len(tokens))):
            return True  # a field around it
        return (tokens, None) in self._keys or (tokens, element) in self._keys

    def add(self, edit: HumanEdit) -> None:
        self.edits.append(edit)
        self._tokens.add(edit.tokens)
        self._keys.add((edit.tokens, edit.element))


def human_edits(
    changes: Iterable[VersionChange],
    document: Document,
    schema: str,
    compared: Mapping[int, Sequence[Field]] | None = None,
) -> tuple[HumanEdit, ...]:
    """The fields people changed in the versions after the last summary (`changes` newest first, as
    the store's `recent_changes` returns them), against the head `document`; the newest edit of a
    field wins. A version in `compared` (its fields found by comparing it with the version before
    it, `changed_fields`) is read from there, any other from its pointers (an index in an older patch
    is then read against the head). At most MAX_HUMAN_FIELDS fields from pointers, MAX_COMPARED_FIELDS
    in all."""
    found = _Found()
    from_pointers = 0
    for change in changes:
        if change.summary:
            break
        if not is_human_source(change.source):
            continue  # the service's own (a companion feedback version): neither a person's nor a summary
        found_by_comparing = compared.get(change.version) if compared is not None else None
        exact = found_by_comparing is not None
        fields = found_by_comparing if found_by_comparing is not None else _pointer_fields(change.paths, document)
        for tokens, element in fields:
            if _not_a_persons(tokens, schema) or found.held(tokens, element):
                continue  # a newer edit holds this field, or the field around it
            if not exact:
                if from_pointers >= MAX_HUMAN_FIELDS:
                    continue
                from_pointers += 1
            found.add(HumanEdit(tokens, change.version, change.created_at, str(change.source), element))
            if len(found.edits) >= MAX_COMPARED_FIELDS:
                return tuple(found.edits)
    return tuple(found.edits)


def _activity_targets(a: Activity, schema: str) -> tuple[tuple[str, ...], ...] | None:
    """The fields activity `a` asks to change, for the schemas whose summarizer folds activity by
    kind (companion); None: it may ask for a change anywhere."""
    if schema != "companion":
        return None
    # Loaded for the companion schema only, as the rule-based summarizer loads its fold: the
    # companion's modules (recurrences) cost a cold start that other deployments never need.
    from user_memory.domain.companion.elements import fold_targets

    return fold_targets(a.kind, a.payload, f"{a.source}:{a.external_id}")


def _asks(a: Activity, edit: HumanEdit) -> bool:
    """Whether activity `a` asks for a change in the user_state field `edit` holds (the other
    schemas: `_Askers`)."""
    if is_reset(a):
        return True
    tokens = edit.tokens
    if tokens[0] == "parts":
        forgotten = forgotten_part(a)
        named = forgotten or (_named_part(a) if a.kind in ("part_named", "goal_set") else None)
        if named is None or (len(tokens) > 1 and tokens[1] != named):
            return False
        if len(tokens) <= 2 or forgotten is not None:
            return True
        if a.kind == "part_named":
            return tokens[2] in ("name", "status")
        # a goal_set adds its goal: it asks for the goals as a whole, or for that goal
        return tokens[2] == "goals" and edit.element in (None, ("goal", str(_payload(a).get("goal"))))
    if tokens[0] == "triggers_and_goals":
        trigger = _payload(a).get("trigger")
        return a.kind == "trigger_noted" and (edit.element is None or edit.element == ("trigger", str(trigger)))
    if tokens[0] == "safety_notes":
        return a.kind == "safety_note"
    return False  # the summary, and anything else: no activity asks for it


def _later(current: Activity | None, a: Activity | None) -> Activity | None:
    """The later of two activities (either may be None); the first of equally late ones."""
    if current is None or a is None:
        return current if a is None else a
    return a if a.occurred_at > current.occurred_at else current


class _Askers:
    """The activity asking for a change in a person's field, the latest first: for user_state by
    `_asks`; for the other schemas from an index of each activity's fields (`_activity_targets`),
    built once, so a run's every field is looked up in time linear in its depth."""

    def __init__(self, activities: Sequence[Activity], schema: str) -> None:
        self.activities = activities
        self.schema = schema
        self.anything: Activity | None = None  # the latest that may ask for anything
        self.at: dict[tuple[str, ...], Activity] = {}  # the latest asking for a field
        self.below: dict[tuple[str, ...], Activity] = {}  # the latest asking for a field inside one
        if schema in FLOOR_SCHEMAS:
            return
        for a in activities:
            targets = None if is_reset(a) else _activity_targets(a, schema)
            if targets is None:
                self.anything = _later(self.anything, a)
                continue
            for t in targets:
                self.at[t] = _later(self.at.get(t), a) or a
                for n in range(len(t)):
                    self.below[t[:n]] = _later(self.below.get(t[:n]), a) or a

    def latest(self, edit: HumanEdit) -> Activity | None:
        """The latest activity that asks for a change in `edit`'s field (None: none does)."""
        if self.schema in FLOOR_SCHEMAS:
            asking = (a for a in self.activities if _asks(a, edit))
            return max(asking, key=lambda a: a.occurred_at, default=None)
        found = _later(self.anything, self.below.get(edit.tokens))
        for n in range(1, len(edit.tokens) + 1):
            found = _later(found, self.at.get(edit.tokens[:n]))
        return found


def _get(doc: Any, tokens: Sequence[str]) -> Any:
    node = doc
    for token in tokens:
        if not (isinstance(node, dict) and token in node):
            return _MISSING
        node = node[token]
    return node


def _identity(element: Any) -> tuple[str, str] | None:
    if isinstance(element, dict):
        for key in _IDENTITY_KEYS:
            value = element.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return key, str(value)
    return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _merged(kept: list[Any], answer: list[Any]) -> list[Any]:
    """The answer's list with every element of `kept` in it: an element the answer changed (same
    identity) goes back in its place, one it dropped is added at the end (linear in the sizes)."""
    out = copy_json(answer)
    present = {_canonical(x) for x in out}
    where = {ident: i for i, x in enumerate(out) if (ident := _identity(x)) is not None}
    for element in kept:
        if _canonical(element) in present:
            continue
        at = where.get(ident) if (ident := _identity(element)) is not None else None
        if at is None:
            out.append(copy_json(element))
            at = len(out) - 1
            if ident is not None:
                where[ident] = at
        else:
            out[at] = copy_json(element)
        present.add(_canonical(element))
    return out


def _element_in(items: Any, element: tuple[str, str] | None) -> tuple[int | None, Any]:
    """The index and value of the element of that identity in a list (None, _MISSING: not there)."""
    if isinstance(items, list):
        for i, x in enumerate(items):
            if _identity(x) == element:
                return i, x
    return None, _MISSING


def _differs(edit: HumanEdit, old: Document, answer: Document) -> bool:
    """Whether the answer changed the field a person set (as `old` has it)."""
    before, current = _get(old, edit.tokens), _get(answer, edit.tokens)
    if edit.element is not None:  # a list the document lacks holds no element
        was, now = _element_in(before, edit.element)[1], _element_in(current, edit.element)[1]
        if was is _MISSING or now is _MISSING:
            return was is not now
        return not json_equal(was, now)
    if before is _MISSING or current is _MISSING:
        return before is not current
    if isinstance(before, list) and isinstance(current, list):
        present = {_canonical(x) for x in current}
        return any(_canonical(x) not in present for x in before)  # the answer's own new ones may stay
    return not json_equal(before, current)


def _put_back(out: _Copy, tokens: tuple[str, ...], old: Document) -> bool:
    """Make `out`'s field at `tokens` what it is in `old` (a list: merged); whether anything changed."""
    node, before = out.doc, old
    for i, token in enumerate(tokens):
        last = i == len(tokens) - 1
        if not isinstance(before, dict) or not isinstance(node, dict):
            return False
        wanted = before.get(token, _MISSING)
        current = node.get(token, _MISSING)
        if not last and isinstance(wanted, dict) and isinstance(current, dict):
            node, before = current, wanted
            continue
        if wanted is _MISSING:  # the field is not in `old`: take it out of the answer, where it is
            parent = _get(out.doc, tokens[:-1])
            if not isinstance(parent, dict) or tokens[-1] not in parent:
                return False
            del _get(out.edit(), tokens[:-1])[tokens[-1]]
            return True
        value = _merged(wanted, current) if last and isinstance(wanted, list) and isinstance(current, list) else wanted
        if current is not _MISSING and json_equal(value, current):
            return False
        _get(out.edit(), tokens[:i])[token] = copy_json(value)
        return True
    return False


def _put_element_back(out: _Copy, edit: HumanEdit, old: Document) -> int | None:
    """Make the element of `edit.element`'s identity in `out`'s list what it is in `old`'s: in its
    place, at the end when the answer dropped it, or taken out when the person removed it (`old`
    has none). Its index in the answer, or None when nothing changed."""
    before, current = _get(old, edit.tokens), _get(out.doc, edit.tokens)
    wanted = _element_in(before, edit.element)[1]
    at, now = _element_in(current, edit.element)
    if wanted is _MISSING:
        if at is None:
            return None
        del _get(out.edit(), edit.tokens)[at]
        return at
    if at is not None and json_equal(now, wanted):
        return None
    if current is _MISSING:  # the answer has no such list: it gets one, where its parent is
        parent = _get(out.doc, edit.tokens[:-1])
        if not edit.tokens or not isinstance(parent, dict):
            return None
        _get(out.edit(), edit.tokens[:-1])[edit.tokens[-1]] = []
    elif not isinstance(current, list):
        return None
    items = _get(out.edit(), edit.tokens)
    if at is None:
        items.append(copy_json(wanted))
        return len(items) - 1
    items[at] = copy_json(wanted)
    return at


def _drop_dangling(doc: Document, schema: str) -> None:
    """Take links to elements no longer in the document out (in place): a trigger's related_parts
    (user_state); a to-do's goal_id and a goal's parent_id (companion)."""
    if schema == "companion":
        found = doc.get("goals")
        goals: dict[str, Any] = found if isinstance(found, dict) else {}
        for name, link in (("todos", "goal_id"), ("goals", "parent_id")):
            for element in (doc.get(name) or {}).values():
                if isinstance(element, dict) and element.get(link) is not None and element[link] not in goals:
                    element[link] = None
        return
    parts = _parts(doc)
    for t in _triggers(doc):
        related = t.get("related_parts") if isinstance(t, dict) else None
        if isinstance(related, list) and any(p not in parts for p in related):
            t["related_parts"] = [p for p in related if p in parts]


@dataclass(frozen=True)
class KeepResult:
    document: Document
    kept: tuple[Kept, ...] = ()
    conflicts: tuple[Conflict, ...] = ()


def keep_human_edits(
    old: Document, new: Document, activities: Sequence[Activity], human: Sequence[HumanEdit], schema: str
) -> KeepResult:
    """`new` with every field a person set (`human`, as `old` has it) that the answer changed put
    back, unless an activity that occurred after the person's edit asks for a change there (see the
    module's docstring); `new` itself is returned when none was. A field the answer changed as an
    activity asks is a conflict, decided by time (the later side wins; a tie is the person's) and
    recorded either way."""
    out = _Copy(new)
    kept: list[Kept] = []
    conflicts: list[Conflict] = []
    no_ask = "a person set it; the answer changed it and no activity after the edit asks for it"
    askers = _Askers(activities, schema)
    for edit in human:
        if not _differs(edit, old, out.doc):
            continue  # the answer left it as the person did: nothing to decide
        latest = askers.latest(edit)
        if latest is not None and latest.occurred_at > edit.at:
            path = edit.path if edit.element is None else _element_path(out.doc, edit)
            why = "activity that occurred after the person's edit asks for a change there: the activity's is later"
            conflicts.append(Conflict(edit, path, "activity", latest, why))
            continue
        if edit.element is None:
            if not _put_back(out, edit.tokens, old):
                continue
            path = edit.path
        else:
            at = _put_element_back(out, edit, old)
            if at is None:
                continue
            path = _ptr(*edit.tokens, at)
        if latest is None:
            kept.append(Kept(edit, path, no_ask))
            continue
        why = "the person's edit is later than the activity asking for a change there: the person's is kept"
        kept.append(Kept(edit, path, why))
        conflicts.append(Conflict(edit, path, "person", latest, why))
    if kept and (schema in FLOOR_SCHEMAS or schema == "companion"):
        _drop_dangling(out.edit(), schema)
    return KeepResult(out.doc, tuple(kept), tuple(conflicts))


def _element_path(doc: Document, edit: HumanEdit) -> str:
    """Where a list element of a person's is in `doc` (the list's pointer when it is not there)."""
    at = _element_in(_get(doc, edit.tokens), edit.element)[0]
    return edit.path if at is None else _ptr(*edit.tokens, at)

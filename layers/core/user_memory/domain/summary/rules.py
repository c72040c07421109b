"""A deterministic, offline summarizer: folds structured activity into the document.

Understood activity kinds (payload fields):
    part_named    {part_id, name, status?}         add or refresh a part
    goal_set      {part_id, goal}                  add a goal to a part (a part the memory lacks is
                                                   added under its id, named by it)
    trigger_noted {trigger, desired_outcome, related_parts?}
    safety_note   {note}                           append to the safety notes
    forget_part, forget_request {part_id}          remove the part the request names (one that
                                                   names no part forgets nothing: domain/summary/requests.py)
    memory_reset  {}                               clear the parts, triggers and safety notes
    session, message, insight_interaction, ...     counted in the summary (their text is never a request)

Every change the summarizer makes is recorded with its reason (SummaryResult.changes, the
version's provenance `edits`): each fold names the activity it folds in (its kind and id), the
summary line the activities it counts. recency_score is the service's (provenance `recency_set`).

`fold` is the fact-level fold of one activity, shared with the pipeline's fact floor
(domain/summary/facts.py), which folds in what a model's answer left out. Scores are not the fold's:
recency is the service's (RECENCY_DECAY, domain/summary/facts.py: `set_recency`), and the rule-based
summarizer raises a part's influence by 0.1 per goal.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from user_memory.domain.memory.document import empty_document
from user_memory.domain.memory.patching import copy_json, escape_token
from user_memory.domain.model import FORGET_KINDS, Activity
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.edits import MemoryEdit, edits_between
from user_memory.domain.summary.requests import forgotten_part, is_reset
from user_memory.errors import SummarizerUnsupported

# The schemas the rule-based summarizer has rules for. For any other it could not reflect the
# activity, so it refuses to summarize (the worker refuses such settings at start).
RULE_SCHEMAS = frozenset({"user_state", "companion"})
# recency_score of a part no activity of the run names: round(recency_score x RECENCY_DECAY, 3).
RECENCY_DECAY = 0.9
# The kinds `fold` writes as facts (forget requests and resets remove; every other kind carries no fact).
FACT_KINDS = ("part_named", "goal_set", "trigger_noted", "safety_note")
# How many activity ids the summary line's reason names before it counts the rest.
NAMED_IDS = 8


def named(a: Activity) -> str:
    """An activity as an edit's reason names it: its kind and id (never its content)."""
    return f"{a.kind} activity {a.id}" if a.id is not None else f"{a.kind} activity of {a.occurred_at.isoformat()}"


def _scopes(a: Activity) -> list[tuple[str, ...]]:
    """Where `fold` (and the goal's influence) may change a normal-form document for `a`: its part,
    or the collection it writes; every other kind is counted in the summary line alone. Only these
    are compared, not the whole document, once per activity."""
    p = a.payload if isinstance(a.payload, dict) else {}
    if a.kind in ("part_named", "goal_set"):
        return [("parts", str(p["part_id"]))] if p.get("part_id") else []
    if a.kind == "trigger_noted":
        return [("triggers_and_goals",)]
    if a.kind == "safety_note":
        return [("safety_notes",)]
    if a.kind in FORGET_KINDS or is_reset(a):
        return [("parts",), ("triggers_and_goals",), ("safety_notes",)]
    return []


_ABSENT = object()


def _at(doc: dict[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _changed(before: Any, after: Any, keys: tuple[str, ...], reason: str) -> list[MemoryEdit]:
    path = "".join(f"/{escape_token(k)}" for k in keys)
    if before is _ABSENT:
        return [] if after is _ABSENT else [MemoryEdit(op="add", path=path, value=copy_json(after), reason=reason)]
    if after is _ABSENT:
        return [MemoryEdit(op="remove", path=path, reason=reason)]
    return edits_between(before, after, reason, path)


def _counted(activities: list[Activity], described: str) -> str:
    ids = [str(a.id) for a in activities if a.id is not None]
    shown = ", ".join(ids[:NAMED_IDS]) + (f" and {len(ids) - NAMED_IDS} more" if len(ids) > NAMED_IDS else "")
    return f"counts the activity it folds in: {described}" + (f" (activities {shown})" if ids else "")


def new_part(name: str, status: str = "active") -> dict[str, Any]:
    """A part as the fold creates it."""
    return {"name": name, "status": status, "recency_score": 1.0, "influence_score": 0.1, "goals": []}


def fold(doc: dict[str, Any], a: Activity) -> str | None:
    """Fold one activity's fact into `doc` (user_state, parts keyed by id), in place.

    Returns the id of the part the activity wrote to (None when it wrote to no part). A fact
    already there is not written twice; nothing else in the document is changed.
    """
    p = a.payload if isinstance(a.payload, dict) else {}
    parts: dict[str, Any] = doc.setdefault("parts", {})
    triggers: list[dict[str, Any]] = doc.setdefault("triggers_and_goals", [])
    if a.kind == "part_named" and p.get("part_id"):
        pid = str(p["part_id"])
        part = parts.setdefault(pid, new_part(str(p.get("name") or pid)))
        part["name"] = str(p.get("name") or part["name"])
        part["status"] = str(p.get("status") or part["status"])
        return pid
    if a.kind == "goal_set" and p.get("part_id") and p.get("goal"):
        pid = str(p["part_id"])
        part = parts.setdefault(pid, new_part(pid))
        goals = part.setdefault("goals", [])
        if {"goal": str(p["goal"])} not in goals:
            goals.append({"goal": str(p["goal"])})
        return pid
    if a.kind == "trigger_noted" and p.get("trigger"):
        related = p.get("related_parts")
        entry = {
            "trigger": str(p["trigger"]),
            "desired_outcome": str(p.get("desired_outcome", "")),
            "related_parts": [str(x) for x in related if str(x) in parts] if isinstance(related, list) else [],
        }
        if entry not in triggers:
            triggers.append(entry)
        return None
    if a.kind == "safety_note" and p.get("note"):
        note = str(p["note"])
        notes = str(doc.get("safety_notes") or "")
        if note not in notes:
            doc["safety_notes"] = f"{notes}\n{note}".strip()
        return None
    forgotten = forgotten_part(a)
    if forgotten is not None and forgotten in parts:
        del parts[forgotten]
        for t in triggers:
            t["related_parts"] = [x for x in t.get("related_parts", []) if x != forgotten]
    if is_reset(a):
        parts.clear()
        triggers.clear()
        doc["safety_notes"] = ""
    return None


class RuleBasedSummarizer:
    """Deterministic summaries with no network; used when no LLM is configured.

    For user_state, the fold above. For companion, `elements.fold_companion` (to-dos, goals,
    events, progress, mood, wins and losses, skills, pain points, focus areas, preferences). For
    another schema it has no rules: it raises SummarizerUnsupported rather than answer the document
    unchanged, which would mark the activity summarized unread (the run fails; the activity stays
    unsummarized).
    """

    name = "rules"
    schema = "user_state"  # also for subclasses that do not call __init__
    leaves_input_unchanged = True  # it folds into a copy (ports.Summarizer)
    answers_json_values = True  # built from the head, the activity and parsed JSON (ports.Summarizer)

    def __init__(self, schema: str = "user_state") -> None:
        self.schema = schema

    @staticmethod
    def check(schema: str) -> None:
        """SummarizerUnsupported unless the summarizer has rules for `schema`."""
        if schema not in RULE_SCHEMAS:
            raise SummarizerUnsupported(
                f"the rule-based summarizer has no rules for DOCUMENT_SCHEMA={schema} "
                f"(only {', '.join(sorted(RULE_SCHEMAS))}): it cannot reflect the activity"
            )

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        self.check(self.schema)
        if self.schema != "user_state":
            return self._companion(document, activities)
        doc = copy_json(document) if document else empty_document()
        parts: dict[str, Any] = doc.setdefault("parts", {})
        triggers: list[dict[str, Any]] = doc.setdefault("triggers_and_goals", [])
        touched: set[str] = set()
        changes: list[MemoryEdit] = []
        for part in parts.values():
            part["recency_score"] = round(float(part.get("recency_score", 0.0)) * RECENCY_DECAY, 3)
        for a in activities:
            scopes = _scopes(a)
            before = [copy_json(_at(doc, keys)) for keys in scopes]
            pid = fold(doc, a)
            if pid is not None:
                touched.add(pid)
                if a.kind == "goal_set":
                    score = round(min(1.0, float(parts[pid].get("influence_score", 0.0)) + 0.1), 3)
                    parts[pid]["influence_score"] = score
            for keys, old in zip(scopes, before, strict=True):
                changes.extend(_changed(old, _at(doc, keys), keys, f"folds in {named(a)}"))
        for part_id in touched:
            if part_id in parts:
                parts[part_id]["recency_score"] = 1.0
        counts = Counter(a.kind for a in activities)
        day = activities[-1].occurred_at.date().isoformat() if activities else "no activity"
        described = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        active = sorted(parts, key=lambda k: -parts[k]["recency_score"])[:3]
        summary = (
            f"Last active {day} ({described}). {len(parts)} known parts"
            + (f"; most recent: {', '.join(parts[k]['name'] for k in active)}" if active else "")
            + f"; {len(triggers)} triggers tracked."
        )
        if doc.get("summary") != summary:
            why = _counted(activities, described)
            changes.append(
                MemoryEdit(op="replace" if "summary" in doc else "add", path="/summary", value=summary, reason=why)
            )
        doc["summary"] = summary
        doc["last_updated_by"] = "rules"
        return SummaryResult(document=doc, model="rules (no LLM configured)", changes=tuple(changes))

    def _companion(self, document: dict[str, Any], activities: list[Activity]) -> SummaryResult:
        from user_memory.domain.companion.elements import fold_companion, fold_targets

        doc = copy_json(document) if document else empty_document(self.schema)
        changes: list[MemoryEdit] = []
        folded = False
        for a in activities:
            external_id = f"{a.source}:{a.external_id}"
            # Only what the fold may change (its element, its state fields) is compared.
            scopes = fold_targets(a.kind, a.payload, external_id) or ()
            before = [copy_json(_at(doc, keys)) for keys in scopes]
            folded = fold_companion(doc, a.kind, a.payload, external_id, a.occurred_at) or folded
            # Compared whatever the fold answered: one that folds nothing may still have made room
            # (an empty preference area), and the edits must replay to the answer.
            for keys, old in zip(scopes, before, strict=True):
                changes.extend(_changed(old, _at(doc, keys), keys, f"folds in {named(a)}"))
        if folded:
            doc["last_updated_by"] = "rules"
        return SummaryResult(document=doc, model="rules (no LLM configured)", changes=tuple(changes))

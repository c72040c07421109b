"""What of the memory one summary prompt carries: the day's parts in full, an outline of the rest.

The prompt used to carry the whole document every day (about 2,400 tokens for a long-time user)
to answer a day whose activity touches one or two parts. A view shows in full what the activity
touches (user_state: the parts its payloads name by `part_id` or `related_parts`, the triggers
whose text it notes), the summary and the safety notes, and outlines the rest: every other part's
id and name, and how many triggers there are, so the model can still address any of them by id
(an edit to an outlined part applies to the whole document, which the pipeline holds).

The whole document is shown when a view would save nothing or could mislead: a schema other than
user_state, a document without parts, or a memory_reset in the activity (a reset asks about
everything).

In whole-document mode the model answers with the document it was shown; `merge_answer` puts that
answer back into the whole: outlined parts and triggers stay as they were unless the answer
names them, shown ones take the answer's value (one the answer left out is gone, and the fact
floor then restores it unless a request asked for it), new ones are added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from user_memory.domain.model import Activity, Document
from user_memory.domain.summary.requests import RESET_KIND

VIEW_SCHEMAS = frozenset({"user_state"})


@dataclass(frozen=True)
class PromptView:
    """The document as one prompt shows it.

    `document` is the stored shape with only the shown parts and triggers; `outlined` the other
    parts (id -> name, in the document's order); `trigger_indexes` the shown triggers' positions
    in the whole list (in the order shown); `triggers` how many the whole list holds.
    """

    document: Document
    whole: bool
    outlined: dict[str, str] = field(default_factory=dict)
    trigger_indexes: tuple[int, ...] = ()
    triggers: int = 0

    def outline(self) -> str:
        """The outline's lines: empty for a whole document."""
        if self.whole:
            return ""
        parts = "; ".join(f"{pid}: {name}" for pid, name in self.outlined.items()) or "none"
        shown = ", ".join(str(i) for i in self.trigger_indexes) or "none"
        return (
            f"parts not shown (id: name): {parts}\n"
            f"triggers_and_goals: {self.triggers} in all; shown (their indexes, in order): {shown}"
        )


def _touched(activities: Sequence[Activity]) -> tuple[set[str], set[str]]:
    """The part ids and trigger texts the activity names."""
    parts: set[str] = set()
    triggers: set[str] = set()
    for a in activities:
        p = a.payload if isinstance(a.payload, dict) else {}
        if p.get("part_id") not in (None, ""):
            parts.add(str(p["part_id"]))
        related = p.get("related_parts")
        if isinstance(related, list):
            parts.update(str(x) for x in related)
        if a.kind == "trigger_noted" and p.get("trigger"):
            triggers.add(str(p["trigger"]))
    return parts, triggers


def prompt_view(document: Document, activities: Sequence[Activity], schema: str) -> PromptView:
    """The view of `document` a prompt for `activities` carries (see the module's docstring)."""
    parts = document.get("parts")
    if (
        schema not in VIEW_SCHEMAS
        or not isinstance(parts, dict)
        or not parts
        or any(a.kind == RESET_KIND for a in activities)
    ):
        return PromptView(document=document, whole=True)
    touched_parts, touched_triggers = _touched(activities)
    all_triggers = document.get("triggers_and_goals")
    triggers = all_triggers if isinstance(all_triggers, list) else []
    indexes = tuple(
        i for i, t in enumerate(triggers) if isinstance(t, dict) and str(t.get("trigger")) in touched_triggers
    )
    shown = {**document}
    shown["parts"] = {pid: p for pid, p in parts.items() if pid in touched_parts}
    shown["triggers_and_goals"] = [triggers[i] for i in indexes]
    outlined = {
        pid: str(p.get("name", pid)) if isinstance(p, dict) else pid
        for pid, p in parts.items()
        if pid not in touched_parts
    }
    return PromptView(document=shown, whole=False, outlined=outlined, trigger_indexes=indexes, triggers=len(triggers))


def _text(trigger: Any) -> str | None:
    return str(trigger.get("trigger")) if isinstance(trigger, dict) else None


def merge_answer(before: Document, view: PromptView, answer: Document) -> Document:
    """The whole next document from a whole-document answer to `view` of `before`.

    Parts: a shown part takes the answer's value, or is gone when the answer left it out; an
    outlined part stays as it was unless the answer carries it; the answer's new parts are added.
    Triggers: a shown trigger takes the answer's entry with the same text, or is gone; the
    outlined ones stay; the answer's other entries are added at the end. Links to the parts the
    answer removed are taken out of related_parts. The other fields are the answer's.
    """
    if view.whole:
        return answer
    old_parts: dict[str, Any] = before.get("parts") or {}
    new_parts: dict[str, Any] = answer.get("parts") or {}
    parts: dict[str, Any] = {}
    for pid, part in old_parts.items():
        if pid in new_parts:
            parts[pid] = new_parts[pid]
        elif pid in view.outlined:
            parts[pid] = part
    parts.update({pid: p for pid, p in new_parts.items() if pid not in parts})
    old_triggers: list[Any] = list(before.get("triggers_and_goals") or [])
    answered: list[Any] = list(answer.get("triggers_and_goals") or [])
    by_text: dict[str, Any] = {}
    for t in answered:
        text = _text(t)
        if text is not None:
            by_text.setdefault(text, t)
    shown = set(view.trigger_indexes)
    used: set[str] = set()
    triggers: list[Any] = []
    for i, t in enumerate(old_triggers):
        if i not in shown:
            triggers.append(t)
            continue
        text = _text(t)
        if text is not None and text in by_text and text not in used:
            triggers.append(by_text[text])
            used.add(text)
    for t in answered:
        text = _text(t)
        if text is None or text not in used:
            triggers.append(t)
            if text is not None:
                used.add(text)
    # A part the answer removed may be named by a trigger the model never saw: the link goes with
    # it (as an edit's removal takes it out of every related_parts). Any other unknown id stays,
    # for validation to refuse.
    removed = set(old_parts) - set(parts)
    for i, t in enumerate(triggers):
        related = t.get("related_parts") if isinstance(t, dict) else None
        if removed and isinstance(related, list) and any(p in removed for p in related):
            # a copy: an outlined trigger is the head's own object
            triggers[i] = {**t, "related_parts": [p for p in related if p not in removed]}
    return {**answer, "parts": parts, "triggers_and_goals": triggers}

"""The memory as a compact, deterministic text block for a system prompt, cut to a token budget
(`render_memory`; tokens estimated by `estimate_tokens`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from pydantic import ValidationError

from user_memory.domain.memory.document import (
    AreaToImprove,
    TutorMemory,
    UserState,
    get_schema,
    section_names,
    sensitive_fields,
)
from user_memory.domain.memory.recent import NotedMemory, recent_items
from user_memory.domain.model import Document
from user_memory.errors import (
    InvalidDocument,
    describe_validation_error,
)

# Evidence entries shown per item (the last ones: append adds at the end, so the newest).
MAX_EVIDENCE_SHOWN = 3
# The largest budget a caller may ask for (GET /me/memory/prompt's budget_tokens, the MCP tool's).
DEFAULT_RENDER_BUDGET = 800
MAX_RENDER_BUDGET = 32_000

_Line = tuple[str, str]  # (section, one line of text)


def estimate_tokens(text: str) -> int:
    """The token estimate `render_memory` budgets with: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


def _text(value: str) -> str:
    """One line: every run of whitespace (newlines included) becomes one space."""
    return " ".join(value.split())


def _evidence(evidence: list[str]) -> str:
    shown = [t for t in (_text(e) for e in evidence[-MAX_EVIDENCE_SHOWN:]) if t]
    if not shown:
        return ""
    earlier = len(evidence) - MAX_EVIDENCE_SHOWN
    more = f" (+{earlier} earlier)" if earlier > 0 else ""
    return f" - evidence: {'; '.join(shown)}{more}"


def _user_state_lines(doc: UserState) -> list[_Line]:
    lines: list[_Line] = []
    if notes := _text(doc.safety_notes):
        lines.append(("safety_notes", f"Safety notes: {notes}"))
    if summary := _text(doc.summary):
        lines.append(("summary", f"Summary: {summary}"))
    parts = sorted(doc.parts.items(), key=lambda kv: (-kv[1].recency_score, -kv[1].influence_score, kv[0]))
    for part_id, part in parts:
        details = [_text(part.status)] if _text(part.status) else []
        details.append(f"recency {part.recency_score:g}, influence {part.influence_score:g}")
        goals = "; ".join(g for g in (_text(goal.goal) for goal in part.goals) if g)
        if goals:
            details.append(f"goals: {goals}")
        lines.append(("parts", f"Part: {_text(part.name)} [{_text(part_id)}] - {'; '.join(details)}"))
    for item in doc.triggers_and_goals:
        outcome = _text(item.desired_outcome)
        line = f"Trigger: {_text(item.trigger)}" + (f" -> {outcome}" if outcome else "")
        if item.related_parts:
            line += f" (parts: {', '.join(_text(p) for p in item.related_parts)})"
        lines.append(("triggers_and_goals", line))
    return lines


def _newest_first(day: str | None) -> int:
    """Sort key: later dates first, no date last."""
    return -date.fromisoformat(day).toordinal() if day else 1


def _area_key(item: tuple[int, AreaToImprove]) -> tuple[int, int, int, str, int]:
    index, area = item
    return (-area.severity, _newest_first(area.last_noted), _newest_first(area.first_noted), area.topic, index)


def _noted(area: AreaToImprove) -> str:
    if area.first_noted and area.last_noted:
        return f"; noted {area.first_noted} to {area.last_noted}"
    if area.last_noted:
        return f"; last noted {area.last_noted}"
    if area.first_noted:
        return f"; first noted {area.first_noted}"
    return ""


def _tutor_lines(doc: TutorMemory) -> list[_Line]:
    lines: list[_Line] = []
    info = doc.personal_info
    for label, value in (
        ("Name", info.name),
        ("Preferred name", info.preferred_name),
        ("Language", info.language),
        ("Timezone", info.timezone),
        ("Age group", info.age_group),
    ):
        if text := _text(value):
            lines.append(("personal_info", f"{label}: {text}"))
    goals = "; ".join(g for g in (_text(goal) for goal in info.learning_goals) if g)
    if goals:
        lines.append(("personal_info", f"Learning goals: {goals}"))
    for key in sorted(info.other):
        if text := _text(info.other[key]):
            lines.append(("personal_info", f"Other - {_text(key)}: {text}"))
    for _, area in sorted(enumerate(doc.areas_to_improve), key=_area_key):
        lines.append(
            (
                "areas_to_improve",
                f"Needs work: {_text(area.topic)} (severity {area.severity}/5{_noted(area)}){_evidence(area.evidence)}",
            )
        )
    for strength in doc.knowledge_strengths:
        lines.append(
            (
                "knowledge_strengths",
                f"Strength: {_text(strength.topic)} ({strength.level}){_evidence(strength.evidence)}",
            )
        )
    return lines


def _empty(value: Any) -> bool:
    if isinstance(value, str):
        return not _text(value)
    return value is None or (isinstance(value, list | dict) and not value)


def _pruned(value: Any, sensitive: frozenset[str]) -> Any:
    """`value` without empty members (null, "", [], {}) and without sensitive fields, at any depth."""
    if isinstance(value, dict):
        kept = {k: _pruned(v, sensitive) for k, v in value.items() if k not in sensitive}
        return {k: v for k, v in kept.items() if not _empty(v)}
    if isinstance(value, list):
        return [v for v in (_pruned(item, sensitive) for item in value) if not _empty(v)]
    return value


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return _text(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _joined(values: list[str]) -> str:
    return "; ".join(t for t in (_text(v) for v in values) if t)


_PRIORITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def _companion_lines(doc: Any, include_sensitive: bool, sensitive: frozenset[str]) -> list[_Line]:
    """The companion schema as an agent needs it: who the person is, how they are, the goals they
    pursue, the to-dos still open and the events not cancelled, their preferences and what they
    thought of the answers. Left out: empty fields, bookkeeping (versions, timestamps), finished
    goals and to-dos, cancelled or completed events, and the sensitive fields unless
    `include_sensitive`."""

    def shown(field: str) -> bool:
        return include_sensitive or field not in sensitive

    return [
        *_basic_info_lines(doc.basic_info, shown),
        *_current_state_lines(doc.current_state),
        *_goal_lines(doc.goals.values()),
        *_todo_lines(doc.todos.values()),
        *_event_lines(doc.events.values(), shown),
        *_advanced_info_lines(doc.advanced_info, shown),
        *_feedback_lines(doc.feedback),
    ]


def _basic_info_lines(info: Any, shown: Callable[[str], bool]) -> list[_Line]:
    lines: list[_Line] = []
    for label, field in (
        ("Name", "name"),
        ("Gender", "gender"),
        ("Date of birth", "date_of_birth"),
        ("Email", "email"),
        ("Phone", "phone"),
        ("Timezone", "timezone"),
        ("Locale", "locale"),
    ):
        value = getattr(info, field)
        if shown(field) and value and (text := _text(str(value))):
            lines.append(("basic_info", f"{label}: {text}"))
    return lines


def _current_state_lines(state: Any) -> list[_Line]:
    lines: list[_Line] = []
    for label, value in (("Education", state.education), ("Mood", state.mood)):
        if text := _text(value):
            lines.append(("current_state", f"{label}: {text}"))
    for label, values in (
        ("Skills", state.skills),
        ("Focus areas", state.focus_areas),
        ("Pain points", state.pain_points),
        ("Recent wins", state.recent_wins),
        ("Recent losses", state.recent_losses),
    ):
        if text := _joined(values):
            lines.append(("current_state", f"{label}: {text}"))
    return lines


def _goal_lines(all_goals: Iterable[Any]) -> list[_Line]:
    goals = [g for g in all_goals if g.status in ("active", "paused")]
    goals.sort(key=lambda g: (g.status != "active", _PRIORITY_ORDER[g.priority], g.target_date or "9999", g.id))
    return [("goals", f"Goal: {_text(goal.title)} [{goal.id}]{_suffix(_goal_details(goal))}") for goal in goals]


def _goal_details(goal: Any) -> list[str]:
    details = ["paused"] if goal.status == "paused" else []
    if goal.priority != "medium":
        details.append(f"{goal.priority} priority")
    if goal.target_date:
        details.append(f"target {goal.target_date}")
    done = next((e.percent for e in reversed(goal.progress) if e.percent is not None), None)
    if done is not None:
        details.append(f"{done}% done")
    if category := _text(goal.category):
        details.append(category)
    if description := _text(goal.description):
        details.append(description)
    return details


def _todo_lines(all_todos: Iterable[Any]) -> list[_Line]:
    todos = [t for t in all_todos if t.status in ("open", "in_progress")]
    todos.sort(key=lambda t: (t.due_date is None, t.due_date or "", _PRIORITY_ORDER[t.priority], t.id))
    return [("todos", f"To-do: {_text(todo.text)} [{todo.id}]{_suffix(_todo_details(todo))}") for todo in todos]


def _todo_details(todo: Any) -> list[str]:
    details = [f"due {todo.due_date}"] if todo.due_date else []
    if todo.status == "in_progress":
        details.append("in progress")
    if todo.priority != "medium":
        details.append(f"{todo.priority} priority")
    if todo.goal_id:
        details.append(f"for goal {todo.goal_id}")
    if tags := ", ".join(t for t in (_text(tag) for tag in todo.tags) if t):
        details.append(f"tags {tags}")
    if notes := _text(todo.notes):
        details.append(notes)
    return details


def _suffix(details: list[str]) -> str:
    return f" - {'; '.join(details)}" if details else ""


def _event_lines(all_events: Iterable[Any], shown: Callable[[str], bool]) -> list[_Line]:
    events = [e for e in all_events if e.status in ("confirmed", "tentative")]
    events.sort(key=lambda e: (e.start, e.id))
    return [
        ("events", f"Event: {_text(event.summary)} [{event.id}] - {'; '.join(_event_details(event, shown))}")
        for event in events
    ]


def _event_details(event: Any, shown: Callable[[str], bool]) -> list[str]:
    details = [f"{event.start} to {event.end}" if event.end else event.start]
    rules = [line.removeprefix("RRULE:") for line in event.recurrence if line.startswith("RRULE:")]
    if rules:
        details.append(f"repeats {rules[0]}")
    if event.status == "tentative":
        details.append("tentative")
    if location := _text(event.location):
        details.append(f"at {location}")
    people = [
        _text(a.name) + (f" <{a.email}>" if a.email and shown("email") else "")
        for a in event.attendees
        if _text(a.name) or (a.email and shown("email"))
    ]
    if people:
        details.append(f"with {', '.join(p.strip() for p in people)}")
    return details


def _advanced_info_lines(advanced: Any, shown: Callable[[str], bool]) -> list[_Line]:
    lines: list[_Line] = []
    if occupation := _text(advanced.occupation):
        lines.append(("advanced_info", f"Occupation: {occupation}"))
    for area in sorted(advanced.preferences):
        if text := ", ".join(v for v in (_text(x) for x in advanced.preferences[area]) if v):
            lines.append(("advanced_info", f"Preferences - {_text(area)}: {text}"))
    for label, values in (("Languages", advanced.languages), ("Travel styles", advanced.travel_styles)):
        if text := ", ".join(v for v in (_text(x) for x in values) if v):
            lines.append(("advanced_info", f"{label}: {text}"))
    for key in sorted(advanced.other_attributes):
        if shown(key) and (text := _text(advanced.other_attributes[key])):
            lines.append(("advanced_info", f"Other - {_text(key)}: {text}"))
    return lines


def _feedback_lines(feedback: Any) -> list[_Line]:
    lines: list[_Line] = []
    for label, values in (
        ("Liked", feedback.positives),
        ("Disliked", feedback.negatives),
        ("Asked for", feedback.suggestions),
    ):
        lines.extend(("feedback", f"{label}: {text}") for text in (_text(v) for v in values) if text)
    if feedback.ratings_count and feedback.average_rating is not None:
        lines.append(("feedback", f"Ratings: {feedback.ratings_count}, average {feedback.average_rating:g} of 5"))
    return lines


def _generic_lines(document: Document, sections: list[str], sensitive: frozenset[str]) -> list[_Line]:
    """Any other registered schema: sections in schema order, one line per list item or object
    member; empty values and sensitive fields left out at any depth."""
    lines: list[_Line] = []
    document = _pruned(document, sensitive)
    for section in sections:
        value = document.get(section)
        if value is None:
            continue
        if isinstance(value, list):
            lines.extend((section, f"{section}: {_compact(item)}") for item in value)
        elif isinstance(value, dict):
            lines.extend((section, f"{section} - {_text(key)}: {_compact(value[key])}") for key in sorted(value))
        else:
            lines.append((section, f"{section}: {_compact(value)}"))
    return lines


def _lines(document: Any, schema: str, include_sensitive: bool) -> list[_Line]:
    if not isinstance(document, dict):
        raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
    try:
        parsed = get_schema(schema).model_validate(document)
    except ValidationError as err:
        raise InvalidDocument(describe_validation_error(err)) from err
    if isinstance(parsed, UserState):
        return _user_state_lines(parsed)
    if isinstance(parsed, TutorMemory):
        return _tutor_lines(parsed)
    sensitive = sensitive_fields(schema)
    if schema == "companion":
        return _companion_lines(parsed, include_sensitive, sensitive)
    hidden = frozenset() if include_sensitive else sensitive
    return _generic_lines(parsed.model_dump(mode="json"), section_names(schema), hidden)


def _marker(left_out: list[_Line]) -> str:
    sections = list(dict.fromkeys(section for section, _ in left_out))
    n = len(left_out)
    return f"[memory truncated: {n} more item{'' if n == 1 else 's'} in {', '.join(sections)}]"


@dataclass(frozen=True, kw_only=True)
class RenderedPrompt:
    """The prompt block and how many recent items (conversation memories since the last summary) it shows."""

    text: str
    recent: int = 0

    def etag(self, version: int) -> str:
        """The block's ETag: the version, and a digest of the block when it shows recent items
        (the text changes with them while the version stays)."""
        if not self.recent:
            return f'"{version}"'
        return f'"{version}+{hashlib.sha256(self.text.encode()).hexdigest()[:12]}"'


def render_prompt(
    document: Any,
    budget_tokens: int,
    *,
    schema: str = "user_state",
    include_sensitive: bool = False,
    recent: Sequence[NotedMemory] = (),
) -> RenderedPrompt:
    """`render_memory`, with the facts learned since the last summary after the document's lines.

    `recent` are the noted conversation memories (domain/memory/recent.py); the items the summary
    does not hold yet (`recent_items`) follow the document's lines as "Recent - learned: ...",
    "Recent - decided: ...", "Recent - open loop: ..." lines (section `recent`), newest conversation
    first, inside the same budget and cut by the same rule (the marker names `recent` when they are
    cut)."""
    if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool) or budget_tokens < 0:
        raise ValueError("budget_tokens must be a non-negative integer")
    lines = _lines(document, schema, include_sensitive)
    document_text = "\n".join(text for _, text in lines)
    extra = recent_items(list(recent), document_text=document_text) if recent else []
    lines += [("recent", item.line) for item in extra]
    text = _cut(lines, budget_tokens)
    shown = sum(1 for item in extra if item.line in text.split("\n"))
    return RenderedPrompt(text=text, recent=shown)


def render_memory(
    document: Any, budget_tokens: int, *, schema: str = "user_state", include_sensitive: bool = False
) -> str:
    """The memory as a compact block of labeled lines for a system prompt, within `budget_tokens`.

    Tokens are estimated as ceil(characters / 4) of the whole block, newlines included
    (`estimate_tokens`). One item is one line (whitespace inside values is collapsed), and
    sections come in a fixed priority order:

    - user_state: safety_notes, summary, parts (by recency, then influence, then id, highest
      first), triggers_and_goals (stored order);
    - tutor: personal_info (name, preferred name, language, timezone, age group, learning
      goals, then `other` by key), areas_to_improve (by severity, then last_noted, then
      first_noted, newest first, then topic), knowledge_strengths (stored order);
    - companion: basic_info, current_state, goals (active, then paused; by priority, then target
      date), to-dos (open or in progress; by due date, then priority), events (confirmed or
      tentative; by start), advanced_info, feedback; finished goals and to-dos, cancelled and
      completed events, and bookkeeping (versions, timestamps) are left out;
    - any other registered schema: its sections in schema order, one line per list item or
      object member.

    Empty fields (null, "", [], {}) are never rendered, and neither are the fields the schema
    declares sensitive (`sensitive_fields`: the companion's date_of_birth, email and phone) unless
    `include_sensitive` (a deployment's PROMPT_INCLUDE_SENSITIVE).

    Items show at most the last MAX_EVIDENCE_SHOWN evidence entries. Empty sections are left
    out; a document without content (version 0's `{}` included) renders as "". When the block
    does not fit, it is cut after the longest prefix of whole lines that fits together with a
    final marker line, e.g. "[memory truncated: 3 more items in areas_to_improve,
    knowledge_strengths]", naming every section with an item left out. Everything above the
    marker outranks everything cut (a long item is never skipped to fit a later, shorter one).
    If not even the marker alone fits, the block is the marker alone (the only case in which
    the result exceeds the budget). Identical input gives identical output.

    Raises InvalidDocument when the document does not validate against the schema, and
    ValueError for a negative budget.
    """
    if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool) or budget_tokens < 0:
        raise ValueError("budget_tokens must be a non-negative integer")
    return _cut(_lines(document, schema, include_sensitive), budget_tokens)


def _cut(lines: list[_Line], budget_tokens: int) -> str:
    """The lines within the budget: the longest prefix of whole lines that fits with the marker."""
    texts = [text for _, text in lines]
    block = "\n".join(texts)
    if estimate_tokens(block) <= budget_tokens:
        return block
    chars = 0  # characters of the first k lines, each followed by the newline before the marker
    prefix = [0]
    for text in texts:
        chars += len(text) + 1
        prefix.append(chars)
    for k in range(len(texts) - 1, 0, -1):
        marker = _marker(lines[k:])
        if math.ceil((prefix[k] + len(marker)) / 4) <= budget_tokens:
            return "\n".join([*texts[:k], marker])
    return _marker(lines)

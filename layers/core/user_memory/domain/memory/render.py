"""The memory as a compact, deterministic text block for a system prompt, cut to a token budget
(`render_memory`; tokens estimated by `estimate_tokens`)."""

from __future__ import annotations

import json
import math
from datetime import date
from typing import Any

from pydantic import ValidationError

from user_memory.domain.memory.document import (
    AreaToImprove,
    TutorMemory,
    UserState,
    get_schema,
    section_names,
)
from user_memory.domain.model import Document
from user_memory.errors import (
    InvalidDocument,
    describe_validation_error,
)

# Evidence entries shown per item (the last ones: append adds at the end, so the newest).
MAX_EVIDENCE_SHOWN = 3

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


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return _text(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _generic_lines(document: Document, sections: list[str]) -> list[_Line]:
    """Any other registered schema: sections in schema order, one line per list item or object member."""
    lines: list[_Line] = []
    for section in sections:
        value = document.get(section)
        if value in (None, "", [], {}):
            continue
        if isinstance(value, list):
            lines.extend((section, f"{section}: {_compact(item)}") for item in value)
        elif isinstance(value, dict):
            lines.extend((section, f"{section} - {_text(key)}: {_compact(value[key])}") for key in sorted(value))
        else:
            lines.append((section, f"{section}: {_compact(value)}"))
    return lines


def _lines(document: Any, schema: str) -> list[_Line]:
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
    return _generic_lines(parsed.model_dump(mode="json"), section_names(schema))


def _marker(left_out: list[_Line]) -> str:
    sections = list(dict.fromkeys(section for section, _ in left_out))
    n = len(left_out)
    return f"[memory truncated: {n} more item{'' if n == 1 else 's'} in {', '.join(sections)}]"


def render_memory(document: Any, budget_tokens: int, *, schema: str = "user_state") -> str:
    """The memory as a compact block of labeled lines for a system prompt, within `budget_tokens`.

    Tokens are estimated as ceil(characters / 4) of the whole block, newlines included
    (`estimate_tokens`). One item is one line (whitespace inside values is collapsed), and
    sections come in a fixed priority order:

    - user_state: safety_notes, summary, parts (by recency, then influence, then id, highest
      first), triggers_and_goals (stored order);
    - tutor: personal_info (name, preferred name, language, timezone, age group, learning
      goals, then `other` by key), areas_to_improve (by severity, then last_noted, then
      first_noted, newest first, then topic), knowledge_strengths (stored order);
    - any other registered schema: its sections in schema order, one line per list item or
      object member.

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
    lines = _lines(document, schema)
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

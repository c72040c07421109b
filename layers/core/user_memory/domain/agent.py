"""What a conversational agent needs from a user's memory: read it into a prompt, edit it, forget.

- `render_memory` turns a document into a compact, deterministic text block for a system
  prompt, cut to a token budget.
- `apply_update` and `forget` are the edits: pure functions from a document to the next
  document, validated against the schema. The input document is never modified.
- `tool_definitions` describes the edits to a model as two chat-completions tools,
  `update_memory` and `forget_memory` (strict mode), and `execute_tool_call` runs one call
  against the store and writes the result as a new version, idempotently per tool call id.

No HTTP and no database code here: the store is passed in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from user_memory.domain.document import (
    AreaToImprove,
    TutorMemory,
    UserState,
    empty_document,
    get_schema,
    validate_document,
)
from user_memory.domain.model import DEFAULT_MAX_DOCUMENT_BYTES, AppendResult, Document
from user_memory.domain.patching import apply_patch, copy_json, json_equal, parse_pointer
from user_memory.domain.repository import MemoryStore
from user_memory.errors import (
    InvalidDocument,
    InvalidToolCall,
    InvalidUpdate,
    UnknownSection,
    VersionConflict,
    describe_validation_error,
)

__all__ = [
    "FORGET_TOOL",
    "MAX_CONFLICT_RETRIES",
    "MODES",
    "SECTION_HINTS",
    "UPDATE_TOOL",
    "MemoryToolCall",
    "apply_update",
    "estimate_tokens",
    "execute_tool_call",
    "forget",
    "merge_patch",
    "parse_tool_call",
    "render_memory",
    "section_names",
    "tool_definitions",
]

# Top-level fields that describe the document rather than the user: not sections.
_META_FIELDS = frozenset({"version", "last_updated_by"})


def section_names(schema: str = "user_state") -> list[str]:
    """The sections of a schema (its top-level fields but `version` and `last_updated_by`), in schema order."""
    return [name for name in get_schema(schema).model_fields if name not in _META_FIELDS]


def _check_section(section: Any, schema: str) -> str:
    known = section_names(schema)
    if not isinstance(section, str) or section not in known:
        raise UnknownSection(section if isinstance(section, str) else type(section).__name__, schema, known)
    return section


def _working_copy(document: Any, schema: str) -> Document:
    """A copy of the document that owns every container, with missing sections at their defaults
    (version 0 is `{}`)."""
    if not isinstance(document, dict):
        raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
    return {**empty_document(schema), **copy_json(document)}


# -- rendering ---------------------------------------------------------------------------------

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


# -- updates -----------------------------------------------------------------------------------

MODES = ("merge", "replace", "append")
Mode = Literal["merge", "replace", "append"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: `patch` applied to `target`, as a new value.

    An object patch merges into the target member by member, recursively (a target that is not
    an object counts as `{}`); a `null` member deletes that key (absent keys are no error); any
    other value, lists included, replaces the target whole. Keys the patch does not name are
    kept as they are. Neither argument is modified and the result shares nothing with them.
    """
    return _merge(copy_json(target), patch)


def _merge(target: Any, patch: Any) -> Any:  # `target` is owned: modified in place
    if not isinstance(patch, dict):
        return copy_json(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def _items(value: Any) -> list[Any]:
    return copy_json(value) if isinstance(value, list) else [copy_json(value)]


def _append(section: str, current: Any, value: Any) -> Any:
    if isinstance(current, list):
        return current + _items(value)
    if isinstance(current, dict):
        if not isinstance(value, dict):
            raise InvalidUpdate(f"append to {section!r} (an object) needs an object of lists to append")
        for key, items in value.items():
            existing = current.get(key, [])
            if not isinstance(existing, list):
                raise InvalidUpdate(f"append to {section!r}: member {key!r} is not a list; use merge")
            current[key] = existing + _items(items)
        return current
    raise InvalidUpdate(f"append needs a list section or an object section with list members; {section!r} is neither")


def apply_update(
    document: Any,
    section: str,
    mode: str,
    value: Any,
    *,
    schema: str = "user_state",
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> Document:
    """The document with one section updated, validated; `document` is never modified.

    Modes:

    - "merge": RFC 7396 (`merge_patch`) on the section. Objects merge recursively, a `null`
      member deletes that key, lists and other values replace what they name; keys the value
      does not name are kept. A `null` value resets the whole section to its schema default.
    - "replace": the section becomes `value` whole.
    - "append": only one level deep. On a list section, a list value appends its items and
      any other value is appended as one item. On an object section, the value must be an
      object whose members name lists of the section (a missing member counts as `[]`); each
      list value appends its items, any other value one item. Text and number sections, and
      members that are not lists, refuse append (InvalidUpdate): use merge or replace.
      Nothing is deduplicated.

    A missing section (version 0 is `{}`) starts from its default. The result is validated
    with `validate_document` (stored form: defaults filled in), so a key deleted by merge
    comes back as its default when the schema has one.

    Raises UnknownSection for a section the schema does not have, InvalidUpdate for an unknown
    mode or an append that does not fit, InvalidDocument (or DocumentTooLarge) when the result
    does not validate.
    """
    _check_section(section, schema)
    current = _working_copy(document, schema)
    if mode == "merge":
        current[section] = empty_document(schema)[section] if value is None else _merge(current[section], value)
    elif mode == "replace":
        current[section] = copy_json(value)
    elif mode == "append":
        current[section] = _append(section, current[section], value)
    else:
        raise InvalidUpdate(f"update mode must be one of {', '.join(MODES)}")
    return validate_document(current, schema, max_bytes=max_document_bytes)


def forget(
    document: Any, target: str, *, schema: str = "user_state", max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
) -> Document:
    """The document without `target`, validated; `document` is never modified.

    `target` is a section name, or an RFC 6901 JSON Pointer (it starts with "/") into a section.
    A section, by name or as "/section", is reset to its empty default from the schema (not
    deleted, so the document still validates); a pointer deeper in removes that member or
    array element (later elements move up), and a member with a schema default comes back as
    that default. The whole document ("" or "/") is not a target: forget sections one by one.

    Raises UnknownSection when the target's section is not in the schema, PatchError when the
    pointer is malformed or names nothing in the document (a forget that finds nothing is
    loud, so a mistyped target is never taken for done), InvalidDocument when the result does
    not validate (for example a pointer to a required field).
    """
    if not isinstance(target, str):
        raise InvalidUpdate(f"a forget target must be a section name or a JSON Pointer, got {type(target).__name__}")
    tokens = parse_pointer(target) if target.startswith("/") else [target]
    section = _check_section(tokens[0], schema)
    current = _working_copy(document, schema)
    if len(tokens) == 1:
        current[section] = empty_document(schema)[section]
    else:
        current = apply_patch(current, [{"op": "remove", "path": target}], in_place=True)
    return validate_document(current, schema, max_bytes=max_document_bytes)


# -- tools -------------------------------------------------------------------------------------

UPDATE_TOOL = "update_memory"
FORGET_TOOL = "forget_memory"
MAX_CONFLICT_RETRIES = 3
MAX_TOOL_CALL_ID_CHARS = 256

# The shape of each section, for the model (tool descriptions). A schema without hints gets
# the section names only.
SECTION_HINTS: dict[str, dict[str, str]] = {
    "user_state": {
        "summary": "text, a short summary of the user",
        "parts": (
            'object keyed by part id, each {"name": text, "status": text, "recency_score": 0..1, '
            '"influence_score": 0..1, "goals": [{"goal": text}]}'
        ),
        "triggers_and_goals": 'list of {"trigger": text, "desired_outcome": text, "related_parts": [part id]}',
        "safety_notes": "text, what the agent must be careful about",
    },
    "tutor": {
        "personal_info": (
            'object {"name", "preferred_name", "language", "timezone", "age_group": text, '
            '"learning_goals": [text], "other": {text: text}}'
        ),
        "areas_to_improve": (
            'list of {"topic": text, "evidence": [text], "first_noted": "YYYY-MM-DD" or null, '
            '"last_noted": "YYYY-MM-DD" or null, "severity": 1..5}'
        ),
        "knowledge_strengths": (
            'list of {"topic": text, "evidence": [text], "level": "beginner" | "intermediate" | "advanced"}'
        ),
    },
}


def tool_definitions(schema: str = "user_state") -> list[dict[str, Any]]:
    """The `update_memory` and `forget_memory` tools in the chat-completions `tools` format, strict mode.

    Strict mode needs closed objects with every property required and cannot express "any
    JSON value", so `update_memory` takes its value as JSON text, `value_json`, parsed by
    `execute_tool_call` (invalid JSON is an InvalidToolCall). A new list each call.
    """
    sections = section_names(schema)
    hints = SECTION_HINTS.get(schema, {})
    shapes = "\n".join(f"- {s}: {hints[s]}" if s in hints else f"- {s}" for s in sections)
    update = {
        "type": "function",
        "function": {
            "name": UPDATE_TOOL,
            "description": (
                "Update one section of what you remember about this user, when they tell you something worth "
                "keeping or correct something you remember. Sections:\n" + shapes
            ),
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {
                    "section": {"type": "string", "enum": sections, "description": "the section to update"},
                    "mode": {
                        "type": "string",
                        "enum": list(MODES),
                        "description": (
                            "merge: an object merged into the section (nested objects merge, null deletes a key, "
                            "lists are replaced, unnamed keys are kept); replace: the new section whole; "
                            "append: for a list section an item or a list of items to add at the end, for an "
                            "object section an object of lists to extend"
                        ),
                    },
                    "value_json": {
                        "type": "string",
                        "description": 'the value as JSON text, for example {"timezone": "Europe/Paris"}',
                    },
                },
                "required": ["section", "mode", "value_json"],
                "additionalProperties": False,
            },
        },
    }
    forget_tool = {
        "type": "function",
        "function": {
            "name": FORGET_TOOL,
            "description": (
                "Forget something you remember about this user, when they ask you to or it is no longer true: "
                "a whole section (it becomes empty) or one member or list item inside it."
            ),
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {
                    "target": {
                        "type": "string",
                        "description": (
                            f"a section name ({', '.join(sections)}) or a JSON Pointer into one: "
                            '"/<section>/<index>" for an item of a list section, "/<section>/<key>" for a member '
                            'of an object section (in a key, ~1 stands for "/" and ~0 for "~")'
                        ),
                    }
                },
                "required": ["target"],
                "additionalProperties": False,
            },
        },
    }
    return [update, forget_tool]


class _UpdateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    section: str
    mode: Mode
    value_json: str


class _ForgetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    target: str = Field(min_length=1)


@dataclass(frozen=True, kw_only=True)
class MemoryToolCall:
    """A parsed `update_memory` (section, mode, value) or `forget_memory` (target) call."""

    id: str
    name: str
    section: str | None = None
    mode: str | None = None
    value: Any = None
    target: str | None = None


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:  # its `doc` holds the text: not chained
        raise InvalidToolCall(f"{what} is not valid JSON ({err.msg} at position {err.pos})") from None
    except ValueError as err:
        raise InvalidToolCall(f"{what} is not valid JSON ({err})") from None
    except RecursionError:
        raise InvalidToolCall(f"{what} is nested too deeply") from None


def parse_tool_call(tool_call: Any) -> MemoryToolCall:
    """Read a tool call (the OpenAI SDK's object or its dict form) into a MemoryToolCall.

    Raises InvalidToolCall naming the problem (missing id, unknown tool, arguments that are
    not a JSON object, a missing, extra or mistyped argument, value_json that is not JSON);
    messages never quote argument values, and the underlying errors, which can hold them,
    are not chained.
    """
    call_id = _field(tool_call, "id")
    if not isinstance(call_id, str) or not call_id.strip():
        raise InvalidToolCall("the tool call has no id")
    if len(call_id) > MAX_TOOL_CALL_ID_CHARS:
        raise InvalidToolCall(f"the tool call id is over {MAX_TOOL_CALL_ID_CHARS} characters")
    if _field(tool_call, "type") not in (None, "function"):
        raise InvalidToolCall("the tool call is not a function call")
    function = _field(tool_call, "function")
    name = _field(function, "name") if function is not None else None
    if name not in (UPDATE_TOOL, FORGET_TOOL):
        raise InvalidToolCall(f"unknown tool; the memory tools are {UPDATE_TOOL} and {FORGET_TOOL}")
    raw = _field(function, "arguments")
    if not isinstance(raw, str):
        raise InvalidToolCall(f"{name}: arguments must be JSON text")
    arguments = _loads(raw, f"{name} arguments")
    if not isinstance(arguments, dict):
        raise InvalidToolCall(f"{name}: arguments must be a JSON object")
    try:
        if name == FORGET_TOOL:
            target = _ForgetArgs.model_validate(arguments).target
            return MemoryToolCall(id=call_id, name=name, target=target)
        update = _UpdateArgs.model_validate(arguments)
    except ValidationError as err:
        raise InvalidToolCall(f"{name} arguments: {describe_validation_error(err)}") from None
    value = _loads(update.value_json, f"{name} value_json")
    return MemoryToolCall(id=call_id, name=name, section=update.section, mode=update.mode, value=value)


def _next_document(call: MemoryToolCall, document: Document, schema: str, max_bytes: int) -> Document:
    if call.name == UPDATE_TOOL:
        assert call.section is not None and call.mode is not None
        return apply_update(document, call.section, call.mode, call.value, schema=schema, max_document_bytes=max_bytes)
    assert call.target is not None
    return forget(document, call.target, schema=schema, max_document_bytes=max_bytes)


def execute_tool_call(
    store: MemoryStore,
    user_id: object,
    tool_call: Any,
    *,
    schema: str = "user_state",
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> AppendResult:
    """Run one `update_memory` or `forget_memory` call for `user_id` and write the result.

    The user comes from the caller, never from the model. The call is applied to the head
    (`apply_update` or `forget`), validated, and appended with source "agent:<tool name>" and
    idempotency key "api:tool:<tool call id>". The head is read together with that key: when
    an earlier delivery of the same call was written, the store answers IDEMPOTENT and
    nothing is applied or written (a repeated forget does not fail on what it already
    removed). A call that changes the document also sets `last_updated_by` to the source
    (when the schema has that field); one that changes nothing writes nothing (UNCHANGED).
    When another writer gets in between the read and the write (VersionConflict), the call is
    re-applied to the new head, up to MAX_CONFLICT_RETRIES times, so the other write is kept;
    then the VersionConflict is raised.

    Raises InvalidToolCall (malformed call), UnknownSection, InvalidUpdate, PatchError,
    InvalidDocument / DocumentTooLarge, VersionConflict, and what the store raises.
    """
    call = parse_tool_call(tool_call)
    key = f"api:tool:{call.id}"
    source = f"agent:{call.name}"
    stamps = "last_updated_by" in get_schema(schema).model_fields
    for attempt in range(MAX_CONFLICT_RETRIES + 1):
        head, recorded = store.head_for_run(user_id, key)
        if recorded is not None:
            # Without `base`, the store reads the key again and returns the recorded version.
            return store.append(
                user_id, head.document, expected_version=head.version, source=source, idempotency_key=key
            )
        document = _next_document(call, head.document, schema, max_document_bytes)
        if stamps and not json_equal(document, head.document):
            document["last_updated_by"] = source
        try:
            return store.append(
                user_id, document, expected_version=head.version, base=head, source=source, idempotency_key=key
            )
        except VersionConflict:
            if attempt == MAX_CONFLICT_RETRIES:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

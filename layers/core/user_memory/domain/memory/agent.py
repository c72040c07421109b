"""What a conversational agent needs from a user's memory: read it into a prompt, edit it, forget.

- `render_memory` (memory/render.py) turns a document into a text block for a system prompt, and
  `render_prompt` adds the facts conversations taught since the last summary, marked recent
  (`MemoryService.prompt`: what GET /me/memory/prompt, the MCP read_memory tool and `user-memory chat` read).
- `apply_update` and `forget` are the edits: pure functions from a document to the next
  document, validated against the schema. The input document is never modified.
- `tool_definitions` describes the edits to a model as two chat-completions tools,
  `update_memory` and `forget_memory` (strict mode), and `execute_tool_call` runs one call
  against the store and writes the result as a new version, idempotently per tool call id.

No HTTP and no database code here: the store is passed in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from user_memory.domain.memory.document import (
    empty_document,
    get_schema,
    section_names,
    validate_document,
)
from user_memory.domain.memory.patching import (
    apply_patch,
    check_growth,
    copy_json,
    json_equal,
    merge_into,
    parse_pointer,
)
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import DEFAULT_MAX_DOCUMENT_BYTES, AppendResult, Document
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
    "execute_tool_call",
    "forget",
    "parse_tool_call",
    "tool_definitions",
]


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


# -- updates -----------------------------------------------------------------------------------

MODES = ("merge", "replace", "append")
Mode = Literal["merge", "replace", "append"]


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
    does not validate; DocumentGrowsTooLarge, before the update is built, when the document and
    the value together are over twice the limit.
    """
    _check_section(section, schema)
    check_growth(document, value, 2 * max_document_bytes)
    current = _working_copy(document, schema)
    if mode == "merge":
        current[section] = empty_document(schema)[section] if value is None else merge_into(current[section], value)
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

"""Edits: a model's changes to a memory document, each checked, refused or turned into RFC 6902.

In edit mode the summarizer answers with a list of edits instead of the whole document. An edit
is `add`, `replace` or `remove` at a JSON Pointer in the document's own terms, with a one-line
reason. For the default schema (user_state):

    /summary, /safety_notes                          text
    /parts/<part id>                                 a part, addressed by its id (not its position)
    /parts/<part id>/<field>                         name, status, recency_score, influence_score, goals
    /parts/<part id>/goals/-, .../goals/<index>      one goal, {"goal": "..."}
    /triggers_and_goals/-, /triggers_and_goals/<index>[/<field>]

Edits apply in order, as the operations of one JSON Patch do (an index refers to the list as the
edits before left it). Each edit is checked before it applies:

- its path against the schema (any registered schema: the pointer is walked through the pydantic
  model), and its value against the type at that path (a part's value may carry the `id` the
  model saw, which must then be the path's); `version` and `last_updated_by` are the service's;
- then it becomes RFC 6902 operations: `remove` of a field that has a default resets it to the
  default (removing `/safety_notes` clears them), `remove` of a part also takes its id out of
  every `related_parts`;
- then the guardrail: an edit that removes a part, or clears the safety notes, is refused unless
  the activity asks for it (domain/summary/requests.py): for a part, a forget request whose payload names
  that `part_id`, or a memory_reset; for the safety notes, only a memory_reset. A forget request
  that names no part covers nothing, and free text is never a request. A refused edit is skipped
  and recorded; the others still apply.

An edit whose path does not exist or whose value has the wrong shape is an error. Errors are
collected over the whole list and raised together (InvalidEdits), so the model can be asked once
more with every problem named: when some edits of an answer do not even parse, the ones that do
are still checked, and the retry names both kinds (`every_error`). After the edits, the document
is validated whole (cross-field rules such as `related_parts` naming existing parts, the size
limit).
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from user_memory.domain.memory.document import get_schema, validate_document
from user_memory.domain.memory.patching import (
    MAX_OPERATIONS,
    PatchBudget,
    apply_patch,
    copy_json,
    escape_token,
    json_equal,
    parse_pointer,
)
from user_memory.domain.model import DEFAULT_MAX_DOCUMENT_BYTES, Activity, Document, Patch
from user_memory.domain.summary.requests import forget_allows
from user_memory.errors import (
    DocumentGrowsTooLarge,
    InvalidDocument,
    InvalidEdits,
    PatchError,
    describe_validation_error,
)

__all__ = [
    "EDIT_OPS",
    "EditResult",
    "MemoryEdit",
    "RefusedEdit",
    "apply_edits",
    "edit_from_json",
    "edits_between",
    "edits_to_patch",
    "every_error",
    "forget_allows",
    "parse_edits",
    "refusal",
]

EditOp = Literal["add", "replace", "remove"]
EDIT_OPS: tuple[EditOp, ...] = ("add", "replace", "remove")
# A reason is one line: whitespace collapsed, cut beyond this many characters.
MAX_REASON_CHARS = 300
# Top-level fields the service maintains; no edit may write them.
SERVICE_FIELDS = frozenset({"version", "last_updated_by"})
# How much of a path an error message quotes.
_PATH_SHOWN = 120

Operation = dict[str, Any]


def _one_line(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


@dataclass(frozen=True)
class MemoryEdit:
    """One change the model asks for: `op` at `path` (a JSON Pointer), `value` for add and
    replace (ignored for remove), and the one-line `reason` it gave."""

    op: EditOp
    path: str
    value: Any = None
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _one_line(self.reason))

    def describe(self) -> dict[str, str]:
        """What provenance records of an edit: op, path and reason (never the value)."""
        return {"op": self.op, "path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class RefusedEdit:
    """An edit the guardrail refused, and why."""

    edit: MemoryEdit
    why: str

    def describe(self) -> dict[str, str]:
        return {**self.edit.describe(), "why": self.why}


@dataclass(frozen=True)
class EditResult:
    """The validated document after the edits, the RFC 6902 operations that were applied (against
    the document in its schema's normal form), and which edits applied and which were refused."""

    document: Document
    patch: Patch = field(default_factory=list)
    applied: tuple[MemoryEdit, ...] = ()
    refused: tuple[RefusedEdit, ...] = ()


def edits_between(before: Any, after: Any, reason: str, path: str = "") -> list[MemoryEdit]:
    """The edits that turn `before` into `after`, each with `reason`: an object compared member
    by member, a list that only grew at its end as one add per new item (at its index), any other
    difference replaced whole. Applied in order as RFC 6902 operations, they reproduce `after`."""
    if json_equal(before, after):
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[MemoryEdit] = []
        for key in before:
            if key not in after:
                found.append(MemoryEdit(op="remove", path=f"{path}/{escape_token(key)}", reason=reason))
        for key, value in after.items():
            child = f"{path}/{escape_token(key)}"
            if key in before:
                found.extend(edits_between(before[key], value, reason, child))
            else:
                found.append(MemoryEdit(op="add", path=child, value=copy_json(value), reason=reason))
        return found
    if isinstance(before, list) and isinstance(after, list) and json_equal(before, after[: len(before)]):
        return [
            MemoryEdit(op="add", path=f"{path}/{i}", value=copy_json(after[i]), reason=reason)
            for i in range(len(before), len(after))
        ]
    return [MemoryEdit(op="replace", path=path, value=copy_json(after), reason=reason)]


# -- parsing the model's answer --------------------------------------------------------------------


def edit_from_json(op: Any, path: Any, value_json: Any, reason: Any = "") -> MemoryEdit:
    """An edit from the model's strict output (value as JSON text, "" for remove).

    Raises ValueError naming what is wrong (never quoting the value).
    """
    if op not in EDIT_OPS:
        raise ValueError(f"op must be one of {', '.join(EDIT_OPS)}")
    if not isinstance(path, str):
        raise ValueError("path must be a string (a JSON Pointer)")
    if op == "remove":
        return MemoryEdit(op="remove", path=path, reason=reason)
    if not isinstance(value_json, str) or not value_json.strip():
        raise ValueError(f"{op} needs value_json: the new value as JSON text")
    try:
        value = json.loads(value_json)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"value_json is not JSON ({err.msg} at {err.pos}); a string is written with its quotes"
        ) from None
    return MemoryEdit(op=op, path=path, value=value, reason=reason)


def parse_edits(items: Iterable[Any], shape: type[BaseModel] | None = None) -> tuple[MemoryEdit, ...]:
    """Edits from the model's `{"op", "path", "value_json", "reason"}` items, each first held to
    `shape` when given (the answer's schema for one item). InvalidEdits names every item that does
    not parse, and carries the ones that did (`readable`, numbered as in the answer), so that they
    are checked too (`every_error`) and one retry names every problem of the answer."""
    edits: list[tuple[int, MemoryEdit]] = []
    errors: list[str] = []
    numbers: list[int] = []
    items = list(items)
    for n, item in enumerate(items, 1):
        fields = item if isinstance(item, Mapping) else {}
        try:
            if shape is not None:
                try:
                    fields = shape.model_validate(item).model_dump()
                except ValidationError as err:
                    raise ValueError(f"does not match the schema: {describe_validation_error(err)}") from None
            if not isinstance(item, Mapping):
                raise ValueError("an edit is an object with op, path, value_json and reason")
            op, path = fields.get("op"), fields.get("path")
            edits.append((n, edit_from_json(op, path, fields.get("value_json"), fields.get("reason"))))
        except ValueError as err:
            errors.append(f"edit {n} ({fields.get('op')} {_shown(fields.get('path'))}): {err}")
            numbers.append(n)
    if errors:
        raise InvalidEdits(errors, total=len(items), numbers=numbers, readable=tuple(edits))
    return tuple(edit for _, edit in edits)


def every_error(
    err: InvalidDocument, document: Document, schema: str, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
) -> InvalidDocument:
    """The error an answer raised, with the errors of its edits that did parse (checked against
    `document`, in order, as if the others were not there) added in the answer's order; `err`
    itself when there is nothing more to check."""
    if not isinstance(err, InvalidEdits) or not err.readable or err.numbers is None:
        return err
    numbered = list(zip(err.numbers, err.errors, strict=True))
    try:
        _run(document, [edit for _, edit in err.readable], schema, None, max_bytes, [n for n, _ in err.readable])
    except InvalidEdits as checked:
        numbered += list(zip(checked.numbers or [], checked.errors, strict=False))
    numbered.sort(key=lambda pair: pair[0])
    return InvalidEdits([text for _, text in numbered], total=err.total, numbers=[n for n, _ in numbered])


# -- the schema at a path --------------------------------------------------------------------------


class _BadEdit(ValueError):
    """One edit's problem, collected with the others."""


@dataclass(frozen=True)
class _Target:
    """What sits at a path according to the schema."""

    type: Any  # the type a value there must have (field constraints included)
    kind: Literal["field", "member", "item"]  # a model's field, a dict's member, a list's item
    required: bool = False  # a model field without a default
    default: Any = None  # a model field's default (what `remove` resets it to)


def _unwrap(t: Any) -> Any:
    """The type to descend into: without Annotated and without an Optional's None."""
    while True:
        origin = get_origin(t)
        if origin is Annotated:
            t = get_args(t)[0]
        elif origin in (Union, types.UnionType):
            options = [a for a in get_args(t) if a is not type(None)]
            if len(options) != 1:
                return t
            t = options[0]
        else:
            return t


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _target(model: type[BaseModel], tokens: list[str]) -> _Target:
    current: Any = model
    target: _Target | None = None
    for depth, token in enumerate(tokens):
        node = _unwrap(current)
        where = "/" + "/".join(tokens[:depth]) if depth else "the document"
        if _is_model(node):
            info = node.model_fields.get(token)
            if info is None:
                fields = ", ".join(node.model_fields)
                raise _BadEdit(f"{where} has no field {token!r} (fields: {fields})")
            annotation: Any = info.annotation
            current = Annotated[(annotation, *info.metadata)] if info.metadata else annotation
            default = None if info.is_required() else info.get_default(call_default_factory=True)
            target = _Target(type=current, kind="field", required=info.is_required(), default=default)
        elif get_origin(node) is dict:
            current = get_args(node)[1]
            target = _Target(type=current, kind="member")
        elif get_origin(node) is list:
            current = get_args(node)[0]
            target = _Target(type=current, kind="item")
        else:
            raise _BadEdit(f"{where} is a single value: there is nothing inside it to edit")
    assert target is not None  # tokens is never empty here
    return target


@lru_cache(maxsize=256)
def _adapter(t: Any) -> TypeAdapter[Any]:
    return TypeAdapter(t)


def _checked_value(t: Any, value: Any) -> Any:
    """`value` validated against `t`, in its JSON form (defaults filled, as the stored document has it)."""
    try:
        adapter = _adapter(t)
    except TypeError:  # an unhashable annotation: not cached
        adapter = TypeAdapter(t)
    try:
        return adapter.dump_python(adapter.validate_python(value), mode="json")
    except ValidationError as err:
        raise _BadEdit(f"the value has the wrong shape: {describe_validation_error(err)}") from None


def _shown(path: Any) -> str:
    text = str(path)
    return text if len(text) <= _PATH_SHOWN else text[:_PATH_SHOWN] + "..."


def _exists(document: Any, tokens: list[str]) -> bool:
    node = document
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


# -- one edit as RFC 6902 operations ---------------------------------------------------------------


def _operations(edit: MemoryEdit, document: Document, model: type[BaseModel]) -> list[Operation]:
    """The RFC 6902 operations one edit stands for, its path and value checked against the schema."""
    if edit.op not in EDIT_OPS:
        raise _BadEdit(f"op must be one of {', '.join(EDIT_OPS)}")
    try:
        tokens = parse_pointer(edit.path)
    except PatchError as err:
        raise _BadEdit(str(err)) from None
    if not tokens:
        raise _BadEdit("an edit changes a part of the document, not the whole of it")
    if len(tokens) == 1 and tokens[0] in SERVICE_FIELDS and tokens[0] in model.model_fields:
        raise _BadEdit(f"{tokens[0]!r} is maintained by the service")
    target = _target(model, tokens)
    if edit.op == "remove":
        if target.kind != "field":
            return [{"op": "remove", "path": edit.path}]
        if target.required:
            raise _BadEdit(f"field {tokens[-1]!r} is required: replace it instead")
        # Removing a field that has a default resets it (the schema would restore it anyway).
        op = "replace" if _exists(document, tokens) else "add"
        return [{"op": op, "path": edit.path, "value": _checked_value(target.type, copy_json(target.default))}]
    if target.kind == "member" and tokens[-1] == "-":
        parent = "/" + "/".join(tokens[:-1])
        raise _BadEdit(f"{parent} is keyed by id, not a list: write {parent}/<id>")
    value = edit.value
    if target.kind == "member" and isinstance(value, dict) and "id" in value:
        # The model reads parts as a list of objects with an id; the document keys them by id.
        member = _unwrap(target.type)
        if _is_model(member) and "id" not in member.model_fields:
            if str(value["id"]) != tokens[-1]:
                raise _BadEdit("the value's id is not the one its path names")
            value = {k: v for k, v in value.items() if k != "id"}
    return [{"op": edit.op, "path": edit.path, "value": _checked_value(target.type, value)}]


def _part_ids(document: Any) -> set[str]:
    parts = document.get("parts") if isinstance(document, dict) else None
    return set(parts) if isinstance(parts, dict) else set()


def _notes(document: Any) -> str:
    notes = document.get("safety_notes") if isinstance(document, dict) else None
    return notes.strip() if isinstance(notes, str) else ""


def _dangling(before: Document, after: Document) -> list[Operation]:
    """Operations that take removed parts' ids out of every trigger's related_parts."""
    removed = _part_ids(before) - _part_ids(after)
    triggers = after.get("triggers_and_goals")
    if not removed or not isinstance(triggers, list):
        return []
    ops: list[Operation] = []
    for i, trigger in enumerate(triggers):
        related = trigger.get("related_parts") if isinstance(trigger, dict) else None
        if isinstance(related, list) and any(p in removed for p in related):
            kept = [p for p in related if p not in removed]
            ops.append({"op": "replace", "path": f"/triggers_and_goals/{i}/related_parts", "value": kept})
    return ops


# -- the guardrail, per edit -----------------------------------------------------------------------


def refusal(before: Document, after: Document, activities: Sequence[Activity]) -> str | None:
    """Why the change from `before` to `after` (one edit) is refused, or None when it may apply."""
    denied = sorted(p for p in _part_ids(before) - _part_ids(after) if not forget_allows(activities, p))
    if denied:
        names = ", ".join(repr(p) for p in denied[:5]) + (f" and {len(denied) - 5} more" if len(denied) > 5 else "")
        return f"removes part {names} and no forget request in the activity names it"
    if _notes(before) and not _notes(after) and not forget_allows(activities):
        return "clears the safety notes and no memory_reset in the activity asks for it"
    return None


# -- applying a list of edits ----------------------------------------------------------------------

Guard = Callable[[Document, Document], str | None]


def _normal_form(document: Document, schema: str) -> Document:
    """The document with every field its schema gives it, so `replace /summary` works on version 0.
    A document that does not validate is edited as it is (the final validation decides)."""
    try:
        return validate_document(document, schema, max_bytes=sys.maxsize)
    except InvalidDocument:
        return copy_json(document) if isinstance(document, dict) else {}


def _run(
    document: Document,
    edits: Sequence[MemoryEdit],
    schema: str,
    guard: Guard | None,
    max_bytes: int,
    numbers: Sequence[int] | None = None,
) -> tuple[Document, Patch, list[MemoryEdit], list[RefusedEdit]]:
    """`numbers`: each edit's place in the model's answer, for the errors (default 1, 2, ...)."""
    if len(edits) > MAX_OPERATIONS:  # at the door, as any patch's operations
        raise InvalidEdits([f"{len(edits):,} edits are over the limit of {MAX_OPERATIONS:,} in one answer"])
    model = get_schema(schema)
    doc = _normal_form(document, schema)
    # One budget over the whole list: the working document stays under twice the limit as the
    # edits apply one by one (a cascade's removals are not counted against the operations).
    budget = PatchBudget(2 * max_bytes, max_operations=None)
    patch: Patch = []
    applied: list[MemoryEdit] = []
    refused: list[RefusedEdit] = []
    errors: list[str] = []
    failed: list[int] = []
    for n, edit in zip(numbers or range(1, len(edits) + 1), edits, strict=True):
        try:
            ops = _operations(edit, doc, model)
            before = budget.size, budget.nesting
            after = apply_patch(doc, ops, share=True, budget=budget)
        except (_BadEdit, PatchError, DocumentGrowsTooLarge) as err:
            errors.append(f"edit {n} ({edit.op} {_shown(edit.path)}): {err}")
            failed.append(n)
            continue
        why = guard(doc, after) if guard is not None else None
        if why is not None:
            budget.size, budget.nesting = before  # a refused edit leaves the document as it was
            refused.append(RefusedEdit(edit=edit, why=why))
            continue
        cascade = _dangling(doc, after)
        if cascade:
            after = apply_patch(after, cascade, share=True)
            ops = ops + cascade
        doc = after
        patch.extend(ops)
        applied.append(edit)
    if errors:
        raise InvalidEdits(errors, total=len(edits), numbers=failed)
    return doc, patch, applied, refused


def edits_to_patch(
    document: Document,
    edits: Sequence[MemoryEdit],
    *,
    schema: str = "user_state",
    max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> Patch:
    """The RFC 6902 patch the edits stand for, against `document` in its schema's normal form (no
    guardrail, no validation of the result). InvalidEdits names every edit that does not apply, or
    that would take the document over twice `max_bytes`."""
    return copy_json(_run(document, edits, schema, None, max_bytes)[1])


def apply_edits(
    document: Document,
    edits: Sequence[MemoryEdit],
    activities: Sequence[Activity] = (),
    *,
    schema: str = "user_state",
    max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    author: str | None = None,
) -> EditResult:
    """Apply the edits in order, refusing one by one those the activity does not allow, and
    validate the result. `document` is not modified.

    `author` (the model) is written to `last_updated_by` when the schema has it and an edit
    applied. Raises InvalidEdits naming every edit whose path does not exist or whose value has
    the wrong shape, or when the document after the edits does not validate.
    """
    doc, patch, applied, refused = _run(
        document, edits, schema, lambda before, after: refusal(before, after, activities), max_bytes
    )
    stamps = author is not None and applied and "last_updated_by" in get_schema(schema).model_fields
    if stamps and doc.get("last_updated_by") != author:
        op = {"op": "replace" if "last_updated_by" in doc else "add", "path": "/last_updated_by", "value": author}
        doc = apply_patch(doc, [op], share=True)
        patch.append(op)
    try:
        validated = validate_document(doc, schema, max_bytes=max_bytes)
    except InvalidDocument as err:
        raise InvalidEdits([f"the document after the edits is invalid: {err}"]) from err
    return EditResult(document=validated, patch=copy_json(patch), applied=tuple(applied), refused=tuple(refused))

"""Memory document schemas and validation, a layer above the schema-agnostic store.

The default schema is "user_state" (summary, parts, triggers_and_goals, safety_notes).
Other schemas can be registered by name with `register_schema`; "tutor" (personal_info,
areas_to_improve, knowledge_strengths) is registered at the end of this module.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticSerializationError, to_json

from user_memory.domain.model import DEFAULT_MAX_DOCUMENT_BYTES
from user_memory.errors import DocumentTooLarge, InvalidDocument, describe_validation_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class Goal(_Strict):
    goal: str = Field(min_length=1)


class Part(_Strict):
    name: str = Field(min_length=1)
    status: str
    recency_score: float = Field(default=0.0, ge=0.0, le=1.0)
    influence_score: float = Field(default=0.0, ge=0.0, le=1.0)
    goals: list[Goal] = Field(default_factory=list)


class TriggerAndGoal(_Strict):
    trigger: str = Field(min_length=1)
    desired_outcome: str
    related_parts: list[str] = Field(default_factory=list)


class UserState(_Strict):
    """The default memory document: what an agent should know about one user."""

    version: int = Field(default=1, ge=1, description="schema version of the document")
    last_updated_by: str = "system"
    summary: str = ""
    parts: dict[str, Part] = Field(default_factory=dict)
    triggers_and_goals: list[TriggerAndGoal] = Field(default_factory=list)
    safety_notes: str = ""

    @model_validator(mode="after")
    def _related_parts_exist(self) -> UserState:
        for i, item in enumerate(self.triggers_and_goals):
            for part_id in item.related_parts:
                if part_id not in self.parts:
                    raise ValueError(f"triggers_and_goals[{i}].related_parts names unknown part {part_id!r}")
        return self


_SCHEMAS: dict[str, type[BaseModel]] = {"user_state": UserState}


# The field names each schema declares sensitive (at any depth): kept out of logs and the search
# index, and out of a rendered prompt unless the deployment opts in (PROMPT_INCLUDE_SENSITIVE).
_SENSITIVE: dict[str, frozenset[str]] = {}


def register_schema(name: str, model: type[BaseModel], *, sensitive: frozenset[str] = frozenset()) -> None:
    """Make a pydantic model available as a memory document schema under `name`, with the names of
    its sensitive fields (personal data an agent's prompt does not need: an email, a phone number)."""
    _SCHEMAS[name] = model
    _SENSITIVE[name] = frozenset(sensitive)


# Schemas whose module registers them when first asked for (their models are not built at every
# cold start of a function that never uses them).
_LAZY_SCHEMAS = {"companion": "user_memory.domain.companion.schema"}


def get_schema(name: str) -> type[BaseModel]:
    """Return the schema registered under `name`."""
    if name not in _SCHEMAS and name in _LAZY_SCHEMAS:
        import importlib

        importlib.import_module(_LAZY_SCHEMAS[name])
    try:
        return _SCHEMAS[name]
    except KeyError:
        known = sorted({*_SCHEMAS, *_LAZY_SCHEMAS})
        raise InvalidDocument(f"unknown document schema {name!r}; known: {known}") from None


# json.dumps with options builds an encoder per call; documents are encoded several times a run.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode(document: Any) -> str:
    """The compact JSON text a document is stored and measured as."""
    return _ENCODER.encode(document)


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8; an ASCII text (most documents) is measured without encoding it."""
    return len(text) if text.isascii() else len(text.encode())


def document_size(document: Any) -> int:
    """Size in bytes of the document's compact JSON encoding."""
    return utf8_size(encode(document))


def check_size(document: Any, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> int:
    """Raise DocumentTooLarge when the document is over `max_bytes`; return its size."""
    size = document_size(document)
    if size > max_bytes:
        raise DocumentTooLarge(size, max_bytes)
    return size


# pydantic-core writes a document made only of the values JSON decodes to (dicts with string keys,
# lists, strings, ints, floats, booleans, None) with the same bytes as `encode`, floats aside: the
# same escapes, UTF-8 unescaped, big ints in full. A float it writes in at least 3 bytes ("0.0",
# "1e-7"), Python in at most 24 ("-2.2250738585072014e-308"). So `encode`'s size is at most 8
# times pydantic-core's, about 4 times faster to get: within the limit, the exact size is not needed.
_FLOAT_WIDTH_RATIO = 8


def check_json_size(document: Any, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> None:
    """check_size for a document decoded from JSON (only the values JSON decodes to): the same
    outcome, and the same error when over the limit, without encoding a document that is at most
    an eighth of the limit in pydantic-core's JSON. Anything pydantic-core does not write (a lone
    surrogate, nesting it refuses) is measured by check_size."""
    try:
        if len(to_json(document)) * _FLOAT_WIDTH_RATIO <= max_bytes:
            return
    except PydanticSerializationError:
        pass
    check_size(document, max_bytes)


def validate_document(
    document: Any,
    schema: str = "user_state",
    *,
    max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    json_values: bool = False,
) -> dict[str, Any]:
    """Validate a document against a schema and the size limit; return it in stored form.

    `json_values`: the caller knows the document holds only the values JSON decodes to (it was
    parsed from JSON, or built from such values), so its size is checked by check_json_size.
    Raises InvalidDocument naming each failing field, or DocumentTooLarge.
    """
    if not isinstance(document, dict):
        raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
    if json_values:
        check_json_size(document, max_bytes)
    else:
        check_size(document, max_bytes)
    model = get_schema(schema)
    try:
        parsed = model.model_validate(document)
    except ValidationError as err:
        raise invalid_document(err) from err
    return parsed.model_dump(mode="json")


MAX_CHECK_PROBLEMS = 50


def document_problems(
    document: Any, schema: str = "user_state", *, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
) -> list[tuple[str, str]]:
    """What `validate_document` would refuse, field by field, as (JSON Pointer, why): at most
    MAX_CHECK_PROBLEMS, never the values; an empty list when the document would be accepted."""
    if not isinstance(document, dict):
        return [("", f"a memory document must be a JSON object, got {type(document).__name__}")]
    try:
        check_size(document, max_bytes)
        get_schema(schema).model_validate(document)
    except ValidationError as err:
        found = []
        for e in err.errors(include_input=False, include_url=False)[:MAX_CHECK_PROBLEMS]:
            pointer = "".join("/" + str(x).replace("~", "~0").replace("/", "~1") for x in e["loc"])
            found.append((pointer, str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")))
        return found
    except DocumentTooLarge as err:
        return [("", str(err))]
    return []


def invalid_document(err: ValidationError) -> InvalidDocument:
    """The error a failed validation is: BudgetExceeded when a check ran out of its budget (a
    recurrence rule), else InvalidDocument; both name each failing field."""
    from user_memory.errors import BudgetExceeded

    kind = BudgetExceeded if any(e["type"] == "budget_exceeded" for e in err.errors()) else InvalidDocument
    return kind(describe_validation_error(err))


def empty_document(schema: str = "user_state") -> dict[str, Any]:
    """The starting document of a schema (what version 0, `{}`, becomes on first write)."""
    return get_schema(schema)().model_dump(mode="json")


# -- the "tutor" schema: what a tutoring agent should know about one learner -----------------


def _iso_date(value: str) -> str:
    """A calendar date written YYYY-MM-DD, kept as the string it was given."""
    try:
        parsed = date.fromisoformat(value)
    except ValueError:
        raise ValueError("must be a date written YYYY-MM-DD") from None
    if parsed.isoformat() != value:  # also refuses 20261121 and other ISO forms
        raise ValueError("must be a date written YYYY-MM-DD")
    return value


IsoDate = Annotated[str, AfterValidator(_iso_date)]


class PersonalInfo(_Strict):
    """Who the learner is; every field may stay empty."""

    name: str = ""
    preferred_name: str = ""
    language: str = ""
    timezone: str = ""
    age_group: str = ""
    learning_goals: list[str] = Field(default_factory=list)
    other: dict[str, str] = Field(default_factory=dict)


class AreaToImprove(_Strict):
    """A topic the learner struggles with, how badly (1 mild .. 5 severe), and when it was seen."""

    topic: str = Field(min_length=1)
    evidence: list[str] = Field(default_factory=list)
    first_noted: IsoDate | None = None
    last_noted: IsoDate | None = None
    severity: int = Field(ge=1, le=5)

    @model_validator(mode="after")
    def _noted_in_order(self) -> AreaToImprove:
        if self.first_noted and self.last_noted and self.last_noted < self.first_noted:
            raise ValueError("last_noted is before first_noted")
        return self


class KnowledgeStrength(_Strict):
    """A topic the learner knows, and how well."""

    topic: str = Field(min_length=1)
    evidence: list[str] = Field(default_factory=list)
    level: Literal["beginner", "intermediate", "advanced"]


class TutorMemory(_Strict):
    """The "tutor" memory document: the learner, what to work on, what they already know."""

    version: int = Field(default=1, ge=1, description="schema version of the document")
    last_updated_by: str = "system"
    personal_info: PersonalInfo = Field(default_factory=PersonalInfo)
    areas_to_improve: list[AreaToImprove] = Field(default_factory=list)
    knowledge_strengths: list[KnowledgeStrength] = Field(default_factory=list)


register_schema("tutor", TutorMemory)


# Top-level fields that describe the document rather than the user: not sections.
_META_FIELDS = frozenset({"version", "last_updated_by"})


def sensitive_fields(schema: str = "user_state") -> frozenset[str]:
    """The field names `schema` declares sensitive (none for user_state and tutor)."""
    get_schema(schema)  # a lazy schema registers itself, and its fields, when first asked for
    return _SENSITIVE.get(schema, frozenset())


def section_names(schema: str = "user_state") -> list[str]:
    """The sections of a schema (its top-level fields but `version` and `last_updated_by`), in schema order."""
    return [name for name in get_schema(schema).model_fields if name not in _META_FIELDS]

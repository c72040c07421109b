"""The "companion" schema: the typed memory elements an AI companion keeps about a person.

Seven elements, one document (every change is a version, so history, diff and revert come
free): basic personal info, advanced info, goals and milestones, to-dos, important events
(calendar-like), the current state, and a feedback summary. Goals, to-dos and events are maps
keyed by their id, so each has a stable JSON Pointer (`/todos/<id>`) and a change to one is a
one-operation patch. `date_of_birth`, `email` and `phone` are sensitive (declared with the schema):
never logged, never put in the search index (domain/companion/items.py), never in a rendered
prompt unless the deployment opts in (PROMPT_INCLUDE_SENSITIVE), covered by erase and export
with the document.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, ModelWrapValidatorHandler, model_validator
from pydantic_core import PydanticCustomError

from user_memory.domain.companion.items import ELEMENT_KINDS, MAX_ELEMENTS, SENSITIVE_FIELDS
from user_memory.domain.companion.recurrence import (
    DOCUMENT_STEPS,
    MAX_LINES,
    budget_scope,
    check_recurrence,
    event_start,
    parse_when,
)
from user_memory.domain.companion.times import RANGE_TEXT
from user_memory.domain.memory.document import IsoDate, _Strict, register_schema
from user_memory.errors import BudgetExceeded

# The element collections, the sensitive fields and the collections' size live with the item
# index (domain/companion/items.py), which every writer imports; this module's models load on first use of
# the schema (document.get_schema), not at every cold start.

_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


def _element_id(value: str) -> str:
    if not _ID.match(value):
        raise ValueError("must be 1-128 characters of letters, digits and _ . : @ -")
    return value


ElementId = Annotated[str, AfterValidator(_element_id)]


def _when(value: str) -> str:
    try:
        parse_when(value)
    except ValueError as err:
        raise ValueError(f"must be a date (YYYY-MM-DD) or a date-time with an offset ({err})") from None
    return value


When = Annotated[str, AfterValidator(_when)]


def _day(value: str) -> str:
    try:
        parse_when(value)
    except ValueError:
        raise ValueError(f"must be a date {RANGE_TEXT}") from None
    return value


Day = Annotated[IsoDate, AfterValidator(_day)]

# Every string and every collection of the schema has a bound: a list of a hundred entries of a
# hundred kilobytes each would otherwise fit any document limit set high enough, and every entry
# is text the index, the prompts and the digest carry.
MAX_LIST = 50
MAX_LINE_CHARS = 500
Line = Annotated[str, Field(max_length=MAX_LINE_CHARS)]
Short = Annotated[str, Field(max_length=100)]


def _timezone(value: str) -> str:
    if value:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("must be an IANA time zone name such as Europe/Lisbon") from None
    return value


def _email(value: str) -> str:
    if value and not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", value):
        raise ValueError("must be an email address")
    return value


def _phone(value: str) -> str:
    if value and not re.match(r"^\+?[0-9 ()./-]{5,32}$", value):
        raise ValueError("must be a phone number (digits, spaces, + ( ) . / -)")
    return value


Priority = Literal["low", "medium", "high"]
MAX_PROGRESS = 500
MAX_FEEDBACK_LINE_CHARS = 2000
FeedbackLine = Annotated[str, Field(max_length=MAX_FEEDBACK_LINE_CHARS)]


class BasicInfo(_Strict):
    name: str = Field(default="", max_length=200)
    date_of_birth: IsoDate | None = None
    gender: str = Field(default="", max_length=100)
    email: Annotated[str, AfterValidator(_email)] = Field(default="", max_length=320)
    phone: Annotated[str, AfterValidator(_phone)] = Field(default="", max_length=32)
    timezone: Annotated[str, AfterValidator(_timezone)] = Field(default="", max_length=64)
    locale: str = Field(default="", max_length=35)


class AdvancedInfo(_Strict):
    occupation: str = Field(default="", max_length=200)
    preferences: dict[Short, list[Annotated[str, Field(max_length=200)]]] = Field(
        default_factory=dict, max_length=MAX_LIST, description="by area: food, music, ..."
    )
    languages: list[Short] = Field(default_factory=list, max_length=MAX_LIST)
    travel_styles: list[Short] = Field(default_factory=list, max_length=MAX_LIST)
    other_attributes: dict[Short, Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=dict, max_length=MAX_LIST
    )
    schema_version: int = Field(default=1, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _preference_lists(self) -> AdvancedInfo:
        if any(len(values) > MAX_LIST for values in self.preferences.values()):
            raise ValueError(f"preferences: at most {MAX_LIST} values per area")
        return self


class ProgressEntry(_Strict):
    at: When
    note: str = Field(default="", max_length=2000)
    percent: int | None = Field(default=None, ge=0, le=100)


class Goal(_Strict):
    id: ElementId
    title: str = Field(min_length=1, max_length=500)
    description: str = Field(default="", max_length=4000)
    category: str = Field(default="", max_length=100)
    target_date: Day | None = None
    status: Literal["active", "paused", "completed", "abandoned"] = "active"
    priority: Priority = "medium"
    parent_id: ElementId | None = None
    progress: list[ProgressEntry] = Field(default_factory=list, max_length=MAX_PROGRESS)
    completed_at: When | None = None


class Todo(_Strict):
    id: ElementId
    text: str = Field(min_length=1, max_length=2000)
    due_date: When | None = None
    category: str = Field(default="", max_length=100)
    size: Literal["small", "medium", "large"] | None = None
    status: Literal["open", "in_progress", "done", "cancelled"] = "open"
    priority: Priority = "medium"
    goal_id: ElementId | None = None
    tags: list[Short] = Field(default_factory=list, max_length=20)
    notes: str = Field(default="", max_length=4000)
    completed_at: When | None = None


class Attendee(_Strict):
    name: str = Field(default="", max_length=200)
    email: str = Field(default="", max_length=320)
    response_status: str = Field(default="", max_length=32)


class Event(_Strict):
    id: ElementId
    summary: str = Field(min_length=1, max_length=1000)
    description: str = Field(default="", max_length=8000)
    start: When
    end: When | None = None
    timezone: Annotated[str, AfterValidator(_timezone)] = Field(
        default="", max_length=64, description="IANA zone its recurrence follows (wall-clock times across DST)"
    )
    location: str = Field(default="", max_length=1000)
    attendees: list[Attendee] = Field(default_factory=list, max_length=200)
    recurrence: list[str] = Field(
        default_factory=list, max_length=MAX_LINES, description="RFC 5545 RRULE/EXRULE/RDATE/EXDATE lines"
    )
    status: Literal["confirmed", "tentative", "cancelled", "completed"] = "confirmed"
    last_modified: When | None = None
    source: str = Field(default="", max_length=200, description="where it came from, e.g. google:<calendar id>")

    @model_validator(mode="after")
    def _ends_after_start(self) -> Event:
        if self.end is not None and parse_when(self.end) < parse_when(self.start):
            raise ValueError("end is before start")
        if self.recurrence:
            try:
                check_recurrence(self.recurrence, event_start({"start": self.start, "timezone": self.timezone}))
            except BudgetExceeded as err:  # its own error type, so it is answered as budget-exceeded
                raise PydanticCustomError("budget_exceeded", "recurrence: {reason}", {"reason": str(err)}) from None
        return self


class CurrentState(_Strict):
    education: str = Field(default="", max_length=1000)
    skills: list[Line] = Field(default_factory=list, max_length=MAX_LIST)
    mood: str = Field(default="", max_length=200)
    focus_areas: list[Line] = Field(default_factory=list, max_length=MAX_LIST)
    pain_points: list[Line] = Field(default_factory=list, max_length=MAX_LIST)
    recent_wins: list[Line] = Field(default_factory=list, max_length=MAX_LIST)
    recent_losses: list[Line] = Field(default_factory=list, max_length=MAX_LIST)
    last_updated: When | None = None


class FeedbackSummary(_Strict):
    positives: list[FeedbackLine] = Field(default_factory=list, max_length=MAX_LIST)
    negatives: list[FeedbackLine] = Field(default_factory=list, max_length=MAX_LIST)
    suggestions: list[FeedbackLine] = Field(default_factory=list, max_length=MAX_LIST)
    ratings_count: int = Field(default=0, ge=0, le=2**31 - 1)
    average_rating: float | None = Field(default=None, ge=1, le=5)
    last_summarized_at: When | None = None


class CompanionMemory(_Strict):
    """The "companion" memory document: the seven elements."""

    version: int = Field(default=1, ge=1, le=1_000_000, description="schema version of the document")
    last_updated_by: str = Field(default="system", max_length=200)
    basic_info: BasicInfo = Field(default_factory=BasicInfo)
    advanced_info: AdvancedInfo = Field(default_factory=AdvancedInfo)
    goals: dict[ElementId, Goal] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    todos: dict[ElementId, Todo] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    events: dict[ElementId, Event] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    current_state: CurrentState = Field(default_factory=CurrentState)
    feedback: FeedbackSummary = Field(default_factory=FeedbackSummary)

    @model_validator(mode="wrap")
    @classmethod
    def _one_budget(cls, data: Any, handler: ModelWrapValidatorHandler[CompanionMemory]) -> CompanionMemory:
        # Every event's recurrence check spends from one budget too: many rules each within its
        # own bound could still add up to a stall of every write of the document.
        with budget_scope(DOCUMENT_STEPS, "checking the recurrences of every event of the document"):
            return handler(data)

    @model_validator(mode="after")
    def _ids_and_links(self) -> CompanionMemory:
        for name in ELEMENT_KINDS:
            for key, element in getattr(self, name).items():
                if element.id != key:
                    raise ValueError(f"{name}: the element under key {key!r} has id {element.id!r}")
        for key, goal in self.goals.items():
            seen = {key}
            parent = goal.parent_id
            while parent is not None:
                if parent not in self.goals:
                    raise ValueError(f"goals.{key}.parent_id names unknown goal {parent!r}")
                if parent in seen:
                    raise ValueError(f"goals.{key}: parent_id makes a cycle")
                seen.add(parent)
                parent = self.goals[parent].parent_id
        for key, todo in self.todos.items():
            if todo.goal_id is not None and todo.goal_id not in self.goals:
                raise ValueError(f"todos.{key}.goal_id names unknown goal {todo.goal_id!r}")
        return self


register_schema("companion", CompanionMemory, sensitive=SENSITIVE_FIELDS)

ELEMENT_MODELS: dict[str, Any] = {"goals": Goal, "todos": Todo, "events": Event}

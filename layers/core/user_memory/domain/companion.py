"""The "companion" schema: the typed memory elements an AI companion keeps about a person.

Seven elements, one document (every change is a version, so history, diff and revert come
free): basic personal info, advanced info, goals and milestones, to-dos, important events
(calendar-like), the current state, and a feedback summary. Goals, to-dos and events are maps
keyed by their id, so each has a stable JSON Pointer (`/todos/<id>`) and a change to one is a
one-operation patch. `date_of_birth`, `email` and `phone` are sensitive: never logged, never put
in the search index (domain/items.py), covered by erase and export with the document.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, model_validator

from user_memory.domain.document import IsoDate, _Strict, register_schema
from user_memory.domain.items import ELEMENT_KINDS, MAX_ELEMENTS, SENSITIVE_FIELDS
from user_memory.domain.recurrence import event_start, parse_when

# The element collections, the sensitive fields and the collections' size live with the item
# index (domain/items.py), which every writer imports; this module's models load on first use of
# the schema (document.get_schema), not at every cold start.
__all__ = ["ELEMENT_KINDS", "MAX_ELEMENTS", "SENSITIVE_FIELDS", "event_start", "parse_when"]

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
    preferences: dict[str, list[str]] = Field(default_factory=dict, description="by area: food, music, ...")
    languages: list[str] = Field(default_factory=list)
    travel_styles: list[str] = Field(default_factory=list)
    other_attributes: dict[str, str] = Field(default_factory=dict)
    schema_version: int = Field(default=1, ge=1)


class ProgressEntry(_Strict):
    at: When
    note: str = Field(default="", max_length=2000)
    percent: int | None = Field(default=None, ge=0, le=100)


class Goal(_Strict):
    id: ElementId
    title: str = Field(min_length=1, max_length=500)
    description: str = Field(default="", max_length=4000)
    category: str = Field(default="", max_length=100)
    target_date: IsoDate | None = None
    status: Literal["active", "paused", "completed", "abandoned"] = "active"
    priority: Priority = "medium"
    parent_id: ElementId | None = None
    progress: list[ProgressEntry] = Field(default_factory=list, max_length=500)
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
    tags: list[str] = Field(default_factory=list, max_length=20)
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
    recurrence: list[str] = Field(default_factory=list, max_length=10, description="RFC 5545 RRULE/EXDATE lines")
    status: Literal["confirmed", "tentative", "cancelled", "completed"] = "confirmed"
    last_modified: When | None = None
    source: str = Field(default="", max_length=200, description="where it came from, e.g. google:<calendar id>")

    @model_validator(mode="after")
    def _ends_after_start(self) -> Event:
        if self.end is not None and parse_when(self.end) < parse_when(self.start):
            raise ValueError("end is before start")
        for line in self.recurrence:
            if not line.startswith(("RRULE:", "EXRULE:", "RDATE", "EXDATE")):
                raise ValueError("recurrence lines must start with RRULE:, EXRULE:, RDATE or EXDATE")
        if self.recurrence:
            from user_memory.domain.recurrence import check_recurrence

            check_recurrence(self.recurrence, event_start({"start": self.start, "timezone": self.timezone}))
        return self


class CurrentState(_Strict):
    education: str = Field(default="", max_length=1000)
    skills: list[str] = Field(default_factory=list)
    mood: str = Field(default="", max_length=200)
    focus_areas: list[str] = Field(default_factory=list)
    pain_points: list[str] = Field(default_factory=list)
    recent_wins: list[str] = Field(default_factory=list)
    recent_losses: list[str] = Field(default_factory=list)
    last_updated: When | None = None


class FeedbackSummary(_Strict):
    positives: list[str] = Field(default_factory=list)
    negatives: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    ratings_count: int = Field(default=0, ge=0)
    average_rating: float | None = Field(default=None, ge=1, le=5)
    last_summarized_at: When | None = None


class CompanionMemory(_Strict):
    """The "companion" memory document: the seven elements."""

    version: int = Field(default=1, ge=1, description="schema version of the document")
    last_updated_by: str = "system"
    basic_info: BasicInfo = Field(default_factory=BasicInfo)
    advanced_info: AdvancedInfo = Field(default_factory=AdvancedInfo)
    goals: dict[ElementId, Goal] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    todos: dict[ElementId, Todo] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    events: dict[ElementId, Event] = Field(default_factory=dict, max_length=MAX_ELEMENTS)
    current_state: CurrentState = Field(default_factory=CurrentState)
    feedback: FeedbackSummary = Field(default_factory=FeedbackSummary)

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


register_schema("companion", CompanionMemory)

ELEMENT_MODELS: dict[str, Any] = {"goals": Goal, "todos": Todo, "events": Event}

"""Expiry a deployment asks for (no I/O): events a given time after they end, to-dos a given
time after they were done (or cancelled).

The retention job removes what expired as a version of its own (source `retention`, the removed
elements named in its provenance), never silently; until it runs, the prompt leaves out what has
already expired (`without_expired` on the rendered copy). A recurring event ends with its last
occurrence; one that recurs for ever (or further than can be told) never expires.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from user_memory.domain.companion.recurrence import event_start, recurrence_end
from user_memory.domain.companion.times import parse_when
from user_memory.errors import UserMemoryError

SOURCE_RETENTION = "retention"


@dataclass(frozen=True)
class ExpiryPolicy:
    """How long after its end an element is kept; None: for ever."""

    events_after: timedelta | None = None
    todos_after: timedelta | None = None

    @classmethod
    def from_days(cls, events_days: int, todos_days: int) -> ExpiryPolicy:
        """The settings' days (0: never)."""
        return cls(
            events_after=timedelta(days=events_days) if events_days else None,
            todos_after=timedelta(days=todos_days) if todos_days else None,
        )

    @property
    def active(self) -> bool:
        return self.events_after is not None or self.todos_after is not None


class ExpiryCandidates(Protocol):
    """Users who may hold something that expired (a coarse filter over the search index; the
    document decides), in user order, a page after `after`."""

    def users(
        self, *, events_ended_before: datetime | None, todos: bool, after: uuid.UUID | None, limit: int
    ) -> list[uuid.UUID]: ...


def _event_end(event: dict[str, Any]) -> datetime | None:
    try:
        if event.get("recurrence"):
            last = recurrence_end(event["recurrence"], event_start(event))
            if last is None:
                return None
            start, end = parse_when(event["start"]), parse_when(event.get("end") or event["start"])
            return last + (end - start)
        return parse_when(event.get("end") or event["start"])
    except (KeyError, TypeError, ValueError, UserMemoryError):
        return None  # an element this cannot read is kept: expiry never guesses


def expired(document: dict[str, Any], policy: ExpiryPolicy, now: datetime) -> list[tuple[str, str]]:
    """(collection, id) of every element of the document the policy expires at `now`."""
    found: list[tuple[str, str]] = []
    events = document.get("events")
    if policy.events_after is not None and isinstance(events, dict):
        for element_id, event in events.items():
            end = _event_end(event) if isinstance(event, dict) else None
            if end is not None and end + policy.events_after <= now:
                found.append(("events", element_id))
    todos = document.get("todos")
    if policy.todos_after is not None and isinstance(todos, dict):
        for element_id, todo in todos.items():
            if not isinstance(todo, dict) or todo.get("status") not in ("done", "cancelled"):
                continue
            try:
                done_at = parse_when(todo["completed_at"])
            except (KeyError, TypeError, ValueError):
                continue  # done but never stamped: kept (nothing says when it ended)
            if done_at + policy.todos_after <= now:
                found.append(("todos", element_id))
    return found


def without_expired(document: dict[str, Any], policy: ExpiryPolicy, now: datetime) -> dict[str, Any]:
    """The document without what expired (a new top level and collections; elements shared)."""
    gone = set(expired(document, policy, now))
    if not gone:
        return document
    result = dict(document)
    for collection in {c for c, _ in gone}:
        result[collection] = {k: v for k, v in document[collection].items() if (collection, k) not in gone}
    return result

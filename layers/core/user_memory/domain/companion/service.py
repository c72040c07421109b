"""The companion layer of one user's memory: goals, to-dos, events (elements of the document,
written as versions through MemoryService), ratings and the daily digest (episodic rows), read
from the item index. Only a deployment whose DOCUMENT_SCHEMA is companion has it."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

from user_memory.domain.companion import elements
from user_memory.domain.companion.ports import CompanionData
from user_memory.domain.companion.times import check_date, check_time
from user_memory.domain.model import AppendResult
from user_memory.domain.service import Edit, MemoryService
from user_memory.errors import InvalidRequest, NotFound, WrongSchema


class CompanionService:
    """One user's goals, to-dos, events, ratings and digests, on one unit of work."""

    def __init__(self, memory: MemoryService, data: CompanionData | None) -> None:
        self.memory = memory
        self._data = data

    @property
    def user_id(self) -> uuid.UUID:
        return self.memory.user_id

    def _checked(self) -> CompanionData:
        if self.memory.schema != "companion":
            raise WrongSchema(
                f"this deployment's memory schema is {self.memory.schema!r}: goals, to-dos, events, ratings "
                "and digests need DOCUMENT_SCHEMA=companion"
            )
        if self._data is None:
            raise WrongSchema("this deployment keeps no companion data")
        return self._data

    def element(self, collection: str, element_id: str) -> tuple[dict[str, Any], int]:
        """One goal, to-do or event of the head, and the head's version (NotFound if absent)."""
        self._checked()
        name = elements.check_collection(collection)
        head = self.memory.store.head(self.user_id)
        found = (head.document.get(name) or {}).get(element_id)
        if not isinstance(found, dict):
            raise NotFound(f"no {name[:-1]} with this id")  # the id stays out of logs
        return found, head.version

    def create_element(self, collection: str, fields: Any, edit: Edit) -> tuple[str, AppendResult]:
        """A new goal, to-do or event (ElementExists when its id is taken) as a new version."""
        self._checked()
        # With an Idempotency-Key and no id, the id comes from the key: a retry is the same
        # request (the same id), so it replays instead of being refused as another request.
        keyed = None
        if edit.idempotency_key is not None:
            keyed = hashlib.sha256(f"{self.user_id}:{collection}:{edit.idempotency_key}".encode()).hexdigest()[:12]
        element_id, change = elements.create(elements.check_collection(collection), fields, keyed)
        return element_id, self.memory.change(change, edit)

    def update_element(self, collection: str, element_id: str, fields: Any, edit: Edit) -> AppendResult:
        """The element's fields merged with `fields` (null removes one) as a new version."""
        self._checked()
        return self.memory.change(elements.update(elements.check_collection(collection), element_id, fields), edit)

    def complete_element(self, collection: str, element_id: str, edit: Edit) -> AppendResult:
        """The element marked done (a to-do), completed (a goal, an event) as a new version."""
        self._checked()
        return self.memory.change(elements.complete(elements.check_collection(collection), element_id), edit)

    def delete_element(self, collection: str, element_id: str, edit: Edit) -> AppendResult:
        """The element removed as a new version (history keeps it)."""
        self._checked()
        return self.memory.change(elements.delete(elements.check_collection(collection), element_id), edit)

    def import_google_events(self, events: Any, edit: Edit) -> tuple[elements.ImportReport, AppendResult]:
        """A page of Google Calendar events imported as one version (see elements.import_google_events)."""
        self._checked()
        report = elements.ImportReport()
        return report, self.memory.change(elements.import_google_events(events, report), edit)

    def todos_due(self, on: date | None = None) -> tuple[date, list[Any], list[Any]]:
        """Open to-dos overdue and due on `on` (the user's today in their time zone by default),
        from the item index: (day, overdue, due)."""
        companion = self._checked()
        head = self.memory.store.head(self.user_id)
        today, zone = elements.user_today(head.document, datetime.now(UTC))
        day = on or today
        try:
            check_date(day)
        except ValueError as err:
            raise InvalidRequest(f"on {err}") from err
        _, end = elements.day_bounds(day, zone)
        overdue, due = elements.split_due(companion.todos_due(self.user_id, end), day, zone)
        return day, overdue, due

    def events_between(
        self, start: datetime, end: datetime, *, unexpanded: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Occurrences of the user's events overlapping [start, end), from the item index; the ids
        of events that could not be expanded within the budget go to `unexpanded`."""
        companion = self._checked()
        naive = [name for name, when in (("from", start), ("to", end)) if when.tzinfo is None]
        if naive:
            raise InvalidRequest(f"{' and '.join(naive)} need{'s' if len(naive) == 1 else ''} a time zone "
                                 "(for example 2026-11-23T00:00:00Z)")  # fmt: skip
        if end <= start:
            raise InvalidRequest("to must be after from")
        for name, when in (("from", start), ("to", end)):
            try:
                check_time(when)
            except ValueError as err:
                raise InvalidRequest(f"{name} {err}") from err
        if end - start > timedelta(days=366):
            raise InvalidRequest("a range is at most 366 days")
        return elements.events_between(companion, self.user_id, start, end, unexpanded)

    def active_goals(self, within_days: int | None = None) -> list[Any]:
        """Active goals (those whose target date is within `within_days` when given), from the index."""
        companion = self._checked()
        before = None if within_days is None else datetime.now(UTC) + timedelta(days=within_days)
        return companion.active_goals(self.user_id, target_before=before)

    def record_rating(self, rating: elements.Rating) -> str:
        """A feedback rating (episodic; summarized into the feedback element nightly)."""
        return self._checked().record_rating(self.user_id, rating)

    def digest(self, day: date | None = None) -> dict[str, Any]:
        """The daily digest of `day`, or the latest (NotFound when none was made yet)."""
        found = self._checked().digest(self.user_id, day)
        if found is None:
            raise NotFound("no digest yet" if day is None else f"no digest for {day.isoformat()}")
        return found

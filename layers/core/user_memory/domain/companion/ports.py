"""What the companion layer talks to beside the document: the element queries over the item
index, ratings and digests (adapters/companion.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from user_memory.domain.companion.items import ElementRow


# Here, not in elements.py (which re-exports it): the port's own value, so the port imports nothing
# that imports it back.
@dataclass(frozen=True, kw_only=True)
class Rating:
    """One raw feedback rating (episodic: its own table, summarized nightly)."""

    id: int | None = None
    interaction_id: str
    rating: int
    tags: tuple[str, ...] = ()
    comment: str = ""
    rated_at: datetime


class CompanionData(Protocol):
    """The companion layer's rows beside the document: element queries from the item index,
    ratings and digests."""

    def todos_due(self, user_id: uuid.UUID, before: datetime, *, limit: int = 2000) -> list[ElementRow]:
        """Open and in-progress to-dos due before `before`, soonest first."""
        ...

    def event_rows(self, user_id: uuid.UUID, start: datetime, end: datetime) -> list[ElementRow]:
        """The events that may have an occurrence in [start, end) (recurring ones unexpanded), by start."""
        ...

    def active_goals(
        self, user_id: uuid.UUID, *, target_before: datetime | None = None, limit: int = 2000
    ) -> list[ElementRow]:
        """Active goals, nearest target first (those whose target is before `target_before` when given)."""
        ...

    def record_rating(self, user_id: uuid.UUID, rating: Rating) -> str: ...

    def ratings(self, user_id: uuid.UUID) -> list[dict[str, Any]]: ...

    def digest(self, user_id: uuid.UUID, day: date | None = None) -> dict[str, Any] | None: ...

    def digests(self, user_id: uuid.UUID) -> list[dict[str, Any]]: ...


class NightlyCompanionData(CompanionData, Protocol):
    """What the companion's nightly part reads and writes beside the document: ratings to fold
    into the feedback element, and the day's digest (jobs/companion.py)."""

    def unsummarized_ratings(self, user_id: uuid.UUID, *, limit: int = 1000) -> list[Rating]: ...

    def mark_ratings(self, user_id: uuid.UUID, ids: Sequence[int], version: int) -> int: ...

    def feedback_versions_of(self, user_id: uuid.UUID, rating_ids: Sequence[int]) -> dict[int, int]: ...

    def rating_totals(self, user_id: uuid.UUID) -> tuple[int, float | None]: ...

    def save_digest(self, user_id: uuid.UUID, day: date, digest: dict[str, Any], version: int) -> None: ...

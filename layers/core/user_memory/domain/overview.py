"""What the console reads about one user beside the memory: the size and per-day plots, the
key-value namespaces and the conversations."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from user_memory.domain.memory.repository import MemoryStore
from user_memory.errors import WrongSchema

# The size plot: at most this many of the newest versions, measured within this many bytes of JSON.
MAX_SIZE_POINTS = 200
MAX_SIZE_BYTES_MEASURED = 16 * 1024 * 1024


class OverviewData(Protocol):
    """What the console reads beside the memory: per-day figures, namespaces, conversations."""

    def daily(self, user_id: uuid.UUID, since: datetime) -> list[dict[str, Any]]: ...

    def kv_namespaces(self, user_id: uuid.UUID, now: datetime) -> list[dict[str, Any]]: ...

    def conversations(
        self, user_id: uuid.UUID, *, limit: int, after: tuple[datetime, str] | None
    ) -> list[dict[str, Any]]: ...


class OverviewService:
    """One user's console figures, on one unit of work."""

    def __init__(self, *, user_id: uuid.UUID, store: MemoryStore, overview: OverviewData | None) -> None:
        self.user_id = user_id
        self._store = store
        self._overview = overview

    def stats(self, days: int, *, now: datetime | None = None) -> dict[str, Any]:
        """The console's plots: the size of the newest versions, and per UTC day of the last `days`
        the versions, the summaries' applied and refused edits, and their tokens."""
        overview = self._data()
        since = (now or datetime.now(UTC)) - timedelta(days=days)
        sizes = self._store.sizes(self.user_id, points=MAX_SIZE_POINTS, byte_budget=MAX_SIZE_BYTES_MEASURED)
        return {
            "sizes": [{"version": v, "created_at": at, "bytes": size} for v, at, size in sizes],
            "days": overview.daily(self.user_id, since),
        }

    def kv_namespaces(self, *, now: datetime | None = None) -> list[dict[str, Any]]:
        """The namespaces holding live key-value entries, with their counts (at most 1,000)."""
        return self._data().kv_namespaces(self.user_id, now or datetime.now(UTC))

    def conversation_list(self, *, limit: int, after: tuple[datetime, str] | None = None) -> list[dict[str, Any]]:
        """A page of conversations, newest message first, each with its memory (or none yet)."""
        return self._data().conversations(self.user_id, limit=limit, after=after)

    def _data(self) -> OverviewData:
        if self._overview is None:
            raise WrongSchema("this deployment keeps no overview (the in-memory kit)")
        return self._overview

"""Search over one user's memory items (the item index: adapters/search.py)."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from user_memory.errors import WrongSchema


class SearchIndex(Protocol):
    """Search over the user's memory items (adapters/search.py)."""

    def search(self, user_id: uuid.UUID, query: str, k: int = 10, mode: Any = "auto") -> Any: ...

    def embed_pending(self, user_id: uuid.UUID, *, limit: int = 4096) -> Any: ...


class SearchService:
    """One user's memory items that best match a query, on one unit of work."""

    def __init__(self, user_id: uuid.UUID, index: SearchIndex | None) -> None:
        self.user_id = user_id
        self._index = index

    def search(self, query: str, k: int = 10, mode: str = "auto") -> Any:
        """The user's memory items that best match `query` (adapters/search.py)."""
        if self._index is None:
            raise WrongSchema("this deployment has no search index")
        return self._index.search(self.user_id, query, k, mode)

"""One user's unit of work, split by feature: a request builds only the services it uses.

`Sessions.session` opens the unit of work (for the HTTP API, one transaction as the end user or
with the service's rights for an operator); the `UserSession` it yields builds each feature's
service (and that feature's ports) the first time it is asked for, so a key-value request builds
no memory store, a memory read no search index.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from typing import Protocol

from user_memory.domain.account import AccountService
from user_memory.domain.companion.service import CompanionService
from user_memory.domain.kv import KvService
from user_memory.domain.overview import OverviewService
from user_memory.domain.search import SearchService
from user_memory.domain.service import MemoryService


class UserSession(Protocol):
    """One user's services on one unit of work, each built on first use."""

    @property
    def user_id(self) -> uuid.UUID: ...

    @property
    def memory(self) -> MemoryService:
        """The memory document: reads, edits, the prompt, the agent's tool calls."""
        ...

    @property
    def kv(self) -> KvService:
        """Key-value memory."""
        ...

    @property
    def companion(self) -> CompanionService:
        """Goals, to-dos, events, ratings, digests (DOCUMENT_SCHEMA=companion)."""
        ...

    @property
    def search(self) -> SearchService:
        """Search over the memory's items."""
        ...

    @property
    def account(self) -> AccountService:
        """Activity, the export, the erasure."""
        ...

    @property
    def overview(self) -> OverviewService:
        """The console's figures: plots, key-value namespaces, conversations."""
        ...


class Sessions(Protocol):
    """Opens one unit of work for one user: services whose writes commit together or not at all."""

    def session(self, user_id: object, *, operator: str | None = None) -> AbstractContextManager[UserSession]:
        """The services for `user_id`. With `operator` (who is acting), they run with the service's
        rights (any user); without, as that end user (row-level security applies)."""
        ...

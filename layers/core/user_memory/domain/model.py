"""The domain's types: user ids, windows, activity, versions and what writes and runs did."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from user_memory.domain.companion.times import StorableTime
from user_memory.errors import InvalidUserId

Document = dict[str, Any]
Patch = list[dict[str, Any]]

# Defaults defined once; settings and the store refer to these.
DEFAULT_CHECKPOINT_INTERVAL = 50
MAX_VERSION = 2**31 - 1  # versions are PostgreSQL integers
DEFAULT_MAX_DOCUMENT_BYTES = 256 * 1024
# The activity one prompt carries, in tokens (estimated as characters / 4): the default of
# MAX_PROMPT_ACTIVITY_TOKENS, the same as the default chunk (MAX_PROMPT_ACTIVITY_CHARS / 4).
DEFAULT_MAX_PROMPT_ACTIVITY_TOKENS = 6_000
MAX_WINDOW = timedelta(days=31)
# Activity kinds through which a user explicitly asks to forget; they let an update remove memory.
FORGET_KINDS = frozenset({"forget_part", "forget_request", "memory_reset"})


def parse_user_id(value: object) -> uuid.UUID:
    """Parse a user id at the edge; InvalidUserId when it is not a UUID."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidUserId(f"user id {value!r} is not a UUID") from None


class Window(BaseModel):
    """A half-open time range [start, end) whose activity a run summarizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    start: StorableTime
    end: StorableTime

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end <= self.start:
            raise ValueError("window end must be after its start")
        if self.end - self.start > MAX_WINDOW:
            raise ValueError(f"a window may span at most {MAX_WINDOW.days} days")
        return self

    @classmethod
    def day(cls, day: date) -> Window:
        """The UTC calendar day."""
        start = datetime.combine(day, time(0), tzinfo=UTC)
        return cls(start=start, end=start + timedelta(days=1))

    @classmethod
    def ending(cls, end: datetime, hours: int = 24) -> Window:
        """The `hours` before `end`."""
        return cls(start=end - timedelta(hours=hours), end=end)


@dataclass(frozen=True, kw_only=True)
class Activity:
    """One thing that happened to a user; `id` is set once it is stored."""

    user_id: uuid.UUID
    occurred_at: datetime
    kind: str
    payload: dict[str, Any]
    source: str
    external_id: str
    id: int | None = None


class RunStatus(enum.StrEnum):
    """What one run did for one user."""

    WRITTEN = "written"
    ALREADY_DONE = "already_done"  # the run key was recorded by an earlier delivery
    NO_ACTIVITY = "no_activity"
    UNCHANGED = "unchanged"  # summarized, but the document did not change
    # The stored document no longer validates (direct SQL, a schema change): nothing is summarized
    # or written, the activity waits, until a valid version replaces the document.
    INVALID_STORED_DOCUMENT = "invalid_stored_document"
    # The user's daily token budget (MAX_TOKENS_PER_USER_DAY) has no room for the next prompt:
    # nothing is summarized or written, the activity waits for the next run.
    OVER_BUDGET = "over_budget"


class WriteStatus(enum.StrEnum):
    """What one append did."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"
    IDEMPOTENT = "idempotent"  # the idempotency key was already recorded: nothing written


@dataclass(frozen=True, kw_only=True)
class MemoryVersion:
    """One version of a user's memory document."""

    version: int
    document: Document
    created_at: datetime | None = None
    source: str | None = None


def empty_version() -> MemoryVersion:
    """Version 0, the empty document: a new object each time, so no caller can change another's."""
    return MemoryVersion(version=0, document={})


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One row of a user's history, newest first.

    `provenance` is what produced the version, when its writer recorded it (the daily summary:
    mode, model, the edits with their reasons, the refused ones, the activity left out); None
    for other writers.
    """

    version: int
    patch: Patch
    source: str | None
    created_at: datetime
    is_checkpoint: bool
    provenance: dict[str, Any] | None = None


# What a recorder returns of one version for `read_changes` (bounded whatever a patch holds).
MAX_CHANGED_PATHS = 200  # pointers per version
MAX_CHANGED_PATH_CHARS = 1_000  # characters per pointer (a longer one is cut, and then ignored)


@dataclass(frozen=True, kw_only=True)
class VersionChange:
    """Which pointers one version's patch changed, and who wrote it (newest first from the recorder).

    `summary` says a summary run wrote it (its provenance's mode is edit or document); `paths`
    are its operations' `path` (and a move's `from`), at most MAX_CHANGED_PATHS, each cut at
    MAX_CHANGED_PATH_CHARS characters.
    """

    version: int
    source: str | None
    created_at: datetime
    summary: bool
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AppendResult:
    """What an append did: the resulting head, its patch, and whether a row was written."""

    status: WriteStatus
    version: int
    document: Document
    patch: Patch = field(default_factory=list)
    is_checkpoint: bool = False

    @property
    def written(self) -> bool:
        return self.status is WriteStatus.WRITTEN

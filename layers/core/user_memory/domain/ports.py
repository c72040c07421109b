"""The ports the domain talks to. Adapters implement them: PostgreSQL, in-memory, SQS, OpenAI."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from user_memory.domain.model import Activity, Document, HistoryEntry, MemoryVersion, Patch, VersionChange, Window

if TYPE_CHECKING:  # the summarizers' and the pipeline's: not imported with every port (cold imports)
    from user_memory.domain.summary.edits import MemoryEdit


@dataclass(frozen=True, kw_only=True)
class StoredRow:
    """One stored version row as a recorder returns it (the checkpoint document when it has one)."""

    version: int
    patch: Patch
    checkpoint: Document | None
    created_at: datetime
    source: str | None


@dataclass(frozen=True, kw_only=True)
class NewVersion:
    """A version row to insert, already diffed and verified by the repository.

    `document_json` is the document's compact JSON text, encoded once by the repository and
    reused for the size check and the insert.
    """

    user_id: uuid.UUID
    expected_version: int
    patch: Patch
    document: Document
    document_json: str
    checkpoint: bool
    source: str
    idempotency_key: str | None = None
    activity_ids: Sequence[int] | None = None
    provenance: dict[str, Any] | None = None  # what produced the version (a summary run), stored with it
    # The search index's changes for this version, written in the append's statement. The store
    # sends none since migration 022: the index catches up in a statement of its own
    # (MemoryRecorder.catch_up_index), derived from the stored document.
    items: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class InsertOutcome:
    """What the recorder did with a NewVersion: wrote it, found the key recorded, or found a newer head."""

    status: Literal["written", "idempotent", "conflict", "stale"]
    version: int
    created_at: datetime | None = None


class MemoryRecorder(Protocol):
    """Storage of version rows and heads: no diffing, no rules, only reads and atomic writes."""

    def read_head(self, user_id: uuid.UUID, key: str | None = None) -> tuple[MemoryVersion | None, int | None]:
        """The head (None for a user with no versions) and the version `key` produced, if recorded."""
        ...

    def read_rows(self, user_id: uuid.UUID, version: int) -> list[StoredRow]:
        """The latest checkpoint at or below `version` (or version 1), then every row up to `version`."""
        ...

    def read_span(self, user_id: uuid.UUID, first: int, last: int) -> list[StoredRow]:
        """The rows of versions `first` to `last` (both included), oldest first, checkpoints with them."""
        ...

    def version_at(self, user_id: uuid.UUID, timestamp: datetime) -> int:
        """The newest version created at or before `timestamp` (0 if none)."""
        ...

    def read_history(self, user_id: uuid.UUID, *, limit: int, before_version: int | None) -> list[HistoryEntry]:
        """Rows newest first."""
        ...

    def read_changes(self, user_id: uuid.UUID, *, limit: int) -> list[VersionChange]:
        """The newest `limit` versions, newest first: who wrote each and which pointers its patch
        changed (bounded: MAX_CHANGED_PATHS pointers of MAX_CHANGED_PATH_CHARS each), never documents."""
        ...

    def read_tokens(self, user_id: uuid.UUID, since: datetime) -> int:
        """The LLM tokens (prompt and completion) the provenance of the versions created at or after
        `since` records."""
        ...

    def insert(self, new: NewVersion) -> InsertOutcome:
        """Atomically: check the key, then the expected version, then that every one of
        `activity_ids` is still there and unsummarized ("stale" if not), insert the row, move
        the head, and mark `activity_ids` as summarized by the new version."""
        ...

    def catch_up_index(self, user_id: uuid.UUID) -> str:
        """Bring the user's search index up to its head, from the stored document, in a statement
        of its own (inside the caller's transaction when there is one, else a transaction of its
        own): "indexed", "current" (nothing to do), "none" (no memory) or "failed" (outside a
        transaction only: logged and counted, the index stays behind for the next catch-up or
        the retention job). Inside a transaction its errors are the transaction's."""
        ...

    def mark_summarized(self, user_id: uuid.UUID, version: int, activity_ids: Sequence[int]) -> int:
        """Mark activity as summarized by `version` without writing a version (an unchanged summary)."""
        ...

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        """Delete every memory and activity row of the user in one transaction; rows deleted per relation."""
        ...


class ActivityReader(Protocol):
    """Where a run's input comes from."""

    def unsummarized(self, user_id: uuid.UUID, *, before: datetime, after_id: int = 0, limit: int) -> list[Activity]:
        """The user's activity not yet summarized, occurred before `before`, oldest first, ids > after_id."""
        ...

    def active_user_pages(self, window: Window, *, page_size: int) -> Iterator[list[uuid.UUID]]:
        """Pages of users with unsummarized activity that occurred before the window's end, in id order."""
        ...


class ActivityWriter(Protocol):
    def record(self, activities: Iterable[Activity]) -> int:
        """Store activities; a repeat of (user, source, external_id) is ignored. Returns rows new."""
        ...


class ActivityStore(ActivityReader, ActivityWriter, Protocol):
    """Activity read by a run and recorded by the worker (adapters/postgres.py)."""


class Embedder(Protocol):
    """Texts to vectors (an OpenAI-compatible embeddings endpoint: adapters/openai_embeddings.py)."""

    model: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class ItemEmbeddings(Protocol):
    """The search index's pending embeddings (adapters/search.py)."""

    @property
    def embedder(self) -> object | None:
        """The embeddings endpoint; None when none is configured (full-text search only)."""
        ...

    def embed_pending(self, user_id: uuid.UUID, *, limit: int = 4096) -> Any:
        """Embed the user's item texts that have no vector yet; a report with `inputs`."""
        ...


class ServiceSearch(ItemEmbeddings, Protocol):
    """Search with the service's rights (adapters/search.py): it stores vectors and serves the
    operators' search across users."""

    def vectors_available(self) -> bool:
        """An embedder is configured and the database has the vector table."""
        ...

    def search_all(self, query: str, k: int = 10) -> list[dict[str, Any]]:
        """The k nearest item texts across every user, with their paths."""
        ...


@dataclass(frozen=True, kw_only=True)
class IndexSource:
    """What a user's index is rebuilt from: the head, and the items the index holds now."""

    version: int
    document: Document
    indexed: dict[str, tuple[int, str]]  # path -> (version, text)


class IndexUpkeep(Protocol):
    """Keeping the search index (memory_items, memory_embeddings) in step with the heads, for
    every schema (adapters/search.py)."""

    def users_behind(self, *, page_size: int = 500) -> Iterator[list[uuid.UUID]]:
        """Pages of users whose index does not reflect their head."""
        ...

    def index_source(self, user_id: uuid.UUID) -> IndexSource | None:
        """The user's head and indexed items; None for a user with no memory."""
        ...

    def write_index(self, user_id: uuid.UUID, version: int, rows: list[dict[str, Any]]) -> bool:
        """Replace the user's items with `rows` as of `version`; False when the head moved meanwhile."""
        ...

    def purge_orphan_embeddings(self) -> int:
        """Delete the vectors no item of their user has the text of any more; how many."""
        ...


class MessageSender(Protocol):
    """Sends message bodies to the worker queue."""

    def send(self, bodies: list[str]) -> int:
        """Send every body or raise SendFailed; returns how many were sent."""
        ...


class QueueSender(Protocol):
    """The worker queue as the fan-out uses it (adapters/sqs.py): bodies sent, optionally delayed,
    and the calls it took."""

    @property
    def calls(self) -> int:
        """Requests made to the queue so far (a batch of 10, a retry: one each)."""
        ...

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        """Send every body or raise SendFailed; returns how many were sent."""
        ...


class QueueDepth(Protocol):
    """The worker queue's backlog, as the fan-out weighs it before adding a day to it."""

    def backlog(self) -> int:
        """Messages on the queue: waiting, in flight and delayed (approximate); QueueUnavailable when unread."""
        ...


@dataclass(frozen=True, kw_only=True)
class SummaryResult:
    """What the summarizer proposes (not yet validated) and what producing it cost.

    Whole-document mode: `edits` is None and `document` is the proposed next document. Edit
    mode: `edits` is the list of changes to the document the summarizer was given (the pipeline
    checks, applies and validates them; `document` is then not used).

    `changes` (whole-document mode) is what the answer changed, each with its reason: the
    rule-based summarizer names the activity each change folds in. None when the summarizer does
    not say; the pipeline then records the diff's operations, each naming the answer as its reason.

    `activity_cut` is how many activities the summarizer left out of its prompt to fit its
    budget, `activity_duplicates` how many it merged into an identical line; both are recorded
    with the version. `cached_prompt_tokens` is the part of `prompt_tokens` the endpoint served
    from its prompt cache, when it says.
    """

    document: Document = field(default_factory=dict)
    model: str
    edits: tuple[MemoryEdit, ...] | None = None
    changes: tuple[MemoryEdit, ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    activity_cut: int = 0
    activity_duplicates: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Summarizer(Protocol):
    """Turns the current memory document and new activity into the next document, or into the
    edits that make it (SummaryResult.edits).

    One that never modifies the document it is given may say so with a class attribute
    `leaves_input_unchanged = True`: the pipeline then gives it the head as read instead of a copy.
    One whose whole-document answers hold only the values JSON decodes to (dicts with string keys,
    lists, strings, numbers, booleans, None) may say so with `answers_json_values = True`: their
    size is then checked without encoding them (document.check_json_size); the outcome is the same.
    """

    name: str

    def summarize(
        self,
        document: Document,
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        """Propose the next document or the edits to it; `document` must not be modified.

        Args:
            feedback: why the previous proposal was invalid, for a retry.
            timeout: seconds this call may take in all, retries and their waits included
                (None: the adapter's own limits).
        """
        ...

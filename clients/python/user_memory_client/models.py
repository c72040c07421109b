"""What the user-memory API reads and writes, as pydantic models.

Written by hand from the API's OpenAPI document (`/openapi.json`); each model names the schema it
mirrors (`__schema__`) and tests/client/test_drift.py checks every one against the served document
(field names, which are required, their JSON types), so they cannot drift apart. Answers may carry
fields a newer server added: models ignore what they do not know.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "Webhook",
    "WebhookCreated",
    "WebhookDeleted",
    "Webhooks",
    "ActiveGoals",
    "ActivityItem",
    "ActivityRecord",
    "ActivityRecorded",
    "Changes",
    "ConversationMemoryRecord",
    "ConversationMessageRecord",
    "ConversationRecord",
    "Diff",
    "Digest",
    "Element",
    "ElementWritten",
    "Erased",
    "ExportJob",
    "ErasureReceipt",
    "ErasureReceipts",
    "EventsImported",
    "EventsInRange",
    "Export",
    "History",
    "HistoryItem",
    "IndexedElement",
    "KvDeleted",
    "KvEntry",
    "KvPage",
    "KvTouched",
    "Memory",
    "Occurrence",
    "Problem",
    "Prompt",
    "RatingRecord",
    "RatingRecorded",
    "SearchHit",
    "SearchResults",
    "TodosDue",
    "Written",
]


class ApiModel(BaseModel):
    """A schema of the OpenAPI document (`__schema__` names it)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)
    __schema__: ClassVar[str]


class Problem(ApiModel):
    """An error, as RFC 9457 application/problem+json."""

    __schema__ = "Problem"
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    current_version: int | None = None


class Memory(ApiModel):
    """One version of the user's memory document (its version is the ETag)."""

    __schema__ = "Memory"
    user_id: str
    version: int
    document: dict[str, JsonValue]
    created_at: datetime | None = None
    source: str | None = None


class HistoryItem(ApiModel):
    __schema__ = "HistoryItem"
    version: int
    created_at: datetime
    source: str | None
    operations: int
    change_bytes: int
    checkpoint: bool
    provenance: dict[str, JsonValue] | None = None


class History(ApiModel):
    """Versions newest first; `next_before` is the cursor of the next page (None: no more)."""

    __schema__ = "History"
    user_id: str
    items: list[HistoryItem]
    next_before: int | None = None


class Diff(ApiModel):
    """One RFC 6902 patch turning version `from_version` into `to_version`."""

    __schema__ = "Diff"
    user_id: str
    from_version: int = Field(alias="from")
    to_version: int = Field(alias="to")
    patch: list[dict[str, JsonValue]]


class Changes(ApiModel):
    __schema__ = "Changes"
    user_id: str
    since: int
    version: int
    patch: list[dict[str, JsonValue]]


class Written(ApiModel):
    """What a write did: `written`, `unchanged` or `idempotent` (the key was used: nothing new)."""

    __schema__ = "Written"
    user_id: str
    status: Literal["written", "unchanged", "idempotent"]
    version: int
    document: dict[str, JsonValue]
    patch: list[dict[str, JsonValue]]


class Prompt(ApiModel):
    __schema__ = "Prompt"
    user_id: str
    version: int
    text: str
    recent: int = 0


class RefreshQueued(ApiModel):
    __schema__ = "RefreshQueued"
    user_id: str
    run_key: str
    status: Literal["queued", "already_queued"]
    requested_at: datetime
    next_allowed_at: datetime


class SearchHit(ApiModel):
    __schema__ = "SearchHit"
    path: str
    version: int
    kind: str
    text: str
    value: JsonValue
    score: float
    matched_by: list[str]


class SearchResults(ApiModel):
    __schema__ = "SearchResults"
    user_id: str
    query: str
    mode: str
    items: list[SearchHit]


class KvEntry(ApiModel):
    __schema__ = "KvEntry"
    namespace: str
    key: str
    value: JsonValue
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


class KvPage(ApiModel):
    """Live entries in key order; `next_after` is the cursor of the next page (None: no more)."""

    __schema__ = "KvPage"
    namespace: str
    items: list[KvEntry]
    next_after: str | None = None


class KvTouched(ApiModel):
    __schema__ = "KvTouched"
    namespace: str
    keys: list[str]


class KvDeleted(ApiModel):
    __schema__ = "KvDeleted"
    namespace: str
    key: str
    deleted: bool


class ActivityItem(ApiModel):
    """One thing that happened to the user; `external_id` is unique per source (repeats ignored)."""

    __schema__ = "ActivityItem"
    occurred_at: datetime
    kind: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    source: str = "api"
    external_id: str


class ActivityRecorded(ApiModel):
    __schema__ = "ActivityRecorded"
    received: int
    recorded: int


class ActivityRecord(ApiModel):
    __schema__ = "ActivityRecord"
    id: int
    occurred_at: datetime
    kind: str
    payload: dict[str, JsonValue]
    source: str
    external_id: str


class ConversationMessageRecord(ApiModel):
    __schema__ = "ConversationMessageRecord"
    seq: int
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str


class ConversationMemoryRecord(ApiModel):
    __schema__ = "ConversationMemoryRecord"
    memory: dict[str, JsonValue]
    last_message_seq: int
    last_message_id: str
    last_message_at: datetime
    model: str
    created_at: datetime
    updated_at: datetime


class ConversationRecord(ApiModel):
    __schema__ = "ConversationRecord"
    conversation_id: str
    first_message_at: datetime
    last_message_at: datetime
    created_at: datetime
    messages: list[ConversationMessageRecord]
    memory: ConversationMemoryRecord | None = None


class RatingRecord(ApiModel):
    __schema__ = "RatingRecord"
    interaction_id: str
    rating: int
    tags: list[str]
    comment: str
    rated_at: datetime
    recorded_at: datetime
    summarized_version: int | None


class Export(ApiModel):
    """Everything stored about the user."""

    __schema__ = "Export"
    user_id: str
    versions: list[Memory]
    kv: list[KvEntry]
    activity: list[ActivityRecord]
    conversations: list[ConversationRecord] = Field(default_factory=list)
    ratings: list[RatingRecord] = Field(default_factory=list)
    digests: list[dict[str, JsonValue]] = Field(default_factory=list)


class ErasureReceipt(ApiModel):
    """What an erasure deleted, when, at whose request; the user only as a salted hash."""

    __schema__ = "ErasureReceipt"
    id: str
    user_hash: str
    erased_at: datetime
    requested_by: str
    deleted: dict[str, int]


class Erased(ApiModel):
    __schema__ = "Erased"
    user_id: str
    removed: dict[str, int]
    receipt: ErasureReceipt | None = None


class ExportJob(ApiModel):
    """An asynchronous export: poll until `status` is done, then fetch `url` (pre-signed)."""

    __schema__ = "ExportJob"
    id: str
    user_id: str
    status: Literal["pending", "running", "done", "failed"]
    created_at: datetime
    finished_at: datetime | None = None
    lines: int | None = None
    bytes: int | None = None
    error: str | None = None
    url: str | None = None


class ErasureReceipts(ApiModel):
    __schema__ = "ErasureReceipts"
    receipts: list[ErasureReceipt]
    next: str | None = None


# -- the companion layer (DOCUMENT_SCHEMA=companion) -------------------------------------------------

Collection = Literal["goals", "todos", "events"]


class ElementWritten(ApiModel):
    """A goal, to-do or event after a write: the version it made and the element (None: deleted)."""

    __schema__ = "ElementWritten"
    user_id: str
    collection: Collection
    id: str
    status: str
    version: int
    element: dict[str, JsonValue] | None


class Element(ApiModel):
    __schema__ = "Element"
    user_id: str
    collection: Collection
    id: str
    version: int
    element: dict[str, JsonValue]


class IndexedElement(ApiModel):
    __schema__ = "IndexedElement"
    path: str
    version: int
    element: dict[str, JsonValue]


class ActiveGoals(ApiModel):
    __schema__ = "ActiveGoals"
    user_id: str
    items: list[IndexedElement]


class TodosDue(ApiModel):
    __schema__ = "TodosDue"
    user_id: str
    day: str
    overdue: list[IndexedElement]
    due: list[IndexedElement]


class Occurrence(ApiModel):
    __schema__ = "Occurrence"
    id: str
    path: str
    version: int
    occurrence_start: str
    occurrence_end: str
    event: dict[str, JsonValue]


class EventsInRange(ApiModel):
    """Occurrences in [from, to); `next_from` is where to ask again when the answer was cut short."""

    __schema__ = "EventsInRange"
    user_id: str
    from_: datetime = Field(alias="from")
    to: datetime
    items: list[Occurrence]
    unexpanded: list[str] = Field(default_factory=list)
    next_from: str | None = None


class EventsImported(ApiModel):
    __schema__ = "EventsImported"
    user_id: str
    status: str
    version: int
    created: int
    updated: int
    unchanged: int
    deleted: int


class RatingRecorded(ApiModel):
    __schema__ = "RatingRecorded"
    user_id: str
    interaction_id: str
    status: Literal["created", "updated", "unchanged"]


class Digest(ApiModel):
    __schema__ = "Digest"
    user_id: str
    digest: dict[str, JsonValue]


# -- operators: runs and their undo ----------------------------------------------------------------


class RunReport(ApiModel):
    """One run's totals over the versions it wrote (every user's version carrying the run key)."""

    __schema__ = "RunReport"
    run_key: str
    versions: int
    users: int
    first_written_at: datetime | None = None
    last_written_at: datetime | None = None
    activities: int
    calls: int
    tokens: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    cost_usd: float
    edits_refused: int
    facts_restored: int
    facts_filled: int
    edits_applied: int = 0


class RunList(ApiModel):
    __schema__ = "RunList"
    items: list[RunReport]
    next_after: str | None = None


class RevertConflict(ApiModel):
    __schema__ = "RevertConflict"
    user_id: str
    paths: list[str]


class RevertFailure(ApiModel):
    __schema__ = "RevertFailure"
    user_id: str
    error: str


class RunRevert(ApiModel):
    """An undo of one run so far: its users by outcome, the conflicts with their paths, the failures."""

    __schema__ = "RunRevert"
    revert_id: str
    run_key: str
    user_id: str | None = None
    requested_by: str | None = None
    created_at: datetime | None = None
    queued_at: datetime | None = None
    updated_at: datetime | None = None
    done: bool
    users: int
    pending: int
    reverted: int
    unchanged: int
    conflict: int
    failed: int
    conflicts: list[RevertConflict]
    failures: list[RevertFailure]


# -- operators: webhook endpoints of memory-changed events ------------------------------------------


class Webhook(ApiModel):
    """A webhook endpoint and its delivery state (never its secret)."""

    __schema__ = "Webhook"
    id: str
    url: str
    description: str
    enabled: bool
    disabled_reason: str | None = None
    failures: int
    failing_since: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    last_delivered_at: datetime | None = None
    created_at: datetime


class WebhookCreated(ApiModel):
    """The new endpoint and its signing secret (answered once; verify requests with it)."""

    __schema__ = "WebhookCreated"
    webhook: Webhook
    secret: str


class Webhooks(ApiModel):
    __schema__ = "Webhooks"
    webhooks: list[Webhook]


class WebhookDeleted(ApiModel):
    __schema__ = "WebhookDeleted"
    id: str
    deleted: bool


class ImportJob(ApiModel):
    """An import of an export file (operators): PUT the file to `upload_url`, start it, poll until
    `status` is done (`versions`, `kv`) or failed (`error_type`: InvalidExport, ImportTargetNotEmpty, ...)."""

    __schema__ = "ImportJob"
    id: str
    user_id: str
    status: Literal["awaiting_upload", "queued", "running", "done", "failed"]
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    versions: int | None = None
    kv: int | None = None
    error_type: str | None = None
    error: str | None = None
    upload_url: str | None = None


def schema_models() -> list[type[ApiModel]]:
    """Every model that mirrors a schema of the OpenAPI document."""
    return [m for m in ApiModel.__subclasses__() if "__schema__" in m.__dict__]


def dump(model: BaseModel) -> dict[str, Any]:
    """A model as the JSON the API reads (aliases, no unset defaults)."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)

"""What the HTTP API reads and writes: pydantic models, from which its OpenAPI document is generated."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator, model_validator

from user_memory.domain.companion.times import RANGE_TEXT, StorableTime
from user_memory.domain.conversations.model import MessagePayload, is_conversation_message
from user_memory.domain.kv import MAX_KEY_CHARS, MAX_PAGE_SIZE, MAX_TTL_SECONDS
from user_memory.domain.messages import MAX_ACTIVITIES_PER_MESSAGE, MAX_ACTIVITY_PAYLOAD_BYTES, check_payload_size

PROBLEM_JSON = "application/problem+json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(_Out):
    """An error, as RFC 9457 application/problem+json."""

    type: str = Field(description="A stable URI per kind of error (about:blank for plain HTTP errors).")
    title: str
    status: int
    detail: str
    instance: str | None = Field(default=None, description="The request id.")
    current_version: int | None = Field(default=None, description="On 409/412: the user's current version.")


class Memory(_Out):
    """One version of the user's memory document. The ETag header is the version."""

    user_id: str
    version: int = Field(ge=0, description="0 is the empty document before the first write.")
    document: dict[str, JsonValue]
    created_at: datetime | None = None
    source: str | None = None


class HistoryItem(_Out):
    version: int
    created_at: datetime
    source: str | None
    operations: int = Field(description="Operations in the RFC 6902 patch that made this version.")
    change_bytes: int = Field(description="Size of that patch as compact JSON.")
    checkpoint: bool
    provenance: dict[str, JsonValue] | None = Field(
        default=None,
        description="What produced the version, when its writer recorded it: for a daily summary the mode, the "
        "model, each edit's reason, refused edits and why, restored or filled facts, tokens.",
    )


class History(_Out):
    """Versions newest first; pass `next_before` as `before` for the next page (null: no more)."""

    user_id: str
    items: list[HistoryItem]
    next_before: int | None = None


class Diff(_Out):
    """One RFC 6902 patch turning version `from` into version `to`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    user_id: str
    from_version: int = Field(alias="from")
    to_version: int = Field(alias="to")
    patch: list[dict[str, JsonValue]]


class Changes(_Out):
    """One RFC 6902 patch from `since` to the head; `version` is the head (the next `since`)."""

    user_id: str
    since: int
    version: int
    patch: list[dict[str, JsonValue]]


class Written(_Out):
    """What a write did: `written` (a new version), `unchanged` (nothing to write) or
    `idempotent` (this Idempotency-Key was already used: nothing written, its version returned)."""

    user_id: str
    status: Literal["written", "unchanged", "idempotent"]
    version: int
    document: dict[str, JsonValue]
    patch: list[dict[str, JsonValue]]


class Revert(_In):
    version: int = Field(ge=0, description="The version whose document becomes the new head.")


class ErasureReceipt(_Out):
    """What an erasure deleted (rows per relation, `export_objects`), when, at whose request
    (`self`, `operator:<subject>`, `cli`, `service`); the user only as a salted hash."""

    id: str
    user_hash: str
    erased_at: datetime
    requested_by: str
    deleted: dict[str, int]


class Erased(_Out):
    """Rows removed per table, in one transaction, and the receipt stored with them."""

    user_id: str
    removed: dict[str, int]
    receipt: ErasureReceipt | None = None


class ExportJob(_Out):
    """An asynchronous export: `pending`, `running`, `done` (then `url`, a pre-signed link to its
    JSON Lines, valid EXPORT_URL_SECONDS from this answer) or `failed` (`error`)."""

    id: str
    user_id: str
    status: Literal["pending", "running", "done", "failed"]
    created_at: datetime
    finished_at: datetime | None = None
    lines: int | None = None
    bytes: int | None = None
    error: str | None = None
    url: str | None = None


class ErasureReceipts(_Out):
    """A page of erasure receipts, newest first; `next` continues it (None: the last page)."""

    receipts: list[ErasureReceipt]
    next: str | None = None


class ActivityItem(_In):
    """One thing that happened to the user (the same record other services send on the queue).

    A conversation message is an activity of kind `message` whose payload is exactly
    `{"conversation_id": ..., "role": "user" | "assistant" | "system" | "tool", "text": ...}`; its
    `external_id` is the message id (a repeat in the same conversation is ignored). It is stored
    with the caller's conversation of that id (ids are each user's own), whose memory is generated
    once the conversation has gone quiet.
    """

    occurred_at: StorableTime = Field(description=f"With a zone, {RANGE_TEXT}.")
    kind: str = Field(min_length=1, max_length=100)
    payload: dict[str, JsonValue] = Field(
        default_factory=dict,
        description=f"At most {MAX_ACTIVITY_PAYLOAD_BYTES:,} bytes as compact JSON (as on the queue).",
    )
    source: str = Field(default="api", min_length=1, max_length=100)
    external_id: str = Field(min_length=1, max_length=200, description="Unique per source: repeats are ignored.")

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, payload: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return check_payload_size(payload)

    @model_validator(mode="after")
    def _conversation_message(self) -> ActivityItem:
        if is_conversation_message(self.kind, self.payload):
            try:
                MessagePayload.model_validate(self.payload)
            except ValidationError as err:
                fields = ", ".join(".".join(str(p) for p in e["loc"]) or "payload" for e in err.errors())
                raise ValueError(f"a conversation message's payload is invalid ({fields})") from None
        return self


class ActivityBatch(_In):
    items: list[ActivityItem] = Field(min_length=1, max_length=MAX_ACTIVITIES_PER_MESSAGE)


class ActivityRecorded(_Out):
    received: int
    recorded: int = Field(description="Rows new; repeats of (source, external_id) are ignored.")


class ActivityRecord(_Out):
    id: int
    occurred_at: datetime
    kind: str
    payload: dict[str, JsonValue]
    source: str
    external_id: str


class KvEntry(_Out):
    namespace: str
    key: str
    value: JsonValue
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


class KvPage(_Out):
    """Live entries in key order; pass `next_after` as `after` for the next page (null: no more)."""

    namespace: str
    items: list[KvEntry]
    next_after: str | None = None


class KvPut(_In):
    value: JsonValue = Field(description="Any JSON value, at most 10,240 bytes as compact JSON.")
    ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS)] | None = Field(
        default=None, description="Seconds until the entry expires; none: it stays until deleted or purged."
    )


class KvTouch(_In):
    keys: list[Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS)]] = Field(
        min_length=1, max_length=MAX_PAGE_SIZE, description="The entries to keep alive for their time to live again."
    )


class KvTouched(_Out):
    """The keys whose expiry moved: live entries with a time to live (the others are left alone)."""

    namespace: str
    keys: list[str]


class KvDeleted(_Out):
    namespace: str
    key: str = Field(max_length=MAX_KEY_CHARS)
    deleted: bool


class ConversationMessageRecord(_Out):
    seq: int = Field(description="The message's number in its conversation, in the order recorded.")
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str


class ConversationMemoryRecord(_Out):
    """A conversation's memory and the last message it covers."""

    memory: dict[str, JsonValue] = Field(
        description="discussed, learned_about_user, decisions, open_loops, tone (the ConversationMemory schema)."
    )
    last_message_seq: int
    last_message_id: str
    last_message_at: datetime
    model: str
    created_at: datetime
    updated_at: datetime


class ConversationRecord(_Out):
    conversation_id: str
    first_message_at: datetime
    last_message_at: datetime
    created_at: datetime
    messages: list[ConversationMessageRecord]
    memory: ConversationMemoryRecord | None = None


class Export(_Out):
    """Everything stored about the user."""

    user_id: str
    versions: list[Memory]
    kv: list[KvEntry]
    activity: list[ActivityRecord]
    conversations: list[ConversationRecord] = Field(default_factory=list)
    ratings: list[RatingRecord] = Field(default_factory=list, description="Raw feedback ratings (companion).")
    digests: list[dict[str, JsonValue]] = Field(default_factory=list, description="Daily digests (companion).")


class RatingRecord(_Out):
    interaction_id: str
    rating: int
    tags: list[str]
    comment: str
    rated_at: datetime
    recorded_at: datetime
    summarized_version: int | None


class MemoryGenerationTriggered(_Out):
    """What the conversation-memory trigger queued."""

    threshold_minutes: int
    quiet_before: datetime = Field(description="Conversations whose last message is older than this were taken.")
    conversations: int = Field(description="Conversations quiet with no memory, or messages newer than it.")
    messages: int = Field(description="GENERATE_MEMORY_BATCH messages sent to the worker queue.")
    pages: int


class PatchOperation(_In):
    """One RFC 6902 operation."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str
    value: Any = None
    from_: str | None = Field(default=None, alias="from")


class Prompt(_Out):
    """The memory as a compact text block for a system prompt."""

    user_id: str
    version: int
    text: str
    recent: int = Field(
        default=0, ge=0, description="Items of the text marked recent: learned in conversations since the last summary."
    )


class RefreshQueued(_Out):
    """A refresh of the user's pending activity on the worker queue: its run key, and whether this
    request queued it (`queued`) or one was queued already within the minimum interval (`already_queued`)."""

    user_id: str
    run_key: str = Field(description="The run's key, ondemand:<time>: the versions it writes carry it.")
    status: Literal["queued", "already_queued"]
    requested_at: datetime
    next_allowed_at: datetime = Field(description="The earliest time a new refresh is queued rather than this one.")


# -- the companion layer -------------------------------------------------------------------------


class ElementWritten(_Out):
    """A goal, to-do or event after a write: the version it made (ETag) and the element."""

    user_id: str
    collection: Literal["goals", "todos", "events"]
    id: str
    status: str = Field(description="written, idempotent or unchanged.")
    version: int
    element: dict[str, JsonValue] | None = Field(description="The element as stored; null once deleted.")


class Element(_Out):
    """One goal, to-do or event of the head document."""

    user_id: str
    collection: Literal["goals", "todos", "events"]
    id: str
    version: int = Field(description="The head's version.")
    element: dict[str, JsonValue]


class IndexedElement(_Out):
    path: str = Field(description="The element's JSON Pointer in the document.")
    version: int = Field(description="The version that last changed it.")
    element: dict[str, JsonValue]


class ActiveGoals(_Out):
    user_id: str
    items: list[IndexedElement]


class TodosDue(_Out):
    """Open to-dos due on or before `day` (the user's today by default): overdue ones first."""

    user_id: str
    day: str
    overdue: list[IndexedElement] = Field(description="Due before `day`.")
    due: list[IndexedElement] = Field(description="Due on `day`.")


class Occurrence(_Out):
    id: str
    path: str
    version: int
    occurrence_start: str
    occurrence_end: str
    event: dict[str, JsonValue]


class EventsInRange(_Out):
    user_id: str
    from_: datetime = Field(alias="from")
    to: datetime
    items: list[Occurrence]
    unexpanded: list[str] = Field(
        default_factory=list,
        description="Ids of recurring events whose occurrences in the range need more work than the service allows "
        "for one request (read the event itself with GET /me/events/{id}).",
    )
    next_from: str | None = Field(
        default=None,
        description="Set when the answer was cut short (too many occurrences or bytes): the start of the first "
        "occurrence left out; ask again from it for the rest.",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class EventsImported(_Out):
    """What a Google Calendar import did (one version for the whole page)."""

    user_id: str
    status: str
    version: int
    created: int
    updated: int
    unchanged: int
    deleted: int


class RatingIn(_In):
    """A feedback rating of one interaction (a repeat for the same interaction replaces it)."""

    interaction_id: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")
    rating: int = Field(ge=1, le=5)
    tags: list[Annotated[str, Field(min_length=1, max_length=50)]] = Field(default_factory=list, max_length=20)
    comment: str = Field(default="", max_length=2000)
    rated_at: StorableTime | None = Field(
        default=None, description=f"When it was given (with zone, {RANGE_TEXT}); default now."
    )


class RatingRecorded(_Out):
    user_id: str
    interaction_id: str
    status: Literal["created", "updated", "unchanged"]


class Digest(_Out):
    """A daily digest: due and overdue to-dos, events of the next 7 days, goals near their target."""

    user_id: str
    digest: dict[str, JsonValue]


class SearchHit(_Out):
    path: str = Field(description="The item's JSON Pointer in the document.")
    version: int = Field(description="The version that last changed the item.")
    kind: str = Field(description="leaf, goal, todo, event, part or entry.")
    text: str
    value: JsonValue
    score: float
    matched_by: list[str] = Field(description="fts, vector or both.")


class SearchResults(_Out):
    user_id: str
    query: str
    mode: str = Field(description="What ran: fts, vector or fused.")
    items: list[SearchHit]


class OperatorSearchHit(_Out):
    user_id: str
    path: str
    version: int
    kind: str
    text: str
    score: float


class OperatorSearchResults(_Out):
    query: str
    items: list[OperatorSearchHit]


# -- what the console reads beside the memory (routes/overview.py) -----------------------------------


class SizePoint(_Out):
    version: int
    created_at: datetime | None = None
    bytes: int = Field(description="The document's size as compact JSON.")


class DayFigures(_Out):
    day: str = Field(description="A UTC day (YYYY-MM-DD).")
    versions: int
    edits_applied: int = Field(description="Edits the daily summaries applied.")
    edits_refused: int = Field(description="Edits the daily summaries refused.")
    tokens: int = Field(description="LLM tokens of the daily summaries (prompt and completion).")
    prompt_tokens: int = Field(default=0, description="Of `tokens`: the prompts'.")
    completion_tokens: int = Field(default=0, description="Of `tokens`: the answers'.")
    cached_prompt_tokens: int = Field(default=0, description="Of `prompt_tokens`: served from the endpoint's cache.")
    cost_usd: float = Field(
        default=0.0, description="What the tokens cost, in USD, at the prices of the runs that spent them."
    )


class Stats(_Out):
    """The console's plots: sizes of the newest versions (at most 200), and figures per UTC day."""

    user_id: str
    days: int
    sizes: list[SizePoint]
    per_day: list[DayFigures]


class RunReport(_Out):
    """One run's totals over the versions it wrote (every user's version carrying the run key)."""

    run_key: str
    versions: int
    users: int = Field(description="Users the run wrote a version for.")
    first_written_at: datetime | None = None
    last_written_at: datetime | None = None
    activities: int = Field(description="Activities the versions summarized.")
    calls: int = Field(description="Model calls, retries included.")
    tokens: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    cost_usd: float = Field(description="What the tokens cost, in USD, at the run's prices.")
    edits_refused: int
    facts_restored: int
    facts_filled: int
    edits_applied: int = Field(default=0, description="Edits the run's summaries applied.")


class RunList(_Out):
    """Runs, newest version first, each with its totals; pass `next_after` as `after` for the next page."""

    items: list[RunReport]
    next_after: str | None = None


class RevertConflict(_Out):
    user_id: str
    paths: list[str] = Field(description="JSON Pointers the run changed that a later version also changed.")


class RevertFailure(_Out):
    user_id: str
    error: str = Field(description="The error's type and short reason.")


class RunRevert(_Out):
    """An undo of one run (for one user, or every user it wrote a version for), so far: its users by
    outcome, the conflicts with their paths and the failures (the first 100 of each)."""

    revert_id: str
    run_key: str
    user_id: str | None = Field(default=None, description="The one user undone; null: every user of the run.")
    requested_by: str | None = None
    created_at: datetime | None = None
    queued_at: datetime | None = Field(default=None, description="When it was last started (a resume included).")
    updated_at: datetime | None = None
    done: bool = Field(description="No user is pending.")
    users: int
    pending: int
    reverted: int = Field(description="Users given a new version that undoes the run's (or that had one already).")
    unchanged: int = Field(description="Users whose undo changed nothing.")
    conflict: int = Field(description="Users left untouched: a later version changed what the run changed.")
    failed: int
    conflicts: list[RevertConflict]
    failures: list[RevertFailure]


class KvNamespace(_Out):
    namespace: str
    entries: int = Field(description="Live entries.")
    updated_at: datetime | None = None
    next_expiry: datetime | None = Field(default=None, description="The soonest expiry among its entries.")


class KvNamespaces(_Out):
    """Namespaces holding live key-value entries (at most 1,000)."""

    user_id: str
    items: list[KvNamespace]


class ConversationSummary(_Out):
    conversation_id: str
    first_message_at: datetime | None = None
    last_message_at: datetime | None = None
    messages: int
    memory_through: int = Field(description="The last message the memory covers (0: none yet).")
    memory: dict[str, JsonValue] | None = None
    model: str | None = None
    memory_updated_at: datetime | None = None


class Conversations(_Out):
    """Conversations, newest message first; pass `next_after` as `after` for the next page."""

    user_id: str
    items: list[ConversationSummary]
    next_after: str | None = None


class DocumentProblem(_Out):
    path: str = Field(description="JSON Pointer of the field (empty: the whole document).")
    message: str


class DocumentCheck(_Out):
    """Whether a document would be accepted by PUT /me/memory, and why not (at most 50 problems)."""

    valid: bool
    problems: list[DocumentProblem]


class WebhookNew(_In):
    """A webhook endpoint to register: memory-changed events are POSTed to it, signed."""

    url: str = Field(
        min_length=1, max_length=2000, description="https (http only to localhost): where events are POSTed."
    )
    description: str = Field(default="", max_length=500)


class Webhook(_Out):
    """A webhook endpoint and its delivery state (never its secret)."""

    id: str
    url: str
    description: str
    enabled: bool
    disabled_reason: str | None = Field(
        default=None, description="Why it is disabled (persistent failure, an operator)."
    )
    failures: int = Field(description="Failed attempts in a row.")
    failing_since: datetime | None = None
    next_attempt_at: datetime | None = Field(default=None, description="The backoff: no attempt before then.")
    last_error: str | None = None
    last_delivered_at: datetime | None = None
    created_at: datetime


class WebhookCreated(_Out):
    """The new endpoint, and its signing secret: answered once, kept in Secrets Manager only."""

    webhook: Webhook
    secret: str = Field(description="The Standard Webhooks secret (whsec_...) the receiver verifies with.")


class Webhooks(_Out):
    webhooks: list[Webhook]


class WebhookDeleted(_Out):
    id: str
    deleted: bool


class ImportNew(_In):
    """An import to start: the user whose memory it writes (empty: an import never lands on a memory)."""

    user_id: str = Field(min_length=1, max_length=100, description="The user the export is written under (a UUID).")


class ImportJob(_Out):
    """An import of an export file (operators): `awaiting_upload` (PUT the file to `upload_url`, then
    POST .../start), `queued`, `running`, `done` (`versions`, `kv` written) or `failed` (`error_type`:
    `InvalidExport`, `ImportTargetNotEmpty`, ...; `upload_url` again, to start it over)."""

    id: str
    user_id: str
    status: Literal["awaiting_upload", "queued", "running", "done", "failed"]
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    versions: int | None = Field(default=None, description="Versions written (done).")
    kv: int | None = Field(default=None, description="Key-value entries written (done).")
    error_type: str | None = None
    error: str | None = None
    upload_url: str | None = Field(
        default=None,
        description="Where to PUT the export's JSON Lines (a pre-signed S3 URL, valid EXPORT_URL_SECONDS; locally a"
        " file path under EXPORT_DIR), while the file may be uploaded.",
    )

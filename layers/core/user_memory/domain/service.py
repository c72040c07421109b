"""One user's memory as the API, the MCP server and the agent loop see it.

`MemoryService` is bound to one user (the identity comes from the caller's token, never from a
request body) and to the ports of one unit of work: for the HTTP API, one database transaction
running as that user under row-level security. It adds to the store what a client needs: the
deployment's schema on every write, edits rebased onto the head unless the client names the
version it edits (If-Match), idempotency keys in the end users' namespace (`api:`), pruning,
the changes-since feed, export and erasure, key-value memory and the agent's tool calls.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol

from user_memory.domain.account import REQUESTED_BY_SELF, ErasureReceipt, ExportObjects, operator_requester
from user_memory.domain.companion import elements
from user_memory.domain.companion.ports import CompanionData
from user_memory.domain.companion.times import check_date, check_time
from user_memory.domain.conversations.model import (
    ExportedConversation,
    NewMessage,
    is_conversation_message,
    new_message,
)
from user_memory.domain.expiry import ExpiryPolicy, without_expired
from user_memory.domain.kv import DEFAULT_NAMESPACE, JsonValue, KvEntry, KvPage, KvStore
from user_memory.domain.memory.agent import execute_tool_call, forget
from user_memory.domain.memory.document import empty_document, get_schema, validate_document
from user_memory.domain.memory.patching import (
    PatchBudget,
    apply_patch,
    check_bounds,
    check_growth,
    json_equal,
    make_patch,
    merge_patch,
)
from user_memory.domain.memory.recent import NotedMemory, RecentMemories
from user_memory.domain.memory.render import RenderedPrompt, render_prompt
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    Activity,
    AppendResult,
    Document,
    HistoryEntry,
    MemoryVersion,
    Patch,
    WriteStatus,
    parse_user_id,
)
from user_memory.domain.ports import ActivityWriter
from user_memory.domain.summary.requests import check_activity
from user_memory.errors import (
    IdempotencyKeyReused,
    InvalidActivity,
    InvalidDocument,
    InvalidPatch,
    InvalidRequest,
    NotFound,
    PreconditionRequired,
    UnknownVersion,
    UserMemoryError,
    VersionConflict,
    WrongSchema,
)

# Edits without If-Match are re-applied to the new head when another writer got in first, at
# most this many times; then the conflict is reported (409).
MAX_REBASES = 5
MAX_IDEMPOTENCY_KEY_CHARS = 200
SOURCE_API = "api"
# The size plot: at most this many of the newest versions, measured within this many bytes of JSON.
MAX_SIZE_POINTS = 200
MAX_SIZE_BYTES_MEASURED = 16 * 1024 * 1024


class AccountData(Protocol):
    """What an export reads beside the memory's versions, and the erasure."""

    def activity(self, user_id: uuid.UUID) -> list[Activity]:
        """Every activity row of the user, oldest first."""
        ...

    def kv_entries(self, user_id: uuid.UUID) -> list[KvEntry]:
        """Every live key-value entry of the user, by namespace and key."""
        ...

    def conversations(self, user_id: uuid.UUID) -> list[ExportedConversation]:
        """Every conversation of the user with its messages and memory."""
        ...

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        """Delete every row of the user (history included) in one transaction; rows per relation."""
        ...

    def export_keys(self, user_id: uuid.UUID) -> list[str]:
        """The objects the user's export jobs wrote (S3 keys or local file names)."""
        ...

    def erase_with_receipt(self, user_id: uuid.UUID, requested_by: str, *, export_objects: int = 0) -> ErasureReceipt:
        """`erase`, answering the receipt it stored (an end user's names itself: `self`)."""
        ...


class SearchIndex(Protocol):
    """Search over the user's memory items (adapters/search.py)."""

    def search(self, user_id: uuid.UUID, query: str, k: int = 10, mode: Any = "auto") -> Any: ...

    def embed_pending(self, user_id: uuid.UUID, *, limit: int = 4096) -> Any: ...


class OverviewData(Protocol):
    """What the console reads beside the memory: per-day figures, namespaces, conversations."""

    def daily(self, user_id: uuid.UUID, since: datetime) -> list[dict[str, Any]]: ...

    def kv_namespaces(self, user_id: uuid.UUID, now: datetime) -> list[dict[str, Any]]: ...

    def conversations(
        self, user_id: uuid.UUID, *, limit: int, after: tuple[datetime, str] | None
    ) -> list[dict[str, Any]]: ...


class MessageWriter(Protocol):
    def record(self, messages: list[NewMessage]) -> int:
        """Store conversation messages; a repeat of (user_id, conversation_id, message_id) is ignored.
        Returns rows new."""
        ...


class Sessions(Protocol):
    """Opens one unit of work for one user: a MemoryService whose writes commit together or not at all."""

    def session(self, user_id: object, *, operator: str | None = None) -> AbstractContextManager[MemoryService]:
        """A service for `user_id`. With `operator` (who is acting), it runs with the service's
        rights (any user); without, as that end user (row-level security applies)."""
        ...


@dataclass(frozen=True, kw_only=True)
class Edit:
    """How a write was made: where it comes from, the client's key, and the version it edits."""

    source: str = SOURCE_API
    idempotency_key: str | None = None
    if_match: int | None = None
    # What the write does, recorded after the source in the version's source ("api: prune
    # summary"); the document's last_updated_by stays the source.
    action: str | None = None

    @property
    def recorded_source(self) -> str:
        return f"{self.source}: {self.action}" if self.action else self.source


@dataclass(frozen=True, kw_only=True)
class Changes:
    """The feed since a version: one patch from `since` to `version` (the head)."""

    since: int
    version: int
    patch: Patch


def idempotency_key(client_key: str | None) -> str | None:
    """The stored key for a client's Idempotency-Key header: `api:key:<key>`, inside the end users'
    `api:` namespace and apart from the agent's tool calls (`api:tool:<call id>`)."""
    if client_key is None:
        return None
    if not (1 <= len(client_key) <= MAX_IDEMPOTENCY_KEY_CHARS) or not client_key.isprintable():
        raise InvalidRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable characters")
    return f"api:key:{client_key}"


class MemoryService:
    """One user's memory document, key-value memory, activity and account, on one unit of work."""

    def __init__(
        self,
        *,
        user_id: object,
        store: MemoryStore,
        kv: KvStore,
        activity: ActivityWriter,
        account: AccountData,
        conversations: MessageWriter | None = None,
        companion: CompanionData | None = None,
        search: SearchIndex | None = None,
        overview: OverviewData | None = None,
        recent: RecentMemories | None = None,
        schema: str = "user_state",
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        require_if_match: bool = False,
        operator: str | None = None,
        exports: ExportObjects | None = None,
        expiry: ExpiryPolicy | None = None,
    ) -> None:
        get_schema(schema)  # an unknown schema fails here, not on the first write
        self.user_id = parse_user_id(user_id)
        self.store = store
        self.kv = kv
        self._activity = activity
        self._account = account
        self._conversations = conversations
        self._companion = companion
        self._search = search
        self._overview = overview
        self._recent = recent
        self.schema = schema
        self.max_document_bytes = max_document_bytes
        self.require_if_match = require_if_match
        self.operator = operator  # who acts with the service's rights (None: the end user itself)
        self._exports = exports
        self._expiry = expiry
        self.versions_written = 0  # new versions this unit of work wrote (their texts need embedding)

    # -- reads -----------------------------------------------------------------------------------

    def read(self, *, version: int | None = None, as_of: datetime | None = None) -> MemoryVersion:
        """The head, or the document at `version`, or as it was at `as_of` (not both)."""
        if version is not None and as_of is not None:
            raise InvalidRequest("ask for a version or a time (as_of), not both")
        if version is not None:
            return self.store.at(self.user_id, version)
        if as_of is not None:
            if as_of.tzinfo is None:
                raise InvalidRequest("as_of needs a time zone (for example 2026-11-23T10:00:00Z)")
            return self.store.as_of(self.user_id, as_of)
        return self.store.head(self.user_id)

    def history(self, *, limit: int = 50, before: int | None = None) -> tuple[list[HistoryEntry], int | None]:
        """A page of versions, newest first, and the cursor (`before`) of the next page or None."""
        if limit < 1:  # limit 0 would answer an empty page with a cursor, forever
            raise InvalidRequest("limit must be at least 1")
        if before is not None and before < 1:
            raise InvalidRequest("before must be a version of 1 or more")
        entries = self.store.history(self.user_id, limit=limit + 1, before_version=before)
        if len(entries) > limit:
            return entries[:limit], entries[limit - 1].version
        return entries, None

    def diff(self, from_version: int, to_version: int) -> Patch:
        """One RFC 6902 patch from `from_version` to `to_version` (either order)."""
        return self.store.diff(self.user_id, from_version, to_version)

    def changes_since(self, since: int) -> Changes:
        """One patch from version `since` to the head: what a cache holding `since` applies."""
        head = self.store.head(self.user_id)
        if since > head.version or since < 0:
            raise UnknownVersion(self.user_id, since, head.version)
        if since == head.version:
            return Changes(since=since, version=head.version, patch=[])
        old = self.store.at(self.user_id, since)
        return Changes(since=since, version=head.version, patch=make_patch(old.document, head.document))

    def stats(self, days: int, *, now: datetime | None = None) -> dict[str, Any]:
        """The console's plots: the size of the newest versions, and per UTC day of the last `days`
        the versions, the summaries' applied and refused edits, and their tokens."""
        overview = self._overview_data()
        since = (now or datetime.now(UTC)) - timedelta(days=days)
        sizes = self.store.sizes(self.user_id, points=MAX_SIZE_POINTS, byte_budget=MAX_SIZE_BYTES_MEASURED)
        return {
            "sizes": [{"version": v, "created_at": at, "bytes": size} for v, at, size in sizes],
            "days": overview.daily(self.user_id, since),
        }

    def kv_namespaces(self, *, now: datetime | None = None) -> list[dict[str, Any]]:
        """The namespaces holding live key-value entries, with their counts (at most 1,000)."""
        return self._overview_data().kv_namespaces(self.user_id, now or datetime.now(UTC))

    def conversation_list(self, *, limit: int, after: tuple[datetime, str] | None = None) -> list[dict[str, Any]]:
        """A page of conversations, newest message first, each with its memory (or none yet)."""
        return self._overview_data().conversations(self.user_id, limit=limit, after=after)

    def _overview_data(self) -> OverviewData:
        if self._overview is None:
            raise WrongSchema("this deployment keeps no overview (the in-memory kit)")
        return self._overview

    def prompt_view(self, document: Document) -> Document:
        """What a prompt may show of `document`: without what the deployment's expiry expired
        (the retention job records its removal later, as a version)."""
        if self._expiry is not None and self._expiry.active:
            return without_expired(document, self._expiry, datetime.now(UTC))
        return document

    def render(self, budget_tokens: int) -> str:
        """The head as a system-prompt block, with what was learned since the last summary (`prompt`)."""
        return self.prompt(budget_tokens)[1].text

    def prompt(self, budget_tokens: int, *, include_sensitive: bool = False) -> tuple[MemoryVersion, RenderedPrompt]:
        """The head and its system-prompt block (`render_prompt`): the document's lines, then the
        conversation memories' items no summary holds yet, marked as recent (domain/memory/recent.py)."""
        noted: list[NotedMemory] = []
        head = self.store.head(self.user_id)
        if self._recent is not None:
            # The noted memories as of the head read: a summary that committed in between (it moved
            # the head and marked what it took in) is seen by both reads once they name one version.
            for _ in range(3):
                noted, seen = self._recent.noted(self.user_id)
                if seen is None or seen == head.version:
                    break
                head = self.store.head(self.user_id)
        rendered = render_prompt(
            self.prompt_view(head.document),
            budget_tokens,
            schema=self.schema,
            include_sensitive=include_sensitive,
            recent=noted,
        )
        return head, rendered

    # -- writes ----------------------------------------------------------------------------------

    def apply_json_patch(self, patch: Patch, edit: Edit) -> AppendResult:
        """RFC 6902: the patch applied to the head (or to version If-Match), validated, as a new version.

        Its operations and pointers are checked before the head is read (PatchOverBounds), and the
        working document is held under twice the size limit while it applies (DocumentGrowsTooLarge)."""
        check_bounds(patch)

        def change(document: Document) -> Document:
            result = apply_patch(document, patch, budget=PatchBudget(2 * self.max_document_bytes))
            if not isinstance(result, dict):
                raise InvalidDocument("the patch turns the document into something other than a JSON object")
            return result

        return self._edit(change, edit)

    def apply_merge_patch(self, patch: Any, edit: Edit) -> AppendResult:
        """RFC 7396: the merge patch applied to the head (or to version If-Match), validated."""
        if not isinstance(patch, dict):
            raise InvalidPatch("a merge patch for a memory document must be a JSON object")

        def change(document: Document) -> Document:
            check_growth(document, patch, 2 * self.max_document_bytes)  # before the merge is built
            return merge_patch(document, patch)

        return self._edit(change, edit)

    def replace(self, document: Any, edit: Edit) -> AppendResult:
        """The whole document replaced, validated, as a new version."""
        if not isinstance(document, dict):
            raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
        return self._edit(lambda _head: document, edit)

    def revert(self, version: int, edit: Edit) -> AppendResult:
        """A new version whose document is version `version`'s; history keeps everything after it."""
        target = self.store.at(self.user_id, version).document
        return self._edit(lambda _head: target, edit, stamp=False)

    def prune(self, section: str | None, edit: Edit) -> AppendResult:
        """One section reset to its empty default, or every section (None), as a new version."""
        if section is None:
            return self._edit(lambda _head: empty_document(self.schema), edit)
        return self._edit(
            lambda document: forget(document, section, schema=self.schema, max_document_bytes=self.max_document_bytes),
            edit,
        )

    def tool_call(self, tool_call: Any) -> AppendResult:
        """An agent's `update_memory` / `forget_memory` call as a new version (source agent:<tool>)."""
        result = execute_tool_call(
            self.store, self.user_id, tool_call, schema=self.schema, max_document_bytes=self.max_document_bytes
        )
        if result.status is WriteStatus.WRITTEN:
            self.versions_written += 1
        return result

    def _edit(self, change: Callable[[Document], Document], edit: Edit, *, stamp: bool = True) -> AppendResult:
        if edit.if_match is None and self.require_if_match:
            raise PreconditionRequired("this deployment requires If-Match on every write: send the version you edit")
        key = edit.idempotency_key
        stamps = stamp and "last_updated_by" in get_schema(self.schema).model_fields
        for attempt in range(MAX_REBASES + 1):
            if key is not None:
                head, recorded = self.store.head_for_run(self.user_id, key)
                if recorded is not None:  # a repeat: the store answers with what the key wrote
                    self._check_repeat(change, edit, recorded, stamps=stamps)
                    return self.store.append(
                        self.user_id,
                        head.document,
                        expected_version=head.version,
                        source=edit.recorded_source,
                        idempotency_key=key,
                    )
            else:
                head = self.store.head(self.user_id)
            if edit.if_match is not None and head.version != edit.if_match:
                raise VersionConflict(self.user_id, edit.if_match, head.version)
            document = self._next_document(change, head.document, edit, stamps=stamps)
            try:
                result = self.store.append(
                    self.user_id,
                    document,
                    expected_version=head.version,
                    base=head,
                    source=edit.recorded_source,
                    idempotency_key=key,
                )
            except VersionConflict:
                if edit.if_match is not None or attempt == MAX_REBASES:
                    raise
            else:
                if result.status is WriteStatus.IDEMPOTENT:  # the key's write landed meanwhile (a race)
                    self._check_repeat(change, edit, result.version, stamps=stamps)
                if result.status is WriteStatus.WRITTEN:
                    self.versions_written += 1
                return result
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _next_document(
        self, change: Callable[[Document], Document], base: Document, edit: Edit, *, stamps: bool
    ) -> Document:
        document = validate_document(change(base), self.schema, max_bytes=self.max_document_bytes)
        if stamps and not json_equal(document, base):
            document["last_updated_by"] = edit.source
        return document

    def _check_repeat(self, change: Callable[[Document], Document], edit: Edit, recorded: int, *, stamps: bool) -> None:
        """A key's repeat must be the same request: applied to the version the key's write was made
        on (the one before it), it must give the version the key wrote. Another request under a used
        key is a client's bug; answering it as a replay would silently drop its edit."""
        written = self.store.at(self.user_id, recorded).document
        try:
            same = json_equal(
                self._next_document(change, self.store.at(self.user_id, recorded - 1).document, edit, stamps=stamps),
                written,
            )
        except UserMemoryError:  # the request does not even apply where the key's write did
            same = False
        if not same:
            raise IdempotencyKeyReused(
                f"this Idempotency-Key already wrote version {recorded} for another request; use a new key per edit"
            )

    # -- the companion layer: goals, to-dos, events, ratings, digest ---------------------------------

    def _companion_schema(self) -> CompanionData:
        if self.schema != "companion":
            raise WrongSchema(
                f"this deployment's memory schema is {self.schema!r}: goals, to-dos, events, ratings and digests "
                "need DOCUMENT_SCHEMA=companion"
            )
        if self._companion is None:
            raise WrongSchema("this deployment keeps no companion data")
        return self._companion

    def element(self, collection: str, element_id: str) -> tuple[dict[str, Any], int]:
        """One goal, to-do or event of the head, and the head's version (NotFound if absent)."""
        self._companion_schema()
        name = elements.check_collection(collection)
        head = self.store.head(self.user_id)
        found = (head.document.get(name) or {}).get(element_id)
        if not isinstance(found, dict):
            raise NotFound(f"no {name[:-1]} with this id")  # the id stays out of logs
        return found, head.version

    def create_element(self, collection: str, fields: Any, edit: Edit) -> tuple[str, AppendResult]:
        """A new goal, to-do or event (ElementExists when its id is taken) as a new version."""
        self._companion_schema()
        # With an Idempotency-Key and no id, the id comes from the key: a retry is the same
        # request (the same id), so it replays instead of being refused as another request.
        keyed = None
        if edit.idempotency_key is not None:
            keyed = hashlib.sha256(f"{self.user_id}:{collection}:{edit.idempotency_key}".encode()).hexdigest()[:12]
        element_id, change = elements.create(elements.check_collection(collection), fields, keyed)
        return element_id, self._edit(change, edit)

    def update_element(self, collection: str, element_id: str, fields: Any, edit: Edit) -> AppendResult:
        """The element's fields merged with `fields` (null removes one) as a new version."""
        self._companion_schema()
        return self._edit(elements.update(elements.check_collection(collection), element_id, fields), edit)

    def complete_element(self, collection: str, element_id: str, edit: Edit) -> AppendResult:
        """The element marked done (a to-do), completed (a goal, an event) as a new version."""
        self._companion_schema()
        return self._edit(elements.complete(elements.check_collection(collection), element_id), edit)

    def delete_element(self, collection: str, element_id: str, edit: Edit) -> AppendResult:
        """The element removed as a new version (history keeps it)."""
        self._companion_schema()
        return self._edit(elements.delete(elements.check_collection(collection), element_id), edit)

    def import_google_events(self, events: Any, edit: Edit) -> tuple[elements.ImportReport, AppendResult]:
        """A page of Google Calendar events imported as one version (see elements.import_google_events)."""
        self._companion_schema()
        report = elements.ImportReport()
        return report, self._edit(elements.import_google_events(events, report), edit)

    def todos_due(self, on: date | None = None) -> tuple[date, list[Any], list[Any]]:
        """Open to-dos overdue and due on `on` (the user's today in their time zone by default),
        from the item index: (day, overdue, due)."""
        companion = self._companion_schema()
        head = self.store.head(self.user_id)
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
        companion = self._companion_schema()
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
        companion = self._companion_schema()
        before = None if within_days is None else datetime.now(UTC) + timedelta(days=within_days)
        return companion.active_goals(self.user_id, target_before=before)

    def record_rating(self, rating: elements.Rating) -> str:
        """A feedback rating (episodic; summarized into the feedback element nightly)."""
        return self._companion_schema().record_rating(self.user_id, rating)

    def digest(self, day: date | None = None) -> dict[str, Any]:
        """The daily digest of `day`, or the latest (NotFound when none was made yet)."""
        found = self._companion_schema().digest(self.user_id, day)
        if found is None:
            raise NotFound("no digest yet" if day is None else f"no digest for {day.isoformat()}")
        return found

    def search(self, query: str, k: int = 10, mode: str = "auto") -> Any:
        """The user's memory items that best match `query` (adapters/search.py)."""
        if self._search is None:
            raise WrongSchema("this deployment has no search index")
        return self._search.search(self.user_id, query, k, mode)

    # -- activity, export, erasure -----------------------------------------------------------------

    def record_activity(self, items: Iterable[Activity]) -> tuple[int, int]:
        """Store the user's activity (every item must be this user's); (received, new).

        An activity of kind `message` whose payload names a `conversation_id` is a conversation
        message: it is stored with the user's conversation of that id (idempotent on the
        conversation and the message id, its external_id), not as activity. Conversation ids are
        the user's own: another user's conversation of the same id is another conversation.
        Every item is checked before any is stored: a forget request must name its part
        (InvalidActivity), and an end user never records a memory_reset (ResetNotAllowed;
        domain/summary/requests.py).
        """
        records = list(items)
        if any(a.user_id != self.user_id for a in records):
            raise InvalidRequest("activity can only be recorded for the caller")
        for n, a in enumerate(records, 1):
            try:  # an end user's own activity: never a trusted source (domain/summary/requests.py)
                check_activity(a.kind, a.payload, trusted=False)
            except InvalidActivity as err:
                raise InvalidActivity(f"activity {n}: {err}") from None
        messages = [
            new_message(
                user_id=a.user_id,
                occurred_at=a.occurred_at,
                payload=a.payload,
                source=a.source,
                external_id=a.external_id,
            )
            for a in records
            if is_conversation_message(a.kind, a.payload)
        ]
        activities = [a for a in records if not is_conversation_message(a.kind, a.payload)]
        if messages and self._conversations is None:
            raise InvalidRequest("this deployment keeps no conversations")
        new = self._activity.record(activities) if activities else 0
        if messages and self._conversations is not None:
            new += self._conversations.record(messages)
        return len(records), new

    def export(self) -> dict[str, Any]:
        """Everything stored about the user: every version, key-value entries, activity, conversations."""
        versions = list(self.store.versions(self.user_id))
        return {
            "user_id": str(self.user_id),
            "versions": versions,
            "kv": self._account.kv_entries(self.user_id),
            "activity": self._account.activity(self.user_id),
            "conversations": self._account.conversations(self.user_id),
            "ratings": self._companion.ratings(self.user_id) if self._companion is not None else [],
            "digests": self._companion.digests(self.user_id) if self._companion is not None else [],
        }

    def erase(self) -> ErasureReceipt:
        """Every row of the user removed, history included, in one transaction, and the export
        objects its jobs wrote; answers the receipt stored with the deletes.

        The objects go first: when the transaction then fails, the user is left with fewer
        copies, never with a copy the receipt says is gone."""
        keys = self._account.export_keys(self.user_id)
        deleted = self._exports.delete(keys) if self._exports is not None and keys else 0
        requested_by = operator_requester(self.operator) if self.operator else REQUESTED_BY_SELF
        return self._account.erase_with_receipt(self.user_id, requested_by, export_objects=deleted)

    # -- key-value memory ----------------------------------------------------------------------------

    def kv_list(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        limit: int = 100,
        after: str | None = None,
        prefix: str | None = None,
    ) -> KvPage:
        return self.kv.list(self.user_id, namespace, limit=limit, after_key=after, prefix=prefix)

    def kv_touch(self, namespace: str, keys: list[str]) -> list[str]:
        return self.kv.touch(self.user_id, namespace, keys)

    def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        return self.kv.get(self.user_id, namespace, key)

    def kv_put(self, namespace: str, key: str, value: JsonValue, ttl_seconds: int | None = None) -> KvEntry:
        return self.kv.put(self.user_id, namespace, key, value, ttl_seconds)

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self.kv.delete(self.user_id, namespace, key)

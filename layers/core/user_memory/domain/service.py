"""One user's memory document as the API, the MCP server and the agent loop see it.

`MemoryService` is bound to one user (the identity comes from the caller's token, never from a
request body) and to the ports of one unit of work: for the HTTP API, one database transaction
running as that user under row-level security. It adds to the store what a client needs: the
deployment's schema on every write, edits rebased onto the head unless the client names the
version it edits (If-Match), idempotency keys in the end users' namespace (`api:`), pruning,
the changes-since feed, the prompt and the agent's tool calls. The other features (key-value
memory, the companion, search, activity and the account, the console's figures) are services of
their own, built per request only when used (domain/session.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from user_memory.domain.expiry import ExpiryPolicy, without_expired
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
    AppendResult,
    Document,
    HistoryEntry,
    MemoryVersion,
    Patch,
    WriteStatus,
    parse_user_id,
)
from user_memory.errors import (
    IdempotencyKeyReused,
    InvalidDocument,
    InvalidPatch,
    InvalidRequest,
    PreconditionRequired,
    UnknownVersion,
    UserMemoryError,
    VersionConflict,
)

# Edits without If-Match are re-applied to the new head when another writer got in first, at
# most this many times; then the conflict is reported (409).
MAX_REBASES = 5
MAX_IDEMPOTENCY_KEY_CHARS = 200
SOURCE_API = "api"


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
    """One user's memory document on one unit of work: reads, edits (rebased or If-Match), the
    prompt and the agent's tool calls. The other features' services (domain/session.py) build on
    it where they write the document (the companion's elements)."""

    def __init__(
        self,
        *,
        user_id: object,
        store: MemoryStore,
        recent: RecentMemories | None = None,
        schema: str = "user_state",
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        require_if_match: bool = False,
        expiry: ExpiryPolicy | None = None,
    ) -> None:
        get_schema(schema)  # an unknown schema fails here, not on the first write
        self.user_id = parse_user_id(user_id)
        self.store = store
        self._recent = recent
        self.schema = schema
        self.max_document_bytes = max_document_bytes
        self.require_if_match = require_if_match
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

        return self.change(change, edit)

    def apply_merge_patch(self, patch: Any, edit: Edit) -> AppendResult:
        """RFC 7396: the merge patch applied to the head (or to version If-Match), validated."""
        if not isinstance(patch, dict):
            raise InvalidPatch("a merge patch for a memory document must be a JSON object")

        def change(document: Document) -> Document:
            check_growth(document, patch, 2 * self.max_document_bytes)  # before the merge is built
            return merge_patch(document, patch)

        return self.change(change, edit)

    def replace(self, document: Any, edit: Edit) -> AppendResult:
        """The whole document replaced, validated, as a new version."""
        if not isinstance(document, dict):
            raise InvalidDocument(f"a memory document must be a JSON object, got {type(document).__name__}")
        return self.change(lambda _head: document, edit)

    def revert(self, version: int, edit: Edit) -> AppendResult:
        """A new version whose document is version `version`'s; history keeps everything after it."""
        target = self.store.at(self.user_id, version).document
        return self.change(lambda _head: target, edit, stamp=False)

    def prune(self, section: str | None, edit: Edit) -> AppendResult:
        """One section reset to its empty default, or every section (None), as a new version."""
        if section is None:
            return self.change(lambda _head: empty_document(self.schema), edit)
        return self.change(
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

    def change(self, change: Callable[[Document], Document], edit: Edit, *, stamp: bool = True) -> AppendResult:
        """A change of the document (a function of the head) as a new version: validated, stamped,
        idempotent on the edit's key, rebased onto a newer head unless the edit names its version."""
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

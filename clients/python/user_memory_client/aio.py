"""The asynchronous client: `AsyncClient(base_url, token)`, the same calls as `Client`, awaited."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import date, datetime
from typing import Any, Literal, TypeVar

import httpx
from pydantic import JsonValue

from user_memory_client import models
from user_memory_client._operations import MERGE_PATCH, Call, activity_json, call, patch_call, replace_call
from user_memory_client._transport import AsyncToken, AsyncTransport, Retries
from user_memory_client.errors import PreconditionFailed, VersionConflict

__all__ = ["AsyncClient", "AsyncRebase"]

USER_AGENT = "user-memory-client/0.1"
M = TypeVar("M", bound=models.ApiModel)

# Given the head after a conflict, the edit to try again (None: give up); may be a coroutine function.
AsyncRebase = Callable[[models.Memory], Any | Awaitable[Any]]
SearchMode = Literal["auto", "fts", "vector", "fused"]


class _Resource:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def _run(self, c: Call, model: type[M]) -> M:
        return model.model_validate_json((await self._transport.send(c)).content)


class AsyncMemoryApi(_Resource):
    """The caller's memory document: read, follow, edit, search."""

    async def get(self, *, version: int | None = None, as_of: datetime | None = None) -> models.Memory:
        """The head, a past version, or the version current at a time."""
        return await self._run(call("memory.get", query={"version": version, "as_of": as_of}), models.Memory)

    async def history(self, *, limit: int = 50, before: int | None = None) -> models.History:
        """One page of versions, newest first."""
        return await self._run(call("memory.history", query={"limit": limit, "before": before}), models.History)

    async def iter_history(
        self, *, page_size: int = 50, before: int | None = None
    ) -> AsyncIterator[models.HistoryItem]:
        """Every version, newest first, page by page."""
        while True:
            page = await self.history(limit=page_size, before=before)
            for item in page.items:
                yield item
            if page.next_before is None:
                return
            before = page.next_before

    async def diff(self, from_version: int, to_version: int) -> models.Diff:
        """The RFC 6902 patch from one version to another."""
        return await self._run(call("memory.diff", query={"from": from_version, "to": to_version}), models.Diff)

    async def changes(self, since: int) -> models.Changes:
        """One patch from `since` to the head (`.version` is the next `since`)."""
        return await self._run(call("memory.changes", query={"since": since}), models.Changes)

    async def prompt(self, *, budget_tokens: int = 800) -> models.Prompt:
        """The head as a compact text block for a system prompt; then, marked recent, what conversations
        taught since the last summary (`.recent` counts those items)."""
        return await self._run(call("memory.prompt", query={"budget_tokens": budget_tokens}), models.Prompt)

    async def refresh(self) -> models.RefreshQueued:
        """Summarize the caller's pending activity now (run key ondemand:<time>): queued, or the refresh
        already queued within the deployment's minimum interval (`.status` says which)."""
        return await self._run(call("memory.refresh"), models.RefreshQueued)

    async def search(self, q: str, *, k: int = 10, mode: SearchMode = "auto") -> models.SearchResults:
        """The items of the memory that best match `q` (at most k, up to 100: one page)."""
        return await self._run(call("memory.search", query={"q": q, "k": k, "mode": mode}), models.SearchResults)

    async def patch(
        self,
        patch: Sequence[dict[str, Any]] | dict[str, Any],
        *,
        if_match: int | str | None = None,
        rebase: AsyncRebase | None = None,
        max_rebases: int = 3,
        idempotency_key: str | None = None,
    ) -> models.Written:
        """Edit: a list is an RFC 6902 JSON Patch, a dict an RFC 7396 merge patch.

        With `if_match` (a version) the edit applies only to that version: a stale one raises
        PreconditionFailed, or, with `rebase`, reads the head, asks rebase(head) for the edit to
        make instead (None: raise) and tries again on the head, up to `max_rebases` times.
        """
        return await self._edit(patch_call, patch, if_match, rebase, max_rebases, idempotency_key)

    async def replace(
        self,
        document: dict[str, Any],
        *,
        if_match: int | str | None = None,
        rebase: AsyncRebase | None = None,
        max_rebases: int = 3,
        idempotency_key: str | None = None,
    ) -> models.Written:
        """Replace the whole document (validated against the deployment's schema)."""

        return await self._edit(replace_call, document, if_match, rebase, max_rebases, idempotency_key)

    async def revert(
        self, version: int, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.Written:
        """A new version whose document is an older version's."""
        c = call("memory.revert", body={"version": version}, if_match=if_match, idempotency_key=idempotency_key)
        return await self._run(c, models.Written)

    async def prune(
        self, section: str | None = None, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.Written:
        """Empty one section (or all) as a new version; history keeps what was there."""
        c = call("memory.prune", query={"section": section}, if_match=if_match, idempotency_key=idempotency_key)
        return await self._run(c, models.Written)

    async def _edit(
        self,
        make: Callable[[Any, int | str | None, str | None], Call],
        body: Any,
        if_match: int | str | None,
        rebase: AsyncRebase | None,
        max_rebases: int,
        idempotency_key: str | None,
    ) -> models.Written:
        rebases = 0
        while True:
            try:
                return await self._run(make(body, if_match, idempotency_key), models.Written)
            except (PreconditionFailed, VersionConflict):
                if rebase is None or rebases >= max_rebases:
                    raise
                head = await self.get()
                body = rebase(head)
                if inspect.isawaitable(body):
                    body = await body
                if body is None:
                    raise
                rebases += 1
                if_match, idempotency_key = head.version, None  # a new edit: a new key


class AsyncKvApi(_Resource):
    """Key-value memory: JSON values by namespace and key, each with an optional time to live."""

    async def get(self, namespace: str, key: str) -> models.KvEntry:
        """One live entry (NotFound when there is none)."""
        return await self._run(call("kv.get", path={"namespace": namespace, "key": key}), models.KvEntry)

    async def put(
        self, namespace: str, key: str, value: JsonValue, *, ttl_seconds: int | None = None
    ) -> models.KvEntry:
        """Insert or replace an entry."""
        body = {"value": value, "ttl_seconds": ttl_seconds}
        return await self._run(call("kv.put", path={"namespace": namespace, "key": key}, body=body), models.KvEntry)

    async def delete(self, namespace: str, key: str) -> models.KvDeleted:
        """Delete an entry (NotFound when there was no live entry)."""
        return await self._run(call("kv.delete", path={"namespace": namespace, "key": key}), models.KvDeleted)

    async def touch(self, namespace: str, keys: Sequence[str]) -> models.KvTouched:
        """Keep entries with a TTL alive for their TTL again; the answer names those touched."""
        c = call("kv.touch", path={"namespace": namespace}, body={"keys": list(keys)})
        return await self._run(c, models.KvTouched)

    async def list(
        self, namespace: str, *, limit: int = 100, after: str | None = None, prefix: str | None = None
    ) -> models.KvPage:
        """One page of live entries in key order (only keys that start with `prefix`, if given)."""
        query = {"limit": limit, "after": after, "prefix": prefix}
        return await self._run(call("kv.list", path={"namespace": namespace}, query=query), models.KvPage)

    async def iter(
        self, namespace: str, *, prefix: str | None = None, page_size: int = 100
    ) -> AsyncIterator[models.KvEntry]:
        """Every live entry of a namespace in key order, page by page."""
        after = None
        while True:
            page = await self.list(namespace, limit=page_size, after=after, prefix=prefix)
            for item in page.items:
                yield item
            if page.next_after is None:
                return
            after = page.next_after


class AsyncActivityApi(_Resource):
    async def record(self, items: Sequence[models.ActivityItem | dict[str, Any]]) -> models.ActivityRecorded:
        """Record what happened to the user (repeats of (source, external_id) are ignored)."""
        body = {"items": [activity_json(i) for i in items]}
        return await self._run(call("activity.record", body=body), models.ActivityRecorded)


class AsyncAccountApi(_Resource):
    async def export(self) -> models.Export:
        """Everything stored about the user."""
        return await self._run(call("account.export"), models.Export)

    async def start_export(self) -> models.ExportJob:
        """Start an export of everything as JSON Lines (any size); poll `export_job(id)` until done."""
        return await self._run(call("account.start_export"), models.ExportJob)

    async def export_job(self, export_id: str) -> models.ExportJob:
        """One of the user's exports: its status and, once done, a pre-signed `url`."""
        return await self._run(call("account.export_job", path={"export_id": export_id}), models.ExportJob)

    async def erase(self) -> models.Erased:
        """Erase every row of the user, history included, and its finished exports; with the receipt."""
        return await self._run(call("account.erase"), models.Erased)


class AsyncAdminApi(_Resource):
    """Operators' calls (the token must hold the operator scope or group)."""

    async def start_export(self, user_id: str) -> models.ExportJob:
        """Start an export of any user as JSON Lines; poll `export_job(id)` until done."""
        return await self._run(call("admin.start_export", path={"user_id": user_id}), models.ExportJob)

    async def export_job(self, export_id: str) -> models.ExportJob:
        """Any export job: its status and, once done, a pre-signed `url`."""
        return await self._run(call("admin.export_job", path={"export_id": export_id}), models.ExportJob)

    async def erasures(
        self, *, limit: int = 50, after: str | None = None, user_id: str | None = None
    ) -> models.ErasureReceipts:
        """Erasure receipts, newest first (one user's, by id); `after`: the page before's `next`."""
        query = {"limit": limit, "after": after, "user_id": user_id}
        return await self._run(call("admin.erasures", query=query), models.ErasureReceipts)

    async def create_import(self, user_id: str) -> models.ImportJob:
        """A new import into the user's empty memory (ImportTargetNotEmpty otherwise): PUT the export
        file to its `upload_url`, then `start_import(id)`."""
        return await self._run(call("admin.create_import", body={"user_id": user_id}), models.ImportJob)

    async def start_import(self, import_id: str) -> models.ImportJob:
        """Import the uploaded file (queued, or done where the service has no queue); idempotent."""
        return await self._run(call("admin.start_import", path={"import_id": import_id}), models.ImportJob)

    async def import_job(self, import_id: str) -> models.ImportJob:
        """An import's state: what it wrote, or why it failed (`error_type`)."""
        return await self._run(call("admin.import_job", path={"import_id": import_id}), models.ImportJob)


class AsyncElementsApi(_Resource):
    """One collection of the companion layer (DOCUMENT_SCHEMA=companion): goals, to-dos or events.
    Each write is a new version of the memory (`if_match`, `idempotency_key` as for the memory)."""

    def __init__(self, transport: AsyncTransport, collection: str) -> None:
        super().__init__(transport)
        self.collection = collection

    async def create(
        self, fields: dict[str, Any], *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.ElementWritten:
        """A new element (an id is generated when `fields` has none; ElementExists when it is taken)."""
        c = call(f"{self.collection}.create", body=fields, if_match=if_match, idempotency_key=idempotency_key)
        return await self._run(c, models.ElementWritten)

    async def get(self, element_id: str) -> models.Element:
        return await self._run(call(f"{self.collection}.get", path={"element_id": element_id}), models.Element)

    async def update(
        self,
        element_id: str,
        fields: dict[str, Any],
        *,
        if_match: int | str | None = None,
        idempotency_key: str | None = None,
    ) -> models.ElementWritten:
        """An RFC 7396 merge of the element's fields (None removes a field)."""
        c = call(
            f"{self.collection}.update",
            path={"element_id": element_id},
            body=fields,
            content_type=MERGE_PATCH,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )
        return await self._run(c, models.ElementWritten)

    async def complete(
        self, element_id: str, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.ElementWritten:
        """Mark it done (a to-do) or completed (a goal, an event); again: nothing written."""
        c = call(
            f"{self.collection}.complete",
            path={"element_id": element_id},
            if_match=if_match,
            idempotency_key=idempotency_key,
        )
        return await self._run(c, models.ElementWritten)

    async def delete(
        self, element_id: str, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.ElementWritten:
        """Remove it as a new version (history keeps it)."""
        c = call(
            f"{self.collection}.delete",
            path={"element_id": element_id},
            if_match=if_match,
            idempotency_key=idempotency_key,
        )
        return await self._run(c, models.ElementWritten)


class AsyncGoalsApi(AsyncElementsApi):
    async def active(self, *, within_days: int | None = None) -> models.ActiveGoals:
        """Active goals, nearest target date first."""
        return await self._run(call("goals.active", query={"within_days": within_days}), models.ActiveGoals)


class AsyncTodosApi(AsyncElementsApi):
    async def due(self, *, on: date | None = None) -> models.TodosDue:
        """Open to-dos due on or before a day (the user's today by default), overdue first."""
        return await self._run(call("todos.due", query={"on": on}), models.TodosDue)


class AsyncEventsApi(AsyncElementsApi):
    async def between(self, start: datetime | str | None = None, end: datetime | None = None) -> models.EventsInRange:
        """Occurrences overlapping [start, end) (default: now and 7 days on); one answer, which may be
        cut short (`next_from`)."""
        return await self._run(call("events.between", query={"from": start, "to": end}), models.EventsInRange)

    async def iter_between(self, start: datetime, end: datetime) -> AsyncIterator[models.Occurrence]:
        """Every occurrence in [start, end), asking again from `next_from` while answers are cut short."""
        cursor: datetime | str = start
        while True:
            page = await self.between(cursor, end)
            for item in page.items:
                yield item
            if page.next_from is None or page.next_from == cursor:
                return
            cursor = page.next_from

    async def import_google(
        self,
        page: dict[str, Any] | list[dict[str, Any]],
        *,
        if_match: int | str | None = None,
        idempotency_key: str | None = None,
    ) -> models.EventsImported:
        """Import Google Calendar events (an event, a list, or an Events.list page) in one version."""
        c = call("events.import", body=page, if_match=if_match, idempotency_key=idempotency_key)
        return await self._run(c, models.EventsImported)


class AsyncCompanionApi(_Resource):
    """The companion layer: goals, to-dos, events, ratings, the daily digest."""

    def __init__(self, transport: AsyncTransport) -> None:
        super().__init__(transport)
        self.goals = AsyncGoalsApi(transport, "goals")
        self.todos = AsyncTodosApi(transport, "todos")
        self.events = AsyncEventsApi(transport, "events")

    async def rate(
        self,
        interaction_id: str,
        rating: int,
        *,
        tags: Sequence[str] = (),
        comment: str = "",
        rated_at: datetime | None = None,
    ) -> models.RatingRecorded:
        """Rate one interaction 1 to 5 (a repeat replaces it)."""
        body: dict[str, Any] = {"interaction_id": interaction_id, "rating": rating, "tags": list(tags)}
        body["comment"] = comment
        if rated_at is not None:
            body["rated_at"] = rated_at.isoformat()
        return await self._run(call("ratings.record", body=body), models.RatingRecorded)

    async def digest(self, *, day: date | None = None) -> models.Digest:
        """The daily digest the nightly run made (the latest by default)."""
        return await self._run(call("digest.get", query={"day": day}), models.Digest)


class AsyncRunsApi(_Resource):
    """Operators only (a token with the operator scope): runs and undoing one."""

    async def list(self, *, limit: int = 20, after: str | None = None) -> models.RunList:
        """One page of runs, the newest first, each with its totals."""
        return await self._run(call("runs.list", query={"limit": limit, "after": after}), models.RunList)

    async def get(self, run_key: str) -> models.RunReport:
        """One run's totals: users, versions, edits applied and refused, facts restored, tokens, cost."""
        return await self._run(call("runs.get", path={"run_key": run_key}), models.RunReport)

    async def revert(self, run_key: str, *, user_id: str | None = None) -> models.RunRevert:
        """Undo a run for every user it touched (or `user_id`) through the worker queue; again: resume."""
        c = call("runs.revert", path={"run_key": run_key}, query={"user_id": user_id})
        return await self._run(c, models.RunRevert)

    async def revert_status(self, revert_id: str) -> models.RunRevert:
        """An undo so far: users reverted, conflicts with their paths, failures, pending."""
        return await self._run(call("runs.revert_status", path={"revert_id": revert_id}), models.RunRevert)


class AsyncWebhooksApi(_Resource):
    """Operators (a token with the operator scope): endpoints that receive memory-changed events."""

    async def register(self, url: str, *, description: str = "") -> models.WebhookCreated:
        """A new endpoint; `.secret` (whsec_...) is answered once: the receiver verifies with it."""
        body = {"url": url, "description": description}
        return await self._run(call("webhooks.register", body=body), models.WebhookCreated)

    async def list(self) -> models.Webhooks:
        """Every endpoint with its state (a disabled one says why)."""
        return await self._run(call("webhooks.list"), models.Webhooks)

    async def get(self, webhook_id: str) -> models.Webhook:
        return await self._run(call("webhooks.get", path={"webhook_id": webhook_id}), models.Webhook)

    async def disable(self, webhook_id: str) -> models.Webhook:
        return await self._run(call("webhooks.disable", path={"webhook_id": webhook_id}), models.Webhook)

    async def enable(self, webhook_id: str) -> models.Webhook:
        """Send to it again, failures and backoff cleared."""
        return await self._run(call("webhooks.enable", path={"webhook_id": webhook_id}), models.Webhook)

    async def delete(self, webhook_id: str) -> models.WebhookDeleted:
        """The endpoint, its delivery marks and its secret."""
        return await self._run(call("webhooks.delete", path={"webhook_id": webhook_id}), models.WebhookDeleted)


class AsyncClient:
    """The user-memory API for one caller (the token's user).

    token: the bearer token, or a function or coroutine function returning it (called for every
    request, and again after a 401, so it can refresh). retries: how failures are retried (see
    `Retries`). http: an httpx.AsyncClient to use (its connection pool, proxies, certificates);
    closed by you, not here.
    """

    def __init__(
        self,
        base_url: str,
        token: AsyncToken,
        *,
        retries: Retries | None = None,
        http: httpx.AsyncClient | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._transport = AsyncTransport(
            base_url, token, retries=retries or Retries(), http=http, user_agent=user_agent
        )
        self.memory = AsyncMemoryApi(self._transport)
        self.kv = AsyncKvApi(self._transport)
        self.activity = AsyncActivityApi(self._transport)
        self.account = AsyncAccountApi(self._transport)
        self.webhooks = AsyncWebhooksApi(self._transport)
        self.admin = AsyncAdminApi(self._transport)
        self.companion = AsyncCompanionApi(self._transport)
        self.runs = AsyncRunsApi(self._transport)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

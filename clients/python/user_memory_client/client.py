"""The synchronous client: `Client(base_url, token)`, with `.memory`, `.kv`, `.activity`, `.account`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx
from pydantic import JsonValue

from user_memory_client import models
from user_memory_client._operations import Call, activity_json, call, patch_call, replace_call
from user_memory_client._transport import Retries, SyncTransport, Token
from user_memory_client.errors import PreconditionFailed, VersionConflict

__all__ = ["Client", "Rebase"]

USER_AGENT = "user-memory-client/0.1"
M = TypeVar("M", bound=models.ApiModel)

# Given the head after a conflict, the edit to try again (None: give up and raise the conflict).
Rebase = Callable[[models.Memory], Any]
SearchMode = Literal["auto", "fts", "vector", "fused"]


class _Resource:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def _run(self, c: Call, model: type[M]) -> M:
        return model.model_validate_json(self._transport.send(c).content)


class MemoryApi(_Resource):
    """The caller's memory document: read, follow, edit, search."""

    def get(self, *, version: int | None = None, as_of: datetime | None = None) -> models.Memory:
        """The head, a past version, or the version current at a time."""
        return self._run(call("memory.get", query={"version": version, "as_of": as_of}), models.Memory)

    def history(self, *, limit: int = 50, before: int | None = None) -> models.History:
        """One page of versions, newest first."""
        return self._run(call("memory.history", query={"limit": limit, "before": before}), models.History)

    def iter_history(self, *, page_size: int = 50, before: int | None = None) -> Iterator[models.HistoryItem]:
        """Every version, newest first, page by page."""
        while True:
            page = self.history(limit=page_size, before=before)
            yield from page.items
            if page.next_before is None:
                return
            before = page.next_before

    def diff(self, from_version: int, to_version: int) -> models.Diff:
        """The RFC 6902 patch from one version to another."""
        return self._run(call("memory.diff", query={"from": from_version, "to": to_version}), models.Diff)

    def changes(self, since: int) -> models.Changes:
        """One patch from `since` to the head (`.version` is the next `since`)."""
        return self._run(call("memory.changes", query={"since": since}), models.Changes)

    def prompt(self, *, budget_tokens: int = 800) -> models.Prompt:
        """The head as a compact text block for a system prompt."""
        return self._run(call("memory.prompt", query={"budget_tokens": budget_tokens}), models.Prompt)

    def search(self, q: str, *, k: int = 10, mode: SearchMode = "auto") -> models.SearchResults:
        """The items of the memory that best match `q` (at most k, up to 100: one page)."""
        return self._run(call("memory.search", query={"q": q, "k": k, "mode": mode}), models.SearchResults)

    def patch(
        self,
        patch: Sequence[dict[str, Any]] | dict[str, Any],
        *,
        if_match: int | str | None = None,
        rebase: Rebase | None = None,
        max_rebases: int = 3,
        idempotency_key: str | None = None,
    ) -> models.Written:
        """Edit: a list is an RFC 6902 JSON Patch, a dict an RFC 7396 merge patch.

        With `if_match` (a version) the edit applies only to that version: a stale one raises
        PreconditionFailed, or, with `rebase`, reads the head, asks rebase(head) for the edit to
        make instead (None: raise) and tries again on the head, up to `max_rebases` times.
        """
        return self._edit(patch_call, patch, if_match, rebase, max_rebases, idempotency_key)

    def replace(
        self,
        document: dict[str, Any],
        *,
        if_match: int | str | None = None,
        rebase: Rebase | None = None,
        max_rebases: int = 3,
        idempotency_key: str | None = None,
    ) -> models.Written:
        """Replace the whole document (validated against the deployment's schema)."""

        return self._edit(replace_call, document, if_match, rebase, max_rebases, idempotency_key)

    def revert(
        self, version: int, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.Written:
        """A new version whose document is an older version's."""
        c = call("memory.revert", body={"version": version}, if_match=if_match, idempotency_key=idempotency_key)
        return self._run(c, models.Written)

    def prune(
        self, section: str | None = None, *, if_match: int | str | None = None, idempotency_key: str | None = None
    ) -> models.Written:
        """Empty one section (or all) as a new version; history keeps what was there."""
        c = call("memory.prune", query={"section": section}, if_match=if_match, idempotency_key=idempotency_key)
        return self._run(c, models.Written)

    def _edit(
        self,
        make: Callable[[Any, int | str | None, str | None], Call],
        body: Any,
        if_match: int | str | None,
        rebase: Rebase | None,
        max_rebases: int,
        idempotency_key: str | None,
    ) -> models.Written:
        rebases = 0
        while True:
            try:
                return self._run(make(body, if_match, idempotency_key), models.Written)
            except (PreconditionFailed, VersionConflict):
                if rebase is None or rebases >= max_rebases:
                    raise
                head = self.get()
                body = rebase(head)
                if body is None:
                    raise
                rebases += 1
                if_match, idempotency_key = head.version, None  # a new edit: a new key


class KvApi(_Resource):
    """Key-value memory: JSON values by namespace and key, each with an optional time to live."""

    def get(self, namespace: str, key: str) -> models.KvEntry:
        """One live entry (NotFound when there is none)."""
        return self._run(call("kv.get", path={"namespace": namespace, "key": key}), models.KvEntry)

    def put(self, namespace: str, key: str, value: JsonValue, *, ttl_seconds: int | None = None) -> models.KvEntry:
        """Insert or replace an entry."""
        body = {"value": value, "ttl_seconds": ttl_seconds}
        return self._run(call("kv.put", path={"namespace": namespace, "key": key}, body=body), models.KvEntry)

    def delete(self, namespace: str, key: str) -> models.KvDeleted:
        """Delete an entry (NotFound when there was no live entry)."""
        return self._run(call("kv.delete", path={"namespace": namespace, "key": key}), models.KvDeleted)

    def touch(self, namespace: str, keys: Sequence[str]) -> models.KvTouched:
        """Keep entries with a TTL alive for their TTL again; the answer names those touched."""
        c = call("kv.touch", path={"namespace": namespace}, body={"keys": list(keys)})
        return self._run(c, models.KvTouched)

    def list(
        self, namespace: str, *, limit: int = 100, after: str | None = None, prefix: str | None = None
    ) -> models.KvPage:
        """One page of live entries in key order (only keys that start with `prefix`, if given)."""
        query = {"limit": limit, "after": after, "prefix": prefix}
        return self._run(call("kv.list", path={"namespace": namespace}, query=query), models.KvPage)

    def iter(self, namespace: str, *, prefix: str | None = None, page_size: int = 100) -> Iterator[models.KvEntry]:
        """Every live entry of a namespace in key order, page by page."""
        after = None
        while True:
            page = self.list(namespace, limit=page_size, after=after, prefix=prefix)
            yield from page.items
            if page.next_after is None:
                return
            after = page.next_after


class ActivityApi(_Resource):
    def record(self, items: Sequence[models.ActivityItem | dict[str, Any]]) -> models.ActivityRecorded:
        """Record what happened to the user (repeats of (source, external_id) are ignored)."""
        body = {"items": [activity_json(i) for i in items]}
        return self._run(call("activity.record", body=body), models.ActivityRecorded)


class AccountApi(_Resource):
    def export(self) -> models.Export:
        """Everything stored about the user."""
        return self._run(call("account.export"), models.Export)

    def erase(self) -> models.Erased:
        """Erase every row of the user, history included."""
        return self._run(call("account.erase"), models.Erased)


class Client:
    """The user-memory API for one caller (the token's user).

    token: the bearer token, or a callable returning it (called for every request, and again after
    a 401, so it can refresh). retries: how failures are retried (see `Retries`). http: an
    httpx.Client to use (its connection pool, proxies, certificates); closed by you, not here.
    """

    def __init__(
        self,
        base_url: str,
        token: Token,
        *,
        retries: Retries | None = None,
        http: httpx.Client | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._transport = SyncTransport(base_url, token, retries=retries or Retries(), http=http, user_agent=user_agent)
        self.memory = MemoryApi(self._transport)
        self.kv = KvApi(self._transport)
        self.activity = ActivityApi(self._transport)
        self.account = AccountApi(self._transport)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

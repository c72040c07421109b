"""A LangGraph store backed by user-memory's key-value memory: `UserMemoryStore(BaseStore)`.

LangGraph keeps an agent's long-term memory in a `BaseStore`: items (JSON objects) under a
namespace (a tuple of labels) and a key. Here the first label of every namespace is the user's id
and the rest, with the key, is one entry of that user's key-value memory:

    ("<user id>", "memories", "food"), "likes"  ->  /me/kv/langgraph/memories/food/likes
                                                     (kv namespace `langgraph`, one key)

Every request goes to the API as that user, with the token `token(user_id)` returns: the API's
row-level security keeps each user's items apart, the same as for any client. One store serves
many users (token is your IdP's token exchange, or `user-memory token` locally); a store for a
single end user's token is `UserMemoryStore(url, lambda _: token, users=[user_id])`. There are no
operator routes for the key-value memory, so an operator token is not a way in.

What LangGraph's stores do, this one does: put, get, delete; search by namespace prefix (at label
boundaries), with filters (equality, $eq, $ne, $gt, $gte, $lt, $lte, nested objects), newest
first, limit and offset; list_namespaces with prefix and suffix (`*` for one label), max_depth,
limit and offset; a TTL per item (minutes, whole seconds on the server) refreshed by reads unless
refresh_ttl is False. A `query` ranks the items by the share of its words found in the item
(there are no embeddings for key-value entries); every item stays in the answer, as with a vector
index. Search and list_namespaces read a user's entries under the prefix from the server and
filter them here, at most `max_items` of them (more: StoreLimitExceeded).

Limits are the key-value memory's: a value of at most 10,240 bytes as JSON; labels and key, each
escaped (`%`, `/` and control characters as %XX) and joined with `/`, at most 256 characters.
A refresh sets the entry's updated_at too (the server's touch), so reads move items up in a
search's newest-first order.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from user_memory_client import models
from user_memory_client._transport import Retries
from user_memory_client.aio import AsyncClient
from user_memory_client.client import Client
from user_memory_client.errors import NotFound, UserMemoryError

__all__ = ["StoreLimitExceeded", "UserMemoryStore"]

DEFAULT_KV_NAMESPACE = "langgraph"
MAX_KEY_CHARS = 256
MAX_TTL_SECONDS = 31_536_000
MAX_TOUCH_KEYS = 1_000
PAGE = 1_000
_ESCAPED = re.compile(r"[%/\x00-\x1f\x7f-\x9f]")
_WORDS = re.compile(r"\w+")

TokenFor = Callable[[str], str | Awaitable[str]]


class StoreLimitExceeded(UserMemoryError):
    """A search or a namespace listing would read more entries than the store's `max_items`."""


# -- namespaces and keys as key-value keys -----------------------------------------------------------


def _escape(label: str) -> str:
    return _ESCAPED.sub(lambda m: f"%{ord(m.group()):02X}", label)


def _unescape(text: str) -> str:
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


def encode_key(labels: tuple[str, ...], key: str) -> str:
    """The key-value key of an item: the namespace's labels after the user, then the key."""
    encoded = "".join(_escape(label) + "/" for label in labels) + _escape(key)
    if not key or len(encoded) > MAX_KEY_CHARS:
        raise InvalidNamespaceError(
            f"a namespace's labels and key take 1 to {MAX_KEY_CHARS} characters once escaped, got {len(encoded)}"
        )
    return encoded


def encode_prefix(labels: tuple[str, ...]) -> str | None:
    """The key prefix of every item whose namespace starts with `labels` (None: every item)."""
    return "".join(_escape(label) + "/" for label in labels) or None


def decode_key(user: str, encoded: str) -> tuple[tuple[str, ...], str]:
    *labels, key = encoded.split("/")
    return (user, *(_unescape(label) for label in labels)), _unescape(key)


# -- what a store's operation needs from the server (one generator per operation) --------------------


@dataclass(frozen=True)
class _Get:
    user: str
    key: str


@dataclass(frozen=True)
class _Put:
    user: str
    key: str
    value: dict[str, Any]
    ttl_seconds: int | None


@dataclass(frozen=True)
class _Delete:
    user: str
    key: str


@dataclass(frozen=True)
class _Touch:
    user: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class _ListAll:
    user: str
    prefix: str | None


_Need = _Get | _Put | _Delete | _Touch | _ListAll
_Plan = Generator[_Need, Any, Result]


class UserMemoryStore(BaseStore):
    """LangGraph's BaseStore over user-memory's key-value memory (see the module's docstring).

    base_url: the API. token: the bearer token for a user id (a function or coroutine function;
    called for each request, so it may refresh). users: the user ids that a search or listing
    without a user in front covers (a list, or a function returning one); without it such calls
    raise ValueError. kv_namespace: the key-value namespace the items live in. ttl: LangGraph's
    TTLConfig (default_ttl in minutes, refresh_on_read). max_items: the most entries one search or
    listing reads for one user.
    """

    supports_ttl = True

    def __init__(
        self,
        base_url: str,
        token: TokenFor,
        *,
        users: Iterable[str] | Callable[[], Iterable[str]] | None = None,
        kv_namespace: str = DEFAULT_KV_NAMESPACE,
        ttl: TTLConfig | None = None,
        retries: Retries | None = None,
        http: httpx.Client | None = None,
        max_items: int = 10_000,
    ) -> None:
        self.base_url = base_url
        self._token = token
        self._users = users
        self.kv_namespace = kv_namespace
        self.ttl_config = ttl
        self._retries = retries
        self._http = http or httpx.Client()
        self._owned = http is None
        self.max_items = max_items
        self._clients: dict[str, Client] = {}

    # -- BaseStore ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Each operation in order (a put is seen by the operations after it)."""
        return [self._drive(self._plan(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        async with httpx.AsyncClient() as http:
            clients: dict[str, AsyncClient] = {}
            return [await self._adrive(self._plan(op), clients, http) for op in ops]

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> UserMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one operation, as a plan of server calls ---------------------------------------------------

    def _plan(self, op: Op) -> _Plan:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValueError(f"unknown operation {type(op).__name__}")

    def _get(self, op: GetOp) -> _Plan:
        user, labels = _user_of(op.namespace)
        key = encode_key(labels, op.key)
        entry: models.KvEntry | None = yield _Get(user, key)
        if entry is None:
            return None
        if op.refresh_ttl and entry.expires_at is not None:
            yield _Touch(user, (key,))
        return _item(Item, user, entry)

    def _put(self, op: PutOp) -> _Plan:
        user, labels = _user_of(op.namespace)
        key = encode_key(labels, op.key)
        if op.value is None:
            yield _Delete(user, key)
        else:
            yield _Put(user, key, dict(op.value), _ttl_seconds(op.ttl))
        return None

    def _search(self, op: SearchOp) -> _Plan:
        found: list[tuple[SearchItem, models.KvEntry]] = []
        for user in self._users_for(op.namespace_prefix[:1]):
            entries = yield _ListAll(user, encode_prefix(op.namespace_prefix[1:]))
            found += [(_item(SearchItem, user, e), e) for e in entries]
        if op.filter:
            found = [(i, e) for i, e in found if all(_matches(i.value.get(k), v) for k, v in op.filter.items())]
        found.sort(key=lambda pair: pair[0].updated_at, reverse=True)
        if op.query:
            words = _words(op.query)
            for i, _ in found:
                i.score = len(words & _words(json.dumps(i.value, ensure_ascii=False))) / len(words) if words else 0.0
            found.sort(key=lambda pair: pair[0].score or 0.0, reverse=True)  # stable: newest first among equals
        page = found[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            by_user: dict[str, list[str]] = {}
            for i, entry in page:
                if entry.expires_at is not None:
                    by_user.setdefault(i.namespace[0], []).append(entry.key)
            for user, keys in by_user.items():
                for start in range(0, len(keys), MAX_TOUCH_KEYS):
                    yield _Touch(user, tuple(keys[start : start + MAX_TOUCH_KEYS]))
        return [i for i, _ in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> _Plan:
        conditions = op.match_conditions or ()
        prefix = next((c.path for c in conditions if c.match_type == "prefix"), ())
        leading = tuple(prefix[: next((i for i, p in enumerate(prefix) if p == "*"), len(prefix))])
        found: set[tuple[str, ...]] = set()
        for user in self._users_for(leading[:1]):
            entries = yield _ListAll(user, encode_prefix(leading[1:]))
            found |= {decode_key(user, e.key)[0] for e in entries}
        namespaces = [ns for ns in found if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = list({ns[: op.max_depth] for ns in namespaces})
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    def _users_for(self, first: tuple[str, ...]) -> list[str]:
        if first and first[0] != "*":
            return [first[0]]
        users = self._users() if callable(self._users) else self._users
        if users is None:
            raise ValueError(
                "this store reaches users one token at a time: start the namespace with the user's id, "
                "or give the store users=[...] to cover"
            )
        return list(users)

    # -- running a plan ----------------------------------------------------------------------------

    def _client(self, user: str) -> Client:
        client = self._clients.get(user)
        if client is None:
            client = Client(
                self.base_url, lambda: _sync_token(self._token, user), retries=self._retries, http=self._http
            )
            self._clients[user] = client
        return client

    def _drive(self, plan: _Plan) -> Result:
        try:
            need = next(plan)
            while True:
                need = plan.send(self._do(need))
        except StopIteration as done:
            return done.value

    def _do(self, need: _Need) -> Any:
        kv = self._client(need.user).kv
        if isinstance(need, _Get):
            try:
                return kv.get(self.kv_namespace, need.key)
            except NotFound:
                return None
        if isinstance(need, _Put):
            return kv.put(self.kv_namespace, need.key, need.value, ttl_seconds=need.ttl_seconds)
        if isinstance(need, _Delete):
            try:
                return kv.delete(self.kv_namespace, need.key)
            except NotFound:
                return None
        if isinstance(need, _Touch):
            return kv.touch(self.kv_namespace, need.keys)
        return self._bounded(kv.iter(self.kv_namespace, prefix=need.prefix, page_size=PAGE))

    async def _adrive(self, plan: _Plan, clients: dict[str, AsyncClient], http: httpx.AsyncClient) -> Result:
        try:
            need = next(plan)
            while True:
                client = clients.get(need.user)
                if client is None:
                    client = clients[need.user] = AsyncClient(
                        self.base_url, _async_token(self._token, need.user), retries=self._retries, http=http
                    )
                need = plan.send(await self._ado(client, need))
        except StopIteration as done:
            return done.value

    async def _ado(self, client: AsyncClient, need: _Need) -> Any:
        kv = client.kv
        if isinstance(need, _Get):
            try:
                return await kv.get(self.kv_namespace, need.key)
            except NotFound:
                return None
        if isinstance(need, _Put):
            return await kv.put(self.kv_namespace, need.key, need.value, ttl_seconds=need.ttl_seconds)
        if isinstance(need, _Delete):
            try:
                return await kv.delete(self.kv_namespace, need.key)
            except NotFound:
                return None
        if isinstance(need, _Touch):
            return await kv.touch(self.kv_namespace, need.keys)
        entries = []
        async for entry in kv.iter(self.kv_namespace, prefix=need.prefix, page_size=PAGE):
            entries.append(entry)
            self._check_bound(len(entries))
        return entries

    def _bounded(self, entries: Iterable[models.KvEntry]) -> list[models.KvEntry]:
        found = []
        for entry in entries:
            found.append(entry)
            self._check_bound(len(found))
        return found

    def _check_bound(self, count: int) -> None:
        if count > self.max_items:
            raise StoreLimitExceeded(
                f"more than {self.max_items:,} entries under this prefix for one user: narrow the namespace"
            )


# -- helpers -----------------------------------------------------------------------------------------


def _user_of(namespace: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    if not namespace:
        raise InvalidNamespaceError("a namespace starts with the user's id")
    return namespace[0], tuple(namespace[1:])


def _ttl_seconds(minutes: float | None) -> int | None:
    if minutes is None:
        return None
    if not isinstance(minutes, int | float) or isinstance(minutes, bool) or not math.isfinite(minutes) or minutes <= 0:
        raise ValueError("ttl is a positive number of minutes, or None")
    seconds = max(1, math.ceil(minutes * 60))
    if seconds > MAX_TTL_SECONDS:
        raise ValueError(f"ttl is at most {MAX_TTL_SECONDS // 60:,} minutes (365 days)")
    return seconds


def _item(cls: type[Item], user: str, entry: models.KvEntry) -> Any:
    namespace, key = decode_key(user, entry.key)
    value = entry.value if isinstance(entry.value, dict) else {"value": entry.value}
    return cls(namespace=namespace, key=key, value=value, created_at=entry.created_at, updated_at=entry.updated_at)


def _sync_token(token: TokenFor, user: str) -> str:
    value = token(user)
    if inspect.isawaitable(value):
        raise TypeError("the sync store needs a token function, not a coroutine function")
    return value


def _async_token(token: TokenFor, user: str) -> Callable[[], Awaitable[str]]:
    async def get() -> str:
        value = token(user)
        return await value if inspect.isawaitable(value) else value

    return get


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORDS.findall(text)}


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match: a prefix or suffix of labels, `*` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter on one field: equality (nested objects and lists compared field by field)
    or operators ($eq, $ne, $gt, $gte, $lt, $lte)."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, k, v) for k, v in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    compare = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}.get(operator)
    if compare is None:
        raise ValueError(f"unsupported filter operator {operator!r}")
    try:
        return bool(compare(float(value), float(operand)))
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field matches no comparison

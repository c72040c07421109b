"""Key-value memory (/me/kv): live entries by namespace and key, each with an optional time to live,
and the namespaces holding them."""

import urllib.parse
from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from user_memory.domain.kv import MAX_PAGE_SIZE
from user_memory.errors import NotFound
from user_memory.http import models, responses
from user_memory.http.context import me
from user_memory.http.openapi import responses as answers
from user_memory.http.problems import INVALID_INPUT, HttpProblem

router = Router()  # under /me/kv

Namespace = Annotated[str, Path(description="^[a-z0-9][a-z0-9_.-]{0,63}$ (`default` if unsure).")]
Key = Annotated[str, Path(description="1 to 256 characters, percent-encoded in the path.")]
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
After = Annotated[str | None, Query(min_length=1, max_length=256, description="The cursor: keys after this.")]
Prefix = Annotated[str | None, Query(min_length=1, max_length=256, description="Only keys that start with this.")]


@router.get("/", responses=answers(models.KvNamespaces), tags=["kv"])
def list_namespaces(request: Request) -> models.KvNamespaces:
    """The namespaces holding live key-value entries, with their counts."""
    with me(request) as session:
        return responses.namespaces(session.overview)


@router.get("/<namespace>", responses=answers(models.KvPage), tags=["kv"])
def list_kv(
    request: Request, namespace: Namespace, limit: PageSize = 100, after: After = None, prefix: Prefix = None
) -> models.KvPage:
    """Live entries of a namespace in key order, in pages (only keys that start with `prefix`, if given)."""
    with me(request) as session:
        page = session.kv.list(namespace, limit=limit, after=after, prefix=prefix)
    entries, next_after = responses.within_response_budget(page.entries, page.next_after_key)
    return models.KvPage(namespace=namespace, items=[responses.kv(e) for e in entries], next_after=next_after)


@router.get("/<namespace>/<key>", responses=answers(models.KvEntry), tags=["kv"])
def get_kv(request: Request, namespace: Namespace, key: Key) -> models.KvEntry:
    """One live entry."""
    key = _path_key(key)
    with me(request) as session:
        entry = session.kv.get(namespace, key)
    if entry is None:
        raise NotFound(f"no live entry with this key in namespace {namespace!r}")  # keys stay out of logs
    return responses.kv(entry)


@router.put("/<namespace>/<key>", responses=answers(models.KvEntry), tags=["kv"])
def put_kv(request: Request, namespace: Namespace, key: Key, put: Annotated[models.KvPut, Body()]) -> models.KvEntry:
    """Insert or replace an entry (value at most 10 KB as compact JSON; optional TTL)."""
    key = _path_key(key)
    with me(request) as session:
        return responses.kv(session.kv.put(namespace, key, put.value, put.ttl_seconds))


@router.post("/<namespace>/touch", responses=answers(models.KvTouched), tags=["kv"])
def touch_kv(request: Request, namespace: Namespace, touch: Annotated[models.KvTouch, Body()]) -> models.KvTouched:
    """Keep entries alive: each live entry with a time to live expires that long from now again
    (updated_at is now). Entries without an expiry, expired or missing are left alone."""
    with me(request) as session:
        touched = session.kv.touch(namespace, touch.keys)
    return models.KvTouched(namespace=namespace, keys=touched)


@router.delete("/<namespace>/<key>", responses=answers(models.KvDeleted), tags=["kv"])
def delete_kv(request: Request, namespace: Namespace, key: Key) -> models.KvDeleted:
    """Delete an entry; 404 when there was no live entry."""
    key = _path_key(key)
    with me(request) as session:
        deleted = session.kv.delete(namespace, key)
    if not deleted:
        raise NotFound(f"no live entry with this key in namespace {namespace!r}")  # keys stay out of logs
    return models.KvDeleted(namespace=namespace, key=key, deleted=True)


def _path_key(encoded: str) -> str:
    """A key-value key from its percent-encoded path segment; bytes that are not UTF-8 are a 422
    (decoded leniently, %ff and %fe would both be U+FFFD: one key silently overwriting another)."""
    try:
        return urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise HttpProblem(INVALID_INPUT, "the key is not percent-encoded UTF-8") from None

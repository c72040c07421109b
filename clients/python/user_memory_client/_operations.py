"""The API operations this client calls, declared once: method, path, parameters, bodies, answer.

Both clients build their requests from this table only, and tests/client/test_drift.py checks
every entry against the served OpenAPI document (the path and method exist, each query parameter,
header and body field is one the operation declares, the answer is the schema the model mirrors).
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from user_memory_client import models

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
EDIT_HEADERS = ("If-Match", "Idempotency-Key")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    answer: type[models.ApiModel]
    query: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    bodies: tuple[str, ...] = ()
    body_fields: tuple[str, ...] = ()  # the JSON object's fields, for a body with a schema of its own


OPERATIONS: dict[str, Operation] = {
    "memory.get": Operation("GET", "/me/memory", models.Memory, query=("version", "as_of")),
    "memory.history": Operation("GET", "/me/memory/history", models.History, query=("limit", "before")),
    "memory.diff": Operation("GET", "/me/memory/diff", models.Diff, query=("from", "to")),
    "memory.changes": Operation("GET", "/me/memory/changes", models.Changes, query=("since",)),
    "memory.prompt": Operation("GET", "/me/memory/prompt", models.Prompt, query=("budget_tokens",)),
    "memory.search": Operation("GET", "/me/memory/search", models.SearchResults, query=("q", "k", "mode")),
    "memory.refresh": Operation("POST", "/me/memory/refresh", models.RefreshQueued),
    "memory.patch": Operation(
        "PATCH", "/me/memory", models.Written, headers=EDIT_HEADERS, bodies=(JSON_PATCH, MERGE_PATCH)
    ),
    "memory.replace": Operation("PUT", "/me/memory", models.Written, headers=EDIT_HEADERS, bodies=(JSON,)),
    "memory.revert": Operation(
        "POST", "/me/memory/revert", models.Written, headers=EDIT_HEADERS, bodies=(JSON,), body_fields=("version",)
    ),
    "memory.prune": Operation("DELETE", "/me/memory", models.Written, query=("section",), headers=EDIT_HEADERS),
    "kv.list": Operation("GET", "/me/kv/{namespace}", models.KvPage, query=("limit", "after", "prefix")),
    "kv.get": Operation("GET", "/me/kv/{namespace}/{key}", models.KvEntry),
    "kv.put": Operation(
        "PUT", "/me/kv/{namespace}/{key}", models.KvEntry, bodies=(JSON,), body_fields=("value", "ttl_seconds")
    ),
    "kv.touch": Operation("POST", "/me/kv/{namespace}/touch", models.KvTouched, bodies=(JSON,), body_fields=("keys",)),
    "kv.delete": Operation("DELETE", "/me/kv/{namespace}/{key}", models.KvDeleted),
    "activity.record": Operation(
        "POST", "/me/activity", models.ActivityRecorded, bodies=(JSON,), body_fields=("items",)
    ),
    "account.export": Operation("GET", "/me/export", models.Export),
    "account.erase": Operation("DELETE", "/me", models.Erased),
    "account.start_export": Operation("POST", "/me/export", models.ExportJob),
    "account.export_job": Operation("GET", "/me/exports/{export_id}", models.ExportJob),
    # operators (the token holds the operator scope or group)
    "admin.start_export": Operation("POST", "/admin/users/{user_id}/export", models.ExportJob),
    "admin.export_job": Operation("GET", "/admin/exports/{export_id}", models.ExportJob),
    "admin.erasures": Operation("GET", "/admin/erasures", models.ErasureReceipts, query=("limit", "after", "user_id")),
    "admin.create_import": Operation(
        "POST", "/admin/imports", models.ImportJob, bodies=(JSON,), body_fields=("user_id",)
    ),
    "admin.start_import": Operation("POST", "/admin/imports/{import_id}/start", models.ImportJob),
    "admin.import_job": Operation("GET", "/admin/imports/{import_id}", models.ImportJob),
    # the companion layer
    "goals.active": Operation("GET", "/me/goals", models.ActiveGoals, query=("within_days",)),
    "todos.due": Operation("GET", "/me/todos/due", models.TodosDue, query=("on",)),
    "events.between": Operation("GET", "/me/events", models.EventsInRange, query=("from", "to")),
    "events.import": Operation(
        "POST", "/me/events/import", models.EventsImported, headers=EDIT_HEADERS, bodies=(JSON,)
    ),
    "ratings.record": Operation(
        "POST",
        "/me/ratings",
        models.RatingRecorded,
        bodies=(JSON,),
        body_fields=("interaction_id", "rating", "tags", "comment", "rated_at"),
    ),
    "digest.get": Operation("GET", "/me/digest", models.Digest, query=("day",)),
    # operators (the operator scope): runs and their undo
    "runs.list": Operation("GET", "/admin/runs", models.RunList, query=("limit", "after")),
    "runs.get": Operation("GET", "/admin/runs/{run_key}", models.RunReport),
    "runs.revert": Operation("POST", "/admin/runs/{run_key}/revert", models.RunRevert, query=("user_id",)),
    "runs.revert_status": Operation("GET", "/admin/run-reverts/{revert_id}", models.RunRevert),
    # operators: webhook endpoints of memory-changed events
    "webhooks.register": Operation(
        "POST", "/admin/webhooks", models.WebhookCreated, bodies=(JSON,), body_fields=("url", "description")
    ),
    "webhooks.list": Operation("GET", "/admin/webhooks", models.Webhooks),
    "webhooks.get": Operation("GET", "/admin/webhooks/{webhook_id}", models.Webhook),
    "webhooks.disable": Operation("POST", "/admin/webhooks/{webhook_id}/disable", models.Webhook),
    "webhooks.enable": Operation("POST", "/admin/webhooks/{webhook_id}/enable", models.Webhook),
    "webhooks.delete": Operation("DELETE", "/admin/webhooks/{webhook_id}", models.WebhookDeleted),
}
for _collection in ("goals", "todos", "events"):
    _item = f"/me/{_collection}/{{element_id}}"
    OPERATIONS |= {
        f"{_collection}.create": Operation(
            "POST", f"/me/{_collection}", models.ElementWritten, headers=EDIT_HEADERS, bodies=(JSON,)
        ),
        f"{_collection}.get": Operation("GET", _item, models.Element),
        f"{_collection}.update": Operation(
            "PATCH", _item, models.ElementWritten, headers=EDIT_HEADERS, bodies=(MERGE_PATCH,)
        ),
        f"{_collection}.complete": Operation("POST", f"{_item}/complete", models.ElementWritten, headers=EDIT_HEADERS),
        f"{_collection}.delete": Operation("DELETE", _item, models.ElementWritten, headers=EDIT_HEADERS),
    }


@dataclass
class Call:
    """One request to make (and to make again, unchanged, on a retry)."""

    operation: Operation
    path: str
    params: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def is_write(self) -> bool:
        return self.operation.method != "GET"


def call(
    name: str,
    *,
    path: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
    body: Any = None,
    content_type: str | None = None,
    if_match: int | str | None = None,
    idempotency_key: str | None = None,
) -> Call:
    """The request for operation `name`; writes carry an Idempotency-Key (a new one unless given)."""
    op = OPERATIONS[name]
    unknown = set(query or {}) - set(op.query)
    if unknown:  # a programming error of this package, caught by its tests
        raise ValueError(f"{name} takes no query parameter {sorted(unknown)}")
    url = op.path.format(**{k: urllib.parse.quote(v, safe="") for k, v in (path or {}).items()})
    params = {k: _text(v) for k, v in (query or {}).items() if v is not None}
    headers: dict[str, str] = {}
    content = None
    if body is not None:
        kind = content_type or JSON
        if kind not in op.bodies:
            raise ValueError(f"{name} takes no {kind} body")
        if op.body_fields and isinstance(body, dict) and not set(body) <= set(op.body_fields):
            raise ValueError(f"{name} takes no body field {sorted(set(body) - set(op.body_fields))}")
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        headers["Content-Type"] = kind
    if if_match is not None:
        headers["If-Match"] = etag(if_match)
    if op.method != "GET":
        headers["Idempotency-Key"] = idempotency_key or f"client:{uuid.uuid4()}"
    return Call(operation=op, path=url, params=params, content=content, headers=headers)


def etag(version: int | str) -> str:
    """An If-Match value: a version number, or an ETag as the API sent it ("7")."""
    if isinstance(version, bool):
        raise TypeError("if_match is a version number or an ETag")
    if isinstance(version, int):
        return f'"{version}"'
    return version if version.startswith('"') or version.startswith("W/") else f'"{version}"'


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("times need a zone (an aware datetime)")
        return value.isoformat()
    return str(value)


def patch_call(body: Any, if_match: int | str | None, key: str | None) -> Call:
    """PATCH /me/memory: a list is an RFC 6902 JSON Patch, a dict an RFC 7396 merge patch."""
    if isinstance(body, list | tuple):
        return call("memory.patch", body=list(body), content_type=JSON_PATCH, if_match=if_match, idempotency_key=key)
    if isinstance(body, dict):
        return call("memory.patch", body=body, content_type=MERGE_PATCH, if_match=if_match, idempotency_key=key)
    raise TypeError("a patch is a list of RFC 6902 operations or a merge-patch object")


def replace_call(body: Any, if_match: int | str | None, key: str | None) -> Call:
    return call("memory.replace", body=body, if_match=if_match, idempotency_key=key)


def activity_json(item: models.ActivityItem | dict[str, Any]) -> dict[str, Any]:
    if isinstance(item, dict):
        item = models.ActivityItem.model_validate(item)
    return models.dump(item)

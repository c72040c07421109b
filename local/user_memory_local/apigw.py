"""API Gateway HTTP API (payload format 2.0) events, as the JWT authorizer hands them to the function.

`user-memory serve` turns each HTTP request into one of these after checking the token itself,
and the tests build them to drive the API handler exactly as API Gateway would.
"""

from __future__ import annotations

import base64
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def _claim_text(value: Any) -> str:
    # The JWT authorizer passes claims as strings; arrays as "[a b]".
    if isinstance(value, list | tuple):
        return "[" + " ".join(str(v) for v in value) + "]"
    return str(value)


def http_event(
    method: str,
    path: str,
    *,
    query: str | Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    body: bytes | str | None = None,
    claims: Mapping[str, Any] | None = None,
    source_ip: str = "127.0.0.1",
    stage: str = "$default",
) -> dict[str, Any]:
    """One HTTP API v2 event. `path` is the raw (percent-encoded) path without the query string;
    `claims` are the verified token's (None: a route without an authorizer)."""
    if isinstance(query, Mapping):
        query = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
    query = query or ""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    params: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        params[name] = f"{params[name]},{value}" if name in params else value
    raw: bytes | None = body.encode() if isinstance(body, str) else body
    encoded = raw is not None and not _is_text(lowered.get("content-type", ""))
    now = datetime.now(UTC)
    request_id = str(uuid.uuid4())
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": lowered.get("host", "localhost"),
            "domainPrefix": "localhost",
            "http": {
                "method": method.upper(),
                "path": urllib.parse.unquote(path),
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": stage,
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(time.time() * 1000),
        },
        "isBase64Encoded": encoded,
    }
    if params:
        event["queryStringParameters"] = params
    if claims is not None:
        event["requestContext"]["authorizer"] = {
            "jwt": {"claims": {k: _claim_text(v) for k, v in claims.items()}, "scopes": None}
        }
    if raw is not None:
        event["body"] = base64.b64encode(raw).decode() if encoded else raw.decode()
    return event


def _is_text(content_type: str) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    return kind.startswith("text/") or kind.endswith("json") or kind.endswith("+json") or kind == ""

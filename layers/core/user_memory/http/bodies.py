"""Request bodies: checked once before routing, then read by the routes that take them.

POST and PUT bodies are JSON only (Powertools would parse forms and multipart bodies too, and
fail on a malformed one); PATCH routes check their own media types. A JSON body is parsed before
routing, once and strictly, so that what Powertools' parser or the service would fail on (deep
nesting, integers over Python's digit limit, NaN, base64 that is not UTF-8) is a 4xx, and what
PostgreSQL's text and jsonb cannot store (U+0000, lone surrogates, numbers over 1e308) is refused
before any transaction starts.
"""

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Request

from user_memory.domain.memory.patching import OPERATIONS, parse_pointer
from user_memory.domain.storable import unstorable
from user_memory.errors import InvalidPointer
from user_memory.http import models
from user_memory.http.problems import (
    INVALID_INPUT,
    INVALID_JSON,
    INVALID_PATCH,
    TOO_LARGE,
    UNSUPPORTED_MEDIA,
    HttpProblem,
)

_JSON_BODIES = {
    "POST": ("", "application/json"),
    "PUT": ("", "application/json"),
    "PATCH": (models.JSON_PATCH, models.MERGE_PATCH),
}
PARSED = "json_body"  # the resolver's context key of a body parsed before routing
UNPARSED = object()


def media_type(headers: Mapping[str, Any] | None) -> str:
    """The request's media type (Content-Type without parameters, lower-cased; "" when none)."""
    return str((headers or {}).get("content-type") or "").split(";")[0].strip().lower()


def check_body(event: dict[str, Any], max_bytes: int) -> tuple[HttpProblem | None, Any]:
    """What is wrong with a request's body before any route parses it (or None), and the body
    parsed (or UNPARSED when it was not read here)."""
    body = event.get("body")
    if not body:
        return None, UNPARSED
    method = str(((event.get("requestContext") or {}).get("http") or {}).get("method", "")).upper()
    content_type = media_type(event.get("headers"))
    if method in ("POST", "PUT") and content_type not in _JSON_BODIES["POST"]:
        return HttpProblem(UNSUPPORTED_MEDIA, f"{method} takes application/json"), UNPARSED
    if content_type not in _JSON_BODIES.get(method, ()):
        return None, UNPARSED  # PATCH answers 415 itself; other methods' bodies are never read
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode(errors="replace"))
    if size > max_bytes:
        return HttpProblem(TOO_LARGE, f"the body is over {max_bytes:,} bytes"), UNPARSED
    try:
        text = base64.b64decode(body).decode() if event.get("isBase64Encoded") else body
        parsed = json.loads(text, parse_constant=_refuse_constant)
    except (binascii.Error, UnicodeDecodeError):
        return HttpProblem(INVALID_JSON, "the body is not UTF-8 text"), UNPARSED
    except (ValueError, RecursionError) as err:
        return HttpProblem(INVALID_JSON, f"the body is not valid JSON ({type(err).__name__})"), UNPARSED
    reason = unstorable(parsed)
    return (HttpProblem(INVALID_INPUT, reason) if reason else None), parsed


def json_body(request: Request, limit: int) -> Any:
    """The body of a route that reads it itself (PATCH's media types), parsed once."""
    raw = request.resolved_event.decoded_body or ""
    if len(raw.encode()) > limit:
        raise HttpProblem(TOO_LARGE, f"the body is over {limit:,} bytes")
    if not raw.strip():
        raise HttpProblem(INVALID_JSON, "the body is empty")
    if PARSED in request.context:  # parsed and checked once, before routing
        return request.context[PARSED]
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as err:
        raise HttpProblem(INVALID_JSON, f"the body is not valid JSON ({type(err).__name__})") from None


def check_json_patch(body: Any) -> list[dict[str, Any]]:
    """The body as an RFC 6902 patch, its shape checked (HttpProblem invalid-patch when malformed)."""
    if not isinstance(body, list):
        raise HttpProblem(INVALID_PATCH, "a JSON Patch is an array of operations")
    for n, op in enumerate(body):
        if not isinstance(op, dict):
            raise HttpProblem(INVALID_PATCH, f"operation {n} is not an object")
        if op.get("op") not in OPERATIONS:
            raise HttpProblem(INVALID_PATCH, f"operation {n}: op must be one of {', '.join(sorted(OPERATIONS))}")
        if not isinstance(op.get("path"), str):
            raise HttpProblem(INVALID_PATCH, f"operation {n}: path must be a JSON Pointer string")
        needed = _NEEDS.get(op["op"])
        if needed == "value" and "value" not in op:
            raise HttpProblem(INVALID_PATCH, f"operation {n} ({op['op']}) needs a value")
        if needed == "from" and not isinstance(op.get("from"), str):
            raise HttpProblem(INVALID_PATCH, f"operation {n} ({op['op']}) needs from, a JSON Pointer string")
        # A pointer that is not one is a malformed patch (400), not one that fails to apply (409):
        # checked here because an end user's patch is applied by the database (migrations/015).
        for member in ("path", "from") if needed == "from" else ("path",):
            try:
                parse_pointer(op[member])
            except InvalidPointer as err:
                raise HttpProblem(INVALID_PATCH, f"operation {n}: {member}: {err}") from err
    return body


_NEEDS = {"add": "value", "replace": "value", "test": "value", "move": "from", "copy": "from"}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

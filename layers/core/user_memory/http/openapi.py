"""The OpenAPI wiring: what each route declares it answers, the committed document and its routes.

Powertools generates the document from the routes and models; this module adds what it cannot
say (PATCH's two media types, the bearer token, the answers API Gateway gives itself) and serves
the committed copy at `/openapi.json` (tests keep it equal to what the routes generate) and as
Swagger UI at `/swagger`, both without a token.
"""

import base64
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from user_memory.http import models
from user_memory.http.problems import ALL_KINDS

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.api_gateway import APIGatewayHttpResolver


class Routed(Protocol):
    """What the document is generated from: http/app.py's MemoryApi, named by its shape so that this
    module, which every router imports for its responses, imports nothing that imports the routers."""

    app: "APIGatewayHttpResolver"


API_TITLE = "user-memory"
API_VERSION = "1.0.0"

_PROBLEM_RESPONSES: dict[int, Any] = {
    status: {
        "description": " / ".join(k.title for k in ALL_KINDS if k.status == status),
        "content": {models.PROBLEM_JSON: {"model": models.Problem}},
    }
    for status in sorted({k.status for k in ALL_KINDS})
}
_ETAG = {"ETag": {"description": 'The version, quoted: "7".', "schema": {"type": "string"}}}
_REPLAYED = {
    "Idempotent-Replayed": {
        "description": "true when this answers a repeat of an Idempotency-Key (nothing was written).",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
_WRITES = (models.Written, models.ElementWritten, models.EventsImported)


def responses(model: type, *, etag: bool = False, status: int = 200) -> dict[int, Any]:
    """A route's answers for the document: `model` on 200 (or `status`: 202 for work queued; with
    ETag, and Idempotent-Replayed on writes, when `etag`), and a problem for every status a route
    can fail with."""
    description = "Accepted" if status == 202 else "OK"
    ok: dict[str, Any] = {"description": description, "content": {"application/json": {"model": model}}}
    if etag:
        ok["headers"] = {**_ETAG, **_REPLAYED} if model in _WRITES else _ETAG
    return {status: ok, **_PROBLEM_RESPONSES}


_PATCH_BODY = {
    "required": True,
    "content": {
        models.JSON_PATCH: {
            "schema": {"type": "array", "items": {"$ref": "#/components/schemas/PatchOperation"}},
        },
        models.MERGE_PATCH: {"schema": {"type": "object", "additionalProperties": True}},
    },
}

# A goal's, to-do's or event's update: an RFC 7396 merge of its fields (read by the route itself).
_ELEMENT_MERGE_BODY = {
    "required": True,
    "content": {models.MERGE_PATCH: {"schema": {"type": "object", "additionalProperties": True}}},
}
_ELEMENT_COLLECTIONS = ("goals", "todos", "events")

# What API Gateway answers itself, before or instead of the function, as {"message": "..."}
# (HTTP APIs cannot reshape these): a refused token, no route, a body over 10 MB, throttling, and a
# function that failed, timed out or was throttled.
_GATEWAY_ERROR = {
    "type": "object",
    "description": 'An answer of API Gateway itself, for example {"message": "Unauthorized"}.',
    "properties": {"message": {"type": "string"}},
    "required": ["message"],
}
_GATEWAY_ANSWERS = {
    "401": "API Gateway: the token is missing or invalid",
    "404": "API Gateway: no such route",
    "413": "API Gateway: the body is over 10 MB",
    "429": "API Gateway: throttled (ApiThrottlingBurstLimit, ApiThrottlingRateLimit); retry later",
    "500": "API Gateway: the function failed",
    "503": "API Gateway: the function is unavailable",
}


def openapi_document(api: Routed) -> dict[str, Any]:
    """The OpenAPI document generated from the routes and models, plus what Powertools cannot say:
    PATCH's media types and the bearer token every route but this document needs."""
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    text = api.app.get_openapi_json_schema(
        title=API_TITLE,
        version=API_VERSION,
        description=(
            "Read, edit, prune, revert and follow a user's versioned memory; key-value memory; activity. "
            "Identity comes from the bearer token's sub. Errors are RFC 9457 problem details."
        ),
        security_schemes={"bearer": HTTPBearer(bearerFormat="JWT")},
        security=[{"bearer": []}],
    )
    document = json.loads(text)
    document["paths"]["/me/memory"]["patch"]["requestBody"] = _PATCH_BODY
    for collection in _ELEMENT_COLLECTIONS:
        document["paths"][f"/me/{collection}/{{element_id}}"]["patch"]["requestBody"] = _ELEMENT_MERGE_BODY
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["PatchOperation"] = models.PatchOperation.model_json_schema(by_alias=True)
    schemas["GatewayError"] = _GATEWAY_ERROR
    gateway = {"schema": {"$ref": "#/components/schemas/GatewayError"}}
    for item in document["paths"].values():
        for operation in item.values():
            for status, description in _GATEWAY_ANSWERS.items():
                response = operation["responses"].setdefault(status, {"description": description})
                response.setdefault("content", {})["application/json"] = gateway
    return document


_OPENAPI_FILE = "openapi.json"


def openapi_text() -> str:
    """The committed OpenAPI document (tests keep it equal to what the routes generate)."""
    from importlib.resources import files

    return files("user_memory.http").joinpath(_OPENAPI_FILE).read_text(encoding="utf-8")


def render_openapi(api: Routed) -> str:
    """The OpenAPI document as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(openapi_document(api), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@functools.cache
def swagger_page() -> tuple[str, str]:
    """Swagger UI over the committed document, and the Content-Security-Policy that lets exactly its
    inline script and style run.

    Powertools' page (`enable_swagger`'s generator) with the Swagger UI assets Powertools bundles,
    inlined (nothing from a CDN), built on first use. Not `enable_swagger` itself: it imports
    Powertools' OpenAPI models when the API is built (0.07-0.2 s of every cold start, measured) and
    shows the document it generates, not the committed one (PATCH's media types and API Gateway's
    own answers would be missing). The token a reader authorizes with stays in the page: never
    persisted (persistAuthorization would keep it in localStorage, for any script of the origin)."""
    from aws_lambda_powertools.event_handler.openapi import swagger_ui

    assets = Path(swagger_ui.__file__).parent
    page = swagger_ui.generate_swagger_html(
        openapi_text().replace("</", "<\\/"),  # the document sits in a <script>: never close it early
        (assets / "swagger-ui-bundle.min.js").read_text(encoding="utf-8"),
        (assets / "swagger-ui.min.css").read_text(encoding="utf-8"),
        "",
        None,
        persist_authorization=False,
    )
    return page, _swagger_policy(page)


def _swagger_policy(page: str) -> str:
    """Only the page's own inline scripts and styles (by hash), calls to this origin, no framing."""

    def hashes(tag: str) -> str:
        blocks = re.findall(f"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

    return (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    )


router = Router()


@router.get("/openapi.json", include_in_schema=False)
def openapi() -> Response[str]:
    return Response(200, "application/json", openapi_text())


@router.get("/swagger", include_in_schema=False, compress=True)
def swagger() -> Response[str]:
    """Swagger UI (try the routes with a token: Authorize, then the bearer token); `?format=json`
    answers the document, as Powertools' Swagger route does."""
    if (router.current_event.query_string_parameters or {}).get("format") == "json":
        return Response(200, "application/json", openapi_text())
    page, policy = swagger_page()
    headers = {"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
    return Response(200, "text/html; charset=utf-8", page, headers=headers)

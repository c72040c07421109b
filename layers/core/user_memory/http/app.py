"""The memory API: Powertools' HTTP resolver over `MemoryService`, one transaction per request.

Identity comes only from the verified token (`sub`); `/me/...` is the caller's data, a path that
names a user (`/users/{user_id}/...`) is the caller's own path or a 403, and `/admin/users/...`
is for operators. Each request's database work runs in one transaction, as the end user under
row-level security (operators: with the service's rights, and logged with who acted).
Errors are RFC 9457 problem details (`problems.py`).
"""

import base64
import binascii
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal, Protocol, TypeVar, runtime_checkable

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from user_memory.adapters.http_deadline import invocation_left, within
from user_memory.config import ApiSettings
from user_memory.domain.agent import render_memory
from user_memory.domain.conversations import ExportedConversation, TriggerReport
from user_memory.domain.elements import Rating
from user_memory.domain.kv import MAX_PAGE_SIZE, KvEntry
from user_memory.domain.messages import MAX_MESSAGE_BYTES
from user_memory.domain.model import AppendResult, HistoryEntry, MemoryVersion
from user_memory.domain.service import Edit, MemoryService, Sessions, idempotency_key
from user_memory.errors import Forbidden, InvalidRequest, NotFound, SendFailed, WrongSchema, describe_failure
from user_memory.http import models
from user_memory.http.auth import Caller, caller_from_claims
from user_memory.http.problems import (
    ALL_KINDS,
    BAD_REQUEST,
    FORBIDDEN,
    INTERNAL,
    INVALID_INPUT,
    INVALID_JSON,
    INVALID_PATCH,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    TOO_LARGE,
    UNSUPPORTED_MEDIA,
    HttpProblem,
    Kind,
    detail_of,
    kind_of,
    problem_document,
)
from user_memory.observability import logger, metrics

T = TypeVar("T")

API_TITLE = "user-memory"
API_VERSION = "1.0.0"
MAX_RENDER_BUDGET = 32_000
MAX_VERSION = 2**31 - 1  # versions are PostgreSQL integers
MAX_PAGE_RESPONSE_BYTES = 4 * 1024 * 1024  # well within a Lambda response (6 MB)

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
_USER_PATH = re.compile(r"^/users/(?P<user>[^/]+)(?P<rest>/.*)?$")
_IF_MATCH = re.compile(r'^(?:W/)?"?([0-9]{1,9})"?$')
# Deeper JSON than this is refused before any route parses it: the service's diff, merge and
# validation recurse once per level (a few hundred levels answered 500), and no document, patch,
# key-value entry or activity of this API nests anywhere near it.
MAX_JSON_DEPTH = 100
_JSON_BODIES = {
    "POST": ("", "application/json"),
    "PUT": ("", "application/json"),
    "PATCH": (models.JSON_PATCH, models.MERGE_PATCH),
}


def _responses(model: type, *, etag: bool = False) -> dict[int, Any]:
    ok: dict[str, Any] = {"description": "OK", "content": {"application/json": {"model": model}}}
    if etag:
        writes = (models.Written, models.ElementWritten, models.EventsImported)
        ok["headers"] = {**_ETAG, **_REPLAYED} if model in writes else _ETAG
    return {200: ok, **_PROBLEM_RESPONSES}


_UNPARSED = object()


def _check_body(event: dict[str, Any], max_bytes: int) -> tuple[HttpProblem | None, Any]:
    """What is wrong with a request's body before any route parses it (or None), and the body
    parsed (or _UNPARSED when it was not read here).

    POST and PUT bodies are JSON only (Powertools would parse forms and multipart bodies too,
    and fail on a malformed one); PATCH checks its two media types itself. A JSON body is parsed
    here once, strictly, so that what Powertools' parser or the service would fail on (deep
    nesting, integers over Python's digit limit, NaN, base64 that is not UTF-8) is a 4xx, and
    what PostgreSQL's text and jsonb cannot store (U+0000, lone surrogates, numbers over 1e308)
    is refused before any transaction starts.
    """
    body = event.get("body")
    if not body:
        return None, _UNPARSED
    method = str(((event.get("requestContext") or {}).get("http") or {}).get("method", "")).upper()
    content_type = str((event.get("headers") or {}).get("content-type", "")).split(";")[0].strip().lower()
    if method in ("POST", "PUT") and content_type not in _JSON_BODIES["POST"]:
        return HttpProblem(UNSUPPORTED_MEDIA, f"{method} takes application/json"), _UNPARSED
    if content_type not in _JSON_BODIES.get(method, ()):
        return None, _UNPARSED  # PATCH answers 415 itself; other methods' bodies are never read
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode(errors="replace"))
    if size > max_bytes:
        return HttpProblem(TOO_LARGE, f"the body is over {max_bytes:,} bytes"), _UNPARSED
    try:
        text = base64.b64decode(body).decode() if event.get("isBase64Encoded") else body
        parsed = json.loads(text, parse_constant=_refuse_constant)
    except (binascii.Error, UnicodeDecodeError):
        return HttpProblem(INVALID_JSON, "the body is not UTF-8 text"), _UNPARSED
    except (ValueError, RecursionError) as err:
        return HttpProblem(INVALID_JSON, f"the body is not valid JSON ({type(err).__name__})"), _UNPARSED
    reason = _unstorable(parsed)
    return (HttpProblem(INVALID_INPUT, reason) if reason else None), parsed


def _unstorable(value: Any) -> str | None:
    """Why a parsed JSON body cannot be taken (too deep, or holding what jsonb cannot store), or None."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"the body is nested more than {MAX_JSON_DEPTH} levels deep"
            if isinstance(node, dict):
                for key in node:
                    if reason := _unstorable_text(key):
                        return reason
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
        elif isinstance(node, str):
            if reason := _unstorable_text(node):
                return reason
        elif isinstance(node, float) and not math.isfinite(node):
            return "numbers in the body must be finite (at most about 1.8e308)"
    return None


def _unstorable_text(text: str) -> str | None:
    if "\x00" in text:
        return "strings in the body may not contain U+0000 (\\u0000)"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "strings in the body must be Unicode text (a lone surrogate such as \\ud800 is not)"
    return None


def _etag(version: int) -> str:
    return f'"{version}"'


def parse_if_match(value: str | None) -> int | None:
    """The version an If-Match header names ("7", W/"7", 7), or None for no header or `*`."""
    if value is None or value.strip() == "*":
        return None
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses: a 500) and other scripts' digits.
    match = _IF_MATCH.match(value.strip())
    if match is None:
        raise HttpProblem(BAD_REQUEST, 'If-Match must be the version as an ETag, for example "7"')
    return int(match.group(1))


def _memory(user_id: object, v: MemoryVersion) -> models.Memory:
    # Built without validation (a hot path): what the store returns is JSON it parsed itself,
    # documents were validated when written, and tests check every response against the
    # OpenAPI document.
    return models.Memory.model_construct(
        user_id=str(user_id), version=v.version, document=v.document, created_at=v.created_at, source=v.source
    )


def _history_item(e: HistoryEntry) -> models.HistoryItem:
    return models.HistoryItem.model_construct(  # from stored rows: see _memory
        version=e.version,
        created_at=e.created_at,
        source=e.source,
        operations=len(e.patch),
        change_bytes=len(json.dumps(e.patch, separators=(",", ":"), ensure_ascii=False).encode()),
        checkpoint=e.is_checkpoint,
        provenance=e.provenance,
    )


def _kv(e: KvEntry) -> models.KvEntry:
    return models.KvEntry(
        namespace=e.namespace,
        key=e.key,
        value=e.value,
        created_at=e.created_at,
        updated_at=e.updated_at,
        expires_at=e.expires_at,
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _element_written(
    user_id: object, collection: str, element_id: str, result: AppendResult
) -> Response[models.ElementWritten]:
    element = (result.document.get(collection) or {}).get(element_id) if isinstance(result.document, dict) else None
    body = models.ElementWritten(
        user_id=str(user_id),
        collection=collection,  # type: ignore[arg-type]
        id=element_id,
        status=result.status.value,
        version=result.version,
        element=element,
    )
    return Response(status_code=200, content_type="application/json", body=body, headers=_write_headers(result))


def _indexed(row: Any) -> models.IndexedElement:
    return models.IndexedElement(path=row.path, version=row.version, element=row.value)


def _write_headers(result: AppendResult) -> dict[str, str]:
    """A write's headers: the version as ETag, and Idempotent-Replayed on a key's repeat."""
    headers = {"ETag": _etag(result.version)}
    if result.status == "idempotent":
        headers["Idempotent-Replayed"] = "true"
    return headers


def _written(user_id: object, result: AppendResult) -> Response[models.Written]:
    body = models.Written.model_construct(
        user_id=str(user_id),
        status=result.status.value,
        version=result.version,
        document=result.document,
        patch=result.patch,
    )
    return Response(status_code=200, content_type="application/json", body=body, headers=_write_headers(result))


@runtime_checkable
class Tasks(Protocol):
    """What operators can start through the API besides reading and erasing users."""

    def trigger_memory_generation(self, threshold_minutes: int | None = None) -> TriggerReport: ...


class MemoryApi:
    """The resolver and its routes, over a Sessions (PostgreSQL in Lambda and `serve`).

    One event at a time per process: Powertools keeps the event being answered in a class
    attribute shared by every resolver, so a threaded server must serialize `resolve` (as
    `user-memory serve` does) or requests would read each other's claims.
    """

    def __init__(self, sessions: Sessions, settings: ApiSettings, tasks: Tasks | None = None) -> None:
        self.sessions = sessions
        self.settings = settings
        self.tasks = tasks
        self.app = APIGatewayHttpResolver(enable_validation=True)
        self._register()

    # -- plumbing --------------------------------------------------------------------------------

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway HTTP API v2 event; every outbound call it makes (embeddings)
        ends before the invocation's deadline minus DEADLINE_MARGIN_MS."""
        with within(invocation_left(context, self.settings.deadline_margin_ms / 1000)):
            return self._resolve(event, context)

    def _resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        match = _USER_PATH.match(event.get("rawPath") or "")
        if match:  # /users/{user_id}/...: the caller's own data under another name, or 403
            try:
                caller = self._caller_from(event)
                if match.group("user") != str(caller.user_id) and match.group("user") != caller.subject:
                    raise Forbidden("a path that names a user is only open to that user; use /me")
            except Exception as err:  # noqa: BLE001 - answered as a problem like any route's error
                return self._problem_event(err, event)
            event = {**event, "rawPath": "/me" + (match.group("rest") or "")}
            event["routeKey"] = "$default"
        problem, parsed = _check_body(event, max(2 * self.settings.max_document_bytes, MAX_MESSAGE_BYTES))
        if problem is not None:
            try:
                self._caller_from(event)  # no credentials: 401 first, as for any route
                raise problem
            except Exception as err:  # noqa: BLE001 - answered as a problem like any route's error
                return self._problem_event(err, event)
        if parsed is not _UNPARSED:  # a route that reads the body itself (PATCH) takes it from here
            self.app.append_context(json_body=parsed)
        return self.app.resolve(event, context)

    def _caller_from(self, event: dict[str, Any]) -> Caller:
        claims = (((event.get("requestContext") or {}).get("authorizer") or {}).get("jwt") or {}).get("claims")
        return caller_from_claims(claims, operator_scope=self.settings.operator_scope)

    def _caller(self) -> Caller:
        return caller_from_claims(
            self.app.current_event.request_context.authorizer.jwt_claim,
            operator_scope=self.settings.operator_scope,
        )

    @contextmanager
    def _me(self) -> Iterator[MemoryService]:
        caller = self._caller()
        self.app.append_context(user_id=str(caller.user_id))
        with self.sessions.session(caller.user_id) as service:
            yield service

    @contextmanager
    def _operator(self, user_id: str, action: str) -> Iterator[MemoryService]:
        caller = self._operator_caller(action, user_id)
        with self.sessions.session(user_id, operator=caller.subject) as service:
            yield service

    def _operator_caller(self, action: str, user_id: str | None = None) -> Caller:
        """The caller, when it holds the operator scope or group (else Forbidden); the action is logged."""
        caller = self._caller()
        if not caller.operator:
            raise Forbidden(f"operator routes need the {self.settings.operator_scope!r} scope or group")
        if user_id is not None:
            self.app.append_context(user_id=user_id)
        logger.info(
            "operator action", operator=caller.subject, user_id=user_id, action=action, request_id=self._request_id()
        )
        metrics.add_metric(name="OperatorActions", unit="Count", value=1)
        return caller

    def _request_id(self) -> str | None:
        try:
            return self.app.current_event.request_context.request_id
        except (KeyError, AttributeError, TypeError):
            return None

    def _edit(self, if_match: str | None, key: str | None, *, source: str = "api") -> Edit:
        version = parse_if_match(if_match)
        self.app.append_context(if_match=version is not None)
        return Edit(source=source, idempotency_key=idempotency_key(key), if_match=version)

    def _content_type(self) -> str:
        """The request's media type, without parameters, lower-cased."""
        return (self.app.current_event.headers.get("content-type") or "").split(";")[0].strip().lower()

    def _body(self, limit: int) -> Any:
        event = self.app.current_event
        raw = event.decoded_body or ""
        if len(raw.encode()) > limit:
            raise HttpProblem(TOO_LARGE, f"the body is over {limit:,} bytes")
        if not raw.strip():
            raise HttpProblem(INVALID_JSON, "the body is empty")
        if "json_body" in self.app.context:  # parsed and checked once, before routing
            return self.app.context["json_body"]
        try:
            return json.loads(raw, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as err:
            raise HttpProblem(INVALID_JSON, f"the body is not valid JSON ({type(err).__name__})") from None

    def _problem(self, err: BaseException) -> Response[str]:
        kind = kind_of(err, if_match=bool(self.app.context.get("if_match")))
        return self._problem_response(err, kind, self._request_id(), self.app.context.get("user_id"))

    def _problem_event(self, err: BaseException, event: dict[str, Any]) -> dict[str, Any]:
        kind = kind_of(err)
        request_id = (event.get("requestContext") or {}).get("requestId")
        response = self._problem_response(err, kind, request_id, None)
        return {
            "statusCode": response.status_code,
            "headers": {k: v for k, v in response.headers.items() if isinstance(v, str)},
            "body": response.body,
            "isBase64Encoded": False,
        }

    @staticmethod
    def _problem_response(
        err: BaseException, kind: Kind, request_id: str | None, user_id: str | None, detail: str | None = None
    ) -> Response[str]:
        error_type, reason = describe_failure(err)
        log = logger.error if kind.status >= 500 else logger.info
        log(
            "request failed",
            request_id=request_id,
            user_id=user_id,
            status=kind.status,
            problem=kind.slug,
            error_type=error_type,
            reason=reason,
        )
        metrics.add_metric(name="RequestsFailed" if kind.status >= 500 else "RequestsRefused", unit="Count", value=1)
        current = getattr(err, "current", None)
        body = problem_document(
            type=kind.type,
            title=kind.title,
            status=kind.status,
            detail=detail or detail_of(err, kind),
            instance=request_id,
            current_version=current if kind.status in (409, 412) and isinstance(current, int) else None,
        )
        return Response(status_code=kind.status, content_type=models.PROBLEM_JSON, body=json.dumps(body))

    # -- routes ------------------------------------------------------------------------------------

    def _register(self) -> None:  # noqa: C901 - one place lists every route
        app = self.app

        @app.exception_handler([RequestValidationError, RequestUnsupportedContentType])
        def _invalid(err: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
            errors = err.errors()
            places = {str(e.get("loc", ("body",))[0]) for e in errors}
            if any(e.get("type") == "json_invalid" for e in errors):
                kind = INVALID_JSON
            elif any(e.get("type") == "unsupported_content_type" for e in errors):
                kind = UNSUPPORTED_MEDIA
            else:
                kind = INVALID_INPUT if places <= {"body"} else BAD_REQUEST
            fields = "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]
            )
            return self._problem_response(
                err, kind, self._request_id(), self.app.context.get("user_id"), detail=fields or kind.title
            )

        @app.exception_handler(Exception)
        def _failed(err: Exception) -> Response[str]:
            return self._problem(err)

        @app.not_found
        def _not_found(err: Exception) -> Response[str]:
            return self._problem_response(
                NotFound("no such route"), NOT_FOUND, self._request_id(), None, detail="no such route"
            )

        # -- the memory document ---------------------------------------------------------------

        def read(service: MemoryService, version: int | None, as_of: datetime | None) -> Response[models.Memory]:
            found = service.read(version=version, as_of=as_of)
            return Response(
                status_code=200,
                content_type="application/json",
                body=_memory(service.user_id, found),
                headers={"ETag": _etag(found.version)},
            )

        Version = Annotated[int | None, Query(ge=0, description="A past version (0: the empty document).")]
        AsOf = Annotated[datetime | None, Query(description="The version current at this time (ISO 8601 with zone).")]

        @app.get("/me/memory", responses=_responses(models.Memory, etag=True), tags=["memory"])
        def get_memory(version: Version = None, as_of: AsOf = None) -> Response[models.Memory]:
            """The memory document: the head, a past version, or as it was at a time."""
            with self._me() as service:
                return read(service, version, as_of)

        Limit = Annotated[int, Query(ge=1, le=500)]
        Before = Annotated[
            int | None, Query(ge=1, le=MAX_VERSION, description="Only versions below this one (the cursor).")
        ]

        @app.get("/me/memory/history", responses=_responses(models.History), tags=["memory"])
        def get_history(limit: Limit = 50, before: Before = None) -> models.History:
            """The versions, newest first, in pages."""
            with self._me() as service:
                return self._history(service, limit, before)

        From = Annotated[int, Query(alias="from", ge=0)]
        To = Annotated[int, Query(alias="to", ge=0)]

        @app.get("/me/memory/diff", responses=_responses(models.Diff), tags=["memory"])
        def get_diff(from_version: From, to_version: To) -> models.Diff:
            """One RFC 6902 patch from version `from` to version `to`."""
            with self._me() as service:
                return self._diff(service, from_version, to_version)

        Since = Annotated[int, Query(ge=0, description="The version the client holds.")]

        @app.get("/me/memory/changes", responses=_responses(models.Changes, etag=True), tags=["memory"])
        def get_changes(since: Since) -> Response[models.Changes]:
            """One patch from `since` to the head: the feed a cache polls to stay current."""
            with self._me() as service:
                return self._changes(service, since)

        Budget = Annotated[int, Query(ge=1, le=MAX_RENDER_BUDGET, description="Token budget of the text.")]

        @app.get("/me/memory/prompt", responses=_responses(models.Prompt, etag=True), tags=["agent"])
        def get_prompt(budget_tokens: Budget = 800) -> Response[models.Prompt]:
            """The head rendered as a compact block for a system prompt, cut to a token budget."""
            with self._me() as service:
                head = service.read()  # one read: the text is the version the ETag names
                text = render_memory(head.document, budget_tokens, schema=service.schema)
                body = models.Prompt(user_id=str(service.user_id), version=head.version, text=text)
            return Response(200, "application/json", body, headers={"ETag": _etag(head.version)})

        IfMatch = Annotated[
            str | None,
            Header(alias="If-Match", description='The version this edit is based on ("7"); stale: 412.'),
        ]
        IdemKey = Annotated[
            str | None,
            Header(alias="Idempotency-Key", description="A repeat with the same key writes nothing again."),
        ]

        @app.patch("/me/memory", responses=_responses(models.Written, etag=True), tags=["memory"])
        def patch_memory(if_match: IfMatch = None, idempotency_key_: IdemKey = None) -> Response[models.Written]:
            """Edit with RFC 6902 (application/json-patch+json) or RFC 7396 (application/merge-patch+json)."""
            content_type = self._content_type()
            if content_type not in (models.JSON_PATCH, models.MERGE_PATCH):
                raise HttpProblem(UNSUPPORTED_MEDIA, f"PATCH takes {models.JSON_PATCH} or {models.MERGE_PATCH}")
            edit = self._edit(if_match, idempotency_key_)
            body = self._body(self.settings.max_document_bytes * 2)
            with self._me() as service:
                if content_type == models.JSON_PATCH:
                    result = service.apply_json_patch(check_json_patch(body), edit)
                else:
                    result = service.apply_merge_patch(body, edit)
                return _written(service.user_id, result)

        @app.put("/me/memory", responses=_responses(models.Written, etag=True), tags=["memory"])
        def put_memory(
            document: Annotated[dict[str, Any], Body(description="The whole new document.")],
            if_match: IfMatch = None,
            idempotency_key_: IdemKey = None,
        ) -> Response[models.Written]:
            """Replace the whole document (validated against the deployment's schema)."""
            edit = self._edit(if_match, idempotency_key_)
            with self._me() as service:
                return _written(service.user_id, service.replace(document, edit))

        @app.post("/me/memory/revert", responses=_responses(models.Written, etag=True), tags=["memory"])
        def revert_memory(
            revert: Annotated[models.Revert, Body()], if_match: IfMatch = None, idempotency_key_: IdemKey = None
        ) -> Response[models.Written]:
            """A new version whose document is an older version's; history keeps everything."""
            edit = self._edit(if_match, idempotency_key_)
            with self._me() as service:
                return _written(service.user_id, service.revert(revert.version, edit))

        Section = Annotated[str | None, Query(min_length=1, max_length=100, description="One section; none: all.")]

        @app.delete("/me/memory", responses=_responses(models.Written, etag=True), tags=["memory"])
        def prune_memory(
            section: Section = None, if_match: IfMatch = None, idempotency_key_: IdemKey = None
        ) -> Response[models.Written]:
            """Prune one section (or every section) as a new version; history keeps what was there."""
            edit = self._edit(if_match, idempotency_key_)
            with self._me() as service:
                return _written(service.user_id, service.prune(section, edit))

        # -- account ---------------------------------------------------------------------------------

        @app.get("/me/export", responses=_responses(models.Export), tags=["account"])
        def export_me() -> models.Export:
            """Everything stored about the caller: every version, key-value entries, activity."""
            with self._me() as service:
                return _export(service)

        @app.delete("/me", responses=_responses(models.Erased), tags=["account"])
        def erase_me() -> models.Erased:
            """Erase every row of the caller, history included, in one transaction."""
            with self._me() as service:
                removed = service.erase()
            logger.info("user erased", user_id=str(service.user_id), rows=sum(removed.values()))
            return models.Erased(user_id=str(service.user_id), removed=removed)

        @app.post("/me/activity", responses=_responses(models.ActivityRecorded), tags=["account"])
        def post_activity(batch: Annotated[models.ActivityBatch, Body()]) -> models.ActivityRecorded:
            """Record activity for the next daily summary; repeats of (source, external_id) are ignored."""
            with self._me() as service:
                received, recorded = service.record_activity(_activities(service, batch))
            return models.ActivityRecorded(received=received, recorded=recorded)

        # -- key-value memory --------------------------------------------------------------------------

        Namespace = Annotated[str, Path(description="^[a-z0-9][a-z0-9_.-]{0,63}$ (`default` if unsure).")]
        Key = Annotated[str, Path(description="1 to 256 characters, percent-encoded in the path.")]
        PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
        After = Annotated[str | None, Query(min_length=1, max_length=256, description="The cursor: keys after this.")]

        @app.get("/me/kv/<namespace>", responses=_responses(models.KvPage), tags=["kv"])
        def list_kv(namespace: Namespace, limit: PageSize = 100, after: After = None) -> models.KvPage:
            """Live entries of a namespace in key order, in pages."""
            with self._me() as service:
                page = service.kv_list(namespace, limit=limit, after=after)
            entries, next_after = _within_response_budget(page.entries, page.next_after_key)
            return models.KvPage(namespace=namespace, items=[_kv(e) for e in entries], next_after=next_after)

        @app.get("/me/kv/<namespace>/<key>", responses=_responses(models.KvEntry), tags=["kv"])
        def get_kv(namespace: Namespace, key: Key) -> models.KvEntry:
            """One live entry."""
            key = _path_key(key)
            with self._me() as service:
                entry = service.kv_get(namespace, key)
            if entry is None:
                raise NotFound(f"no live entry with this key in namespace {namespace!r}")  # keys stay out of logs
            return _kv(entry)

        @app.put("/me/kv/<namespace>/<key>", responses=_responses(models.KvEntry), tags=["kv"])
        def put_kv(namespace: Namespace, key: Key, put: Annotated[models.KvPut, Body()]) -> models.KvEntry:
            """Insert or replace an entry (value at most 10 KB as compact JSON; optional TTL)."""
            key = _path_key(key)
            with self._me() as service:
                return _kv(service.kv_put(namespace, key, put.value, put.ttl_seconds))

        @app.delete("/me/kv/<namespace>/<key>", responses=_responses(models.KvDeleted), tags=["kv"])
        def delete_kv(namespace: Namespace, key: Key) -> models.KvDeleted:
            """Delete an entry; 404 when there was no live entry."""
            key = _path_key(key)
            with self._me() as service:
                deleted = service.kv_delete(namespace, key)
            if not deleted:
                raise NotFound(f"no live entry with this key in namespace {namespace!r}")  # keys stay out of logs
            return models.KvDeleted(namespace=namespace, key=key, deleted=True)

        # -- the companion layer: goals, to-dos, events, ratings, digest ------------------------------

        ElementId = Annotated[str, Path(description="The element's id.")]
        ElementBody = Annotated[dict[str, Any], Body(description="The element's fields (see the companion schema).")]

        def element_route(collection: str) -> None:
            singular = {"goals": "goal", "todos": "to-do", "events": "event"}[collection]

            @app.post(
                f"/me/{collection}",
                responses=_responses(models.ElementWritten, etag=True),
                tags=["companion"],
                summary=f"Create a {singular}",
                description=f"A new {singular} as a new version of the memory (an id is generated when none is "
                "given; 409 element-exists when it is taken).",
            )
            def create_element(
                fields: ElementBody, if_match: IfMatch = None, idempotency_key_: IdemKey = None
            ) -> Response[models.ElementWritten]:
                edit = self._edit(if_match, idempotency_key_)
                with self._me() as service:
                    element_id, result = service.create_element(collection, fields, edit)
                    return _element_written(service.user_id, collection, element_id, result)

            @app.get(
                f"/me/{collection}/<element_id>",
                responses=_responses(models.Element, etag=True),
                tags=["companion"],
                summary=f"Read a {singular}",
            )
            def get_element(element_id: ElementId) -> Response[models.Element]:
                with self._me() as service:
                    element, version = service.element(collection, element_id)
                    body = models.Element(
                        user_id=str(service.user_id), collection=collection, id=element_id, version=version,
                        element=element,
                    )  # fmt: skip
                return Response(200, "application/json", body, headers={"ETag": _etag(version)})

            @app.patch(
                f"/me/{collection}/<element_id>",
                responses=_responses(models.ElementWritten, etag=True),
                tags=["companion"],
                summary=f"Update a {singular}",
                description=f"RFC 7396 merge of the {singular}'s fields (application/merge-patch+json; null "
                "removes a field), as a new version.",
            )
            def update_element(
                element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
            ) -> Response[models.ElementWritten]:
                content_type = self._content_type()
                if content_type != models.MERGE_PATCH:
                    raise HttpProblem(UNSUPPORTED_MEDIA, f"updating a {singular} takes {models.MERGE_PATCH}")
                edit = self._edit(if_match, idempotency_key_)
                body = self._body(self.settings.max_document_bytes)
                with self._me() as service:
                    result = service.update_element(collection, element_id, body, edit)
                    return _element_written(service.user_id, collection, element_id, result)

            @app.post(
                f"/me/{collection}/<element_id>/complete",
                responses=_responses(models.ElementWritten, etag=True),
                tags=["companion"],
                summary=f"Complete a {singular}",
                description="Marks it done (a to-do) or completed (a goal, an event) as a new version; completing "
                "it again writes nothing.",
            )
            def complete_element(
                element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
            ) -> Response[models.ElementWritten]:
                edit = self._edit(if_match, idempotency_key_)
                with self._me() as service:
                    result = service.complete_element(collection, element_id, edit)
                    return _element_written(service.user_id, collection, element_id, result)

            @app.delete(
                f"/me/{collection}/<element_id>",
                responses=_responses(models.ElementWritten, etag=True),
                tags=["companion"],
                summary=f"Delete a {singular}",
                description="Removes it as a new version (history keeps it; revert brings it back).",
            )
            def delete_element(
                element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
            ) -> Response[models.ElementWritten]:
                edit = self._edit(if_match, idempotency_key_)
                with self._me() as service:
                    result = service.delete_element(collection, element_id, edit)
                    return _element_written(service.user_id, collection, element_id, result)

        # Static routes first: /me/todos/due and /me/events/import are not element ids.
        Day = Annotated[date | None, Query(description="A calendar day (YYYY-MM-DD); default: the user's today.")]

        @app.get("/me/todos/due", responses=_responses(models.TodosDue), tags=["companion"])
        def todos_due(on: Day = None) -> models.TodosDue:
            """Open to-dos due on or before a day (the user's today in basic_info.timezone), overdue first;
            read from the item index."""
            with self._me() as service:
                day, overdue, due = service.todos_due(on)
            return models.TodosDue(
                user_id=str(service.user_id),
                day=day.isoformat(),
                overdue=[_indexed(r) for r in overdue],
                due=[_indexed(r) for r in due],
            )

        WithinDays = Annotated[
            int | None, Query(ge=0, le=3660, description="Only goals whose target date is within this many days.")
        ]

        @app.get("/me/goals", responses=_responses(models.ActiveGoals), tags=["companion"])
        def active_goals(within_days: WithinDays = None) -> models.ActiveGoals:
            """Active goals, nearest target date first; read from the item index."""
            with self._me() as service:
                rows = service.active_goals(within_days)
            return models.ActiveGoals(user_id=str(service.user_id), items=[_indexed(r) for r in rows])

        RangeFrom = Annotated[datetime | None, Query(alias="from", description="Range start (with zone); default now.")]
        RangeTo = Annotated[
            datetime | None, Query(alias="to", description="Range end (with zone); default from + 7 days.")
        ]

        @app.get("/me/events", responses=_responses(models.EventsInRange), tags=["companion"])
        def events_in_range(range_from: RangeFrom = None, range_to: RangeTo = None) -> models.EventsInRange:
            """Occurrences of the user's events overlapping [from, to) (recurring events expanded); the
            candidates are read from the item index."""
            start = range_from or datetime.now(UTC)
            if range_to is None and start.year > 9997:
                raise InvalidRequest("from must be before the year 9998")
            end = range_to or start + timedelta(days=7)
            unexpanded: list[str] = []
            with self._me() as service:
                found = service.events_between(start, end, unexpanded=unexpanded)
            found, next_from = _occurrences_within_budget(found)
            return models.EventsInRange(
                user_id=str(service.user_id),
                from_=start,
                to=end,
                items=[models.Occurrence(**{k: o[k] for k in ("id", "path", "version", "occurrence_start",
                                                             "occurrence_end", "event")}) for o in found],
                unexpanded=unexpanded,
                next_from=next_from,
            )  # fmt: skip

        @app.post("/me/events/import", responses=_responses(models.EventsImported, etag=True), tags=["companion"])
        def import_events(
            page: Annotated[dict[str, Any] | list[dict[str, Any]], Body(description="A Google Calendar event, a list "
                            "of them, or an Events.list page ({\"items\": [...]}).")],
            if_match: IfMatch = None,
            idempotency_key_: IdemKey = None,
        ) -> Response[models.EventsImported]:  # fmt: skip
            """Import events in Google Calendar's event JSON: new ones added, those with a newer `updated`
            replaced, cancelled ones removed, in one version."""
            edit = self._edit(if_match, idempotency_key_)
            with self._me() as service:
                report, result = service.import_google_events(page, edit)
            body = models.EventsImported(
                user_id=str(service.user_id), status=result.status.value, version=result.version,
                created=report.created, updated=report.updated, unchanged=report.unchanged, deleted=report.deleted,
            )  # fmt: skip
            return Response(200, "application/json", body, headers=_write_headers(result))

        element_route("goals")
        element_route("todos")
        element_route("events")

        @app.post("/me/ratings", responses=_responses(models.RatingRecorded), tags=["companion"])
        def record_rating(rating: Annotated[models.RatingIn, Body()]) -> models.RatingRecorded:
            """Record a feedback rating of one interaction (a repeat replaces it); the nightly run
            summarizes ratings into the feedback element."""
            with self._me() as service:
                status = service.record_rating(
                    Rating(
                        interaction_id=rating.interaction_id,
                        rating=rating.rating,
                        tags=tuple(rating.tags),
                        comment=rating.comment,
                        rated_at=rating.rated_at or datetime.now(UTC),
                    )
                )
            return models.RatingRecorded(
                user_id=str(service.user_id), interaction_id=rating.interaction_id, status=status
            )  # type: ignore[arg-type]

        DigestDay = Annotated[date | None, Query(description="The digest of this day (YYYY-MM-DD); default: latest.")]

        @app.get("/me/digest", responses=_responses(models.Digest), tags=["companion"])
        def get_digest(day: DigestDay = None) -> models.Digest:
            """The daily digest the nightly run made: due and overdue to-dos, events of the next 7 days, goals
            near their target date."""
            with self._me() as service:
                found = service.digest(day)
            return models.Digest(user_id=str(service.user_id), digest=found)

        # -- search ----------------------------------------------------------------------------------

        SearchQuery = Annotated[str, Query(min_length=1, max_length=500, description="What to look for.")]
        SearchK = Annotated[int, Query(ge=1, le=100, description="How many items.")]
        SearchMode = Annotated[
            Literal["auto", "fts", "vector", "fused"],
            Query(description="auto: fused when embeddings are configured, else full text."),
        ]

        @app.get("/me/memory/search", responses=_responses(models.SearchResults), tags=["memory"])
        def search_memory(q: SearchQuery, k: SearchK = 10, mode: SearchMode = "auto") -> models.SearchResults:
            """The items of the caller's memory (document leaves and elements, each with its JSON Pointer and
            the version that last changed it) that best match `q`."""
            with self._me() as service:
                result = service.search(q, k, mode)
            return models.SearchResults(
                user_id=str(service.user_id), query=q, mode=result.mode,
                items=[models.SearchHit(path=h.path, version=h.version, kind=h.kind, text=h.text, value=h.value,
                                        score=h.score, matched_by=list(h.matched_by)) for h in result.hits],
            )  # fmt: skip

        @app.get("/admin/memory/search", responses=_responses(models.OperatorSearchResults), tags=["admin"])
        def operator_search(q: SearchQuery, k: SearchK = 10) -> models.OperatorSearchResults:
            """Operators: the nearest item texts across every user (the HNSW index; embeddings required)."""
            self._operator_caller("search across users")
            if self.tasks is None or not hasattr(self.tasks, "search_all"):
                raise WrongSchema("this deployment cannot search across users")
            found = self.tasks.search_all(q, k)
            return models.OperatorSearchResults(query=q, items=[models.OperatorSearchHit(**h) for h in found])

        # -- operators ---------------------------------------------------------------------------------

        UserId = Annotated[str, Path(description="The user's id (a UUID).")]

        @app.get("/admin/users/<user_id>/memory", responses=_responses(models.Memory, etag=True), tags=["admin"])
        def admin_get_memory(user_id: UserId, version: Version = None, as_of: AsOf = None) -> Response[models.Memory]:
            """Operators: a user's memory document (head, version or time)."""
            with self._operator(user_id, "read memory") as service:
                return read(service, version, as_of)

        @app.get("/admin/users/<user_id>/memory/history", responses=_responses(models.History), tags=["admin"])
        def admin_get_history(user_id: UserId, limit: Limit = 50, before: Before = None) -> models.History:
            """Operators: a user's versions, newest first."""
            with self._operator(user_id, "read history") as service:
                return self._history(service, limit, before)

        @app.get("/admin/users/<user_id>/memory/diff", responses=_responses(models.Diff), tags=["admin"])
        def admin_get_diff(user_id: UserId, from_version: From, to_version: To) -> models.Diff:
            """Operators: one patch between two of a user's versions."""
            with self._operator(user_id, "read diff") as service:
                return self._diff(service, from_version, to_version)

        @app.get(
            "/admin/users/<user_id>/memory/changes", responses=_responses(models.Changes, etag=True), tags=["admin"]
        )
        def admin_get_changes(user_id: UserId, since: Since) -> Response[models.Changes]:
            """Operators: one patch from `since` to a user's head."""
            with self._operator(user_id, "read changes") as service:
                return self._changes(service, since)

        @app.get("/admin/users/<user_id>/export", responses=_responses(models.Export), tags=["admin"])
        def admin_export(user_id: UserId) -> models.Export:
            """Operators: everything stored about a user (a data-protection request)."""
            with self._operator(user_id, "export") as service:
                return _export(service)

        @app.delete("/admin/users/<user_id>", responses=_responses(models.Erased), tags=["admin"])
        def admin_erase(user_id: UserId) -> models.Erased:
            """Operators: erase every row of a user, history included (a data-protection request)."""
            with self._operator(user_id, "erase") as service:
                removed = service.erase()
            return models.Erased(user_id=str(service.user_id), removed=removed)

        # -- tasks (operators) ----------------------------------------------------------------------

        Threshold = Annotated[
            int | None,
            Query(
                ge=1,
                le=60 * 24 * 31,
                description="Minutes a conversation must have been quiet (default INACTIVITY_THRESHOLD_MINUTES).",
            ),
        ]

        @app.post(
            "/tasks/trigger-memory-generation", responses=_responses(models.MemoryGenerationTriggered), tags=["admin"]
        )
        def trigger_memory_generation(threshold_minutes: Threshold = None) -> models.MemoryGenerationTriggered:
            """Operators: queue GENERATE_MEMORY_BATCH messages for every conversation quiet for longer than the
            threshold that has no memory, or messages newer than its memory."""
            self._operator_caller("trigger memory generation")
            if self.tasks is None:
                raise SendFailed("this deployment cannot trigger tasks")
            report = self.tasks.trigger_memory_generation(threshold_minutes)
            return models.MemoryGenerationTriggered(
                threshold_minutes=report.threshold_minutes,
                quiet_before=report.quiet_before,
                conversations=report.conversations,
                messages=report.messages,
                pages=report.pages,
            )

        @app.get("/openapi.json", include_in_schema=False)
        def openapi() -> Response[str]:
            return Response(200, "application/json", openapi_text())

        _ = (METHOD_NOT_ALLOWED, FORBIDDEN, INTERNAL, INVALID_PATCH)  # kinds used through kind_of

    # -- shared by /me and /admin ------------------------------------------------------------------

    @staticmethod
    def _history(service: MemoryService, limit: int, before: int | None) -> models.History:
        entries, next_before = service.history(limit=limit, before=before)
        return models.History.model_construct(
            user_id=str(service.user_id), items=[_history_item(e) for e in entries], next_before=next_before
        )

    @staticmethod
    def _diff(service: MemoryService, from_version: int, to_version: int) -> models.Diff:
        patch = service.diff(from_version, to_version)
        return models.Diff.model_construct(  # a verified patch of stored documents: see _memory
            user_id=str(service.user_id), from_version=from_version, to_version=to_version, patch=patch
        )

    @staticmethod
    def _changes(service: MemoryService, since: int) -> Response[models.Changes]:
        changes = service.changes_since(since)
        body = models.Changes.model_construct(
            user_id=str(service.user_id), since=changes.since, version=changes.version, patch=changes.patch
        )
        return Response(200, "application/json", body, headers={"ETag": _etag(changes.version)})


def _within_response_budget(entries: Sequence[KvEntry], next_after: str | None) -> tuple[Sequence[KvEntry], str | None]:
    """A page cut short where its JSON would pass MAX_PAGE_RESPONSE_BYTES, with the cursor to go on from.

    1,000 values of 10 KB are 10 MB, and up to three times that with the response's \\u escapes:
    over what a Lambda function may return (6 MB), so the whole request would fail.
    """
    total = 0
    for n, entry in enumerate(entries):
        total += len(json.dumps(entry.value)) + len(json.dumps(entry.key)) + 200  # the other members
        if total > MAX_PAGE_RESPONSE_BYTES and n > 0:
            return entries[:n], entries[n - 1].key
    return entries, next_after


MAX_RANGE_OCCURRENCES = 1000


def _occurrences_within_budget(found: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Occurrences cut short where there are MAX_RANGE_OCCURRENCES of them or their JSON would pass
    MAX_PAGE_RESPONSE_BYTES (each carries its event: a daily event of 100 KB over a year is 36 MB),
    with the start of the first one left out."""
    sizes: dict[str, int] = {}
    total = 0
    for n, occurrence in enumerate(found):
        path = occurrence["path"]
        if path not in sizes:
            sizes[path] = len(json.dumps(occurrence["event"], ensure_ascii=False).encode()) + 300  # the other members
        total += sizes[path]
        if n >= MAX_RANGE_OCCURRENCES or (total > MAX_PAGE_RESPONSE_BYTES and n > 0):
            return found[:n], str(occurrence["occurrence_start"])
    return found, None


def _path_key(encoded: str) -> str:
    """A key-value key from its percent-encoded path segment; bytes that are not UTF-8 are a 422
    (decoded leniently, %ff and %fe would both be U+FFFD: one key silently overwriting another)."""
    try:
        return urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise HttpProblem(INVALID_INPUT, "the key is not percent-encoded UTF-8") from None


def _export(service: MemoryService) -> models.Export:
    data = service.export()
    return models.Export(
        user_id=str(service.user_id),
        versions=[_memory(service.user_id, v) for v in data["versions"]],
        kv=[_kv(e) for e in data["kv"]],
        activity=[
            models.ActivityRecord(
                id=a.id or 0,
                occurred_at=a.occurred_at,
                kind=a.kind,
                payload=a.payload,
                source=a.source,
                external_id=a.external_id,
            )
            for a in data["activity"]
        ],
        conversations=[_conversation(c) for c in data.get("conversations", [])],
        ratings=[models.RatingRecord(**r) for r in data.get("ratings", [])],
        digests=data.get("digests", []),
    )


def _conversation(c: ExportedConversation) -> models.ConversationRecord:
    memory = c.memory
    return models.ConversationRecord(
        conversation_id=c.conversation_id,
        first_message_at=c.first_message_at,
        last_message_at=c.last_message_at,
        created_at=c.created_at,
        messages=[
            models.ConversationMessageRecord(
                seq=m.seq, message_id=m.message_id, role=m.role, text=m.text, occurred_at=m.occurred_at, source=m.source
            )
            for m in c.messages
        ],
        memory=None
        if memory is None
        else models.ConversationMemoryRecord(
            memory=memory.memory,
            last_message_seq=memory.last_message_seq,
            last_message_id=memory.last_message_id,
            last_message_at=memory.last_message_at,
            model=memory.model,
            created_at=memory.created_at,
            updated_at=memory.updated_at,
        ),
    )


def _activities(service: MemoryService, batch: models.ActivityBatch) -> list[Any]:
    from user_memory.domain.model import Activity

    items = []
    for item in batch.items:
        if item.occurred_at.tzinfo is None:
            raise HttpProblem(INVALID_INPUT, "occurred_at needs a time zone (for example 2026-11-23T10:00:00Z)")
        items.append(
            Activity(
                user_id=service.user_id,
                occurred_at=item.occurred_at,
                kind=item.kind,
                payload=item.payload,
                source=item.source,
                external_id=item.external_id,
            )
        )
    return items


_OPS = {"add", "remove", "replace", "move", "copy", "test"}
_NEEDS = {"add": "value", "replace": "value", "test": "value", "move": "from", "copy": "from"}


def check_json_patch(body: Any) -> list[dict[str, Any]]:
    """The body as an RFC 6902 patch, its shape checked (HttpProblem invalid-patch when malformed)."""
    if not isinstance(body, list):
        raise HttpProblem(INVALID_PATCH, "a JSON Patch is an array of operations")
    for n, op in enumerate(body):
        if not isinstance(op, dict):
            raise HttpProblem(INVALID_PATCH, f"operation {n} is not an object")
        if op.get("op") not in _OPS:
            raise HttpProblem(INVALID_PATCH, f"operation {n}: op must be one of {', '.join(sorted(_OPS))}")
        if not isinstance(op.get("path"), str):
            raise HttpProblem(INVALID_PATCH, f"operation {n}: path must be a JSON Pointer string")
        needed = _NEEDS.get(op["op"])
        if needed == "value" and "value" not in op:
            raise HttpProblem(INVALID_PATCH, f"operation {n} ({op['op']}) needs a value")
        if needed == "from" and not isinstance(op.get("from"), str):
            raise HttpProblem(INVALID_PATCH, f"operation {n} ({op['op']}) needs from, a JSON Pointer string")
    return body


# -- the OpenAPI document ------------------------------------------------------------------------------

_PATCH_BODY = {
    "required": True,
    "content": {
        models.JSON_PATCH: {
            "schema": {"type": "array", "items": {"$ref": "#/components/schemas/PatchOperation"}},
        },
        models.MERGE_PATCH: {"schema": {"type": "object", "additionalProperties": True}},
    },
}


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


def openapi_document(api: MemoryApi) -> dict[str, Any]:
    """The OpenAPI document generated from the routes and models, plus what Powertools cannot say:
    PATCH's two media types and the bearer token every route but this document needs."""
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


def render_openapi(api: MemoryApi) -> str:
    """The OpenAPI document as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(openapi_document(api), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def unavailable(err: BaseException, event: dict[str, Any]) -> dict[str, Any]:
    """The answer when the API cannot be built (configuration, database): a logged 503 problem."""
    from user_memory.http.problems import UNAVAILABLE

    error_type, reason = describe_failure(err)
    request_id = (event.get("requestContext") or {}).get("requestId")
    logger.error("api unavailable", request_id=request_id, error_type=error_type, reason=reason)
    metrics.add_metric(name="RequestsFailed", unit="Count", value=1)
    body = problem_document(type=UNAVAILABLE.type, title=UNAVAILABLE.title, status=503, detail=UNAVAILABLE.title)
    return {
        "statusCode": 503,
        "headers": {"Content-Type": models.PROBLEM_JSON},
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def create_api(sessions: Sessions, settings: ApiSettings) -> MemoryApi:
    """The API over `sessions`; one per process (its routes are built once). When `sessions` can
    also run tasks (ApiServices: the conversation-memory trigger), the task routes use it."""
    return MemoryApi(sessions, settings, tasks=sessions if isinstance(sessions, Tasks) else None)


Call = Callable[[dict[str, Any], Any], dict[str, Any]]

"""The memory API: Powertools' HTTP resolver over the features' services (domain/session.py), one
transaction per request.

Identity comes only from the verified token (`sub`); `/me/...` is the caller's data, a path that
names a user (`/users/{user_id}/...`) is the caller's own path or a 403, and `/admin/users/...`
is for operators. Each request's database work runs in one transaction, as the end user under
row-level security (operators: with the service's rights, and logged with who acted).
Errors are RFC 9457 problem details (`problems.py`).

Where things are: the routes in `routes/`, a `Router` per module (the `/admin/users/...` views are
in admin.py and overview.py, which also holds the console's reads for /me); what a route
reads from the resolver's context in `context.py`; request bodies in `bodies.py`; response
builders in `responses.py`; shared parameters in `params.py`; the OpenAPI wiring in `openapi.py`.
This module holds the resolver, the checks made before routing, the exception handlers and
`resolve`.
"""

import json
import re
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from user_memory.adapters.http_deadline import invocation_left, within
from user_memory.config import ApiSettings
from user_memory.domain.messages import MAX_MESSAGE_BYTES
from user_memory.domain.session import Sessions
from user_memory.errors import Forbidden, MethodNotAllowed, NotFound, describe_failure
from user_memory.http import models, openapi
from user_memory.http.bodies import PARSED, UNPARSED, check_body
from user_memory.http.context import KEY, Dependencies, Tasks, caller_of, event_request_id
from user_memory.http.problems import (
    BAD_REQUEST,
    INVALID_INPUT,
    INVALID_JSON,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    UNAVAILABLE,
    UNSUPPORTED_MEDIA,
    Kind,
    detail_of,
    kind_of,
    problem_document,
)
from user_memory.http.routes import (
    account,
    admin,
    companion,
    console,
    conversations,
    imports,
    kv,
    memory,
    records,
    runs,
    search,
    tasks,
    webhooks,
)
from user_memory.observability import logger, metrics

# One Router per resource, each included under its prefix, in the order their routes were always
# registered (Powertools matches static routes first, then dynamic ones, each in registration order).
ROUTERS: tuple[tuple[Router, str | None], ...] = (
    (memory.router, "/me/memory"),
    (account.router, "/me"),
    (kv.router, "/me/kv"),
    (companion.router, "/me"),
    (search.router, "/admin/memory"),
    (admin.router, "/admin/users/<user_id>"),
    (records.router, "/admin"),
    (runs.router, "/admin"),
    (tasks.router, "/tasks"),
    (webhooks.router, "/admin/webhooks"),
    (openapi.router, None),
    (conversations.router, "/me/conversations"),
    (console.router, None),
    (imports.router, "/admin/imports"),
)
_USER_PATH = re.compile(r"^/users/(?P<user>[^/]+)(?P<rest>/.*)?$")


class MemoryApi:
    """The resolver and its routes, over a Sessions (PostgreSQL in Lambda and `serve`).

    One event at a time per process: Powertools keeps the event being answered in a class
    attribute shared by every resolver, so a threaded server must serialize `resolve` (as
    `user-memory serve` does) or requests would read each other's claims. The routes are
    module-level and shared; what they use reaches them through this resolver's context.
    """

    def __init__(self, sessions: Sessions, settings: ApiSettings, tasks: Tasks | None = None) -> None:
        self.dependencies = Dependencies(sessions=sessions, settings=settings, tasks=tasks)
        self.app = APIGatewayHttpResolver(enable_validation=True)
        self.app.exception_handler([RequestValidationError, RequestUnsupportedContentType])(self._invalid)
        self.app.exception_handler(Exception)(self._failed)
        self.app.not_found(self._not_found)
        for router, prefix in ROUTERS:
            self.app.include_router(router, prefix=prefix)
        # (path pattern, method) of every route, for the 405 a known path answers to another method
        routes = [*self.app._static_routes, *self.app._dynamic_routes]  # Powertools' table (no public view)
        self._routes: list[tuple[re.Pattern[str], str]] = [(route.rule, route.method.upper()) for route in routes]

    @property
    def settings(self) -> ApiSettings:
        return self.dependencies.settings

    @property
    def sessions(self) -> Sessions:
        return self.dependencies.sessions

    @sessions.setter
    def sessions(self, sessions: Sessions) -> None:
        self.dependencies = Dependencies(sessions=sessions, settings=self.settings, tasks=self.dependencies.tasks)

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway HTTP API v2 event; every outbound call it makes (embeddings)
        ends before the invocation's deadline minus DEADLINE_MARGIN_MS."""
        with within(invocation_left(context, self.settings.deadline_margin_ms / 1000)):
            return self._resolve(event, context)

    def _resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        try:
            event, parsed = self._admit(event)
        except Exception as err:  # answered as a problem like any route's error
            return self._refuse_event(err, event)
        event = self._head_as_get(event)
        self.app.append_context(**{KEY: self.dependencies})  # cleared by Powertools after each event
        if parsed is not UNPARSED:  # a route that reads the body itself (PATCH) takes it from here
            self.app.append_context(**{PARSED: parsed})
        return self.app.resolve(event, context)

    def _head_as_get(self, event: dict[str, Any]) -> dict[str, Any]:
        """HEAD on a path that takes GET is answered as GET (RFC 9110: the same headers; the server
        in front drops the body), not 405: `curl -I /swagger` works."""
        http = (event.get("requestContext") or {}).get("http") or {}
        if str(http.get("method", "")).upper() != "HEAD":
            return event
        path = event.get("rawPath") or ""
        if not any(method == "GET" and rule.match(path) for rule, method in self._routes):
            return event
        context = {**event["requestContext"], "http": {**http, "method": "GET"}}
        return {**event, "requestContext": context}

    def _admit(self, event: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """The event as routed (/users/{user_id}/... as /me/...) and its JSON body parsed (or
        UNPARSED); raises what refuses it before any route runs."""
        match = _USER_PATH.match(event.get("rawPath") or "")
        if match:  # /users/{user_id}/...: the caller's own data under another name, or 403
            caller = caller_of(event, self.settings)
            if match.group("user") != str(caller.user_id) and match.group("user") != caller.subject:
                raise Forbidden("a path that names a user is only open to that user; use /me")
            event = {**event, "rawPath": "/me" + (match.group("rest") or ""), "routeKey": "$default"}
        problem, parsed = check_body(event, max(2 * self.settings.max_document_bytes, MAX_MESSAGE_BYTES))
        if problem is not None:
            caller_of(event, self.settings)  # no credentials: 401 first, as for any route
            raise problem
        return event, parsed

    # -- errors: every one answered by `refusal` ----------------------------------------------------

    def _invalid(self, err: RequestValidationError | RequestUnsupportedContentType) -> Response[str]:
        """Powertools' own validation: a 4xx naming the first few fields."""
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
        return self._refuse(err, kind, detail=fields or kind.title)

    def _failed(self, err: Exception) -> Response[str]:
        return self._refuse(err, kind_of(err, if_match=bool(self.app.context.get("if_match"))))

    def _not_found(self, err: Exception) -> Response[str]:
        """No route for this method and path: 405 with Allow when the path takes other methods, else 404."""
        event = self.app.current_event
        path, method = event.path, event.http_method.upper()
        allowed = sorted({m for rule, m in self._routes if rule.match(path)})
        if allowed:
            refused = refusal(MethodNotAllowed(method, allowed), METHOD_NOT_ALLOWED, self._request_id(), None)
            refused.headers["Allow"] = ", ".join(allowed)
            return refused
        return refusal(NotFound("no such route"), NOT_FOUND, self._request_id(), None, detail="no such route")

    def _refuse(self, err: BaseException, kind: Kind, detail: str | None = None) -> Response[str]:
        return refusal(err, kind, self._request_id(), self.app.context.get("user_id"), detail=detail)

    def _request_id(self) -> str | None:
        try:
            return self.app.current_event.request_context.request_id
        except (KeyError, AttributeError, TypeError):
            return None

    @staticmethod
    def _refuse_event(err: BaseException, event: dict[str, Any]) -> dict[str, Any]:
        """A request refused before routing, as the event answer Powertools would have built."""
        return _as_event(refusal(err, kind_of(err), event_request_id(event), None))


def refusal(
    err: BaseException, kind: Kind, request_id: str | None, user_id: str | None, *, detail: str | None = None
) -> Response[str]:
    """The one answer to a failed request: logged with its id, type and reason, counted, and an
    RFC 9457 problem (with the current version on a conflict)."""
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


def _as_event(response: Response[str]) -> dict[str, Any]:
    return {
        "statusCode": response.status_code,
        "headers": {k: v for k, v in response.headers.items() if isinstance(v, str)},
        "body": response.body,
        "isBase64Encoded": False,
    }


def unavailable(err: BaseException, event: dict[str, Any]) -> dict[str, Any]:
    """The answer when the API cannot be built (configuration, database): a logged 503 problem."""
    error_type, reason = describe_failure(err)
    logger.error("api unavailable", request_id=event_request_id(event), error_type=error_type, reason=reason)
    metrics.add_metric(name="RequestsFailed", unit="Count", value=1)
    body = problem_document(type=UNAVAILABLE.type, title=UNAVAILABLE.title, status=503, detail=UNAVAILABLE.title)
    return _as_event(Response(status_code=503, content_type=models.PROBLEM_JSON, body=json.dumps(body)))


def create_api(sessions: Sessions, settings: ApiSettings) -> MemoryApi:
    """The API over `sessions`; one per process (its routes are built once). When `sessions` can
    also run tasks (ApiServices: the conversation-memory trigger), the task routes use it."""
    return MemoryApi(sessions, settings, tasks=sessions if isinstance(sessions, Tasks) else None)

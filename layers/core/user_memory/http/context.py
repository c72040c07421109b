"""What a route reads from the resolver's context: the services, the caller, its transaction.

`MemoryApi` puts its `Dependencies` into the resolver's context for each request
(`app.append_context`); a route declares a `request: Request` parameter (Powertools injects it,
and leaves it out of the OpenAPI document) and opens the caller's transaction with `me(request)`,
or an operator's with `operator(request, user_id, action)`. Routes hold no state of their own, so
one module-level `Router` per resource serves every `MemoryApi` in the process.
"""

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from aws_lambda_powertools.event_handler import Request

from user_memory.config import ApiSettings
from user_memory.domain.conversations.ports import ConversationStore, Sender
from user_memory.domain.conversations.trigger import TriggerReport
from user_memory.domain.refresh import RefreshClaims, RefreshQueued, Requester
from user_memory.domain.service import Edit, idempotency_key
from user_memory.domain.session import Sessions, UserSession
from user_memory.errors import Forbidden, WrongSchema
from user_memory.http.auth import Caller, caller_from_claims
from user_memory.http.problems import BAD_REQUEST, HttpProblem
from user_memory.jobs.conversations import trigger_memory_generation
from user_memory.jobs.export import run_export
from user_memory.jobs.refresh import queue_refresh
from user_memory.observability import logger, metrics


@runtime_checkable
class Tasks(Protocol):
    """What operators can start through the API besides reading and erasing users."""

    clock: Callable[[], datetime]

    def conversation_trigger(self) -> tuple[ConversationStore, Sender]: ...

    def run_report(self, run_key: str) -> dict[str, Any]: ...

    def list_runs(self, *, limit: int, after: tuple[datetime, str] | None) -> list[dict[str, Any]]: ...

    def start_run_revert(self, run_key: str, user_id: uuid.UUID | None, requested_by: str | None) -> dict[str, Any]: ...

    def run_revert_status(self, revert_id: uuid.UUID) -> dict[str, Any]: ...

    def refresh_queue(self) -> tuple[RefreshClaims, Sender]: ...


@runtime_checkable
class Receipts(Protocol):
    """Operators' reads of erasure receipts, with the service's rights (ApiServices)."""

    def erasure_receipts(
        self, *, limit: int, before: tuple[Any, str] | None = None, user_id: Any = None
    ) -> list[Any]: ...


@runtime_checkable
class ExportJobs(Protocol):
    """Asynchronous exports, with the service's rights (ApiServices; the routes check the caller)."""

    def start_export(self, user_id: Any, requested_by: str) -> tuple[Any, bool]: ...

    def export_stores(self) -> tuple[Any, Any]: ...

    def export_job(self, export_id: str, user_id: Any = None) -> tuple[Any, str | None]: ...


def export_jobs(request: Request) -> ExportJobs:
    services = dependencies(request).sessions
    if not isinstance(services, ExportJobs):
        raise not_enabled("export asynchronously")
    return services


def start_export(request: Request, user_id: uuid.UUID, requested_by: str) -> tuple[Any, str | None]:
    """A new export job for the user (the route checked the caller), queued for the worker, or
    run here and now (jobs/export.py) where there is no queue (the local kit); the job as it is
    then, and its URL once done."""
    jobs = export_jobs(request)
    job, queued = jobs.start_export(user_id, requested_by)
    if not queued:
        run_export(*jobs.export_stores(), job.id)
    return jobs.export_job(job.id)


@dataclass(frozen=True)
class Dependencies:
    """What the routes use, put into the resolver's context for each request under `KEY`."""

    sessions: Sessions
    settings: ApiSettings
    tasks: Tasks | None = None


KEY = "dependencies"


def dependencies(request: Request) -> Dependencies:
    deps: Dependencies = request.context[KEY]
    return deps


def not_enabled(capability: str) -> WrongSchema:
    """The one answer to a route whose capability this deployment lacks: 404 not-enabled."""
    return WrongSchema(f"this deployment cannot {capability}")


def caller(request: Request) -> Caller:
    """The caller, from the verified token's claims."""
    return caller_of(request.resolved_event.raw_event, dependencies(request).settings)


def caller_of(event: dict[str, Any], settings: ApiSettings) -> Caller:
    """The caller an event's verified token names (Unauthenticated without one)."""
    claims = (((event.get("requestContext") or {}).get("authorizer") or {}).get("jwt") or {}).get("claims")
    return caller_from_claims(claims, operator_scope=settings.operator_scope, subject_ids=settings.subject_ids)


@contextmanager
def me(request: Request) -> Iterator[UserSession]:
    """The caller's own data, in one transaction as the caller (row-level security); a route
    uses the feature's service it needs (`.memory`, `.kv`, ...), and only that one is built."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    with dependencies(request).sessions.session(user.user_id) as session:
        yield session


@contextmanager
def operator(request: Request, user_id: str, action: str) -> Iterator[UserSession]:
    """A user's data for an operator, in one transaction with the service's rights (logged)."""
    acting = operator_caller(request, action, user_id)
    with dependencies(request).sessions.session(user_id, operator=acting.subject) as session:
        yield session


def operator_caller(request: Request, action: str, user_id: str | None = None) -> Caller:
    """The caller, when it holds the operator scope or group (else Forbidden); the action is logged."""
    acting = caller(request)
    if not acting.operator:
        scope = dependencies(request).settings.operator_scope
        raise Forbidden(f"operator routes need the {scope!r} scope or group")
    if user_id is not None:
        request.context["user_id"] = user_id
    logger.info(
        "operator action", operator=acting.subject, user_id=user_id, action=action, request_id=request_id(request)
    )
    metrics.add_metric(name="OperatorActions", unit="Count", value=1)
    return acting


def request_id(request: Request) -> str | None:
    return event_request_id(request.resolved_event.raw_event)


def event_request_id(event: dict[str, Any]) -> str | None:
    """API Gateway's id of the request (the problem's `instance`, in every log line about it)."""
    context = event.get("requestContext")
    return context.get("requestId") if isinstance(context, dict) else None


def edit(
    request: Request, if_match: str | None, key: str | None, *, source: str = "api", action: str | None = None
) -> Edit:
    """A write's preconditions from its headers; a stale If-Match then answers 412 (not 409)."""
    version = parse_if_match(if_match)
    request.context["if_match"] = version is not None
    return Edit(source=source, idempotency_key=idempotency_key(key), if_match=version, action=action)


_IF_MATCH = re.compile(r'^(?:W/)?"?([0-9]{1,9})"?$')


def parse_if_match(value: str | None) -> int | None:
    """The version an If-Match header names ("7", W/"7", 7), or None for no header or `*`."""
    if value is None or value.strip() == "*":
        return None
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses: a 500) and other scripts' digits.
    match = _IF_MATCH.match(value.strip())
    if match is None:
        raise HttpProblem(BAD_REQUEST, 'If-Match must be the version as an ETag, for example "7"')
    return int(match.group(1))


def refresh_tasks(request: Request) -> Tasks:
    """The services that queue refreshes (404 not-enabled where the deployment has no worker queue)."""
    tasks = dependencies(request).tasks
    if tasks is None or not dependencies(request).settings.queue_url:
        raise not_enabled("queue refreshes (no worker queue: QUEUE_URL)")
    return tasks


def request_refresh(request: Request, user_id: uuid.UUID, by: Requester) -> RefreshQueued:
    """Queue a refresh of the user's pending activity (jobs/refresh.py: logged and counted),
    rate-limited per user by REFRESH_MIN_INTERVAL_SECONDS, with the service's rights (the route
    names the user)."""
    tasks = refresh_tasks(request)
    claims, sender = tasks.refresh_queue()
    interval = timedelta(seconds=dependencies(request).settings.refresh_min_interval_seconds)
    return queue_refresh(user_id, claims=claims, sender=sender, interval=interval, by=by, now=tasks.clock())


def trigger_memories(request: Request, threshold_minutes: int | None) -> TriggerReport:
    """The conversation-memory trigger (jobs/conversations.py: logged and counted) with the
    service's rights (operators only: the route checks)."""
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("trigger tasks")
    store, sender = tasks.conversation_trigger()
    return trigger_memory_generation(store, sender, dependencies(request).settings, threshold_minutes=threshold_minutes)

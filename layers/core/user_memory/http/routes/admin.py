"""Operators' views of one user, all under /admin/users/<user_id>, with the service's rights (each
logged as `operator action`): the memory, its history, figures and search, key-value entries,
conversations, the companion's reads, the export, the erasure and a refresh; the views an end
user has through /me. Every answer is bounded (days, pages, the size plot's points)."""

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from user_memory.domain.account import operator_requester
from user_memory.domain.model import parse_user_id
from user_memory.http import models, responses
from user_memory.http.context import operator, operator_caller, request_refresh, start_export
from user_memory.http.openapi import responses as answers
from user_memory.http.params import (
    AsOf,
    Before,
    ConversationCursor,
    ConversationLimit,
    Day,
    Days,
    From,
    Limit,
    RangeFrom,
    RangeTo,
    SearchK,
    SearchQuery,
    Since,
    To,
    UserId,
    Version,
)
from user_memory.http.routes.kv import After, Namespace, PageSize
from user_memory.observability import logger

router = Router()  # under /admin/users/<user_id>


@router.get("/memory", responses=answers(models.Memory, etag=True), tags=["admin"])
def admin_get_memory(
    request: Request, user_id: UserId, version: Version = None, as_of: AsOf = None
) -> Response[models.Memory]:
    """Operators: a user's memory document (head, version or time)."""
    with operator(request, user_id, "read memory") as session:
        return responses.read(session.memory, version, as_of)


@router.get("/memory/history", responses=answers(models.History), tags=["admin"])
def admin_get_history(request: Request, user_id: UserId, limit: Limit = 50, before: Before = None) -> models.History:
    """Operators: a user's versions, newest first."""
    with operator(request, user_id, "read history") as session:
        return responses.history(session.memory, limit, before)


@router.get("/memory/diff", responses=answers(models.Diff), tags=["admin"])
def admin_get_diff(request: Request, user_id: UserId, from_version: From, to_version: To) -> models.Diff:
    """Operators: one patch between two of a user's versions."""
    with operator(request, user_id, "read diff") as session:
        return responses.diff(session.memory, from_version, to_version)


@router.get("/memory/changes", responses=answers(models.Changes, etag=True), tags=["admin"])
def admin_get_changes(request: Request, user_id: UserId, since: Since) -> Response[models.Changes]:
    """Operators: one patch from `since` to a user's head."""
    with operator(request, user_id, "read changes") as session:
        return responses.changes(session.memory, since)


@router.get("/export", responses=answers(models.Export), tags=["admin"])
def admin_export(request: Request, user_id: UserId) -> models.Export:
    """Operators: everything stored about a user (a data-protection request)."""
    with operator(request, user_id, "export") as session:
        return responses.export(session.account)


@router.post("/export", responses=answers(models.ExportJob), tags=["admin"])
def admin_start_export(request: Request, user_id: UserId) -> models.ExportJob:
    """Operators: start an export of a user as JSON Lines (any size); poll GET /admin/exports/{export_id}."""
    acting = operator_caller(request, "start export", user_id)
    return responses.export_job(*start_export(request, parse_user_id(user_id), operator_requester(acting.subject)))


@router.delete("/", responses=answers(models.Erased), tags=["admin"])
def admin_erase(request: Request, user_id: UserId) -> models.Erased:
    """Operators: erase every row of a user, history included (a data-protection request)."""
    with operator(request, user_id, "erase") as session:
        receipt = session.account.erase()
    logger.info("user erased", user_id=str(session.user_id), rows=sum(receipt.deleted.values()), receipt=receipt.id)
    return responses.erased(session.user_id, receipt)


@router.post("/memory/refresh", responses=answers(models.RefreshQueued, status=202), tags=["admin"])
def admin_refresh(request: Request, user_id: UserId) -> Response[models.RefreshQueued]:
    """Operators: summarize a user's pending activity now (run key ondemand:<time>), rate-limited per user
    as the user's own refresh (within the interval: 202 with the refresh already queued)."""
    operator_caller(request, "refresh memory", user_id)
    return responses.refresh_queued(request_refresh(request, parse_user_id(user_id), "operator"))


@router.get("/memory/stats", responses=answers(models.Stats), tags=["admin"])
def admin_get_stats(request: Request, user_id: UserId, days: Days = 90) -> models.Stats:
    """Operators: a user's figures to plot."""
    with operator(request, user_id, "read stats") as session:
        return responses.stats(session.overview, days)


@router.get("/kv", responses=answers(models.KvNamespaces), tags=["admin"])
def admin_list_namespaces(request: Request, user_id: UserId) -> models.KvNamespaces:
    """Operators: a user's key-value namespaces."""
    with operator(request, user_id, "read kv namespaces") as session:
        return responses.namespaces(session.overview)


@router.get("/kv/<namespace>", responses=answers(models.KvPage), tags=["admin"])
def admin_list_kv(
    request: Request, user_id: UserId, namespace: Namespace, limit: PageSize = 100, after: After = None
) -> models.KvPage:
    """Operators: a user's live entries of a namespace, in pages."""
    with operator(request, user_id, "read kv") as session:
        page = session.kv.list(namespace, limit=limit, after=after)
    entries, next_after = responses.within_response_budget(page.entries, page.next_after_key)
    return models.KvPage(namespace=namespace, items=[responses.kv(e) for e in entries], next_after=next_after)


@router.get("/conversations", responses=answers(models.Conversations), tags=["admin"])
def admin_list_conversations(
    request: Request, user_id: UserId, limit: ConversationLimit = 20, after: ConversationCursor = None
) -> models.Conversations:
    """Operators: a user's conversations with their memories."""
    with operator(request, user_id, "read conversations") as session:
        return responses.conversations(session.overview, limit, after)


@router.get("/goals", responses=answers(models.ActiveGoals), tags=["admin"])
def admin_active_goals(request: Request, user_id: UserId) -> models.ActiveGoals:
    """Operators: a user's active goals."""
    with operator(request, user_id, "read goals") as session:
        return responses.active_goals(session.companion, None)


@router.get("/todos/due", responses=answers(models.TodosDue), tags=["admin"])
def admin_todos_due(request: Request, user_id: UserId, on: Day = None) -> models.TodosDue:
    """Operators: a user's open to-dos due on or before a day (the user's today), overdue first."""
    with operator(request, user_id, "read todos") as session:
        return responses.todos_due(session.companion, on)


@router.get("/events", responses=answers(models.EventsInRange), tags=["admin"])
def admin_events(
    request: Request, user_id: UserId, range_from: RangeFrom = None, range_to: RangeTo = None
) -> models.EventsInRange:
    """Operators: occurrences of a user's events in [from, to) (recurring events expanded)."""
    with operator(request, user_id, "read events") as session:
        return responses.events_in_range(session.companion, range_from, range_to)


@router.get("/memory/search", responses=answers(models.SearchResults), tags=["admin"])
def admin_search(request: Request, user_id: UserId, q: SearchQuery, k: SearchK = 10) -> models.SearchResults:
    """Operators: the items of a user's memory that best match `q`."""
    with operator(request, user_id, "search memory") as session:
        return responses.search(session.search, q, k, "auto")

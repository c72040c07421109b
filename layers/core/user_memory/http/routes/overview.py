"""What the console reads beside the memory routes, for the caller (/me) and for operators (/admin).

The plots' figures (`/memory/stats`), the key-value namespaces, the conversations with their
memories; and for operators the views an end user already has through /me: a user's key-value
entries, goals, to-dos due, events and search. Every operator read is logged as `operator
action` (`context.operator`). Every answer is bounded (days, pages, the size plot's points).
"""

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import JsonValue

from user_memory.domain.memory.document import document_problems
from user_memory.domain.overview import OverviewService
from user_memory.errors import InvalidRequest
from user_memory.http import models, responses
from user_memory.http.context import caller, dependencies, me, operator
from user_memory.http.openapi import responses as answers
from user_memory.http.params import Day, RangeFrom, RangeTo
from user_memory.http.routes.kv import After, Namespace, PageSize
from user_memory.http.routes.search import SearchK, SearchQuery

router = Router()

UserId = Annotated[str, Path(description="The user's id (a UUID).")]
Days = Annotated[int, Query(ge=1, le=366, description="Figures per UTC day over this many days.")]
ConversationLimit = Annotated[int, Query(ge=1, le=100)]
ConversationCursor = Annotated[
    str | None, Query(min_length=1, max_length=600, description="The cursor: `next_after` of the previous page.")
]


# -- the caller's own --------------------------------------------------------------------------------


@router.get("/me/memory/stats", responses=answers(models.Stats), tags=["memory"])
def get_stats(request: Request, days: Days = 90) -> models.Stats:
    """Figures to plot: the size of the newest versions, and per day the versions, the summaries'
    applied and refused edits and their LLM tokens."""
    with me(request) as session:
        return _stats(session.overview, days)


@router.post("/me/memory/validate", responses=answers(models.DocumentCheck), tags=["memory"])
def validate_memory(
    request: Request, document: Annotated[dict[str, JsonValue], Body(description="A whole document.")]
) -> models.DocumentCheck:
    """Check a document against the deployment's schema and size limit without writing it: the
    problems, field by field (the console shows them before a save)."""
    settings = dependencies(request).settings
    caller(request)  # a caller like any other route's, though nothing is read
    problems = document_problems(document, settings.document_schema, max_bytes=settings.max_document_bytes)
    return models.DocumentCheck(
        valid=not problems, problems=[models.DocumentProblem(path=p, message=m) for p, m in problems]
    )


@router.get("/me/kv", responses=answers(models.KvNamespaces), tags=["kv"])
def list_namespaces(request: Request) -> models.KvNamespaces:
    """The namespaces holding live key-value entries, with their counts."""
    with me(request) as session:
        return _namespaces(session.overview)


@router.get("/me/conversations", responses=answers(models.Conversations), tags=["conversations"])
def list_conversations(
    request: Request, limit: ConversationLimit = 20, after: ConversationCursor = None
) -> models.Conversations:
    """The caller's conversations, newest message first, each with its memory."""
    with me(request) as session:
        return _conversations(session.overview, limit, after)


# -- operators: any user's ---------------------------------------------------------------------------


@router.get("/admin/users/<user_id>/memory/stats", responses=answers(models.Stats), tags=["admin"])
def admin_get_stats(request: Request, user_id: UserId, days: Days = 90) -> models.Stats:
    """Operators: a user's figures to plot."""
    with operator(request, user_id, "read stats") as session:
        return _stats(session.overview, days)


@router.get("/admin/users/<user_id>/kv", responses=answers(models.KvNamespaces), tags=["admin"])
def admin_list_namespaces(request: Request, user_id: UserId) -> models.KvNamespaces:
    """Operators: a user's key-value namespaces."""
    with operator(request, user_id, "read kv namespaces") as session:
        return _namespaces(session.overview)


@router.get("/admin/users/<user_id>/kv/<namespace>", responses=answers(models.KvPage), tags=["admin"])
def admin_list_kv(
    request: Request, user_id: UserId, namespace: Namespace, limit: PageSize = 100, after: After = None
) -> models.KvPage:
    """Operators: a user's live entries of a namespace, in pages."""
    with operator(request, user_id, "read kv") as session:
        page = session.kv.list(namespace, limit=limit, after=after)
    entries, next_after = responses.within_response_budget(page.entries, page.next_after_key)
    return models.KvPage(namespace=namespace, items=[responses.kv(e) for e in entries], next_after=next_after)


@router.get("/admin/users/<user_id>/conversations", responses=answers(models.Conversations), tags=["admin"])
def admin_list_conversations(
    request: Request, user_id: UserId, limit: ConversationLimit = 20, after: ConversationCursor = None
) -> models.Conversations:
    """Operators: a user's conversations with their memories."""
    with operator(request, user_id, "read conversations") as session:
        return _conversations(session.overview, limit, after)


@router.get("/admin/users/<user_id>/goals", responses=answers(models.ActiveGoals), tags=["admin"])
def admin_active_goals(request: Request, user_id: UserId) -> models.ActiveGoals:
    """Operators: a user's active goals."""
    with operator(request, user_id, "read goals") as session:
        return responses.active_goals(session.companion, None)


@router.get("/admin/users/<user_id>/todos/due", responses=answers(models.TodosDue), tags=["admin"])
def admin_todos_due(request: Request, user_id: UserId, on: Day = None) -> models.TodosDue:
    """Operators: a user's open to-dos due on or before a day (the user's today), overdue first."""
    with operator(request, user_id, "read todos") as session:
        return responses.todos_due(session.companion, on)


@router.get("/admin/users/<user_id>/events", responses=answers(models.EventsInRange), tags=["admin"])
def admin_events(
    request: Request, user_id: UserId, range_from: RangeFrom = None, range_to: RangeTo = None
) -> models.EventsInRange:
    """Operators: occurrences of a user's events in [from, to) (recurring events expanded)."""
    with operator(request, user_id, "read events") as session:
        return responses.events_in_range(session.companion, range_from, range_to)


@router.get("/admin/users/<user_id>/memory/search", responses=answers(models.SearchResults), tags=["admin"])
def admin_search(request: Request, user_id: UserId, q: SearchQuery, k: SearchK = 10) -> models.SearchResults:
    """Operators: the items of a user's memory that best match `q`."""
    with operator(request, user_id, "search memory") as session:
        return responses.search(session.search, q, k, "auto")


# -- shared --------------------------------------------------------------------------------------------


def _stats(overview: OverviewService, days: int) -> models.Stats:
    found = overview.stats(days)
    return models.Stats(
        user_id=str(overview.user_id),
        days=days,
        sizes=[models.SizePoint(**p) for p in found["sizes"]],
        per_day=[models.DayFigures(**d) for d in found["days"]],
    )


def _namespaces(overview: OverviewService) -> models.KvNamespaces:
    return models.KvNamespaces(
        user_id=str(overview.user_id), items=[models.KvNamespace(**n) for n in overview.kv_namespaces()]
    )


def _conversations(overview: OverviewService, limit: int, after: str | None) -> models.Conversations:
    rows = overview.conversation_list(limit=limit + 1, after=_cursor(after))
    more = len(rows) > limit
    rows = rows[:limit]
    next_after = _encode_cursor(rows[-1]["last_message_at"], rows[-1]["conversation_id"]) if more and rows else None
    return models.Conversations(
        user_id=str(overview.user_id), items=[models.ConversationSummary(**r) for r in rows], next_after=next_after
    )


def _encode_cursor(at: datetime, conversation_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), conversation_id]).encode()).decode()


def _cursor(text: str | None) -> tuple[datetime, str] | None:
    """A conversations page's cursor: base64url of [last message time, conversation id]."""
    if text is None:
        return None
    try:
        at, conversation_id = json.loads(base64.urlsafe_b64decode(text.encode()))
        moment = datetime.fromisoformat(at)
    except (ValueError, TypeError, binascii.Error, RecursionError):
        raise InvalidRequest("after is not a cursor this API gave (next_after)") from None
    if not isinstance(conversation_id, str) or moment.tzinfo is None:
        raise InvalidRequest("after is not a cursor this API gave (next_after)")
    return moment, conversation_id

"""Operators: any user's memory, history, export and erasure, with the service's rights (each logged)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path

from user_memory.domain.model import parse_user_id
from user_memory.http import models, responses
from user_memory.http.context import operator, operator_caller, request_refresh
from user_memory.http.openapi import responses as answers
from user_memory.http.params import AsOf, Before, From, Limit, Since, To, Version

router = Router()

UserId = Annotated[str, Path(description="The user's id (a UUID).")]


@router.get("/admin/users/<user_id>/memory", responses=answers(models.Memory, etag=True), tags=["admin"])
def admin_get_memory(
    request: Request, user_id: UserId, version: Version = None, as_of: AsOf = None
) -> Response[models.Memory]:
    """Operators: a user's memory document (head, version or time)."""
    with operator(request, user_id, "read memory") as session:
        return responses.read(session.memory, version, as_of)


@router.get("/admin/users/<user_id>/memory/history", responses=answers(models.History), tags=["admin"])
def admin_get_history(request: Request, user_id: UserId, limit: Limit = 50, before: Before = None) -> models.History:
    """Operators: a user's versions, newest first."""
    with operator(request, user_id, "read history") as session:
        return responses.history(session.memory, limit, before)


@router.get("/admin/users/<user_id>/memory/diff", responses=answers(models.Diff), tags=["admin"])
def admin_get_diff(request: Request, user_id: UserId, from_version: From, to_version: To) -> models.Diff:
    """Operators: one patch between two of a user's versions."""
    with operator(request, user_id, "read diff") as session:
        return responses.diff(session.memory, from_version, to_version)


@router.get("/admin/users/<user_id>/memory/changes", responses=answers(models.Changes, etag=True), tags=["admin"])
def admin_get_changes(request: Request, user_id: UserId, since: Since) -> Response[models.Changes]:
    """Operators: one patch from `since` to a user's head."""
    with operator(request, user_id, "read changes") as session:
        return responses.changes(session.memory, since)


@router.get("/admin/users/<user_id>/export", responses=answers(models.Export), tags=["admin"])
def admin_export(request: Request, user_id: UserId) -> models.Export:
    """Operators: everything stored about a user (a data-protection request)."""
    with operator(request, user_id, "export") as session:
        return responses.export(session.account)


@router.delete("/admin/users/<user_id>", responses=answers(models.Erased), tags=["admin"])
def admin_erase(request: Request, user_id: UserId) -> models.Erased:
    """Operators: erase every row of a user, history included (a data-protection request)."""
    with operator(request, user_id, "erase") as session:
        removed = session.account.erase()
    return models.Erased(user_id=str(session.user_id), removed=removed)


@router.post(
    "/admin/users/<user_id>/memory/refresh", responses=answers(models.RefreshQueued, status=202), tags=["admin"]
)
def admin_refresh(request: Request, user_id: UserId) -> Response[models.RefreshQueued]:
    """Operators: summarize a user's pending activity now (run key ondemand:<time>), rate-limited per user
    as the user's own refresh (within the interval: 202 with the refresh already queued)."""
    operator_caller(request, "refresh memory", user_id)
    return responses.refresh_queued(request_refresh(request, parse_user_id(user_id), "operator"))

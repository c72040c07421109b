"""Operators: any user's memory, history, export and erasure, with the service's rights (each logged)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from user_memory.domain.account import operator_requester
from user_memory.domain.model import parse_user_id
from user_memory.http import models, responses
from user_memory.http.context import (
    Receipts,
    dependencies,
    export_jobs,
    not_enabled,
    operator,
    operator_caller,
    refresh_tasks,
)
from user_memory.http.openapi import responses as answers
from user_memory.http.params import AsOf, Before, From, Limit, Since, To, Version
from user_memory.observability import logger

router = Router()

UserId = Annotated[str, Path(description="The user's id (a UUID).")]
ExportId = Annotated[str, Path(max_length=100, description="An export's id (from POST .../export).")]
ReceiptCursor = Annotated[
    str | None, Query(max_length=200, description="The `next` of the page before (receipts older than it).")
]
ReceiptUser = Annotated[str | None, Query(max_length=100, description="Only this user's receipts (a UUID).")]


@router.get("/admin/users/<user_id>/memory", responses=answers(models.Memory, etag=True), tags=["admin"])
def admin_get_memory(
    request: Request, user_id: UserId, version: Version = None, as_of: AsOf = None
) -> Response[models.Memory]:
    """Operators: a user's memory document (head, version or time)."""
    with operator(request, user_id, "read memory") as service:
        return responses.read(service, version, as_of)


@router.get("/admin/users/<user_id>/memory/history", responses=answers(models.History), tags=["admin"])
def admin_get_history(request: Request, user_id: UserId, limit: Limit = 50, before: Before = None) -> models.History:
    """Operators: a user's versions, newest first."""
    with operator(request, user_id, "read history") as service:
        return responses.history(service, limit, before)


@router.get("/admin/users/<user_id>/memory/diff", responses=answers(models.Diff), tags=["admin"])
def admin_get_diff(request: Request, user_id: UserId, from_version: From, to_version: To) -> models.Diff:
    """Operators: one patch between two of a user's versions."""
    with operator(request, user_id, "read diff") as service:
        return responses.diff(service, from_version, to_version)


@router.get("/admin/users/<user_id>/memory/changes", responses=answers(models.Changes, etag=True), tags=["admin"])
def admin_get_changes(request: Request, user_id: UserId, since: Since) -> Response[models.Changes]:
    """Operators: one patch from `since` to a user's head."""
    with operator(request, user_id, "read changes") as service:
        return responses.changes(service, since)


@router.get("/admin/users/<user_id>/export", responses=answers(models.Export), tags=["admin"])
def admin_export(request: Request, user_id: UserId) -> models.Export:
    """Operators: everything stored about a user (a data-protection request)."""
    with operator(request, user_id, "export") as service:
        return responses.export(service)


@router.post("/admin/users/<user_id>/export", responses=answers(models.ExportJob), tags=["admin"])
def admin_start_export(request: Request, user_id: UserId) -> models.ExportJob:
    """Operators: start an export of a user as JSON Lines (any size); poll GET /admin/exports/{export_id}."""
    acting = operator_caller(request, "start export", user_id)
    jobs = export_jobs(request)
    job = jobs.start_export(parse_user_id(user_id), operator_requester(acting.subject))
    return responses.export_job(*jobs.export_job(job.id))


@router.get("/admin/exports/<export_id>", responses=answers(models.ExportJob), tags=["admin"])
def admin_get_export(request: Request, export_id: ExportId) -> models.ExportJob:
    """Operators: any export job, and once done a pre-signed URL to its lines."""
    operator_caller(request, "read export")
    return responses.export_job(*export_jobs(request).export_job(export_id))


@router.delete("/admin/users/<user_id>", responses=answers(models.Erased), tags=["admin"])
def admin_erase(request: Request, user_id: UserId) -> models.Erased:
    """Operators: erase every row of a user, history included (a data-protection request)."""
    with operator(request, user_id, "erase") as service:
        receipt = service.erase()
    logger.info("user erased", user_id=str(service.user_id), rows=sum(receipt.deleted.values()), receipt=receipt.id)
    return responses.erased(service.user_id, receipt)


@router.post(
    "/admin/users/<user_id>/memory/refresh", responses=answers(models.RefreshQueued, status=202), tags=["admin"]
)
def admin_refresh(request: Request, user_id: UserId) -> Response[models.RefreshQueued]:
    """Operators: summarize a user's pending activity now (run key ondemand:<time>), rate-limited per user
    as the user's own refresh (within the interval: 202 with the refresh already queued)."""
    operator_caller(request, "refresh memory", user_id)
    return responses.refresh_queued(refresh_tasks(request).refresh(parse_user_id(user_id), "operator"))


@router.get("/admin/erasures", responses=answers(models.ErasureReceipts), tags=["admin"])
def admin_erasures(
    request: Request, limit: Limit = 50, after: ReceiptCursor = None, user_id: ReceiptUser = None
) -> models.ErasureReceipts:
    """Operators: erasure receipts, newest first; with `user_id`, that user's (found by the receipts' hash)."""
    operator_caller(request, "list erasures", user_id)
    services = dependencies(request).sessions
    if not isinstance(services, Receipts):
        raise not_enabled("list erasure receipts")
    return responses.receipts(services, limit, after, user_id)

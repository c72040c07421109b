"""Operators' data-protection records across users (/admin): an export job by its id, and the
erasure receipts (every erasure stores one, migration 027)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from user_memory.http import models, responses
from user_memory.http.context import Receipts, dependencies, export_jobs, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers
from user_memory.http.params import Limit

router = Router()  # under /admin

ExportId = Annotated[str, Path(max_length=100, description="An export's id (from POST .../export).")]
ReceiptCursor = Annotated[
    str | None, Query(max_length=200, description="The `next` of the page before (receipts older than it).")
]
ReceiptUser = Annotated[str | None, Query(max_length=100, description="Only this user's receipts (a UUID).")]


@router.get("/exports/<export_id>", responses=answers(models.ExportJob), tags=["admin"])
def admin_get_export(request: Request, export_id: ExportId) -> models.ExportJob:
    """Operators: any export job, and once done a pre-signed URL to its lines."""
    operator_caller(request, "read export")
    return responses.export_job(*export_jobs(request).export_job(export_id))


@router.get("/erasures", responses=answers(models.ErasureReceipts), tags=["admin"])
def admin_erasures(
    request: Request, limit: Limit = 50, after: ReceiptCursor = None, user_id: ReceiptUser = None
) -> models.ErasureReceipts:
    """Operators: erasure receipts, newest first; with `user_id`, that user's (found by the receipts' hash)."""
    operator_caller(request, "list erasures", user_id)
    services = dependencies(request).sessions
    if not isinstance(services, Receipts):
        raise not_enabled("list erasure receipts")
    return responses.receipts(services, limit, after, user_id)

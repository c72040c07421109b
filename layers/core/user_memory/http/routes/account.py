"""The caller's account: export everything, erase everything, record activity for the nightly run."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from user_memory.domain.account import REQUESTED_BY_SELF
from user_memory.domain.model import Activity
from user_memory.domain.service import MemoryService
from user_memory.http import models, responses
from user_memory.http.context import caller, export_jobs, me
from user_memory.http.openapi import responses as answers
from user_memory.http.problems import INVALID_INPUT, HttpProblem
from user_memory.observability import logger

router = Router()

ExportId = Annotated[str, Path(max_length=100, description="An export's id (from POST .../export).")]


@router.get("/me/export", responses=answers(models.Export), tags=["account"])
def export_me(request: Request) -> models.Export:
    """Everything stored about the caller: every version, key-value entries, activity."""
    with me(request) as service:
        return responses.export(service)


@router.post("/me/export", responses=answers(models.ExportJob), tags=["account"])
def start_export_me(request: Request) -> models.ExportJob:
    """Start an export of everything stored about the caller as JSON Lines (any size); poll
    GET /me/exports/{export_id} until `done`, then fetch its `url`."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    jobs = export_jobs(request)
    job = jobs.start_export(user.user_id, REQUESTED_BY_SELF)
    return responses.export_job(*jobs.export_job(job.id, user.user_id))


@router.get("/me/exports/<export_id>", responses=answers(models.ExportJob), tags=["account"])
def get_export_me(request: Request, export_id: ExportId) -> models.ExportJob:
    """One of the caller's exports: its state and, once done, a pre-signed URL to its lines."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    return responses.export_job(*export_jobs(request).export_job(export_id, user.user_id))


@router.delete("/me", responses=answers(models.Erased), tags=["account"])
def erase_me(request: Request) -> models.Erased:
    """Erase every row of the caller, history included, in one transaction, and the caller's
    finished exports; answers the receipt stored with it."""
    with me(request) as service:
        receipt = service.erase()
    logger.info("user erased", user_id=str(service.user_id), rows=sum(receipt.deleted.values()), receipt=receipt.id)
    return responses.erased(service.user_id, receipt)


@router.post("/me/activity", responses=answers(models.ActivityRecorded), tags=["account"])
def post_activity(request: Request, batch: Annotated[models.ActivityBatch, Body()]) -> models.ActivityRecorded:
    """Record activity for the next daily summary; repeats of (source, external_id) are ignored."""
    with me(request) as service:
        received, recorded = service.record_activity(_activities(service, batch))
    return models.ActivityRecorded(received=received, recorded=recorded)


def _activities(service: MemoryService, batch: models.ActivityBatch) -> list[Activity]:
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

"""The caller's account (/me): export everything (at once, or as a job), erase everything, record
activity for the nightly run."""

import uuid
from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from user_memory.domain.account import REQUESTED_BY_SELF
from user_memory.domain.model import Activity
from user_memory.http import models, responses
from user_memory.http.context import caller, export_jobs, me, start_export
from user_memory.http.openapi import responses as answers
from user_memory.http.problems import INVALID_INPUT, HttpProblem
from user_memory.observability import logger

router = Router()  # under /me

ExportId = Annotated[str, Path(max_length=100, description="An export's id (from POST .../export).")]


@router.get("/export", responses=answers(models.Export), tags=["account"])
def export_me(request: Request) -> models.Export:
    """Everything stored about the caller: every version, key-value entries, activity."""
    with me(request) as session:
        return responses.export(session.account)


@router.post("/export", responses=answers(models.ExportJob), tags=["account"])
def start_export_me(request: Request) -> models.ExportJob:
    """Start an export of everything stored about the caller as JSON Lines (any size); poll
    GET /me/exports/{export_id} until `done`, then fetch its `url`."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    return responses.export_job(*start_export(request, user.user_id, REQUESTED_BY_SELF))


@router.get("/exports/<export_id>", responses=answers(models.ExportJob), tags=["account"])
def get_export_me(request: Request, export_id: ExportId) -> models.ExportJob:
    """One of the caller's exports: its state and, once done, a pre-signed URL to its lines."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    return responses.export_job(*export_jobs(request).export_job(export_id, user.user_id))


@router.delete("/", responses=answers(models.Erased), tags=["account"])
def erase_me(request: Request) -> models.Erased:
    """Erase every row of the caller, history included, in one transaction, and the caller's
    finished exports; answers the receipt stored with it."""
    with me(request) as session:
        receipt = session.account.erase()
    logger.info("user erased", user_id=str(session.user_id), rows=sum(receipt.deleted.values()), receipt=receipt.id)
    return responses.erased(session.user_id, receipt)


@router.post("/activity", responses=answers(models.ActivityRecorded), tags=["account"])
def post_activity(request: Request, batch: Annotated[models.ActivityBatch, Body()]) -> models.ActivityRecorded:
    """Record activity for the next daily summary; repeats of (source, external_id) are ignored."""
    with me(request) as session:
        received, recorded = session.account.record_activity(_activities(session.user_id, batch))
    return models.ActivityRecorded(received=received, recorded=recorded)


def _activities(user_id: uuid.UUID, batch: models.ActivityBatch) -> list[Activity]:
    items = []
    for item in batch.items:
        if item.occurred_at.tzinfo is None:
            raise HttpProblem(INVALID_INPUT, "occurred_at needs a time zone (for example 2026-11-23T10:00:00Z)")
        items.append(
            Activity(
                user_id=user_id,
                occurred_at=item.occurred_at,
                kind=item.kind,
                payload=item.payload,
                source=item.source,
                external_id=item.external_id,
            )
        )
    return items

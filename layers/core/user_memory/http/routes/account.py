"""The caller's account: export everything, erase everything, record activity for the nightly run."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from user_memory.domain.model import Activity
from user_memory.domain.service import MemoryService
from user_memory.http import models, responses
from user_memory.http.context import me
from user_memory.http.openapi import responses as answers
from user_memory.http.problems import INVALID_INPUT, HttpProblem
from user_memory.observability import logger

router = Router()


@router.get("/me/export", responses=answers(models.Export), tags=["account"])
def export_me(request: Request) -> models.Export:
    """Everything stored about the caller: every version, key-value entries, activity."""
    with me(request) as service:
        return responses.export(service)


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

"""The caller's account: export everything, erase everything, record activity for the nightly run."""

import uuid
from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from user_memory.domain.model import Activity
from user_memory.http import models, responses
from user_memory.http.context import me
from user_memory.http.openapi import responses as answers
from user_memory.http.problems import INVALID_INPUT, HttpProblem
from user_memory.observability import logger

router = Router()  # under /me


@router.get("/export", responses=answers(models.Export), tags=["account"])
def export_me(request: Request) -> models.Export:
    """Everything stored about the caller: every version, key-value entries, activity."""
    with me(request) as session:
        return responses.export(session.account)


@router.delete("/", responses=answers(models.Erased), tags=["account"])
def erase_me(request: Request) -> models.Erased:
    """Erase every row of the caller, history included, in one transaction."""
    with me(request) as session:
        removed = session.account.erase()
    logger.info("user erased", user_id=str(session.user_id), rows=sum(removed.values()))
    return models.Erased(user_id=str(session.user_id), removed=removed)


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

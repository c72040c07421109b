"""Operators' tasks (/tasks): work the API starts rather than answers (the conversation-memory
trigger). A run's undo is the runs' (routes/runs.py)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from user_memory.domain.conversations.model import MAX_INACTIVITY_THRESHOLD_MINUTES
from user_memory.http import models
from user_memory.http.context import operator_caller, trigger_memories
from user_memory.http.openapi import responses as answers

router = Router()  # under /tasks

Threshold = Annotated[
    int | None,
    Query(
        ge=1,
        le=MAX_INACTIVITY_THRESHOLD_MINUTES,
        description="Minutes a conversation must have been quiet (default INACTIVITY_THRESHOLD_MINUTES).",
    ),
]


@router.post("/trigger-memory-generation", responses=answers(models.MemoryGenerationTriggered), tags=["admin"])
def trigger_memory_generation(
    request: Request, threshold_minutes: Threshold = None
) -> models.MemoryGenerationTriggered:
    """Operators: queue GENERATE_MEMORY_BATCH messages for every conversation quiet for longer than the
    threshold that has no memory, or messages newer than its memory."""
    operator_caller(request, "trigger memory generation")
    report = trigger_memories(request, threshold_minutes)
    return models.MemoryGenerationTriggered.model_validate(report, from_attributes=True)

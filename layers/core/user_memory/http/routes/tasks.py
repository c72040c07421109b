"""Operators' tasks: work the API starts rather than answers (today: the conversation-memory trigger)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from user_memory.domain.conversations.model import MAX_INACTIVITY_THRESHOLD_MINUTES
from user_memory.http import models
from user_memory.http.context import dependencies, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers

router = Router()

Threshold = Annotated[
    int | None,
    Query(
        ge=1,
        le=MAX_INACTIVITY_THRESHOLD_MINUTES,
        description="Minutes a conversation must have been quiet (default INACTIVITY_THRESHOLD_MINUTES).",
    ),
]


RunKey = Annotated[str, Path(min_length=1, max_length=200, description="A run key, e.g. daily:2026-11-21.")]


@router.get("/admin/runs/<run_key>", responses=answers(models.RunReport), tags=["admin"])
def get_run_report(request: Request, run_key: RunKey) -> models.RunReport:
    """Operators: one run's totals over the versions it wrote: users, activities, model calls, tokens and
    their cost at the prices of the run. Users that failed wrote no version: the worker's `batch done`
    lines and the UsersFailed metric count them."""
    operator_caller(request, "read run report")
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("report runs")
    return models.RunReport.model_validate(tasks.run_report(run_key))


@router.post("/tasks/trigger-memory-generation", responses=answers(models.MemoryGenerationTriggered), tags=["admin"])
def trigger_memory_generation(
    request: Request, threshold_minutes: Threshold = None
) -> models.MemoryGenerationTriggered:
    """Operators: queue GENERATE_MEMORY_BATCH messages for every conversation quiet for longer than the
    threshold that has no memory, or messages newer than its memory."""
    operator_caller(request, "trigger memory generation")
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("trigger tasks")
    report = tasks.trigger_memory_generation(threshold_minutes)
    return models.MemoryGenerationTriggered.model_validate(report, from_attributes=True)

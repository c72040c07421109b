"""Operators' runs (/admin/runs): the runs newest first with their totals, one run's report, and its
undo (started on the worker queue, its report under /admin/run-reverts)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from user_memory.domain.model import parse_user_id
from user_memory.http import models
from user_memory.http.context import dependencies, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers
from user_memory.http.params import decode_cursor, encode_cursor
from user_memory.http.routes.kv import _path_key

router = Router()  # under /admin


RunKey = Annotated[str, Path(min_length=1, max_length=200, description="A run key, e.g. daily:2026-11-21.")]


@router.get("/runs/<run_key>", responses=answers(models.RunReport), tags=["admin"])
def get_run_report(request: Request, run_key: RunKey) -> models.RunReport:
    """Operators: one run's totals over the versions it wrote: users, activities, model calls, tokens and
    their cost at the prices of the run. Users that failed wrote no version: the worker's `batch done`
    lines and the UsersFailed metric count them."""
    operator_caller(request, "read run report")
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("report runs")
    # A client may percent-encode the key's colon; the resolver hands the segment over as sent.
    return models.RunReport.model_validate(tasks.run_report(_path_key(run_key)))


RunsLimit = Annotated[int, Query(ge=1, le=100, description="Runs per page.")]
RunsCursor = Annotated[
    str | None, Query(min_length=1, max_length=600, description="The cursor: `next_after` of the previous page.")
]
RevertUser = Annotated[
    str | None, Query(min_length=1, max_length=100, description="Undo the run for this user only (a UUID).")
]
RevertId = Annotated[str, Path(min_length=1, max_length=100, description="The undo's id (a UUID).")]


@router.get("/runs", responses=answers(models.RunList), tags=["admin"])
def list_runs(request: Request, limit: RunsLimit = 20, after: RunsCursor = None) -> models.RunList:
    """Operators: every run (its run key: nightly, on demand, an undo), the newest version first, with
    its totals."""
    operator_caller(request, "list runs")
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("report runs")
    rows = tasks.list_runs(limit=limit + 1, after=decode_cursor(after))
    more = len(rows) > limit
    rows = rows[:limit]
    next_after = encode_cursor(rows[-1]["last_written_at"], rows[-1]["run_key"]) if more and rows else None
    return models.RunList(items=[models.RunReport.model_validate(r) for r in rows], next_after=next_after)


@router.post("/runs/<run_key>/revert", responses=answers(models.RunRevert), tags=["admin"])
def revert_run(request: Request, run_key: RunKey, user_id: RevertUser = None) -> models.RunRevert:
    """Operators: undo a run's version for every user it wrote one for (or `user_id` only), through the
    worker queue. Each user gets a new version (source `run-revert:<run key>`) that reverts the run's
    version, or, after later versions, applies its inverse where they changed nothing it changed; else
    the user is left untouched and listed as a conflict with the paths. Starting it again resumes it
    (its pending and failed users are queued again); read its progress at /admin/run-reverts/{id}."""
    acting = operator_caller(request, "revert run", user_id)
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("revert runs")
    uid = parse_user_id(user_id) if user_id is not None else None
    return models.RunRevert.model_validate(tasks.start_run_revert(_path_key(run_key), uid, acting.subject))


@router.get("/run-reverts/<revert_id>", responses=answers(models.RunRevert), tags=["admin"])
def get_run_revert(request: Request, revert_id: RevertId) -> models.RunRevert:
    """Operators: an undo of a run so far: users reverted, unchanged, in conflict (with the paths),
    failed (with the reason) and still pending."""
    operator_caller(request, "read run revert")
    tasks = dependencies(request).tasks
    if tasks is None:
        raise not_enabled("revert runs")
    return models.RunRevert.model_validate(tasks.run_revert_status(parse_user_id(revert_id)))

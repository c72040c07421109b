"""Operators: import an export file into an empty memory (create, upload, start, poll; each
logged). The work is jobs/imports.py's, on the worker queue (or in the request without one)."""

from typing import Annotated, Any, Protocol, runtime_checkable

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from user_memory.domain.account import operator_requester
from user_memory.domain.model import parse_user_id
from user_memory.http import models
from user_memory.http.context import dependencies, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers
from user_memory.jobs.imports import run_import_job, send_import

router = Router()

ImportId = Annotated[str, Path(max_length=100, description="An import's id (from POST /admin/imports).")]


@runtime_checkable
class ImportJobs(Protocol):
    """Import jobs, with the service's rights (ApiServices; the routes check the caller)."""

    def create_import(self, user_id: Any, requested_by: str) -> tuple[Any, str]: ...

    def queue_import(self, import_id: str) -> tuple[Any, Any]: ...

    def import_sender(self) -> Any: ...

    def import_stores(self) -> tuple[Any, Any]: ...

    def import_job(self, import_id: str) -> tuple[Any, str | None]: ...


def _jobs(request: Request) -> ImportJobs:
    services = dependencies(request).sessions
    if not isinstance(services, ImportJobs):
        raise not_enabled("import")
    return services


def _model(job: Any, upload_url: str | None) -> models.ImportJob:
    return models.ImportJob(
        id=job.id, user_id=str(job.user_id), status=job.status, created_at=job.created_at, started_at=job.started_at,
        finished_at=job.finished_at, versions=job.versions, kv=job.kv, error_type=job.error_type, error=job.error,
        upload_url=upload_url,
    )  # fmt: skip


@router.post("/", responses=answers(models.ImportJob), tags=["admin"])
def create_import(request: Request, new: Annotated[models.ImportNew, Body()]) -> models.ImportJob:
    """Operators: a new import into a user's empty memory, and where to PUT the export file; then
    POST /admin/imports/{import_id}/start."""
    acting = operator_caller(request, "create import", new.user_id)
    job, url = _jobs(request).create_import(parse_user_id(new.user_id), operator_requester(acting.subject))
    return _model(job, url)


@router.post("/<import_id>/start", responses=answers(models.ImportJob), tags=["admin"])
def start_import(request: Request, import_id: ImportId) -> models.ImportJob:
    """Operators: import the uploaded file (queued for the worker; run now where there is no queue).
    Idempotent: started again, a job queued, running or done is answered as it is."""
    operator_caller(request, "start import")
    jobs = _jobs(request)
    job = _start(jobs, import_id)
    if job.status == "failed":
        return _model(*jobs.import_job(import_id))
    return _model(job, None)


def _start(jobs: ImportJobs, import_id: str) -> Any:
    """Queue an uploaded import for the worker (QUEUE_URL), or run it here and now where there is no
    queue (the local kit). Started again, a job queued, running or done is answered as it is."""
    book, queued = jobs.queue_import(import_id)
    if queued is None:
        return book.get(import_id)
    sender = jobs.import_sender()
    if sender is not None:
        return send_import(book, sender, queued)
    return run_import_job(*jobs.import_stores(), queued.id)


@router.get("/<import_id>", responses=answers(models.ImportJob), tags=["admin"])
def get_import(request: Request, import_id: ImportId) -> models.ImportJob:
    """Operators: an import's state (what it wrote, or why it failed)."""
    operator_caller(request, "read import")
    return _model(*_jobs(request).import_job(import_id))

"""Import jobs started through the API (POST /admin/imports, then .../start): an export file an
operator uploaded, written into an empty memory under the job's user id.

`run_import_job` claims a queued job (once), streams the uploaded object (never the whole file in
memory) through `run_import` in one transaction with the job's row held and marked done, so a bad
line anywhere leaves nothing written and an erase of the user never misses what it wrote, and
deletes the upload: the file holds the user's content and the memory now
does. A file that is not an export (InvalidExport) or a user that has a memory already
(ImportTargetNotEmpty) fails the job with that type, logged and counted, and is not retried (it
would fail the same); anything else fails it and is raised (the worker's record fails; starting
the job again retries it).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from user_memory.adapters.exports import PostgresExports
from user_memory.adapters.imports import ImportJob, PostgresImports
from user_memory.adapters.postgres import ConnectionSource, transaction
from user_memory.domain.account import ExportObjects
from user_memory.domain.messages import ImportUser
from user_memory.domain.ports import MessageSender
from user_memory.errors import ImportFailed, ImportTargetNotEmpty, InvalidExport, describe_failure
from user_memory.jobs.export import run_import
from user_memory.observability import logger, metrics


def send_import(jobs: PostgresImports, sender: MessageSender, queued: ImportJob) -> ImportJob:
    """The queued job's import_user message sent; if it cannot be, the job is failed (logged and
    counted) rather than left queued with no message, so a new start queues it again."""
    body = ImportUser(type="import_user", import_id=uuid.UUID(queued.id)).model_dump_json()
    try:
        sender.send([body])
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("import not queued", import_id=queued.id, error=error, reason=reason)
        metrics.add_metric(name="ImportsFailed", unit="Count", value=1)
        jobs.fail(queued.id, error, reason)
        raise
    return queued


def run_import_job(db: ConnectionSource, objects: ExportObjects, import_id: str) -> ImportJob:
    """Run one queued import job to its end (done, or failed); a job not queued is answered as it is."""
    jobs = PostgresImports(db)
    claimed = jobs.claim(import_id)
    if claimed is None:
        return jobs.get(import_id)  # taken by another run, finished, not started, or gone (NotFound)
    user_id, key = claimed
    started = datetime.now(UTC)
    finished = None
    try:
        # One transaction: the job's row held first (an erase of the user waits for the import, or
        # the import finds the row gone and writes nothing), the import, the job marked done.
        with transaction(db) as tx:
            held = PostgresImports(tx)
            if held.hold(import_id):
                done = run_import(PostgresExports(tx), user_id, objects.read(key))
                finished = held.finish(import_id, done.versions, done.kv)
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("import failed", import_id=import_id, user_id=str(user_id), error=error, reason=reason)
        metrics.add_metric(name="ImportsFailed", unit="Count", value=1)
        failed = jobs.fail(import_id, error, reason)
        if isinstance(err, InvalidExport | ImportTargetNotEmpty) and failed is not None:
            return failed
        raise ImportFailed(f"import {import_id} failed: {error}") from err
    objects.delete([key])  # the memory holds the content now; the upload must not outlive it
    if finished is None:
        logger.info("import dropped", import_id=import_id, reason="the user was erased while it ran")
        raise ImportFailed(f"import {import_id}: the user was erased while it ran")
    logger.info(
        "import job done", import_id=import_id, user_id=str(user_id), versions=finished.versions, kv=finished.kv,
        seconds=round((datetime.now(UTC) - started).total_seconds(), 3),
    )  # fmt: skip
    metrics.add_metric(name="ImportsDone", unit="Count", value=1)
    return finished

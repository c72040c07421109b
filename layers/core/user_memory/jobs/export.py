"""Export jobs and imports: a user's JSON Lines written to S3 (or a folder) and read back.

`run_export` claims a job (once), streams the user's versions, key-value entries and activity
into the job's object and marks it done; a job whose row is gone when it finishes (the user was
erased meanwhile) deletes what it wrote. A failure marks the job failed, logged and counted
(ExportsFailed), never with content. `run_import` writes an export back under another user id,
page by page (see domain/export.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from user_memory.adapters.exports import ExportJob, PostgresExports, check_empty
from user_memory.domain.account import ExportObjects
from user_memory.domain.export import ExportCounts, ImportedActivity, ImportedKv, ImportPage, export_lines, read_export
from user_memory.errors import ExportFailed, describe_failure
from user_memory.observability import logger, metrics


def object_key(export_id: str) -> str:
    """Where a job's lines go: by the job's random id, never the user's."""
    return f"exports/{export_id}.jsonl"


def run_export(exports: PostgresExports, objects: ExportObjects, export_id: str) -> ExportJob:
    """Run one export job to its end (done, or failed and raised as ExportFailed)."""
    user_id = exports.claim(export_id)
    if user_id is None:
        return exports.get(export_id)  # taken by another run, finished, or gone (NotFound)
    key = object_key(export_id)
    counts = ExportCounts()
    started = datetime.now(UTC)
    try:
        lines = export_lines(
            user_id, started, exports.versions(user_id), exports.kv(user_id, started), exports.activity(user_id), counts
        )
        size = objects.write(key, lines)
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("export failed", export_id=export_id, user_id=str(user_id), error=error, reason=reason)
        metrics.add_metric(name="ExportsFailed", unit="Count", value=1)
        exports.fail(export_id, f"{error}: {reason}")
        raise ExportFailed(f"export {export_id} failed: {error}") from err
    done = exports.finish(export_id, key, counts.lines, size)
    if done is None:  # erased while it ran: what it wrote must not outlive the erasure
        objects.delete([key])
        logger.info("export dropped", export_id=export_id, reason="the user was erased while it ran")
        raise ExportFailed(f"export {export_id}: the user was erased while it ran")
    seconds = (datetime.now(UTC) - started).total_seconds()
    logger.info(
        "export done", export_id=export_id, user_id=str(user_id), versions=counts.versions, lines=counts.lines,
        bytes=size, seconds=round(seconds, 3),
    )  # fmt: skip
    metrics.add_metric(name="ExportsDone", unit="Count", value=1)
    return done


@dataclass
class Imported:
    """What an import wrote."""

    versions: int = 0
    kv: int = 0
    activity_skipped: int = 0


def run_import(exports: PostgresExports, user_id: uuid.UUID, lines: Iterable[bytes]) -> Imported:
    """Write an export back under `user_id`, whose memory must be empty (ImportTargetNotEmpty).

    Runs on `exports`' connection source: in one transaction (the CLI's), a bad line anywhere
    leaves nothing written."""
    check_empty(exports, user_id)
    done = Imported()
    for record in read_export(lines):
        if isinstance(record, ImportPage):
            done.versions = exports.write_page(user_id, record)
        elif isinstance(record, ImportedKv):
            exports.write_kv(user_id, record)
            done.kv += 1
        elif isinstance(record, ImportedActivity):
            # Not written back: the memory already summarizes it, and unsummarized rows would be
            # summarized into it a second time by the next night's run.
            done.activity_skipped += 1
    exports.catch_up(user_id)
    logger.info(
        "import done", user_id=str(user_id), versions=done.versions, kv=done.kv, activity_skipped=done.activity_skipped
    )
    return done

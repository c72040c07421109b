"""Undoing a run across its users (issue 23): the fan-out and each user's undo.

An operator starts the undo (the API, the CLI): its users are recorded pending (adapters/runs.py)
and one `revert_run` message goes to the worker queue. The worker fans it out into
`revert_run_users` messages of at most MAX_USERS_PER_MESSAGE pending users; each user is undone
alone (domain/runs.py) and its outcome recorded. Every step may run again: a pending user is
the only one worked on, the undo's version carries the per-user run key `run-revert:<key>` (a
repeat writes nothing), and starting the operation again sends what is still pending or failed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.messages import MAX_USERS_PER_MESSAGE, RevertRun, RevertRunUsers
from user_memory.domain.model import WriteStatus
from user_memory.domain.runs import plan_undo, revert_source
from user_memory.errors import InvalidDocument, UserMemoryError, VersionConflict
from user_memory.observability import logger, metrics

ATTEMPTS = 3  # a person's write between the head's read and the undo's append: plan again on the new head


class RevertBook(Protocol):
    """The undo's bookkeeping (adapters/runs.py: PostgresRuns)."""

    def pending(self, revert_id: uuid.UUID, *, after: uuid.UUID | None = None, limit: int = 100) -> list[uuid.UUID]: ...

    def user(self, revert_id: uuid.UUID, user_id: uuid.UUID) -> tuple[str, int, str] | None: ...

    def record(
        self,
        revert_id: uuid.UUID,
        user_id: uuid.UUID,
        outcome: str,
        *,
        version: int | None = None,
        kind: str | None = None,
        paths: list[str] | None = None,
        error: str | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class UserUndone:
    user_id: uuid.UUID
    outcome: str  # reverted, unchanged, conflict, failed, skipped (not pending: done before)
    version: int | None = None
    kind: str | None = None


def pending_messages(book: RevertBook, revert_id: uuid.UUID) -> Iterable[str]:
    """The `revert_run_users` bodies for every pending user of the operation, page by page."""
    after: uuid.UUID | None = None
    while page := book.pending(revert_id, after=after, limit=MAX_USERS_PER_MESSAGE):
        yield RevertRunUsers(type="revert_run_users", revert_id=revert_id, user_ids=page).model_dump_json()
        after = page[-1]


def fan_out(message: RevertRun, book: RevertBook, send: Callable[[list[str]], int]) -> int:
    """Queue the operation's pending users; the number of messages sent."""
    bodies = list(pending_messages(book, message.revert_id))
    sent = send(bodies) if bodies else 0
    logger.info("run revert queued", revert_id=str(message.revert_id), messages=sent)
    return sent


def undo_user(
    book: RevertBook, store: MemoryStore, revert_id: uuid.UUID, user_id: uuid.UUID, *, schema: str, max_bytes: int
) -> UserUndone:
    """Undo the run's version of one user (once: a user already done is skipped) and record how."""
    found = book.user(revert_id, user_id)
    if found is None or found[2] != "pending":
        return UserUndone(user_id, "skipped")
    run_key, run_version, _ = found
    key = revert_source(run_key)
    try:
        done = _undo(store, user_id, run_key, run_version, key, revert_id, schema=schema, max_bytes=max_bytes)
    except UserMemoryError as err:
        logger.warning(
            "run revert failed",
            revert_id=str(revert_id),
            user_id=str(user_id),
            error_type=type(err).__name__,
            reason=str(err)[:200],
        )
        book.record(revert_id, user_id, "failed", error=f"{type(err).__name__}: {err}")
        return UserUndone(user_id, "failed")
    outcome, version, kind, paths = done
    book.record(revert_id, user_id, outcome, version=version, kind=kind, paths=paths)
    logger.info(
        "run revert user",
        revert_id=str(revert_id),
        user_id=str(user_id),
        outcome=outcome,
        kind=kind,
        version=version,
        paths=len(paths or []),
    )
    return UserUndone(user_id, outcome, version, kind)


def _undo(
    store: MemoryStore,
    user_id: uuid.UUID,
    run_key: str,
    run_version: int,
    key: str,
    revert_id: uuid.UUID,
    *,
    schema: str,
    max_bytes: int,
) -> tuple[str, int | None, str | None, list[str] | None]:
    for attempt in range(ATTEMPTS):
        head, recorded = store.head_for_run(user_id, key)
        if recorded is not None:  # this run was undone for this user before (a redelivery, another operation)
            return "reverted", recorded, "repeat", None
        before = store.at(user_id, run_version - 1).document
        run = head.document if head.version == run_version else store.at(user_id, run_version).document
        undo = plan_undo(before, run, head.document, head_is_run=head.version == run_version)
        if undo.document is None:
            return "conflict", None, None, undo.conflicts
        document = undo.document  # as it was (a revert is equal to the version before): checked, not normalized
        try:
            validate_document(document, schema, max_bytes=max_bytes, json_values=True)
        except InvalidDocument as err:
            # Each side was valid alone, together they are not: recorded as failed, for a person.
            raise InvalidDocument(f"the undo would not be a valid document: {err}") from err
        try:
            result = store.append(
                user_id,
                document,
                expected_version=head.version,
                base=head,
                source=key,
                idempotency_key=key,
                provenance={
                    "mode": "run-revert",
                    "run_key": run_key,
                    "reverted_version": run_version,
                    "revert_id": str(revert_id),
                    "undo": undo.kind,
                    "paths": undo.paths,
                },
            )
        except VersionConflict:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        if result.status is WriteStatus.UNCHANGED:
            return "unchanged", None, undo.kind, None
        kind = "repeat" if result.status is WriteStatus.IDEMPOTENT else undo.kind
        return "reverted", result.version, kind, None
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def count(outcomes: Iterable[UserUndone]) -> None:
    """The failed users of a message, one value of UsersFailed (the undo is a run of its own,
    `run-revert:<key>`, alarmed as any run's failed users; its log line says which). Reverted and
    conflicting users are counted in the operation's report (adapters/runs.py), each with a log line."""
    failed = sum(1 for o in outcomes if o.outcome == "failed")
    if failed:
        metrics.add_metric(name="UsersFailed", unit=MetricUnit.Count, value=failed)

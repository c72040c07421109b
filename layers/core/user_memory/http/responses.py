"""Response builders: what the service returns, as the API's models (and a write's headers).

Bodies built from stored rows skip validation (`model_construct`, a hot path): what the store
returns is JSON it parsed itself, documents were validated when written, and tests check every
response against the OpenAPI document.
"""

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aws_lambda_powertools.event_handler import Response

from user_memory.domain.account import AccountService, ErasureReceipt
from user_memory.domain.companion.service import CompanionService
from user_memory.domain.conversations.model import ExportedConversation
from user_memory.domain.kv import KvEntry
from user_memory.domain.model import AppendResult, HistoryEntry, MemoryVersion, parse_user_id
from user_memory.domain.overview import OverviewService
from user_memory.domain.refresh import RefreshQueued
from user_memory.domain.search import SearchService
from user_memory.domain.service import MemoryService
from user_memory.http import models
from user_memory.http.context import Receipts
from user_memory.http.params import decode_cursor, encode_cursor
from user_memory.http.problems import INVALID_INPUT, HttpProblem
from user_memory.observability import logger, metrics

MAX_PAGE_RESPONSE_BYTES = 4 * 1024 * 1024  # well within a Lambda response (6 MB)
MAX_RANGE_OCCURRENCES = 1000


def etag(version: int) -> str:
    return f'"{version}"'


def write_headers(result: AppendResult) -> dict[str, str]:
    """A write's headers: the version as ETag, and Idempotent-Replayed on a key's repeat."""
    headers = {"ETag": etag(result.version)}
    if result.status == "idempotent":
        headers["Idempotent-Replayed"] = "true"
    return headers


def memory(user_id: object, v: MemoryVersion) -> models.Memory:
    return models.Memory.model_construct(
        user_id=str(user_id), version=v.version, document=v.document, created_at=v.created_at, source=v.source
    )


def read(service: MemoryService, version: int | None, as_of: datetime | None) -> Response[models.Memory]:
    """A memory document (head, version or time) with its version as ETag."""
    found = service.read(version=version, as_of=as_of)
    return Response(
        status_code=200,
        content_type="application/json",
        body=memory(service.user_id, found),
        headers={"ETag": etag(found.version)},
    )


def written(user_id: object, result: AppendResult) -> Response[models.Written]:
    body = models.Written.model_construct(
        user_id=str(user_id),
        status=result.status.value,
        version=result.version,
        document=result.document,
        patch=result.patch,
    )
    return Response(status_code=200, content_type="application/json", body=body, headers=write_headers(result))


def history(service: MemoryService, limit: int, before: int | None) -> models.History:
    entries, next_before = service.history(limit=limit, before=before)
    return models.History.model_construct(
        user_id=str(service.user_id), items=[_history_item(e) for e in entries], next_before=next_before
    )


def _history_item(e: HistoryEntry) -> models.HistoryItem:
    return models.HistoryItem.model_construct(
        version=e.version,
        created_at=e.created_at,
        source=e.source,
        operations=len(e.patch),
        change_bytes=len(json.dumps(e.patch, separators=(",", ":"), ensure_ascii=False).encode()),
        checkpoint=e.is_checkpoint,
        provenance=e.provenance,
    )


def diff(service: MemoryService, from_version: int, to_version: int) -> models.Diff:
    patch = service.diff(from_version, to_version)
    return models.Diff.model_construct(  # a verified patch of stored documents
        user_id=str(service.user_id), from_version=from_version, to_version=to_version, patch=patch
    )


def changes(service: MemoryService, since: int) -> Response[models.Changes]:
    found = service.changes_since(since)
    body = models.Changes.model_construct(
        user_id=str(service.user_id), since=found.since, version=found.version, patch=found.patch
    )
    return Response(200, "application/json", body, headers={"ETag": etag(found.version)})


def kv(e: KvEntry) -> models.KvEntry:
    return models.KvEntry.model_validate(e, from_attributes=True)


def within_response_budget(entries: Sequence[KvEntry], next_after: str | None) -> tuple[Sequence[KvEntry], str | None]:
    """A page cut short where its JSON would pass MAX_PAGE_RESPONSE_BYTES, with the cursor to go on from.

    1,000 values of 10 KB are 10 MB, and up to three times that with the response's \\u escapes:
    over what a Lambda function may return (6 MB), so the whole request would fail.
    """
    total = 0
    for n, entry in enumerate(entries):
        total += len(json.dumps(entry.value)) + len(json.dumps(entry.key)) + 200  # the other members
        if total > MAX_PAGE_RESPONSE_BYTES and n > 0:
            return entries[:n], entries[n - 1].key
    return entries, next_after


def element_written(
    user_id: object, collection: str, element_id: str, result: AppendResult
) -> Response[models.ElementWritten]:
    element = (result.document.get(collection) or {}).get(element_id) if isinstance(result.document, dict) else None
    body = models.ElementWritten(
        user_id=str(user_id),
        collection=collection,  # type: ignore[arg-type]
        id=element_id,
        status=result.status.value,
        version=result.version,
        element=element,
    )
    return Response(status_code=200, content_type="application/json", body=body, headers=write_headers(result))


def indexed(row: Any) -> models.IndexedElement:
    return models.IndexedElement(path=row.path, version=row.version, element=row.value)


def active_goals(service: CompanionService, within_days: int | None) -> models.ActiveGoals:
    rows = service.active_goals(within_days)
    return models.ActiveGoals(user_id=str(service.user_id), items=[indexed(r) for r in rows])


def todos_due(service: CompanionService, on: date | None) -> models.TodosDue:
    day, overdue, due = service.todos_due(on)
    return models.TodosDue(
        user_id=str(service.user_id),
        day=day.isoformat(),
        overdue=[indexed(r) for r in overdue],
        due=[indexed(r) for r in due],
    )


_OCCURRENCE = ("id", "path", "version", "occurrence_start", "occurrence_end", "event")


def events_in_range(
    service: CompanionService, range_from: datetime | None, range_to: datetime | None
) -> models.EventsInRange:
    """Occurrences in [from, to) (default: the next 7 days), within the response's budget; events
    whose recurrence could not be expanded are named, logged and counted."""
    start = range_from or datetime.now(UTC)  # within 1900-2999 (params.py): a week later still is a datetime
    end = range_to or start + timedelta(days=7)
    unexpanded: list[str] = []
    found = service.events_between(start, end, unexpanded=unexpanded)
    if unexpanded:
        logger.warning("events not expanded", user_id=str(service.user_id), events=len(unexpanded))
        metrics.add_metric(name="EventsNotExpanded", unit="Count", value=len(unexpanded))
    found, next_from = occurrences_within_budget(found)
    return models.EventsInRange(
        user_id=str(service.user_id),
        from_=start,
        to=end,
        items=[models.Occurrence(**{k: o[k] for k in _OCCURRENCE}) for o in found],
        unexpanded=unexpanded,
        next_from=next_from,
    )


def search(service: SearchService, q: str, k: int, mode: str) -> models.SearchResults:
    result = service.search(q, k, mode)
    hits = [models.SearchHit.model_validate(h, from_attributes=True) for h in result.hits]
    return models.SearchResults(user_id=str(service.user_id), query=q, mode=result.mode, items=hits)


def occurrences_within_budget(found: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Occurrences cut short where there are MAX_RANGE_OCCURRENCES of them or their JSON would pass
    MAX_PAGE_RESPONSE_BYTES (each carries its event: a daily event of 100 KB over a year is 36 MB),
    with the start of the first one left out."""
    sizes: dict[str, int] = {}
    total = 0
    for n, occurrence in enumerate(found):
        path = occurrence["path"]
        if path not in sizes:
            sizes[path] = len(json.dumps(occurrence["event"], ensure_ascii=False).encode()) + 300  # the other members
        total += sizes[path]
        if n >= MAX_RANGE_OCCURRENCES or (total > MAX_PAGE_RESPONSE_BYTES and n > 0):
            return found[:n], str(occurrence["occurrence_start"])
    return found, None


def export(service: AccountService) -> models.Export:
    """Everything stored about a user (the caller's own export, or an operator's)."""
    data = service.export()
    return models.Export(
        user_id=str(service.user_id),
        versions=[memory(service.user_id, v) for v in data["versions"]],
        kv=[kv(e) for e in data["kv"]],
        activity=[
            models.ActivityRecord(
                id=a.id or 0,
                occurred_at=a.occurred_at,
                kind=a.kind,
                payload=a.payload,
                source=a.source,
                external_id=a.external_id,
            )
            for a in data["activity"]
        ],
        conversations=[_conversation(c) for c in data.get("conversations", [])],
        ratings=[models.RatingRecord(**r) for r in data.get("ratings", [])],
        digests=data.get("digests", []),
    )


def _conversation(c: ExportedConversation) -> models.ConversationRecord:
    found = c.memory
    return models.ConversationRecord(
        conversation_id=c.conversation_id,
        first_message_at=c.first_message_at,
        last_message_at=c.last_message_at,
        created_at=c.created_at,
        messages=[models.ConversationMessageRecord.model_validate(m, from_attributes=True) for m in c.messages],
        memory=None if found is None else models.ConversationMemoryRecord.model_validate(found, from_attributes=True),
    )


def refresh_queued(queued: RefreshQueued) -> Response[models.RefreshQueued]:
    """202 with the refresh's run key: queued now, or queued already within the interval."""
    body = models.RefreshQueued(
        user_id=str(queued.user_id),
        run_key=queued.run_key,
        status=queued.status,
        requested_at=queued.requested_at,
        next_allowed_at=queued.next_allowed_at,
    )
    return Response(202, "application/json", body)


def stats(overview: OverviewService, days: int) -> models.Stats:
    found = overview.stats(days)
    return models.Stats(
        user_id=str(overview.user_id),
        days=days,
        sizes=[models.SizePoint(**p) for p in found["sizes"]],
        per_day=[models.DayFigures(**d) for d in found["days"]],
    )


def namespaces(overview: OverviewService) -> models.KvNamespaces:
    return models.KvNamespaces(
        user_id=str(overview.user_id), items=[models.KvNamespace(**n) for n in overview.kv_namespaces()]
    )


def conversations(overview: OverviewService, limit: int, after: str | None) -> models.Conversations:
    rows = overview.conversation_list(limit=limit + 1, after=decode_cursor(after))
    more = len(rows) > limit
    rows = rows[:limit]
    next_after = encode_cursor(rows[-1]["last_message_at"], rows[-1]["conversation_id"]) if more and rows else None
    return models.Conversations(
        user_id=str(overview.user_id), items=[models.ConversationSummary(**r) for r in rows], next_after=next_after
    )


def erased(user_id: object, receipt: ErasureReceipt) -> models.Erased:
    """An erasure's answer: the rows removed per relation, and its receipt."""
    return models.Erased(
        user_id=str(user_id), removed=dict(receipt.deleted), receipt=models.ErasureReceipt(**receipt.as_dict())
    )


def receipts(services: Receipts, limit: int, after: str | None, user_id: str | None) -> models.ErasureReceipts:
    """A page of erasure receipts; the cursor is the last receipt's time and id."""
    before = None
    if after is not None:
        at, _, rid = after.partition("|")
        try:
            before = (datetime.fromisoformat(at), str(uuid.UUID(rid)))
        except ValueError:
            raise HttpProblem(INVALID_INPUT, "after must be the `next` of an earlier page") from None
        if before[0].tzinfo is None:
            raise HttpProblem(INVALID_INPUT, "after must be the `next` of an earlier page")
    user = parse_user_id(user_id) if user_id is not None else None
    found = services.erasure_receipts(limit=limit + 1, before=before, user_id=user)
    page = found[:limit]
    cursor = f"{page[-1].erased_at.isoformat()}|{page[-1].id}" if len(found) > limit else None
    return models.ErasureReceipts(receipts=[models.ErasureReceipt(**r.as_dict()) for r in page], next=cursor)


def export_job(job: Any, url: str | None) -> models.ExportJob:
    """An export job as the API answers it (never who asked: an operator's subject stays theirs)."""
    return models.ExportJob(
        id=job.id,
        user_id=str(job.user_id),
        status=job.status,
        created_at=job.created_at,
        finished_at=job.finished_at,
        lines=job.lines,
        bytes=job.bytes,
        error=job.error,
        url=url,
    )

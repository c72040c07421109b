"""The companion layer's part of the nightly run, per user, after the daily summary.

1. Feedback: the user's unsummarized ratings are folded into the feedback element
   (`elements.summarize_ratings`) as one new version (source `daily:feedback`, the rating ids in
   its provenance), then marked as summarized by it. A run that finds unsummarized ratings a
   feedback version already names (a crash between the two steps, whatever came after it) marks
   them with that version instead of folding them in again.
2. The digest: due and overdue to-dos, the next 7 days' event occurrences (at most
   MAX_DIGEST_EVENTS, the rest counted; recurring events that could not be expanded within the
   budget named, never a failure) and the active goals whose target date is within 14 days, read
   from the item index, stored for the user's today (their basic_info.timezone; after their
   noon, their tomorrow) in daily_digests (a re-run replaces the day's digest).

Both only for the companion schema. Then, for every schema when embeddings are configured, the
texts the night's versions added are embedded (failures are logged and counted, the texts stay
pending: search still finds them by their words).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from user_memory.domain.companion.elements import (
    DIGEST_EVENT_DAYS,
    DIGEST_GOAL_DAYS,
    day_bounds,
    events_between,
    split_due,
    summarize_ratings,
    user_today,
)
from user_memory.domain.companion.ports import NightlyCompanionData
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.repository import MemoryStore
from user_memory.errors import VersionConflict
from user_memory.observability import logger, metrics

MAX_TRIES = 3
MAX_DIGEST_EVENTS = 200  # occurrences listed (a digest is one row and one answer); the rest are counted


@dataclass(frozen=True, kw_only=True)
class CompanionOutcome:
    ratings: int = 0  # ratings summarized
    feedback_version: int | None = None
    digest_day: str | None = None


def summarize_feedback(
    user_id: uuid.UUID, run_key: str, *, store: MemoryStore, companion: NightlyCompanionData, max_document_bytes: int,
    now: datetime,
) -> tuple[int, int | None]:  # fmt: skip
    """Fold the unsummarized ratings into the feedback element; (ratings, version)."""
    ratings = companion.unsummarized_ratings(user_id)
    if not ratings:
        return 0, None
    # A feedback version written before a crash (or by a run whose message then went to the DLQ)
    # names its ratings in its provenance: they are marked with it, never folded in again.
    covered = companion.feedback_versions_of(user_id, [r.id for r in ratings if r.id is not None])
    for version in sorted(set(covered.values())):
        companion.mark_ratings(user_id, [i for i, v in covered.items() if v == version], version)
    ratings = [r for r in ratings if r.id not in covered]
    if not ratings:
        return len(covered), max(covered.values())
    key = f"{run_key}:feedback:{ratings[-1].id}:{len(ratings)}"
    for attempt in range(MAX_TRIES):
        head, recorded = store.head_for_run(user_id, key)
        if recorded is not None:
            version = recorded
            break
        document = validate_document(head.document, "companion", max_bytes=max_document_bytes)
        document["feedback"] = summarize_ratings(
            document.get("feedback") or {}, ratings, now, totals=companion.rating_totals(user_id)
        )
        document = validate_document(document, "companion", max_bytes=max_document_bytes)
        try:
            result = store.append(
                user_id,
                document,
                expected_version=head.version,
                source="daily:feedback",
                idempotency_key=key,
                base=head,
                provenance={"mode": "feedback", "rating_ids": [r.id for r in ratings]},
            )
        except VersionConflict:
            if attempt == MAX_TRIES - 1:
                raise
            continue
        version = result.version
        break
    companion.mark_ratings(user_id, [r.id for r in ratings if r.id is not None], version)
    return len(ratings) + len(covered), version


DIGEST_TURNS_AT_HOUR = 12


def digest_day(document: dict, now: datetime) -> tuple[date, str]:  # type: ignore[type-arg]
    """The day a digest made now is for: the day ahead of the user, in their time zone (their
    today until noon, else their tomorrow: a run at 00:15 UTC is still the evening before for
    a user west of UTC)."""
    today, zone = user_today(document, now)
    local = now.astimezone(ZoneInfo(zone))
    return (today if local.hour < DIGEST_TURNS_AT_HOUR else today + timedelta(days=1)), zone


def make_digest(
    user_id: uuid.UUID, *, store: MemoryStore, companion: NightlyCompanionData, now: datetime
) -> str | None:
    """Build and store the user's digest for the day ahead of them (`digest_day`): overdue and due
    to-dos of that day, event occurrences from then (not before now) for 7 days, active goals whose
    target is within 14 days of it. Returns the day (ISO), or None for a user with no memory."""
    head = store.head(user_id)
    if head.version == 0:
        return None
    today, zone = digest_day(head.document, now)
    day_start, day_end = day_bounds(today, zone)
    overdue, due = split_due(companion.todos_due(user_id, day_end), today, zone)
    since = max(now, day_start)
    unexpanded: list[str] = []
    events = events_between(companion, user_id, since, day_start + timedelta(days=DIGEST_EVENT_DAYS), unexpanded)
    if unexpanded:
        logger.warning("events not expanded", user_id=str(user_id), events=len(unexpanded))
        metrics.add_metric(name="EventsNotExpanded", unit="Count", value=len(unexpanded))
    goals = companion.active_goals(user_id, target_before=day_end + timedelta(days=DIGEST_GOAL_DAYS))
    digest = {
        "day": today.isoformat(),
        "timezone": zone,
        "version": head.version,
        "generated_at": now.astimezone(UTC).isoformat(),
        "todos_overdue": [_brief(r.value, "text", "due_date") for r in overdue],
        "todos_due_today": [_brief(r.value, "text", "due_date") for r in due],
        "events_next_7_days": [
            {
                "id": o["id"],
                "summary": o["event"].get("summary"),
                "start": o["occurrence_start"],
                "end": o["occurrence_end"],
                "location": o["event"].get("location") or "",
            }
            for o in events[:MAX_DIGEST_EVENTS]
        ],  # fmt: skip
        "events_left_out": max(0, len(events) - MAX_DIGEST_EVENTS),
        "events_not_expanded": unexpanded,
        "goals_near_target": [_brief(r.value, "title", "target_date") for r in goals],
    }
    companion.save_digest(user_id, today, digest, head.version)
    return today.isoformat()


def _brief(value: dict, text_field: str, date_field: str) -> dict:  # type: ignore[type-arg]
    return {"id": value.get("id"), text_field: value.get(text_field), date_field: value.get(date_field)}


def companion_nightly(
    user_id: uuid.UUID, run_key: str, *, store: MemoryStore, companion: NightlyCompanionData, max_document_bytes: int,
    now: datetime | None = None,
) -> CompanionOutcome:  # fmt: skip
    """The feedback summary, then the digest (companion schema only)."""
    at = now or datetime.now(UTC)
    ratings, version = summarize_feedback(
        user_id, run_key, store=store, companion=companion, max_document_bytes=max_document_bytes, now=at
    )
    day = make_digest(user_id, store=store, companion=companion, now=at)
    return CompanionOutcome(ratings=ratings, feedback_version=version, digest_day=day)

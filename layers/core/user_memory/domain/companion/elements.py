"""Goals, to-dos and events of the companion schema: their edits, queries, import, digest, feedback.

Edits are functions of the document (MemoryService runs them like any edit: validated against
the schema, If-Match or rebased, idempotent on a key, one new version each). The queries'
rows come from the memory_items index (adapters/companion.py); what is computed here is what
an index cannot do: expanding a recurring event into its occurrences, the digest's shape, and
the feedback summary of a batch of ratings.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from user_memory.domain.companion.items import ELEMENT_KINDS, MAX_ELEMENTS
from user_memory.domain.companion.ports import CompanionData, Rating
from user_memory.domain.companion.recurrence import (
    EVENT_STEPS,
    QUERY_STEPS,
    Budget,
    budget_scope,
    event_start,
    occurrence_starts,
    parse_when,
)
from user_memory.domain.memory.patching import copy_json
from user_memory.domain.model import Document
from user_memory.errors import (
    BudgetExceeded,
    ElementExists,
    InvalidPatch,
    InvalidRequest,
    InvalidTime,
    NotFound,
    UserMemoryError,
)

Collection = Literal["goals", "todos", "events"]
# What "complete" sets, per collection.
COMPLETED_STATUS = {"goals": "completed", "todos": "done", "events": "completed"}
MAX_IMPORT_EVENTS = 250  # one page of Google Calendar's Events.list
DIGEST_EVENT_DAYS = 7
DIGEST_GOAL_DAYS = 14
MAX_OCCURRENCES = 500


def check_collection(name: str) -> Collection:
    if name not in ELEMENT_KINDS:
        raise NotFound(f"unknown element collection {name!r}; known: goals, todos, events")
    return name  # type: ignore[return-value]


def _now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).replace(microsecond=0).isoformat().replace("+00:00", "Z")


_NOUN = {"goals": "goal", "todos": "to-do", "events": "event"}


def _fields(collection: Collection, fields: Any) -> dict[str, Any]:
    if not isinstance(fields, dict):
        raise InvalidRequest(f"a {collection[:-1]} must be a JSON object")
    return dict(fields)


def create(
    collection: Collection, fields: Any, default_id: str | None = None
) -> tuple[str, Callable[[Document], Document]]:
    """The new element's id (given, else `default_id`, else a fresh one) and the edit that adds it
    (ElementExists if taken)."""
    element = _fields(collection, fields)
    element_id = element.setdefault("id", default_id or uuid.uuid4().hex[:12])
    if not isinstance(element_id, str):
        raise InvalidRequest("id must be a string")

    def change(document: Document) -> Document:
        doc = copy_json(document)
        elements = doc.setdefault(collection, {})
        if element_id in elements:
            # Ids stay out of the message (it is logged): a client may put anything in an id.
            raise ElementExists(f"this {collection[:-1]} id is taken; update the {collection[:-1]} with PATCH")
        elements[element_id] = element
        return doc

    return element_id, change


def _existing(doc: Document, collection: Collection, element_id: str) -> dict[str, Any]:
    element = (doc.get(collection) or {}).get(element_id)
    if not isinstance(element, dict):
        raise NotFound(f"no {collection[:-1]} with this id")  # the id stays out of logs
    return element


def update(collection: Collection, element_id: str, fields: Any) -> Callable[[Document], Document]:
    """The edit that merges `fields` into the element (null removes a field: its default returns)."""
    if not isinstance(fields, dict):
        raise InvalidPatch(f"a merge patch for a {_NOUN[collection]} must be a JSON object")
    changes = dict(fields)
    if "id" in changes and changes["id"] != element_id:
        raise InvalidRequest("an element's id cannot change")

    def change(document: Document) -> Document:
        doc = copy_json(document)
        element = _existing(doc, collection, element_id)
        for key, value in changes.items():
            if value is None:
                element.pop(key, None)
            else:
                element[key] = value
        return doc

    return change


def complete(collection: Collection, element_id: str, now: datetime | None = None) -> Callable[[Document], Document]:
    """The edit that marks the element done (a goal completed with 100% progress noted)."""

    def change(document: Document) -> Document:
        doc = copy_json(document)
        element = _existing(doc, collection, element_id)
        if element.get("status") == COMPLETED_STATUS[collection]:
            return doc  # already complete: no new version
        element["status"] = COMPLETED_STATUS[collection]
        if collection != "events":
            element["completed_at"] = _now_iso(now)
        if collection == "goals":
            _note_progress(element, {"at": _now_iso(now), "note": "completed", "percent": 100})
        return doc

    return change


def delete(collection: Collection, element_id: str) -> Callable[[Document], Document]:
    """The edit that removes the element; links to a removed goal (sub-goals, to-dos) are cleared."""

    def change(document: Document) -> Document:
        doc = copy_json(document)
        _existing(doc, collection, element_id)
        del doc[collection][element_id]
        if collection == "goals":
            for goal in (doc.get("goals") or {}).values():
                if goal.get("parent_id") == element_id:
                    goal["parent_id"] = None
            for todo in (doc.get("todos") or {}).values():
                if todo.get("goal_id") == element_id:
                    todo["goal_id"] = None
        return doc

    return change


def validate_element(collection: Collection, element: dict[str, Any]) -> dict[str, Any]:
    """The element in stored form (its model's defaults filled), or InvalidDocument."""
    from pydantic import ValidationError

    from user_memory.domain.companion.schema import ELEMENT_MODELS
    from user_memory.domain.memory.document import invalid_document

    try:
        return ELEMENT_MODELS[collection].model_validate(element).model_dump(mode="json")  # type: ignore[no-any-return]
    except ValidationError as err:
        raise invalid_document(err) from err


# -- Google Calendar ------------------------------------------------------------------------------


def _google_id(raw: Any) -> str:
    text = str(raw or "")
    if re.fullmatch(r"[A-Za-z0-9_.:@-]{1,128}", text):
        return text
    return "gcal-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _google_time(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{name} must be an object with date or dateTime")
    when = value.get("dateTime") or value.get("date")
    if not isinstance(when, str):
        raise InvalidRequest(f"{name} needs date or dateTime")
    return when


def _google_zone(event: dict[str, Any]) -> str:
    """The IANA zone a timed event's recurrence follows (start.timeZone), when it is a valid one."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    start = event.get("start") if isinstance(event.get("start"), dict) else {}
    zone = start.get("timeZone") if isinstance(start, dict) else None
    if not isinstance(zone, str) or not zone:
        return ""
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return ""
    return zone


def _exdate(original: Any) -> str | None:
    """The EXDATE line that removes one occurrence, from an instance's originalStartTime."""
    when = original.get("dateTime") or original.get("date") if isinstance(original, dict) else None
    if not isinstance(when, str):
        return None
    try:
        parsed = parse_when(when)
    except ValueError:
        return None
    if len(when) == 10:
        return f"EXDATE;VALUE=DATE:{when.replace('-', '')}"
    return "EXDATE:" + parsed.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def add_exdate(recurrence: list[str], line: str) -> list[str]:
    """The recurrence with the dates of an EXDATE line added to the EXDATE line of the same form
    (one line per form, however many occurrences are skipped: an event keeps at most 10 lines)."""
    prefix, _, values = line.rpartition(":")
    out = list(recurrence)
    for i, existing in enumerate(out):
        head, _, have = existing.rpartition(":")
        if head == prefix:
            known = have.split(",")
            out[i] = f"{head}:{','.join(known + [v for v in values.split(',') if v not in known])}"
            return out
    return [*out, line]


_GOOGLE_TIMES = ("start", "end", "originalStartTime")


def _check_google_times(event: dict[str, Any]) -> None:
    """Every time the event carries (its start, end, the original start of an instance, `updated`),
    cancelled ones too, held to the rule for every time the service takes (times.py), or
    InvalidTime naming the field: a time the import would only skip or rank is refused like one
    it stores."""
    written = [(f"{name}.{key}", event[name][key]) for name in _GOOGLE_TIMES for key in ("dateTime", "date")
               if isinstance(event.get(name), dict) and event[name].get(key) is not None]  # fmt: skip
    if event.get("updated") is not None:
        written.append(("updated", event["updated"]))
    for field_name, value in written:
        try:
            parse_when(value)
        except ValueError as err:
            raise InvalidTime(f"a Google Calendar event's {field_name} {err}") from err


def from_google_event(event: Any) -> tuple[str, dict[str, Any] | None]:
    """A Google Calendar event resource (Events.list / Events.get JSON) as our event.

    Returns (id, element); element is None for a cancelled event (an incremental sync's deletion).
    """
    if not isinstance(event, dict) or not event.get("id"):
        raise InvalidRequest("a Google Calendar event must be a JSON object with an id")
    element_id = _google_id(event["id"])
    if event.get("status") == "cancelled":
        return element_id, None
    start = _google_time(event.get("start"), "start")
    if start is None:
        raise InvalidRequest("an event has no start (start.date or start.dateTime)")  # ids stay out of logs
    if not isinstance(event.get("attendees") or [], list) or not isinstance(event.get("recurrence") or [], list):
        raise InvalidRequest("an event's attendees and recurrence must be lists")
    attendees = [
        {
            "name": str(a.get("displayName") or ""),
            "email": str(a.get("email") or ""),
            "response_status": str(a.get("responseStatus") or ""),
        }
        for a in event.get("attendees") or []
        if isinstance(a, dict)
    ]
    element = {
        "id": element_id,
        "summary": str(event.get("summary") or "(no title)"),
        "description": str(event.get("description") or ""),
        "start": start,
        "end": _google_time(event.get("end"), "end"),
        "timezone": _google_zone(event),
        "location": str(event.get("location") or ""),
        "attendees": attendees,
        "recurrence": [str(r) for r in event.get("recurrence") or []],
        "status": event.get("status") if event.get("status") in ("confirmed", "tentative") else "confirmed",
        "last_modified": event.get("updated"),
        "source": "google",
    }
    return element_id, {k: v for k, v in element.items() if v is not None}


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    ids: list[str] = field(default_factory=list)


def import_google_events(events: Any, report: ImportReport) -> Callable[[Document], Document]:
    """The edit that imports a page of Google Calendar events: new ones added, newer ones (by
    `updated`) replacing ours, cancelled ones removed; counts go to `report` (one version for all)."""
    events = _google_items(events)
    for event in events:  # every event's times first: the answer never depends on the page's order
        if isinstance(event, dict):
            _check_google_times(event)
    mapped = [from_google_event(e) for e in events]
    for _, element in mapped:
        if element is not None:
            validate_element("events", element)  # name the bad event before anything is written
    ordered = _import_order(mapped, events)

    def change(document: Document) -> Document:
        doc = copy_json(document)
        ours = doc.setdefault("events", {})
        counts = ImportReport(ids=list(dict.fromkeys(element_id for element_id, _ in mapped)))  # as the page lists them
        for element_id, element, raw in ordered:
            _import_item(ours, counts, element_id, element, raw)
        report.__dict__.update(counts.__dict__)
        return doc

    return change


def _google_items(events: Any) -> list[Any]:
    """The page's events as a list: an Events.list page's items, a list, or one event."""
    if isinstance(events, dict) and "items" in events:
        events = events["items"]
    if isinstance(events, dict):
        events = [events]
    if not isinstance(events, list) or not events:
        raise InvalidRequest("send a Google Calendar event, a list of them, or an Events.list page ({'items': [...]})")
    if len(events) > MAX_IMPORT_EVENTS:
        raise InvalidRequest(f"at most {MAX_IMPORT_EVENTS} events per import (one Events.list page)")
    return events


def _import_item(
    ours: dict[str, Any],
    counts: ImportReport,
    element_id: str,
    element: dict[str, Any] | None,
    raw: dict[str, Any],
) -> None:
    """One item of the page into our events, counted."""
    # One occurrence of a recurring event changed or cancelled (Google sends it as its own
    # item naming the series): the series skips that date; a changed one is kept as an event.
    parent = ours.get(_google_id(raw.get("recurringEventId"))) if raw.get("recurringEventId") else None
    skip = _exdate(raw.get("originalStartTime")) if parent is not None else None
    if parent is not None and skip is not None:
        before = list(parent.get("recurrence") or [])
        parent["recurrence"] = add_exdate(before, skip)
        if element is None and parent["recurrence"] != before:
            counts.deleted += 1
            return
    current = ours.get(element_id)
    if element is None:
        if current is not None:
            del ours[element_id]
            counts.deleted += 1
        else:
            counts.unchanged += 1
    elif current is None:
        ours[element_id] = element
        counts.created += 1
    elif element != current and _newer(element.get("last_modified"), current.get("last_modified")):
        # Google's series never lists the dates its cancelled or moved instances took out
        # (they came as items of their own): keep the EXDATE lines they added.
        recurrence = list(element.get("recurrence", []))
        for line in current.get("recurrence") or []:
            if line.startswith("EXDATE"):
                recurrence = add_exdate(recurrence, line)
        ours[element_id] = {**element, "recurrence": recurrence}
        counts.updated += 1
    else:
        counts.unchanged += 1


def _import_order(
    mapped: list[tuple[str, dict[str, Any] | None]], events: list[Any]
) -> list[tuple[str, dict[str, Any] | None, dict[str, Any]]]:
    """The page's items in an order of their own, so that what an import does never depends on
    the order of the page: one item per id (the newest by `updated`; of equally new ones, the
    greater as canonical JSON), then the series and single events before the instances that name
    a series (each group by id), so an instance changes its series as this page leaves it."""
    best: dict[str, tuple[tuple[float, str], dict[str, Any] | None, dict[str, Any]]] = {}
    for (element_id, element), raw in zip(mapped, events, strict=True):
        try:
            updated = parse_when(raw.get("updated")).timestamp()
        except (TypeError, ValueError):
            updated = float("-inf")
        rank = (updated, json.dumps(raw, sort_keys=True, ensure_ascii=False))
        if element_id not in best or rank > best[element_id][0]:
            best[element_id] = (rank, element, raw)
    items = [(element_id, element, raw) for element_id, (_, element, raw) in best.items()]
    return sorted(items, key=lambda item: (bool(item[2].get("recurringEventId")), item[0]))


def _newer(incoming: str | None, current: str | None) -> bool:
    if incoming is None or current is None:
        return incoming is not None or current is None
    try:
        return parse_when(incoming) > parse_when(current)
    except ValueError:
        return incoming != current


# -- queries: occurrences of events in a range ------------------------------------------------------


def occurrences(
    event: dict[str, Any], start: datetime, end: datetime, budget: Budget | None = None
) -> list[dict[str, Any]]:
    """The event's occurrences that overlap [start, end): itself, or its recurrence expanded from
    just before the range, within `budget` (EVENT_STEPS of its own by default): BudgetExceeded
    when it is spent, ValueError for an event whose start cannot be read (a document written
    before its times were checked)."""
    first = event_start(event)
    length = (parse_when(event["end"]) - first) if event.get("end") else timedelta(0)
    rules = [r for r in event.get("recurrence") or [] if isinstance(r, str)]
    if not rules:
        starts = [first]
    else:
        # Lines that cannot be read (a document written before they were checked) count as the
        # first occurrence only.
        try:
            spend = budget or Budget(EVENT_STEPS, "this event's occurrences in the range")
            starts = occurrence_starts(rules, first, start - length, end, spend)[:MAX_OCCURRENCES]
        except BudgetExceeded:
            raise
        except (ValueError, OverflowError):
            starts = [first]
    found = []
    for s in starts:
        e = s + length
        if s < end and (e > start or (e == s and s >= start)):
            found.append(
                {"id": event["id"], "occurrence_start": s.isoformat(), "occurrence_end": e.isoformat(), "event": event}
            )
    return found


def expand_events(
    rows: Sequence[tuple[str, int, dict[str, Any]]], start: datetime, end: datetime, unexpanded: list[str]
) -> list[dict[str, Any]]:
    """The occurrences overlapping [start, end) of the index's event rows (path, version, event),
    by start, all of them within QUERY_STEPS: first every recurring event with an equal share of
    half of it (so a few costly events cannot starve the others), then those that needed more with
    what is left, each at most EVENT_STEPS. An event past its budget, or whose times cannot be read
    (a document written before they were checked), is left out and its id added to `unexpanded`,
    so nothing stored stalls or fails a read."""
    events = [(path, version, e) for path, version, e in rows if isinstance(e, dict) and e.get("status") != "cancelled"]
    recurring = sum(1 for _, _, e in events if e.get("recurrence"))
    share = min(EVENT_STEPS, QUERY_STEPS // (2 * max(1, recurring)))
    found: list[dict[str, Any]] = []
    costly: list[tuple[str, int, dict[str, Any]]] = []
    with budget_scope(QUERY_STEPS, "the occurrences of the events in the range"):
        for passed, steps in ((events, share), (costly, EVENT_STEPS)):
            for path, version, event in list(passed):
                try:
                    budget = Budget(steps, "this event's occurrences in the range")
                    found.extend(
                        {**o, "path": path, "version": version} for o in occurrences(event, start, end, budget)
                    )
                except BudgetExceeded:
                    if passed is events:
                        costly.append((path, version, event))  # again, with what the others left
                    else:
                        unexpanded.append(str(event.get("id")))
                except (ValueError, OverflowError, TypeError, KeyError):
                    unexpanded.append(str(event.get("id")))
    return sorted(found, key=lambda o: (o["occurrence_start"], o["path"]))


def events_between(
    companion: CompanionData, user_id: uuid.UUID, start: datetime, end: datetime, unexpanded: list[str] | None = None
) -> list[dict[str, Any]]:
    """The occurrences of the user's events overlapping [start, end), by start: the index's
    candidate rows expanded (`expand_events`); the ids of recurring events that could not be
    expanded within the budget go to `unexpanded`."""
    rows = companion.event_rows(user_id, start, end)
    left_out = unexpanded if unexpanded is not None else []
    return expand_events([(r.path, r.version, r.value) for r in rows], start, end, left_out)


# -- the daily digest -----------------------------------------------------------------------------


def user_today(document: Document, now: datetime) -> tuple[date, str]:
    """The user's calendar day now (their basic_info.timezone, else UTC) and the zone's name."""
    from zoneinfo import ZoneInfo

    name = ((document.get("basic_info") or {}).get("timezone") or "UTC") if isinstance(document, dict) else "UTC"
    try:
        zone = ZoneInfo(name)
    except Exception:  # a bad name was never validated: fall back to UTC
        name, zone = "UTC", ZoneInfo("UTC")
    return now.astimezone(zone).date(), name


def due_on(due: Any, day: date, day_start: datetime, day_end: datetime) -> str | None:
    """Whether a due date (YYYY-MM-DD, or a date-time) falls before `day` ("overdue"), on it ("due")
    or after it (None); `day_start` and `day_end` are the day's bounds in the user's time zone.

    A date is a calendar day of the user: the index keeps it as that day's UTC midnight, which
    for a zone west of UTC is before the end of the user's previous day (so the index's rows
    for a day can hold the next day's to-dos: they are not due yet)."""
    if not isinstance(due, str):
        return None
    if len(due) == 10:
        text = day.isoformat()
        return "overdue" if due < text else "due" if due == text else None
    try:
        when = parse_when(due)
    except ValueError:
        return None
    return "overdue" if when < day_start else "due" if when < day_end else None


def split_due(rows: Sequence[Any], day: date, zone_name: str) -> tuple[list[Any], list[Any]]:
    """Index rows of open to-dos (`.value` the to-do) as (overdue, due on `day`); later ones dropped."""
    start, end = day_bounds(day, zone_name)
    when = [(r, due_on(r.value.get("due_date"), day, start, end)) for r in rows]
    return [r for r, on in when if on == "overdue"], [r for r, on in when if on == "due"]


def day_bounds(day: date, zone_name: str) -> tuple[datetime, datetime]:
    """[start, end) of a calendar day in a zone, as UTC times."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(zone_name)
    start = datetime.combine(day, datetime.min.time(), zone)
    return start.astimezone(UTC), (start + timedelta(days=1)).astimezone(UTC)


# -- the feedback summary -------------------------------------------------------------------------


_SUGGESTION = re.compile(r"\b(should|could|would be (nice|better)|wish|please|suggest|prefer|instead)\b", re.I)
MAX_FEEDBACK_LINES = 20
MAX_FEEDBACK_LINE_CHARS = 2000


def summarize_ratings(
    feedback: dict[str, Any],
    ratings: Sequence[Rating],
    now: datetime,
    totals: tuple[int, float | None] | None = None,
) -> dict[str, Any]:
    """The feedback element with a batch of ratings folded in (rules, no model): comments of
    ratings 4-5 are positives, 1-2 negatives, and comments that ask for something suggestions;
    the count and the running average move; each list keeps its newest MAX_FEEDBACK_LINES."""
    summary = copy_json(feedback) if isinstance(feedback, dict) else {}
    positives = list(summary.get("positives") or [])
    negatives = list(summary.get("negatives") or [])
    suggestions = list(summary.get("suggestions") or [])
    for r in sorted(ratings, key=lambda r: (r.rated_at, r.id or 0)):
        comment = r.comment.strip()
        tagged = f" [{', '.join(r.tags)}]" if r.tags else ""
        line = ((comment or ", ".join(r.tags)) + ("" if not comment else tagged))[:MAX_FEEDBACK_LINE_CHARS]
        if not line:
            continue
        if r.rating >= 4 and line not in positives:
            positives.append(line)
        elif r.rating <= 2 and line not in negatives:
            negatives.append(line)
        suggestion = comment[:MAX_FEEDBACK_LINE_CHARS]
        if comment and (_SUGGESTION.search(comment) or "suggestion" in r.tags) and suggestion not in suggestions:
            suggestions.append(suggestion)
    if totals is not None:  # the table's own count and average: a changed rating counts once
        count, mean = totals
        total = (mean or 0.0) * count
    else:  # a running total (no table at hand)
        count = int(summary.get("ratings_count") or 0)
        average = summary.get("average_rating")
        total = (float(average) * count if average is not None else 0.0) + sum(r.rating for r in ratings)
        count += len(ratings)
    summary.update(
        positives=positives[-MAX_FEEDBACK_LINES:],
        negatives=negatives[-MAX_FEEDBACK_LINES:],
        suggestions=suggestions[-MAX_FEEDBACK_LINES:],
        ratings_count=count,
        average_rating=round(total / count, 2) if count else None,
        last_summarized_at=_now_iso(now),
    )
    return summary


# -- the rule-based summarizer's fold for the companion schema ------------------------------------

MAX_STATE_LINES = 10

# Understood activity kinds and their payloads; anything else is left to an LLM summarizer:
#   todo_added {id?, text, due_date?, category?, size?, priority?, goal_id?, tags?, notes?},
#   todo_done {id}, goal_set {id?, title, description?, category?, target_date?, priority?,
#   parent_id?}, goal_progress {id, note?, percent?}, event_added {id?, summary, start, end?,
#   location?, description?, recurrence?}, mood {mood}, win / loss / pain_point / focus_area
#   {text}, skill {skill}, preference {area, value}.


def _element_id_for(payload: dict[str, Any], fallback: str) -> str:
    raw = payload.get("id")
    return raw if isinstance(raw, str) and raw else _google_id(fallback)


# The schema's bounds (domain/companion/schema.py), kept by the fold so that a day's activity can never
# fold into a document that no longer validates (the user's nightly run would then fail for ever).
MAX_LINE_CHARS = 500
MAX_PREFERENCE_AREAS = 50
MAX_PROGRESS = 500


def _push(values: list[Any], value: Any, max_chars: int = MAX_LINE_CHARS) -> None:
    line = value.strip()[:max_chars] if isinstance(value, str) else ""
    if line and line not in values:
        values.append(line)
        del values[:-MAX_STATE_LINES]


def _note_progress(goal: dict[str, Any], entry: dict[str, Any]) -> None:
    progress = goal.setdefault("progress", [])
    progress.append(entry)
    del progress[:-MAX_PROGRESS]  # the newest are kept


_ADDS: dict[str, Collection] = {"todo_added": "todos", "goal_set": "goals", "event_added": "events"}
_STATE_KEYS = {"mood": "mood", "win": "recent_wins", "loss": "recent_losses", "pain_point": "pain_points",
               "focus_area": "focus_areas", "skill": "skills"}  # fmt: skip


def fold_targets(kind: str, payload: Any, external_id: str) -> tuple[tuple[str, ...], ...] | None:
    """The fields an activity asks to change, as `fold_companion` folds it (`external_id` as it is
    given there): an element by its id, a field of the current state, a preference area. None for a
    kind the fold does not understand: its text may be about anything (a model reads it)."""
    p = payload if isinstance(payload, dict) else {}
    if kind in _ADDS:
        return ((_ADDS[kind], _element_id_for(p, external_id)),)
    if kind in ("todo_done", "goal_progress"):
        return (("todos" if kind == "todo_done" else "goals", str(p.get("id"))),)
    if kind in _STATE_KEYS:
        return (("current_state", _STATE_KEYS[kind]), ("current_state", "last_updated"))
    if kind == "preference":
        raw = p.get("area")
        area = raw.strip()[:100] if isinstance(raw, str) else ""
        return (("advanced_info", "preferences", area), ("current_state", "last_updated"))
    return None


def fold_companion(doc: Document, kind: str, payload: Any, external_id: str, occurred_at: datetime) -> bool:
    """Fold one activity into a companion document in place; False when it was not understood or
    its element does not validate (the activity is then left to the summary's other readers)."""
    p = payload if isinstance(payload, dict) else {}
    if kind in _ADDS or kind in ("todo_done", "goal_progress"):
        try:
            return _fold_element(doc, kind, p, external_id, occurred_at)
        except UserMemoryError:
            return False
    return _fold_state(doc, kind, p, occurred_at)


def _fold_element(doc: Document, kind: str, p: dict[str, Any], external_id: str, occurred_at: datetime) -> bool:
    """An activity that adds an element, completes a to-do or notes a goal's progress."""
    fields = {k: v for k, v in p.items() if k != "id"}
    if kind in _ADDS:
        collection = _ADDS[kind]
        element_id = _element_id_for(p, external_id)
        elements = doc.setdefault(collection, {})
        if element_id in elements or len(elements) >= MAX_ELEMENTS:
            return False
        if kind == "goal_set" and "title" not in fields and isinstance(fields.get("goal"), str):
            fields["title"] = fields.pop("goal")
        element = validate_element(collection, {**fields, "id": element_id})
        if collection == "todos" and element.get("goal_id") not in (None, *doc.get("goals", {})):
            element["goal_id"] = None
        if collection == "goals" and element.get("parent_id") not in (None, *doc.get("goals", {})):
            element["parent_id"] = None
        elements[element_id] = element
        return True
    if kind == "todo_done":
        todo = (doc.get("todos") or {}).get(p.get("id"))
        if not isinstance(todo, dict) or todo.get("status") == "done":
            return False
        todo["status"] = "done"
        todo["completed_at"] = _now_iso(occurred_at)
        return True
    if kind == "goal_progress":
        goal = (doc.get("goals") or {}).get(p.get("id"))
        if not isinstance(goal, dict):
            return False
        entry = {"at": _now_iso(occurred_at), "note": str(p.get("note") or "")[:2000]}
        if isinstance(p.get("percent"), int) and 0 <= p["percent"] <= 100:
            entry["percent"] = p["percent"]
        _note_progress(goal, entry)
        return True
    return False


def _fold_state(doc: Document, kind: str, p: dict[str, Any], occurred_at: datetime) -> bool:
    """An activity about the person's state (mood, wins, losses, skills...) or a preference."""
    state = doc.setdefault("current_state", {})
    if kind == "mood" and isinstance(p.get("mood"), str) and p["mood"].strip():
        state["mood"] = p["mood"].strip()[:200]
    elif kind in ("win", "loss", "pain_point", "focus_area", "skill"):
        key = _STATE_KEYS[kind]
        before = list(state.get(key) or [])
        state[key] = list(before)  # a copy: `before` must stay what it was, to tell a change
        _push(state[key], p.get("skill" if kind == "skill" else "text"))
        if state[key] == before:
            return False
    elif kind == "preference" and isinstance(p.get("area"), str) and isinstance(p.get("value"), str):
        preferences = doc.setdefault("advanced_info", {}).setdefault("preferences", {})
        area = p["area"].strip()[:100]
        if not area or (area not in preferences and len(preferences) >= MAX_PREFERENCE_AREAS):
            return False
        values = preferences.setdefault(area, [])
        before = list(values)
        _push(values, p["value"], 200)
        if values == before:
            return False
    else:
        return False
    state["last_updated"] = _now_iso(occurred_at)
    return True

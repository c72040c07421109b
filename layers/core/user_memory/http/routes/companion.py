"""The companion layer: goals, to-dos and events (each an element of the memory), ratings, the digest.

Every element collection has the same five routes (create, read, merge, complete, delete),
registered once per collection; a route knows its collection from the path it was registered
under. Static routes come first: /me/todos/due and /me/events/import are not element ids. The
router is included under /me.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from user_memory.domain.companion.elements import Rating
from user_memory.domain.companion.service import CompanionService
from user_memory.domain.companion.times import StorableDate
from user_memory.domain.model import AppendResult
from user_memory.domain.service import Edit
from user_memory.http import models, responses
from user_memory.http.bodies import json_body, media_type
from user_memory.http.context import dependencies, edit, me
from user_memory.http.openapi import responses as answers
from user_memory.http.params import Day, IdemKey, IfMatch, RangeFrom, RangeTo
from user_memory.http.problems import UNSUPPORTED_MEDIA, HttpProblem

router = Router()  # under /me

WithinDays = Annotated[
    int | None, Query(ge=0, le=3660, description="Only goals whose target date is within this many days.")
]
GooglePage = Annotated[
    dict[str, Any] | list[dict[str, Any]],
    Body(description='A Google Calendar event, a list of them, or an Events.list page ({"items": [...]}).'),
]
ElementId = Annotated[str, Path(description="The element's id.")]
ElementBody = Annotated[dict[str, Any], Body(description="The element's fields (see the companion schema).")]
DigestDay = Annotated[StorableDate | None, Query(description="The digest of this day (YYYY-MM-DD); default: latest.")]

_SINGULAR = {"goals": "goal", "todos": "to-do", "events": "event"}


@router.get("/todos/due", responses=answers(models.TodosDue), tags=["companion"])
def todos_due(request: Request, on: Day = None) -> models.TodosDue:
    """Open to-dos due on or before a day (the user's today in basic_info.timezone), overdue first;
    read from the item index."""
    with me(request) as session:
        return responses.todos_due(session.companion, on)


@router.get("/goals", responses=answers(models.ActiveGoals), tags=["companion"])
def active_goals(request: Request, within_days: WithinDays = None) -> models.ActiveGoals:
    """Active goals, nearest target date first; read from the item index."""
    with me(request) as session:
        return responses.active_goals(session.companion, within_days)


@router.get("/events", responses=answers(models.EventsInRange), tags=["companion"])
def events_in_range(request: Request, range_from: RangeFrom = None, range_to: RangeTo = None) -> models.EventsInRange:
    """Occurrences of the user's events overlapping [from, to) (recurring events expanded); the
    candidates are read from the item index."""
    with me(request) as session:
        return responses.events_in_range(session.companion, range_from, range_to)


@router.post("/events/import", responses=answers(models.EventsImported, etag=True), tags=["companion"])
def import_events(
    request: Request, page: GooglePage, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.EventsImported]:
    """Import events in Google Calendar's event JSON: new ones added, those with a newer `updated`
    replaced, cancelled ones removed, in one version."""
    change = edit(request, if_match, idempotency_key_)
    with me(request) as session:
        report, result = session.companion.import_google_events(page, change)
    body = models.EventsImported(
        user_id=str(session.user_id),
        status=result.status.value,
        version=result.version,
        created=report.created,
        updated=report.updated,
        unchanged=report.unchanged,
        deleted=report.deleted,
    )
    return Response(200, "application/json", body, headers=responses.write_headers(result))


# -- the elements: five routes per collection ---------------------------------------------------------


def create_element(
    request: Request, fields: ElementBody, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.ElementWritten]:
    collection = _collection(request)
    change = edit(request, if_match, idempotency_key_)
    with me(request) as session:
        element_id, result = session.companion.create_element(collection, fields, change)
        return responses.element_written(session.user_id, collection, element_id, result)


def get_element(request: Request, element_id: ElementId) -> Response[models.Element]:
    collection = _collection(request)
    with me(request) as session:
        element, version = session.companion.element(collection, element_id)
        body = models.Element(
            user_id=str(session.user_id), collection=collection, id=element_id, version=version, element=element
        )
    return Response(200, "application/json", body, headers={"ETag": responses.etag(version)})


def update_element(
    request: Request, element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.ElementWritten]:
    collection = _collection(request)
    if media_type(request.headers) != models.MERGE_PATCH:
        raise HttpProblem(UNSUPPORTED_MEDIA, f"updating a {_SINGULAR[collection]} takes {models.MERGE_PATCH}")
    change = edit(request, if_match, idempotency_key_)
    body = json_body(request, dependencies(request).settings.max_document_bytes)
    with me(request) as session:
        result = session.companion.update_element(collection, element_id, body, change)
        return responses.element_written(session.user_id, collection, element_id, result)


def complete_element(
    request: Request, element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.ElementWritten]:
    return _element_change(request, element_id, if_match, idempotency_key_, CompanionService.complete_element)


def delete_element(
    request: Request, element_id: ElementId, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.ElementWritten]:
    return _element_change(request, element_id, if_match, idempotency_key_, CompanionService.delete_element)


def _element_change(
    request: Request,
    element_id: str,
    if_match: str | None,
    idempotency_key_: str | None,
    change: Callable[[CompanionService, str, str, Edit], AppendResult],
) -> Response[models.ElementWritten]:
    """A change of one element that takes no body (`change`: the service's method), as a new version."""
    collection = _collection(request)
    how = edit(request, if_match, idempotency_key_)
    with me(request) as session:
        result = change(session.companion, collection, element_id, how)
        return responses.element_written(session.user_id, collection, element_id, result)


def _collection(request: Request) -> str:
    """The collection a route was registered for: /me/<collection>/... (the rule as included, with
    the router's prefix)."""
    return request.route.split("/")[2]


def _element_routes(collection: str) -> None:
    singular = _SINGULAR[collection]
    written, tags = answers(models.ElementWritten, etag=True), ["companion"]
    router.post(
        f"/{collection}",
        responses=written,
        tags=tags,
        summary=f"Create a {singular}",
        description=f"A new {singular} as a new version of the memory (an id is generated when none is "
        "given; 409 element-exists when it is taken).",
    )(create_element)
    item = f"/{collection}/<element_id>"
    router.get(item, responses=answers(models.Element, etag=True), tags=tags, summary=f"Read a {singular}")(get_element)
    router.patch(
        item,
        responses=written,
        tags=tags,
        summary=f"Update a {singular}",
        description=f"RFC 7396 merge of the {singular}'s fields (application/merge-patch+json; null "
        "removes a field), as a new version.",
    )(update_element)
    router.post(
        f"{item}/complete",
        responses=written,
        tags=tags,
        summary=f"Complete a {singular}",
        description="Marks it done (a to-do) or completed (a goal, an event) as a new version; completing "
        "it again writes nothing.",
    )(complete_element)
    router.delete(
        item,
        responses=written,
        tags=tags,
        summary=f"Delete a {singular}",
        description="Removes it as a new version (history keeps it; revert brings it back).",
    )(delete_element)


for _name in _SINGULAR:
    _element_routes(_name)


# -- ratings and the digest ------------------------------------------------------------------------------


@router.post("/ratings", responses=answers(models.RatingRecorded), tags=["companion"])
def record_rating(request: Request, rating: Annotated[models.RatingIn, Body()]) -> models.RatingRecorded:
    """Record a feedback rating of one interaction (a repeat replaces it); the nightly run
    summarizes ratings into the feedback element."""
    with me(request) as session:
        status = session.companion.record_rating(
            Rating(
                interaction_id=rating.interaction_id,
                rating=rating.rating,
                tags=tuple(rating.tags),
                comment=rating.comment,
                rated_at=rating.rated_at or datetime.now(UTC),
            )
        )
    return models.RatingRecorded(user_id=str(session.user_id), interaction_id=rating.interaction_id, status=status)  # type: ignore[arg-type]


@router.get("/digest", responses=answers(models.Digest), tags=["companion"])
def get_digest(request: Request, day: DigestDay = None) -> models.Digest:
    """The daily digest the nightly run made: due and overdue to-dos, events of the next 7 days, goals
    near their target date."""
    with me(request) as session:
        found = session.companion.digest(day)
    return models.Digest(user_id=str(session.user_id), digest=found)

"""The client's companion calls (goals, to-dos, events, ratings, the digest) against `user-memory
serve` running the companion schema."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime

import pytest
from user_memory_client import AsyncClient, Client, errors, models

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

DOCUMENT_SCHEMA = "companion"


def google_event(event_id: str, start: str, end: str) -> dict[str, object]:
    return {
        "kind": "calendar#event",
        "id": event_id,
        "status": "confirmed",
        "updated": "2026-05-02T08:00:00.000Z",
        "summary": "Team lunch",
        "start": {"dateTime": start},
        "end": {"dateTime": end},
    }


def test_each_collection_is_created_read_updated_completed_and_deleted(base_url, user, token):
    companion = Client(base_url, token).companion
    # Given a goal, a to-do (its goal named) and an event, each a version
    goal = companion.goals.create({"id": "g-run", "title": "Run a half marathon", "target_date": "2026-10-04"})
    todo = companion.todos.create({"id": "t-shoes", "text": "Buy shoes", "due_date": "2026-06-01", "goal_id": "g-run"})
    event = companion.events.create(
        {"id": "e-race", "summary": "Race", "start": "2026-10-04T09:00:00Z", "end": "2026-10-04T12:00:00Z"},
        if_match=2,
    )
    assert [w.version for w in (goal, todo, event)] == [1, 2, 3]
    assert isinstance(goal, models.ElementWritten) and goal.user_id == user and goal.collection == "goals"
    # When each is read, merged, completed and deleted
    assert companion.goals.get("g-run").element["title"] == "Run a half marathon"
    updated = companion.todos.update("t-shoes", {"text": "Buy running shoes", "due_date": None}, if_match=3)
    assert updated.element is not None and updated.element["text"] == "Buy running shoes"
    assert "due_date" not in updated.element or updated.element["due_date"] is None
    done = companion.todos.complete("t-shoes")
    assert done.element is not None and done.element["status"] == "done"
    again = companion.todos.complete("t-shoes")
    assert again.status == "unchanged" and again.version == done.version
    deleted = companion.events.delete("e-race")
    assert deleted.element is None
    # Then every mistake is a typed error
    with pytest.raises(errors.NotFound):
        companion.events.get("e-race")
    with pytest.raises(errors.ElementExists):
        companion.goals.create({"id": "g-run", "title": "Another"})
    with pytest.raises(errors.InvalidDocument):
        companion.todos.update("t-shoes", {"due_date": "next week"})
    with pytest.raises(errors.PreconditionFailed):
        companion.goals.update("g-run", {"title": "Walk"}, if_match=1)


def test_queries_events_in_a_range_ratings_and_the_digest(base_url, token):
    companion = Client(base_url, token).companion
    companion.goals.create({"id": "g1", "title": "Read more", "target_date": "2026-12-01"})
    companion.todos.create({"id": "t1", "text": "Library card", "due_date": "2026-06-01"})
    companion.todos.create({"id": "t2", "text": "Return books", "due_date": "2026-06-03"})
    imported = companion.events.import_google(
        {"items": [google_event(f"g{i}", f"2026-06-0{i}T12:00:00Z", f"2026-06-0{i}T13:00:00Z") for i in range(1, 4)]}
    )
    assert (imported.created, imported.version) == (3, 4)
    # Goals, to-dos due on a day, events in a range (walked page by page)
    assert [g.element["title"] for g in companion.goals.active().items] == ["Read more"]
    due = companion.todos.due(on=date(2026, 6, 2))
    assert ([t.element["id"] for t in due.overdue], due.due, due.day) == (["t1"], [], "2026-06-02")
    start, end = datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 3, tzinfo=UTC)
    assert [o.event["summary"] for o in companion.events.iter_between(start, end)] == ["Team lunch"] * 2
    page = companion.events.between(start, end)
    assert page.from_ == start and page.next_from is None
    # Ratings: created, then unchanged; the digest: none before the nightly run
    assert companion.rate("i-1", 5, tags=["kind"]).status == "created"
    assert companion.rate("i-1", 5, tags=["kind"]).status == "unchanged"
    with pytest.raises(errors.InvalidInput):
        companion.rate("i-2", 6)
    with pytest.raises(errors.NotFound):
        companion.digest()


def test_the_async_companion_calls(base_url, token):
    async def session() -> None:
        async with AsyncClient(base_url, token) as client:
            written = await client.companion.todos.create({"id": "t1", "text": "Call the bank"})
            assert written.version == 1
            assert (await client.companion.todos.get("t1")).element["text"] == "Call the bank"
            assert (await client.companion.todos.complete("t1")).element["status"] == "done"  # type: ignore[index]
            assert (await client.companion.rate("i-1", 4)).status == "created"
            events = [
                o
                async for o in client.companion.events.iter_between(
                    datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
                )
            ]
            assert events == []

    asyncio.run(session())

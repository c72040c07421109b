"""Goals, to-dos and events of the companion schema (domain/companion/elements.py): the edits, the Google
Calendar import, occurrences of (recurring) events in a range, and the feedback summary."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.domain.companion.elements import (
    MAX_FEEDBACK_LINES,
    MAX_IMPORT_EVENTS,
    ImportReport,
    Rating,
    complete,
    create,
    delete,
    from_google_event,
    import_google_events,
    occurrences,
    summarize_ratings,
    update,
    validate_element,
)
from user_memory.domain.memory.document import validate_document
from user_memory.errors import ElementExists, InvalidDocument, InvalidRequest, NotFound

NOW = datetime(2026, 3, 4, 12, 30, 15, 123456, tzinfo=UTC)
NOW_ISO = "2026-03-04T12:30:15Z"


def doc() -> dict[str, Any]:
    """A valid companion document: a goal with a sub-goal, two to-dos (one linked), one event."""
    return validate_document(
        {
            "basic_info": {"name": "Sam", "timezone": "Europe/Lisbon"},
            "goals": {
                "run": {"id": "run", "title": "Run a marathon", "target_date": "2026-10-01"},
                "base": {"id": "base", "title": "Run 10 km", "parent_id": "run"},
                "read": {"id": "read", "title": "Read 12 books"},
            },
            "todos": {
                "shoes": {"id": "shoes", "text": "Buy running shoes", "goal_id": "run", "due_date": "2026-03-05"},
                "tax": {"id": "tax", "text": "File taxes", "priority": "high"},
            },
            "events": {
                "dentist": {"id": "dentist", "summary": "Dentist", "start": "2026-03-10T15:00:00Z"},
            },
        },
        "companion",
    )


def valid(document: dict[str, Any]) -> dict[str, Any]:
    """The document must be valid companion memory; returned in stored form."""
    return validate_document(document, "companion")


# -- create ------------------------------------------------------------------------------------------


def test_create_adds_the_element_under_its_given_id():
    # Given a document and a new to-do with an id
    before = doc()
    # When it is created
    element_id, edit = create("todos", {"id": "milk", "text": "Buy milk", "due_date": "2026-03-06T18:00:00+01:00"})
    after = edit(before)
    # Then it is there under its id, the rest is unchanged, and the input document was not touched
    assert element_id == "milk"
    assert after["todos"]["milk"] == {"id": "milk", "text": "Buy milk", "due_date": "2026-03-06T18:00:00+01:00"}
    assert {k: v for k, v in after["todos"].items() if k != "milk"} == before["todos"]
    assert before == doc()
    assert valid(after)["todos"]["milk"]["status"] == "open"


def test_create_generates_an_id_when_none_is_given():
    # Given a goal without an id
    fields = {"title": "Learn Portuguese"}
    # When it is created twice
    first_id, first = create("goals", fields)
    second_id, _ = create("goals", dict(fields))
    # Then each gets a fresh 12-character hex id, stored inside the element too
    assert len(first_id) == 12 and int(first_id, 16) >= 0
    assert first_id != second_id
    after = valid(first(doc()))
    assert after["goals"][first_id]["id"] == first_id
    assert after["goals"][first_id]["title"] == "Learn Portuguese"


def test_create_into_a_document_without_the_collection():
    # Given an empty document, When an event is created
    _, edit = create("events", {"id": "e1", "summary": "Concert", "start": "2026-05-01T20:00:00+01:00"})
    after = edit({})
    # Then the collection is made for it
    assert after == {"events": {"e1": {"id": "e1", "summary": "Concert", "start": "2026-05-01T20:00:00+01:00"}}}
    assert valid(after)["events"]["e1"]["status"] == "confirmed"


def test_create_refuses_an_id_that_is_taken():
    # Given a document with to-do 'tax', When another to-do is created with that id
    _, edit = create("todos", {"id": "tax", "text": "Something else"})
    # Then it is refused: create is not an update
    with pytest.raises(ElementExists, match="this todo id is taken"):
        edit(doc())


@pytest.mark.parametrize("fields", [["a list"], "text", None])
def test_create_refuses_what_is_not_an_object(fields):
    with pytest.raises(InvalidRequest, match="a todo must be a JSON object"):
        create("todos", fields)


def test_create_refuses_an_id_that_is_not_a_string():
    with pytest.raises(InvalidRequest, match="id must be a string"):
        create("todos", {"id": 7, "text": "x"})


# -- update ------------------------------------------------------------------------------------------


def test_update_merges_fields_into_the_element():
    # Given the to-do 'tax'
    # When two fields are changed and one is added
    after = update("todos", "tax", {"text": "File taxes online", "status": "in_progress", "tags": ["admin"]})(doc())
    # Then they are merged, and the fields not named are kept
    assert after["todos"]["tax"] == {
        **doc()["todos"]["tax"],
        "text": "File taxes online",
        "status": "in_progress",
        "tags": ["admin"],
    }
    assert after["todos"]["shoes"] == doc()["todos"]["shoes"]
    valid(after)


def test_update_with_null_removes_a_field_so_its_default_returns():
    # Given the to-do 'shoes', linked to a goal and due on a date
    # When its due date and goal link are set to null
    after = update("todos", "shoes", {"due_date": None, "goal_id": None})(doc())
    # Then the fields are gone, and validation gives back their defaults
    assert "due_date" not in after["todos"]["shoes"]
    assert "goal_id" not in after["todos"]["shoes"]
    stored = valid(after)["todos"]["shoes"]
    assert (stored["due_date"], stored["goal_id"]) == (None, None)


def test_update_may_repeat_the_id_but_not_change_it():
    # Given the goal 'read'
    # When an update repeats its own id, Then that is fine
    assert update("goals", "read", {"id": "read", "priority": "low"})(doc())["goals"]["read"]["priority"] == "low"
    # When an update gives another id, Then it is refused before any document is seen
    with pytest.raises(InvalidRequest, match="id cannot change"):
        update("goals", "read", {"id": "books"})


def test_update_of_a_missing_element_is_not_found():
    with pytest.raises(NotFound, match="no todo with this id"):
        update("todos", "ghost", {"text": "x"})(doc())
    with pytest.raises(NotFound, match="no event with this id"):
        update("events", "dentist", {"summary": "x"})({})


# -- complete ----------------------------------------------------------------------------------------


def test_complete_a_todo_marks_it_done_with_the_time():
    # Given the open to-do 'tax', When it is completed
    after = complete("todos", "tax", now=NOW)(doc())
    # Then it is done, completed now (seconds, UTC, Z)
    assert after["todos"]["tax"] == {**doc()["todos"]["tax"], "status": "done", "completed_at": NOW_ISO}
    valid(after)


def test_complete_a_goal_notes_full_progress():
    # Given the active goal 'run', When it is completed
    after = complete("goals", "run", now=NOW)(doc())
    # Then it is completed, with a 100% progress entry
    goal = after["goals"]["run"]
    assert goal["status"] == "completed"
    assert goal["completed_at"] == NOW_ISO
    assert goal["progress"] == [{"at": NOW_ISO, "note": "completed", "percent": 100}]
    valid(after)


def test_complete_an_event_marks_it_completed_without_a_completion_time():
    # Given the event 'dentist', When it is completed
    after = complete("events", "dentist", now=NOW)(doc())
    # Then its status is completed; events have no completed_at
    assert after["events"]["dentist"] == {**doc()["events"]["dentist"], "status": "completed"}
    valid(after)


@pytest.mark.parametrize("collection, element_id", [("todos", "tax"), ("goals", "run"), ("events", "dentist")])
def test_completing_twice_changes_nothing(collection, element_id):
    # Given an element completed once
    once = complete(collection, element_id, now=NOW)(doc())
    # When it is completed again, later
    twice = complete(collection, element_id, now=NOW + timedelta(days=1))(once)
    # Then the document is the same (no second progress entry, no new time): no new version
    assert twice == once
    assert twice is not once


def test_complete_a_missing_element_is_not_found():
    with pytest.raises(NotFound, match="no goal with this id"):
        complete("goals", "ghost", now=NOW)(doc())


# -- delete ------------------------------------------------------------------------------------------


def test_delete_a_goal_clears_the_links_to_it():
    # Given goal 'run' with sub-goal 'base' and to-do 'shoes' linked to it
    # When 'run' is deleted
    after = delete("goals", "run")(doc())
    # Then it is gone, 'base' has no parent and 'shoes' no goal; nothing else changed
    assert set(after["goals"]) == {"base", "read"}
    assert after["goals"]["base"]["parent_id"] is None
    assert after["todos"]["shoes"]["goal_id"] is None
    assert after["todos"]["tax"] == doc()["todos"]["tax"]
    assert after["goals"]["read"] == doc()["goals"]["read"]
    # And the result is valid (a dangling link would not be)
    valid(after)


def test_the_document_with_a_dangling_goal_link_is_invalid():
    # Given the goal removed by hand, without clearing the links
    broken = doc()
    del broken["goals"]["run"]
    # Then validation names the dangling links (which is why delete clears them)
    with pytest.raises(InvalidDocument, match="parent_id names unknown goal 'run'"):
        valid(broken)


@pytest.mark.parametrize("collection, element_id", [("todos", "tax"), ("events", "dentist"), ("goals", "read")])
def test_delete_removes_just_that_element(collection, element_id):
    # Given an element, When it is deleted
    after = delete(collection, element_id)(doc())
    # Then only that element is gone
    expected = doc()
    del expected[collection][element_id]
    assert after == expected
    valid(after)


def test_delete_a_missing_element_is_not_found():
    with pytest.raises(NotFound, match="no event with this id"):
        delete("events", "ghost")(doc())


# -- Google Calendar ------------------------------------------------------------------------------


def google_page() -> dict[str, Any]:
    """One page of Google Calendar's Events.list, as the API returns it."""
    return {
        "kind": "calendar#events",
        "etag": '"p33c9f1m2ldcu80g"',
        "summary": "Personal",
        "updated": "2026-03-01T08:00:00.512Z",
        "timeZone": "America/New_York",
        "accessRole": "owner",
        "defaultReminders": [{"method": "popup", "minutes": 10}],
        "nextSyncToken": "CPDAlvWDx70CEPDAlvWDx70CGAU=",
        "items": [
            {
                "kind": "calendar#event",
                "etag": '"3181161784712000"',
                "id": "4eahs9ghkhrvkld72hogu9ph3e",
                "status": "confirmed",
                "htmlLink": "https://www.google.com/calendar/event?eid=NGVhaHM5Z2hraHJ2a2xkNzJob2d1OXBoM2U",
                "created": "2026-02-20T10:00:00.000Z",
                "updated": "2026-02-20T10:05:00.000Z",
                "summary": "Physiotherapy",
                "description": "Bring the exercise sheet",
                "location": "Clinic, 10 Main Street",
                "creator": {"email": "owner@example.com", "self": True},
                "organizer": {"email": "owner@example.com", "self": True},
                "start": {"dateTime": "2026-03-03T10:00:00-05:00", "timeZone": "America/New_York"},
                "end": {"dateTime": "2026-03-03T11:00:00-05:00", "timeZone": "America/New_York"},
                "iCalUID": "4eahs9ghkhrvkld72hogu9ph3e@google.com",
                "sequence": 0,
                "attendees": [
                    {"email": "therapist@example.org", "displayName": "Therapist", "responseStatus": "accepted"},
                    {"email": "owner@example.com", "organizer": True, "self": True, "responseStatus": "accepted"},
                ],
                "reminders": {"useDefault": True},
                "eventType": "default",
            },
            {
                "kind": "calendar#event",
                "etag": '"3181161784712001"',
                "id": "7b2kq1t0a3l8m4n5o6p7q8r9s0",
                "status": "confirmed",
                "created": "2026-02-21T09:00:00.000Z",
                "updated": "2026-02-21T09:00:00.000Z",
                "summary": "Conference",
                "start": {"date": "2026-03-10"},
                "end": {"date": "2026-03-12"},
                "transparency": "transparent",
                "iCalUID": "7b2kq1t0a3l8m4n5o6p7q8r9s0@google.com",
                "sequence": 0,
                "reminders": {"useDefault": False},
                "eventType": "default",
            },
            {
                "kind": "calendar#event",
                "etag": '"3181161784712002"',
                "id": "1u3bq2vs5m6p8r0t2v4x6z8b0d",
                "status": "tentative",
                "created": "2026-02-22T09:00:00.000Z",
                "updated": "2026-02-22T09:30:00.000Z",
                "summary": "Team standup",
                "start": {"dateTime": "2026-03-02T09:00:00-05:00", "timeZone": "America/New_York"},
                "end": {"dateTime": "2026-03-02T09:15:00-05:00", "timeZone": "America/New_York"},
                "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20260325T235959Z"],
                "iCalUID": "1u3bq2vs5m6p8r0t2v4x6z8b0d@google.com",
                "sequence": 1,
                "reminders": {"useDefault": True},
                "eventType": "default",
            },
            {
                "kind": "calendar#event",
                "etag": '"3181161784712003"',
                "id": "0a1b2c3d4e5f6g7h8i9jakalam",
                "status": "cancelled",
            },
        ],
    }


def run_import(document: dict[str, Any], events: Any) -> tuple[dict[str, Any], ImportReport]:
    report = ImportReport()
    edit = import_google_events(events, report)
    return edit(document), report


def test_google_events_are_mapped_to_ours():
    # Given the page's timed event
    event = google_page()["items"][0]
    # When it is mapped
    element_id, element = from_google_event(event)
    # Then it keeps Google's id, its times with their offset, its attendees (names, emails and
    # answers only), and when Google last changed it
    assert element_id == "4eahs9ghkhrvkld72hogu9ph3e"
    assert element == {
        "id": "4eahs9ghkhrvkld72hogu9ph3e",
        "summary": "Physiotherapy",
        "description": "Bring the exercise sheet",
        "start": "2026-03-03T10:00:00-05:00",
        "end": "2026-03-03T11:00:00-05:00",
        "timezone": "America/New_York",
        "location": "Clinic, 10 Main Street",
        "attendees": [
            {"name": "Therapist", "email": "therapist@example.org", "response_status": "accepted"},
            {"name": "", "email": "owner@example.com", "response_status": "accepted"},
        ],
        "recurrence": [],
        "status": "confirmed",
        "last_modified": "2026-02-20T10:05:00.000Z",
        "source": "google",
    }


def test_an_all_day_event_keeps_its_dates_and_a_cancelled_one_is_a_deletion():
    page = google_page()
    _, all_day = from_google_event(page["items"][1])
    assert all_day is not None
    assert (all_day["start"], all_day["end"], all_day["description"], all_day["attendees"]) == (
        "2026-03-10",
        "2026-03-12",
        "",
        [],
    )
    assert from_google_event(page["items"][3]) == ("0a1b2c3d4e5f6g7h8i9jakalam", None)


def test_an_id_google_could_send_that_we_cannot_key_by_is_hashed():
    # Given an event id with characters our ids do not allow
    element_id, element = from_google_event({"id": "weird/id with spaces", "start": {"date": "2026-03-01"}})
    # Then the id is a stable hash of it
    assert element_id == from_google_event({"id": "weird/id with spaces", "start": {"date": "2026-03-02"}})[0]
    assert element_id.startswith("gcal-") and len(element_id) == 29
    assert element is not None and element["summary"] == "(no title)"


def test_importing_a_page_into_an_empty_calendar():
    # Given a document without events, When the page is imported
    after, report = run_import(doc() | {"events": {}}, google_page())
    # Then the three live events are created and the cancelled one (never seen) is unchanged
    assert (report.created, report.updated, report.unchanged, report.deleted) == (3, 0, 1, 0)
    assert report.ids == [
        "4eahs9ghkhrvkld72hogu9ph3e",
        "7b2kq1t0a3l8m4n5o6p7q8r9s0",
        "1u3bq2vs5m6p8r0t2v4x6z8b0d",
        "0a1b2c3d4e5f6g7h8i9jakalam",
    ]
    assert set(after["events"]) == set(report.ids[:3])
    standup = after["events"]["1u3bq2vs5m6p8r0t2v4x6z8b0d"]
    assert standup["status"] == "tentative"
    assert standup["recurrence"] == ["RRULE:FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20260325T235959Z"]
    # And the result is valid companion memory
    stored = valid(after)
    assert stored["events"]["7b2kq1t0a3l8m4n5o6p7q8r9s0"]["start"] == "2026-03-10"


def test_importing_again_updates_only_what_google_changed_later():
    # Given a calendar that imported the page once
    first, _ = run_import(doc(), google_page())
    # And a second page: the timed event changed later, the all-day one with an older `updated`
    # (and a new title), the standup as it was, and the cancellation of our own 'dentist' event
    page = google_page()
    timed, all_day, standup, _ = page["items"]
    timed.update(summary="Physiotherapy (moved)", updated="2026-02-25T08:00:00.000Z")
    timed["start"]["dateTime"] = "2026-03-04T10:00:00-05:00"
    timed["end"]["dateTime"] = "2026-03-04T11:00:00-05:00"
    all_day.update(summary="Old title", updated="2026-02-01T00:00:00.000Z")
    cancelled_dentist = {"id": "dentist", "status": "cancelled"}
    page["items"] = [timed, all_day, standup, cancelled_dentist]
    # When it is imported
    after, report = run_import(first, page)
    # Then the newer event replaced ours, the older and the same ones stayed, the cancelled one left
    assert (report.created, report.updated, report.unchanged, report.deleted) == (0, 1, 2, 1)
    assert after["events"]["4eahs9ghkhrvkld72hogu9ph3e"]["summary"] == "Physiotherapy (moved)"
    assert after["events"]["4eahs9ghkhrvkld72hogu9ph3e"]["start"] == "2026-03-04T10:00:00-05:00"
    assert after["events"]["7b2kq1t0a3l8m4n5o6p7q8r9s0"]["summary"] == "Conference"
    assert after["events"]["1u3bq2vs5m6p8r0t2v4x6z8b0d"] == first["events"]["1u3bq2vs5m6p8r0t2v4x6z8b0d"]
    assert "dentist" not in after["events"]
    valid(after)


def test_importing_the_same_page_twice_changes_nothing():
    once, _ = run_import(doc(), google_page())
    twice, report = run_import(once, google_page())
    assert (report.created, report.updated, report.unchanged, report.deleted) == (0, 0, 4, 0)
    assert twice == once


def test_an_event_without_updated_imported_again_as_it_was_is_unchanged():
    # Given an event Google-like JSON without `updated`, imported once
    event = {"id": "walk", "summary": "Walk", "start": {"dateTime": "2026-03-02T07:00:00Z"}}
    once, _ = run_import({}, event)
    # When the same event is imported again, Then nothing is counted as updated
    twice, report = run_import(once, event)
    assert (report.created, report.updated, report.unchanged, report.deleted) == (0, 0, 1, 0)
    assert twice == once
    # And a changed one without `updated` replaces ours (there is no time to compare)
    changed, report = run_import(once, event | {"summary": "Long walk"})
    assert (report.updated, report.unchanged) == (1, 0)
    assert changed["events"]["walk"]["summary"] == "Long walk"


def test_a_single_event_or_a_list_is_imported_too():
    event = google_page()["items"][1]
    after_one, one = run_import({}, event)
    after_list, listed = run_import({}, [event])
    assert (one.created, listed.created) == (1, 1)
    assert after_one == after_list


@pytest.mark.parametrize(
    "bad, message",
    [
        pytest.param({"id": "nostart", "summary": "x"}, "an event has no start", id="no-start"),
        pytest.param({"id": "s", "start": "2026-03-01"}, "start must be an object", id="start-not-an-object"),
        pytest.param({"id": "s", "start": {"timeZone": "UTC"}}, "start needs date or dateTime", id="start-empty"),
        pytest.param({"summary": "no id", "start": {"date": "2026-03-01"}}, "with an id", id="no-id"),
    ],
)
def test_an_invalid_event_is_refused_before_anything_changes(bad, message):
    # Given a page with valid events and one invalid one at the end
    page = google_page()
    page["items"].append(bad)
    report = ImportReport()
    # When it is imported, Then it is refused when the edit is made, before any document is seen
    with pytest.raises(InvalidRequest, match=message):
        import_google_events(page, report)
    assert (report.created, report.updated, report.unchanged, report.deleted, report.ids) == (0, 0, 0, 0, [])


def test_an_event_that_fails_the_schema_is_refused_before_anything_changes():
    # Given an event that ends before it starts
    page = google_page()
    page["items"][0]["end"] = {"dateTime": "2026-03-03T09:00:00-05:00"}
    # Then the import is refused as a whole, naming the problem
    with pytest.raises(InvalidDocument, match="end is before start"):
        import_google_events(page, ImportReport())


@pytest.mark.parametrize("events", [[], {"items": []}, "not events", None])
def test_an_empty_or_shapeless_import_is_refused(events):
    with pytest.raises(InvalidRequest, match="send a Google Calendar event"):
        import_google_events(events, ImportReport())


def test_more_than_one_page_of_events_is_refused():
    # Given 250 events (one page) and 251
    events = [{"id": f"ev{i}", "summary": f"Event {i}", "start": {"date": "2026-03-01"}} for i in range(251)]
    # Then 250 import, 251 are refused
    after, report = run_import({}, events[:MAX_IMPORT_EVENTS])
    assert report.created == 250 and len(after["events"]) == 250
    with pytest.raises(InvalidRequest, match="at most 250 events"):
        import_google_events({"items": events}, ImportReport())


# -- occurrences -----------------------------------------------------------------------------------


def starts(found: list[dict[str, Any]]) -> list[str]:
    return [o["occurrence_start"] for o in found]


WEEKLY = {
    "id": "standup",
    "summary": "Team standup",
    "start": "2026-03-02T09:00:00-05:00",
    "end": "2026-03-02T09:15:00-05:00",
    "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO,WE"],
}


def test_a_weekly_event_in_a_week():
    # Given a standup every Monday and Wednesday, When the week of 9 March is asked for
    found = occurrences(WEEKLY, datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 16, tzinfo=UTC))
    # Then it occurs twice, each with its end, the event itself attached
    assert [(o["occurrence_start"], o["occurrence_end"]) for o in found] == [
        ("2026-03-09T09:00:00-05:00", "2026-03-09T09:15:00-05:00"),
        ("2026-03-11T09:00:00-05:00", "2026-03-11T09:15:00-05:00"),
    ]
    assert all(o["id"] == "standup" and o["event"] is WEEKLY for o in found)


def test_a_weekly_event_before_it_started_and_after_it_ended():
    # Given the standup ending with a COUNT of 3 (2, 4 and 9 March)
    event = {**WEEKLY, "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO,WE;COUNT=3"]}
    # Then the week before has none, the first weeks have three, the week after none
    assert occurrences(event, datetime(2026, 2, 23, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)) == []
    assert starts(occurrences(event, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 15, tzinfo=UTC))) == [
        "2026-03-02T09:00:00-05:00",
        "2026-03-04T09:00:00-05:00",
        "2026-03-09T09:00:00-05:00",
    ]
    assert occurrences(event, datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 3, 30, tzinfo=UTC)) == []


def test_an_excluded_date_is_not_an_occurrence():
    event = {**WEEKLY, "recurrence": [*WEEKLY["recurrence"], "EXDATE:20260311T140000Z"]}
    found = occurrences(event, datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 16, tzinfo=UTC))
    assert starts(found) == ["2026-03-09T09:00:00-05:00"]


def test_an_event_overlapping_the_range_start_is_in_the_range():
    # Given a one-off event from 22:00 to 02:00
    event = {"id": "party", "summary": "Party", "start": "2026-03-01T22:00:00Z", "end": "2026-03-02T02:00:00Z"}
    # Then a range starting at midnight includes it; one starting when it ends does not
    found = occurrences(event, datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC))
    assert [(o["occurrence_start"], o["occurrence_end"]) for o in found] == [
        ("2026-03-01T22:00:00+00:00", "2026-03-02T02:00:00+00:00")
    ]
    assert occurrences(event, datetime(2026, 3, 2, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)) == []
    # And a range ending when it starts does not either
    assert occurrences(event, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 1, 22, tzinfo=UTC)) == []


def test_a_recurring_occurrence_overlapping_the_range_start_is_in_the_range():
    # Given a night shift every Friday from 22:00 to 06:00
    event = {
        "id": "shift",
        "summary": "Night shift",
        "start": "2026-03-06T22:00:00Z",
        "end": "2026-03-07T06:00:00Z",
        "recurrence": ["RRULE:FREQ=WEEKLY"],
    }
    # When Saturday 14 March is asked for
    found = occurrences(event, datetime(2026, 3, 14, tzinfo=UTC), datetime(2026, 3, 15, tzinfo=UTC))
    # Then the shift that started on Friday the 13th is in it
    assert [(o["occurrence_start"], o["occurrence_end"]) for o in found] == [
        ("2026-03-13T22:00:00+00:00", "2026-03-14T06:00:00+00:00")
    ]


def test_an_all_day_event_covers_its_days():
    # Given a two-day conference (Google's end date is exclusive)
    event = {"id": "conf", "summary": "Conference", "start": "2026-03-10", "end": "2026-03-12"}
    # Then noon of its second day is in it, its end day is not
    found = occurrences(event, datetime(2026, 3, 11, 12, tzinfo=UTC), datetime(2026, 3, 11, 13, tzinfo=UTC))
    assert [(o["occurrence_start"], o["occurrence_end"]) for o in found] == [
        ("2026-03-10T00:00:00+00:00", "2026-03-12T00:00:00+00:00")
    ]
    assert occurrences(event, datetime(2026, 3, 12, tzinfo=UTC), datetime(2026, 3, 13, tzinfo=UTC)) == []


def test_a_recurring_all_day_event_with_date_until_and_exdate():
    # Given a weekly all-day event as Google writes it: UNTIL and EXDATE as dates
    event = {
        "id": "market",
        "summary": "Farmers market",
        "start": "2026-03-07",
        "end": "2026-03-08",
        "recurrence": ["RRULE:FREQ=WEEKLY;UNTIL=20260328", "EXDATE;VALUE=DATE:20260314"],
    }
    # When March and April are asked for
    found = occurrences(event, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    # Then it occurs every Saturday through the 28th, except the 14th
    assert starts(found) == ["2026-03-07T00:00:00+00:00", "2026-03-21T00:00:00+00:00", "2026-03-28T00:00:00+00:00"]


def test_an_event_without_an_end_occurs_at_an_instant():
    event = {"id": "call", "summary": "Call", "start": "2026-03-02T10:00:00Z"}
    assert starts(occurrences(event, datetime(2026, 3, 2, 10, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC))) == [
        "2026-03-02T10:00:00+00:00"
    ]
    assert occurrences(event, datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 2, 10, tzinfo=UTC)) == []


# -- the feedback summary -------------------------------------------------------------------------


def rating(n: int, value: int, comment: str = "", tags: tuple[str, ...] = ()) -> Rating:
    return Rating(
        id=n,
        interaction_id=f"i{n}",
        rating=value,
        tags=tags,
        comment=comment,
        rated_at=datetime(2026, 3, 3, tzinfo=UTC) + timedelta(minutes=n),
    )


def test_ratings_become_positives_negatives_and_suggestions():
    # Given an empty feedback element and a batch of ratings (out of order)
    ratings = [
        rating(3, 2, "Too long", ("length",)),
        rating(1, 5, "Loved the recipe"),
        rating(2, 4, "", ("helpful", "fast")),
        rating(4, 3, "You should ask before booking"),
        rating(5, 1, "Wrong date, please check the calendar"),
        rating(6, 3, "meh"),
        rating(7, 5, "", ("suggestion",)),
        rating(8, 4, "Nice, but I would prefer bullet points", ("suggestion",)),
    ]
    # When they are summarized
    summary = summarize_ratings({}, ratings, NOW)
    # Then 4-5 are positives and 1-2 negatives (the comment, its tags in brackets; tags alone
    # when there is no comment), 3 is neither, and comments that ask for something are suggestions
    assert summary == {
        "positives": [
            "Loved the recipe",
            "helpful, fast",
            "suggestion",
            "Nice, but I would prefer bullet points [suggestion]",
        ],
        "negatives": ["Too long [length]", "Wrong date, please check the calendar"],
        "suggestions": [
            "You should ask before booking",
            "Wrong date, please check the calendar",
            "Nice, but I would prefer bullet points",
        ],
        "ratings_count": 8,
        "average_rating": 3.38,
        "last_summarized_at": NOW_ISO,
    }
    # And the element is valid feedback of the companion schema
    assert valid({"feedback": summary})["feedback"] == summary


def test_the_average_runs_on_from_the_previous_summary():
    # Given a summary of 2 ratings averaging 4.0
    before = {"positives": ["Kind"], "negatives": [], "suggestions": [], "ratings_count": 2, "average_rating": 4.0}
    # When a 5 and a 2 arrive
    summary = summarize_ratings(before, [rating(1, 5, "Kind"), rating(2, 2)], NOW)
    # Then the count is 4 and the average (8 + 7) / 4; a repeated line is not added twice, an
    # empty rating counts without a line
    assert (summary["ratings_count"], summary["average_rating"]) == (4, 3.75)
    assert summary["positives"] == ["Kind"]
    assert summary["negatives"] == []
    # And the input element was not changed
    assert before["ratings_count"] == 2


def test_no_ratings_keep_the_average_and_an_empty_history_has_none():
    assert summarize_ratings({}, [], NOW)["average_rating"] is None
    kept = summarize_ratings({"ratings_count": 3, "average_rating": 4.33}, [], NOW)
    assert (kept["ratings_count"], kept["average_rating"]) == (3, 4.33)


def test_each_list_keeps_its_newest_lines():
    # Given 20 positives already, and 3 new positive ratings that also suggest something
    before = {"positives": [f"old {i}" for i in range(MAX_FEEDBACK_LINES)], "ratings_count": 20, "average_rating": 5}
    new = [rating(i, 5, f"great, could do more {i}") for i in range(3)]
    # When they are summarized
    summary = summarize_ratings(copy.deepcopy(before), new, NOW)
    # Then the positives are capped at 20, the oldest dropped
    assert len(summary["positives"]) == MAX_FEEDBACK_LINES == 20
    assert summary["positives"][:2] == ["old 3", "old 4"]
    assert summary["positives"][-3:] == ["great, could do more 0", "great, could do more 1", "great, could do more 2"]
    assert summary["suggestions"] == ["great, could do more 0", "great, could do more 1", "great, could do more 2"]
    assert (summary["ratings_count"], summary["average_rating"]) == (23, 5.0)


def test_a_weekly_event_keeps_its_wall_clock_time_across_a_daylight_saving_change():
    # Given a weekly 10:00 event in New York, starting before the change of 8 March 2026
    event = validate_element(
        "events",
        {
            "id": "w1",
            "summary": "Physiotherapy",
            "start": "2026-03-03T10:00:00-05:00",
            "end": "2026-03-03T11:00:00-05:00",
            "timezone": "America/New_York",
            "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=3"],
        },
    )
    # When its occurrences are expanded
    found = occurrences(event, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    # Then each is at 10:00 New York time: 15:00 UTC before the change, 14:00 UTC after it
    starts = [datetime.fromisoformat(o["occurrence_start"]).astimezone(UTC).hour for o in found]
    assert starts == [15, 14, 14]
    # And without the zone the same rule would drift to 11:00 local after the change
    floating = {**event, "timezone": ""}
    drift = occurrences(floating, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    assert [datetime.fromisoformat(o["occurrence_start"]).astimezone(UTC).hour for o in drift] == [15, 15, 15]


def test_a_cancelled_or_moved_occurrence_of_a_series_is_skipped_by_the_series():
    # Given an imported weekly series
    series = {
        "id": "series1",
        "status": "confirmed",
        "summary": "Team sync",
        "start": {"dateTime": "2026-04-06T09:00:00+01:00", "timeZone": "Europe/Lisbon"},
        "end": {"dateTime": "2026-04-06T09:30:00+01:00", "timeZone": "Europe/Lisbon"},
        "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=4"],
        "updated": "2026-04-01T08:00:00Z",
    }
    doc, _ = run_import({}, [series])
    # When an incremental sync sends one occurrence cancelled and another moved
    cancelled = {
        "id": "series1_20260413T080000Z",
        "status": "cancelled",
        "recurringEventId": "series1",
        "originalStartTime": {"dateTime": "2026-04-13T09:00:00+01:00", "timeZone": "Europe/Lisbon"},
    }
    moved = {
        "id": "series1_20260420T080000Z",
        "status": "confirmed",
        "summary": "Team sync (moved)",
        "recurringEventId": "series1",
        "originalStartTime": {"dateTime": "2026-04-20T09:00:00+01:00", "timeZone": "Europe/Lisbon"},
        "start": {"dateTime": "2026-04-21T15:00:00+01:00", "timeZone": "Europe/Lisbon"},
        "end": {"dateTime": "2026-04-21T15:30:00+01:00", "timeZone": "Europe/Lisbon"},
        "updated": "2026-04-10T08:00:00Z",
    }
    doc, report = run_import(doc, [cancelled, moved])
    # Then the series skips both original dates, and the moved one is an event of its own
    assert doc["events"]["series1"]["recurrence"] == [
        "RRULE:FREQ=WEEKLY;COUNT=4",
        "EXDATE:20260413T080000Z,20260420T080000Z",
    ]
    assert (report.deleted, report.created) == (1, 1)
    april = (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    series_days = [o["occurrence_start"][:10] for o in occurrences(doc["events"]["series1"], *april)]
    assert series_days == ["2026-04-06", "2026-04-27"]
    assert doc["events"]["series1_20260420T080000Z"]["start"] == "2026-04-21T15:00:00+01:00"


def test_a_newer_series_keeps_the_dates_its_cancelled_instances_took_out():
    # Given a weekly series one of whose classes was cancelled (an EXDATE added by the import)
    series = {
        "id": "yoga",
        "status": "confirmed",
        "summary": "Yoga",
        "start": {"dateTime": "2026-06-02T18:00:00Z"},
        "end": {"dateTime": "2026-06-02T19:00:00Z"},
        "recurrence": ["RRULE:FREQ=WEEKLY"],
        "updated": "2026-06-01T00:00:00Z",
    }
    cancelled = {
        "id": "yoga_20260616T180000Z",
        "status": "cancelled",
        "recurringEventId": "yoga",
        "originalStartTime": {"dateTime": "2026-06-16T18:00:00Z"},
    }
    doc, _ = run_import({}, [series, cancelled])
    # When the series itself comes again, changed (a new location)
    doc, report = run_import(doc, [{**series, "location": "Studio B", "updated": "2026-06-05T00:00:00Z"}])
    # Then it is updated and the cancelled date stays out
    assert report.updated == 1
    assert doc["events"]["yoga"]["location"] == "Studio B"
    assert doc["events"]["yoga"]["recurrence"] == ["RRULE:FREQ=WEEKLY", "EXDATE:20260616T180000Z"]


@pytest.mark.parametrize(
    ("recurrence", "message"),
    [
        (["RRULE:FREQ=SECONDLY"], "FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY"),
        (["RRULE:FREQ=MINUTELY;COUNT=10"], "FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY"),
        (["RRULE:INTERVAL=2"], "FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY"),
        (["RRULE:FREQ=DAILY;COUNT=1000000"], "COUNT must be between 1 and 5000"),
        (["RRULE:FREQ=WEEKLY", "RDATE:2026-01-05T09:00"], "must list dates or date-times"),
        (["RRULE:FREQ=NOPE"], "FREQ must be"),
    ],
)
def test_recurrences_that_cannot_be_expanded_cheaply_and_safely_are_refused(recurrence, message):
    # Given an event whose recurrence would be costly or fail when expanded
    event = {"id": "e", "summary": "x", "start": "2026-01-05T09:00:00Z", "recurrence": recurrence}
    # When it is validated, then it is refused with the reason
    with pytest.raises(InvalidDocument, match=message):
        validate_element("events", event)


def test_expanding_an_old_or_unreadable_recurrence_is_bounded_and_never_fails():
    # Given a daily event that started 40 years before the range, and one stored before its lines
    # were checked (a naive RDATE beside an aware start)
    old = {"id": "o", "summary": "x", "start": "1986-01-01T08:00:00Z", "recurrence": ["RRULE:FREQ=DAILY"]}
    bad = {"id": "b", "summary": "y", "start": "2026-01-05T09:00:00Z", "recurrence": ["RDATE:20260106T090000"]}
    week = (datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC))
    # When their occurrences in a week are read
    # Then the old one has its seven (the walk from 1986 is within the bound), the bad one its start only
    assert len(occurrences(old, *week)) == 7
    assert occurrences(bad, datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC))[0]["id"] == "b"


def test_many_cancelled_occurrences_share_one_exdate_line():
    # Given a weekly series and twelve of its occurrences cancelled one sync at a time
    series = {
        "id": "w",
        "status": "confirmed",
        "summary": "Swim",
        "start": {"dateTime": "2026-01-05T07:00:00Z"},
        "recurrence": ["RRULE:FREQ=WEEKLY"],
        "updated": "2026-01-01T00:00:00Z",
    }
    doc, _ = run_import({}, [series])
    for week in range(12):
        day = datetime(2026, 1, 5, 7, tzinfo=UTC) + timedelta(weeks=week)
        cancelled = {
            "id": f"w_{day:%Y%m%dT%H%M%SZ}",
            "status": "cancelled",
            "recurringEventId": "w",
            "originalStartTime": {"dateTime": day.isoformat()},
        }
        doc, report = run_import(doc, [cancelled])
        assert report.deleted == 1
    # Then the event still validates: one RRULE line and one EXDATE line with the twelve dates
    recurrence = validate_element("events", doc["events"]["w"])["recurrence"]
    assert len(recurrence) == 2 and recurrence[1].count(",") == 11
    # And the same cancellation again changes nothing
    doc2, report = run_import(doc, [cancelled])
    assert doc2 == doc and (report.deleted, report.unchanged) == (0, 1)

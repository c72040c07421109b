"""The companion layer of the memory API (DOCUMENT_SCHEMA=companion), driven with API Gateway HTTP
API v2 events against real PostgreSQL: goals, to-dos and events (create, read, update, complete,
delete, each a version), their queries (due to-dos, active goals, events in a range), the Google
Calendar import, ratings, the digest, search, sensitive fields and the embeddings after a write.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from user_memory.http.app import MemoryApi
from user_memory.observability import logger as service_logger

from tests.api_client import ApiClient, Reply
from tests.e2e.helpers import (
    MERGE_PATCH,
    TIMED,
    ApiFactory,
    Logs,
    assert_problem,
    etag,
    events_list_page,
    google_event,
    head_version,
    merge,
    new_client,
    ok,
    removed,
    version_count,
)
from tests.fake_embeddings import FakeEmbeddings, fake_embeddings_server

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

EMBEDDING_MODEL = "text-embedding-3-small"

# Each collection: a new element, a merge that changes a field and removes another (null), what
# the removed field returns to, and the status "complete" sets.
ELEMENTS: dict[str, dict[str, Any]] = {
    "goals": {
        "new": {"id": "g-run", "title": "Run a half marathon", "category": "fitness", "target_date": "2026-10-04"},
        "merge": {"title": "Run a full marathon", "category": None},
        "changed": ("title", "Run a full marathon"),
        "removed": ("category", ""),
        "completed": "completed",
    },
    "todos": {
        "new": {"id": "t-passport", "text": "Renew the passport", "due_date": "2026-07-01", "tags": ["travel"]},
        "merge": {"text": "Renew the passport at the consulate", "due_date": None},
        "changed": ("text", "Renew the passport at the consulate"),
        "removed": ("due_date", None),
        "completed": "done",
    },
    "events": {
        "new": {
            "id": "e-dentist",
            "summary": "Dentist check-up",
            "start": "2026-06-10T09:00:00+01:00",
            "end": "2026-06-10T09:30:00+01:00",
            "location": "Rua Augusta 10",
        },
        "merge": {"summary": "Dentist check-up and cleaning", "location": None},
        "changed": ("summary", "Dentist check-up and cleaning"),
        "removed": ("location", ""),
        "completed": "completed",
    },
}


# -- helpers ---------------------------------------------------------------------------------------


def patch_element(client: ApiClient, path: str, body: Any, **headers: str) -> Reply:
    return client.patch(path, body=json.dumps(body), headers={**MERGE_PATCH, **headers})


def history_versions(client: ApiClient) -> list[int]:
    return [i["version"] for i in ok(client.get("/me/memory/history", query={"limit": 500}))["items"]]


@pytest.fixture
def api(make_api: ApiFactory) -> MemoryApi:
    return make_api("companion")


@pytest.fixture
def user(api: MemoryApi) -> ApiClient:
    return new_client(api)


# -- each collection: create, read, update, complete, delete -------------------------------------------


@pytest.mark.parametrize("collection", ["goals", "todos", "events"])
def test_an_element_is_created_read_updated_completed_and_deleted_each_a_version(user, collection):
    spec = ELEMENTS[collection]
    element_id = spec["new"]["id"]
    path = f"/me/{collection}/{element_id}"

    # Given nothing; When the element is created
    created = user.post(f"/me/{collection}", json_body=spec["new"])
    # Then it is version 1, with the element in stored form (the schema's defaults filled)
    body = ok(created)
    assert (body["status"], body["version"], body["id"], body["collection"]) == ("written", 1, element_id, collection)
    assert body["user_id"] == user.user_id
    assert etag(created) == '"1"' and "Idempotent-Replayed" not in created.headers
    for field, value in spec["new"].items():
        assert body["element"][field] == value
    assert body["element"]["status"] == {"goals": "active", "todos": "open", "events": "confirmed"}[collection]

    # When it is read back: the head's element and version
    read = user.get(path)
    assert ok(read) == {
        "user_id": user.user_id,
        "collection": collection,
        "id": element_id,
        "version": 1,
        "element": body["element"],
    }
    assert etag(read) == '"1"'

    # When it is merged: one field changed, one removed with null (its default returns)
    updated = patch_element(user, path, spec["merge"], **{"If-Match": '"1"'})
    changed_field, changed_value = spec["changed"]
    removed_field, default = spec["removed"]
    body = ok(updated)
    assert body["status"] == "written" and body["version"] == 2 and etag(updated) == '"2"'
    assert body["element"][changed_field] == changed_value
    assert body["element"][removed_field] == default
    assert ok(user.get(path))["element"] == body["element"]
    diff = ok(user.get("/me/memory/diff", query={"from": 1, "to": 2}))["patch"]
    assert {op["path"] for op in diff} == {
        f"/{collection}/{element_id}/{changed_field}",
        f"/{collection}/{element_id}/{removed_field}",
    }

    # When it is completed, twice: one version, the second writes nothing
    completed = user.post(f"{path}/complete")
    body = ok(completed)
    assert body["status"] == "written" and body["version"] == 3 and etag(completed) == '"3"'
    assert body["element"]["status"] == spec["completed"]
    if collection != "events":
        assert datetime.fromisoformat(body["element"]["completed_at"].replace("Z", "+00:00")).tzinfo is not None
    if collection == "goals":
        assert [(p["note"], p["percent"]) for p in body["element"]["progress"]] == [("completed", 100)]
    again = ok(user.post(f"{path}/complete"))
    assert (again["status"], again["version"]) == ("unchanged", 3)

    # When it is deleted: a version without it, and reading it is a 404
    deleted = user.delete(path)
    body = ok(deleted)
    assert (body["status"], body["version"], body["element"]) == ("written", 4, None)
    assert etag(deleted) == '"4"'
    assert element_id not in ok(user.get("/me/memory"))["document"][collection]
    assert_problem(user.get(path), 404, "not-found")

    # Then every write is in the history, newest first, and the history keeps the element
    assert history_versions(user) == [4, 3, 2, 1]
    assert element_id in ok(user.get("/me/memory", query={"version": 3}))["document"][collection]


def test_an_id_is_generated_when_the_body_has_none(user):
    # Given a to-do without an id; When it is created
    body = ok(user.post("/me/todos", json_body={"text": "Water the plants"}))
    # Then it got an id, under which it is read back
    element_id = body["id"]
    assert isinstance(element_id, str) and len(element_id) == 12 and body["element"]["id"] == element_id
    assert ok(user.get(f"/me/todos/{element_id}"))["element"]["text"] == "Water the plants"


def test_creating_an_id_that_is_taken_is_409_element_exists_and_writes_nothing(user):
    # Given a goal g1
    ok(user.post("/me/goals", json_body={"id": "g1", "title": "Learn to swim"}))
    # When another goal is created under the same id
    reply = user.post("/me/goals", json_body={"id": "g1", "title": "Something else"})
    # Then 409 element-exists, and the first goal is untouched
    body = assert_problem(reply, 409, "element-exists")
    assert body["detail"] == "this goal id is taken; update the goal with PATCH"  # ids stay out of logs
    assert ok(user.get("/me/goals/g1"))["element"]["title"] == "Learn to swim"
    assert head_version(user) == 1


@pytest.mark.parametrize("collection", ["goals", "todos", "events"])
def test_a_missing_element_is_404_for_every_element_route(user, collection):
    path = f"/me/{collection}/nope"
    assert_problem(user.get(path), 404, "not-found")
    assert_problem(patch_element(user, path, {"status": "paused"}), 404, "not-found")
    assert_problem(user.post(f"{path}/complete"), 404, "not-found")
    assert_problem(user.delete(path), 404, "not-found")
    assert head_version(user) == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json-patch+json", "text/plain", ""])
def test_updating_an_element_takes_merge_patch_only(user, content_type):
    # Given a to-do
    ok(user.post("/me/todos", json_body={"id": "t1", "text": "Call the bank"}))
    headers = {"Content-Type": content_type} if content_type else {}
    # When it is updated with another media type
    reply = user.patch("/me/todos/t1", body=json.dumps({"text": "Call the plumber"}), headers=headers)
    # Then 415, nothing written
    assert_problem(reply, 415, "unsupported-media-type")
    assert ok(user.get("/me/todos/t1"))["element"]["text"] == "Call the bank"
    assert head_version(user) == 1


@pytest.mark.parametrize("body", [["a list"], "text", 3])
def test_a_merge_patch_for_an_element_that_is_not_an_object_is_400_invalid_patch(user, body):
    # Given a to-do
    ok(user.post("/me/todos", json_body={"id": "t1", "text": "Call the bank"}))
    # When it is updated with a merge patch that is not an object
    reply = patch_element(user, "/me/todos/t1", body)
    # Then the patch is refused as a patch (not as a document), and nothing is written
    problem = assert_problem(reply, 400, "invalid-patch")
    assert problem["detail"] == "a merge patch for a to-do must be a JSON object"
    assert head_version(user) == 1


@pytest.mark.parametrize(
    ("collection", "fields", "field_named"),
    [
        ("todos", {"id": "t-bad", "text": "Pay rent", "due_date": "tomorrow"}, "todos.t-bad.due_date"),
        ("todos", {"id": "t-orphan", "text": "Stretch", "goal_id": "no-such-goal"}, "todos.t-orphan.goal_id"),
        ("todos", {"id": "t-empty", "text": ""}, "todos.t-empty.text"),
        ("todos", {"id": "t-x", "text": "Read", "colour": "blue"}, "todos.t-x.colour"),
        ("goals", {"id": "g-bad", "title": "Save", "status": "someday"}, "goals.g-bad.status"),
        (
            "events",
            {"id": "e-bad", "summary": "Concert", "start": "2026-06-10T20:00:00Z", "end": "2026-06-10T18:00:00Z"},
            "end is before start",
        ),
        ("events", {"id": "bad id!", "summary": "Concert", "start": "2026-06-10"}, "events.bad id!"),
    ],
    ids=["due-tomorrow", "unknown-goal", "empty-text", "unknown-field", "bad-status", "end-before-start", "bad-id"],
)
def test_an_invalid_element_is_422_naming_the_field_and_writes_nothing(user, collection, fields, field_named):
    # Given a user with one version
    ok(user.post("/me/goals", json_body={"id": "g0", "title": "Keep a journal"}))
    # When an invalid element is created
    body = assert_problem(user.post(f"/me/{collection}", json_body=fields), 422, "invalid-document")
    # Then the problem names what is wrong, and nothing was written
    assert field_named in body["detail"], body["detail"]
    assert head_version(user) == 1 and version_count(user) == 1


def test_an_update_that_breaks_the_schema_is_422_and_writes_nothing(user):
    # Given a to-do and an event
    ok(user.post("/me/todos", json_body={"id": "t1", "text": "Book flights"}))
    ok(user.post("/me/events", json_body={"id": "e1", "summary": "Flight", "start": "2026-06-10T08:00:00Z"}))
    # When updates would make them invalid
    for path, fields, named in [
        ("/me/todos/t1", {"due_date": "next week"}, "todos.t1.due_date"),
        ("/me/todos/t1", {"goal_id": "missing"}, "todos.t1.goal_id"),
        ("/me/todos/t1", {"text": None}, "todos.t1.text"),  # null removes a required field
        ("/me/events/e1", {"end": "2026-06-10T07:00:00Z"}, "end is before start"),
    ]:
        body = assert_problem(patch_element(user, path, fields), 422, "invalid-document")
        assert named in body["detail"], body["detail"]
    # Then nothing was written; an id change is refused too
    assert_problem(patch_element(user, "/me/todos/t1", {"id": "t2"}), 400, "bad-request")
    assert head_version(user) == 2


def test_a_stale_if_match_is_412_on_every_element_write(user):
    # Given a to-do at version 1, then another write (version 2)
    ok(user.post("/me/todos", json_body={"id": "t1", "text": "Fix the bike"}))
    ok(user.post("/me/todos", json_body={"id": "t2", "text": "Oil the chain"}))
    stale = {"If-Match": '"1"'}
    # When each element write names version 1
    for reply in (
        user.post("/me/todos", json_body={"id": "t3", "text": "Pump the tyres"}, headers=stale),
        patch_element(user, "/me/todos/t1", {"text": "Sell the bike"}, **stale),
        user.post("/me/todos/t1/complete", headers=stale),
        user.delete("/me/todos/t1", headers=stale),
        user.post("/me/events/import", json_body={"items": [google_event("g1")]}, headers=stale),
    ):
        # Then 412 with the current version, and nothing written
        assert assert_problem(reply, 412, "stale-version")["current_version"] == 2
    assert head_version(user) == 2
    assert ok(user.get("/me/todos/t1"))["element"]["text"] == "Fix the bike"
    # And the current version is taken
    assert ok(patch_element(user, "/me/todos/t1", {"text": "Sell the bike"}, **{"If-Match": '"2"'}))["version"] == 3


def test_an_idempotency_key_repeat_answers_the_same_version_and_writes_nothing(user):
    key = {"Idempotency-Key": "create-t1"}
    # Given a to-do created under a key
    first = user.post("/me/todos", json_body={"id": "t1", "text": "Buy stamps"}, headers=key)
    assert ok(first)["status"] == "written" and ok(first)["version"] == 1
    # When another write moves the head on, then the same request is repeated
    ok(user.post("/me/todos", json_body={"id": "t2", "text": "Post the letter"}))
    again = user.post("/me/todos", json_body={"id": "t1", "text": "Buy stamps"}, headers=key)
    # Then it answers the first write's version, marked as a replay (not a 409 element-exists)
    body = ok(again)
    assert (body["status"], body["version"], body["id"]) == ("idempotent", 1, "t1")
    assert again.headers.get("Idempotent-Replayed") == "true" and etag(again) == '"1"'
    assert history_versions(user) == [2, 1]

    # The same for an update and a completion
    update_key = {"Idempotency-Key": "update-t1"}
    ok(patch_element(user, "/me/todos/t1", {"priority": "high"}, **update_key))
    replay = patch_element(user, "/me/todos/t1", {"priority": "high"}, **update_key)
    assert (ok(replay)["status"], ok(replay)["version"]) == ("idempotent", 3)
    assert replay.headers.get("Idempotent-Replayed") == "true"
    ok(user.post("/me/todos/t1/complete", headers={"Idempotency-Key": "done-t1"}))
    replay = user.post("/me/todos/t1/complete", headers={"Idempotency-Key": "done-t1"})
    assert (ok(replay)["status"], ok(replay)["version"]) == ("idempotent", 4)
    assert history_versions(user) == [4, 3, 2, 1]

    # Another request under a used key is refused
    other = patch_element(user, "/me/todos/t1", {"priority": "low"}, **update_key)
    assert_problem(other, 422, "invalid-input")
    assert head_version(user) == 4


def test_deleting_a_goal_clears_its_todos_goal_id(user):
    # Given a goal with two to-dos, and a to-do of another goal
    ok(user.post("/me/goals", json_body={"id": "g-fit", "title": "Get fit"}))
    ok(user.post("/me/goals", json_body={"id": "g-read", "title": "Read more"}))
    ok(user.post("/me/todos", json_body={"id": "t-gym", "text": "Join a gym", "goal_id": "g-fit"}))
    ok(user.post("/me/todos", json_body={"id": "t-shoes", "text": "Buy running shoes", "goal_id": "g-fit"}))
    ok(user.post("/me/todos", json_body={"id": "t-library", "text": "Get a library card", "goal_id": "g-read"}))
    # When the goal is deleted
    body = ok(user.delete("/me/goals/g-fit"))
    # Then its to-dos stay, without a goal, in the same version; the other to-do keeps its goal
    assert body["version"] == 6
    todos = ok(user.get("/me/memory"))["document"]["todos"]
    assert {k: v["goal_id"] for k, v in todos.items()} == {"t-gym": None, "t-shoes": None, "t-library": "g-read"}


# -- queries -------------------------------------------------------------------------------------------


def indexed_ids(items: list[dict[str, Any]]) -> list[str]:
    return [i["element"]["id"] for i in items]


def test_todos_due_on_a_day_split_into_overdue_and_due(user):
    # Given to-dos due before, on and after 2026-06-10, some done or cancelled, one without a date
    todos = [
        {"id": "t-old", "text": "Return the library books", "due_date": "2026-06-01"},
        {"id": "t-yesterday", "text": "Pay the electricity bill", "due_date": "2026-06-09", "status": "in_progress"},
        {"id": "t-today", "text": "Call the plumber", "due_date": "2026-06-10"},
        {"id": "t-tomorrow", "text": "Renew the car insurance", "due_date": "2026-06-11"},
        {"id": "t-done", "text": "Book the hotel", "due_date": "2026-06-05", "status": "done"},
        {"id": "t-cancelled", "text": "Order a cake", "due_date": "2026-06-10", "status": "cancelled"},
        {"id": "t-undated", "text": "Learn a song"},
    ]
    for todo in todos:
        ok(user.post("/me/todos", json_body=todo))
    # When the to-dos due on 2026-06-10 are asked for
    body = ok(user.get("/me/todos/due", query={"on": "2026-06-10"}))
    # Then earlier dates are overdue (oldest first), the day's are due; done, cancelled, future and
    # undated ones are left out; each comes with its pointer and the version that wrote it
    assert body["user_id"] == user.user_id and body["day"] == "2026-06-10"
    assert indexed_ids(body["overdue"]) == ["t-old", "t-yesterday"]
    assert indexed_ids(body["due"]) == ["t-today"]
    assert [(i["path"], i["version"]) for i in body["overdue"]] == [("/todos/t-old", 1), ("/todos/t-yesterday", 2)]
    assert body["due"][0]["element"]["text"] == "Call the plumber"

    # When one is completed, it is no longer due
    ok(user.post("/me/todos/t-old/complete"))
    assert indexed_ids(ok(user.get("/me/todos/due", query={"on": "2026-06-10"}))["overdue"]) == ["t-yesterday"]
    assert_problem(user.get("/me/todos/due", query={"on": "10/06/2026"}), 400, "bad-request")


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "America/Los_Angeles"])
def test_todos_due_defaults_to_the_users_today_in_their_time_zone(user, zone):
    # Given a user in a time zone, with to-dos due yesterday, today and tomorrow (their calendar)
    ok(merge(user, {"basic_info": {"timezone": zone}}))
    today = datetime.now(ZoneInfo(zone)).date()
    for element_id, day in [("t-yesterday", today - timedelta(days=1)), ("t-today", today),
                            ("t-tomorrow", today + timedelta(days=1))]:  # fmt: skip
        ok(user.post("/me/todos", json_body={"id": element_id, "text": f"Task {element_id}", "due_date": str(day)}))
    # When the due to-dos are asked for without a day
    body = ok(user.get("/me/todos/due"))
    if body["day"] != str(today):  # midnight passed in that zone during the test
        pytest.skip("the day changed during the test")
    # Then the day is the user's today: yesterday's is overdue, today's due, tomorrow's neither
    assert indexed_ids(body["overdue"]) == ["t-yesterday"]
    assert indexed_ids(body["due"]) == ["t-today"]


@pytest.mark.parametrize(
    ("zone", "todos", "overdue", "due"),
    [
        (
            "America/Los_Angeles",  # UTC-7 in June: the day is 2026-06-10T07:00Z .. 2026-06-11T07:00Z
            {
                "t-last-evening": "2026-06-09T20:00:00-07:00",  # 2026-06-10T03:00Z: the user's yesterday
                "t-late": "2026-06-10T23:00:00-07:00",
                "t-date": "2026-06-10",
                "t-tomorrow-date": "2026-06-11",  # indexed as 2026-06-11T00:00Z, before the day's end
                "t-tomorrow-early": "2026-06-11T00:30:00-07:00",
            },
            ["t-last-evening"],
            ["t-date", "t-late"],
        ),
        (
            "Pacific/Kiritimati",  # UTC+14: the day is 2026-06-09T10:00Z .. 2026-06-10T10:00Z
            {
                "t-early": "2026-06-10T05:00:00+14:00",  # 2026-06-09T15:00Z: the user's today
                "t-yesterday": "2026-06-09T23:00:00+14:00",
                "t-date": "2026-06-10",
            },
            ["t-yesterday"],
            ["t-early", "t-date"],
        ),
    ],
    ids=["west-of-utc", "east-of-utc"],
)
def test_todos_due_on_a_day_follow_the_users_time_zone(user, zone, todos, overdue, due):
    # Given a user in a time zone with to-dos due around 2026-06-10 (dates and date-times)
    ok(merge(user, {"basic_info": {"timezone": zone}}))
    for element_id, when in todos.items():
        ok(user.post("/me/todos", json_body={"id": element_id, "text": f"Task {element_id}", "due_date": when}))
    # When the to-dos due on 2026-06-10 are asked for
    body = ok(user.get("/me/todos/due", query={"on": "2026-06-10"}))
    # Then overdue and due follow the user's calendar day, and tomorrow's are in neither list
    assert indexed_ids(body["overdue"]) == overdue
    assert indexed_ids(body["due"]) == due


def test_active_goals_within_days_filter_by_target_date(user):
    # Given active goals with targets in 5 and 40 days, one without a target, and a paused goal
    today = datetime.now(UTC).date()
    goals = [
        {"id": "g-far", "title": "Learn Portuguese", "target_date": str(today + timedelta(days=40))},
        {"id": "g-near", "title": "Finish the quilt", "target_date": str(today + timedelta(days=5))},
        {"id": "g-open", "title": "Be kinder"},
        {"id": "g-paused", "title": "Build a shed", "target_date": str(today + timedelta(days=3)), "status": "paused"},
    ]
    for goal in goals:
        ok(user.post("/me/goals", json_body=goal))
    # When active goals are asked for: all, within 14 days, within 60 days, within 0 days
    every = ok(user.get("/me/goals"))
    within_14 = ok(user.get("/me/goals", query={"within_days": 14}))
    within_60 = ok(user.get("/me/goals", query={"within_days": 60}))
    within_0 = ok(user.get("/me/goals", query={"within_days": 0}))
    # Then the nearest target comes first, undated goals last and only without a window
    assert every["user_id"] == user.user_id
    assert indexed_ids(every["items"]) == ["g-near", "g-far", "g-open"]
    assert indexed_ids(within_14["items"]) == ["g-near"]
    assert indexed_ids(within_60["items"]) == ["g-near", "g-far"]
    assert within_0["items"] == []
    assert [(i["path"], i["version"]) for i in within_14["items"]] == [("/goals/g-near", 2)]
    # A completed goal is no longer active
    ok(user.post("/me/goals/g-near/complete"))
    assert indexed_ids(ok(user.get("/me/goals", query={"within_days": 14}))["items"]) == []
    assert_problem(user.get("/me/goals", query={"within_days": -1}), 400, "bad-request")


def test_events_in_a_range_expand_a_weekly_event_and_keep_one_overlapping_the_start(user):
    # Given a weekly event since March (Mondays 09:00-10:00 UTC), a one-off event that began before
    # the range and ends inside it, one entirely before, one after, and a cancelled one inside
    events = [
        {"id": "e-weekly", "summary": "Weekly review", "start": "2026-03-02T09:00:00Z",
         "end": "2026-03-02T10:00:00Z", "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO"]},
        {"id": "e-night", "summary": "Night train", "start": "2026-05-31T22:00:00Z", "end": "2026-06-01T06:00:00Z"},
        {"id": "e-before", "summary": "Old party", "start": "2026-05-20T18:00:00Z", "end": "2026-05-20T23:00:00Z"},
        {"id": "e-after", "summary": "Late concert", "start": "2026-06-20T19:00:00Z", "end": "2026-06-20T22:00:00Z"},
        {"id": "e-off", "summary": "Called off", "start": "2026-06-03T12:00:00Z", "status": "cancelled"},
    ]  # fmt: skip
    for event in events:
        ok(user.post("/me/events", json_body=event))
    # When the events of two weeks from Monday 1 June are asked for
    body = ok(user.get("/me/events", query={"from": "2026-06-01T00:00:00Z", "to": "2026-06-15T00:00:00Z"}))
    # Then the night train (overlapping the start) and the two Mondays' reviews, by start
    assert body["user_id"] == user.user_id
    assert datetime.fromisoformat(body["from"]) == datetime(2026, 6, 1, tzinfo=UTC)
    assert datetime.fromisoformat(body["to"]) == datetime(2026, 6, 15, tzinfo=UTC)
    found = [(o["id"], o["occurrence_start"], o["occurrence_end"]) for o in body["items"]]
    assert found == [
        ("e-night", "2026-05-31T22:00:00+00:00", "2026-06-01T06:00:00+00:00"),
        ("e-weekly", "2026-06-01T09:00:00+00:00", "2026-06-01T10:00:00+00:00"),
        ("e-weekly", "2026-06-08T09:00:00+00:00", "2026-06-08T10:00:00+00:00"),
    ]
    assert {o["path"] for o in body["items"]} == {"/events/e-night", "/events/e-weekly"}
    assert body["items"][1]["event"]["summary"] == "Weekly review" and body["items"][1]["version"] == 1

    # One week, starting mid-review on the 8th: that occurrence overlaps the start
    week = ok(user.get("/me/events", query={"from": "2026-06-08T09:30:00Z", "to": "2026-06-15T09:30:00Z"}))
    assert [(o["id"], o["occurrence_start"]) for o in week["items"]] == [
        ("e-weekly", "2026-06-08T09:00:00+00:00"),
        ("e-weekly", "2026-06-15T09:00:00+00:00"),
    ]


def test_events_range_errors_are_400(user):
    bad = [
        {"from": "2026-06-01T00:00:00", "to": "2026-06-02T00:00:00Z"},  # no zone
        {"from": "2026-06-02T00:00:00Z", "to": "2026-06-01T00:00:00Z"},  # to before from
        {"from": "2026-06-01T00:00:00Z", "to": "2026-06-01T00:00:00Z"},  # empty
        {"from": "2026-01-01T00:00:00Z", "to": "2027-01-03T00:00:00Z"},  # over 366 days
        {"from": "soon"},
    ]
    for query in bad:
        assert_problem(user.get("/me/events", query=query), 400, "bad-request")


def test_events_default_to_the_next_seven_days(user):
    # Given an event in three days and one in ten
    now = datetime.now(UTC).replace(microsecond=0)
    soon, later = now + timedelta(days=3), now + timedelta(days=10)
    ok(user.post("/me/events", json_body={"id": "soon", "summary": "Soon", "start": soon.isoformat()}))
    ok(user.post("/me/events", json_body={"id": "later", "summary": "Later", "start": later.isoformat()}))
    # When the events are asked for without a range
    body = ok(user.get("/me/events"))
    # Then the range is now .. now + 7 days, holding only the first
    start, end = datetime.fromisoformat(body["from"]), datetime.fromisoformat(body["to"])
    assert end - start == timedelta(days=7) and abs(start - now) < timedelta(minutes=1)
    assert [o["id"] for o in body["items"]] == ["soon"]


# -- the Google Calendar import ----------------------------------------------------------------------


ALL_DAY = google_event(
    "4p2k9q8r1allday",
    summary="Cousin's wedding",
    location="Porto",
    start={"date": "2026-06-13"},
    end={"date": "2026-06-14"},
    transparency="transparent",
)
RECURRING = google_event(
    "9rr1weeklyyoga",
    summary="Yoga class",
    recurrence=["RRULE:FREQ=WEEKLY;BYDAY=TU;UNTIL=20260630T235959Z"],
    start={"dateTime": "2026-06-02T19:00:00+01:00", "timeZone": "Europe/Lisbon"},
    end={"dateTime": "2026-06-02T20:00:00+01:00", "timeZone": "Europe/Lisbon"},
)


def test_a_google_calendar_page_is_imported_then_synced_incrementally(user):
    # Given an Events.list page: an all-day event, a timed one with attendees, a recurring one
    first = user.post("/me/events/import", json_body=events_list_page([ALL_DAY, TIMED, RECURRING]))
    # When it is imported: three new events, one version
    body = ok(first)
    assert body == {
        "user_id": user.user_id,
        "status": "written",
        "version": 1,
        "created": 3,
        "updated": 0,
        "unchanged": 0,
        "deleted": 0,
    }
    assert etag(first) == '"1"'
    # Then each reads back as our event
    all_day = ok(user.get("/me/events/4p2k9q8r1allday"))["element"]
    assert all_day == {
        "id": "4p2k9q8r1allday",
        "summary": "Cousin's wedding",
        "description": "",
        "start": "2026-06-13",
        "end": "2026-06-14",
        "timezone": "",
        "location": "Porto",
        "attendees": [],
        "recurrence": [],
        "status": "confirmed",
        "last_modified": "2026-05-02T08:00:00.000Z",
        "source": "google",
    }
    timed = ok(user.get("/me/events/7bq3m2timed"))["element"]
    assert (timed["start"], timed["end"]) == ("2026-06-04T14:00:00+01:00", "2026-06-04T15:30:00+01:00")
    assert timed["timezone"] == "Europe/Lisbon"
    assert timed["description"] == "Bring the budget numbers"
    assert timed["attendees"] == [
        {"name": "", "email": "calendar-owner@example.com", "response_status": "accepted"},
        {"name": "Team lead", "email": "colleague@example.com", "response_status": "needsAction"},
    ]
    recurring = ok(user.get("/me/events/9rr1weeklyyoga"))["element"]
    assert recurring["recurrence"] == ["RRULE:FREQ=WEEKLY;BYDAY=TU;UNTIL=20260630T235959Z"]
    # And the recurring one occurs every Tuesday of June until its end
    june = ok(user.get("/me/events", query={"from": "2026-06-01T00:00:00Z", "to": "2026-07-15T00:00:00Z"}))
    yoga = [o["occurrence_start"] for o in june["items"] if o["id"] == "9rr1weeklyyoga"]
    assert yoga == [f"2026-06-{d:02d}T19:00:00+01:00" for d in (2, 9, 16, 23, 30)]
    assert [o["id"] for o in june["items"] if o["id"] != "9rr1weeklyyoga"] == ["7bq3m2timed", "4p2k9q8r1allday"]

    # When the next sync brings the timed event updated later, the all-day one cancelled, the
    # recurring one as it was, and a cancellation of an event never imported
    moved = {**TIMED, "updated": "2026-05-20T09:15:00.000Z", "summary": "Quarterly planning (moved)",
             "start": {"dateTime": "2026-06-05T14:00:00+01:00", "timeZone": "Europe/Lisbon"},
             "end": {"dateTime": "2026-06-05T15:30:00+01:00", "timeZone": "Europe/Lisbon"}}  # fmt: skip
    cancelled = {"kind": "calendar#event", "etag": '"3391"', "id": ALL_DAY["id"], "status": "cancelled"}
    never_seen = {"kind": "calendar#event", "etag": '"3392"', "id": "unknown1", "status": "cancelled"}
    one_class_off = {
        "kind": "calendar#event",
        "etag": '"3393"',
        "id": "9rr1weeklyyoga_20260616T180000Z",
        "status": "cancelled",
        "recurringEventId": "9rr1weeklyyoga",
        "originalStartTime": {"dateTime": "2026-06-16T19:00:00+01:00", "timeZone": "Europe/Lisbon"},
    }
    page = [moved, cancelled, RECURRING, never_seen, one_class_off]
    second = user.post("/me/events/import", json_body=events_list_page(page))
    # Then the counts say so, in one new version
    body = ok(second)
    assert (body["status"], body["version"]) == ("written", 2)
    assert (body["created"], body["updated"], body["unchanged"], body["deleted"]) == (0, 1, 2, 2)
    assert history_versions(user) == [2, 1]
    # And the events read back as the calendar has them
    timed = ok(user.get("/me/events/7bq3m2timed"))["element"]
    assert (timed["summary"], timed["start"], timed["last_modified"]) == (
        "Quarterly planning (moved)",
        "2026-06-05T14:00:00+01:00",
        "2026-05-20T09:15:00.000Z",
    )
    assert_problem(user.get("/me/events/4p2k9q8r1allday"), 404, "not-found")
    assert set(ok(user.get("/me/memory"))["document"]["events"]) == {"7bq3m2timed", "9rr1weeklyyoga"}
    # And the cancelled class is skipped in the series
    june = ok(user.get("/me/events", query={"from": "2026-06-01T00:00:00Z", "to": "2026-07-15T00:00:00Z"}))
    yoga = [o["occurrence_start"] for o in june["items"] if o["id"] == "9rr1weeklyyoga"]
    assert yoga == [f"2026-06-{d:02d}T19:00:00+01:00" for d in (2, 9, 23, 30)]

    # When an older copy of the moved event comes again, it does not win; the import writes nothing
    stale = user.post("/me/events/import", json_body=[TIMED])
    body = ok(stale)
    assert (body["status"], body["version"], body["updated"], body["unchanged"]) == ("unchanged", 2, 0, 1)
    assert ok(user.get("/me/events/7bq3m2timed"))["element"]["summary"] == "Quarterly planning (moved)"


def test_a_single_event_and_bad_imports(user):
    # A single event resource is a page of one
    body = ok(user.post("/me/events/import", json_body=google_event("single1", summary="Haircut")))
    assert (body["created"], body["version"]) == (1, 1)
    # An empty page, an event without an id, one without a start: refused, nothing written
    assert_problem(user.post("/me/events/import", json_body={"items": []}), 400, "bad-request")
    assert_problem(user.post("/me/events/import", json_body={"items": [{"summary": "x"}]}), 400, "bad-request")
    no_start = google_event("nostart1")
    del no_start["start"]
    assert_problem(user.post("/me/events/import", json_body=[no_start]), 400, "bad-request")
    backwards = google_event("back1", end={"dateTime": "2026-06-05T09:00:00+01:00"})
    assert_problem(user.post("/me/events/import", json_body=[backwards]), 422, "invalid-document")
    assert head_version(user) == 1


# -- ratings and the digest ----------------------------------------------------------------------------


def test_ratings_are_created_unchanged_or_updated_and_a_rating_of_6_is_422(user):
    rating = {
        "interaction_id": "chat-2026-06-01-1",
        "rating": 4,
        "tags": ["helpful"],
        "comment": "Clear answer",
        "rated_at": "2026-06-01T10:00:00Z",
    }
    expected = {"user_id": user.user_id, "interaction_id": "chat-2026-06-01-1"}
    # Given nothing; When a rating is recorded, repeated, then changed
    assert ok(user.post("/me/ratings", json_body=rating)) == {**expected, "status": "created"}
    assert ok(user.post("/me/ratings", json_body=rating)) == {**expected, "status": "unchanged"}
    assert ok(user.post("/me/ratings", json_body={**rating, "rating": 5})) == {**expected, "status": "updated"}
    # Then invalid ratings are 422 and change nothing
    for bad in (
        {**rating, "rating": 6},
        {**rating, "rating": 0},
        {**rating, "interaction_id": ""},
        {**rating, "interaction_id": "chat\u0007"},  # a C0 control character
        {**rating, "interaction_id": "chat\u0085"},  # a C1 control character (the table refuses it too)
        {**rating, "rated_at": "2026-06-01T10:00:00"},
        {**rating, "user_id": str(uuid.uuid4())},
    ):
        assert_problem(user.post("/me/ratings", json_body=bad), 422, "invalid-input")
    ratings = ok(user.get("/me/export"))["ratings"]
    assert [(r["interaction_id"], r["rating"], r["tags"], r["comment"]) for r in ratings] == [
        ("chat-2026-06-01-1", 5, ["helpful"], "Clear answer")
    ]
    assert datetime.fromisoformat(ratings[0]["rated_at"]) == datetime(2026, 6, 1, 10, tzinfo=UTC)
    # Ratings are not versions of the document
    assert head_version(user) == 0


def test_the_digest_is_404_before_the_nightly_run_made_one(user):
    body = assert_problem(user.get("/me/digest"), 404, "not-found")
    assert body["detail"] == "no digest yet"
    body = assert_problem(user.get("/me/digest", query={"day": "2026-06-01"}), 404, "not-found")
    assert body["detail"] == "no digest for 2026-06-01"


# -- search --------------------------------------------------------------------------------------------


def test_search_finds_a_todo_by_a_word_with_its_path_and_version_and_never_another_users(api, user):
    # Given two users with a to-do each mentioning oat milk, and this user's other items
    other = new_client(api)
    ok(other.post("/me/todos", json_body={"id": "t-milk", "text": "Buy oat milk for the office"}))
    ok(user.post("/me/goals", json_body={"id": "g1", "title": "Cook at home more"}))
    ok(user.post("/me/todos", json_body={"id": "t-milk", "text": "Buy oat milk and bread"}))
    ok(patch_element(user, "/me/goals/g1", {"description": "Three dinners a week"}))
    # When this user searches for a word of the to-do (full text)
    body = ok(user.get("/me/memory/search", query={"q": "oat", "mode": "fts"}))
    # Then the one hit is their to-do, at its pointer, with the version that wrote it
    assert (body["user_id"], body["query"], body["mode"]) == (user.user_id, "oat", "fts")
    assert [(h["path"], h["version"], h["kind"], h["matched_by"]) for h in body["items"]] == [
        ("/todos/t-milk", 2, "todo", ["fts"])
    ]
    hit = body["items"][0]
    assert hit["text"] == "todo: Buy oat milk and bread"
    assert hit["value"]["text"] == "Buy oat milk and bread" and hit["score"] > 0
    assert "office" not in json.dumps(body)
    # And auto mode without embeddings is full text; the other user finds only their own
    assert ok(user.get("/me/memory/search", query={"q": "oat"}))["mode"] == "fts"
    theirs = ok(other.get("/me/memory/search", query={"q": "oat milk", "k": 5}))["items"]
    assert [(h["path"], h["text"]) for h in theirs] == [("/todos/t-milk", "todo: Buy oat milk for the office")]
    # A goal's new description is found at the version that changed it
    dinners = ok(user.get("/me/memory/search", query={"q": "dinners", "mode": "fts"}))["items"]
    assert [(h["path"], h["version"]) for h in dinners] == [("/goals/g1", 3)]
    # Vector modes need embeddings; bad queries are 400
    assert_problem(user.get("/me/memory/search", query={"q": "oat", "mode": "fused"}), 400, "bad-request")
    assert_problem(user.get("/me/memory/search", query={"q": "oat", "mode": "magic"}), 400, "bad-request")
    assert_problem(user.get("/me/memory/search", query={"q": "   "}), 400, "bad-request")
    assert_problem(user.get("/me/memory/search", query={"q": "oat", "k": 0}), 400, "bad-request")


# -- sensitive fields ----------------------------------------------------------------------------------

DATE_OF_BIRTH = "1987-04-23"
EMAIL = "sensitive-probe-7731@example.org"
PHONE = "+351 912 345 678"
SENSITIVE = (DATE_OF_BIRTH, EMAIL, PHONE)


@pytest.fixture
def all_logs(service_log: Logs, caplog: pytest.LogCaptureFixture) -> Logs:
    """The service's log records (caplog and a handler of its own), at INFO and above as a deployment
    logs; Powertools' own DEBUG lines print each route's arguments, bodies included, and are for
    debugging only."""
    caplog.set_level(logging.INFO)
    return service_log


@contextmanager
def service_lines_to_stdout() -> Iterator[None]:
    """The service's JSON lines written to the current sys.stdout (capsys' in a test): its handler
    keeps the stream it was built with, which capsys does not see."""
    handler = service_logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.stream
    handler.stream = sys.stdout
    try:
        yield
    finally:
        handler.stream = previous


def test_sensitive_fields_never_reach_the_logs_or_search_but_are_exported_and_erased(user, all_logs, capsys, caplog):
    # Given a date of birth, an email and a phone number set with a merge patch, and more activity:
    # to-dos, an update, a rating, reads, a search, and failing requests
    with service_lines_to_stdout():
        written = ok(merge(user, {"basic_info": {"date_of_birth": DATE_OF_BIRTH, "email": EMAIL, "phone": PHONE}}))
        assert written["document"]["basic_info"]["email"] == EMAIL
        ok(user.post("/me/todos", json_body={"id": "t1", "text": "Send the birthday invitations"}))
        ok(patch_element(user, "/me/todos/t1", {"notes": "use the new address book"}))
        ok(user.post("/me/ratings", json_body={"interaction_id": "i-1", "rating": 2, "comment": "too slow"}))
        ok(user.get("/me/memory"))
        ok(user.get("/me/memory/prompt"))
        ok(user.get("/me/memory/history"))
        ok(user.get("/me/memory/changes", query={"since": 0}))
        ok(user.get("/me/todos/due", query={"on": "2026-06-10"}))
        bad_email = merge(user, {"basic_info": {"email": "not-an-email", "phone": PHONE}})
        body = assert_problem(bad_email, 422, "invalid-document")
        assert "basic_info.email" in body["detail"]
        assert_problem(merge(user, {"basic_info": {"date_of_birth": "23/04/1987"}}), 422, "invalid-document")
        assert_problem(merge(user, {"basic_info": {"email": EMAIL, "phone": "call me"}}), 422, "invalid-document")
        assert_problem(merge(user, {"basic_info": {"email": EMAIL}}, **{"If-Match": '"1"'}), 412, "stale-version")
        assert_problem(user.post("/me/todos", json_body={"id": "t1", "text": EMAIL}), 409, "element-exists")
        assert_problem(
            user.post("/me/todos", json_body={"id": "t2", "text": "x", "notes": PHONE, "due_date": "x"}), 422
        )
        email_search = ok(user.get("/me/memory/search", query={"q": EMAIL, "mode": "fts"}))
        phone_search = ok(user.get("/me/memory/search", query={"q": "912 345 678", "mode": "fts"}))
        birth_search = ok(user.get("/me/memory/search", query={"q": "1987", "mode": "fts"}))

    # Then search finds none of them
    assert email_search["items"] == [] and phone_search["items"] == [] and birth_search["items"] == []
    assert ok(user.get("/me/memory/search", query={"q": "sensitive probe example", "mode": "fts"}))["items"] == []

    # And no log line carries any of the three values, however it was captured
    out, err = capsys.readouterr()
    logged = "\n".join([out, err, caplog.text, *all_logs.lines])
    logged += "\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    # (the captures hold the service's lines: its JSON on stdout, its records)
    assert out.count('"problem":"invalid-document"') == 4 and '"problem":"stale-version"' in out
    assert [r.status for r in caplog.records if r.getMessage() == "request failed"] == [422, 422, 422, 412, 409, 422]
    for value in SENSITIVE:
        assert value not in logged, value
    assert "not-an-email" not in logged and "23/04/1987" not in logged

    # And the export has them in the document, and the rating
    export = ok(user.get("/me/export"))
    info = export["versions"][-1]["document"]["basic_info"]
    assert (info["date_of_birth"], info["email"], info["phone"]) == SENSITIVE
    assert [(r["interaction_id"], r["rating"], r["comment"]) for r in export["ratings"]] == [("i-1", 2, "too slow")]

    # And erasing the user removes the items and the rating with the versions
    erased = ok(user.delete("/me"))
    assert erased["removed"] == removed(heads=1, snapshots=3, activity=0, kv=0, items=1, ratings=1)
    after = ok(user.get("/me/export"))
    assert (after["versions"], after["ratings"]) == ([], [])
    assert ok(user.get("/me/memory/search", query={"q": "invitations", "mode": "fts"}))["items"] == []


# -- the prompt ------------------------------------------------------------------------------------------


def lived_in_memory(user: ApiClient) -> None:
    """A companion memory with what an agent needs and what it does not: sensitive fields, empty
    and null fields, a finished goal, to-dos done and cancelled, a cancelled event."""
    ok(merge(user, {"basic_info": {"name": "Ana", "date_of_birth": DATE_OF_BIRTH, "email": EMAIL, "phone": PHONE}}))
    ok(merge(user, {"basic_info": {"timezone": "Europe/Lisbon", "gender": None}, "current_state": {"mood": ""}}))
    ok(merge(user, {"current_state": {"focus_areas": ["training"], "skills": []}}))
    ok(user.post("/me/goals", json_body={"id": "g-run", "title": "Run a half marathon", "priority": "high"}))
    ok(user.post("/me/goals", json_body={"id": "g-old", "title": "Learn to juggle", "status": "completed"}))
    ok(user.post("/me/todos", json_body={"id": "t-physio", "text": "Book a physio", "due_date": "2026-06-01"}))
    ok(user.post("/me/todos", json_body={"id": "t-done", "text": "Buy running shoes", "status": "done"}))
    ok(user.post("/me/todos", json_body={"id": "t-off", "text": "Join the gym", "status": "cancelled"}))
    ok(user.post("/me/events", json_body={"id": "e-race", "summary": "Lisbon half", "start": "2026-10-04"}))
    cancelled = {"id": "e-off", "summary": "Old meetup", "start": "2026-05-01", "status": "cancelled"}
    ok(user.post("/me/events", json_body=cancelled))
    team = {"id": "e-team", "summary": "Team run", "start": "2026-06-02T07:00:00Z"}
    ok(user.post("/me/events", json_body={**team, "attendees": [{"name": "Bo", "email": "bo-probe@example.org"}]}))


def test_the_prompt_carries_what_helps_the_agent_and_never_the_sensitive_fields(user):
    # Given a lived-in companion memory
    lived_in_memory(user)
    # When the prompt is asked for
    text = ok(user.get("/me/memory/prompt", query={"budget_tokens": 2000}))["text"]
    # Then it names the person, the open work and what is coming, line by line
    lines = text.splitlines()
    assert "Name: Ana" in lines and "Timezone: Europe/Lisbon" in lines and "Focus areas: training" in lines
    assert "Goal: Run a half marathon [g-run] - high priority" in lines
    assert "To-do: Book a physio [t-physio] - due 2026-06-01" in lines
    assert "Event: Lisbon half [e-race] - 2026-10-04" in lines
    assert "Event: Team run [e-team] - 2026-06-02T07:00:00Z; with Bo" in lines
    # And nothing of what does not help: no nulls or empty fields, nothing finished or cancelled,
    # no bookkeeping, and none of the sensitive fields (the attendee's email included)
    for absent in ("null", "None", '""', "[]", "{}", "Gender", "Mood", "Skills", "schema_version", "last_updated_by"):
        assert absent not in text, absent
    for finished in ("Learn to juggle", "Buy running shoes", "Join the gym", "Old meetup"):
        assert finished not in text
    for sensitive in (EMAIL, PHONE, DATE_OF_BIRTH, "bo-probe@example.org", "email", "phone", "date_of_birth"):
        assert sensitive not in text


def test_a_deployment_that_opts_in_renders_the_sensitive_fields(make_api):
    # Given a deployment with PROMPT_INCLUDE_SENSITIVE=true and the same memory
    user = new_client(make_api("companion", prompt_include_sensitive="true"))
    lived_in_memory(user)
    # When the prompt is asked for, Then the sensitive fields are there, labelled
    lines = ok(user.get("/me/memory/prompt", query={"budget_tokens": 2000}))["text"].splitlines()
    assert f"Email: {EMAIL}" in lines and f"Phone: {PHONE}" in lines and f"Date of birth: {DATE_OF_BIRTH}" in lines
    assert "Event: Team run [e-team] - 2026-06-02T07:00:00Z; with Bo <bo-probe@example.org>" in lines


# -- other deployments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", ["tutor", "user_state"])
def test_companion_routes_on_another_schema_are_404_not_enabled(make_api, schema):
    user = new_client(make_api(schema))
    for reply in (
        user.get("/me/goals"),
        user.post("/me/goals", json_body={"id": "g1", "title": "Learn"}),
        user.get("/me/todos/t1"),
        patch_element(user, "/me/todos/t1", {"text": "x"}),
        user.post("/me/todos/t1/complete"),
        user.delete("/me/events/e1"),
        user.get("/me/todos/due"),
        user.get("/me/events"),
        user.post("/me/events/import", json_body=[google_event("x1")]),
        user.post("/me/ratings", json_body={"interaction_id": "i", "rating": 3}),
        user.get("/me/digest"),
    ):
        body = assert_problem(reply, 404, "not-enabled")
        assert "companion" in body["detail"]
    assert head_version(user) == 0


# -- embeddings after a write -----------------------------------------------------------------------------


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeEmbeddings, str]]:
    with fake_embeddings_server() as served:
        yield served


@pytest.fixture
def fake(endpoint: tuple[FakeEmbeddings, str]) -> FakeEmbeddings:
    return endpoint[0]


@pytest.fixture
def embedding_user(make_api: ApiFactory, endpoint: tuple[FakeEmbeddings, str]) -> ApiClient:
    _, base_url = endpoint
    api = make_api(
        "companion", embedding_model=EMBEDDING_MODEL, embedding_base_url=base_url, embedding_api_key="test-key"
    )
    return new_client(api)


def test_a_writes_new_texts_are_embedded_right_after_it(embedding_user, fake):
    user = embedding_user
    # Given a user with embeddings configured; When a to-do is created
    ok(user.post("/me/todos", json_body={"id": "t1", "text": "Renew the passport before the trip"}))
    # Then the endpoint got exactly the to-do's text, once
    assert [r["inputs"] for r in fake.requests] == [["todo: Renew the passport before the trip"]]
    assert fake.requests[0]["body"]["model"] == EMBEDDING_MODEL
    assert fake.requests[0]["body"]["dimensions"] == 256

    # When a goal is added and the to-do's notes change: only the new texts
    ok(user.post("/me/goals", json_body={"id": "g1", "title": "Travel to Lisbon"}))
    ok(patch_element(user, "/me/todos/t1", {"notes": "photos at the pharmacy"}))
    assert [r["inputs"] for r in fake.requests] == [
        ["todo: Renew the passport before the trip"],
        ["goal: Travel to Lisbon"],
        ["todo: Renew the passport before the trip · photos at the pharmacy"],
    ]
    # A write that changes no text (a priority) and a read send nothing
    ok(patch_element(user, "/me/todos/t1", {"priority": "high"}))
    ok(user.get("/me/todos/t1"))
    assert len(fake.requests) == 3

    # When searching fused for a misspelling full text cannot match
    body = ok(user.get("/me/memory/search", query={"q": "pasport renewl", "mode": "fused", "k": 3}))
    # Then the query was embedded (one more request) and the to-do is found by its vector
    assert fake.requests[-1]["inputs"] == ["pasport renewl"] and len(fake.requests) == 4
    assert body["mode"] == "fused"
    assert body["items"][0]["path"] == "/todos/t1"
    assert body["items"][0]["matched_by"] == ["vector"]
    # And a word full text matches is found by both
    both = ok(user.get("/me/memory/search", query={"q": "passport", "mode": "fused", "k": 1}))["items"]
    assert [(h["path"], h["matched_by"]) for h in both] == [("/todos/t1", ["fts", "vector"])]
    # Auto mode is fused when embeddings are configured
    assert ok(user.get("/me/memory/search", query={"q": "Lisbon"}))["mode"] == "fused"


def test_an_endpoint_failure_does_not_fail_the_write_and_search_still_answers(embedding_user, fake, all_logs):
    user = embedding_user
    # Given an endpoint that fails the next requests (the client retries once)
    fake.fail_next(2, status=500)
    # When a to-do is created
    reply = user.post("/me/todos", json_body={"id": "t1", "text": "Schedule the boiler service"})
    # Then the write succeeded and was committed
    assert ok(reply)["version"] == 1
    assert ok(user.get("/me/todos/t1"))["element"]["text"] == "Schedule the boiler service"
    assert len(fake.requests) == 2 and not fake.failures
    # And the failure was logged once, without the text
    failures = [json.loads(line) for line in all_logs.lines if '"msg": "embedding failed"' in line]
    assert [(f["levelname"], f["error"], f["user_id"]) for f in failures] == [
        ("WARNING", "EmbeddingsUnavailable", user.user_id)
    ]
    assert not any("boiler" in line for line in all_logs.lines)
    # And full-text search finds it (its vector is still pending)
    body = ok(user.get("/me/memory/search", query={"q": "boiler", "mode": "fts"}))
    assert [(h["path"], h["matched_by"]) for h in body["items"]] == [("/todos/t1", ["fts"])]
    # And fused search (the endpoint answers again) finds it by full text alone
    fused = ok(user.get("/me/memory/search", query={"q": "boiler", "mode": "fused"}))
    assert [(h["path"], h["matched_by"]) for h in fused["items"]] == [("/todos/t1", ["fts"])]
    # When the next write comes, the pending text is embedded with the new one
    ok(user.post("/me/todos", json_body={"id": "t2", "text": "Bleed the radiators"}))
    assert sorted(fake.requests[-1]["inputs"]) == ["todo: Bleed the radiators", "todo: Schedule the boiler service"]
    vector = ok(user.get("/me/memory/search", query={"q": "boiler service", "mode": "fused", "k": 1}))["items"]
    assert [(h["path"], h["matched_by"]) for h in vector] == [("/todos/t1", ["fts", "vector"])]


def test_a_create_without_an_id_retried_under_its_key_replays_with_the_same_id(user):
    key = {"Idempotency-Key": "create-water"}
    # Given a to-do created without an id, under a key (the client timed out before the answer)
    first = ok(user.post("/me/todos", json_body={"text": "Water the plants"}, headers=key))
    # When the client sends the same request again
    again = user.post("/me/todos", json_body={"text": "Water the plants"}, headers=key)
    # Then it is a replay that names the same to-do, and nothing was written twice
    body = ok(again)
    assert (body["status"], body["id"], body["version"]) == ("idempotent", first["id"], first["version"])
    assert head_version(user) == first["version"]
    # And without a key, two creates are two to-dos with their own ids
    a = ok(user.post("/me/todos", json_body={"text": "Call the bank"}))
    b = ok(user.post("/me/todos", json_body={"text": "Call the bank"}))
    assert a["id"] != b["id"]


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "status"),
    [
        ("GET", "/me/todos/due", {"on": "9999-12-31"}, None, 400),
        ("GET", "/me/events", {"from": "9999-12-30T00:00:00Z"}, None, 400),
        ("GET", "/me/memory/search", {"q": "marathon\x00"}, None, 400),
        ("POST", "/me/events/import", None, {"id": "e1", "start": {"date": "2026-01-01"}, "attendees": 5}, 400),
    ],
)
def test_edge_inputs_are_clear_errors_not_500(user, method, path, query, body, status):
    # When a request carries an input at the edge of what the routes take
    reply = user.request(method, path, query=query, json_body=body)
    # Then it is a 4xx problem, not a 500, and nothing was written
    assert reply.status == status, reply.text
    assert head_version(user) == 0

"""What a person wrote through the API and what the day's activity asked for, both in the nightly run:
the API's handler writes the person's versions, the worker's handler runs the night with real SQS
events on the embedded PostgreSQL, with the rule-based summarizer and with the OpenAI summarizer
through the real `openai` client against the local fake endpoint (tests/fake_openai.py).

The person's edit is stamped by the database (the version's created_at, now); each activity occurred
a few minutes before or after it, inside the run's window.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder
from user_memory.config import ApiSettings, WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity
from user_memory.http.app import create_api
from user_memory.runtime import build_api, build_worker
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext, sqs_record

from tests.api_client import ApiClient
from tests.fake_openai import edit, edits_completion, fake_openai_server

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

SUMMARIZERS = ["rules", "openai"]
# A collection of the companion schema, the activity kind that adds an element to it, the person's
# element and the activity's element.
COLLECTIONS = {
    "todos": (
        "todo_added",
        {"id": "passport", "text": "Renew the passport"},
        {"id": "dentist", "text": "Book the dentist"},
    ),
    "goals": (
        "goal_set",
        {"id": "italian", "title": "Hold a conversation in Italian"},
        {"id": "savings", "title": "Save for the summer trip"},
    ),
    "events": (
        "event_added",
        {"id": "wedding", "summary": "Cousin's wedding", "start": "2031-07-05"},
        {"id": "yoga", "summary": "Yoga class", "start": "2031-05-15T09:00:00Z"},
    ),
}


def api_client(database_url: str, pool: ConnectionPool, schema: str, user: uuid.UUID) -> ApiClient:
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": schema}, database_url=database_url)
    return ApiClient(create_api(build_api(settings, pool=pool), settings), user)


def record(pool: ConnectionPool, user: uuid.UUID, kind: str, payload: dict[str, Any], at: datetime) -> None:
    PostgresActivity(pool).record(
        [Activity(user_id=user, occurred_at=at, kind=kind, payload=payload, source="app", external_id=f"{kind}-{at}")]
    )


def edited_at(pool: ConnectionPool, user: uuid.UUID, version: int) -> datetime:
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT created_at FROM user_memory_snapshots WHERE user_id = %s AND version = %s", (user, version)
        ).fetchone()
    return row[0]


def provenance(pool: ConnectionPool, user: uuid.UUID, version: int) -> dict[str, Any]:
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT provenance FROM user_memory_snapshots WHERE user_id = %s AND version = %s", (user, version)
        ).fetchone()
    return row[0]


def unsummarized(pool: ConnectionPool, user: uuid.UUID) -> int:
    with pool.connection() as conn:
        sql = "SELECT count(*) FROM user_activity WHERE user_id = %s AND summarized_version IS NULL"
        return int(conn.execute(sql, (user,)).fetchone()[0])


def refresh_event(user: uuid.UUID, around: datetime) -> dict[str, Any]:
    body = {
        "type": "refresh_user",
        "user_ids": [str(user)],
        "run_key": f"daily:{around.date().isoformat()}",
        "window": {"start": (around - timedelta(days=1)).isoformat(), "end": (around + timedelta(days=1)).isoformat()},
    }
    return {"Records": [sqs_record(message_id="m0", body=json.dumps(body))]}


@contextmanager
def night(
    database_url: str, pool: ConnectionPool, summarizer: str, schema: str, answer: dict[str, Any] | None
) -> Iterator[Any]:
    """The worker's services for the night: the rule-based summarizer, or the OpenAI one (edit mode)
    answering `answer` once."""
    if summarizer == "rules":
        settings = WorkerSettings.from_env({}, database_url=database_url, summarizer="rules", document_schema=schema)
        yield build_worker(settings, pool=pool)
        return
    with fake_openai_server() as (fake, url):
        assert answer is not None
        fake.reply(answer)
        settings = WorkerSettings.from_env(
            {}, database_url=database_url, openai_base_url=url, openai_api_key="k", document_schema=schema
        )
        yield build_worker(settings, pool=pool)
        assert len(fake.requests) == 1


def run_night(services: Any, user: uuid.UUID, around: datetime) -> None:
    result = worker_handler(refresh_event(user, around), FakeLambdaContext(), services=services)
    assert result == {"batchItemFailures": []}


# -- the reproduction, and the same shape in every collection -----------------------------


@pytest.mark.parametrize("collection", list(COLLECTIONS))
@pytest.mark.parametrize("summarizer", SUMMARIZERS)
def test_an_element_a_person_created_and_one_the_days_earlier_activity_added_both_stay(
    database_url, pool, summarizer, collection
):
    # Given a person who creates an element through the companion route (the memory's first version)
    kind, mine, theirs = COLLECTIONS[collection]
    user = uuid.uuid4()
    client = api_client(database_url, pool, "companion", user)
    created = client.post(f"/me/{collection}", json_body=mine)
    assert created.status in (200, 201), created.text
    at = edited_at(pool, user, 1)
    # And the day's activity that adds another element, which occurred a few minutes before that edit
    record(pool, user, kind, theirs, at - timedelta(minutes=5))
    answer = edits_completion(edit("add", f"/{collection}/{theirs['id']}", theirs, reason="the day's activity"))
    # When the worker's nightly run summarizes the day
    with night(database_url, pool, summarizer, "companion", answer) as services:
        run_night(services, user, at)
    # Then both elements are in the memory: the person's as they wrote it, and the activity's
    head = MemoryStore(PostgresRecorder(pool)).head(user)
    assert head.version == 2
    assert set(head.document[collection]) == {mine["id"], theirs["id"]}
    for field, value in mine.items():
        assert head.document[collection][mine["id"]][field] == value
    # And the activity is summarized, and nothing a person wrote had to be put back
    assert unsummarized(pool, user) == 0
    record_ = provenance(pool, user, 2)
    assert record_["kept_human_edits"] == [] and record_["conflicts"] == []


@pytest.mark.parametrize("summarizer", SUMMARIZERS)
def test_a_part_a_person_wrote_and_one_the_days_earlier_activity_named_both_stay(database_url, pool, summarizer):
    # Given a person who writes their first memory through the API (user_state: the parts as one field)
    user = uuid.uuid4()
    client = api_client(database_url, pool, "user_state", user)
    mine = {"parts": {"planner": {"name": "Planner", "status": "active"}}, "summary": "Plans a lot."}
    written = client.patch(
        "/me/memory", body=json.dumps(mine), headers={"Content-Type": "application/merge-patch+json"}
    )
    assert written.status == 200, written.text
    at = edited_at(pool, user, 1)
    # And a part_named activity for another part, a few minutes before that edit
    record(pool, user, "part_named", {"part_id": "critic", "name": "Critic"}, at - timedelta(minutes=5))
    critic = {"name": "Critic", "status": "active", "goals": []}
    answer = edits_completion(edit("add", "/parts/critic", critic, reason="part_named"))
    # When the worker's nightly run summarizes the day
    with night(database_url, pool, summarizer, "user_state", answer) as services:
        run_night(services, user, at)
    # Then both parts are there, the person's as they wrote it
    head = MemoryStore(PostgresRecorder(pool)).head(user).document
    assert sorted(head["parts"]) == ["critic", "planner"]
    assert (head["parts"]["planner"]["name"], head["parts"]["critic"]["name"]) == ("Planner", "Critic")
    assert unsummarized(pool, user) == 0


# -- a real conflict: the same element, decided by time -------------------------------------------


@pytest.mark.parametrize("later", ["person", "activity"])
@pytest.mark.parametrize("summarizer", SUMMARIZERS)
def test_a_conflict_on_the_same_element_is_decided_by_time_and_recorded(database_url, pool, summarizer, later):
    # Given a person's to-do created through the API
    user = uuid.uuid4()
    client = api_client(database_url, pool, "companion", user)
    assert client.post("/me/todos", json_body={"id": "passport", "text": "Renew the passport"}).status in (200, 201)
    at = edited_at(pool, user, 1)
    # And activity marking that same to-do done, before the edit or after it
    occurred = at - timedelta(minutes=5) if later == "person" else at + timedelta(minutes=5)
    record(pool, user, "todo_done", {"id": "passport"}, occurred)
    answer = edits_completion(edit("replace", "/todos/passport/status", "done", reason="todo_done"))
    # When the worker's nightly run summarizes the day
    with night(database_url, pool, summarizer, "companion", answer) as services:
        run_night(services, user, at)
    # Then the later side wins the to-do
    head = MemoryStore(PostgresRecorder(pool)).head(user)
    todo = head.document["todos"]["passport"]
    assert todo["status"] == ("open" if later == "person" else "done")
    # And the version records the conflict: where, whose edit, which side won
    record_ = provenance(pool, user, head.version)
    [conflict] = record_["conflicts"]
    assert (conflict["path"], conflict["version"], conflict["source"]) == ("/todos/passport", 1, "api")
    assert conflict["won"] == later and isinstance(conflict["activity_id"], int) and conflict["why"]
    kept = [k["path"] for k in record_["kept_human_edits"]]
    assert kept == (["/todos/passport"] if later == "person" else [])


@pytest.mark.parametrize("summarizer", SUMMARIZERS)
def test_an_element_a_person_deleted_is_not_brought_back_by_earlier_activity(database_url, pool, summarizer, logs):
    # Given a person who created a to-do, then deleted it, through the API
    user = uuid.uuid4()
    client = api_client(database_url, pool, "companion", user)
    assert client.post("/me/todos", json_body={"id": "passport", "text": "Renew the passport"}).status in (200, 201)
    assert client.post("/me/todos", json_body={"id": "keys", "text": "Copy the keys"}).status in (200, 201)
    assert client.delete("/me/todos/passport").status == 200
    at = edited_at(pool, user, 3)
    # And the day's activity that added that to-do, a few minutes before the deletion
    added = {"id": "passport", "text": "Renew the passport"}
    record(pool, user, "todo_added", added, at - timedelta(minutes=5))
    answer = edits_completion(edit("add", "/todos/passport", added, reason="todo_added"))
    # When the worker's nightly run summarizes the day
    with night(database_url, pool, summarizer, "companion", answer) as services:
        run_night(services, user, at)
    # Then the to-do stays deleted, the person's other to-do stays, and the activity is summarized
    head = MemoryStore(PostgresRecorder(pool)).head(user)
    assert sorted(head.document["todos"]) == ["keys"]
    assert unsummarized(pool, user) == 0
    # And the decision is counted
    [done] = logs.named("batch done")
    assert (done["human_edits_kept"], done["human_edit_conflicts"]) == (1, 1)
    # And recorded with the night's version (the summarizer still stamps last_updated_by)
    assert head.version == 4
    [conflict] = provenance(pool, user, 4)["conflicts"]
    assert (conflict["path"], conflict["version"], conflict["won"]) == ("/todos/passport", 3, "person")


def test_later_activity_about_something_else_does_not_let_the_model_drop_a_persons_element(database_url, pool):
    # Given a person's to-do created through the API, and later activity about their mood only
    user = uuid.uuid4()
    client = api_client(database_url, pool, "companion", user)
    assert client.post("/me/todos", json_body={"id": "passport", "text": "Renew the passport"}).status in (200, 201)
    at = edited_at(pool, user, 1)
    record(pool, user, "mood", {"mood": "tired"}, at + timedelta(minutes=5))
    # And a model that sets the mood and drops the to-do besides
    answer = edits_completion(
        edit("replace", "/current_state/mood", "tired", reason="mood"),
        edit("remove", "/todos/passport", reason="tidying up"),
    )
    # When the worker's nightly run summarizes the day
    with night(database_url, pool, "openai", "companion", answer) as services:
        run_night(services, user, at)
    # Then the mood is the activity's and the to-do is still the person's, kept and recorded as such
    head = MemoryStore(PostgresRecorder(pool)).head(user)
    assert head.document["current_state"]["mood"] == "tired"
    assert head.document["todos"]["passport"]["text"] == "Renew the passport"
    record_ = provenance(pool, user, head.version)
    assert [k["path"] for k in record_["kept_human_edits"]] == ["/todos/passport"] and record_["conflicts"] == []

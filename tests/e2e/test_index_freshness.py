"""When a write is searchable, through the real handlers (migration 022: the index off the append).

The contract (docs/architecture.md): an API write is in the search index and the companion
queries when its answer returns (the catch-up runs in the request's transaction); the worker's
versions are indexed within the same invocation, before the user's next step (the digest); a
catch-up that failed, or a writer that sent no items, is caught up by the user's next write or,
at worst, the retention job's daily sweep of users behind (tests/e2e/test_retention.py).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from user_memory.domain.companion.items import document_items
from user_memory.http.app import MemoryApi

from tests.e2e import helpers
from tests.e2e.helpers import ApiFactory, new_client, ok

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]

DAY = datetime(2031, 3, 2, tzinfo=UTC)


@pytest.fixture
def api(make_api: ApiFactory) -> MemoryApi:
    return make_api("companion")


def index_state(conn: Any, user: uuid.UUID) -> tuple[int, int, dict[str, str]]:
    """(head version, indexed version, the index's path -> text) of `user`."""
    head = conn.execute("SELECT version, indexed_version FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()
    found = conn.execute("SELECT path, text FROM memory_items WHERE user_id = %s", (user,)).fetchall()
    return head[0], head[1], dict(found)


def head_items(conn: Any, user: uuid.UUID) -> dict[str, str]:
    document = conn.execute("SELECT document FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()[0]
    return {path: item.text for path, item in document_items(document).items()}


def leave_index_behind(conn: Any, user: uuid.UUID) -> None:
    """As a writer that sent no items (or a catch-up that failed) leaves it: nothing indexed."""
    conn.execute("DELETE FROM memory_items WHERE user_id = %s", (user,))
    conn.execute("UPDATE user_memory_heads SET indexed_version = 0 WHERE user_id = %s", (user,))


def test_an_api_write_is_searchable_and_due_when_its_answer_returns(api, conn):
    client = new_client(api)
    user = uuid.UUID(client.user_id)
    # When a to-do is created through the API
    ok(client.post("/me/todos", json_body={"id": "t-kiln", "text": "Fire the kiln", "due_date": "2031-03-02"}))
    # Then, as soon as the answer is back, the index is at the head
    version, indexed, found = index_state(conn, user)
    assert (version, indexed) == (1, 1) and found == head_items(conn, user)
    # And search and the companion query find it
    hits = ok(client.get("/me/memory/search", query={"q": "kiln", "mode": "fts"}))["items"]
    assert [h["path"] for h in hits] == ["/todos/t-kiln"]
    due = ok(client.get("/me/todos/due", query={"on": "2031-03-02"}))["due"]
    assert [i["path"] for i in due] == ["/todos/t-kiln"]


def test_an_api_write_brings_an_index_left_behind_up_to_the_head(api, conn):
    client = new_client(api)
    user = uuid.UUID(client.user_id)
    ok(client.post("/me/todos", json_body={"id": "t-glaze", "text": "Mix the glaze", "due_date": "2031-03-01"}))
    # Given an index left behind (a writer without items, a catch-up that failed)
    leave_index_behind(conn, user)
    # When the user writes something else through the API
    ok(client.post("/me/goals", json_body={"id": "g-wheel", "title": "Throw on the wheel"}))
    # Then when the answer returns, the whole head is indexed again, the earlier to-do included
    version, indexed, found = index_state(conn, user)
    assert (version, indexed) == (2, 2) and found == head_items(conn, user)
    assert set(found) == {"/todos/t-glaze", "/goals/g-wheel"}
    overdue = ok(client.get("/me/todos/due", query={"on": "2031-03-02"}))["overdue"]
    assert [i["path"] for i in overdue] == ["/todos/t-glaze"]


def test_the_workers_version_is_indexed_within_the_invocation_even_over_an_index_left_behind(
    database_url, pool, sqs, conn
):
    stack = helpers.Stack(database_url, pool, sqs)
    # Given a user with a memory whose index was left behind, and a day of activity
    [user] = helpers.seed_users(pool, 1, DAY, "freshness")
    stack.store.append(user, {"summary": "Keeps bees"}, expected_version=0, source="api")
    leave_index_behind(conn, user)
    # When the worker handler summarizes the user's day
    body = json.loads(helpers.refresh_body([user], DAY, "daily:2031-03-02"))
    assert stack.deliver(body) == {"batchItemFailures": []}
    # Then, when the invocation returns, the index is the new head's
    version, indexed, found = index_state(conn, user)
    assert version == 2 and indexed == 2
    assert found == head_items(conn, user)
    assert "/summary" in found and any(path.startswith("/parts/") for path in found)

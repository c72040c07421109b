"""Runs as resources and their undo, through the real handlers: the API's operator routes (API
Gateway events), the worker handler draining moto's queue, the embedded PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from user_memory.adapters.runs import PostgresRuns
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.runtime import build_api

from tests.api_client import ApiClient
from tests.browser.seed import nightly_provenance

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

OPERATOR = "user-memory/operator"


def good(name: str) -> dict[str, Any]:
    return {
        "summary": f"{name} is learning to rest",
        "parts": {
            "p1": {"name": "Planner", "status": "active", "goals": [{"goal": "sleep by 11"}]},
            "p2": {"name": "Critic", "status": "quiet"},
        },
        "safety_notes": "none",
    }


def damaged(doc: dict[str, Any]) -> dict[str, Any]:
    """What a bad night did: the summary rewritten, a part's goals lost, the safety notes cleared."""
    out = {**doc, "summary": "(nothing known)", "safety_notes": ""}
    out["parts"] = {**doc["parts"], "p1": {**doc["parts"]["p1"], "goals": []}}
    return out


@pytest.fixture
def api_with_queue(pool: ConnectionPool, stack):
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "user_state", "QUEUE_URL": stack.queue_url})
    return create_api(build_api(settings, pool=pool, sqs_client=stack.sqs), settings)


@pytest.fixture
def operator(api_with_queue) -> ApiClient:
    return ApiClient(api_with_queue, uuid.uuid4(), scopes=f"openid {OPERATOR}")


def bad_night(store: MemoryStore, run_key: str, users: list[str]) -> None:
    """Each user's good version (a person's), then the run's damaging version."""
    for user in users:
        store.append(user, good(user[:4]), expected_version=0, source="api")
        store.append(
            user,
            damaged(good(user[:4])),
            expected_version=1,
            source="daily-summary",
            idempotency_key=run_key,
            provenance=nightly_provenance([("replace", "/summary", "r")], [], 1000),
        )


def versions(pool: ConnectionPool, user: str) -> list[tuple[int, str, str | None, dict[str, Any] | None]]:
    with pool.connection() as conn:
        return conn.execute(
            "SELECT version, source_description, idempotency_key, provenance FROM user_memory_snapshots"
            " WHERE user_id = %s ORDER BY version",
            (user,),
        ).fetchall()


def test_an_operator_undoes_a_bad_night_for_every_user_it_touched(operator, stack, pool):
    store = stack.store
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    alone, edited_elsewhere, edited_same, other = (str(uuid.uuid4()) for _ in range(4))
    # Given a run that damaged three users' memories
    bad_night(store, run_key, [alone, edited_elsewhere, edited_same])
    # And after it, one person renamed another part, one rewrote the summary the run had rewritten
    doc = store.head(edited_elsewhere).document
    store.append(
        edited_elsewhere,
        {**doc, "parts": {**doc["parts"], "p2": {**doc["parts"]["p2"], "name": "Judge"}}},
        expected_version=2,
        source="api",
    )
    doc = store.head(edited_same).document
    store.append(edited_same, {**doc, "summary": "mine now"}, expected_version=2, source="api")
    # And a user of another run
    store.append(other, good("o"), expected_version=0, source="daily-summary", idempotency_key="daily:other")
    # When an operator undoes the run, and the worker drains its queue
    started = operator.post(f"/admin/runs/{run_key}/revert")
    assert started.status == 200, started.text
    assert (started.json["users"], started.json["pending"], started.json["done"]) == (3, 3, False)
    report = stack.poller().drain()
    # Then every message went through, none to the dead-letter queue
    assert report.to_dlq == 0 and report.failed_attempts == 0
    status = operator.get(f"/admin/run-reverts/{started.json['revert_id']}")
    assert status.status == 200, status.text
    body = status.json
    # And two users were reverted, one is a conflict naming the summary, none failed
    assert (body["done"], body["reverted"], body["conflict"], body["failed"], body["pending"]) == (True, 2, 1, 0, 0)
    assert body["conflicts"] == [{"user_id": edited_same, "paths": ["/summary"]}]
    # And the user with nothing after the run has its document from before it back
    assert store.head(alone).document == store.at(alone, 1).document
    # And the person's later edit elsewhere is kept, the run's damage undone on top of it
    kept = store.head(edited_elsewhere).document
    assert kept["parts"]["p2"]["name"] == "Judge"
    assert (kept["summary"], kept["safety_notes"], kept["parts"]["p1"]["goals"]) == (
        good(edited_elsewhere[:4])["summary"],
        "none",
        [{"goal": "sleep by 11"}],
    )
    # And the conflicting user and the other run's user are untouched
    assert store.head(edited_same).version == 3 and store.head(other).version == 1
    # And each undo is a new version naming the run, in its source, key and provenance
    version, source, key, provenance = versions(pool, alone)[-1]
    assert (version, source, key) == (3, f"run-revert:{run_key}", f"run-revert:{run_key}")
    assert provenance["run_key"] == run_key and provenance["reverted_version"] == 2
    assert provenance["undo"] == "revert" and versions(pool, edited_elsewhere)[-1][3]["undo"] == "inverse"
    # When the operator starts it again (a resume): nothing new is written, the report is the same
    again = operator.post(f"/admin/runs/{run_key}/revert")
    assert again.json["revert_id"] == started.json["revert_id"]
    stack.poller().drain()
    assert [len(versions(pool, u)) for u in (alone, edited_elsewhere, edited_same)] == [3, 4, 3]
    assert operator.get(f"/admin/run-reverts/{started.json['revert_id']}").json["reverted"] == 2


def test_the_undo_of_one_user_touches_no_other(operator, stack):
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    users = [str(uuid.uuid4()) for _ in range(2)]
    bad_night(stack.store, run_key, users)
    # When an operator undoes the run for the first user only
    started = operator.post(f"/admin/runs/{run_key}/revert", query={"user_id": users[0]})
    assert started.status == 200, started.text
    stack.poller().drain()
    # Then that user is reverted and the other still has the run's version
    status = operator.get(f"/admin/run-reverts/{started.json['revert_id']}").json
    assert (status["user_id"], status["users"], status["reverted"]) == (users[0], 1, 1)
    assert stack.store.head(users[0]).version == 3 and stack.store.head(users[1]).version == 2


def test_a_worker_that_crashed_after_writing_an_undo_records_it_once_on_redelivery(operator, stack, pool):
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    user = str(uuid.uuid4())
    bad_night(stack.store, run_key, [user])
    started = operator.post(f"/admin/runs/{run_key}/revert").json
    revert_id = uuid.UUID(started["revert_id"])
    [fan_out] = stack.queued()

    class CrashAfterWrite(PostgresRuns):
        """The bookkeeping of a worker that dies once right after the undo's version is written."""

        crashed = False

        def record(self, *args: Any, **kwargs: Any) -> None:
            if not self.crashed:
                self.crashed = True
                raise RuntimeError("the worker died")
            super().record(*args, **kwargs)

    services = stack.build_worker()
    services.runs = CrashAfterWrite(pool)
    # Given the fan-out done, and the users' message failed once after the version was written
    stack.deliver(fan_out, services=services)
    users_message = {"type": "revert_run_users", "revert_id": str(revert_id), "user_ids": [user]}
    failed = stack.deliver(users_message, services=services)
    assert len(failed["batchItemFailures"]) == 1
    assert PostgresRuns(pool).status(revert_id)["pending"] == 1
    # When the message comes again
    assert stack.deliver(users_message, services=services)["batchItemFailures"] == []
    # Then the user is recorded reverted, by the one version the first attempt wrote
    status = PostgresRuns(pool).status(revert_id)
    assert (status["reverted"], status["pending"]) == (1, 0)
    assert [v[0] for v in versions(pool, user)] == [1, 2, 3]


def test_runs_are_listed_newest_first_a_page_at_a_time(operator, stack):
    keys = [f"ondemand:{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for key in keys:  # written in this order: the last is the newest
        bad_night(stack.store, key, [str(uuid.uuid4())])
    # When an operator lists the runs two at a time
    first = operator.get("/admin/runs", query={"limit": 2})
    assert first.status == 200, first.text
    second = operator.get("/admin/runs", query={"limit": 2, "after": first.json["next_after"]})
    listed = [r["run_key"] for r in first.json["items"] + second.json["items"]]
    # Then the newest come first, each with its totals, and no run is listed twice
    assert listed[:3] == keys[::-1]
    assert len(set(listed)) == len(listed)
    assert first.json["items"][0]["users"] == 1 and first.json["items"][0]["tokens"] == 1000


def test_run_routes_refuse_what_they_cannot_do(api_with_queue, operator, stack):
    # An end user may not list, undo or read an undo
    alice = ApiClient(api_with_queue, uuid.uuid4())
    assert alice.get("/admin/runs").status == 403
    assert alice.post("/admin/runs/daily:x/revert").status == 403
    # A run no version carries is 404 and leaves no operation behind; a user id not a UUID is 422
    reply = operator.post("/admin/runs/daily:never/revert")
    assert reply.status == 404 and reply.json["type"].endswith("/not-found"), reply.text
    assert operator.post("/admin/runs/daily:x/revert", query={"user_id": "nope"}).status == 422
    assert operator.get(f"/admin/run-reverts/{uuid.uuid4()}").status == 404
    assert operator.get("/admin/runs", query={"after": "bogus"}).status == 400
    assert stack.queued() == []


def test_erasing_a_user_removes_its_rows_of_an_undo(api_with_queue, operator, stack, pool):
    # Given a user listed in an undo as a conflict (its paths recorded)
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    user = str(uuid.uuid4())
    bad_night(stack.store, run_key, [user])
    doc = stack.store.head(user).document
    stack.store.append(user, {**doc, "summary": "mine"}, expected_version=2, source="api")
    started = operator.post(f"/admin/runs/{run_key}/revert").json
    stack.poller().drain()
    assert operator.get(f"/admin/run-reverts/{started['revert_id']}").json["conflict"] == 1
    # When the user erases everything of its own
    assert ApiClient(api_with_queue, user).delete("/me").status == 200
    # Then the undo keeps no row of that user
    with pool.connection() as conn:
        left = conn.execute("SELECT count(*) FROM run_revert_users WHERE user_id = %s", (user,)).fetchone()[0]
    assert left == 0
    assert operator.get(f"/admin/run-reverts/{started['revert_id']}").json["users"] == 0

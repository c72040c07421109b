"""One worker invocation runs its users side by side (LLM_CONCURRENCY lanes), through the real
handler, the real PostgreSQL and the real `openai` client against the local fake endpoint, which
counts the requests it is answering at once and when each arrived.

What stays exact: every user's version and log line, the partial batch response (a record fails
when one of its users failed or could not start before the deadline), and a 429's Retry-After,
which holds every call of the invocation, not only the one it answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import open_pool
from user_memory.config import WorkerSettings
from user_memory.observability import metrics
from user_memory.runtime import WorkerServices, build_worker
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext

from tests.e2e.helpers import emitted_metrics, refresh_body, seed_users, sqs_event
from tests.fake_openai import FakeOpenAI, edit, edits_completion, fake_openai_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]

LATENCY = 0.3  # seconds the endpoint takes to answer each call
# The model's answer for a seeded day (a part named, its goal set): nothing left to ask again,
# so each user's run is one call.
ANSWER = edits_completion(
    edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
    edit("add", "/parts/planner/goals/-", {"goal": "plan"}, "goal_set"),
)


@pytest.fixture
def wide_pool(database_url: str) -> Iterator[ConnectionPool]:
    """A pool of up to ten connections, so that the bound under test is LLM_CONCURRENCY's."""
    p = open_pool(database_url, size=10)
    yield p
    p.close()


def services_for(database_url: str, pool: ConnectionPool, url: str, concurrency: int, **env: Any) -> WorkerServices:
    settings = WorkerSettings.from_env(
        {}, database_url=database_url, openai_base_url=url, openai_api_key="k", llm_concurrency=concurrency, **env
    )
    return build_worker(settings, pool=pool)


def invoke(services: WorkerServices, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    result = worker_handler(event, context or FakeLambdaContext(), services=services)
    metrics.clear_metrics()  # metrics are disabled here, which never flushes them
    return result  # type: ignore[no-any-return]


def written(conn: psycopg.Connection, run_key: str) -> set[str]:
    rows = conn.execute("SELECT user_id FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,))
    return {str(r[0]) for r in rows}


def one_user_per_record(users: list[uuid.UUID], day: datetime, run_key: str) -> dict[str, Any]:
    return sqs_event(*(refresh_body([u], day, run_key) for u in users))


class OutOfTimeAfter:
    """A Lambda context with a minute left until the endpoint has received `n` requests, and none
    after: the deadline falls while the first calls are in flight, without timing the test."""

    def __init__(self, fake: FakeOpenAI, n: int) -> None:
        self.fake, self.n = fake, n
        self.context = FakeLambdaContext()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.context, name)

    def get_remaining_time_in_millis(self) -> int:
        return 60_000 if len(self.fake.requests) < self.n else 0


@pytest.mark.parametrize(("shape", "bound"), [("records", 4), ("one message", 10)])
def test_a_batch_of_ten_users_runs_their_llm_calls_side_by_side_within_the_bound(
    database_url, wide_pool, conn, logs, capsys, monkeypatch, shape, bound
):
    # Given ten users with a day of activity and an endpoint that takes a while to answer each call
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2032, 3, 1, tzinfo=UTC)
    run_key = f"daily:concurrency-{uuid.uuid4()}"
    users = seed_users(wide_pool, 10, day, f"lanes-{uuid.uuid4()}")
    event = (
        one_user_per_record(users, day, run_key) if shape == "records" else sqs_event(refresh_body(users, day, run_key))
    )
    with fake_openai_server() as (fake, url):
        fake.default, fake.default_delay = ANSWER, LATENCY
        services = services_for(database_url, wide_pool, url, bound)
        metrics.clear_metrics()  # earlier tests ran with metrics disabled, which never flushes them
        capsys.readouterr()
        # When one invocation takes them (ten records of one user, or one message of ten)
        result = invoke(services, event)
    # Then every user's version is written, each with its own log line, and no record fails
    assert result == {"batchItemFailures": []}
    assert written(conn, run_key) == {str(u) for u in users}
    lines = logs.named("user refreshed")
    assert sorted(line["user_id"] for line in lines) == sorted(str(u) for u in users)
    assert {line["outcome"] for line in lines} == {"written"} and len(fake.requests) == 10
    # And the calls overlapped, never more of them at once than LLM_CONCURRENCY
    assert 2 <= fake.max_in_flight <= bound
    # And the invocation's counts hold every user, in the batch line and the metrics
    [done] = logs.named("batch done")
    assert (done["users"], done["edits_applied"], done["tokens"]) == ({"written": 10}, 20, 15000)
    emf = emitted_metrics(capsys)
    assert (emf["Users_written"], emf["EditsApplied"], emf["LLMTokens"]) == ([10.0], [20.0], [15000.0])


def test_one_users_failure_while_the_others_run_fails_only_its_record(database_url, wide_pool, conn, logs):
    # Given four users, one record each, and an endpoint whose first call answers HTTP 500
    # (no retries), the others as usual
    day = datetime(2032, 3, 2, tzinfo=UTC)
    run_key = f"daily:concurrency-{uuid.uuid4()}"
    users = seed_users(wide_pool, 4, day, f"lanes-fail-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.default, fake.default_delay = ANSWER, LATENCY
        fake.reply({"error": {"message": "boom"}}, status=500, in_flight=2)
        services = services_for(database_url, wide_pool, url, 4, openai_max_retries=0)
        # When one invocation takes them
        result = invoke(services, one_user_per_record(users, day, run_key))
    # Then exactly the failed user's record is reported, logged with its user and message id
    [failed] = logs.named("user refresh failed")
    assert failed["error"] == "SummarizerUnavailable"
    message_of = {str(u): f"m{i}" for i, u in enumerate(users)}
    assert failed["message_id"] == message_of[failed["user_id"]]
    assert result == {"batchItemFailures": [{"itemIdentifier": failed["message_id"]}]}
    # And the other three are written
    assert written(conn, run_key) == {str(u) for u in users} - {failed["user_id"]}
    assert [r["message_id"] for r in logs.named("record failed")] == [failed["message_id"]]


@pytest.mark.parametrize("shape", ["records", "one message"])
def test_users_not_started_before_the_deadline_are_deferred_while_the_started_ones_finish(
    database_url, wide_pool, conn, logs, shape
):
    # Given four users, two lanes, and an invocation whose time runs out once two calls are in flight
    day = datetime(2032, 3, 3, tzinfo=UTC)
    run_key = f"daily:concurrency-{uuid.uuid4()}"
    users = seed_users(wide_pool, 4, day, f"lanes-deadline-{uuid.uuid4()}")
    event = (
        one_user_per_record(users, day, run_key) if shape == "records" else sqs_event(refresh_body(users, day, run_key))
    )
    with fake_openai_server() as (fake, url):
        fake.default, fake.default_delay = ANSWER, LATENCY
        services = services_for(database_url, wide_pool, url, 2, deadline_margin_ms=0)
        # When one invocation takes them
        result = invoke(services, event, OutOfTimeAfter(fake, 2))
    # Then the two started users are written, the other two never called the model
    assert len(fake.requests) == 2
    done = written(conn, run_key)
    assert len(done) == 2
    if shape == "records":
        # And exactly the two records not started are deferred (DeadlineReached, not failures)
        assert result == {"batchItemFailures": [{"itemIdentifier": "m2"}, {"itemIdentifier": "m3"}]}
        assert done == {str(users[0]), str(users[1])}
        assert [r["error"] for r in logs.named("record failed")] == ["DeadlineReached", "DeadlineReached"]
    else:
        # And the message is deferred whole; its retry skips the two written (run key)
        assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
        assert [r["error"] for r in logs.named("record failed")] == ["DeadlineReached"]
    assert len(logs.named("user refreshed")) == 2 and not logs.named("user refresh failed")


def test_a_429_with_retry_after_holds_every_call_of_the_invocation_until_then(database_url, wide_pool, conn, logs):
    # Given four users, one record each, two lanes, and an endpoint whose first call is answered
    # 429 with Retry-After: 1 once the second call is in flight; every other call as usual
    day = datetime(2032, 3, 4, tzinfo=UTC)
    run_key = f"daily:concurrency-{uuid.uuid4()}"
    users = seed_users(wide_pool, 4, day, f"lanes-429-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.default = ANSWER
        fake.reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "1"}, in_flight=2)
        fake.reply(ANSWER, delay=0.1)
        services = services_for(database_url, wide_pool, url, 2, openai_max_retries=1)
        # When one invocation takes them
        result = invoke(services, one_user_per_record(users, day, run_key))
    # Then every user is written, the rate-limited one on its retry
    assert result == {"batchItemFailures": []}
    assert written(conn, run_key) == {str(u) for u in users}
    # And no request reached the endpoint between the 429 and the time its Retry-After named:
    # not the retry, and not the other users' calls that started meanwhile
    [limited] = fake.answered_429
    later = [r["at"] for r in fake.requests[2:]]
    assert len(later) == 3 and min(later) >= limited + 1.0

"""The operators' runs through both clients: listed, read, undone through moto's worker queue and a
rule-based worker draining it, the undo's report read back."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings, WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.runtime import build_api, build_worker
from user_memory_client import AsyncClient, Client, errors
from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues
from user_memory_local.serve import ApiServer

from tests.client.conftest import SECRET, token_for

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

OPERATOR = "user-memory/operator"


@pytest.fixture(scope="module")
def queue() -> Iterator[tuple[Any, str, str]]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs, name=f"runs-{uuid.uuid4().hex[:8]}")
        yield sqs, queue_url, dlq_url


@pytest.fixture(scope="module")
def server(pool: ConnectionPool, queue) -> Iterator[ApiServer]:
    """The API with a worker queue (the undo goes through it)."""
    sqs, queue_url, _ = queue
    settings = ApiSettings.from_env({"QUEUE_URL": queue_url})
    api = create_api(build_api(settings, pool=pool, sqs_client=sqs), settings)
    with ApiServer(api, secret=SECRET, port=0, log=io.StringIO()) as running:
        yield running


def drain(pool: ConnectionPool, queue) -> None:
    """The worker handler over the queue until it is empty."""
    from user_memory_functions.worker.app import handler

    sqs, queue_url, dlq_url = queue
    settings = WorkerSettings.from_env({}, database_url="unused", summarizer="rules", queue_url=queue_url)
    services = build_worker(settings, pool=pool, sqs_client=sqs)

    def worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return handler(event, context or FakeLambdaContext(), services=services)

    assert LambdaSqsPoller(sqs, queue_url, dlq_url, worker).drain().to_dlq == 0


def a_bad_night(store: MemoryStore) -> tuple[str, str]:
    user, run_key = str(uuid.uuid4()), f"daily:{uuid.uuid4().hex[:8]}"
    store.append(user, {"summary": "kept"}, expected_version=0, source="api")
    store.append(user, {"summary": "lost"}, expected_version=1, source="s", idempotency_key=run_key)
    return user, run_key


@pytest.fixture
def operator_token() -> str:
    return token_for(str(uuid.uuid4()), scopes=[OPERATOR])


def test_an_operator_lists_reads_and_undoes_a_run_with_the_client(server, pool, queue, store, operator_token):
    user, run_key = a_bad_night(store)
    with Client(server.url, operator_token) as client:
        # When the operator lists the runs and reads this one
        assert run_key in [r.run_key for r in client.runs.list(limit=100).items]
        assert (client.runs.get(run_key).users, client.runs.get(run_key).versions) == (1, 1)
        # And undoes it, and the worker drains the queue
        started = client.runs.revert(run_key)
        assert (started.users, started.pending) == (1, 1)
        drain(pool, queue)
        # Then the report says the user was reverted, and the document is back
        status = client.runs.revert_status(started.revert_id)
        assert (status.done, status.reverted, status.conflicts) == (True, 1, [])
    assert store.head(user).document == {"summary": "kept"}
    # And an end user's client is refused
    with Client(server.url, token_for(user)) as client, pytest.raises(errors.Forbidden):
        client.runs.list()


def test_the_async_client_undoes_a_run_for_one_user(server, pool, queue, store, operator_token):
    user, run_key = a_bad_night(store)

    async def session() -> Any:
        async with AsyncClient(server.url, operator_token) as client:
            assert (await client.runs.get(run_key)).users == 1
            started = await client.runs.revert(run_key, user_id=user)
            await asyncio.to_thread(drain, pool, queue)
            return await client.runs.revert_status(started.revert_id)

    status = asyncio.run(session())
    assert (status.user_id, status.reverted, status.done) == (user, 1, True)
    assert store.head(user).document == {"summary": "kept"}

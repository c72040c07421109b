"""The clients' refresh (`POST /me/memory/refresh`) against `user-memory serve` with a worker queue on
moto: queued once, then the same run key within the interval, sync and async; typed errors."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_client import AsyncClient, Client, Retries, errors
from user_memory_local.serve import ApiServer

from tests.client.conftest import SECRET, token_for

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]


@pytest.fixture(scope="module")
def queued_server(pool: ConnectionPool) -> Iterator[tuple[ApiServer, object, str]]:
    """The API with a worker queue (moto's) and its SQS client."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url = sqs.create_queue(QueueName=f"client-refresh-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        settings = ApiSettings.from_env({"QUEUE_URL": queue_url})
        api = create_api(build_api(settings, pool=pool, sqs_client=sqs), settings)
        with ApiServer(api, secret=SECRET, port=0, log=io.StringIO()) as running:
            yield running, sqs, queue_url


def test_a_refresh_is_queued_once_and_then_answered_with_its_run_key_by_both_clients(queued_server):
    # Given a user of a deployment with a worker queue
    server, sqs, queue_url = queued_server
    user = str(uuid.uuid4())
    client = Client(server.url, token_for(user))
    # When the sync client asks for a refresh, then again
    first = client.memory.refresh()
    again = client.memory.refresh()
    # Then the first is queued under an ondemand run key, and the second answers with it
    assert (first.status, first.user_id) == ("queued", user) and first.run_key.startswith("ondemand:")
    assert (again.status, again.run_key, again.next_allowed_at) == (
        "already_queued",
        first.run_key,
        first.next_allowed_at,
    )

    # And the async client gets the same answer
    async def session() -> None:
        async with AsyncClient(server.url, token_for(user)) as aclient:
            answer = await aclient.memory.refresh()
            assert (answer.status, answer.run_key) == ("already_queued", first.run_key)

    asyncio.run(session())
    # And one message is on the queue for the user
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]]
    assert sum(first.run_key in b and user in b for b in bodies) == 1


def test_without_a_worker_queue_the_refresh_raises_not_enabled(base_url, token):
    # Given the default server (no QUEUE_URL)
    client = Client(base_url, token, retries=Retries(attempts=1))
    # When the client asks for a refresh, Then it is a typed error
    with pytest.raises(errors.NotEnabled) as err:
        client.memory.refresh()
    assert err.value.status == 404

"""Property-based tests generated from the committed OpenAPI document (schemathesis, Python API).

Requests go over real HTTP to `ApiServer` (the Lambda handler behind it, real PostgreSQL) with a
development token; for every operation the answers must not be 5xx and must conform to the
document: documented status codes, content types, headers and response schemas. The number of
examples is bounded and derandomized so the file runs the same way every time, in seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer

from tests.e2e.helpers import SERVER_SECRET
from tests.e2e.openapi_cases import CHECKS, committed_schema, examples, service_log_at

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

MAX_EXAMPLES = 30

schema = committed_schema()

EXAMPLES = examples(MAX_EXAMPLES)


@pytest.fixture(scope="module", autouse=True)
def quiet_service_log() -> Iterator[None]:
    """Thousands of refused requests: the service's INFO lines would drown the report."""
    with service_log_at(logging.WARNING):
        yield


@pytest.fixture(scope="module")
def server(own_pool: ConnectionPool) -> Iterator[ApiServer]:
    pool = own_pool
    # The operators' trigger route sends to the worker queue: moto's, here.
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url = sqs.create_queue(QueueName="schemathesis-worker")["QueueUrl"]
        settings_ = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": queue_url})
        api = create_api(build_api(settings_, pool=pool, sqs_client=sqs), settings_)
        with ApiServer(api, secret=SERVER_SECRET) as running:
            yield running


@schema.parametrize()
@EXAMPLES
def test_every_operation_as_an_end_user(case, server, user_token):
    case.call_and_validate(base_url=server.url, headers={"Authorization": f"Bearer {user_token}"}, checks=CHECKS)


@schema.parametrize()
@EXAMPLES
def test_every_operation_as_an_operator(case, server, operator_token):
    case.call_and_validate(base_url=server.url, headers={"Authorization": f"Bearer {operator_token}"}, checks=CHECKS)


@schema.parametrize()
@examples(5)
def test_every_operation_without_a_token_is_a_documented_401(case, server):
    response = case.call_and_validate(base_url=server.url, checks=CHECKS)
    assert response.status_code == 401

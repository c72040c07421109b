"""What the end-to-end tests share as fixtures: the Lambda environment and the command line's, the
service's log records, moto's SQS, the jobs' stack, the API over the session's database and its
first user, a database of a module's own. Helpers that are not fixtures are in helpers.py."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import open_pool
from user_memory.config import ApiSettings
from user_memory.http.app import MemoryApi, create_api
from user_memory.runtime import build_api
from user_memory_local.tokens import issue_token

from tests.api_client import ApiClient
from tests.e2e.helpers import OPERATOR, SERVER_SECRET, ApiFactory, Logs, Stack, new_client, new_database


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment the handlers run in, with moto's credentials (modules opt in: usefixtures)."""
    for k, v in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def logs() -> Iterator[Logs]:
    """The records the service logs during the test."""
    collector = Logs()
    service = logging.getLogger("user-memory")
    service.addHandler(collector)
    yield collector
    service.removeHandler(collector)


@pytest.fixture
def service_log(logs: Logs) -> Iterator[Logs]:
    """The records the service logs during the test at INFO and above, as a deployment logs."""
    log = logging.getLogger("user-memory")
    level = log.level
    log.setLevel(logging.INFO)
    try:
        yield logs
    finally:
        log.setLevel(level)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the command line runs with: the variables the demo would set, set here so that they are
    restored after each test, and none of the settings a test might have left (modules opt in)."""
    for name, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    for name in (
        "DATABASE_URL", "USER_MEMORY_DEBUG", "SUMMARIZER", "USERS_PER_MESSAGE", "INACTIVITY_THRESHOLD_MINUTES"
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sqs(aws_env: None) -> Iterator[Any]:
    """An SQS client on moto, for the duration of the test."""
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def stack(database_url: str, pool: ConnectionPool, sqs: Any) -> Stack:
    """moto's queues with the fan-out and a rule-based worker on the session's database."""
    return Stack(database_url, pool, sqs)


@pytest.fixture
def make_api(pool: ConnectionPool) -> ApiFactory:
    """An API over the session's database, with settings from a clean environment plus overrides."""

    def make(schema: str = "tutor", **env: str) -> MemoryApi:
        settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": schema, **{k.upper(): v for k, v in env.items()}})
        return create_api(build_api(settings, pool=pool), settings)

    return make


@pytest.fixture
def api(make_api: ApiFactory) -> MemoryApi:
    """The API with the tutor schema (modules with another deployment override it)."""
    return make_api("tutor")


@pytest.fixture
def alice(api: MemoryApi) -> ApiClient:
    """A new user of `api`."""
    return new_client(api)


@pytest.fixture(scope="module")
def user_token() -> str:
    """A development token of a new user (one a module) for an ApiServer on SERVER_SECRET."""
    return issue_token(uuid.uuid4(), secret=SERVER_SECRET)


@pytest.fixture(scope="module")
def operator_token() -> str:
    """A development token of a new operator (one a module) for an ApiServer on SERVER_SECRET."""
    return issue_token(uuid.uuid4(), secret=SERVER_SECRET, scopes=[OPERATOR])


@pytest.fixture(scope="module")
def own_pool(request: pytest.FixtureRequest, database_url: str) -> Iterator[ConnectionPool]:
    """A migrated database of the test module's own, dropped afterwards: for generated requests that
    store arbitrary documents, activity and conversations other tests' fan-outs and queries would
    otherwise find. Where the tests may not create databases, the session's database."""
    name = f"user_memory_{request.module.__name__.rsplit('.', 1)[-1].removeprefix('test_')}_{os.getpid()}"
    with new_database(database_url, name, migrated=True) as url:
        pool = open_pool(url, size=4)
        try:
            yield pool
        finally:
            pool.close()

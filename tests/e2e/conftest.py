"""What the end-to-end tests share: the Lambda environment, the service's log records, moto's SQS,
a database of a module's own."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql
from psycopg_pool import ConnectionPool
from user_memory.adapters.migrations import migrate
from user_memory.adapters.postgres import open_pool


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


class Logs(logging.Handler):
    """Collects the service's log records (Powertools keeps keyword fields as record attributes)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, message: str) -> list[dict[str, Any]]:
        return [r.__dict__ for r in self.records if r.getMessage() == message]


@pytest.fixture
def logs() -> Iterator[Logs]:
    """The records the service logs during the test."""
    collector = Logs()
    service = logging.getLogger("user-memory")
    service.addHandler(collector)
    yield collector
    service.removeHandler(collector)


@pytest.fixture
def sqs(aws_env: None) -> Iterator[Any]:
    """An SQS client on moto, for the duration of the test."""
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


@pytest.fixture(scope="module")
def own_pool(request: pytest.FixtureRequest, database_url: str) -> Iterator[ConnectionPool]:
    """A migrated database of the test module's own, dropped afterwards: for generated requests that
    store arbitrary documents, activity and conversations other tests' fan-outs and queries would
    otherwise find. Where the tests may not create databases, the session's database."""
    name = f"user_memory_{request.module.__name__.rsplit('.', 1)[-1].removeprefix('test_')}_{os.getpid()}"
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege:
        pool = open_pool(database_url, size=4)
        yield pool
        pool.close()
        return
    params = psycopg.conninfo.conninfo_to_dict(database_url)
    params["dbname"] = name
    url = psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]
    migrate(url)
    pool = open_pool(url, size=4)
    try:
        yield pool
    finally:
        pool.close()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

"""`user-memory trigger-conversations`: locally (moto + the worker), against a queue URL, and its errors."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import psycopg
import pytest
from moto import mock_aws
from user_memory.adapters.conversations import PostgresConversations
from user_memory.adapters.postgres import open_pool
from user_memory.domain.conversations.model import NewMessage

from tests.e2e.helpers import assert_one_error_line, new_database, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("cli_env")]


@pytest.fixture
def own_url(database_url: str) -> Iterator[str]:
    """A database of its own: the trigger takes every quiet conversation it finds."""
    with new_database(database_url, f"user_memory_cli_conversations_{os.getpid()}", migrated=True) as url:
        yield url


def record(url: str, *, quiet_for: timedelta, user: uuid.UUID | None = None) -> str:
    cid = f"cli-{uuid.uuid4()}"
    pool = open_pool(url)
    try:
        PostgresConversations(pool).record(
            [
                NewMessage(
                    user_id=user or uuid.uuid4(),
                    conversation_id=cid,
                    message_id="m1",
                    role="user",
                    text="I'm moving to Lisbon in May.",
                    occurred_at=datetime.now(UTC) - quiet_for,
                    source="cli-test",
                )
            ]
        )
    finally:
        pool.close()
    return cid


def memories(url: str) -> dict[str, dict]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT conversation_id, memory FROM conversation_memories").fetchall())


def test_locally_it_triggers_drains_and_prints_what_was_written_and_a_rerun_writes_nothing(capsys, own_url):
    # Given a conversation quiet for 90 minutes and one active 5 minutes ago
    quiet, active = record(own_url, quiet_for=timedelta(minutes=90)), record(own_url, quiet_for=timedelta(minutes=5))
    # When the command runs with a threshold of 60 minutes (moto's queue, the real handlers)
    result = run(capsys, "trigger-conversations", "--threshold-minutes", "60", "--database-url", own_url)
    # Then it prints what it queued and wrote, as JSON, and exits 0
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["threshold_minutes"], report["conversations"], report["memories_written"]) == (60, 1, 1)
    assert (report["in_dlq"], report["summarizer"]) == (0, "rules")
    assert set(memories(own_url)) == {quiet}
    assert memories(own_url)[quiet]["learned_about_user"] == ["I'm moving to Lisbon in May."]
    assert active not in memories(own_url)
    # And a second run finds nothing and writes nothing
    again = json.loads(run(capsys, "trigger-conversations", "--threshold-minutes", "60", "--database-url", own_url).out)
    assert (again["conversations"], again["messages"], again["memories_written"]) == (0, 0, 0)


def test_seed_records_demo_conversations_first(capsys, own_url):
    result = run(capsys, "trigger-conversations", "--seed", "5", "--database-url", own_url)
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["seeded_messages"] >= 20 and report["conversations"] >= 5 and report["memories_written"] >= 5


def test_with_a_queue_url_it_sends_there_and_prints_the_counts(capsys, own_url):
    user = uuid.uuid4()
    quiet = record(own_url, quiet_for=timedelta(hours=3), user=user)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="real-queue")["QueueUrl"]
        result = run(capsys, "trigger-conversations", "--queue-url", url, "--database-url", own_url)
        assert result.code == 0, result.err
        report = json.loads(result.out)
        assert (report["queue_url"], report["threshold_minutes"], report["messages"]) == (url, 120, 1)
        [message] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(message["Body"]) == {
        "task_type": "GENERATE_MEMORY_BATCH",
        "conversations": [{"user_id": str(user), "conversation_id": quiet}],
    }
    assert memories(own_url) == {}  # sent, not summarized: that is the deployed worker's job


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--threshold-minutes", "0"], "--threshold-minutes: the threshold must be at least 1, got 0"),
        (["--threshold-minutes", "soon"], "must be a whole number, got 'soon'"),
        (["--threshold-minutes", "99999"], "--threshold-minutes: the threshold must be at most 44640, got 99999"),
        (["--seed", "3", "--queue-url", "https://sqs.us-east-1.amazonaws.com/123456789012/q"], "--seed is for"),
        (["--queue-url", "not-a-queue"], "--queue-url: not an SQS queue URL (expected https://sqs.<region>."),
        (["--queue-url", "https://example.com/q"], "not an SQS queue URL: the path is /<12-digit account id>"),
        (["--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"], "--queue-url: not an SQS queue URL"),
        (["--queue-url", "https://sqs.mars.amazonaws.com/123456789012/q"], "unknown AWS host"),
        (["--summarizer", "gpt"], "invalid choice: 'gpt'"),
    ],
)
def test_bad_arguments_are_one_error_line(capsys, argv, fragment):
    result = run(capsys, "trigger-conversations", *argv, "--database-url", "postgresql://nobody@127.0.0.1:1/x")
    assert_one_error_line(result, fragment)
    assert result.code == 2  # a usage error: nothing ran, the database was not even tried
    assert "INACTIVITY_THRESHOLD_MINUTES" not in result.err  # the flag typed, never the setting behind it


@pytest.fixture
def no_region(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No AWS region anywhere: not in the environment, not in a config file."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def test_an_aws_queue_urls_region_is_its_own_without_a_region_configured(capsys, own_url, no_region):
    # Given no region configured, and a quiet conversation
    record(own_url, quiet_for=timedelta(hours=3))
    with mock_aws():
        url = boto3.client("sqs", region_name="eu-west-1").create_queue(QueueName="in-ireland")["QueueUrl"]
        # When the trigger sends to a queue of eu-west-1
        result = run(capsys, "trigger-conversations", "--queue-url", url, "--database-url", own_url)
        # Then it needs no region (the URL names it) and the message is on that queue
        assert result.code == 0, result.err
        assert json.loads(result.out)["messages"] == 1
        queued = boto3.client("sqs", region_name="eu-west-1").receive_message(QueueUrl=url)["Messages"]
    assert len(queued) == 1
    assert "NoRegionError" not in result.err


def test_another_endpoint_without_a_region_is_one_error_line_before_the_database(capsys, no_region):
    # Given a LocalStack-like queue URL (its host names no region) and no region configured
    url = "http://localhost:4566/000000000000/local-queue"
    # When the trigger is asked to send there (with a database that cannot be reached)
    result = run(capsys, "trigger-conversations", "--queue-url", url, "--database-url", "postgresql://n@127.0.0.1:1/x")
    # Then one line says what to set, before the database was tried; never botocore's NoRegionError
    assert_one_error_line(result, "names no region: set AWS_REGION (or AWS_DEFAULT_REGION)")
    assert "NoRegionError" not in result.err and "database" not in result.err


def test_the_queue_runs_result_alone_is_on_stdout_and_the_logs_on_stderr(capsys, own_url, monkeypatch):
    # Given the service's logs at INFO (the trigger logs "memory generation triggered")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "INFO")
    record(own_url, quiet_for=timedelta(hours=3))
    with mock_aws():
        url = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="logged")["QueueUrl"]
        result = run(capsys, "trigger-conversations", "--queue-url", url, "--database-url", own_url)
    # Then stdout is the JSON report alone, and the log line went to stderr
    assert result.code == 0, result.err
    assert json.loads(result.out)["messages"] == 1
    assert '"message":"memory generation triggered"' in result.err

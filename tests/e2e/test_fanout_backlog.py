"""The fan-out weighs the worker queue's backlog before it queues a day: real handler, real JSON
events, the session's PostgreSQL, moto's SQS (GetQueueAttributes)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from user_memory.config import FanoutSettings
from user_memory.errors import FanoutRefused
from user_memory.observability import metrics
from user_memory.runtime import FanoutServices, build_fanout
from user_memory_functions.fanout.app import handler as fanout_handler
from user_memory_local.poller import FakeLambdaContext

from tests.e2e.helpers import Stack, emitted_metrics, seed_users

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

# A slow worker (2 invocations of one user, one LLM call at a time, 10 s a call: ~0.19 users a
# second) and a queue that keeps messages a day and 10 minutes: the backlog may last 600 s, about
# 112 users at that rate.
SLOW = {
    "worker_maximum_concurrency": 2,
    "worker_batch_size": 1,
    "llm_concurrency": 1,
    "llm_seconds_per_call": 10,
    "queue_retention_seconds": 86400 + 600,
    "fanout_page_size": 10,
}


def slow_fanout(stack: Stack, **env: Any) -> FanoutServices:
    given = {"database_url": stack.database_url, "queue_url": stack.queue_url, **SLOW, **env}
    settings = FanoutSettings.from_env({}, **given)
    return build_fanout(settings, sqs_client=stack.sqs, pool=stack.pool)


def backlog_of(stack: Stack, n: int) -> None:
    """`n` refresh messages already waiting on the worker queue (an earlier night not yet drained)."""
    for i in range(0, n, 10):
        entries = [
            {"Id": str(j), "MessageBody": json.dumps({"type": "refresh_user", "user_ids": [str(uuid.uuid4())]})}
            for j in range(min(10, n - i))
        ]
        stack.sqs.send_message_batch(QueueUrl=stack.queue_url, Entries=entries)


def waiting(stack: Stack) -> int:
    attributes = stack.sqs.get_queue_attributes(
        QueueUrl=stack.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_a_day_the_backlog_could_not_drain_before_retention_is_refused_logged_and_counted(
    stack, logs, capsys, monkeypatch
):
    # Given 100 messages already waiting, a worker that drains ~112 users in the 600 s the backlog
    # may last, and 25 users to summarize for a day (pages of 10)
    backlog_of(stack, 100)
    day = datetime(1976, 3, 1, tzinfo=UTC)
    users = seed_users(stack.pool, 25, day, f"backlog-{uuid.uuid4()}")
    event = {"date": "1976-03-01", "user_ids": [str(u) for u in users]}
    services = slow_fanout(stack)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics.clear_metrics()
    capsys.readouterr()
    # When the fan-out runs on the day
    with pytest.raises(FanoutRefused) as refused:
        fanout_handler(event, FakeLambdaContext(function_name="fanout"), services=services)
    # Then the first page, which fits, was queued, and the rest of the day refused, not dropped
    assert waiting(stack) == 110
    assert (refused.value.run_key, refused.value.users_queued, refused.value.waiting_messages) == (
        "daily:1976-03-01",
        10,
        100,
    )
    # And the refusal is logged with the run key, the backlog and why, and counted apart from failures
    [line] = logs.named("fan-out refused")
    assert (line["run_key"], line["error"], line["waiting_messages"], line["users_queued"]) == (
        "daily:1976-03-01",
        "FanoutRefused",
        100,
        10,
    )
    assert "the rest refused" in line["reason"] and not logs.named("fan-out failed")
    emf = emitted_metrics(capsys)
    assert emf["FanoutRefused"] in (1.0, [1.0]) and "FanoutFailed" not in emf
    # And when it is retried (EventBridge's retry), nothing more is queued
    with pytest.raises(FanoutRefused):
        fanout_handler(event, FakeLambdaContext(function_name="fanout"), services=services)
    assert waiting(stack) == 110


def test_the_same_day_is_queued_whole_when_the_backlog_leaves_room(stack, logs):
    # Given the same slow worker and day, with 50 messages waiting instead of 100
    backlog_of(stack, 50)
    day = datetime(1976, 3, 2, tzinfo=UTC)
    users = seed_users(stack.pool, 25, day, f"backlog-{uuid.uuid4()}")
    # When the fan-out runs
    result = fanout_handler(
        {"date": "1976-03-02", "user_ids": [str(u) for u in users]},
        FakeLambdaContext(function_name="fanout"),
        services=slow_fanout(stack),
    )
    # Then every user is queued
    assert result["users"] == 25 and waiting(stack) == 75
    assert not logs.named("fan-out refused")


def test_a_queue_whose_backlog_cannot_be_read_fails_the_fanout_before_anything_is_sent(stack, logs):
    # Given a fan-out pointed at a queue that does not exist
    services = slow_fanout(stack, queue_url=stack.queue_url + "-gone")
    # When it runs, then it fails as QueueUnavailable, logged and counted as a failed fan-out
    from user_memory.errors import QueueUnavailable

    with pytest.raises(QueueUnavailable, match="could not be read"):
        fanout_handler({"date": "1976-03-03"}, FakeLambdaContext(function_name="fanout"), services=services)
    [line] = logs.named("fan-out failed")
    assert line["error"] == "QueueUnavailable"

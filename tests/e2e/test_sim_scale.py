"""The time-compressed nightly run (bench/sim_scale.py), tiny: the harness itself is tested.

The real fan-out and worker handlers, moto's SQS through the harness's linear shim, two concurrent
worker invocations with LLM_CONCURRENCY lanes, the scripted model over HTTP with 429s: every user
of the day gets exactly one version for the run key, none is lost or written twice, nothing goes
to the DLQ. The shim (bench/sim/fast_moto.py) answers what moto answers for any sequence of
sends, receives, deletes and visibility changes.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import date, timedelta
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.conftest import ROOT
from tests.e2e.helpers import new_database

sys.path.insert(0, str(ROOT / "bench"))
from sim.fast_moto import linear_sqs
from sim.scale import Latency, simulate

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]


def test_a_night_of_users_through_two_concurrent_invocations_loses_none_and_writes_none_twice(database_url):
    # Given 200 users active on a day of their own, a model at p50 1.5 s / p99 8 s compressed /500
    # that answers one call in ten with a 429 and Retry-After
    day = date(2031, 1, 1) + timedelta(days=uuid.uuid4().int % 3000)
    with new_database(database_url, f"user_memory_sim_scale_{uuid.uuid4().hex[:8]}", migrated=True) as dsn:
        # When the fan-out queues the day and two worker invocations drain it
        result = simulate(
            dsn, users=200, invocations=2, latency=Latency(rate_429=0.1, compression=500.0), day=day, seed=3
        )

    # Then every user has exactly one version for the run key, and nothing reached the DLQ
    assert (result.lost, result.twice, result.dlq) == (0, 0, 0)
    assert result.written == 200
    assert result.answered_429 > 0  # the 429 path was taken, and retried within the invocations
    assert result.model_errors == []
    assert result.worker_invocations >= 200 // 10
    assert result.peak_connections >= 1 and result.wal_bytes > 0


Op = tuple[str, int]
ops = st.lists(
    st.tuples(st.sampled_from(["send", "receive", "delete", "release", "count"]), st.integers(0, 9)),
    min_size=1,
    max_size=40,
)


def _replay(script: list[Op]) -> list[Any]:
    """What moto answers to `script` on a fresh queue: bodies received, deletes, counts."""
    out: list[Any] = []
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
        held: list[str] = []  # receipt handles of received, undeleted messages
        sent = 0
        for op, n in script:
            if op == "send":
                sqs.send_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "MessageBody": json.dumps(sent + i)} for i in range(n + 1)],
                )
                sent += n + 1
            elif op == "receive":
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=n + 1, AttributeNames=["All"])
                messages = got.get("Messages", [])
                held += [m["ReceiptHandle"] for m in messages]
                counts = [m["Attributes"]["ApproximateReceiveCount"] for m in messages]
                out.append(("received", [m["Body"] for m in messages], counts))
            elif op == "delete" and held:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=held.pop(n % len(held)))
                out.append(("deleted",))
            elif op == "release" and held:
                handle = held.pop(n % len(held))
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
                out.append(("released",))
            elif op == "count":
                names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
                attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
                out.append(("count", attributes))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=ops)
def test_the_linear_shim_answers_what_moto_answers(script):
    # Given any sequence of sends, receives, deletes, visibility releases and counts
    # When it runs on moto as it is and on moto with the harness's shim
    plain = _replay(script)
    with linear_sqs():
        shimmed = _replay(script)

    # Then every answer is the same
    assert shimmed == plain

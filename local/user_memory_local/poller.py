"""Plays Lambda's SQS event source against moto: batches, partial failures, visibility, DLQ.

moto stores messages but does not invoke functions, so this loop does what the event source
mapping does: receive up to 10 messages, invoke the handler with a real SQS event, delete the
successes, leave failures to reappear after the visibility timeout, and move a message to the
DLQ once it has been received maxReceiveCount times.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from user_memory.domain.plan import QUEUE_RETENTION_SECONDS

Handler = Callable[[dict[str, Any], Any], Any]
"""A Lambda handler as the poller calls it: (event, context) -> response."""

# As template.yaml declares the worker queue: 6 x the worker's 120 s timeout, and the
# MaxReceiveCount parameter's default.
VISIBILITY_TIMEOUT = 720
MAX_RECEIVE_COUNT = 5


@dataclass
class FakeLambdaContext:
    """The parts of LambdaContext the handlers use."""

    function_name: str = "worker"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:worker"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    timeout_seconds: float = 120.0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def sqs_record(
    *,
    message_id: str,
    body: str,
    receipt_handle: str = "local",
    attributes: dict[str, str] | None = None,
    queue_arn: str = "arn:aws:sqs:us-east-1:123456789012:user-memory-worker",
    region: str = "us-east-1",
) -> dict[str, Any]:
    """One record as Lambda's SQS event source delivers it (attributes: SQS's, or a first receive now)."""
    if attributes is None:
        sent = str(int(time.time() * 1000))
        attributes = {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": sent,
            "SenderId": "AIDALOCALSENDER",
            "ApproximateFirstReceiveTimestamp": sent,
        }
    return {
        "messageId": message_id,
        "receiptHandle": receipt_handle,
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),  # SQS's own checksum
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


@dataclass
class PollerReport:
    invocations: int = 0
    received: int = 0
    succeeded: int = 0
    failed_attempts: int = 0
    to_dlq: int = 0


class LambdaSqsPoller:
    """Lambda's SQS event source mapping for one queue and one handler callable.

    `handler` is called as Lambda calls it, `handler(event, context)`; to give it services of
    your own, bind them first (e.g. `functools.partial(handler, services=...)`).
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        dlq_url: str,
        handler: Handler,
        *,
        batch_size: int = 10,
        max_receive_count: int = MAX_RECEIVE_COUNT,
        visibility_timeout: int = VISIBILITY_TIMEOUT,
        function_timeout: float = 120.0,
        region: str = "us-east-1",
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        self.handler = handler
        self.batch_size = batch_size
        self.max_receive_count = max_receive_count
        self.visibility_timeout = visibility_timeout
        self.function_timeout = function_timeout
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.region = region
        self.report = PollerReport()

    def _event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "Records": [
                sqs_record(
                    message_id=m["MessageId"],
                    body=m["Body"],
                    receipt_handle=m["ReceiptHandle"],
                    attributes=m.get("Attributes", {}),
                    queue_arn=self.queue_arn,
                    region=self.region,
                )
                for m in messages
            ]
        }

    def poll_once(self) -> int:
        """One receive + invoke; returns how many messages were received."""
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            VisibilityTimeout=self.visibility_timeout,
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        messages = response.get("Messages", [])
        if not messages:
            return 0
        self.report.invocations += 1
        self.report.received += len(messages)
        try:
            result = self.handler(self._event(messages), FakeLambdaContext(timeout_seconds=self.function_timeout))
            failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        except Exception:  # an invocation error fails the whole batch, as in Lambda
            failed = {m["MessageId"] for m in messages}
        for m in messages:
            if m["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
                self.report.succeeded += 1
                continue
            self.report.failed_attempts += 1
            receives = int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            if receives >= self.max_receive_count:
                self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=m["Body"])
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
                self.report.to_dlq += 1
            else:
                # The visibility timeout elapses instantly here, so a retry is not a wait.
                self.sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
        return len(messages)

    def drain(self, on_batch: Callable[[int], None] | None = None, max_invocations: int = 1_000_000) -> PollerReport:
        """Invoke until the queue is empty."""
        for _ in range(max_invocations):
            n = self.poll_once()
            if n == 0:
                break
            if on_batch:
                on_batch(n)
        return self.report


def create_queues(
    sqs: Any, name: str = "user-memory-worker", max_receive_count: int = MAX_RECEIVE_COUNT
) -> tuple[str, str]:
    """The worker queue and its DLQ, as template.yaml declares them; returns (queue_url, dlq_url).

    The redrive policy is set as in the template; the poller moves a message after its
    `max_receive_count`-th failed receive, before the queue's own redrive would.
    """
    retention = str(QUEUE_RETENTION_SECONDS)
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq", Attributes={"MessageRetentionPeriod": retention})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(VISIBILITY_TIMEOUT),
            "MessageRetentionPeriod": retention,
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}),
        },
    )["QueueUrl"]
    return queue_url, dlq_url

"""The queue sender: SendMessageBatch, 10 entries a call, per-entry failures retried with backoff."""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from user_memory.errors import ConfigError, QueueUnavailable, SendFailed

SQS_BATCH = 10
SEND_ATTEMPTS = 4

# https://sqs.<region>.amazonaws.com[.cn]/<account id>/<queue name>, and the legacy
# https://<region>.queue.amazonaws.com/...; a queue name is 1-80 of letters, digits, - and _
# (plus .fifo). Any other host (LocalStack, ElasticMQ, moto's server) is an endpoint of its own.
_AWS_HOST = re.compile(r"^(?:sqs\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d{1,2})\.amazonaws\.com(?:\.cn)?"
                       r"|(?P<legacy>[a-z]{2}(?:-[a-z]+)+-\d{1,2})\.queue\.amazonaws\.com)$")  # fmt: skip
_QUEUE_PATH = re.compile(r"^/(?P<account>\d{12})/(?P<name>[A-Za-z0-9_-]{1,80}(?:\.fifo)?)$")
QUEUE_URL_FORM = "https://sqs.<region>.amazonaws.com/<account id>/<queue name>"


@dataclass(frozen=True)
class QueueAddress:
    """Where a queue URL points: its AWS region (None for an endpoint of its own), and that endpoint."""

    url: str
    region: str | None
    endpoint_url: str | None


def parse_queue_url(url: str) -> QueueAddress:
    """The queue an SQS queue URL names; ConfigError (one line, never the URL's text) when it is not one."""
    parts = urllib.parse.urlsplit(url.strip()) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(f"not an SQS queue URL (expected {QUEUE_URL_FORM})")
    if not _QUEUE_PATH.match(parts.path):
        raise ConfigError(f"not an SQS queue URL: the path is /<12-digit account id>/<queue name> ({QUEUE_URL_FORM})")
    host = _AWS_HOST.match(parts.hostname)
    if host:
        if parts.scheme != "https":
            raise ConfigError(f"an AWS queue URL is https ({QUEUE_URL_FORM})")
        return QueueAddress(url=url.strip(), region=host.group("region") or host.group("legacy"), endpoint_url=None)
    if parts.hostname.endswith(".amazonaws.com") or parts.hostname.endswith(".amazonaws.com.cn"):
        raise ConfigError(f"not an SQS queue URL: unknown AWS host (expected {QUEUE_URL_FORM})")
    return QueueAddress(url=url.strip(), region=None, endpoint_url=f"{parts.scheme}://{parts.netloc}")


class SqsSender:
    """MessageSender on SQS.

    Args:
        client: a boto3 SQS client, built once per cold start by the composition root.
    """

    def __init__(self, queue_url: str, client: Any, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.queue_url = queue_url
        self.sleep = sleep
        self.calls = 0

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        """Send every body (each delivered after `delay_seconds`, 0 to 900); raise SendFailed
        naming how many could not be sent."""
        sent = 0
        for i in range(0, len(bodies), SQS_BATCH):
            pending = {str(n): body for n, body in enumerate(bodies[i : i + SQS_BATCH])}
            errors: list[str] = []
            for attempt in range(SEND_ATTEMPTS):
                entries: list[dict[str, Any]] = [{"Id": k, "MessageBody": v} for k, v in pending.items()]
                if delay_seconds:
                    for entry in entries:
                        entry["DelaySeconds"] = delay_seconds
                self.calls += 1
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
                for ok in response.get("Successful", []):
                    pending.pop(ok["Id"], None)
                    sent += 1
                errors = sorted({f.get("Code", "unknown") for f in response.get("Failed", [])})
                if not pending:
                    break
                self.sleep(min(2.0, 0.1 * 2**attempt))
            if pending:
                raise SendFailed(
                    f"{len(pending)} message(s) could not be sent after {SEND_ATTEMPTS} attempts "
                    f"({', '.join(errors) or 'no reason given'}); {sent} sent before"
                )
        return sent


# Every message the queue holds: waiting, received and not yet deleted, and delayed re-sends.
BACKLOG_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


class SqsQueueDepth:
    """QueueDepth on SQS: one GetQueueAttributes call (the fan-out's role may make it on the worker queue)."""

    def __init__(self, queue_url: str, client: Any) -> None:
        self.client = client
        self.queue_url = queue_url

    def backlog(self) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            attributes = self.client.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=list(BACKLOG_ATTRIBUTES)
            )["Attributes"]
        except (BotoCoreError, ClientError) as err:
            code = err.response.get("Error", {}).get("Code") if isinstance(err, ClientError) else type(err).__name__
            raise QueueUnavailable(f"the worker queue's attributes could not be read ({code})") from err
        return sum(int(attributes.get(name, 0)) for name in BACKLOG_ATTRIBUTES)

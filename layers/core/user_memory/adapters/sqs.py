"""The queue sender: SendMessageBatch, 10 entries a call, per-entry failures retried with backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from user_memory.errors import SendFailed

SQS_BATCH = 10
SEND_ATTEMPTS = 4


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

"""A local webhook receiver that verifies each request the way a receiver would: with the
`standardwebhooks` package's verifier (an implementation independent of the service's signing),
the signature over id, timestamp and body, the timestamp within 5 minutes of the receiver's clock
(given, so simulated time holds). It can be down (503) on cue; it records what it accepted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.fake_http import serving


class _ClockedWebhook(Webhook):
    """The package's verifier with the receiver's clock in place of the wall clock."""

    def __init__(self, secret: str, clock: Callable[[], datetime]) -> None:
        super().__init__(secret)
        self._clock = clock

    def _Webhook__verify_timestamp(self, timestamp_header: str) -> datetime:  # the package's private check
        try:
            timestamp = datetime.fromtimestamp(float(timestamp_header), tz=UTC)
        except ValueError:
            raise WebhookVerificationError("Invalid Signature Headers") from None
        if abs((self._clock() - timestamp).total_seconds()) > 300:
            raise WebhookVerificationError("Message timestamp out of tolerance")
        return timestamp


class Receiver:
    """What the endpoint accepted (webhook-id, payload), refused, and whether it is up."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock or (lambda: datetime.now(UTC))
        self.secret: str | None = None
        self.down = False
        self.accepted: list[tuple[str, dict[str, Any]]] = []
        self.refused = 0
        self.attempts = 0
        self.lock = threading.Lock()

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.attempts += 1
            if self.down:
                return 503
            if self.secret is None:
                self.refused += 1
                return 401
            try:
                payload = _ClockedWebhook(self.secret, self.clock).verify(body, headers)
            except WebhookVerificationError:
                self.refused += 1
                return 401
            self.accepted.append((headers["webhook-id"], payload))
            return 204

    def versions(self) -> dict[str, list[int]]:
        """Per user, the versions accepted, in the order they arrived."""
        seen: dict[str, list[int]] = {}
        for _, payload in self.accepted:
            seen.setdefault(payload["data"]["user_id"], []).append(payload["data"]["version"])
        return seen


@contextmanager
def receiving(receiver: Receiver) -> Iterator[str]:
    """The receiver on 127.0.0.1 for the block; its URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver behind a load balancer

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status = receiver.handle(body, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    with serving(Handler) as base:
        yield base.removesuffix("/v1") + "/hooks"

"""A local webhook receiver that verifies each request the way a receiver would: with a verifier
written from the Standard Webhooks specification (independent of the service's signing, and
checked against the specification's own example in tests/unit/test_memory_events.py), the
signature over id, timestamp and body, the timestamp within 5 minutes of the receiver's clock
(given, so simulated time holds). It can be down (503) on cue; it records what it accepted."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_http import serving

TOLERANCE_SECONDS = 300  # the specification's default tolerance for the timestamp


class WebhookVerificationError(Exception):
    """A request that is not one the secret's holder signed (or too old, or too new)."""


def verify(secret: str, body: bytes | str, headers: dict[str, str], now: datetime) -> Any:
    """The request's JSON payload when one of its `v1` signatures is the HMAC-SHA256, under the
    secret's bytes (base64 after `whsec_`), of "id.timestamp.body" and its timestamp is within the
    tolerance of `now`; else WebhookVerificationError (Standard Webhooks, "Verifying webhooks")."""
    try:
        message_id, stamp, signatures = (headers[h] for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
        timestamp = datetime.fromtimestamp(int(stamp), tz=UTC)
    except (KeyError, ValueError, OverflowError):
        raise WebhookVerificationError("missing or malformed signature headers") from None
    if abs((now - timestamp).total_seconds()) > TOLERANCE_SECONDS:
        raise WebhookVerificationError("timestamp out of tolerance")
    raw = body.encode() if isinstance(body, str) else body
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{message_id}.{stamp}.".encode() + raw, hashlib.sha256).digest())
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return json.loads(raw)
    raise WebhookVerificationError("no matching signature")


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
                payload = verify(self.secret, body, headers, self.clock())
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

"""Memory-changed events: what one says, how the relay orders and retries them (no I/O).

Every committed version leaves one event in the outbox (migration 026), in the version's own
transaction. The relay (jobs/events.py) sends each event at least once to every sink: the
EventBridge bus, and each enabled webhook endpoint, in version order per user. The ports here are
what it needs: the outbox, a bus, a webhook sender, the endpoints' signing secrets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

# The `type` of every webhook message and the DetailType of every EventBridge event.
EVENT_TYPE = "memory.changed"
DETAIL_TYPE = "Memory Changed"
EVENTBRIDGE_SINK = "eventbridge"
# PutEvents takes at most 10 entries a call.
MAX_PUT_EVENTS = 10


@dataclass(frozen=True)
class MemoryEvent:
    """One committed version, as the outbox holds it: never content."""

    id: int
    user_id: uuid.UUID
    version: int
    source: str
    run_key: str | None
    sections: tuple[str, ...]
    created_at: datetime

    @property
    def message_id(self) -> str:
        """Stable across retries (the Standard Webhooks `webhook-id`): receivers deduplicate on it."""
        return f"evt_{self.id}"

    def data(self) -> dict[str, Any]:
        """The event's fields as a receiver sees them."""
        return {
            "event_id": self.message_id,
            "user_id": str(self.user_id),
            "version": self.version,
            "source": self.source,
            "run_key": self.run_key,
            "sections": list(self.sections),
            "occurred_at": self.created_at.isoformat(),
        }

    def webhook_payload(self) -> dict[str, Any]:
        """The Standard Webhooks payload: type, timestamp, data."""
        return {"type": EVENT_TYPE, "timestamp": self.created_at.isoformat(), "data": self.data()}


@dataclass(frozen=True)
class Endpoint:
    """A webhook endpoint operators registered, and its delivery state."""

    id: uuid.UUID
    url: str
    description: str
    secret_name: str
    enabled: bool
    disabled_reason: str | None
    failures: int
    failing_since: datetime | None
    next_attempt_at: datetime | None
    last_error: str | None
    last_delivered_at: datetime | None
    created_at: datetime
    # Events after this one are the endpoint's (it was registered then).
    after_event_id: int = 0

    @property
    def sink(self) -> str:
        return str(self.id)

    def due(self, now: datetime) -> bool:
        """Enabled, and not waiting out a backoff."""
        return self.enabled and (self.next_attempt_at is None or self.next_attempt_at <= now)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff per endpoint; disabled once it has failed for `disable_after` without a success."""

    base: timedelta
    cap: timedelta
    disable_after: timedelta

    def next_attempt(self, failures: int, now: datetime) -> datetime:
        """When to try again after the `failures`-th failure in a row (1: the first)."""
        delay = self.base * (2 ** min(max(failures - 1, 0), 30))
        return now + min(delay, self.cap)

    def gives_up(self, failing_since: datetime, now: datetime) -> bool:
        return now - failing_since >= self.disable_after


SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A signing secret as Standard Webhooks writes one: whsec_ and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signature(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """The Standard Webhooks v1 signature: HMAC-SHA256 of "id.timestamp.body" with the secret's bytes."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{message_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def put_batches(events: Sequence[MemoryEvent], size: int = MAX_PUT_EVENTS) -> Iterable[list[MemoryEvent]]:
    """The events in calls of at most `size`, each user at most once per call and a user's events
    in their order across calls: a call's entries can fail one by one, so a user's later event must
    wait for its earlier one's answer. Pass the next pending list again after a failure."""
    rest = list(events)
    while rest:
        batch: list[MemoryEvent] = []
        later: list[MemoryEvent] = []
        seen: set[uuid.UUID] = set()
        for event in rest:
            if len(batch) < size and event.user_id not in seen:
                batch.append(event)
            else:
                later.append(event)
            seen.add(event.user_id)
        yield batch
        rest = later


class Outbox(Protocol):
    """The outbox and the endpoints' state (migration 026)."""

    def pending(self, sink: str, *, after_id: int, limit: int) -> list[MemoryEvent]: ...

    def mark_delivered(self, sink: str, event_ids: Sequence[int]) -> int: ...

    def endpoints(self) -> list[Endpoint]: ...

    def endpoint_failed(self, endpoint: Endpoint, *, error: str, now: datetime, policy: RetryPolicy) -> Endpoint: ...

    def endpoint_succeeded(self, endpoint: Endpoint, *, now: datetime) -> None: ...

    def prune(self, sinks: Sequence[tuple[str, int]], *, keep_seconds: int) -> int: ...


class Bus(Protocol):
    """EventBridge: put events, answer the ids of the ones that failed."""

    def put(self, events: Sequence[MemoryEvent]) -> set[int]: ...


class WebhookSender(Protocol):
    """One signed POST of one event to one endpoint; raises DeliveryFailed when it was not accepted."""

    def send(self, endpoint: Endpoint, secret: str, event: MemoryEvent, *, timeout: float) -> None: ...


class Secrets(Protocol):
    """The endpoints' signing secrets (Secrets Manager): never in the database or a log line."""

    def create(self, name: str, secret: str) -> None: ...

    def read(self, name: str) -> str: ...

    def delete(self, name: str) -> None: ...


class EndpointStore(Protocol):
    """The endpoints' rows (operators' side)."""

    def register(
        self, endpoint_id: uuid.UUID, *, url: str, description: str, secret_name: str, created_by: str | None
    ) -> Endpoint: ...

    def endpoints(self) -> list[Endpoint]: ...

    def endpoint(self, endpoint_id: uuid.UUID) -> Endpoint: ...

    def set_enabled(self, endpoint_id: uuid.UUID, *, enabled: bool, reason: str | None = None) -> Endpoint: ...

    def delete(self, endpoint_id: uuid.UUID) -> str: ...


_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def check_url(url: str) -> str:
    """An endpoint's URL: https, or http to this machine only (the local kit's receivers)."""
    from urllib.parse import urlsplit

    from user_memory.errors import InvalidArgument

    if len(url) > 2000:
        raise InvalidArgument("url", "is longer than 2000 characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise InvalidArgument("url", "is not a URL") from None
    if not host or parts.scheme not in ("https", "http") or parts.username or parts.password:
        raise InvalidArgument("url", "must be an https URL without credentials")
    if parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0] not in _LOCAL_HOSTS:
        raise InvalidArgument("url", "must be https (http only to localhost)")
    return url


@dataclass(frozen=True)
class WebhookRegistry:
    """Operators' webhook endpoints: each with its own signing secret in the secrets' store."""

    store: EndpointStore
    secrets: Secrets
    secret_prefix: str

    def register(self, url: str, description: str, created_by: str | None) -> tuple[Endpoint, str]:
        """A new endpoint and its signing secret (answered once, to configure the receiver)."""
        check_url(url)
        endpoint_id = uuid.uuid4()
        name = f"{self.secret_prefix}{endpoint_id}"
        secret = new_secret()
        self.secrets.create(name, secret)  # first: a row never names a secret that is not there
        try:
            endpoint = self.store.register(
                endpoint_id, url=url, description=description, secret_name=name, created_by=created_by
            )
        except Exception:
            self.secrets.delete(name)
            raise
        return endpoint, secret

    def list(self) -> list[Endpoint]:
        return self.store.endpoints()

    def get(self, endpoint_id: uuid.UUID) -> Endpoint:
        return self.store.endpoint(endpoint_id)

    def set_enabled(self, endpoint_id: uuid.UUID, enabled: bool) -> Endpoint:
        return self.store.set_enabled(
            endpoint_id, enabled=enabled, reason=None if enabled else "disabled by an operator"
        )

    def delete(self, endpoint_id: uuid.UUID) -> None:
        """The endpoint, its delivery marks, then its secret."""
        self.secrets.delete(self.store.delete(endpoint_id))


@dataclass(kw_only=True)
class Relay:
    """What one run of the relay uses (runtime.build_events composes it)."""

    outbox: Outbox
    bus: Bus | None
    sender: WebhookSender
    secrets: Secrets
    policy: RetryPolicy
    clock: Callable[[], datetime]
    page_size: int = 500
    call_timeout: float = 10.0
    keep_seconds: int = 86_400
    # A webhook's deliveries are marked this many at a time: a relay stopped in between sends at
    # most this many again (receivers deduplicate on webhook-id).
    mark_every: int = 50

"""Memory-changed events' I/O: the outbox and the endpoints on PostgreSQL (migration 026),
EventBridge, the webhooks' signed POSTs (httpx2, bounded by the deadline in scope) and their
signing secrets in Secrets Manager."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from user_memory.adapters.postgres import _Database
from user_memory.domain.events import (
    DETAIL_TYPE,
    Endpoint,
    MemoryEvent,
    RetryPolicy,
    signature,
)
from user_memory.errors import DeliveryFailed, SecretsUnavailable, UnknownWebhook

_EVENT_COLUMNS = "e.id, e.user_id, e.version, e.source, e.run_key, e.sections, e.created_at"

# A sink's events after `after` it has not been sent, in id order: per user that is version order
# (a user's versions commit one after another, each after its head lock), and a user's visible
# events are always a prefix of its versions.
_PENDING = f"""
SELECT {_EVENT_COLUMNS} FROM user_memory_events e
 WHERE e.id > %(after)s
   AND NOT EXISTS (SELECT 1 FROM user_memory_event_deliveries d WHERE d.sink = %(sink)s AND d.event_id = e.id)
 ORDER BY e.id
 LIMIT %(limit)s
"""

# An event erased meanwhile is not there to mark: nothing is inserted for it.
_MARK = """
INSERT INTO user_memory_event_deliveries (sink, event_id)
SELECT %s, e.id FROM user_memory_events e WHERE e.id = ANY(%s)
ON CONFLICT DO NOTHING
"""

# Events every given sink has (delivered, or registered after them) and older than the kept
# window: gone with their deliveries (the cascade). A page at a time.
_PRUNE = """
DELETE FROM user_memory_events e
 WHERE e.id IN (
   SELECT c.id FROM user_memory_events c
    WHERE c.created_at < now() - make_interval(secs => %(keep)s)
      AND NOT EXISTS (
        SELECT 1 FROM unnest(%(sinks)s::text[], %(afters)s::bigint[]) AS s(sink, after_id)
         WHERE c.id > s.after_id
           AND NOT EXISTS (SELECT 1 FROM user_memory_event_deliveries d
                            WHERE d.sink = s.sink AND d.event_id = c.id))
    ORDER BY c.id
    LIMIT %(limit)s)
"""

_ENDPOINT_COLUMNS = """id, url, description, secret_name, enabled, disabled_reason, failures, failing_since,
next_attempt_at, last_error, last_delivered_at, created_at, after_event_id"""

_ENDPOINTS = f"SELECT {_ENDPOINT_COLUMNS} FROM user_memory_webhooks ORDER BY created_at, id"

_ENDPOINT = f"SELECT {_ENDPOINT_COLUMNS} FROM user_memory_webhooks WHERE id = %s"

_REGISTER = f"""
INSERT INTO user_memory_webhooks (id, url, description, secret_name, created_by, after_event_id)
VALUES (%s, %s, %s, %s, %s, (SELECT coalesce(max(id), 0) FROM user_memory_events))
RETURNING {_ENDPOINT_COLUMNS}
"""

# Enabling starts the endpoint over: no failures, no backoff.
_SET_ENABLED = f"""
UPDATE user_memory_webhooks
   SET enabled = %(enabled)s, disabled_reason = CASE WHEN %(enabled)s THEN NULL ELSE %(reason)s END,
       failures = CASE WHEN %(enabled)s THEN 0 ELSE failures END,
       failing_since = CASE WHEN %(enabled)s THEN NULL ELSE failing_since END,
       next_attempt_at = CASE WHEN %(enabled)s THEN NULL ELSE next_attempt_at END,
       updated_at = now()
 WHERE id = %(id)s
RETURNING {_ENDPOINT_COLUMNS}
"""

_DELETE = """
WITH gone AS (DELETE FROM user_memory_webhooks WHERE id = %s RETURNING id, secret_name)
SELECT secret_name FROM gone
"""

_DELETE_DELIVERIES = "DELETE FROM user_memory_event_deliveries WHERE sink = %s"

# The relay's verdict after a failure; an operator's disable meanwhile stays (enabled AND ...).
_FAILED = f"""
UPDATE user_memory_webhooks
   SET failures = failures + 1, failing_since = coalesce(failing_since, %(now)s), last_error = %(error)s,
       next_attempt_at = %(next)s, updated_at = now()
 WHERE id = %(id)s
RETURNING {_ENDPOINT_COLUMNS}
"""

_DISABLE = """
UPDATE user_memory_webhooks SET enabled = false, disabled_reason = %s, updated_at = now() WHERE id = %s
"""

_SUCCEEDED = """
UPDATE user_memory_webhooks
   SET failures = 0, failing_since = NULL, next_attempt_at = NULL, last_error = NULL,
       last_delivered_at = %s, updated_at = now()
 WHERE id = %s AND (failures > 0 OR last_delivered_at IS DISTINCT FROM %s)
"""


def _event(row: Sequence[Any]) -> MemoryEvent:
    return MemoryEvent(
        id=row[0], user_id=row[1], version=row[2], source=row[3], run_key=row[4], sections=tuple(row[5]),
        created_at=row[6],
    )  # fmt: skip


def _endpoint(row: Sequence[Any]) -> Endpoint:
    return Endpoint(
        id=row[0], url=row[1], description=row[2], secret_name=row[3], enabled=row[4], disabled_reason=row[5],
        failures=row[6], failing_since=row[7], next_attempt_at=row[8], last_error=row[9],
        last_delivered_at=row[10], created_at=row[11], after_event_id=row[12],
    )  # fmt: skip


class PostgresEvents(_Database):
    """The outbox (the relay's side) and the webhook endpoints (the operators' side)."""

    def pending(self, sink: str, *, after_id: int, limit: int) -> list[MemoryEvent]:
        """Up to `limit` events after `after_id` not yet delivered to `sink`, in id order."""
        with self.connection() as conn:
            rows = conn.execute(_PENDING, {"after": after_id, "sink": sink, "limit": limit}).fetchall()
        return [_event(r) for r in rows]

    def mark_delivered(self, sink: str, event_ids: Sequence[int]) -> int:
        """Record that `sink` has these events (the ones still there); how many were recorded."""
        if not event_ids:
            return 0
        with self.connection() as conn:
            return conn.execute(_MARK, (sink, list(event_ids))).rowcount

    def prune(self, sinks: Sequence[tuple[str, int]], *, keep_seconds: int, limit: int = 10_000) -> int:
        """Delete events every (sink, after id) has and older than `keep_seconds`; how many."""
        args = {
            "sinks": [s for s, _ in sinks], "afters": [a for _, a in sinks], "keep": keep_seconds, "limit": limit,
        }  # fmt: skip
        with self.connection() as conn:
            return conn.execute(_PRUNE, args).rowcount

    def endpoints(self) -> list[Endpoint]:
        with self.connection() as conn:
            return [_endpoint(r) for r in conn.execute(_ENDPOINTS).fetchall()]

    def endpoint(self, endpoint_id: uuid.UUID) -> Endpoint:
        with self.connection() as conn:
            row = conn.execute(_ENDPOINT, (endpoint_id,)).fetchone()
        if row is None:
            raise UnknownWebhook(f"no webhook endpoint {endpoint_id}")
        return _endpoint(row)

    def register(
        self, endpoint_id: uuid.UUID, *, url: str, description: str, secret_name: str, created_by: str | None
    ) -> Endpoint:
        with self.connection() as conn:
            row = conn.execute(_REGISTER, (endpoint_id, url, description, secret_name, created_by)).fetchone()
        assert row is not None  # an INSERT ... RETURNING answers its row
        return _endpoint(row)

    def set_enabled(self, endpoint_id: uuid.UUID, *, enabled: bool, reason: str | None = None) -> Endpoint:
        with self.connection() as conn:
            row = conn.execute(_SET_ENABLED, {"enabled": enabled, "reason": reason, "id": endpoint_id}).fetchone()
        if row is None:
            raise UnknownWebhook(f"no webhook endpoint {endpoint_id}")
        return _endpoint(row)

    def delete(self, endpoint_id: uuid.UUID) -> str:
        """Remove the endpoint and its delivery marks; the name of its secret (for the caller to delete)."""
        with self.connection() as conn:
            row = conn.execute(_DELETE, (endpoint_id,)).fetchone()
            if row is None:
                raise UnknownWebhook(f"no webhook endpoint {endpoint_id}")
            conn.execute(_DELETE_DELIVERIES, (str(endpoint_id),))
        return str(row[0])

    def endpoint_failed(self, endpoint: Endpoint, *, error: str, now: datetime, policy: RetryPolicy) -> Endpoint:
        """Count a failure, schedule the next attempt by the policy, disable once it gives up."""
        after = endpoint.failures + 1
        args = {"now": now, "error": error[:500], "next": policy.next_attempt(after, now), "id": endpoint.id}
        with self.connection() as conn:
            row = conn.execute(_FAILED, args).fetchone()
            if row is None:
                raise UnknownWebhook(f"no webhook endpoint {endpoint.id}")
            state = _endpoint(row)
            if state.enabled and state.failing_since is not None and policy.gives_up(state.failing_since, now):
                reason = f"failing since {state.failing_since.isoformat()}: {error}"[:500]
                conn.execute(_DISABLE, (reason, endpoint.id))
                state = _endpoint(conn.execute(_ENDPOINT, (endpoint.id,)).fetchone() or row)
        return state

    def endpoint_succeeded(self, endpoint: Endpoint, *, now: datetime) -> None:
        with self.connection() as conn:
            conn.execute(_SUCCEEDED, (now, endpoint.id, now))


class EventBridgeBus:
    """PutEvents on one bus; a call that fails whole fails each of its events."""

    def __init__(self, bus_name: str, source: str, client: Any) -> None:
        self.bus_name = bus_name
        self.source = source
        self.client = client

    def put(self, events: Sequence[MemoryEvent]) -> set[int]:
        """Put the events (at most 10); the ids of the ones the bus did not take."""
        from botocore.exceptions import BotoCoreError, ClientError

        entries = [
            {
                "Source": self.source,
                "DetailType": DETAIL_TYPE,
                "Detail": json.dumps(e.data(), separators=(",", ":")),
                "EventBusName": self.bus_name,
                "Time": e.created_at,
            }
            for e in events
        ]
        try:
            answer = self.client.put_events(Entries=entries)
        except (BotoCoreError, ClientError):
            return {e.id for e in events}
        return {e.id for e, entry in zip(events, answer.get("Entries", []), strict=False) if entry.get("ErrorCode")} | {
            e.id for e in events[len(answer.get("Entries", [])) :]
        }


class HttpWebhookSender:
    """Standard Webhooks: a JSON body with webhook-id, webhook-timestamp and a v1 HMAC-SHA256
    webhook-signature; a 2xx answer is a delivery, anything else (a timeout included) is not."""

    def __init__(self, clock: Any) -> None:
        from user_memory.adapters.openai_calls import http_client  # its connections end by the deadline in scope

        self.client = http_client()
        self.clock = clock

    def send(self, endpoint: Endpoint, secret: str, event: MemoryEvent, *, timeout: float) -> None:
        import httpx2

        body = json.dumps(event.webhook_payload(), separators=(",", ":"))
        timestamp = int(self.clock().timestamp())
        headers = {
            "content-type": "application/json",
            "webhook-id": event.message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, event.message_id, timestamp, body),
        }
        try:
            response = self.client.post(endpoint.url, content=body.encode(), headers=headers, timeout=timeout)
        except httpx2.HTTPError as err:
            raise DeliveryFailed(f"{type(err).__name__}") from err
        if not 200 <= response.status_code < 300:
            raise DeliveryFailed(f"HTTP {response.status_code}")

    def close(self) -> None:
        self.client.close()


class SecretsManagerSecrets:
    """The endpoints' signing secrets, one Secrets Manager secret each."""

    def __init__(self, client: Any = None, *, config: Any = None) -> None:
        self.client = client  # built on first use otherwise: listing endpoints needs no AWS
        self.config = config
        self._read: dict[str, str] = {}

    def _call(self, what: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if self.client is None:
                import boto3

                self.client = boto3.client("secretsmanager", config=self.config)
            return getattr(self.client, what)(**kwargs)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "ClientError")
            raise SecretsUnavailable(f"Secrets Manager {what}: {code}") from err
        except BotoCoreError as err:
            raise SecretsUnavailable(f"Secrets Manager {what}: {type(err).__name__}") from err

    def create(self, name: str, secret: str) -> None:
        self._call("create_secret", Name=name, SecretString=secret, Description="user-memory webhook signing secret")

    def read(self, name: str) -> str:
        """The secret, read once per process: an endpoint's secret never changes (a new endpoint, a new secret)."""
        if name not in self._read:
            self._read[name] = str(self._call("get_secret_value", SecretId=name)["SecretString"])
        return self._read[name]

    def delete(self, name: str) -> None:
        self._call("delete_secret", SecretId=name, RecoveryWindowInDays=7)

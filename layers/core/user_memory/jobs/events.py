"""The events relay: the outbox's memory-changed events to EventBridge and to every due webhook
endpoint, at least once, in version order per user; then delivered events are pruned.

A sink's event is marked delivered only after the sink took it, so a relay that stops between
the two sends it again next run (receivers deduplicate on the event id). EventBridge: a user's
event that failed holds that user's later events until the next run; the other users go on.
A webhook endpoint stops at its first failure (its events stay in order for every user), waits
out an exponential backoff, and is disabled once it has failed for WEBHOOK_DISABLE_AFTER_HOURS.
Every failure is logged with its ids, type and reason and counted; never content or a secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.adapters.http_deadline import time_left
from user_memory.domain.events import (
    EVENTBRIDGE_SINK,
    Bus,
    Endpoint,
    Relay,
    put_batches,
)
from user_memory.errors import DeliveryFailed, SecretsUnavailable, UnknownWebhook, describe_failure
from user_memory.observability import logger, metrics

# No call is started with less time than this left in the invocation.
MIN_CALL_SECONDS = 0.5


@dataclass
class RelayReport:
    eventbridge: int = 0
    webhooks: int = 0
    failed: int = 0
    disabled: int = 0
    pruned: int = 0
    deadline: bool = False
    endpoints: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "eventbridge": self.eventbridge, "webhooks": self.webhooks, "failed": self.failed,
            "disabled": self.disabled, "pruned": self.pruned, "deadline": self.deadline,
        }  # fmt: skip


def _time_for_a_call() -> float | None:
    """Seconds left for the next call (None: no deadline in scope), or 0 when too few are left."""
    left = time_left()
    if left is None:
        return None
    return left if left >= MIN_CALL_SECONDS else 0.0


def relay_to_bus(relay: Relay, bus: Bus, report: RelayReport) -> None:
    """Every pending event to the bus, each user at most once per PutEvents call, in order."""
    blocked: set[Any] = set()
    after = 0
    while True:
        page = relay.outbox.pending(EVENTBRIDGE_SINK, after_id=after, limit=relay.page_size)
        if not page:
            return
        after = page[-1].id
        for batch in put_batches([e for e in page if e.user_id not in blocked]):
            batch = [e for e in batch if e.user_id not in blocked]
            if not batch:
                continue
            if _time_for_a_call() == 0.0:
                report.deadline = True
                return
            failed = bus.put(batch)
            relay.outbox.mark_delivered(EVENTBRIDGE_SINK, [e.id for e in batch if e.id not in failed])
            report.eventbridge += len(batch) - len(failed)
            for event in batch:
                if event.id in failed:
                    blocked.add(event.user_id)
                    report.failed += 1
                    logger.warning("event not relayed", sink=EVENTBRIDGE_SINK, event_id=event.id,
                                   user_id=str(event.user_id), version=event.version,
                                   error_type="DeliveryFailed", reason="the bus refused the entry")  # fmt: skip
            if failed:
                metrics.add_metric(name="EventsNotRelayed", unit=MetricUnit.Count, value=len(failed))


def relay_to_endpoint(relay: Relay, endpoint: Endpoint, report: RelayReport) -> None:
    """The endpoint's pending events, one signed POST each, in order; the first failure ends its turn."""
    try:
        secret = relay.secrets.read(endpoint.secret_name)
    except SecretsUnavailable as err:  # the store's outage, not the endpoint's: no failure counted on it
        error, reason = describe_failure(err)
        logger.error("webhook secret unavailable", endpoint_id=endpoint.sink, error_type=error, reason=reason)
        metrics.add_metric(name="EventsNotRelayed", unit=MetricUnit.Count, value=1)
        report.failed += 1
        return
    sent: list[int] = []  # sent, not yet marked: marked together (a stop in between sends them again)
    delivered = 0
    after = endpoint.after_event_id

    def mark() -> None:
        nonlocal sent, delivered
        if sent:
            relay.outbox.mark_delivered(endpoint.sink, sent)
            delivered += len(sent)
            report.webhooks += len(sent)
            sent = []

    while not report.deadline:
        page = relay.outbox.pending(endpoint.sink, after_id=after, limit=relay.page_size)
        if not page:
            break
        after = page[-1].id
        for event in page:
            left = _time_for_a_call()
            if left == 0.0:
                report.deadline = True
                break
            timeout = relay.call_timeout if left is None else min(relay.call_timeout, left)
            try:
                relay.sender.send(endpoint, secret, event, timeout=timeout)
            except DeliveryFailed as err:
                mark()  # what went out before the failure
                _failed(relay, endpoint, event.id, err, report)
                return
            sent.append(event.id)
            if len(sent) >= relay.mark_every:
                mark()
    mark()
    report.endpoints[endpoint.sink] = delivered
    if delivered or endpoint.failures:
        relay.outbox.endpoint_succeeded(endpoint, now=relay.clock())


def _failed(relay: Relay, endpoint: Endpoint, event_id: int, err: DeliveryFailed, report: RelayReport) -> None:
    error, reason = describe_failure(err)
    try:
        state = relay.outbox.endpoint_failed(endpoint, error=reason, now=relay.clock(), policy=relay.policy)
    except UnknownWebhook:  # deleted by an operator during the run: nothing left to count it on
        return
    report.failed += 1
    metrics.add_metric(name="WebhookDeliveriesFailed", unit=MetricUnit.Count, value=1)
    logger.warning(
        "webhook delivery failed", endpoint_id=endpoint.sink, event_id=event_id, error_type=error, reason=reason,
        failures=state.failures, next_attempt_at=state.next_attempt_at.isoformat() if state.next_attempt_at else None,
    )  # fmt: skip
    if not state.enabled and endpoint.enabled:
        report.disabled += 1
        metrics.add_metric(name="WebhookEndpointsDisabled", unit=MetricUnit.Count, value=1)
        logger.error("webhook endpoint disabled", endpoint_id=endpoint.sink, failures=state.failures,
                     failing_since=state.failing_since.isoformat() if state.failing_since else None)  # fmt: skip


def relay_events(relay: Relay) -> dict[str, Any]:
    """One run: the bus, then each due endpoint, then the prune. A failure of the run itself (the
    database) is logged, counted and raised: the schedule runs it again."""
    report = RelayReport()
    try:
        if relay.bus is not None:
            relay_to_bus(relay, relay.bus, report)
        endpoints = relay.outbox.endpoints()
        now = relay.clock()
        for endpoint in endpoints:
            if endpoint.due(now) and not report.deadline:
                relay_to_endpoint(relay, endpoint, report)
        sinks = [(e.sink, e.after_event_id) for e in endpoints if e.enabled]
        if relay.bus is not None:
            sinks.append((EVENTBRIDGE_SINK, 0))
        report.pruned = relay.outbox.prune(sinks, keep_seconds=relay.keep_seconds)
    except Exception as err:
        relay_failed(err)
        raise
    logger.info("events relayed", **report.as_dict())
    metrics.add_metric(name="EventsRelayed", unit=MetricUnit.Count, value=report.eventbridge + report.webhooks)
    return report.as_dict()


def relay_failed(err: BaseException) -> None:
    """A run that failed whole (its services, the database): logged and counted."""
    error, reason = describe_failure(err)
    logger.error("events relay failed", error_type=error, reason=reason)
    metrics.add_metric(name="EventsRelayFailed", unit=MetricUnit.Count, value=1)

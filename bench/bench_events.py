"""Events relay benchmark: memory-changed events per second through the relay, per sink.

    .venv/bin/python bench/bench_events.py [--users 100] [--versions 50]

Writes users x versions through MemoryStore (each version's outbox row by migration 026's
trigger), then times one relay run (jobs/events.py, as the events function runs it) over all of
them, once per sink, the delivery marks cleared in between:
  - a bus that takes every entry in-process: the relay's own cost (outbox pages, batching, marks);
  - EventBridge on moto (in-process, with a rule and an SQS target: moto's cost dominates);
  - one webhook endpoint on 127.0.0.1 that verifies each signature (tests/webhook_receiver.py; one
    signed POST per event, in order, each marked after its answer).
It also prints what the outbox adds to a write: a version's append with the trigger and without it
(ALTER TABLE ... DISABLE TRIGGER, interleaved). Local embedded PostgreSQL unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import fresh_database, table
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.config import EventsSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.jobs.events import relay_events
from user_memory.runtime import build_events


class TakingBus:
    """Takes every entry: the relay's cost without a bus's."""

    def __init__(self) -> None:
        self.taken = 0

    def put(self, events: Any) -> set[int]:
        self.taken += len(events)
        return set()


def write_versions(pool: Any, users: int, versions: int) -> tuple[float, float]:
    """Append every version; the mean append with the outbox trigger, and without it (interleaved)."""
    store = MemoryStore(PostgresRecorder(pool))
    with_trigger: list[float] = []
    without: list[float] = []
    ids = [uuid.uuid4() for _ in range(users)]
    for v in range(1, versions + 1):
        # Half the users' versions without the trigger: what the outbox row costs a write.
        for i, user in enumerate(ids):
            doc = {"summary": f"version {v}", "parts": {f"p{j}": {"note": f"{j} {v}"} for j in range(5)}}
            plain = v % 2 == 0 and i % 2 == 0
            if plain:
                with pool.connection() as c:
                    c.execute("ALTER TABLE user_memory_snapshots DISABLE TRIGGER user_memory_snapshots_event")
            started = time.perf_counter()
            store.append(user, doc, expected_version=v - 1, source="bench")
            (without if plain else with_trigger).append(time.perf_counter() - started)
            if plain:
                with pool.connection() as c:
                    c.execute("ALTER TABLE user_memory_snapshots ENABLE TRIGGER user_memory_snapshots_event")
    return statistics.fmean(with_trigger), statistics.fmean(without)


def clear_marks(pool: Any) -> int:
    with pool.connection() as c:
        c.execute("DELETE FROM user_memory_event_deliveries")
        c.execute("DELETE FROM user_memory_webhooks")
        return int(c.execute("SELECT count(*) FROM user_memory_events").fetchone()[0])


def timed(services: Any) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    report = relay_events(services.relay)
    return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--versions", type=int, default=50)
    args = parser.parse_args()

    import boto3
    from moto import mock_aws

    from tests.webhook_receiver import Receiver, receiving

    dsn = fresh_database("user_memory_bench_events")
    pool = open_pool(dsn, size=2)
    mean_with, mean_without = write_versions(pool, args.users, args.versions)
    rows: list[tuple[str, str]] = []
    with mock_aws():
        events, secrets = boto3.client("events"), boto3.client("secretsmanager")
        sqs = boto3.client("sqs")
        events.create_event_bus(Name="bench")
        queue = sqs.create_queue(QueueName="bench")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventBusName="bench", EventPattern=json.dumps({"source": ["user-memory"]}))
        events.put_targets(Rule="all", EventBusName="bench", Targets=[{"Id": "q", "Arn": arn}])
        settings = EventsSettings.from_env({"EVENT_BUS_NAME": "bench", "EVENTS_KEEP_HOURS": "24"})

        # 1. the relay's own cost
        n = clear_marks(pool)
        services = build_events(settings, pool=pool, events_client=events, secrets_client=secrets)
        services.relay.bus = TakingBus()
        seconds, report = timed(services)
        rows.append(
            (
                "in-process bus (the relay's own cost)",
                f"{report['eventbridge']:,} events in {seconds:.2f} s: {report['eventbridge'] / seconds:,.0f} events/s",
            )
        )

        # 2. EventBridge on moto
        n = clear_marks(pool)
        services = build_events(settings, pool=pool, events_client=events, secrets_client=secrets)
        seconds, report = timed(services)
        rows.append(
            (
                "EventBridge (moto, rule + SQS target)",
                f"{report['eventbridge']:,} events in {seconds:.2f} s: {report['eventbridge'] / seconds:,.0f} events/s",
            )
        )

        # 3. one webhook endpoint that verifies every signature
        clear_marks(pool)
        receiver = Receiver()
        with receiving(receiver) as url:
            from user_memory.adapters.events import PostgresEvents, SecretsManagerSecrets
            from user_memory.domain.events import WebhookRegistry

            registry = WebhookRegistry(PostgresEvents(pool), SecretsManagerSecrets(secrets), "bench/")
            # Registered after the events: deliver from the start, as an endpoint there all along.
            endpoint, receiver.secret = registry.register(url, "bench", "bench")
            with pool.connection() as c:
                c.execute("UPDATE user_memory_webhooks SET after_event_id = 0 WHERE id = %s", (endpoint.id,))
            no_bus = EventsSettings.from_env({})
            services = build_events(no_bus, pool=pool, secrets_client=secrets)
            seconds, report = timed(services)
        assert receiver.refused == 0 and len(receiver.accepted) == report["webhooks"]
        rows.append(
            (
                "one webhook, signed POSTs verified (127.0.0.1)",
                f"{report['webhooks']:,} events in {seconds:.2f} s: {report['webhooks'] / seconds:,.0f} events/s",
            )
        )
    pool.close()
    table(f"events relay: {args.users} users x {args.versions} versions = {n:,} events, one relay run per sink", rows)
    table(
        "what the outbox row adds to a version's append (MemoryStore.append, interleaved)",
        [
            ("with the outbox trigger", f"mean {mean_with * 1000:.3f} ms"),
            ("trigger disabled", f"mean {mean_without * 1000:.3f} ms"),
            ("difference", f"{(mean_with - mean_without) * 1000:+.3f} ms"),
        ],
    )


if __name__ == "__main__":
    main()

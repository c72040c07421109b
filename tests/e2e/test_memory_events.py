"""Memory-changed events end to end: versions written through the API's real handler, the events
function's real handler invoked with a scheduled event, moto's EventBridge (a bus, a rule, an SQS
queue as its target, to see what the bus delivered), moto's Secrets Manager for the signing
secrets, and a local receiver that verifies each request as the Standard Webhooks specification says.

Time is simulated: the relay's clock (backoff, the signature's timestamp) and the receiver's are
one clock the test moves, so an hour of an endpoint being down takes no wall-clock hour.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from psycopg_pool import ConnectionPool
from user_memory.adapters.events import PostgresEvents
from user_memory.adapters.postgres import open_pool
from user_memory.config import ApiSettings, EventsSettings
from user_memory.http.app import MemoryApi, create_api
from user_memory.runtime import EventsServices, build_api, build_events
from user_memory_functions.events.app import handler
from user_memory_local.poller import FakeLambdaContext

from tests.api_client import ApiClient
from tests.conftest import EVENTS
from tests.e2e.helpers import OPERATOR, merge, new_database, ok, run
from tests.webhook_receiver import Receiver, receiving

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

SCHEDULED = json.loads((EVENTS / "events_scheduled_event.json").read_text())
BUS = "memory"


class Clock:
    """The one clock of the relay and the receiver, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(scope="module")
def database(database_url: str) -> Iterator[str]:
    """A migrated database of this module's own: the relay sends every event it holds."""
    with new_database(database_url, "user_memory_e2e_events", migrated=True) as url:
        yield url


@pytest.fixture(scope="module")
def owner_pool(database: str) -> Iterator[ConnectionPool]:
    p = open_pool(database, size=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def service_pool(database: str) -> Iterator[ConnectionPool]:
    """The relay's connections: the service's rights, as DATABASE_ROLE gives them in Lambda."""
    p = open_pool(database, size=2, role="service_role")
    yield p
    p.close()


@pytest.fixture(autouse=True)
def empty_outbox(owner_pool: ConnectionPool) -> None:
    """Each test starts with no event and no endpoint (the versions of other tests stay)."""
    with owner_pool.connection() as c:
        c.execute("DELETE FROM user_memory_events")
        c.execute("DELETE FROM user_memory_webhooks")


@pytest.fixture
def aws(aws_env: None) -> Iterator[dict[str, Any]]:
    """moto: the bus, a rule on the service's events with an SQS queue as its target, Secrets Manager."""
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        events.create_event_bus(Name=BUS)
        queue = sqs.create_queue(QueueName="memory-changed")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        pattern = {"source": ["user-memory"], "detail-type": ["Memory Changed"]}
        events.put_rule(Name="memory-changed", EventBusName=BUS, EventPattern=json.dumps(pattern))
        events.put_targets(Rule="memory-changed", EventBusName=BUS, Targets=[{"Id": "queue", "Arn": arn}])
        yield {
            "events": events,
            "sqs": sqs,
            "queue": queue,
            "secrets": boto3.client("secretsmanager", region_name="us-east-1"),
        }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(owner_pool: ConnectionPool, aws: dict[str, Any]) -> MemoryApi:
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor", "WEBHOOK_SECRET_PREFIX": "test/webhooks/"})
    return create_api(build_api(settings, pool=owner_pool), settings)


@pytest.fixture
def operator(api: MemoryApi) -> ApiClient:
    return ApiClient(api, uuid.uuid4(), scopes=OPERATOR)


def relay_services(service_pool: ConnectionPool, aws: dict[str, Any], clock: Clock, **env: str) -> EventsServices:
    settings = EventsSettings.from_env({"EVENT_BUS_NAME": BUS, **{k.upper(): v for k, v in env.items()}})
    return build_events(
        settings, pool=service_pool, events_client=aws["events"], secrets_client=aws["secrets"], clock=clock
    )


def invoke(services: EventsServices) -> dict[str, Any]:
    """The events function's handler with a scheduled event, as Lambda runs it."""
    context = FakeLambdaContext(function_name="user-memory-events", timeout_seconds=60)
    return handler(SCHEDULED, context, services=services)


def bus_deliveries(aws: dict[str, Any]) -> list[dict[str, Any]]:
    """What the rule's target received: each event's detail, in arrival order."""
    got: list[dict[str, Any]] = []
    while True:
        answer = aws["sqs"].receive_message(QueueUrl=aws["queue"], MaxNumberOfMessages=10)
        messages = answer.get("Messages", [])
        if not messages:
            return got
        for m in messages:
            envelope = json.loads(m["Body"])
            assert (envelope["source"], envelope["detail-type"]) == ("user-memory", "Memory Changed")
            got.append(envelope["detail"])
            aws["sqs"].delete_message(QueueUrl=aws["queue"], ReceiptHandle=m["ReceiptHandle"])


def per_user(details: list[dict[str, Any]]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for d in details:
        seen.setdefault(d["user_id"], []).append(d["version"])
    return seen


def register(operator: ApiClient, receiver: Receiver, url: str) -> dict[str, Any]:
    created = ok(operator.post("/admin/webhooks", json_body={"url": url, "description": "test receiver"}))
    receiver.secret = created["secret"]
    return created["webhook"]


def write(api: MemoryApi, user: uuid.UUID, n: int, start: int = 0) -> None:
    client = ApiClient(api, user)
    for i in range(start, start + n):
        ok(merge(client, {"personal_info": {"name": f"name {i}"}}))


def test_every_version_reaches_the_bus_and_the_webhook_once_signed_and_in_order_per_user(
    api, operator, aws, clock, service_pool
):
    # Given a receiver registered by an operator, and two users writing through the API
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        register(operator, receiver, url)
        ann, bob = uuid.uuid4(), uuid.uuid4()
        write(api, ann, 3)
        write(api, bob, 2)
        write(api, ann, 2, start=3)
        services = relay_services(service_pool, aws, clock)
        # When the events function runs, then runs again
        report = invoke(services)
        again = invoke(services)
    # Then the bus delivered each version once, in order per user, with no content
    details = bus_deliveries(aws)
    assert per_user(details) == {str(ann): [1, 2, 3, 4, 5], str(bob): [1, 2]}
    assert all("personal_info" in d["sections"] for d in details)
    assert all(d["source"] == "api" and "name" not in json.dumps(d) for d in details)
    # And the webhook accepted each once, every signature verified, in order per user
    assert receiver.versions() == {str(ann): [1, 2, 3, 4, 5], str(bob): [1, 2]}
    assert receiver.refused == 0 and len({i for i, _ in receiver.accepted}) == 7
    assert {p["type"] for _, p in receiver.accepted} == {"memory.changed"}
    # And the second run had nothing left to send
    assert (report["eventbridge"], report["webhooks"]) == (7, 7)
    assert (again["eventbridge"], again["webhooks"]) == (0, 0)


class CrashAfterSending:
    """The outbox, except that the first marking after a send fails as a relay killed there would."""

    def __init__(self, outbox: PostgresEvents) -> None:
        self.outbox = outbox
        self.crashed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.outbox, name)

    def mark_delivered(self, sink: str, event_ids: Any) -> int:
        if not self.crashed and sink != "eventbridge":
            self.crashed = True
            raise RuntimeError("the relay stopped between sending and marking")
        return self.outbox.mark_delivered(sink, event_ids)


def test_a_relay_that_stops_between_sending_and_marking_sends_again_and_loses_nothing(
    api, operator, aws, clock, service_pool
):
    # Given three versions and an endpoint, and a relay that dies right after its first POST
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        register(operator, receiver, url)
        user = uuid.uuid4()
        write(api, user, 3)
        services = relay_services(service_pool, aws, clock)
        crashing = CrashAfterSending(services.relay.outbox)  # type: ignore[arg-type]
        services.relay.outbox = crashing
        # When it runs (and fails), then runs again
        with pytest.raises(RuntimeError, match="between sending and marking"):
            invoke(services)
        invoke(services)
    # Then the events sent before the crash came again (same webhook-ids, in order), and none was lost
    ids = [i for i, _ in receiver.accepted]
    assert receiver.versions() == {str(user): [1, 2, 3, 1, 2, 3]}
    assert ids[:3] == ids[3:] and len(set(ids)) == 3
    assert per_user(bus_deliveries(aws)) == {str(user): [1, 2, 3]}


def test_a_receiver_down_for_an_hour_is_retried_with_backoff_then_gets_everything_in_order(
    api, operator, aws, clock, service_pool
):
    # Given an endpoint that is down, and versions written meanwhile
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        webhook = register(operator, receiver, url)
        user = uuid.uuid4()
        write(api, user, 2)
        services = relay_services(service_pool, aws, clock)
        receiver.down = True
        # When the relay runs every minute for an hour of simulated time (more versions come in)
        for minute in range(60):
            invoke(services)
            if minute == 30:
                write(api, user, 1, start=2)
            clock.advance(minutes=1)
        tried_while_down = receiver.attempts
        state = ok(operator.get(f"/admin/webhooks/{webhook['id']}"))
        # Then it was retried with backoff (30 s doubling: far fewer than one try a minute), still enabled
        assert 5 <= tried_while_down <= 8
        assert state["enabled"] is True and state["failures"] == tried_while_down
        assert state["last_error"] == "HTTP 503" and state["next_attempt_at"] is not None
        # When it is up again and the backoff has passed
        receiver.down = False
        for _ in range(65):
            invoke(services)
            clock.advance(minutes=1)
    # Then every event arrived once, in order, and the endpoint is healthy again
    assert receiver.versions() == {str(user): [1, 2, 3]}
    healthy = ok(operator.get(f"/admin/webhooks/{webhook['id']}"))
    assert (healthy["enabled"], healthy["failures"], healthy["failing_since"]) == (True, 0, None)


def test_an_endpoint_failing_past_the_policy_is_disabled_and_listed_as_disabled(
    api, operator, aws, clock, service_pool
):
    # Given a policy that gives up after half an hour, and an endpoint down for an hour
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        webhook = register(operator, receiver, url)
        user = uuid.uuid4()
        write(api, user, 1)
        services = relay_services(service_pool, aws, clock, webhook_disable_after_hours="0.5")
        receiver.down = True
        for _ in range(60):
            invoke(services)
            clock.advance(minutes=1)
        attempts = receiver.attempts
        # Then it is disabled, listed so with the reason, and no longer tried
        listed = ok(operator.get("/admin/webhooks"))["webhooks"]
        assert [(w["id"], w["enabled"]) for w in listed] == [(webhook["id"], False)]
        assert listed[0]["disabled_reason"].startswith("failing since") and "HTTP 503" in listed[0]["disabled_reason"]
        receiver.down = False
        invoke(services)
        assert receiver.attempts == attempts
        # When an operator enables it again
        ok(operator.post(f"/admin/webhooks/{webhook['id']}/enable"))
        invoke(services)
    # Then what it missed (still kept) is delivered
    assert receiver.versions() == {str(user): [1]}


def test_erase_stops_a_users_events(api, operator, aws, clock, service_pool):
    # Given two users' versions not yet relayed, and an endpoint
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        register(operator, receiver, url)
        erased, kept = uuid.uuid4(), uuid.uuid4()
        write(api, erased, 2)
        write(api, kept, 1)
        # When an operator erases one before the relay runs
        ok(operator.delete(f"/admin/users/{erased}"))
        invoke(relay_services(service_pool, aws, clock))
    # Then nothing of the erased user leaves, the other's events do
    assert per_user(bus_deliveries(aws)) == {str(kept): [1]}
    assert receiver.versions() == {str(kept): [1]}


class RefusingBus:
    """The real bus, except that it refuses one user's entries the first time it sees them."""

    def __init__(self, bus: Any, user: uuid.UUID) -> None:
        self.bus = bus
        self.user = user
        self.refused = False

    def put(self, events: Any) -> set[int]:
        if not self.refused and any(e.user_id == self.user for e in events):
            self.refused = True
            mine = {e.id for e in events if e.user_id == self.user}
            return mine | self.bus.put([e for e in events if e.id not in mine])
        return self.bus.put(events)


def test_a_user_whose_event_the_bus_refused_waits_and_the_others_go_on(api, aws, clock, service_pool):
    # Given two users' versions and a bus that refuses the first user's first entry once
    ann, bob = uuid.uuid4(), uuid.uuid4()
    write(api, ann, 3)
    write(api, bob, 2)
    services = relay_services(service_pool, aws, clock)
    assert services.relay.bus is not None
    services.relay.bus = RefusingBus(services.relay.bus, ann)
    # When the relay runs
    first = invoke(services)
    # Then the other user's events went, the refused user's later ones waited (never out of order)
    assert per_user(bus_deliveries(aws)) == {str(bob): [1, 2]}
    assert first["failed"] == 1
    # And the next run sends the waiting user's in order
    invoke(services)
    assert per_user(bus_deliveries(aws)) == {str(ann): [1, 2, 3]}


def test_the_signing_secret_is_in_secrets_manager_only(api, operator, aws, owner_pool, service_log):
    # Given an endpoint registered by an operator
    created = ok(operator.post("/admin/webhooks", json_body={"url": "https://hooks.example/memory"}))
    secret, webhook = created["secret"], created["webhook"]
    # Then Secrets Manager holds it under the deployment's prefix
    stored = aws["secrets"].get_secret_value(SecretId=f"test/webhooks/{webhook['id']}")["SecretString"]
    assert stored == secret and secret.startswith("whsec_")
    # And no row of the database and no log line carries it
    with owner_pool.connection() as c:
        rows = c.execute("SELECT row_to_json(w)::text FROM user_memory_webhooks w").fetchall()
    assert rows and all(secret not in r[0] for r in rows)
    assert all(secret not in line for line in service_log.lines)
    # When the endpoint is deleted, its secret goes too (scheduled for deletion) and it is not listed
    ok(operator.delete(f"/admin/webhooks/{webhook['id']}"))
    assert "DeletedDate" in aws["secrets"].describe_secret(SecretId=f"test/webhooks/{webhook['id']}")
    assert ok(operator.get("/admin/webhooks"))["webhooks"] == []


@pytest.mark.parametrize(
    "url",
    ["http://hooks.example/memory", "ftp://hooks.example", "https://user:pw@hooks.example/x", "not a url"],
)
def test_an_endpoint_url_that_is_not_https_is_refused_and_nothing_is_stored(operator, aws, url):
    reply = operator.post("/admin/webhooks", json_body={"url": url})
    assert reply.status in (400, 422), reply.text
    assert ok(operator.get("/admin/webhooks"))["webhooks"] == []
    assert aws["secrets"].list_secrets()["SecretList"] == []


def test_webhook_routes_are_for_operators_only(api):
    user = ApiClient(api, uuid.uuid4())
    assert user.get("/admin/webhooks").status == 403
    assert user.post("/admin/webhooks", json_body={"url": "https://hooks.example"}).status == 403


def test_an_unknown_endpoint_is_404(operator):
    assert operator.post(f"/admin/webhooks/{uuid.uuid4()}/disable").status == 404
    assert operator.delete("/admin/webhooks/not-a-uuid").status == 404


def test_the_command_line_registers_an_endpoint_and_relays_to_it(api, aws, database, capsys):
    # Given an endpoint registered with the CLI (its secret in Secrets Manager) and a version
    receiver = Receiver()
    with receiving(receiver) as url:
        added = run(capsys, "webhooks", "add", url, "--description", "cli", "--database-url", database)
        assert added.code == 0, added.err
        created = json.loads(added.out)
        receiver.secret = created["secret"]
        user = uuid.uuid4()
        write(api, user, 1)
        # When the CLI relays once
        relayed = run(capsys, "relay-events", "--event-bus", BUS, "--database-url", database)
        assert relayed.code == 0, relayed.err
        # Then the endpoint got the event, signed, and the bus too
        assert receiver.versions() == {str(user): [1]}
        assert json.loads(relayed.out)["webhooks"] == 1
    assert per_user(bus_deliveries(aws)) == {str(user): [1]}
    # And the list shows the endpoint, without its secret; disable and delete answer
    listed = run(capsys, "webhooks", "list", "--database-url", database)
    assert created["secret"] not in listed.out and json.loads(listed.out)["webhooks"][0]["description"] == "cli"
    hook = created["webhook"]["id"]
    assert json.loads(run(capsys, "webhooks", "disable", hook, "--database-url", database).out)["enabled"] is False
    assert json.loads(run(capsys, "webhooks", "delete", hook, "--database-url", database).out)["deleted"] is True


def test_an_invocation_out_of_time_starts_no_call_and_the_next_sends_everything(
    api, operator, aws, clock, service_pool
):
    # Given a version, an endpoint, and an invocation with less time left than the margin
    receiver = Receiver(clock)
    with receiving(receiver) as url:
        register(operator, receiver, url)
        user = uuid.uuid4()
        write(api, user, 2)
        services = relay_services(service_pool, aws, clock)
        late = FakeLambdaContext(function_name="user-memory-events", timeout_seconds=1.5)  # margin: 2 s
        # When it runs
        report = handler(SCHEDULED, late, services=services)
        # Then it started no call and says so, and nothing was marked
        assert report["deadline"] is True and (report["eventbridge"], report["webhooks"]) == (0, 0)
        assert receiver.attempts == 0 and bus_deliveries(aws) == []
        # And the next invocation, on time, sends every event
        invoke(services)
    assert receiver.versions() == {str(user): [1, 2]}
    assert per_user(bus_deliveries(aws)) == {str(user): [1, 2]}

"""What the end-to-end modules share besides fixtures (those are in conftest.py): the API's request
and answer helpers, Google Calendar's event resources, the daily job's and the conversations'
messages, the stack of queues and handlers the jobs run on, the command line's runner, and a
database of a test's own.

Test modules import from here, never from each other.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql
from user_memory.adapters.companion import PostgresCompanion
from user_memory.adapters.conversations import PostgresConversations
from user_memory.adapters.migrations import migrate
from user_memory.adapters.postgres import PostgresActivity
from user_memory.config import FanoutSettings, WorkerSettings
from user_memory.domain.conversations.model import ConversationKey, NewMessage
from user_memory.domain.model import Activity
from user_memory.http.app import MemoryApi
from user_memory.http.problems import TYPE_BASE
from user_memory.runtime import WorkerServices, build_fanout, build_worker
from user_memory_functions.fanout.app import handler as fanout_handler
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local import cli
from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues, sqs_record

from tests import owners
from tests.api_client import ApiClient, Reply
from tests.fake_openai import completion, fake_openai_server

# -- the service's log -------------------------------------------------------------------------------


class Logs(logging.Handler):
    """Collects the service's log records (Powertools keeps keyword fields as record attributes)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, message: str) -> list[dict[str, Any]]:
        return [r.__dict__ for r in self.records if r.getMessage() == message]

    @property
    def lines(self) -> list[str]:
        """Every record with its keyword fields, as a JSON line."""
        return [json.dumps(r.__dict__, default=str) for r in self.records]


# -- the API ---------------------------------------------------------------------------------------

JSON_PATCH = {"Content-Type": "application/json-patch+json"}
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
OPERATOR = "user-memory/operator"
SERVER_SECRET = "e2e-server-secret-of-at-least-32-bytes"  # ApiServer's in the tests that serve HTTP

ApiFactory = Callable[..., MemoryApi]


def new_client(api: MemoryApi, **kw: Any) -> ApiClient:
    """A client acting as a new user (a fresh id)."""
    return ApiClient(api, uuid.uuid4(), **kw)


def assert_problem(reply: Reply, status: int, slug: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem of this status (and kind): the media type and the four members."""
    assert reply.status == status, reply.text
    assert reply.content_type == "application/problem+json", reply.headers
    body = reply.json
    assert {"type", "title", "status", "detail"} <= body.keys(), body
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    if slug is not None:
        assert body["type"] == TYPE_BASE + slug, body
    return body


def ok(reply: Reply, status: int = 200) -> Any:
    assert reply.status == status, reply.text
    assert reply.content_type == "application/json", reply.headers
    return reply.json


def etag(reply: Reply) -> str | None:
    return reply.headers.get("ETag") or reply.headers.get("etag")


def merge(client: ApiClient, body: Any, **headers: str) -> Reply:
    return client.patch("/me/memory", body=json.dumps(body), headers={**MERGE_PATCH, **headers})


def json_patch(client: ApiClient, ops: Any, **headers: str) -> Reply:
    return client.patch("/me/memory", body=json.dumps(ops), headers={**JSON_PATCH, **headers})


def removed(
    *,
    heads: int,
    snapshots: int,
    activity: int,
    kv: int,
    memories: int = 0,
    messages: int = 0,
    conversations: int = 0,
    items: int = 0,
    ratings: int = 0,
    digests: int = 0,
    exports: int = 0,
    export_objects: int = 0,
    events: int | None = None,
    deliveries: int = 0,
    pending_webhook_deliveries: int = 0,
    imports: int = 0,
) -> dict[str, int]:
    """What an erasure reports as removed, per relation (and the export objects it deleted); the
    outbox's events are one per version unless said (migration 029)."""
    tables = ("user_memory_heads", "user_memory_snapshots", "user_activity", "user_memory_kv")
    tables += ("conversation_memories", "conversation_messages", "conversations")
    tables += ("memory_items", "memory_embeddings", "feedback_ratings", "daily_digests")
    tables += ("user_memory_exports", "export_objects")
    counts = (heads, snapshots, activity, kv, memories, messages, conversations, items, 0, ratings, digests)
    counts += (exports, export_objects)
    tables += ("user_memory_events", "user_memory_event_deliveries", "pending_webhook_deliveries")
    tables += ("user_memory_imports",)
    counts += (snapshots if events is None else events, deliveries, pending_webhook_deliveries, imports)
    return dict(zip(tables, counts, strict=True))


def head_version(client: ApiClient) -> int:
    return ok(client.get("/me/memory"))["version"]


def version_count(client: ApiClient) -> int:
    return len(ok(client.get("/me/memory/history", query={"limit": 500}))["items"])


def activity(external_id: str, occurred_at: str = "2026-11-23T10:00:00Z", **kw: Any) -> dict[str, Any]:
    """An item of POST /me/activity."""
    return {
        "occurred_at": occurred_at,
        "kind": "lesson",
        "payload": {"topic": "fractions"},
        "external_id": external_id,
        **kw,
    }


# -- Google Calendar's resources ---------------------------------------------------------------------


def google_event(event_id: str, **fields: Any) -> dict[str, Any]:
    """An event resource as Google Calendar's Events.list answers it."""
    return {
        "kind": "calendar#event",
        "etag": '"3391234567890000"',
        "id": event_id,
        "status": "confirmed",
        "htmlLink": f"https://www.google.com/calendar/event?eid={event_id}",
        "created": "2026-05-01T08:00:00.000Z",
        "updated": "2026-05-02T08:00:00.000Z",
        "summary": "Something",
        "creator": {"email": "calendar-owner@example.com", "self": True},
        "organizer": {"email": "calendar-owner@example.com", "self": True},
        "start": {"dateTime": "2026-06-05T10:00:00+01:00", "timeZone": "Europe/Lisbon"},
        "end": {"dateTime": "2026-06-05T11:00:00+01:00", "timeZone": "Europe/Lisbon"},
        "iCalUID": f"{event_id}@google.com",
        "sequence": 0,
        "reminders": {"useDefault": True},
        "eventType": "default",
        **fields,
    }


def events_list_page(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A page of Events.list holding `items`."""
    return {
        "kind": "calendar#events",
        "etag": '"p3"',
        "summary": "calendar-owner@example.com",
        "description": "",
        "updated": "2026-05-10T08:00:00.000Z",
        "timeZone": "Europe/Lisbon",
        "accessRole": "owner",
        "defaultReminders": [{"method": "popup", "minutes": 10}],
        "nextSyncToken": "CPDAlvWDx70CEPDAlvWDx70CGAU=",
        "items": items,
    }


# A timed event with attendees (one of them with an email that must never reach the index).
TIMED = google_event(
    "7bq3m2timed",
    summary="Quarterly planning",
    description="Bring the budget numbers",
    location="Office, room 2",
    attendees=[
        {"email": "calendar-owner@example.com", "self": True, "responseStatus": "accepted"},
        {"email": "colleague@example.com", "displayName": "Team lead", "responseStatus": "needsAction"},
    ],
    start={"dateTime": "2026-06-04T14:00:00+01:00", "timeZone": "Europe/Lisbon"},
    end={"dateTime": "2026-06-04T15:30:00+01:00", "timeZone": "Europe/Lisbon"},
)


# -- the daily job's messages --------------------------------------------------------------------------


def seed_users(pool: Any, n: int, day: datetime, tag: str) -> list[uuid.UUID]:
    """`n` new users, each with a day of activity (a part named, a goal set, a session) on `day`."""
    users = [uuid.uuid4() for _ in range(n)]
    steps = [
        ("part_named", {"part_id": "planner", "name": "Planner"}),
        ("goal_set", {"part_id": "planner", "goal": "plan"}),
        ("session", {}),
    ]
    PostgresActivity(pool).record(
        Activity(
            user_id=u,
            occurred_at=day + timedelta(hours=2 + i),
            kind=kind,
            payload=payload,
            source=tag,
            external_id=f"{u}:{i}",
        )
        for u in users
        for i, (kind, payload) in enumerate(steps)
    )
    return users


def refresh_body(users: Any, day: datetime, run_key: str) -> str:
    """A refresh_user message for `users` over the day from `day`."""
    return json.dumps(
        {
            "type": "refresh_user",
            "user_ids": [str(u) for u in users],
            "run_key": run_key,
            "window": {"start": day.isoformat(), "end": (day + timedelta(days=1)).isoformat()},
        }
    )


def sqs_event(*bodies: str) -> dict[str, Any]:
    """The worker's SQS event for these bodies (message ids m0, m1, ...)."""
    return {"Records": [sqs_record(message_id=f"m{i}", body=body) for i, body in enumerate(bodies)]}


def naming(bodies: list[dict[str, Any]], user: uuid.UUID) -> list[dict[str, Any]]:
    """The refresh_user bodies that name `user`."""
    return [b for b in bodies if str(user) in b.get("user_ids", [])]


def emitted_metrics(capsys: Any) -> dict[str, Any]:
    """The one EMF document (Powertools' metrics) printed since the last read of capsys."""
    [emf] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith('{"_aws"')]
    return emf  # type: ignore[no-any-return]


# -- conversations -----------------------------------------------------------------------------------

MEMORY = {
    "discussed": "Training for a half marathon with a sore knee.",
    "learned_about_user": ["Runs in the mornings"],
    "decisions": ["Lower the long run"],
    "open_loops": ["Book a physio"],
    "tone": "determined",
}


def conversation(
    store: PostgresConversations,
    *,
    quiet_for: timedelta = timedelta(hours=3),
    user: uuid.UUID | None = None,
    cid: str | None = None,
) -> ConversationKey:
    """A conversation of four messages whose last one occurred `quiet_for` ago."""
    user = user or uuid.uuid4()
    cid = cid or f"conv-{uuid.uuid4()}"
    last = datetime.now(UTC) - quiet_for
    lines = [
        ("user", "I'm training for a half marathon and my knee hurts."),
        ("assistant", "Let's lower the long run this week."),
        ("user", "I'll try it. Can you remind me to book a physio tomorrow?"),
        ("assistant", "I will."),
    ]
    store.record(
        [
            NewMessage(
                user_id=user,
                conversation_id=cid,
                message_id=f"{cid}:{n}",
                role=role,
                text=text,
                occurred_at=last - timedelta(minutes=len(lines) - 1 - n),
                source="chat",
            )
            for n, (role, text) in enumerate(lines)
        ]
    )
    return ConversationKey(user, cid)


def batch_body(keys: list[ConversationKey], attempt: int = 0) -> dict[str, Any]:
    """A GENERATE_MEMORY_BATCH body naming these conversations."""
    items = [{"user_id": str(k.user_id), "conversation_id": k.conversation_id} for k in keys]
    return {"task_type": "GENERATE_MEMORY_BATCH", "conversations": items, **({"attempt": attempt} if attempt else {})}


def batch_event(*batches: list[ConversationKey], attempt: int = 0) -> dict[str, Any]:
    """The worker's SQS event with one GENERATE_MEMORY_BATCH record per batch."""
    return sqs_event(*(json.dumps(batch_body(keys, attempt)) for keys in batches))


def named(body: dict[str, Any]) -> list[ConversationKey]:
    """The conversations a GENERATE_MEMORY_BATCH body names."""
    return [ConversationKey(uuid.UUID(i["user_id"]), i["conversation_id"]) for i in body["conversations"]]


def memory_reply(**changes: Any) -> dict[str, Any]:
    """The model's answer for a conversation: MEMORY with `changes`."""
    return completion(json.dumps({**MEMORY, **changes}), prompt_tokens=300, completion_tokens=80)


def worker_services(database_url: str, pool: Any, **env: Any) -> WorkerServices:
    """The worker's services on the test database, with settings from `env` alone (never the
    process's environment)."""
    return build_worker(WorkerSettings.from_env({}, database_url=database_url, **env), pool=pool)


# -- the jobs' stack ---------------------------------------------------------------------------------

MAX_RECEIVES = 5


class Stack:
    """moto's queues (a worker queue of its own and its DLQ); the fan-out and the worker bound to
    services on the test database. The worker (rule-based unless `worker_env` says otherwise) sends
    its re-sends to the queue, undelayed."""

    def __init__(self, database_url: str, pool: Any, sqs: Any, **worker_env: Any) -> None:
        self.sqs = sqs
        self.pool = pool
        self.database_url = database_url
        self.queue_url, self.dlq_url = create_queues(
            sqs, name=f"w-{uuid.uuid4().hex[:8]}", max_receive_count=MAX_RECEIVES
        )
        self.fanout_services = build_fanout(
            FanoutSettings.from_env({}, database_url=database_url, queue_url=self.queue_url), sqs_client=sqs, pool=pool
        )
        self.worker_services = self.build_worker(**worker_env)
        self.store = self.worker_services.store
        self.conversations = PostgresConversations(pool)
        self.companion = PostgresCompanion(pool)

    def build_worker(self, **env: Any) -> WorkerServices:
        settings = WorkerSettings.from_env(
            {},
            **{
                "database_url": self.database_url,
                "summarizer": "rules",
                "queue_url": self.queue_url,
                "conversation_retry_delay_seconds": 0,
                **env,
            },
        )
        return build_worker(settings, pool=self.pool, sqs_client=self.sqs)

    def fanout(self, event: Any) -> dict[str, Any]:
        """The fan-out handler's answer to `event`."""
        return fanout_handler(event, FakeLambdaContext(function_name="fanout"), services=self.fanout_services)

    def fanned_out(self, event: Any) -> list[dict[str, Any]]:
        """Run the fan-out handler; every body it queued (the queue is left empty)."""
        self.fanout(event)
        bodies = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
            messages = got.get("Messages", [])
            if not messages:
                return bodies
            for m in messages:
                bodies.append(json.loads(m["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    def worker(self, event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        """The worker handler's answer to an SQS event."""
        return worker_handler(event, context or FakeLambdaContext(), services=self.worker_services)

    def deliver(self, *bodies: dict[str, Any], services: WorkerServices | None = None) -> dict[str, Any]:
        """The worker handler's answer to these bodies in one event (the stack's services unless given)."""
        event = sqs_event(*(json.dumps(b) for b in bodies))
        return worker_handler(event, FakeLambdaContext(), services=services or self.worker_services)

    def poller(self) -> LambdaSqsPoller:
        return LambdaSqsPoller(self.sqs, self.queue_url, self.dlq_url, self.worker, max_receive_count=MAX_RECEIVES)

    def queued(self) -> list[dict[str, Any]]:
        """Bodies waiting on the worker queue (received and left for the poller again)."""
        out = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
            messages = got.get("Messages", [])
            if not messages or len(out) > 1000:
                return out
            out += [json.loads(m["Body"]) for m in messages]
            if len(messages) < 10:
                return out

    def memory(self, key: ConversationKey) -> tuple[dict[str, Any], int, datetime] | None:
        """The conversation's memory, the last message it covers and when it was updated."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT memory, last_message_seq, updated_at FROM conversation_memories"
                " WHERE user_id = %s AND conversation_id = %s",
                (key.user_id, key.conversation_id),
            ).fetchone()
        return (row[0], row[1], row[2]) if row else None


@contextmanager
def openai_stack(database_url: str, pool: Any, **worker_env: Any) -> Iterator[tuple[Stack, Any]]:
    """moto and the local fake OpenAI endpoint for the block: a stack whose worker summarizes
    through the real `openai` client against the endpoint, and the endpoint."""
    with mock_aws(), fake_openai_server() as (fake, url):
        sqs = boto3.client("sqs", region_name="us-east-1")
        yield (
            Stack(database_url, pool, sqs, summarizer="openai", openai_base_url=url, openai_api_key="k", **worker_env),
            fake,
        )


# -- the command line ----------------------------------------------------------------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """`user-memory *argv` in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def assert_one_error_line(result: Run, *fragments: str) -> None:
    assert result.code != 0
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- a database of a test's own --------------------------------------------------------------------


def with_dbname(url: str, name: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(url)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


@contextmanager
def new_database(database_url: str, name: str, *, migrated: bool) -> Iterator[str]:
    """A database of its own on the test server, dropped afterwards (the shared one when CREATE
    DATABASE is not allowed)."""
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            owners.drop_database(conn, name)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege:
        if not migrated:
            pytest.skip("needs CREATE DATABASE")
        yield database_url
        return
    url = with_dbname(database_url, name)
    try:
        if migrated:
            migrate(url)
        yield url
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            owners.drop_database(conn, name)


# -- connections: the pool's backends, password logins ---------------------------------------------


def tagged(url: str, application_name: str, **drop: bool) -> str:
    """`url` whose connections carry `application_name` (so a test finds its pool's backends),
    without the parameters named in `drop` (user=True, password=True: an endpoint for a login)."""
    params = {k: v for k, v in psycopg.conninfo.conninfo_to_dict(url).items() if not drop.get(k)}
    params["application_name"] = application_name
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def terminate_backends(
    admin_url: str, application_name: str, *, seconds: float = 10.0, by: str = "application_name"
) -> int:
    """Terminate every backend carrying `application_name` (or whose `by` column of
    pg_stat_activity, e.g. usename, is that value) as the cluster's administrator (a non-superuser
    owner may end only its own role's), and wait until they are gone; how many."""
    where = sql.SQL("SELECT {} FROM pg_stat_activity WHERE {} = %s")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            where.format(sql.SQL("count(pg_terminate_backend(pid))"), sql.Identifier(by)), (application_name,)
        ).fetchone()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            left = conn.execute(where.format(sql.SQL("count(*)"), sql.Identifier(by)), (application_name,)).fetchone()
            if left and left[0] == 0:
                break
            time.sleep(0.01)
    return int(row[0]) if row else 0


@contextmanager
def password_logins(admin_url: str, *names: str) -> Iterator[None]:
    """The embedded cluster trusts every local connection; these logins must give their password
    (SCRAM) while the block runs, as on RDS Proxy: the cluster's pg_hba.conf gets a line for each
    first, reloaded, and is put back after."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(row[0])
        before = hba.read_text()
        lines = [f"{kind} all {name} {where} scram-sha-256" for name in names for kind, where in PASSWORD_LINES]
        hba.write_text("\n".join(lines) + "\n" + before)
        try:
            conn.execute("SELECT pg_reload_conf()")
            _until_refused(psycopg.conninfo.make_conninfo(admin_url, user=names[0], password="not-the-password"))
            yield
        finally:
            hba.write_text(before)
            conn.execute("SELECT pg_reload_conf()")


PASSWORD_LINES = (("local", ""), ("host", "127.0.0.1/32"), ("host", "::1/128"))


def _until_refused(url: str, seconds: float = 10.0) -> None:
    """Wait until the server has read its new pg_hba.conf (a reload is asynchronous): a wrong
    password is refused."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            psycopg.connect(url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return
        time.sleep(0.02)
    raise AssertionError("the server did not start asking for passwords")

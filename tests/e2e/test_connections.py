"""How every function connects to PostgreSQL, through its real handler: a connection string that
cannot be parsed never puts its password in a log line or an answer; a pooled connection the
server (or RDS Proxy, after 30 idle minutes) closed between requests is replaced, not a failure;
a login's password rotated (ALTER ROLE, then its secret) costs no request once the new secret is
visible: the DSN is built at run time from the login's secret, read anew after a refusal."""

from __future__ import annotations

import json
import secrets
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql
from user_memory.adapters.migrations import create_login
from user_memory.config import ApiSettings, FanoutSettings, WorkerSettings
from user_memory.errors import ConfigError
from user_memory.http.app import create_api
from user_memory.runtime import build_api, build_fanout, build_worker, database_conninfo
from user_memory_functions.api import app as api_app
from user_memory_functions.fanout import app as fanout_app
from user_memory_functions.migrate import app as migrate_app
from user_memory_functions.retention import app as retention_app
from user_memory_functions.worker import app as worker_app
from user_memory_local.apigw import http_event
from user_memory_local.poller import FakeLambdaContext, create_queues

from tests.api_client import ApiClient
from tests.conftest import EVENTS
from tests.e2e.helpers import (
    Logs,
    password_logins,
    refresh_body,
    seed_users,
    sqs_event,
    tagged,
    terminate_backends,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.usefixtures("aws_env"),
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

# -- a password in a connection string that cannot be parsed -----------------------------------------

PASSWORD = "Pw-" + secrets.token_hex(12)
# A bad percent-escape right after the password: libpq's reason quotes the whole token.
MALFORMED_URL = f"postgresql://user_memory_api_login:{PASSWORD}%zz@proxy.internal:5432/user_memory?sslmode=require"


def _api_request() -> dict[str, Any]:
    claims = {"sub": str(uuid.uuid4()), "iss": "https://issuer.test", "aud": "user-memory"}
    return api_app.handler(http_event("GET", "/me/memory", claims=claims), FakeLambdaContext(function_name="api"))


def _worker_batch() -> dict[str, Any]:
    event = json.loads((EVENTS / "worker_batch.json").read_text())
    return dict(worker_app.handler(event, FakeLambdaContext(function_name="worker")))


def _fanout_run() -> dict[str, Any]:
    event = json.loads((EVENTS / "scheduled_event.json").read_text())
    return fanout_app.handler(event, FakeLambdaContext(function_name="fanout"))


def _retention_run() -> dict[str, Any]:
    event = json.loads((EVENTS / "retention_scheduled_event.json").read_text())
    return retention_app.handler(event, FakeLambdaContext(function_name="retention"))


def _migrate_run() -> dict[str, Any]:
    event = json.loads((EVENTS / "migrate_invoke.json").read_text())
    return migrate_app.handler(event, FakeLambdaContext(function_name="migrate"))


FUNCTIONS: dict[str, tuple[Any, str, Callable[[], dict[str, Any]]]] = {
    # function: (its module, the module's cached services, one invocation with a real event)
    "api": (api_app, "_api", _api_request),
    "worker": (worker_app, "_services", _worker_batch),
    "fanout": (fanout_app, "_services", _fanout_run),
    "retention": (retention_app, "_services", _retention_run),
    "migrate": (migrate_app, "", _migrate_run),
}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_a_malformed_database_url_never_puts_its_password_in_a_log_or_an_answer(
    function: str,
    monkeypatch: pytest.MonkeyPatch,
    logs: Logs,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a function configured with a database URL whose password is followed by a bad escape
    module, cached, invoke = FUNCTIONS[function]
    if cached:
        monkeypatch.setattr(module, cached, None)  # a cold start: the services are built from the environment
    monkeypatch.setenv("DATABASE_URL", MALFORMED_URL)
    monkeypatch.setenv("QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/user-memory-worker")
    # When it is invoked twice (every invocation builds again: nothing was cached)
    answers, raised = [], []
    for _ in range(2):
        try:
            answers.append(json.dumps(invoke()))
        except Exception as err:  # Lambda logs what a handler raises: its message and its chain
            raised.append("".join(traceback.format_exception(err)))
    # Then the configuration error was logged with its type, and the password is nowhere: not in
    # an answer, a raised error, a log record (the service's or any library's) or the output
    out = capsys.readouterr()
    everything = "\n".join([*answers, *raised, *logs.lines, caplog.text, out.out, out.err])
    assert "ConfigError" in "\n".join(logs.lines)
    assert PASSWORD not in everything
    if function == "api":
        assert [json.loads(a)["statusCode"] for a in answers] == [503, 503]


# -- pooled connections closed between requests -----------------------------------------------------


@pytest.fixture
def admin_url(cluster_admin_url: str | None, database_url: str) -> str:
    """Who may terminate the pool's backends: the cluster's administrator (embedded), else the
    owner (its own role's backends)."""
    return cluster_admin_url or database_url


@pytest.fixture
def idle_tag() -> str:
    return f"um-idle-{uuid.uuid4().hex[:8]}"


ROUNDS = 4


def test_the_api_answers_every_request_after_its_pooled_connections_were_closed(
    database_url: str, admin_url: str, idle_tag: str
) -> None:
    # Given the API on a pool of its own (as at a cold start), two connections
    settings = ApiSettings.from_env(
        {"DATABASE_URL": tagged(database_url, idle_tag), "DATABASE_POOL_SIZE": "2", "DOCUMENT_SCHEMA": "user_state"}
    )
    services = build_api(settings)
    try:
        alice = ApiClient(create_api(services, settings), uuid.uuid4())
        statuses, killed = [], []
        for n in range(ROUNDS):
            # When every pooled connection is closed by the server between two requests
            statuses.append(alice.patch("/me/memory", json_body={"summary": f"round {n}"}, headers=MERGE).status)
            killed.append(terminate_backends(admin_url, idle_tag))
            statuses.append(alice.get("/me/memory").status)
            killed.append(terminate_backends(admin_url, idle_tag))
        # Then no request failed, and each round had connections to close
        assert statuses == [200] * (2 * ROUNDS)
        assert all(k >= 1 for k in killed), killed
        assert alice.get("/me/memory").json["document"]["summary"] == f"round {ROUNDS - 1}"
    finally:
        services.close()


MERGE = {"Content-Type": "application/merge-patch+json"}


def test_the_worker_and_the_fanout_run_every_invocation_after_their_pooled_connections_were_closed(
    database_url: str, admin_url: str, idle_tag: str, pool: Any, sqs: Any
) -> None:
    # Given the worker and the fan-out on pools of their own, and users with a day of activity
    queue_url, _ = create_queues(sqs, name=f"idle-{uuid.uuid4().hex[:8]}", max_receive_count=5)
    worker_tag, fanout_tag = f"{idle_tag}-w", f"{idle_tag}-f"
    worker = build_worker(
        WorkerSettings.from_env({}, database_url=tagged(database_url, worker_tag), summarizer="rules"), sqs_client=sqs
    )
    fanout = build_fanout(
        FanoutSettings.from_env({}, database_url=tagged(database_url, fanout_tag), queue_url=queue_url),
        sqs_client=sqs,
    )
    day = datetime(2031, 5, 1, tzinfo=UTC)
    try:
        failures, killed, written = [], [], 0
        for n in range(ROUNDS):
            users = seed_users(pool, 2, day + timedelta(days=n), f"idle-{n}")
            # When every pooled connection is closed between invocations
            answer = worker_app.handler(
                sqs_event(refresh_body(users, day + timedelta(days=n), f"daily:idle-{n}")),
                FakeLambdaContext(),
                services=worker,
            )
            failures += answer["batchItemFailures"]
            written += len(users)
            killed.append(terminate_backends(admin_url, worker_tag))
            scheduled = {
                **json.loads((EVENTS / "scheduled_event.json").read_text()),
                "id": str(uuid.uuid4()),
                "time": (day + timedelta(days=n + 1, minutes=15)).isoformat(),
            }
            fanout_app.handler(scheduled, FakeLambdaContext(function_name="fanout"), services=fanout)
            killed.append(terminate_backends(admin_url, fanout_tag))
        # Then every record was processed and every fan-out ran (it raises on a failure)
        assert failures == []
        assert all(k >= 1 for k in killed), killed
        with pool.connection() as conn:
            versions = conn.execute(
                "SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key LIKE 'daily:idle-%%'"
            ).fetchone()
        assert versions == (written,)
    finally:
        worker.close()
        fanout.close()


# -- a login's password rotated under traffic ---------------------------------------------------------


@dataclass
class Tally:
    """Requests by phase (when each started) and how many failed, across the traffic's threads."""

    phase: str = "before"
    done: dict[str, int] = field(default_factory=lambda: {"before": 0, "between": 0, "after": 0})
    failed: dict[str, int] = field(default_factory=lambda: {"before": 0, "between": 0, "after": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def count(self, phase: str, ok: bool) -> None:
        with self.lock:
            self.done[phase] += 1
            self.failed[phase] += 0 if ok else 1


def _login_secret(client: Any, name: str, password: str) -> str:
    return str(
        client.create_secret(Name=f"login-{name}", SecretString=json.dumps({"username": name, "password": password}))[
            "ARN"
        ]
    )


@pytest.fixture
def logins(conn: psycopg.Connection, cluster_admin_url: str | None) -> Iterator[dict[str, str]]:
    """The API's and the service's logins (group -> login name) with a first password each, made
    as `create-logins` makes them, which must give that password (SCRAM) to connect."""
    if cluster_admin_url is None:
        pytest.skip("needs the embedded cluster: its pg_hba.conf must ask these logins for a password")
    made = {group: f"um_rot_{group}_{uuid.uuid4().hex[:8]}" for group in ("api", "service")}
    for group, name in made.items():
        create_login(conn, name, FIRST_PASSWORD, group)
    try:
        with password_logins(cluster_admin_url, *made.values()):
            yield made
    finally:
        for name in made.values():
            terminate_backends(cluster_admin_url, name, by="usename")
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


FIRST_PASSWORD = "first-" + secrets.token_hex(16)
ROTATED_PASSWORD = "rotated-" + secrets.token_hex(16)
# Requests each thread makes once the rotation is done, each followed by closing its connections.
AFTER_ROTATION = 12


@pytest.mark.parametrize("order", ["database-first", "secret-first"])
def test_a_rotated_login_password_fails_no_request_once_its_secret_is_updated(
    order: str,
    database_url: str,
    cluster_admin_url: str,
    conn: psycopg.Connection,
    pool: Any,
    logins: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with mock_aws(), ExitStack() as stack:
        # Given each login's secret (JSON username and password) and the functions reading it at
        # run time: two API environments and a worker, each on its own pool (its own tag)
        secretsmanager = boto3.client("secretsmanager", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        arns = {group: _login_secret(secretsmanager, name, FIRST_PASSWORD) for group, name in logins.items()}

        def endpoint(tag: str) -> str:
            return tagged(database_url, tag, user=True, password=True)

        def api_environment(tag: str) -> ApiClient:
            settings = ApiSettings.from_env(
                {
                    "DATABASE_LOGIN_SECRET_NAME": arns["api"],
                    "DATABASE_ENDPOINT": endpoint(tag),
                    "DATABASE_ROLE": "service_role",
                    "DOCUMENT_SCHEMA": "user_state",
                }
            )
            services = build_api(settings)
            stack.callback(services.close)
            return ApiClient(create_api(services, settings), uuid.uuid4())

        tags = {f"um-rot-{name}-{uuid.uuid4().hex[:6]}": name for name in ("api1", "api2", "worker")}
        api_tags = [t for t, name in tags.items() if name.startswith("api")]
        worker_tag = next(t for t, name in tags.items() if name == "worker")
        clients = {tag: api_environment(tag) for tag in api_tags}
        worker = build_worker(
            WorkerSettings.from_env(
                {
                    "DATABASE_LOGIN_SECRET_NAME": arns["service"],
                    "DATABASE_ENDPOINT": endpoint(worker_tag),
                    "DATABASE_ROLE": "service_role",
                },
                summarizer="rules",
            ),
            sqs_client=sqs,
        )
        stack.callback(worker.close)
        tally = Tally()
        after_each: dict[str, int] = {}

        def traffic(tag: str, one_request: Callable[[int], bool]) -> None:
            # Steady requests; between two, this environment's idle connections are closed (as
            # RDS Proxy does, and as a new execution environment starts without any), so every
            # request may need a new connection, opened with what the secret says at that time.
            n = 0
            while not tally.stop.is_set():
                phase = tally.phase
                try:
                    ok = one_request(n)
                except Exception:  # the handlers answer failures; anything raised is a failure too
                    ok = False
                tally.count(phase, ok)
                closed = terminate_backends(cluster_admin_url, tag)
                if phase == "after" and closed:  # the next request needs a new connection
                    after_each[tag] = after_each.get(tag, 0) + 1
                n += 1

        def api_request(tag: str) -> Callable[[int], bool]:
            client = clients[tag]

            def one(n: int) -> bool:
                written = client.patch("/me/memory", json_body={"summary": f"n{n}"}, headers=MERGE).status
                return written == 200 and client.get("/me/memory").status == 200

            return one

        day = datetime(2031, 7, 1, tzinfo=UTC)

        def worker_request(n: int) -> bool:
            users = seed_users(pool, 1, day, f"rot-{n}")
            answer = worker_app.handler(
                sqs_event(refresh_body(users, day, f"daily:rot-{uuid.uuid4().hex[:8]}")),
                FakeLambdaContext(),
                services=worker,
            )
            return not answer["batchItemFailures"]

        threads = [threading.Thread(target=traffic, args=(tag, api_request(tag))) for tag in api_tags]
        threads.append(threading.Thread(target=traffic, args=(worker_tag, worker_request)))
        for t in threads:
            t.start()
        try:
            _wait_until(lambda: tally.done["before"] >= 6)

            # When each login's password changes in the database (as create-logins sets it) and its
            # secret says the new one, in either order, some requests apart
            def in_database() -> None:
                for group, name in logins.items():
                    create_login(conn, name, ROTATED_PASSWORD, group)

            def in_secret() -> None:
                for group, name in logins.items():
                    rotated = json.dumps({"username": name, "password": ROTATED_PASSWORD})
                    secretsmanager.put_secret_value(SecretId=arns[group], SecretString=rotated)

            first, second = (in_database, in_secret) if order == "database-first" else (in_secret, in_database)
            tally.phase = "between"
            started = time.monotonic()
            first()
            _wait_until(lambda: tally.done["between"] >= 3)
            second()
            window = time.monotonic() - started  # reported, never asserted
            tally.phase = "after"
            _wait_until(lambda: all(after_each.get(tag, 0) >= AFTER_ROTATION for tag in tags))
        finally:
            tally.stop.set()
            for t in threads:
                t.join()
    with capsys.disabled():
        print(
            f"\nrotation ({order}): requests failed before {tally.failed['before']}/{tally.done['before']}, "
            f"between the first step and the second ({window:.1f} s apart) "
            f"{tally.failed['between']}/{tally.done['between']}, "
            f"after both {tally.failed['after']}/{tally.done['after']}"
        )
    # Then nothing failed before, and nothing failed once the database and the secret agreed
    # again, every environment's requests having needed a new connection
    assert tally.failed["before"] == 0 and tally.failed["after"] == 0, (tally.failed, tally.done)
    assert all(after_each[tag] >= AFTER_ROTATION for tag in tags)
    # And the logins now connect with the rotated password only
    with psycopg.connect(tagged(database_url, "um-rot-check", user=True, password=True), user=logins["api"],
                         password=ROTATED_PASSWORD) as check:  # fmt: skip
        assert check.execute("SELECT current_user").fetchone() == (logins["api"],)


def _wait_until(condition: Callable[[], bool], seconds: float = 120.0) -> None:
    """Let the traffic run until `condition` (a bound for a hung thread, never a measure)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the traffic did not get there")
        time.sleep(0.02)


# -- the DSN from a login's secret ---------------------------------------------------------------------

ENDPOINT = "postgresql://proxy.internal:5432/user_memory?sslmode=require"


@pytest.fixture
def secretsmanager(aws_env: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def test_the_dsn_is_the_endpoint_with_the_logins_secret_read_again_only_when_asked(secretsmanager: Any) -> None:
    # Given a login's secret and a function configured with it on the endpoint
    arn = _login_secret(secretsmanager, f"um_dsn_{uuid.uuid4().hex[:8]}", FIRST_PASSWORD)
    settings = WorkerSettings.from_env(
        {"DATABASE_LOGIN_SECRET_NAME": arn, "DATABASE_ENDPOINT": ENDPOINT}, summarizer="rules"
    )
    conninfo = database_conninfo(settings)
    # When the DSN is read, the secret rotated, and the DSN read from the cache and then anew
    first = psycopg.conninfo.conninfo_to_dict(conninfo())
    name = first["user"]
    secretsmanager.put_secret_value(
        SecretId=arn, SecretString=json.dumps({"username": name, "password": ROTATED_PASSWORD})
    )
    cached = psycopg.conninfo.conninfo_to_dict(conninfo())
    fresh = psycopg.conninfo.conninfo_to_dict(conninfo(fresh=True))
    # Then it is the endpoint's host, port, database and TLS with the secret's user and password,
    # the cached one until a fresh read is asked for (after a refused connection)
    assert {k: first[k] for k in ("host", "port", "dbname", "sslmode")} == {
        "host": "proxy.internal",
        "port": "5432",
        "dbname": "user_memory",
        "sslmode": "require",
    }
    assert (first["password"], cached["password"], fresh["password"]) == (
        FIRST_PASSWORD,
        FIRST_PASSWORD,
        ROTATED_PASSWORD,
    )
    assert psycopg.conninfo.conninfo_to_dict(conninfo())["password"] == ROTATED_PASSWORD


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DATABASE_ENDPOINT": "postgresql://proxy.internal:5432/db?x=%zz"}, "DATABASE_ENDPOINT is not"),
        ({"DATABASE_ENDPOINT": ENDPOINT, "SECRET": "not json: " + PASSWORD}, "is not a login's credentials"),
        ({"DATABASE_ENDPOINT": ENDPOINT, "SECRET": json.dumps({"password": PASSWORD})}, "is not a login's"),
    ],
    ids=["malformed-endpoint", "secret-not-json", "secret-without-username"],
)
def test_a_login_configuration_that_does_not_work_says_why_without_the_password(
    secretsmanager: Any, env: dict[str, str], says: str
) -> None:
    # Given a login's secret (as given, or a valid one) and an endpoint, one of them wrong
    text = env.get("SECRET", json.dumps({"username": "um_x", "password": PASSWORD}))
    arn = secretsmanager.create_secret(Name=f"login-{uuid.uuid4().hex[:8]}", SecretString=text)["ARN"]
    settings = WorkerSettings.from_env(
        {"DATABASE_LOGIN_SECRET_NAME": arn, "DATABASE_ENDPOINT": env["DATABASE_ENDPOINT"]}, summarizer="rules"
    )
    # When the worker's services are built
    with pytest.raises(ConfigError) as caught:
        build_worker(settings)
    # Then the error says what is wrong, one line, and quotes neither the password nor the secret
    message = "".join(traceback.format_exception(caught.value))
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert PASSWORD not in message


def test_a_login_secret_without_an_endpoint_is_refused_at_start() -> None:
    # Given a login's secret but nowhere to connect
    # When the settings are read
    with pytest.raises(ConfigError, match="DATABASE_LOGIN_SECRET_NAME needs DATABASE_ENDPOINT"):
        ApiSettings.from_env({"DATABASE_LOGIN_SECRET_NAME": "user-memory/api-login"})


def test_the_migrate_function_connects_as_the_owner_from_its_login_secret(
    secretsmanager: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the owner's credentials in a secret (the master secret) and the endpoint, as deployed
    owner = psycopg.conninfo.conninfo_to_dict(database_url)
    arn = secretsmanager.create_secret(
        Name=f"owner-{uuid.uuid4().hex[:8]}",
        SecretString=json.dumps({"username": owner["user"], "password": owner.get("password") or "unused-locally"}),
    )["ARN"]
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_LOGIN_SECRET_NAME", arn)
    monkeypatch.setenv("DATABASE_ENDPOINT", tagged(database_url, "um-migrate", user=True, password=True))
    # When it is asked for the status
    answer = _migrate_status()
    # Then it answered as the owner: every migration of this release applied
    assert answer["pending"] == [] and answer["applied"] >= 1


def _migrate_status() -> dict[str, Any]:
    event = json.loads((EVENTS / "migrate_status.json").read_text())
    return migrate_app.handler(event, FakeLambdaContext(function_name="migrate"))

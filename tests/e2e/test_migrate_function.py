"""The migrate function end to end: the real handler with real event JSON (direct invocations and
CloudFormation custom resource requests), the owner's DSN and the logins' credentials in Secrets
Manager (moto), an empty embedded PostgreSQL database of the test's own, and the custom resource's
answer PUT to a local HTTP server standing in for the pre-signed S3 URL.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import psycopg
import pytest
from aws_lambda_powertools.utilities import parameters
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from psycopg import sql
from user_memory.adapters.migrations import load_migrations, packaged_migrations
from user_memory.config import MigrateSettings
from user_memory.errors import ConfigError, CustomResourceResponseFailed, InvalidMessage, MigrationTimedOut
from user_memory.jobs.migrate import parse_event
from user_memory.runtime import build_migrate
from user_memory_functions.migrate.app import MIGRATIONS, handler
from user_memory_local.poller import FakeLambdaContext

from tests.conftest import EVENTS
from tests.fake_http import JsonHandler, serving

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

ALL = [m.name for m in load_migrations(packaged_migrations())]
OWNER_SECRET = "user-memory/owner-dsn"
API_SECRET = "user-memory/api-login"
SERVICE_SECRET = "user-memory/service-login"


def event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def context(timeout_seconds: float = 600) -> Context:
    return Context(
        function_name="user-memory-migrate",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:user-memory-migrate",
        timeout_seconds=timeout_seconds,
    )


class CloudFormationEndpoint(JsonHandler):
    """The pre-signed URL's S3: records each PUT (path, headers, body, monotonic time of arrival)
    and answers the next of `statuses`, then `status`."""

    received: list[dict[str, Any]] = []
    status = 200
    statuses: list[int] = []

    def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
        endpoint = type(self)
        at = time.monotonic()
        body = self.read_json()
        endpoint.received.append(
            {"path": self.path, "content_type": self.headers.get("content-type"), "body": body, "at": at}
        )
        self.send_json(endpoint.statuses.pop(0) if endpoint.statuses else endpoint.status, b"")


class Context(FakeLambdaContext):
    """The Lambda context, with the monotonic time at which Lambda would end the invocation."""

    @property
    def deadline(self) -> float:
        return self._deadline


@pytest.fixture
def cloudformation() -> Iterator[type[CloudFormationEndpoint]]:
    """A local stand-in for the response URL; yields the handler class (its `received`, `status`)."""
    endpoint = type("Endpoint", (CloudFormationEndpoint,), {"received": [], "status": 200, "statuses": []})
    with serving(endpoint) as base:
        endpoint.base = base.removesuffix("/v1")  # type: ignore[attr-defined]
        yield endpoint


def aimed_at(request: dict[str, Any], endpoint: Any) -> dict[str, Any]:
    """The CloudFormation request with its pre-signed URL's host replaced by the local endpoint."""
    url = urlsplit(request["ResponseURL"])
    return {**request, "ResponseURL": f"{endpoint.base}{url.path}?{url.query}"}


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch, fresh_db: str) -> Iterator[Any]:
    """moto's Secrets Manager holding the owner's DSN (the fresh database), the function's environment
    naming it the way the template does; the login secrets are the tests' to add."""
    parameters.clear_caches()
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        client.create_secret(Name=OWNER_SECRET, SecretString=fresh_db)
        monkeypatch.setenv("DATABASE_SECRET_NAME", OWNER_SECRET)
        monkeypatch.setenv("DATABASE_ROLE", "service_role")  # the global one: the owner does not take it
        yield client
    parameters.clear_caches()


@pytest.fixture
def logins(secrets: Any, monkeypatch: pytest.MonkeyPatch, fresh_db: str) -> Iterator[dict[str, str]]:
    """The two login secrets as infra/database.yaml generates them, with names of this test's own
    (roles are cluster-wide); the roles are dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = {"api": f"um_api_login_{suffix}", "service": f"um_service_login_{suffix}"}
    for group, secret in (("api", API_SECRET), ("service", SERVICE_SECRET)):
        value = json.dumps({"username": names[group], "password": uuid.uuid4().hex + "Aa1"})
        secrets.create_secret(Name=secret, SecretString=value)
    monkeypatch.setenv("API_LOGIN_SECRET_NAME", API_SECRET)
    monkeypatch.setenv("SERVICE_LOGIN_SECRET_NAME", SERVICE_SECRET)
    yield names
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        for name in names.values():
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def recorded(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        if not conn.execute("SELECT to_regclass('user_memory_migrations') IS NOT NULL").fetchone()[0]:
            return []
        return [r[0] for r in conn.execute("SELECT name FROM user_memory_migrations ORDER BY name")]


def member_of(dsn: str, login: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s ORDER BY 1""",
            (login,),
        ).fetchall()
    return [r[0] for r in rows]


def with_a_bad_migration(folder: Path) -> str:
    """The release's migrations plus a broken one after them: it creates a table, then fails."""
    for path in packaged_migrations().glob("*.sql"):
        shutil.copy(path, folder / path.name)
    bad = f"{int(ALL[-1][:3]) + 1:03d}_broken_release"
    (folder / f"{bad}.sql").write_text(
        "CREATE TABLE half_applied (id int);\nINSERT INTO half_applied VALUES (1);\nSELECT no_such_function();\n"
    )
    return bad


# ---------------------------------------------------------------- direct invocations


def test_the_build_ships_the_repositorys_migrations_with_the_function():
    # Given the folder the handler reads (a symlink in the source tree, copied by sam build)
    # Then it holds exactly the packaged migrations
    assert sorted(p.name for p in MIGRATIONS.glob("*.sql")) == sorted(
        p.name for p in packaged_migrations().glob("*.sql")
    )


def test_an_invoked_migrate_applies_every_pending_migration_as_the_owner_then_nothing(secrets, fresh_db, logs):
    # Given an empty database whose owner's DSN is in the secret the template names
    # When the function is invoked with {"action": "migrate"}
    first = handler(event("migrate_invoke.json"), context())
    # Then every migration of the release is applied and recorded, in order
    assert first["applied"] == ALL
    assert recorded(fresh_db) == ALL
    # And the run is logged with counts and names only
    (line,) = logs.named("migrations applied")
    assert line["applied"] == len(ALL)
    # When it is invoked again
    again = handler(event("migrate_invoke.json"), context())
    # Then nothing is pending
    assert again["applied"] == []


def test_status_names_the_pending_migrations_and_then_none(secrets, fresh_db):
    # Given an empty database
    # When the status is asked for, before and after migrating
    before = handler(event("migrate_status.json"), context())
    handler(event("migrate_invoke.json"), context())
    after = handler(event("migrate_status.json"), context())
    # Then it lists what this release would apply, then nothing, and the last one applied
    assert before == {"applied": 0, "last_applied": None, "pending": ALL, "not_in_this_release": []}
    assert after == {"applied": len(ALL), "last_applied": ALL[-1], "pending": [], "not_in_this_release": []}


def test_create_logins_makes_each_login_a_member_of_its_group_only(secrets, logins, fresh_db):
    # Given a migrated database and the two login secrets
    handler(event("migrate_invoke.json"), context())
    # When the logins are created, then created again (a rotated password)
    first = handler(event("migrate_create_logins.json"), context())
    second = handler(event("migrate_create_logins.json"), context())
    # Then each login exists, in its own group role of migration 013 and nothing else
    assert first == {"logins": {"api": f"{logins['api']} created", "service": f"{logins['service']} created"}}
    assert second == {"logins": {"api": f"{logins['api']} updated", "service": f"{logins['service']} updated"}}
    assert member_of(fresh_db, logins["api"]) == ["user_memory_api"]
    assert member_of(fresh_db, logins["service"]) == ["user_memory_service"]


def test_create_logins_without_login_secrets_names_the_template_parameters(secrets, logs):
    # Given no login secrets configured
    # When the logins are asked for
    with pytest.raises(ConfigError, match="set ApiLoginSecretArn and ServiceLoginSecretArn"):
        handler(event("migrate_create_logins.json"), context())
    # Then the failure is logged with its type and reason
    (line,) = logs.named("migrate failed")
    assert (line["action"], line["error_type"]) == ("create-logins", "ConfigError")


def test_a_login_secret_that_is_not_credentials_is_refused_without_quoting_it(secrets, monkeypatch, fresh_db):
    # Given a migrated database and a login secret holding a bare password instead of JSON
    handler(event("migrate_invoke.json"), context())
    secrets.create_secret(Name=API_SECRET, SecretString="hunter2-but-longer-than-16")
    monkeypatch.setenv("API_LOGIN_SECRET_NAME", API_SECRET)
    # When the logins are created
    with pytest.raises(ConfigError) as refused:
        handler(event("migrate_create_logins.json"), context())
    # Then the error names the secret, never its value
    assert f"secret {API_SECRET} is not a login's credentials" in str(refused.value)
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("payload", [{}, {"action": "drop"}, {"action": "migrate", "extra": 1}, [], "migrate"])
def test_a_request_that_is_neither_an_action_nor_a_custom_resource_is_refused_before_any_work(payload):
    # Given an event that is not a migrate request
    # When the handler parses it
    with pytest.raises(InvalidMessage, match="not a migrate request"):
        handler(payload, context())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
# Events shaped like the two requests, with any values: what a template's mistake could send.
NEAR_REQUESTS = st.fixed_dictionaries({"action": JSON}) | st.fixed_dictionaries(
    {"RequestType": JSON, "ResponseURL": JSON, "StackId": JSON, "RequestId": JSON, "LogicalResourceId": JSON},
    optional={"ResourceProperties": JSON, "PhysicalResourceId": JSON},
)


@settings(max_examples=300, deadline=None)
@given(JSON | NEAR_REQUESTS)
def test_any_json_is_parsed_into_a_request_or_refused_as_an_invalid_message(payload):
    # Given any JSON value as an event
    # When it is parsed
    try:
        request = parse_event(payload)
    except InvalidMessage as err:
        # Then it is refused with a one-line, bounded message
        assert "\n" not in str(err) and len(str(err)) < 2000
    else:
        # Or it is exactly one of the requests the function serves
        assert type(request).__name__ in ("Invocation", "CustomResourceRequest")


# ---------------------------------------------------------------- the custom resource


def test_create_migrates_creates_the_logins_and_answers_success(secrets, logins, fresh_db, cloudformation):
    # Given CloudFormation's Create request, answered at the local endpoint
    request = aimed_at(event("migrate_custom_resource_create.json"), cloudformation)
    # When the function runs it
    handler(request, context())
    # Then the database is migrated and the logins exist
    assert recorded(fresh_db) == ALL
    assert member_of(fresh_db, logins["api"]) == ["user_memory_api"]
    # And exactly one answer was PUT to the pre-signed path, with the empty content type it was signed for
    (put,) = cloudformation.received
    assert put["path"] == urlsplit(request["ResponseURL"]).path + "?" + urlsplit(request["ResponseURL"]).query
    assert put["content_type"] == ""
    answer = put["body"]
    # And it says SUCCESS, echoing the request's ids, with a physical id of the stack's and the counts
    assert answer["Status"] == "SUCCESS"
    for field in ("StackId", "RequestId", "LogicalResourceId"):
        assert answer[field] == request[field]
    assert answer["PhysicalResourceId"] == "user-memory-Migrations"
    assert answer["Data"] == {"AppliedCount": str(len(ALL)), "Applied": ",".join(ALL)}
    assert answer["Reason"].startswith(f"applied {len(ALL)} migration(s)") and "logins: api" in answer["Reason"]


def test_update_with_nothing_pending_answers_success_under_the_same_physical_id(secrets, fresh_db, cloudformation):
    # Given a database this release already migrated
    handler(event("migrate_invoke.json"), context())
    request = aimed_at(event("migrate_custom_resource_update.json"), cloudformation)
    # When CloudFormation sends the next deploy's Update
    handler(request, context())
    # Then it succeeds, applies nothing, and keeps the physical id (no replacement, so no Delete follows)
    (put,) = cloudformation.received
    assert put["body"]["Status"] == "SUCCESS"
    assert put["body"]["PhysicalResourceId"] == request["PhysicalResourceId"]
    assert put["body"]["Data"] == {"AppliedCount": "0", "Applied": ""}
    assert "up to date" in put["body"]["Reason"]


def test_delete_answers_success_and_leaves_the_database_alone(monkeypatch, fresh_db, cloudformation):
    # Given a configuration that could not even reach a database (no secret exists)
    monkeypatch.setenv("DATABASE_SECRET_NAME", "user-memory/does-not-exist")
    request = aimed_at(event("migrate_custom_resource_delete.json"), cloudformation)
    # When the stack deletes the resource
    result = handler(request, context())
    # Then CloudFormation hears SUCCESS at once and nothing was done to the database
    assert result["Status"] == "SUCCESS"
    (put,) = cloudformation.received
    assert put["body"]["Status"] == "SUCCESS" and put["body"]["PhysicalResourceId"] == "user-memory-Migrations"
    assert recorded(fresh_db) == []


def test_run_false_answers_success_without_migrating(secrets, fresh_db, cloudformation):
    # Given a stack deployed with MigrateOnDeploy=false
    request = aimed_at(event("migrate_custom_resource_create.json"), cloudformation)
    request["ResourceProperties"]["Run"] = "false"
    # When CloudFormation creates the resource
    handler(request, context())
    # Then it succeeds and the database is untouched
    (put,) = cloudformation.received
    assert put["body"]["Status"] == "SUCCESS" and "skipped" in put["body"]["Reason"]
    assert recorded(fresh_db) == []


def test_a_bad_migration_answers_failed_in_one_line_and_leaves_nothing_of_itself(
    secrets, fresh_db, cloudformation, tmp_path, logs
):
    # Given a release whose last migration creates a table, inserts a row, then fails
    bad = with_a_bad_migration(tmp_path)
    services = build_migrate(MigrateSettings.from_env(), migrations=tmp_path)
    request = aimed_at(event("migrate_custom_resource_update.json"), cloudformation)
    # When the deploy's Update runs it
    result = handler(request, context(), services=services)
    # Then CloudFormation hears FAILED (the stack rolls back) with one line naming the migration and the cause
    (put,) = cloudformation.received
    answer = put["body"]
    assert answer["Status"] == "FAILED" and result["Status"] == "FAILED"
    assert "\n" not in answer["Reason"]
    assert answer["Reason"].startswith(f"MigrationError: migration {bad} failed: function no_such_function()")
    # And nothing of the bad migration is left: no table, no record; the earlier ones stay applied
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT to_regclass('half_applied')").fetchone() == (None,)
    assert recorded(fresh_db) == ALL
    # And the failure is logged and its type named
    (line,) = logs.named("migrate failed")
    assert (line["action"], line["error_type"]) == ("custom resource Update", "MigrationError")


def test_a_secret_that_cannot_be_read_answers_failed_without_a_traceback(monkeypatch, cloudformation):
    # Given an owner secret that does not exist (moto has none)
    with mock_aws():
        parameters.clear_caches()
        monkeypatch.setenv("DATABASE_SECRET_NAME", "user-memory/missing")
        request = aimed_at(event("migrate_custom_resource_create.json"), cloudformation)
        # When CloudFormation creates the resource
        handler(request, context())
    # Then it hears FAILED with the error's type and where it was raised, on one line
    (put,) = cloudformation.received
    assert put["body"]["Status"] == "FAILED"
    assert put["body"]["Reason"].startswith("GetParameterError: ")
    assert "\n" not in put["body"]["Reason"] and "Traceback" not in put["body"]["Reason"]


def test_a_migration_waiting_on_another_runners_lock_fails_before_the_deadline(
    secrets, fresh_db, cloudformation, monkeypatch
):
    # Given another runner holding the migrations' advisory lock on this database
    from user_memory.adapters.migrations import _ADVISORY_LOCK_KEY

    holder = psycopg.connect(fresh_db, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_LOCK_KEY,))
    # And an invocation with 3 s left and a 1 s margin kept for answering
    monkeypatch.setenv("DEADLINE_MARGIN_MS", "1000")
    request = aimed_at(event("migrate_custom_resource_create.json"), cloudformation)
    try:
        # When the deploy's Create runs
        ctx = context(timeout_seconds=3)
        handler(request, ctx)
    finally:
        holder.close()
    # Then the watchdog cancels the wait at the run's deadline and CloudFormation hears FAILED, in time
    (put,) = cloudformation.received
    assert put["body"]["Status"] == "FAILED"
    assert put["body"]["Reason"].startswith("MigrationTimedOut: the run did not end DEADLINE_MARGIN_MS before")
    # (the watchdog's cancel, or the statement's own timeout set to the same time left, whichever
    # the server saw first: on a loaded machine either)
    assert "canceling statement due to " in put["body"]["Reason"]
    assert put["at"] < ctx.deadline
    assert recorded(fresh_db) == []


def test_an_answer_that_cannot_be_delivered_fails_the_invocation(secrets, cloudformation, logs):
    # Given a response URL that refuses the answer
    cloudformation.status = 403
    request = aimed_at(event("migrate_custom_resource_delete.json"), cloudformation)
    # When the request is handled
    with pytest.raises(CustomResourceResponseFailed, match="HTTP 403"):
        handler(request, context())
    # Then the invocation failed (no asynchronous retries: MigrateErrorsAlarm; CloudFormation stops
    # waiting at the resource's ServiceTimeout) and it is logged; a refusal is not tried again
    (line,) = logs.named("migrate failed")
    assert line["error_type"] == "CustomResourceResponseFailed"
    assert len(cloudformation.received) == 1


def test_an_answer_the_url_fails_with_a_server_error_is_sent_once_more(secrets, cloudformation):
    # Given a response URL that answers 503 to the first PUT, then 200
    cloudformation.statuses = [503]
    request = aimed_at(event("migrate_custom_resource_delete.json"), cloudformation)
    # When the request is handled
    result = handler(request, context())
    # Then the same answer was PUT twice and the second was taken
    first, second = cloudformation.received
    assert first["body"] == second["body"] and second["body"]["Status"] == result["Status"] == "SUCCESS"


def test_an_unreachable_response_url_fails_within_the_deadline(secrets):
    # Given a response URL whose server accepts the connection and never answers
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    request = event("migrate_custom_resource_delete.json")
    request["ResponseURL"] = f"http://127.0.0.1:{listener.getsockname()[1]}/answer"
    from user_memory.jobs import migrate as job

    started = time.monotonic()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(job, "RESPONSE_SECONDS", 1.0)
            # When the answer is sent
            with pytest.raises(CustomResourceResponseFailed, match="not sent"):
                handler(request, context())
    finally:
        listener.close()
    # Then the call ended at its deadline, not at the function's
    assert time.monotonic() - started < 5


def test_two_concurrent_deploys_apply_each_migration_once(secrets, fresh_db):
    # Given two invocations at once (a retried Create racing the first, say)
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: results.append(handler(event("migrate_invoke.json"), context())))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then one applied everything, the other nothing
    assert sorted(len(r["applied"]) for r in results) == [0, len(ALL)]


# ---------------------------------------------------------------- every request is answered, in time


def release_with(folder: Path, *extra: str) -> list[str]:
    """The release's migrations in `folder` plus migrations after them of these texts; their names."""
    for path in packaged_migrations().glob("*.sql"):
        shutil.copy(path, folder / path.name)
    names = []
    for number, text in enumerate(extra, start=int(ALL[-1][:3]) + 1):
        names.append(f"{number:03d}_later_release_{number}")
        (folder / f"{names[-1]}.sql").write_text(text)
    return names


@pytest.mark.parametrize(
    "second",
    [
        pytest.param("SELECT pg_sleep(2);", id="two slow migrations"),
        pytest.param("ALTER TABLE user_memory_settings ADD COLUMN note text;", id="a table lock held by another"),
    ],
)
def test_a_run_longer_than_the_function_is_cancelled_and_answered_failed_before_the_deadline(
    secrets, fresh_db, cloudformation, tmp_path, monkeypatch, second
):
    # Given a migrated database, and a release whose two new migrations each end within a statement's
    # timeout but not both within the run's: a slow one, then a slow one or one that waits for a
    # table another connection holds locked
    handler(event("migrate_invoke.json"), context())
    slow, waiting = release_with(tmp_path, "SELECT pg_sleep(2);", second)
    holder = psycopg.connect(fresh_db)
    holder.execute("LOCK TABLE user_memory_settings IN ACCESS EXCLUSIVE MODE")
    monkeypatch.setenv("DEADLINE_MARGIN_MS", "1000")
    services = build_migrate(MigrateSettings.from_env(), migrations=tmp_path)
    request = aimed_at(event("migrate_custom_resource_update.json"), cloudformation)
    ctx = context(timeout_seconds=4)
    try:
        # When the deploy's Update runs in a function with 4 s, 1 s of it kept for answering
        result = handler(request, ctx, services=services)
    finally:
        holder.close()
    # Then CloudFormation heard FAILED before Lambda would have ended the invocation, naming the
    # migration the watchdog cancelled
    (put,) = cloudformation.received
    assert put["at"] < ctx.deadline
    assert put["body"] == {
        "Status": "FAILED",
        "Reason": "MigrationTimedOut: the run did not end DEADLINE_MARGIN_MS before the function's timeout, so its "
        f"watchdog cancelled it (MigrationError: migration {waiting} failed: canceling statement due to user request)",
        "PhysicalResourceId": request["PhysicalResourceId"],
        "StackId": request["StackId"],
        "RequestId": request["RequestId"],
        "LogicalResourceId": request["LogicalResourceId"],
        "NoEcho": False,
        "Data": {},
    }
    assert result["Status"] == "FAILED"
    # And the first one stays applied, the cancelled one left nothing
    assert recorded(fresh_db) == [*ALL, slow]


def test_a_run_stuck_outside_the_database_is_answered_failed_by_its_watchdog(fresh_db, cloudformation, logs):
    # Given a run whose secret read never returns (a stuck endpoint)
    from user_memory.jobs.migrate import handle_event

    released = threading.Event()

    def stuck() -> Any:
        released.wait(30)
        raise ConfigError("released by the test")

    request = aimed_at(event("migrate_custom_resource_create.json"), cloudformation)
    ctx = context(timeout_seconds=3)
    # When the deploy's Create runs (in a thread: the run itself stays stuck until released)
    results: list[dict[str, Any]] = []
    run = threading.Thread(target=lambda: results.append(handle_event(request, stuck, ctx)))
    run.start()
    try:
        while not cloudformation.received and time.monotonic() < ctx.deadline + 5:
            time.sleep(0.05)
    finally:
        released.set()
        run.join()
    # Then the watchdog answered FAILED before the deadline, and the run's own answer was not sent
    (put,) = cloudformation.received
    assert put["at"] < ctx.deadline
    assert put["body"]["Status"] == "FAILED"
    assert put["body"]["Reason"] == (
        "MigrationTimedOut: the run did not end DEADLINE_MARGIN_MS before the function's timeout, so its watchdog "
        "cancelled it (it was still running)"
    )
    assert results == [{"Status": "FAILED", "Reason": put["body"]["Reason"], "Data": {}}]
    assert recorded(fresh_db) == []
    assert [line["error_type"] for line in logs.named("migrate failed")] == ["MigrationTimedOut", "MigrationTimedOut"]


def test_a_direct_invocation_longer_than_the_function_fails_with_the_watchdogs_error(
    secrets, fresh_db, tmp_path, monkeypatch
):
    # Given a release whose new migration takes longer than the invocation has
    handler(event("migrate_invoke.json"), context())
    (slow,) = release_with(tmp_path, "SELECT pg_sleep(30);")
    monkeypatch.setenv("DEADLINE_MARGIN_MS", "1000")
    services = build_migrate(MigrateSettings.from_env(), migrations=tmp_path)
    # When it is invoked directly with 3 s
    with pytest.raises(MigrationTimedOut, match=f"migration {slow} failed: canceling statement"):
        handler(event("migrate_invoke.json"), context(timeout_seconds=3), services=services)
    # Then the invocation failed with the reason, and nothing of the migration is left
    assert recorded(fresh_db) == ALL


CREATE = json.loads((EVENTS / "migrate_custom_resource_create.json").read_text())
REQUIRED = ("RequestType", "StackId", "RequestId", "LogicalResourceId")


@pytest.fixture(scope="module")
def cloudformation_for_the_module() -> Iterator[type[CloudFormationEndpoint]]:
    """One stand-in for the response URL for a property's every example (its `received` is the test's to clear)."""
    endpoint = type("Endpoint", (CloudFormationEndpoint,), {"received": [], "status": 200, "statuses": []})
    with serving(endpoint) as base:
        endpoint.base = base.removesuffix("/v1")  # type: ignore[attr-defined]
        yield endpoint


@settings(max_examples=40, deadline=None)
@given(
    broken=st.sampled_from(REQUIRED),
    value=st.none() | st.integers() | st.lists(st.integers(), max_size=2) | st.just(""),
    drop=st.booleans(),
)
def test_a_malformed_custom_resource_request_is_answered_failed_echoing_what_it_carries(
    cloudformation_for_the_module, broken, value, drop
):
    # Given CloudFormation's request with one required field missing or of a wrong value
    endpoint = cloudformation_for_the_module
    endpoint.received.clear()
    request = aimed_at(CREATE, endpoint)
    if drop:
        del request[broken]
    else:
        request[broken] = value
    # When the handler gets it
    result = handler(request, context())
    # Then CloudFormation hears FAILED at once (not after its ServiceTimeout), with the ids the request
    # does carry and a reason naming the field
    (put,) = endpoint.received
    answer = put["body"]
    assert answer["Status"] == result["Status"] == "FAILED"
    assert answer["Reason"].startswith("InvalidMessage: not a migrate request") and broken in answer["Reason"]
    for field in REQUIRED[1:]:
        assert answer[field] == (request[field] if isinstance(request.get(field), str) else "")
    assert answer["PhysicalResourceId"]


def test_a_request_that_is_not_even_an_object_is_refused_without_an_answer(cloudformation):
    # Given a payload with no response URL to answer
    # When the handler gets it
    with pytest.raises(InvalidMessage):
        handler([aimed_at(CREATE, cloudformation)], context())
    # Then nothing is sent anywhere
    assert cloudformation.received == []


def test_a_library_that_cannot_be_imported_still_answers_failed(cloudformation, monkeypatch, capsys):
    # Given a layer whose migrate job cannot be imported (a broken or mismatched layer)
    import sys

    from user_memory_functions.migrate import app

    monkeypatch.setattr(app, "_library_handler", None)
    monkeypatch.setitem(sys.modules, "user_memory.jobs.migrate", None)
    request = aimed_at(CREATE, cloudformation)
    # When CloudFormation's Create arrives
    with pytest.raises(ImportError):
        handler(request, context())
    # Then CloudFormation heard FAILED, with the request's ids and the error's type
    (put,) = cloudformation.received
    assert put["content_type"] == ""
    assert put["body"] == {
        "Status": "FAILED",
        "Reason": "the migrate function could not load its library: ModuleNotFoundError (user_memory.jobs.migrate)",
        "PhysicalResourceId": "user-memory-Migrations",
        "StackId": CREATE["StackId"],
        "RequestId": CREATE["RequestId"],
        "LogicalResourceId": "Migrations",
        "NoEcho": False,
        "Data": {},
    }
    # And the failure is logged and counted (CloudWatch's embedded metric format) without the library
    line, metric = (json.loads(text) for text in capsys.readouterr().out.splitlines()[-2:])
    assert (line["message"], line["error_type"]) == ("migrate failed", "ModuleNotFoundError")
    assert metric["MigrateFailed"] == 1
    assert metric["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "MigrateFailed", "Unit": "Count"}]


# ---------------------------------------------------------------- an older release on a newer database


def test_a_rollback_to_the_older_release_accepts_the_database_the_newer_one_migrated(
    secrets, fresh_db, cloudformation, tmp_path, logs
):
    # Given a newer release that rewrote the last migration of this one (a comment) and added one
    newer = tmp_path / "newer"
    newer.mkdir()
    (added,) = release_with(newer, "CREATE TABLE later_release_table (id int);")
    last = newer / f"{ALL[-1]}.sql"
    last.write_text(last.read_text() + "\n-- rewritten by the newer release\n")
    newer_services = build_migrate(MigrateSettings.from_env(), migrations=newer)
    handler(event("migrate_invoke.json"), context(), services=newer_services)
    # When the stack rolls back and this (older) release's migrate function gets the rollback's Update
    request = aimed_at(event("migrate_custom_resource_update.json"), cloudformation)
    handler(request, context())
    # Then CloudFormation hears SUCCESS: nothing applied, the newer migrations kept
    (put,) = cloudformation.received
    assert put["body"] == {
        "Status": "SUCCESS",
        "Reason": "applied 0 migration(s), up to date",
        "PhysicalResourceId": request["PhysicalResourceId"],
        "StackId": request["StackId"],
        "RequestId": request["RequestId"],
        "LogicalResourceId": request["LogicalResourceId"],
        "NoEcho": False,
        "Data": {"AppliedCount": "0", "Applied": ""},
    }
    assert recorded(fresh_db) == [*ALL, added]
    # And the database being ahead is logged, with the migration whose text differs
    (ahead,) = logs.named("database ahead of this release")
    assert ahead["not_in_this_release"] == [added]
    (rewritten,) = logs.named("migration recorded by a newer release")
    assert rewritten["migration"] == ALL[-1]

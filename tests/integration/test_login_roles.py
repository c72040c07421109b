"""Each function logs in as its own role (migration 013, `user-memory create-login`), never the owner.

The API's login may only become `authenticated` (an end user's request) or `service_role` (an
operator's); it holds nothing itself, so RESET ROLE inside a request reaches nothing. The
service's login (worker, fan-out, retention) has service_role's rights and nothing more: it reads
every user's rows under RLS whether or not service_role has BYPASSRLS, and cannot rewrite history.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import string
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from user_memory.adapters.migrations import create_login, scram_sha_256_verifier
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool, transaction
from user_memory.config import ApiSettings, WorkerSettings
from user_memory.domain.model import Activity, Window
from user_memory.errors import AccessDenied, MigrationError, StorageUnavailable
from user_memory.http.app import create_api
from user_memory.runtime import build_api, build_worker

from tests.api_client import ApiClient

pytestmark = pytest.mark.integration

TABLES = (
    "user_memory_snapshots",
    "user_memory_heads",
    "user_activity",
    "users",
    "user_memory_kv",
    "conversations",
    "memory_items",
    "feedback_ratings",
)


def _login(conn: psycopg.Connection, database_url: str, group: str) -> Iterator[str]:
    name = f"um_{group}_login_{uuid.uuid4().hex[:8]}"
    password = secrets.token_urlsafe(24)
    assert create_login(conn, name, password, group) is True
    yield make_conninfo(database_url, user=name, password=password)
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def api_login(conn, database_url) -> Iterator[str]:
    yield from _login(conn, database_url, "api")


@pytest.fixture
def service_login(conn, database_url) -> Iterator[str]:
    yield from _login(conn, database_url, "service")


def owner_of(conn: psycopg.Connection) -> str:
    return conn.execute(
        "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
    ).fetchone()[0]


def a_user_with_memory(conn: psycopg.Connection) -> str:
    user = str(uuid.uuid4())
    conn.execute(
        "SELECT user_memory_append(%s, 0, %s, false, %s, 'seed', NULL)",
        (user, Jsonb([{"op": "add", "path": "/n", "value": 1}]), Jsonb({"n": 1})),
    )
    return user


def test_the_api_login_holds_nothing_until_it_becomes_an_end_user(conn, api_login):
    owner = owner_of(conn)
    alice = a_user_with_memory(conn)
    bob = a_user_with_memory(conn)
    with psycopg.connect(api_login, autocommit=True) as api:
        # Given the API's login, as it logs in: it is not the owner, nor a member of it
        assert not api.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (owner,)).fetchone()[0]
        with pytest.raises(pgerrors.InsufficientPrivilege):
            api.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(owner)))
        # Then it can read no table and call no write function by itself
        for table in TABLES:
            with pytest.raises(pgerrors.InsufficientPrivilege):
                api.execute(sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table)))
        with pytest.raises(pgerrors.InsufficientPrivilege):
            api.execute("SELECT user_memory_append(%s, 1, '[]', false, '{}', 'api', NULL)", (alice,))
        # When it becomes alice for one transaction, it sees alice's rows only
        with api.transaction():
            api.execute("SELECT set_config('role', 'authenticated', true)")
            api.execute("SELECT set_config('request.jwt.claims', %s, true)", (json.dumps({"sub": alice}),))
            users = {
                r[0]
                for r in api.execute(
                    "SELECT user_id::text FROM user_memory_heads WHERE user_id IN (%s, %s)", (alice, bob)
                )
            }
            assert users == {alice}
            # And RESET ROLE inside the request lands on the login, which reads nothing
            api.execute("RESET ROLE")
            with pytest.raises(pgerrors.InsufficientPrivilege), api.transaction():
                api.execute("SELECT 1 FROM user_memory_heads LIMIT 1")
        # And it may take the service's rights (operator routes): every user's rows
        with api.transaction():
            api.execute("SET LOCAL ROLE service_role")
            rows = api.execute("SELECT count(*) FROM user_memory_heads WHERE user_id IN (%s, %s)", (alice, bob))
            assert rows.fetchone()[0] == 2
            # but never the owner's: no history rewrite, no DDL, no settings
            with pytest.raises(pgerrors.InsufficientPrivilege), api.transaction():
                api.execute("UPDATE user_memory_snapshots SET patch = '[]' WHERE user_id = %s", (alice,))
            with pytest.raises(pgerrors.InsufficientPrivilege), api.transaction():
                api.execute("CREATE TABLE public.planted (id int)")
        with pytest.raises(pgerrors.InsufficientPrivilege):
            api.execute("SELECT value FROM user_memory_settings")


def test_the_service_login_reads_every_user_and_cannot_rewrite_history_or_become_an_end_user(conn, service_login):
    alice = a_user_with_memory(conn)
    bob = a_user_with_memory(conn)
    with psycopg.connect(service_login, autocommit=True) as svc:
        # Given the service's login, with no SET ROLE: it reads every user's rows (RLS admits it)
        rows = svc.execute("SELECT count(*) FROM user_memory_heads WHERE user_id IN (%s, %s)", (alice, bob))
        assert rows.fetchone()[0] == 2
        # And writes a version as the service (a run key is the service's)
        row = svc.execute(
            "SELECT status, version FROM user_memory_append(%s, 1, %s, false, %s, 'daily summary', 'daily:2031-01-01')",
            (alice, Jsonb([{"op": "replace", "path": "/n", "value": 2}]), Jsonb({"n": 2})),
        ).fetchone()
        assert row == ("written", 2)
        # But it cannot change or remove history, nor become an end user, nor touch the settings
        for statement in (
            "UPDATE user_memory_snapshots SET patch = '[]'",
            "DELETE FROM user_memory_snapshots",
            "TRUNCATE user_memory_snapshots",
            "UPDATE user_memory_settings SET value = '1'",
            "CREATE TABLE public.planted (id int)",
            "SET ROLE authenticated",
            "SELECT 1 FROM user_memory_migrations",
        ):
            with pytest.raises(pgerrors.InsufficientPrivilege), svc.transaction():
                svc.execute(statement)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_the_api_serves_end_users_and_operators_through_its_own_login(pool, api_login):
    # Given the API composed on its own login, taking service_role after login (DATABASE_ROLE)
    settings = ApiSettings.from_env(
        {"DATABASE_URL": api_login, "DATABASE_ROLE": "service_role", "DOCUMENT_SCHEMA": "user_state"}
    )
    services = build_api(settings)
    try:
        api = create_api(services, settings)
        alice = ApiClient(api, uuid.uuid4())
        # When an end user writes and reads, and an operator reads that user
        written = alice.request(
            "PATCH",
            "/me/memory",
            json_body={"summary": "likes tea"},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert written.status == 200, written.text
        assert alice.request("GET", "/me/memory").json["document"]["summary"] == "likes tea"
        operator = ApiClient(api, uuid.uuid4(), scopes=f"openid {settings.operator_scope}")
        looked = operator.request("GET", f"/admin/users/{alice.user_id}/memory")
        assert looked.status == 200 and looked.json["document"]["summary"] == "likes tea"
        # Then another user still sees only their own (RLS as authenticated, not the login's rights)
        bob = ApiClient(api, uuid.uuid4())
        assert bob.request("GET", "/me/memory").json["version"] == 0
    finally:
        services.close()


def test_an_api_path_that_enters_no_user_or_operator_transaction_reads_and_writes_nothing(conn, api_login):
    # Given the API composed on its own login, with service_role as its operators' role
    alice = a_user_with_memory(conn)
    settings = ApiSettings.from_env(
        {"DATABASE_URL": api_login, "DATABASE_ROLE": "service_role", "DOCUMENT_SCHEMA": "user_state"}
    )
    services = build_api(settings)
    try:
        stray = Activity(
            user_id=uuid.UUID(alice),
            occurred_at=datetime(2031, 3, 3, tzinfo=UTC),
            kind="session",
            payload={},
            source="stray",
            external_id=f"{alice}:stray",
        )
        # When code reads or writes on the API's pool without naming an end user or an operator
        # Then the database refuses it: the pool's connections hold the login's role, which holds nothing
        with pytest.raises(AccessDenied):
            PostgresRecorder(services.pool).read_head(uuid.UUID(alice))
        with pytest.raises(AccessDenied), transaction(services.pool) as tx:
            PostgresRecorder(tx).read_head(uuid.UUID(alice))
        with pytest.raises(AccessDenied):
            PostgresActivity(services.pool).record([stray])
        # And an operator's transaction takes the service's rights for itself only: the same
        # connection reads nothing again afterwards
        with services.session(alice, operator="operator-sub") as service:
            assert service.memory.read().version == 1
        with pytest.raises(AccessDenied):
            PostgresRecorder(services.pool).read_head(uuid.UUID(alice))
    finally:
        services.close()
    with conn.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM user_activity WHERE source = 'stray'").fetchone() == (0,)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_an_operator_triggers_conversation_memories_through_the_api_login(api_login, monkeypatch):
    # Given the API on its own login with a worker queue (moto)
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url = sqs.create_queue(QueueName=f"trigger-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        settings = ApiSettings.from_env(
            {"DATABASE_URL": api_login, "DATABASE_ROLE": "service_role", "QUEUE_URL": queue_url}
        )
        services = build_api(settings, sqs_client=sqs)
        try:
            operator = ApiClient(
                create_api(services, settings), uuid.uuid4(), scopes=f"openid {settings.operator_scope}"
            )
            # When an operator triggers the conversation memories (the service's work, on a login
            # whose connections hold nothing)
            answer = operator.request("POST", "/tasks/trigger-memory-generation")
        finally:
            services.close()
    # Then it runs with the service's rights, taken for its own transactions
    assert answer.status == 200, answer.text


def test_the_worker_summarizes_through_the_service_login(pool, service_login):
    # Given a user's activity, recorded by another service
    user = uuid.uuid4()
    day = datetime(2031, 3, 3, tzinfo=UTC)
    PostgresActivity(pool).record(
        [
            Activity(
                user_id=user,
                occurred_at=day + timedelta(hours=1),
                kind="part_named",
                payload={"part_id": "planner", "name": "Planner"},
                source="test",
                external_id=f"{user}:1",
            ),
        ]
    )
    # When the worker's services, on the service's login, refresh the user
    settings = WorkerSettings.from_env(
        {"DATABASE_URL": service_login, "DATABASE_ROLE": "service_role"}, summarizer="rules"
    )
    services = build_worker(settings)
    try:
        from user_memory.domain.summary.pipeline import refresh_user

        outcome = refresh_user(
            user,
            Window(start=day, end=day + timedelta(days=1)),
            "daily:2031-03-03",
            store=services.store,
            activity=services.activity,
            summarizer=services.summarizer,
            cfg=services.pipeline,
        )
    finally:
        services.close()
    # Then the version is written and the activity marked, as the owner sees it
    with pool.connection() as conn:
        head = conn.execute("SELECT version FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()
        unsummarized = conn.execute(
            "SELECT count(*) FROM user_activity WHERE user_id = %s AND summarized_version IS NULL", (user,)
        ).fetchone()
    assert head == (1,) and unsummarized == (0,), outcome


def test_a_login_joins_one_group_and_an_administrative_name_is_refused(conn, database_url):
    name = f"um_moved_login_{uuid.uuid4().hex[:8]}"
    password = secrets.token_urlsafe(24)
    try:
        # Given a login created for the API, then moved to the service
        assert create_login(conn, name, password, "api") is True
        assert create_login(conn, name, password, "service") is False
        # Then it is a member of the service's group only
        member = conn.execute(
            "SELECT pg_has_role(%s, 'user_memory_api', 'MEMBER'), pg_has_role(%s, 'user_memory_service', 'MEMBER')",
            (name, name),
        ).fetchone()
        assert member == (False, True)
    finally:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
    # And the owner, a group role, a short password or an unknown group are refused
    owner = conn.info.user
    for args, message in (
        ((owner, password, "api"), "administrative role"),
        (("user_memory_api", password, "api"), "not a login role name"),
        (("um_x", "short", "api"), "at least 16 characters"),
        (("um_x", password, "owner"), "must be one of"),
    ):
        with pytest.raises(MigrationError, match=message):
            create_login(conn, *args)


def test_a_login_that_may_not_take_its_role_fails_to_start_with_one_line(api_login):
    # Given the API's login told to act as a role it is not a member of
    with pytest.raises(StorageUnavailable, match="as role user_memory_service") as caught:
        open_pool(api_login, role="user_memory_service", timeout=2)
    assert "\n" not in str(caught.value)


@pytest.fixture
def cluster_superuser(cluster_admin_url: str | None, database_url: str) -> Iterator[psycopg.Connection]:
    """The embedded cluster's superuser, in the test database (it reads the server's log and edits
    its authentication file)."""
    if cluster_admin_url is None:
        pytest.skip("needs the embedded cluster's superuser (the server's log and pg_hba.conf)")
    dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    with psycopg.connect(make_conninfo(cluster_admin_url, dbname=dbname), autocommit=True) as c:
        yield c


def test_a_logins_password_reaches_the_server_only_as_its_scram_verifier(conn, database_url, cluster_superuser):
    # Given the server logging the owner's DDL, and asking the new login for its password over
    # SCRAM-SHA-256 authentication (the cluster trusts every other local connection)
    name = f"um_scram_login_{uuid.uuid4().hex[:8]}"
    password = secrets.token_urlsafe(24)
    admin = cluster_superuser
    owner, dbname = sql.Identifier(conn.info.user), sql.Identifier(conn.info.dbname)
    log = Path(admin.execute("SHOW data_directory").fetchone()[0]) / "log"
    hba = Path(admin.execute("SHOW hba_file").fetchone()[0])
    trusted = hba.read_text()
    admin.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} SET log_statement = 'ddl'").format(owner, dbname))
    hba.write_text(f"local all {name} scram-sha-256\nhost all {name} all scram-sha-256\n{trusted}")
    admin.execute("SELECT pg_reload_conf()")
    logged_from = log.stat().st_size
    try:
        # When the owner, in a new session, creates the login with that password
        with psycopg.connect(database_url, autocommit=True) as owner_session:
            assert create_login(owner_session, name, password, "api") is True
        logged = log.read_bytes()[logged_from:].decode(errors="replace")
        stored = admin.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (name,)).fetchone()[0]
        # Then the statement the server logged carries the password's SCRAM verifier, never the password
        assert f'ALTER ROLE "{name}" LOGIN INHERIT PASSWORD' in logged
        assert password not in logged
        # And the role stores that verifier as it was sent
        assert stored.startswith("SCRAM-SHA-256$4096:") and stored in logged
        # And the login signs in with its password under SCRAM authentication, and with no other
        with psycopg.connect(make_conninfo(database_url, user=name, password=password)) as login:
            assert login.execute("SELECT current_user").fetchone()[0] == name
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(make_conninfo(database_url, user=name, password=password[:-1] + "!"))
    finally:
        hba.write_text(trusted)
        admin.execute("SELECT pg_reload_conf()")
        admin.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET log_statement").format(owner, dbname))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(password=st.text(alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=16, max_size=64))
def test_the_verifier_sent_is_rfc_5802s_for_the_password(conn, password):
    # Given a password (ASCII, which SASLprep leaves as it is)
    # When its verifier is computed for a login
    verifier = scram_sha_256_verifier(conn, "um_any_login", password)
    # Then it is RFC 5803's form, and its keys are the ones RFC 5802 derives from the password and salt
    match = re.fullmatch(r"SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)", verifier)
    assert match, verifier
    iterations = int(match[1])
    salt, stored_key, server_key = (base64.b64decode(match[i]) for i in (2, 3, 4))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert stored_key == hashlib.sha256(client_key).digest()
    assert server_key == hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    # And it never holds the password
    assert password not in verifier

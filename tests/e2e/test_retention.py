"""The daily key-value retention job end to end: the real handler, a real EventBridge scheduled
event, real PostgreSQL (the session's database), the services built the way the Lambda builds them.

Entries are written through PostgresKv with a clock set in the past, so their ages are real to
the purge, which runs on the wall clock like the Lambda.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.adapters.kv import PostgresKv
from user_memory.adapters.postgres import open_pool
from user_memory.config import RetentionSettings
from user_memory.errors import ConfigError, StorageUnavailable
from user_memory.observability import metrics
from user_memory.runtime import build_retention
from user_memory_functions.retention.app import handler
from user_memory_local.poller import FakeLambdaContext

from tests.conftest import EVENTS

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

EVENT = json.loads((EVENTS / "retention_scheduled_event.json").read_text())


def context() -> FakeLambdaContext:
    return FakeLambdaContext(
        function_name="user-memory-retention",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:user-memory-retention",
        timeout_seconds=300,
    )


def kv_at(pool: Any, when: datetime) -> PostgresKv:
    """A store whose clock reads `when`: what it writes is as old as `when` is."""
    return PostgresKv(pool, now=lambda: when)


@pytest.fixture
def emitted(monkeypatch, capsys):
    """The metrics the invocations flush (Powertools' EMF lines on stdout), enabled for this test."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics.clear_metrics()  # other tests run with metrics disabled, which never flushes them
    capsys.readouterr()

    def read() -> list[dict[str, Any]]:
        return [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith('{"_aws"')]

    return read


def live_keys(conn: Any, user: uuid.UUID) -> set[str]:
    """Every row of the user, whatever its expiry: what the purge left in the table."""
    rows = conn.execute("SELECT key FROM user_memory_kv WHERE user_id = %s", (user,)).fetchall()
    return {r[0] for r in rows}


def test_the_scheduled_run_deletes_expired_and_stale_entries_and_keeps_the_rest(pool, conn, logs, emitted):
    # Given the retention job as the Lambda builds it from its environment (default 30 days), on the test database
    services = build_retention(RetentionSettings.from_env({}), pool=pool)
    now = datetime.now(UTC)
    users = [uuid.uuid4(), uuid.uuid4()]
    # And, for two users, entries that expired, entries not updated for 30 days or more, and fresh ones
    for user in users:
        kv_at(pool, now - timedelta(hours=2)).put(user, "session", "expired-an-hour-ago", {"n": 1}, ttl_seconds=3600)
        kv_at(pool, now - timedelta(days=3)).put(user, "default", "expired-days-ago", "x", ttl_seconds=60)
        kv_at(pool, now - timedelta(days=31)).put(user, "default", "stale-no-ttl", [1, 2, 3])
        kv_at(pool, now - timedelta(days=30, minutes=1)).put(user, "notes", "stale-just-over", True)
        kv_at(pool, now - timedelta(days=40)).put(user, "notes", "stale-with-ttl", 1, ttl_seconds=365 * 86400)
        kv_at(pool, now - timedelta(days=29)).put(user, "default", "fresh-29-days", "keep")
        kv_at(pool, now - timedelta(minutes=5)).put(user, "session", "fresh-ttl", {"n": 2}, ttl_seconds=3600)
        kv_at(pool, now).put(user, "default", "fresh-now", None)
    # And an entry written 40 days ago but rewritten today: its age counts from the last write
    kv_at(pool, now - timedelta(days=40)).put(users[0], "default", "rewritten", 1)
    kv_at(pool, now - timedelta(minutes=1)).put(users[0], "default", "rewritten", 2)

    # When EventBridge's daily scheduled event invokes the handler
    result = handler(EVENT, context(), services=services)

    # Then exactly the expired and the stale entries are gone, for every user
    for user in users:
        kept = live_keys(conn, user) - {"rewritten"}
        assert kept == {"fresh-29-days", "fresh-ttl", "fresh-now"}, user
    assert "rewritten" in live_keys(conn, users[0])
    # And the handler reports what it deleted (at least these users' ten: the database is shared by the session)
    assert result["max_age_days"] == 30
    assert result["deleted"] >= 10
    # And one line logs the count and the age, never a key or a value
    [line] = logs.named("kv purged")
    assert (line["deleted"], line["max_age_days"]) == (result["deleted"], 30)
    assert not any("stale" in str(v) or "expired" in str(v) for v in line.values() if isinstance(v, str))
    # And the count is a metric
    [emf] = emitted()
    assert emf["KvEntriesPurged"] in (float(result["deleted"]), [float(result["deleted"])])
    assert "RetentionFailed" not in emf
    # And a second run finds nothing of these users left to delete
    before = {user: live_keys(conn, user) for user in users}
    handler(EVENT, context(), services=services)
    assert {user: live_keys(conn, user) for user in users} == before


def test_the_max_age_comes_from_the_environment(pool, conn):
    # Given the job configured with KV_MAX_AGE_DAYS=7
    services = build_retention(RetentionSettings.from_env({"KV_MAX_AGE_DAYS": "7"}), pool=pool)
    now = datetime.now(UTC)
    user = uuid.uuid4()
    kv_at(pool, now - timedelta(days=8)).put(user, "default", "eight-days", 1)
    kv_at(pool, now - timedelta(days=6)).put(user, "default", "six-days", 1)
    # When the scheduled run purges
    result = handler(EVENT, context(), services=services)
    # Then entries idle for 7 days or more are deleted, younger ones kept
    assert result["max_age_days"] == 7
    assert live_keys(conn, user) == {"six-days"}


def test_a_namespace_keeps_its_entries_for_its_own_shorter_age(pool, conn):
    # Given the job configured to keep the scratch namespace 1 day (the rest 30)
    env = {"KV_NAMESPACE_MAX_AGE_DAYS": '{"scratch": 1}'}
    services = build_retention(RetentionSettings.from_env(env), pool=pool)
    now = datetime.now(UTC)
    user = uuid.uuid4()
    kv_at(pool, now - timedelta(days=2)).put(user, "scratch", "two-days", 1)
    kv_at(pool, now - timedelta(hours=12)).put(user, "scratch", "half-a-day", 1)
    kv_at(pool, now - timedelta(days=2)).put(user, "default", "two-days-elsewhere", 1)
    # When the scheduled run purges
    result = handler(EVENT, context(), services=services)
    # Then only the namespace's entries idle for a day or more went, counted per namespace
    assert result["by_namespace"]["scratch"] >= 1
    assert live_keys(conn, user) == {"half-a-day", "two-days-elsewhere"}


def test_a_namespace_age_that_is_not_a_namespace_or_a_day_count_is_refused():
    for bad in ('{"Bad Name": 1}', '{"scratch": 0}', '["scratch"]'):
        with pytest.raises(ConfigError):
            RetentionSettings.from_env({"KV_NAMESPACE_MAX_AGE_DAYS": bad})


def test_a_failing_purge_is_logged_counted_and_fails_the_invocation(database_url, logs, emitted):
    # Given the job's services on a pool that has been closed (the database is unreachable)
    dead = open_pool(database_url)
    dead.close()
    services = build_retention(RetentionSettings.from_env({}), pool=dead)
    # When the scheduled run invokes the handler
    with pytest.raises(StorageUnavailable):
        handler(EVENT, context(), services=services)
    # Then the failure is logged once with its type and a reason, and nothing claims a purge
    [line] = logs.named("retention failed")
    assert line["error_type"] == "StorageUnavailable"
    assert line["reason"]
    assert line["levelname"] == "ERROR"
    assert logs.named("kv purged") == []
    # And it is counted, so the metric shows it even before the errors alarm
    [emf] = emitted()
    assert emf["RetentionFailed"] in (1.0, [1.0]) and "KvEntriesPurged" not in emf


def test_a_job_that_cannot_start_is_logged_and_fails_the_invocation(monkeypatch, logs):
    # Given no database configured at all (the handler builds its own services from the environment)
    for name in ("DATABASE_URL", "DATABASE_SECRET_NAME", "DATABASE_URL_PARAMETER"):
        monkeypatch.delenv(name, raising=False)
    # When the scheduled run invokes the handler without services
    # Then it fails with the configuration error
    with pytest.raises(ConfigError):
        handler(EVENT, context())
    # And the failure is logged as a retention failure naming the missing setting
    [line] = logs.named("retention failed")
    assert line["error_type"] == "ConfigError"
    assert "DATABASE_URL" in line["reason"]


def test_the_scheduled_run_reindexes_users_left_behind_and_purges_orphan_vectors(pool, conn, store, logs):
    # Given a user whose index was left behind (a deployment upgraded to migration 012, or a writer
    # that sent no item changes): the head is at version 2, memory_items reflect nothing
    services = build_retention(RetentionSettings.from_env({}), pool=pool)
    user = uuid.uuid4()
    store.append(user, {"summary": "likes trains"}, expected_version=0, source="test")
    store.append(user, {"summary": "likes trains", "safety_notes": "none"}, expected_version=1, source="test")
    conn.execute("DELETE FROM memory_items WHERE user_id = %s", (user,))
    conn.execute("UPDATE user_memory_heads SET indexed_version = 0 WHERE user_id = %s", (user,))
    # And a vector whose text no item of its user has any more
    conn.execute(
        "INSERT INTO memory_embeddings (user_id, text_md5, model, embedding) VALUES (%s, md5('gone'), 'm', %s::vector)",
        (user, "[" + ",".join(["0.1"] * 256) + "]"),
    )
    # When the scheduled run invokes the handler
    result = handler(EVENT, context(), services=services)
    # Then the user's items are the head's again, and the index is marked in step
    rows = conn.execute("SELECT path, version FROM memory_items WHERE user_id = %s ORDER BY path", (user,)).fetchall()
    assert rows == [("/safety_notes", 2), ("/summary", 2)]
    head = conn.execute("SELECT version, indexed_version FROM user_memory_heads WHERE user_id = %s", (user,))
    assert head.fetchone() == (2, 2)
    # And the orphaned vector is gone
    assert conn.execute("SELECT count(*) FROM memory_embeddings WHERE user_id = %s", (user,)).fetchone()[0] == 0
    # And the run reports and logs both
    assert result["reindexed"] >= 1 and result["orphan_vectors"] >= 1
    [line] = logs.named("index upkeep")
    assert (line["reindexed"], line["orphan_vectors"]) == (result["reindexed"], result["orphan_vectors"])
    # And a second run leaves the user as it is (nothing of it is behind any more)
    handler(EVENT, context(), services=services)
    after = conn.execute("SELECT path, version FROM memory_items WHERE user_id = %s ORDER BY path", (user,))
    assert after.fetchall() == rows
    assert conn.execute("SELECT indexed_version FROM user_memory_heads WHERE user_id = %s", (user,)).fetchone()[0] == 2


def test_the_scheduled_run_removes_the_refresh_rows_no_claim_can_be_refused_by(pool, conn):
    # Given a user whose last refresh's window ended two days ago, and one whose refresh is recent
    services = build_retention(RetentionSettings.from_env({}), pool=pool)
    now = datetime.now(UTC)
    old, recent = uuid.uuid4(), uuid.uuid4()
    for user, at in ((old, now - timedelta(days=2)), (recent, now - timedelta(hours=1))):
        conn.execute(
            "INSERT INTO user_memory_refreshes (user_id, run_key, requested_at, window_end, requested_by)"
            " VALUES (%s, %s, %s, %s, 'user')",
            (user, f"ondemand:{at:%Y-%m-%dT%H:%M:%SZ}", at, at),
        )
    # When the scheduled run invokes the handler
    result = handler(EVENT, context(), services=services)
    # Then the old row is gone (an erased user's too) and the recent one, which still rate-limits, is kept
    rows = conn.execute(
        "SELECT user_id FROM user_memory_refreshes WHERE user_id = ANY(%s)", ([old, recent],)
    ).fetchall()
    assert [r[0] for r in rows] == [recent]
    assert result["refreshes_purged"] >= 1

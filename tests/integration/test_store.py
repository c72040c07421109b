"""What only the PostgreSQL recorder must show: its rows, its error translation, its pool."""

from __future__ import annotations

import psycopg
import pytest
from user_memory.adapters.postgres import PostgresRecorder, open_pool, translate
from user_memory.domain.memory.repository import MemoryStore
from user_memory.errors import ConfigError, StorageError, StorageUnavailable

pytestmark = pytest.mark.integration


def test_checkpoint_rows_hold_the_full_document_and_version_one_is_stored_once(store, user_id, conn):
    # Given 50 versions (the default interval)
    for v in range(1, 51):
        store.append(user_id, {"v": v, "text": "x" * 100}, expected_version=v - 1, source="t")
    rows = dict(
        conn.execute(
            "SELECT version, full_snapshot_content IS NOT NULL FROM user_memory_snapshots WHERE user_id = %s",
            (user_id,),
        ).fetchall()
    )
    # Then only version 50 carries the document; version 1 is its patch alone
    assert rows[1] is False and rows[50] is True
    assert sum(rows.values()) == 1


def test_a_dsn_that_is_not_a_connection_string_is_a_config_error():
    with pytest.raises(ConfigError, match="not a PostgreSQL connection string"):
        open_pool("this is not a dsn")


def test_an_unreachable_database_is_storage_unavailable():
    # Given a port nothing listens on
    with pytest.raises(StorageUnavailable, match="cannot connect"):
        open_pool("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", timeout=2)


def test_a_pool_that_lost_its_server_reports_storage_unavailable(database_url, user_id):
    # Given a store whose pool is closed (the database went away)
    pool = open_pool(database_url)
    store = MemoryStore(PostgresRecorder(pool))
    store.head(user_id)
    pool.close()
    # Then reads fail as StorageUnavailable, not as a driver error
    with pytest.raises(StorageUnavailable):
        store.head(user_id)


def test_driver_errors_are_translated_without_row_values(conn):
    # Given a driver error whose DETAIL quotes a row value
    try:
        conn.execute("SELECT 1/0")
    except psycopg.Error as err:
        translated = translate(err)
    assert isinstance(translated, StorageError) and "division by zero" in str(translated)

"""Hostile input on PostgreSQL: every time the service takes reads back through psycopg on any
session clock, and migration 018 takes sensitive fields out of the item values already stored.

The session's database is shared with every other test, so each test makes its own users (uuid)
and checks only their rows.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb
from user_memory.adapters.migrations import packaged_migrations
from user_memory.domain.companion.times import check_time

pytestmark = pytest.mark.integration

# Session clocks at the edges: psycopg hands a timestamptz back on the session's clock.
CLOCKS = ("UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/St_Johns", "Asia/Kathmandu")


@settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(
    naive=st.datetimes(min_value=datetime(1899, 12, 30), max_value=datetime(3000, 1, 2))
    | st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    minutes=st.integers(-(24 * 60 - 1), 24 * 60 - 1),
)
def test_a_time_the_service_takes_is_stored_and_read_back_on_any_session_clock(conn, naive, minutes):
    # Given any aware time Python can hold, with any offset it can hold
    value = naive.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    try:
        check_time(value)
    except ValueError:
        return  # refused: never stored
    # When it is stored as a timestamptz and read back on each clock
    for clock in CLOCKS:
        with conn.transaction():
            conn.execute("SELECT set_config('TimeZone', %s, true)", (clock,))
            # Then psycopg reads the same instant (never "timestamp too small", never out of range)
            (back,) = conn.execute("SELECT %s::timestamptz", (value,)).fetchone()
            assert back == value
            (text_back,) = conn.execute("SELECT %s::text::timestamptz", (value.isoformat(),)).fetchone()
            assert text_back == value


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_the_times_it_refuses_are_the_ones_psycopg_could_not_read_back(conn, text):
    # Given a time at the edge (stored fine by PostgreSQL, as the old service did)
    value = datetime.fromisoformat(text)
    with pytest.raises(ValueError):
        check_time(value)
    # Then reading it back is what failed: psycopg cannot hand it over on a UTC clock
    with conn.transaction():
        conn.execute("SELECT set_config('TimeZone', 'UTC', true)")
        with pytest.raises(psycopg.DataError):
            conn.execute("SELECT %s::timestamptz", (value,)).fetchone()


def test_migration_018_takes_sensitive_fields_out_of_stored_item_values(conn):
    # Given items stored whole (as before the service redacted them): an event with attendees,
    # a list entry with a phone, and one with nothing sensitive
    user = uuid.uuid4()
    event = {
        "id": "e",
        "summary": "Planning",
        "attendees": [{"name": "Lead", "email": "lead@example.com", "response_status": "accepted"}],
        "nested": {"deeper": [{"phone": "+351 912 345 678", "keep": 1}]},
    }
    plain = {"id": "t", "text": "email the landlord", "tags": ["email"]}
    rows = [("/events/e", "event", event), ("/todos/t", "todo", plain), ("/basic_info/date_of_birth", "leaf", "x")]
    for path, kind, value in rows:
        conn.execute(
            "INSERT INTO memory_items (user_id, path, version, kind, text, value) VALUES (%s, %s, 1, %s, %s, %s)",
            (user, path, kind, kind, Jsonb(value)),
        )
    # When the migration's statements run (they are idempotent)
    statements = (packaged_migrations() / "018_redact_item_values.sql").read_text()
    with conn.transaction():
        conn.execute(statements)
    # Then the sensitive keys are gone at every depth, and nothing else changed
    stored = dict(conn.execute("SELECT path, value FROM memory_items WHERE user_id = %s", (user,)).fetchall())
    assert stored["/events/e"] == {
        "id": "e",
        "summary": "Planning",
        "attendees": [{"name": "Lead", "response_status": "accepted"}],
        "nested": {"deeper": [{"keep": 1}]},
    }
    assert stored["/todos/t"] == plain
    assert stored["/basic_info/date_of_birth"] == "x"
    conn.execute("DELETE FROM memory_items WHERE user_id = %s", (user,))
    assert conn.execute("SELECT to_regprocedure('pg_temp.user_memory_redacted(jsonb)')").fetchone() == (None,)

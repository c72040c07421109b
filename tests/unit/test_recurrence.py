"""Recurring events and times under hostile input (domain/companion/recurrence.py, domain/companion/times.py): rules
that never advance or never match are refused at the door and cannot stall a read, every walk
is bounded, a read restarted just before its range finds exactly what a walk from the start
finds, and every time the service takes is one PostgreSQL and psycopg can hand back.

A computation that used to hang runs in a daemon thread (tests/bounds.py), so that a
regression fails this suite instead of stalling it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from user_memory.domain.companion.elements import occurrences, validate_element
from user_memory.domain.companion.items import document_items
from user_memory.domain.companion.recurrence import (
    Budget,
    budget_scope,
    check_recurrence,
    occurrence_starts,
    rule_set,
    walk,
)
from user_memory.domain.companion.times import EARLIEST, LATEST, check_time, parse_when
from user_memory.domain.memory.document import validate_document
from user_memory.errors import BudgetExceeded, InvalidDocument

from tests.bounds import finishing

START = datetime(2026, 1, 5, 9, tzinfo=UTC)

# Rules dateutil walks for ever (INTERVAL=0) or to the year 9999 without a match.
NEVER_ADVANCES = [f"RRULE:FREQ={freq};INTERVAL=0" for freq in ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")]
NEVER_MATCHES = [
    "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
    "RRULE:FREQ=WEEKLY;BYMONTH=4;BYMONTHDAY=31",
    "RRULE:FREQ=MONTHLY;BYSETPOS=40;BYDAY=MO",
    "RRULE:FREQ=YEARLY;BYWEEKNO=1;BYMONTH=6",
    "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30;UNTIL=20270101T000000Z",
]


def event(rules: list[str], **fields: Any) -> dict[str, Any]:
    return {"id": "e", "summary": "Hostile", "start": "2026-01-05T09:00:00Z", "recurrence": rules, **fields}


# -- at the door ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", NEVER_ADVANCES)
def test_a_rule_that_never_advances_is_refused_at_once(rule):
    # Given a rule whose INTERVAL never moves the walk on; When the event is validated
    _, error, _ = finishing(lambda: validate_element("events", event([rule])))
    # Then it is refused, naming INTERVAL, well within the bound
    assert isinstance(error, InvalidDocument)
    assert "INTERVAL must be between 1 and 1000" in str(error)


@pytest.mark.parametrize("rule", NEVER_MATCHES)
def test_a_rule_that_never_matches_is_bounded(rule):
    # Given a rule no day of the calendar satisfies (dateutil scans to the year 9999 for it)
    # When the event is validated
    _, error, _ = finishing(lambda: validate_element("events", event([rule])))
    # Then it is refused as over its budget (this also pins the hook dateutil's walk must keep
    # reading: without it the check scans for seconds)
    assert isinstance(error, BudgetExceeded), error
    assert "recurrence" in str(error)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (["RRULE:FREQ=YEARLY;BYEASTER=500"], "a part this service does not read"),
        (["RRULE:FREQ=DAILY;COUNT=3;UNTIL=20260301T000000Z"], "COUNT or UNTIL, not both"),
        (["RRULE:FREQ=DAILY;FREQ=WEEKLY"], "FREQ twice"),
        (["RRULE:FREQ=DAILY;INTERVAL=99999999999"], "INTERVAL must be between 1 and 1000"),
        (["RRULE:FREQ=DAILY;UNTIL=00010101T000000Z"], "UNTIL must be a date or a date-time"),
        (["RRULE:FREQ=WEEKLY;BYDAY=" + ",".join(["MO"] * 200)], "at most 500 characters"),
        (["RRULE:FREQ=DAILY", "EXDATE:" + ",".join(["20260106T090000Z"] * 2000)], "at most 20,000 characters"),
        (["RRULE:FREQ=DAILY", "RDATE:00010101T000000Z"], "between 1900-01-01 and 2999-12-31"),
        (["RRULE:FREQ=DAILY"] * 11, "at most 10"),
    ],
)
def test_lines_that_cannot_be_expanded_cheaply_and_safely_are_refused(rules, message):
    _, error, _ = finishing(lambda: validate_element("events", event(rules)))
    assert isinstance(error, InvalidDocument) and message in str(error), error


def test_a_rule_with_rare_matches_is_accepted():
    # Given rules that match rarely but within years: a leap day, Friday the 13th
    for rule in ("RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "RRULE:FREQ=DAILY;BYMONTHDAY=13;BYDAY=FR"):
        # Then they are valid
        assert validate_element("events", event([rule]))["recurrence"] == [rule]


def test_the_recurrences_of_a_whole_document_share_one_budget():
    # Given many events each of whose checks is within its own budget
    rules = ["RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"]  # every 28 years or so: a costly first match
    with budget_scope(10**9, "probe") as spent:
        check_recurrence(rules, START)
    assert spent.used > 100
    # When they are checked inside a scope smaller than all of them together
    with budget_scope(spent.used * 3, "a document"), pytest.raises(BudgetExceeded, match="a document"):
        for _ in range(10):
            check_recurrence(rules, START)


def test_a_large_ordinary_calendar_validates_well_within_the_bound():
    # Given 2000 weekly events, the most a collection holds
    events = {
        f"e{n}": event(["RRULE:FREQ=WEEKLY;BYDAY=MO,WE", "EXDATE:20260107T090000Z"], id=f"e{n}") for n in range(2000)
    }
    # When the document is validated
    validated, error, _ = finishing(lambda: validate_document({"events": events}, "companion", max_bytes=10**7))
    # Then it is valid (the error handed back is checked, not ignored), within the bound
    assert error is None, error
    assert len(validated["events"]) == 2000


# -- on every read -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", NEVER_ADVANCES + NEVER_MATCHES)
def test_a_stored_rule_that_would_stall_a_read_is_bounded(rule):
    # Given an event stored before its rule was checked; When a week of it is read
    stored = event([rule])
    week = (datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC))
    value, error, _ = finishing(lambda: occurrences(stored, *week))
    # Then the read ends within the bound: the rule is not expanded (over budget, or unreadable)
    assert isinstance(error, BudgetExceeded) or value == [], (value, error)


def test_an_old_daily_event_costs_what_its_week_costs():
    # Given a daily event from 1950; When a week of 2990 is read
    old = event(["RRULE:FREQ=DAILY"], start="1950-01-01T08:00:00Z")
    budget = Budget(10_000, "a week")
    found = occurrences(old, datetime(2990, 3, 2, tzinfo=UTC), datetime(2990, 3, 9, tzinfo=UTC), budget)
    # Then its seven occurrences are found, walked from just before the week
    assert [o["occurrence_start"][:10] for o in found] == [f"2990-03-0{d}" for d in range(2, 9)]
    assert budget.used < 1000


def test_the_index_of_a_far_reaching_rule_is_bounded_and_an_upper_bound():
    # Given events whose last occurrence is expensive to find exactly
    events = {
        "far": event(["RRULE:FREQ=DAILY;UNTIL=29991231T000000Z"], id="far"),
        "sparse": event(["RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;UNTIL=20990101T000000Z"], id="sparse"),
    }
    # When their items are taken
    items, _, _ = finishing(lambda: document_items({"events": events}))
    # Then each is recurring, ending no later than its UNTIL
    far, sparse = items["/events/far"], items["/events/sparse"]
    assert far.recurring and far.recur_until is not None
    assert far.recur_until <= datetime(2999, 12, 31, tzinfo=UTC)
    assert sparse.recur_until is not None and sparse.recur_until <= datetime(2099, 1, 1, tzinfo=UTC)


# -- a read restarted before its range finds what a walk from the start finds ----------------------

ZONES = ["UTC", "Europe/Lisbon", "America/New_York", "Australia/Sydney", "Asia/Kolkata"]
DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


@st.composite
def rules(draw: st.DrawFn) -> str:
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]))
    parts = [f"FREQ={freq}"]
    if draw(st.booleans()):
        parts.append(f"INTERVAL={draw(st.integers(1, 5))}")
    if draw(st.booleans()):
        ordinal = freq in ("MONTHLY", "YEARLY") and draw(st.booleans())
        days = draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=3, unique=True))
        prefix = draw(st.sampled_from(["1", "2", "-1"])) if ordinal else ""
        parts.append("BYDAY=" + ",".join(prefix + d for d in days))
    if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
        days = draw(st.lists(st.sampled_from([1, 2, 13, 15, 28, 30, 31, -1]), min_size=1, max_size=3, unique=True))
        parts.append("BYMONTHDAY=" + ",".join(map(str, days)))
    if freq != "DAILY" and draw(st.booleans()):
        months = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4, unique=True))
        parts.append("BYMONTH=" + ",".join(map(str, months)))
    if draw(st.booleans()):
        hours = draw(st.lists(st.integers(0, 23), min_size=1, max_size=2, unique=True))
        parts.append("BYHOUR=" + ",".join(map(str, hours)))
    if draw(st.booleans()):
        parts.append(f"BYSETPOS={draw(st.sampled_from([1, 2, -1]))}")
    if draw(st.booleans()):
        parts.append(f"WKST={draw(st.sampled_from(DAYS))}")
    if draw(st.booleans()):
        parts.append(f"UNTIL={draw(st.integers(2030, 2045))}0615T000000Z")
    return "RRULE:" + ";".join(parts)


@settings(max_examples=80, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(
    rule=rules(),
    exclusion=st.none() | rules(),
    zone=st.sampled_from(ZONES),
    start=st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2030, 1, 1)),
    offset_days=st.integers(0, 4000),
    length_days=st.integers(1, 60),
)
def test_a_read_restarted_before_its_range_finds_what_a_walk_from_the_start_finds(
    rule, exclusion, zone, start, offset_days, length_days
):
    # Given a rule (maybe with an exclusion rule) from a start on a zone's clock
    first = start.replace(microsecond=0, tzinfo=ZoneInfo(zone))
    lines = [rule] + ([f"EXRULE:{exclusion.split(':', 1)[1]}"] if exclusion else [])
    window = (first + timedelta(days=offset_days), first + timedelta(days=offset_days + length_days))
    try:
        everything = rule_set(lines, first, Budget(2_000_000, "from the start"))
        expected = [s for s in walk(everything, until=window[1]) if s >= window[0]]
    except (ValueError, BudgetExceeded):
        assume(False)
    # When only the window is read, restarted just before it
    found = occurrence_starts(lines, first, window[0], window[1], Budget(2_000_000, "the window"))
    # Then it is the same occurrences
    assert found == expected


# -- times ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "1899-12-31",
        "3000-01-01",
        "2026-01-01T00:00:00+05:30:15.5",
        "2026-01-01T00:00:00+16:00",
        "2026-W01-1T10:00:00Z",
        "20260101T100000Z",
        "2026-01-01T10:00:00",
        "2026-01-01T10:00:00.1234567Z",
    ],
)
def test_times_outside_the_range_or_in_forms_postgresql_refuses_are_refused(text):
    with pytest.raises(ValueError):
        parse_when(text)


@pytest.mark.parametrize(
    "text", ["1900-01-01", "2999-12-31", "2026-06-10T09:00:00+01:00", "2026-05-01T10:00:00.000Z", "2026-06-10T09:00Z"]
)
def test_times_in_the_range_are_taken(text):
    assert EARLIEST <= parse_when(text) < LATEST


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    naive=st.datetimes(min_value=datetime(1899, 12, 30), max_value=datetime(3000, 1, 2))
    | st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    minutes=st.integers(-(24 * 60 - 1), 24 * 60 - 1),
)
def test_a_time_that_is_taken_converts_to_any_clock_and_back(naive, minutes):
    # Given any aware time Python can hold
    value = naive.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    try:
        check_time(value)
    except ValueError:
        return
    # When it is taken, Then it converts to the extreme clocks (as psycopg reads a timestamptz
    # back on the session's) and a week either way, without leaving Python's range
    for zone in ("Pacific/Kiritimati", "Etc/GMT+12", "America/St_Johns"):
        moved = value.astimezone(ZoneInfo(zone))
        assert moved == value
        assert (moved + timedelta(days=7)) - timedelta(days=14) < value

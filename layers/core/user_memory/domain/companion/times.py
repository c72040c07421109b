"""Times a user, another service or a model hands the service: one check, so that whatever is
stored reads back.

PostgreSQL's timestamptz holds 4713 BC to 294276 AD and Python's datetime the years 1 to 9999,
but psycopg reads a timestamptz back on the session's clock, and the service adds days, weeks and
time-zone offsets to what it stored: 0001-01-01T00:00:00+01:00 is year 0 in UTC, stored fine and
then unreadable (the user's export and every nightly run failed on it). So every time the service
takes is aware (an offset of whole minutes, at most 15:59 as PostgreSQL reads it) and lies in
[EARLIEST, LATEST): the years 1900 through 2999 in UTC, far enough inside both ranges that any
time zone's wall clock, the digest's windows and an event's length stay inside them too. A time
written as text must be RFC 3339 (a date YYYY-MM-DD, or a date-time with seconds optional, a
fraction of at most six digits and Z or an offset): Python reads many more ISO 8601 forms
(week dates, offsets with fractions of a second) that PostgreSQL refuses.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator

EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)  # excluded
MAX_OFFSET = timedelta(hours=15, minutes=59)  # PostgreSQL refuses a larger displacement
RANGE_TEXT = "between 1900-01-01 and 2999-12-31 (UTC)"

_DATE = r"\d{4}-\d{2}-\d{2}"
_RFC3339 = re.compile(rf"{_DATE}|{_DATE}T\d{{2}}:\d{{2}}(?::\d{{2}}(?:\.\d{{1,6}})?)?(?:Z|[+-]\d{{2}}:\d{{2}})")


def check_time(value: datetime) -> datetime:
    """`value` if it can be stored and read back (ValueError otherwise): aware, an offset of whole
    minutes within PostgreSQL's, and in [EARLIEST, LATEST)."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("needs a time zone offset (Z or +HH:MM)")
    if offset % timedelta(minutes=1) or abs(offset) > MAX_OFFSET:
        raise ValueError("its offset must be whole minutes, at most 15:59 from UTC")
    try:
        utc = value.replace(tzinfo=None) - offset  # naive: no conversion that could overflow
    except OverflowError:
        raise ValueError(f"must be {RANGE_TEXT}") from None
    if not EARLIEST.replace(tzinfo=None) <= utc < LATEST.replace(tzinfo=None):
        raise ValueError(f"must be {RANGE_TEXT}")
    return value


def parse_when(value: str) -> datetime:
    """A date (YYYY-MM-DD: that day's start, UTC) or an RFC 3339 date-time with an offset, checked
    by `check_time` (ValueError when it is neither, or out of range)."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be a date (YYYY-MM-DD) or a date-time with an offset (2026-06-10T09:00:00+01:00)")
    if len(value) == 10:
        parsed = datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC)
    else:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return check_time(parsed)


def check_date(value: date) -> date:
    """`value` if its day lies in [EARLIEST, LATEST) (ValueError otherwise): a day the service
    turns into times (its start, a window ending a day later) that `check_time` takes."""
    if not EARLIEST.date() <= value < LATEST.date():
        raise ValueError(f"must be {RANGE_TEXT}")
    return value


# Every datetime or date field of a request, query parameter or message model is one of these:
# parsed by pydantic, then checked here (tests/unit/test_times_everywhere.py finds any that is not).
StorableTime = Annotated[datetime, AfterValidator(check_time)]
StorableDate = Annotated[date, AfterValidator(check_date)]

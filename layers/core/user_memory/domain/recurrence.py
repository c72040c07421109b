"""Calendar times (a date or a date-time with an offset, an event's start on its own clock) and
recurring events (RFC 5545 RRULE, EXRULE, RDATE and EXDATE lines, as Google Calendar sends them),
read with dateutil, and bounded.

A rule is walked from the event's start, so the cost of expanding it grows with its age and its
frequency: only calendar frequencies are accepted (DAILY, WEEKLY, MONTHLY, YEARLY), COUNT is
capped, and no walk goes past MAX_WALK occurrences (what lies beyond is not expanded, and the
index treats such an event as recurring for ever). Lines dateutil cannot read against the
event's start are refused when the event is validated, so reading never fails later.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ALLOWED_FREQUENCIES = frozenset({"DAILY", "WEEKLY", "MONTHLY", "YEARLY"})
MAX_COUNT = 5000
MAX_WALK = 20_000  # occurrences walked from an event's start, at most (~55 years of a daily event)

_FREQ = re.compile(r"(?:^|;|:)FREQ=([A-Za-z]+)")
_COUNT = re.compile(r"(?:^|;|:)COUNT=(\d+)")
_FLOATING_UNTIL = re.compile(r"(UNTIL=)(\d{8}(?:T\d{6})?)(?=;|$)")
_FLOATING_DATES = re.compile(r"^(EXDATE|RDATE)(?:;VALUE=DATE(?:-TIME)?)?:(\d{8}(?:T\d{6})?(?:,\d{8}(?:T\d{6})?)*)$")


def parse_when(value: str) -> datetime:
    """A date (YYYY-MM-DD: that day's start, UTC) or an ISO 8601 date-time with an offset."""
    if len(value) == 10:
        return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("a date-time needs an offset (Z or +HH:MM)")
    return parsed


def event_start(event: dict[str, Any]) -> datetime:
    """An event's start as an aware time, on the event's own clock when it names a time zone, so
    that a recurrence keeps its wall-clock time across daylight-saving changes."""
    start = parse_when(event["start"])
    zone = event.get("timezone")
    if zone:
        try:
            return start.astimezone(ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError):
            return start
    return start


def _utc_stamp(value: str, zone: tzinfo, end_of_day: bool) -> str:
    if len(value) == 8:
        value += "T235959" if end_of_day else "T000000"
    local = datetime.strptime(value, "%Y%m%dT%H%M%S").replace(tzinfo=zone)
    return local.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def recurrence_lines(rules: list[str], start: datetime) -> list[str]:
    """The recurrence lines as dateutil can read them against an aware start: a date or floating
    UNTIL, EXDATE or RDATE (RFC 5545's form for an all-day event, which Google Calendar sends) is
    read on the start's clock and written in UTC (a date UNTIL: through the end of that day);
    dateutil refuses, or fails while iterating, when floating and aware times are mixed."""
    zone = start.tzinfo
    if zone is None:
        return list(rules)
    fixed = []
    for line in rules:
        if line.startswith(("RRULE:", "EXRULE:")):
            line = _FLOATING_UNTIL.sub(lambda m: m.group(1) + _utc_stamp(m.group(2), zone, True), line)
        elif match := _FLOATING_DATES.match(line):
            values = ",".join(_utc_stamp(v, zone, False) for v in match.group(2).split(","))
            line = f"{match.group(1)}:{values}"
        fixed.append(line)
    return fixed


def rule_set(rules: list[str], start: datetime) -> Any:
    """The dateutil rule set of the lines, from `start` (ValueError when a line cannot be read)."""
    from dateutil.rrule import rrulestr

    try:
        return rrulestr("\n".join(recurrence_lines(rules, start)), dtstart=start, forceset=True)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"recurrence cannot be read: {type(err).__name__}") from None


def walk(rules_set: Any, until: datetime | None = None, limit: int = MAX_WALK) -> Iterator[datetime]:
    """Occurrence starts in order, before `until` (all when None), at most `limit` of them walked;
    ValueError when dateutil fails on them (floating and aware times mixed)."""
    try:
        for n, when in enumerate(rules_set):
            if n >= limit or (until is not None and when >= until):
                return
            yield when
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"recurrence cannot be expanded: {type(err).__name__}") from None


def check_recurrence(rules: list[str], start: datetime) -> None:
    """Refuse what cannot be expanded cheaply and safely: another frequency than DAILY, WEEKLY,
    MONTHLY or YEARLY, a COUNT over MAX_COUNT, lines dateutil cannot read or iterate."""
    for line in rules:
        if line.startswith(("RRULE:", "EXRULE:")):
            freq = _FREQ.search(line)
            if freq is None or freq.group(1).upper() not in ALLOWED_FREQUENCIES:
                raise ValueError("a recurrence rule's FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY")
            count = _COUNT.search(line)
            if count is not None and int(count.group(1)) > MAX_COUNT:
                raise ValueError(f"a recurrence rule's COUNT must be at most {MAX_COUNT}")
    for _ in walk(rule_set(rules, start), limit=3):
        pass


def recurrence_end(rules: list[str], start: datetime) -> datetime | None:
    """The last occurrence's start of a recurring event (None: it recurs for ever, or further than
    MAX_WALK occurrences); RDATE and EXDATE lines count, so an added date after the rules' last one
    is not missed."""
    lines = recurrence_lines(rules, start)
    rule_lines = [r for r in lines if r.startswith("RRULE:")]
    if not rule_lines or not all(("UNTIL=" in r or "COUNT=" in r) for r in rule_lines):
        return None
    last = None
    walked = 0
    for when in walk(rule_set(rules, start), limit=MAX_WALK + 1):
        walked += 1
        last = when
    if walked > MAX_WALK:
        return None
    return last

"""Recurring events (RFC 5545 RRULE, EXRULE, RDATE and EXDATE lines, as Google Calendar sends
them), read with dateutil, bounded in time and size.

dateutil walks a rule from the event's start: every occurrence, and every month (a year, for
YEARLY) of the calendar it scans for the next one. A rule that matches rarely or never (the 30th
of February, BYSETPOS=40) scans up to the year 9999 without yielding anything, and one that never
advances (INTERVAL=0) scans for ever: either stalled the request, the worker's batch, and every
later write, read and digest of its user. So:

- Every walk spends from a Budget of steps (`STEP_COST`: an occurrence, a line read, a month or a
  year scanned, calibrated to about a microsecond each) and raises BudgetExceeded when it is
  spent. A `budget_scope` (a document's validation, one query, the index of one document) is a
  second budget every walk inside it also spends from, so many cheap rules cannot add up to a
  stall either.
- At the door (`check_recurrence`, run by the Event model): at most MAX_LINES lines of a known
  shape and size; FREQ DAILY, WEEKLY, MONTHLY or YEARLY; INTERVAL 1..MAX_INTERVAL; COUNT at most
  MAX_COUNT and not with UNTIL; dates in the service's range (domain/companion/times.py); and each RRULE and
  EXRULE must reach its first occurrence, or its end, within CHECK_STEPS (a few years of the
  calendar): a rule that never matches in that window is refused (422 budget-exceeded).
- Reads never trust what is stored: the same static checks run again (a line that fails them is
  not expanded), every walk is budgeted, and a read walks from the range it was asked for, not
  from the start: a rule without COUNT is restarted at its own period just before the range (the
  same periods, the defaults it took from its start written out), so a daily event from 1990
  costs what a week of it costs.
- Nothing is walked past LATEST (domain/companion/times.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import islice
from typing import Any

from user_memory.domain.companion.times import EARLIEST, LATEST, check_time, parse_when
from user_memory.errors import BudgetExceeded

__all__ = ["parse_when", "event_start", "check_recurrence", "occurrence_starts", "recurrence_end", "Budget"]

ALLOWED_FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
RULE_KEYS = frozenset(
    {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYSETPOS", "BYMONTH", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYDAY",
     "BYHOUR", "BYMINUTE", "BYSECOND", "WKST"}
)  # fmt: skip
MAX_LINES = 10
MAX_RULE_CHARS = 500
MAX_DATE_LINE_CHARS = 20_000  # an EXDATE line of about a thousand dates (Google's cancelled instances)
MAX_COUNT = 5000
MAX_INTERVAL = 1000
MAX_WALK = 20_000  # occurrences walked, at most, whatever the budget

# What a step costs, in about a microsecond each (dateutil 2.9 on one core of a laptop-class
# machine): an occurrence, a line read, a month of the calendar scanned by a DAILY, WEEKLY or
# MONTHLY rule, a year scanned by a YEARLY one. A budget of 250,000 steps is about a quarter of a
# second (a third of a second on a loaded core).
STEP_COST = {"yield": 2, "line": 25, "DAILY": 32, "WEEKLY": 9, "MONTHLY": 4, "YEARLY": 30}
CHECK_STEPS = 10_000  # one rule at the door: about 25 years of a DAILY rule's calendar, 300 of a YEARLY one
DOCUMENT_STEPS = 250_000  # every event of one document, at the door
EVENT_STEPS = 25_000  # one event's occurrences in one range
QUERY_STEPS = 250_000  # every event of one query (GET /me/events, a digest)
END_STEPS = 15_000  # one event's last occurrence, for the index
INDEX_STEPS = 250_000  # every event of one document's index

_WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_FLOATING_UNTIL = re.compile(r"(UNTIL=)(\d{8}(?:T\d{6})?)(?=;|$)")
_FLOATING_DATES = re.compile(r"^(EXDATE|RDATE)(?:;VALUE=DATE(?:-TIME)?)?:(\d{8}(?:T\d{6})?(?:,\d{8}(?:T\d{6})?)*)$")
_UNTIL_UTC = re.compile(r"^\d{8}T\d{6}Z$")
_DATES_LINE = re.compile(r"^((?:RDATE|EXDATE)(?:;[A-Z-]+=[A-Za-z0-9_/+-]+)*):([0-9TZ,]+)$")


# -- budgets -------------------------------------------------------------------------------------------


class Budget:
    """Steps a computation may take; `spend` raises BudgetExceeded once they are used (and spends
    from the enclosing `budget_scope` too)."""

    def __init__(self, steps: int, what: str) -> None:
        self.left = steps
        self.steps = steps
        self.what = what
        self.scope = _SCOPE.get()

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise BudgetExceeded(f"{self.what} needs more than {self.steps:,} steps")
        if self.scope is not None:
            self.scope.spend(steps)

    @property
    def used(self) -> int:
        return self.steps - self.left


_SCOPE: ContextVar[Budget | None] = ContextVar("recurrence_budget_scope", default=None)


@contextmanager
def budget_scope(steps: int, what: str) -> Iterator[Budget]:
    """A budget every walk inside the block also spends from (nested scopes spend from both)."""
    budget = Budget(steps, what)
    token = _SCOPE.set(budget)
    try:
        yield budget
    finally:
        _SCOPE.reset(token)


# -- lines ------------------------------------------------------------------------------------------


def event_start(event: dict[str, Any]) -> datetime:
    """An event's start as an aware time, on the event's own clock when it names a time zone, so
    that a recurrence keeps its wall-clock time across daylight-saving changes."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
        try:
            if line.startswith(("RRULE:", "EXRULE:")):
                line = _FLOATING_UNTIL.sub(lambda m: m.group(1) + _utc_stamp(m.group(2), zone, True), line)
            elif match := _FLOATING_DATES.match(line):
                values = ",".join(_utc_stamp(v, zone, False) for v in match.group(2).split(","))
                line = f"{match.group(1)}:{values}"
        except (ValueError, OverflowError):
            pass  # left as it is: the checks below refuse it
        fixed.append(line)
    return fixed


# The values each BY part takes (RFC 5545 3.3.10): numbers in a range, zero excluded where a
# negative counts from the end.
_BY_RANGES = {
    "BYSETPOS": (-366, 366),
    "BYMONTH": (1, 12),
    "BYMONTHDAY": (-31, 31),
    "BYYEARDAY": (-366, 366),
    "BYWEEKNO": (-53, 53),
    "BYHOUR": (0, 23),
    "BYMINUTE": (0, 59),
    "BYSECOND": (0, 59),
}
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")


def _rule_parts(line: str) -> dict[str, str]:
    """An RRULE or EXRULE line's parts, each checked (ValueError naming what is not a rule this
    service expands)."""
    if len(line) > MAX_RULE_CHARS:
        raise ValueError(f"a recurrence rule is at most {MAX_RULE_CHARS} characters")
    parts: dict[str, str] = {}
    for part in line.split(":", 1)[1].split(";"):
        key, sep, value = part.partition("=")
        key = key.upper()
        if not sep or not value or key not in RULE_KEYS:
            raise ValueError("a recurrence rule has a part this service does not read (RFC 5545 RRULE parts only)")
        if key in parts:
            raise ValueError(f"a recurrence rule names {key} twice")
        parts[key] = value.upper()
    freq = parts.get("FREQ")
    if freq not in ALLOWED_FREQUENCIES:
        raise ValueError("a recurrence rule's FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY")
    interval = parts.get("INTERVAL", "1")
    if not re.fullmatch(r"\d{1,4}", interval) or not 1 <= int(interval) <= MAX_INTERVAL:
        raise ValueError(f"a recurrence rule's INTERVAL must be between 1 and {MAX_INTERVAL}")
    if "COUNT" in parts:
        if not re.fullmatch(r"\d{1,7}", parts["COUNT"]) or not 1 <= int(parts["COUNT"]) <= MAX_COUNT:
            raise ValueError(f"a recurrence rule's COUNT must be between 1 and {MAX_COUNT}")
        if "UNTIL" in parts:
            raise ValueError("a recurrence rule has COUNT or UNTIL, not both")
    if "UNTIL" in parts and (not _UNTIL_UTC.match(parts["UNTIL"]) or parts["UNTIL"] < EARLIEST.strftime("%Y%m%d")):
        raise ValueError(
            f"a recurrence rule's UNTIL must be a date or a date-time (20260630T235959Z) after {EARLIEST:%Y}"
        )
    if "WKST" in parts and parts["WKST"] not in _WEEKDAYS:
        raise ValueError("a recurrence rule's WKST must be a day (MO..SU)")
    _check_by_parts(parts, freq)
    return parts


def _check_by_parts(parts: dict[str, str], freq: str) -> None:
    """The BY parts' values: numbers in their ranges, days (numbered only when MONTHLY or YEARLY)."""
    for key, (low, high) in _BY_RANGES.items():
        if key in parts and not all(_in_range(v, low, high) for v in parts[key].split(",")):
            raise ValueError(f"a recurrence rule's {key} takes numbers from {low} to {high}, except 0")
    for day in parts.get("BYDAY", "MO").split(","):
        match = _BYDAY.match(day)
        numbered = match is not None and match.group(1) is not None
        if match is None or numbered and (freq not in ("MONTHLY", "YEARLY") or not _in_range(match.group(1), -53, 53)):
            raise ValueError(
                "a recurrence rule's BYDAY lists days (MO..SU), numbered (1MO, -1FR) only when MONTHLY or YEARLY"
            )


def _in_range(value: str, low: int, high: int) -> bool:
    if not re.fullmatch(r"[+-]?\d{1,3}", value):
        return False
    number = int(value)
    return low <= number <= high and (number != 0 or low == 0)


def _numbers(value: str | None) -> list[int] | None:
    return None if value is None else [int(v) for v in value.split(",")]


def _budgeted_rule_class() -> type:
    from dateutil.rrule import rrule

    class _BudgetedRule(rrule):  # type: ignore[misc]
        """A dateutil rule that spends from a Budget for every occurrence it yields and every
        month (or year) of the calendar it scans.

        dateutil yields nothing while it scans for a rule's next match, so counting occurrences
        alone cannot bound a rule that matches rarely or never. Its walk (rrule._iter) reads
        `_byeaster` each time it moves on to the next month or year (_iterinfo.rebuild): that
        read is the hook. Pinned by test_a_rule_that_never_matches_is_bounded
        (tests/unit/test_recurrence.py), which fails if a dateutil release stops reading it."""

        _budget: Budget | None = None
        _scan_cost = 1

        @property
        def _byeaster(self) -> Any:
            if self._budget is not None:
                self._budget.spend(self._scan_cost)
            return self.__dict__["_byeaster"]

        @_byeaster.setter
        def _byeaster(self, value: Any) -> None:
            self.__dict__["_byeaster"] = value

        def __iter__(self) -> Iterator[datetime]:
            budget = self._budget
            for when in super().__iter__():
                if budget is not None:
                    budget.spend(STEP_COST["yield"])
                yield when

    return _BudgetedRule


_RULE_CLASS: type | None = None


def _rule(parts: dict[str, str], start: datetime, budget: Budget) -> Any:
    """A rule's parts as a budgeted dateutil rule from `start` (built from the parts checked by
    `_rule_parts`: dateutil's own reader of RRULE text is slow and lets through what its walk
    then fails on)."""
    from dateutil import rrule as du

    global _RULE_CLASS
    if _RULE_CLASS is None:
        _RULE_CLASS = _budgeted_rule_class()
    budget.spend(STEP_COST["line"])
    days = []
    for day in parts["BYDAY"].split(",") if "BYDAY" in parts else []:
        match = _BYDAY.match(day)
        assert match is not None  # checked by _rule_parts
        weekday = du.weekday(_WEEKDAYS.index(match.group(2)))
        days.append(weekday(int(match.group(1))) if match.group(1) else weekday)
    until = parts.get("UNTIL")
    try:
        rule = _RULE_CLASS(
            getattr(du, parts["FREQ"]),
            dtstart=start,
            interval=int(parts.get("INTERVAL", "1")),
            wkst=_WEEKDAYS.index(parts["WKST"]) if "WKST" in parts else None,
            count=int(parts["COUNT"]) if "COUNT" in parts else None,
            until=datetime.strptime(until, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC) if until else None,
            bysetpos=_numbers(parts.get("BYSETPOS")),
            bymonth=_numbers(parts.get("BYMONTH")),
            bymonthday=_numbers(parts.get("BYMONTHDAY")),
            byyearday=_numbers(parts.get("BYYEARDAY")),
            byweekno=_numbers(parts.get("BYWEEKNO")),
            byweekday=days or None,
            byhour=_numbers(parts.get("BYHOUR")),
            byminute=_numbers(parts.get("BYMINUTE")),
            bysecond=_numbers(parts.get("BYSECOND")),
        )
    except (TypeError, ValueError, OverflowError, IndexError, KeyError) as err:
        raise ValueError(f"recurrence cannot be read: {type(err).__name__}") from None
    rule._budget = budget
    rule._scan_cost = STEP_COST[parts["FREQ"]]
    return rule


def _dates(line: str, budget: Budget) -> list[datetime]:
    """The dates of an RDATE or EXDATE line (UTC, or on the clock its TZID names), in range."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if len(line) > MAX_DATE_LINE_CHARS:
        raise ValueError(f"an RDATE or EXDATE line is at most {MAX_DATE_LINE_CHARS:,} characters")
    match = _DATES_LINE.match(line)
    if match is None:
        raise ValueError("an RDATE or EXDATE line must list dates or date-times (20260616T190000Z)")
    params = dict(p.split("=", 1) for p in match.group(1).split(";")[1:])
    budget.spend(STEP_COST["line"] + line.count(","))
    try:
        zone: tzinfo | None = ZoneInfo(params["TZID"]) if "TZID" in params else None
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("an RDATE or EXDATE line's TZID must be an IANA time zone") from None
    found = []
    for value in match.group(2).split(","):
        utc = len(value) == 16 and value[8] == "T" and value.endswith("Z")
        local = zone is not None and (len(value) == 8 or len(value) == 15 and value[8] == "T")
        if not (utc or local):
            raise ValueError("an RDATE or EXDATE line's dates must be in UTC (…Z) or on the clock its TZID names")
        try:
            hour, minute, second = (
                (int(value[9:11]), int(value[11:13]), int(value[13:15])) if len(value) > 8 else (0, 0, 0)
            )
            when = datetime(int(value[0:4]), int(value[4:6]), int(value[6:8]), hour, minute, second)
        except ValueError:
            raise ValueError("an RDATE or EXDATE line lists a date that does not exist") from None
        found.append(check_time(when.replace(tzinfo=UTC if utc else zone)))
    return found


def _restarted(parts: dict[str, str], start: datetime, target: datetime) -> tuple[dict[str, str], datetime]:
    """The rule restarted at the first period of its own that begins at or before `target`: the
    same periods (a rule's periods are counted from its start, INTERVAL at a time), the defaults it
    took from its start written out, and a start at that period's first instant. A rule with
    COUNT, or whose start is near, is returned as it is."""
    local = target.astimezone(start.tzinfo)
    if "COUNT" in parts or local <= start:
        return parts, start
    freq, n = parts["FREQ"], int(parts.get("INTERVAL", "1"))
    first, day = start.date(), local.date()
    if freq == "DAILY":
        k = (day - first).days // n
        anchor = first + timedelta(days=k * n)
    elif freq == "WEEKLY":
        week_start = _WEEKDAYS.index(parts.get("WKST", "MO"))
        first_week = first - timedelta(days=(first.weekday() - week_start) % 7)
        k = (day - first_week).days // 7 // n
        anchor = first_week + timedelta(weeks=k * n)
    elif freq == "MONTHLY":
        month0, month = first.year * 12 + first.month - 1, day.year * 12 + day.month - 1
        k = (month - month0) // n
        anchor = date((month0 + k * n) // 12, (month0 + k * n) % 12 + 1, 1)
    else:
        k = (day.year - first.year) // n
        anchor = date(first.year + k * n, 1, 1)
    if k < 2:
        return parts, start
    explicit = dict(parts)
    for key, value in (("BYHOUR", start.hour), ("BYMINUTE", start.minute), ("BYSECOND", start.second)):
        explicit.setdefault(key, str(value))
    if not {"BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY"} & parts.keys():
        if freq == "YEARLY":
            explicit.setdefault("BYMONTH", str(start.month))
            explicit["BYMONTHDAY"] = str(start.day)
        elif freq == "MONTHLY":
            explicit["BYMONTHDAY"] = str(start.day)
        elif freq == "WEEKLY":
            explicit["BYDAY"] = _WEEKDAYS[start.weekday()]
    return explicit, datetime.combine(anchor, time(0), start.tzinfo)


def _parsed(rules: list[str], start: datetime, budget: Budget, after: datetime | None) -> tuple[list[Any], ...]:
    """The lines read: (rules, exclusion rules, dates, excluded dates); with `after`, each rule
    without COUNT restarted just before it (ValueError naming a line that cannot be read)."""
    if len(rules) > MAX_LINES:
        raise ValueError(f"an event has at most {MAX_LINES} recurrence lines")
    found: tuple[list[Any], ...] = ([], [], [], [])
    for line in recurrence_lines(rules, start):
        if line.startswith(("RRULE:", "EXRULE:")):
            parts = _rule_parts(line)
            rule_parts, rule_start = _restarted(parts, start, after) if after is not None else (parts, start)
            found[0 if line.startswith("RRULE:") else 1].append(_rule(rule_parts, rule_start, budget))
        elif line.startswith(("RDATE", "EXDATE")):
            found[2 if line.startswith("RDATE") else 3].extend(_dates(line, budget))
        else:
            raise ValueError("recurrence lines must start with RRULE:, EXRULE:, RDATE or EXDATE")
    return found


def _set(parsed: tuple[list[Any], ...]) -> Any:
    from dateutil.rrule import rruleset

    rules, exrules, dates, excluded = parsed
    found = rruleset()
    for rule in rules:
        found.rrule(rule)
    for rule in exrules:
        found.exrule(rule)
    for when in dates:
        found.rdate(when)
    for when in excluded:
        found.exdate(when)
    return found


def rule_set(rules: list[str], start: datetime, budget: Budget, *, after: datetime | None = None) -> Any:
    """The dateutil rule set of the lines from `start`, budgeted; with `after`, each rule without
    COUNT restarted just before it (ValueError when a line cannot be read)."""
    return _set(_parsed(rules, start, budget, after))


def walk(rules_set: Any, until: datetime | None = None, limit: int = MAX_WALK) -> Iterator[datetime]:
    """Occurrence starts in order, before `until` (all when None) and LATEST, at most `limit` of
    them; ValueError when dateutil fails on them, BudgetExceeded when their budget is spent."""
    try:
        for when in islice(rules_set, limit):
            if when >= LATEST or (until is not None and when >= until):
                return
            yield when
    except BudgetExceeded:
        raise
    except (TypeError, ValueError, OverflowError, IndexError, KeyError) as err:
        raise ValueError(f"recurrence cannot be expanded: {type(err).__name__}") from None


def check_recurrence(rules: list[str], start: datetime) -> None:
    """Refuse what cannot be expanded cheaply and safely (ValueError naming it, or BudgetExceeded
    for a rule with neither an occurrence nor its end within CHECK_STEPS of the calendar)."""
    budget = Budget(CHECK_STEPS, "reading the recurrence's lines")
    parsed = _parsed(rules, start, budget, None)
    for rule in parsed[0] + parsed[1]:
        rule._budget = Budget(CHECK_STEPS, "a recurrence rule with no occurrence within years of its start")
        for _ in walk(rule, limit=1):
            pass
        rule._budget = budget
    for _ in walk(_set(parsed), limit=1):  # the lines together (dateutil fails on some mixes only then)
        pass


def occurrence_starts(
    rules: list[str], start: datetime, first: datetime, end: datetime, budget: Budget
) -> list[datetime]:
    """The starts of the occurrences at or after `first` and before `end`, walked from just
    before `first` (ValueError for lines that cannot be read, BudgetExceeded)."""
    return [s for s in walk(rule_set(rules, start, budget, after=first), until=end) if s >= first]


def recurrence_end(rules: list[str], start: datetime) -> datetime | None:
    """The last occurrence's start of a recurring event, or an upper bound of it when finding it
    would cost more than END_STEPS (None: it recurs for ever, or further than can be told);
    RDATE lines count, so an added date after the rules' last one is not missed."""
    lines = recurrence_lines(rules, start)
    rule_lines = [r for r in lines if r.startswith("RRULE:")]
    if not rule_lines or not all(("UNTIL=" in r or "COUNT=" in r) for r in rule_lines):
        return None
    budget = Budget(END_STEPS, "the recurrence's last occurrence")
    bound = None
    try:
        untils = [_rule_parts(r).get("UNTIL") for r in rule_lines]
        if all(untils):
            # Every rule ends at a time: the last occurrence is found from just before the latest.
            bound = max(datetime.strptime(u, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC) for u in untils if u)
            dates = [d for line in lines if line.startswith("RDATE") for d in _dates(line, budget)]
            bound = min(max([bound, *dates]), LATEST)
            after = max(start, bound - timedelta(days=400))
        else:
            after = None
        last = None
        for when in walk(rule_set(rules, start, budget, after=after)):
            last = when
        if last is None or (after is not None and after > start and last < after):
            return bound  # nothing after the restart: the last occurrence is earlier, UNTIL bounds it
        return last
    except BudgetExceeded:
        return bound
    except ValueError:
        return None

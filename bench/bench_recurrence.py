"""Recurrence budgets: what a step costs, and what a budget costs in time (domain/companion/recurrence.py).

    python bench/bench_recurrence.py

No database: the walks the API and the nightly run make, in this process.

Tables:
  (a) microseconds per step of a walk that exhausts a 200,000-step budget, per kind of walk: a
      rule that never matches (scanning only, per frequency), one with many occurrences a day,
      and a daily event read a week at a time (STEP_COST is calibrated so these are about 1);
  (b) the budgets' own cost: the longest each can take (a rule that never matches spending it
      all), beside ordinary work of the same kind: validating a document of 2,000 weekly events
      and expanding a week of 2,000 daily events that started years ago.
Output goes to stdout only (figures for docs/benchmarks.md are copied by hand).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from user_memory.domain.companion.elements import expand_events
from user_memory.domain.companion.recurrence import (
    CHECK_STEPS,
    DOCUMENT_STEPS,
    QUERY_STEPS,
    Budget,
    budget_scope,
    check_recurrence,
    occurrence_starts,
)
from user_memory.domain.memory.document import validate_document
from user_memory.errors import BudgetExceeded

START = datetime(2016, 1, 4, 9, tzinfo=UTC)
WEEK = (datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC))
WALKS = {
    "never matches, DAILY": "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
    "never matches, WEEKLY": "RRULE:FREQ=WEEKLY;BYMONTH=2;BYMONTHDAY=30",
    "never matches, MONTHLY": "RRULE:FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30",
    "never matches, YEARLY": "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
    "144 a day": "RRULE:FREQ=DAILY;BYHOUR=" + ",".join(map(str, range(24))) + ";BYMINUTE=0,10,20,30,40,50",
}


def per_step(rule: str, steps: int = 200_000) -> tuple[int, float]:
    budget = Budget(steps, "bench")
    began = time.perf_counter()
    with contextlib.suppress(BudgetExceeded):
        occurrence_starts([rule], START, WEEK[0], WEEK[0] + timedelta(days=3650), budget)
    return budget.used, (time.perf_counter() - began) * 1e6 / max(budget.used, 1)


def seconds(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    with contextlib.suppress(BudgetExceeded):
        call()
    return time.perf_counter() - began


def main() -> None:
    print("(a) microseconds per step")
    print(f"{'walk':<28}{'steps':>10}{'us/step':>10}")
    for name, rule in WALKS.items():
        used, us = per_step(rule)
        print(f"{name:<28}{used:>10,}{us:>10.2f}")

    never = "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"
    weekly = {f"e{n}": {"id": f"e{n}", "summary": "Sync", "start": "2026-01-05T09:00:00Z",
                        "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO,WE", "EXDATE:20260107T090000Z"]}
              for n in range(2000)}  # fmt: skip
    daily = [(f"/events/d{n}", 1, {"id": f"d{n}", "summary": "Walk", "start": "2016-01-04T07:00:00Z",
                                   "recurrence": ["RRULE:FREQ=DAILY"]}) for n in range(2000)]  # fmt: skip

    def exhaust(steps: int) -> None:
        """Checks of a rule that never matches until the scope is spent (each check's own
        budget runs out first, every CHECK_STEPS)."""
        with budget_scope(steps, "bench") as scope:
            while scope.left >= 0:
                with contextlib.suppress(BudgetExceeded):
                    check_recurrence([never], START)

    print("\n(b) seconds")
    rows = [
        (f"one rule's check, spent ({CHECK_STEPS:,} steps)", lambda: check_recurrence([never], START)),
        (f"a document's checks, spent ({DOCUMENT_STEPS:,})", lambda: exhaust(DOCUMENT_STEPS)),
        ("2,000 weekly events validated", lambda: validate_document({"events": weekly}, "companion", max_bytes=10**7)),
        (f"a query's budget, spent ({QUERY_STEPS:,})", lambda: exhaust(QUERY_STEPS)),
        ("a week of 2,000 daily events", lambda: expand_events(daily, *WEEK, [])),
    ]
    for name, call in rows:
        print(f"{name:<50}{seconds(call):>8.3f}")


if __name__ == "__main__":
    main()

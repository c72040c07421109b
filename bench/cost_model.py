"""What a deployment costs a month, on paper, at 10k, 100k and 1M active users a day.

Run: python bench/cost_model.py   (prints the tables docs/deploy.md shows, and
tests/infrastructure/test_deploy_guide.py checks that they agree; then the 1M-users-a-day month
before the prompt's view and after it, online and through the Batch API: docs/benchmarks.md).

Every figure comes from a named constant of the library (user_memory.domain.costs: a list price, a
measurement of this repository with the file it comes from, or an assumption about the workload,
said so), and each scale is priced as `user-memory plan` sizes it (user_memory.domain.plan): the
command and this model share one source. Prices are AWS us-east-1 and OpenAI list prices as
published in 2025 (PRICES_AS_OF), on-demand, without free tiers, savings plans or taxes. They
change: check them against the providers' pricing pages before relying on the result.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from user_memory.domain import costs as c
from user_memory.domain.costs import (  # the figures tests/infrastructure/test_deploy_guide.py reads here
    ALARMS,
    FUNCTION_MEMORY_MB,
    LLM_COMPLETION_TOKENS_PER_USER_DAY,
    LLM_PROMPT_TOKENS_PER_USER_DAY,
    MIN_CAPACITY_ACUS,
    PRICES_AS_OF,
)
from user_memory.domain.plan import (
    BEFORE_PROMPT_VIEW,
    MEASURED,
    LlmFigures,
    Plan,
    dollars,
    llm_cost_per_user_day,
    monthly_cost,
    plan,
    worker_cost,
)

__all__ = [
    "ALARMS",
    "FUNCTION_MEMORY_MB",
    "LLM_COMPLETION_TOKENS_PER_USER_DAY",
    "LLM_PROMPT_TOKENS_PER_USER_DAY",
    "MIN_CAPACITY_ACUS",
    "PRICES_AS_OF",
    "SCALES",
    "before_after",
    "levers",
    "table",
]

SCALES = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class Line:
    name: str
    monthly: tuple[float, ...]


def plans() -> list[Plan]:
    """Each scale as `user-memory plan --users-per-day N` sizes it (the default LLM figures)."""
    return [plan(users) for users in SCALES]


def lines() -> list[Line]:
    """Each cost line at each scale, USD a month."""
    sized = plans()
    return [Line(name, tuple(p.monthly_cost[name] for p in sized)) for name in sized[0].monthly_cost]


def table() -> str:
    """The Markdown table of docs/deploy.md: each line, the total, per active user, the largest line."""
    rows = lines()
    totals = [sum(line.monthly[i] for line in rows) for i in range(len(SCALES))]
    head = "| USD a month | " + " | ".join(f"{n:,} users/day" for n in SCALES) + " |"
    out = [head, "| --- |" + " ---: |" * len(SCALES)]
    for line in rows:
        out.append(f"| {line.name} | " + " | ".join(dollars(v) for v in line.monthly) + " |")
    out.append("| **total** | " + " | ".join(f"**{dollars(t)}**" for t in totals) + " |")
    out.append(
        "| per active user a month | " + " | ".join(f"{t / n:.3f}" for t, n in zip(totals, SCALES, strict=True)) + " |"
    )
    largest = []
    for i, total in enumerate(totals):
        top = max(rows, key=lambda line: line.monthly[i])
        largest.append(f"{top.name.split(' (')[0]} {top.monthly[i] / total:.0%}")
    out.append("| largest line | " + " | ".join(largest) + " |")
    acus = " | ".join(f"{p.average_acus:.1f}" for p in plans())
    out.append(f"| Aurora ACUs on average (minimum {MIN_CAPACITY_ACUS}) | {acus} |")
    return "\n".join(out)


def levers() -> str:
    """What the largest lines would cost with each lever, at the largest scale."""
    sized = plans()[-1]
    batched = plan(sized.users_per_day, summary_delivery="batch")
    llm = next(name for name in batched.monthly_cost if name.startswith("LLM"))
    user_days = sized.users_per_day * c.DAYS_PER_MONTH
    edit = user_days * llm_cost_per_user_day(LLM_PROMPT_TOKENS_PER_USER_DAY, LLM_COMPLETION_TOKENS_PER_USER_DAY)
    document = user_days * llm_cost_per_user_day(
        c.LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE, c.LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE
    )
    rows = [
        ("LLM, document mode (SummaryMode=document) instead of edit", document),
        ("LLM, edit mode (the default)", edit),
        ("LLM, edit mode through the Batch API (SummaryDelivery=batch; retries online)", batched.monthly_cost[llm]),
        (
            f"LLM, edit mode if every stable prefix ({c.LLM_STABLE_PREFIX_SHARE:.0%} of the prompt) were cached",
            user_days
            * llm_cost_per_user_day(
                LLM_PROMPT_TOKENS_PER_USER_DAY,
                LLM_COMPLETION_TOKENS_PER_USER_DAY,
                cached_share=c.LLM_STABLE_PREFIX_SHARE,
            ),
        ),
        ("worker Lambda waiting on the LLM at 1024 MB", worker_cost(sized)),
        (f"the same at 256 MB (max RSS measured {c.WORKER_MAX_RSS_MB} MB)", worker_cost(sized, memory_mb=256)),
    ]
    out = [f"| at {sized.users_per_day:,} users/day | USD a month |", "| --- | ---: |"]
    out += [f"| {name} | {dollars(value)} |" for name, value in rows]
    return "\n".join(out)


def month(sized: Plan, figures: LlmFigures = MEASURED) -> float:
    """A plan's monthly total with these LLM figures."""
    return sum(monthly_cost(sized, figures).values())


def before_after() -> str:
    """The 1M-users-a-day month before the prompt's view and after each step (docs/benchmarks.md).
    Each "of before" is against the month as this model counted it before issue 22
    (BEFORE_MONTH_AS_COUNTED: a serial worker, three users an invocation)."""
    users = SCALES[-1]
    online, batched = plan(users), plan(users, summary_delivery="batch")
    base = c.BEFORE_MONTH_AS_COUNTED
    as_before = month(online, BEFORE_PROMPT_VIEW)
    counted = replace(BEFORE_PROMPT_VIEW, uncounted=True, custom_metrics=c.CUSTOM_METRICS)
    steps = [
        ("before: the whole memory in every prompt, a serial worker (as counted before)", base),
        ("the same prompt, the sizing plan's worker (LLM calls in lanes), as counted before", as_before),
        ("the same, with data transfer out, log storage and every metric counted", month(online, counted)),
        ("the prompt's view (the day's parts, an outline), online", month(online)),
        ("the prompt's view through the Batch API (SummaryDelivery=batch)", month(batched)),
    ]
    out = [f"| {users:,} users/day, USD a month | total | of before |", "| --- | ---: | ---: |"]
    out += [f"| {name} | {dollars(value)} | {value / base:.0%} |" for name, value in steps]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(f"prices: {PRICES_AS_OF}")
    print()
    print(table())
    print()
    print(levers())
    print()
    print(before_after())


if __name__ == "__main__":
    main()

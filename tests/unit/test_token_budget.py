"""The per-user daily token budget in the pipeline: a run spends what fits and defers the rest."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from user_memory.domain.model import RunStatus
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.rules import RuleBasedSummarizer

from tests.unit.test_pipeline import World

LATER = datetime(2100, 1, 1, tzinfo=UTC)


class Spending(RuleBasedSummarizer):
    """The rule-based answer, reported as costing 4,000 prompt and 100 completion tokens a call."""

    def summarize(self, *a: Any, **k: Any) -> SummaryResult:
        return dataclasses.replace(super().summarize(*a, **k), prompt_tokens=4_000, completion_tokens=100)


def test_a_run_stops_before_the_chunk_that_would_go_past_the_budget_and_defers_the_rest():
    # Given a budget of 10,000 tokens a day and a day's activity in five prompt-sized chunks
    w = World(max_tokens_per_user_day=10_000, max_prompt_activity_chars=1_000)
    for i in range(25):
        w.add("message", text=f"{i:02d} " + "x" * 150)
    # When the run spends 4,100 tokens a chunk
    out = w.run(Spending())
    # Then it summarizes two chunks (8,200 tokens) and defers the rest, flagged, never cut
    assert out.status is RunStatus.WRITTEN and out.over_budget and out.tokens == 8_200
    assert out.activities + out.deferred == 25 and out.deferred > 0
    assert (
        len(
            w.activity.unsummarized(
                w.user,
                before=w.cfg and __import__("datetime").datetime.max.replace(tzinfo=__import__("datetime").UTC),
                limit=100,
            )
        )
        == out.deferred
    )
    # And the cost of what it spent is on the outcome and the version
    assert out.cost_usd == round((8_000 * 0.15 + 200 * 0.60) / 1e6, 8)
    assert w.store.history(w.user, limit=1)[0].provenance["cost_usd"] == out.cost_usd


def test_without_a_budget_nothing_waits():
    w = World(max_prompt_activity_chars=1_000)
    for i in range(25):
        w.add("message", text=f"{i:02d} " + "x" * 150)
    out = w.run(Spending())
    assert out.status is RunStatus.WRITTEN and not out.over_budget and out.deferred == 0

"""The worker's run counters, declared once (jobs/tally.py): the batch's log line, the per-user
line and the metrics all come from the declaration, under the names they always had."""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import given
from hypothesis import strategies as st
from user_memory.domain.model import RunStatus
from user_memory.domain.summary.pipeline import RunOutcome
from user_memory.jobs.tally import COUNTERS, Tally, user_line_fields
from user_memory.observability import metrics

# The `batch done` line's counts and the metrics as the worker emitted them before the declaration.
BATCH_LINE = {
    "users", "activities_recorded", "activities_summarized", "activities_deferred", "activities_cut", "tokens",
    "prompt_tokens", "cached_prompt_tokens", "cost_usd", "users_over_budget", "edits_applied", "edits_refused",
    "facts_restored", "facts_filled", "human_edits_kept", "human_edit_conflicts", "requests_ignored",
    "messages_recorded", "conversations", "conversation_tokens", "ratings_summarized", "digests",
}  # fmt: skip
USER_LINE = {
    "activities", "deferred", "edits_applied", "edits_refused", "facts_restored", "facts_filled", "activity_cut",
    "tokens", "prompt_tokens", "cost_usd",
}  # fmt: skip
METRICS = {
    "ActivitiesRecorded", "MessagesRecorded", "ActivitiesDeferred", "LLMTokens", "LLMPromptTokens",
    "LLMCachedPromptTokens", "LLMCostMicroUSD", "EditsApplied", "EditsRefused", "ActivitiesCut", "FactsRestored",
    "FactsFilled", "HumanEditsKept", "HumanEditConflicts", "RequestsIgnored", "ConversationLLMTokens",
    "RatingsSummarized", "DigestsMade",
}  # fmt: skip
# RunOutcome's numbers that describe one run and are not summed over a batch.
NOT_COUNTED = {"version", "ops", "seconds", "rebased", "tokens_today"}

counts = st.integers(min_value=0, max_value=1_000)
outcomes = st.builds(
    RunOutcome,
    user_id=st.just(uuid.UUID(int=1)),
    status=st.sampled_from(RunStatus),
    version=counts,
    **{
        f.name: counts
        for f in dataclasses.fields(RunOutcome)
        if f.type in ("int", int) and f.name not in NOT_COUNTED | {"version"}
    },
    cost_usd=st.floats(min_value=0, max_value=1, allow_nan=False),
    over_budget=st.booleans(),
)


def test_every_count_of_a_run_outcome_is_a_declared_counter():
    # Given RunOutcome's numeric fields
    numeric = {f.name for f in dataclasses.fields(RunOutcome) if f.type in ("int", "float", "bool")}
    # Then each one summed per batch is declared once, and the others are named as not counted
    declared = [c.outcome for c in COUNTERS if c.outcome]
    assert len(declared) == len(set(declared))
    assert numeric - NOT_COUNTED == set(declared) - {"status"}


@given(st.lists(outcomes, max_size=6), counts, counts)
def test_a_batch_line_sums_each_outcome_counter_under_its_former_field(runs, recorded, messages):
    # Given a batch's user runs and the activity and messages it recorded
    tally = Tally()
    for outcome in runs:
        tally.add(outcome)
    tally.count(recorded=recorded, messages_recorded=messages)
    # When the batch's line is written
    line = tally.log_fields()
    # Then it has the fields it always had, each the sum over the runs
    assert set(line) == BATCH_LINE
    assert line["users"] == {s: sum(o.status is s for o in runs) for s in RunStatus if any(o.status is s for o in runs)}
    assert line["activities_summarized"] == sum(o.activities for o in runs)
    assert line["cached_prompt_tokens"] == sum(o.cached_tokens for o in runs)
    assert line["human_edit_conflicts"] == sum(o.human_edit_conflicts for o in runs)
    assert line["users_over_budget"] == sum(o.over_budget for o in runs)
    assert line["cost_usd"] == round(sum(o.cost_usd for o in runs), 6)
    assert line["activities_recorded"] == recorded and line["messages_recorded"] == messages


@given(outcomes)
def test_a_user_line_shows_the_run_counts_it_always_showed(outcome):
    # Given one user's run
    # When its line's counts are taken
    fields = user_line_fields(outcome)
    # Then they are the run's own values, under the names the line always had
    assert set(fields) == USER_LINE
    assert all(fields[name] == getattr(outcome, name) for name in USER_LINE)


def test_a_batch_emits_each_counter_that_is_not_zero_under_its_former_metric_name():
    # Given a batch with a written run in which every count is one, a conversation of each status
    # and one refused, and everything else recorded once
    tally = Tally()
    one = {f.name: 1 for f in dataclasses.fields(RunOutcome) if f.type == "int" and f.name != "version"}
    run = RunOutcome(user_id=uuid.UUID(int=1), status=RunStatus.WRITTEN, version=3, **one, cost_usd=0.25)
    tally.add(dataclasses.replace(run, over_budget=True))
    for status in ("written", "unchanged", "missing", "partial", "refused", "failed", "deferred"):
        tally.count_keyed("conversations", status)
    tally.count(recorded=1, messages_recorded=1, conversation_tokens=1, ratings=1, digests=1)
    # When it emits its metrics
    metrics.clear_metrics()
    try:
        tally.emit()
        emitted = {name: entry["Value"] for name, entry in metrics.provider.metric_set.items()}
    finally:
        metrics.clear_metrics()
    # Then each has its former name (failed and deferred conversations have metrics of their own)
    conversations = {f"Conversations_{s}" for s in ("written", "unchanged", "missing", "partial", "refused")}
    assert set(emitted) == METRICS | conversations | {"Users_written"}
    assert emitted["LLMCostMicroUSD"] == [250_000] and emitted["EditsApplied"] == [1]

"""The worker's run counters, each declared once: its name, where its count comes from (a
RunOutcome field summed per user run, or `Tally.count` / `Tally.count_keyed` elsewhere), its
field on the batch's log line (`batch done`), whether the per-user line (`user refreshed`) shows
it, and its CloudWatch metric. The tally, both log lines and the metrics are derived from
`COUNTERS`, so a new counter is one line here (and its RunOutcome field, where a run counts it).

Metrics are emitted once per batch for counts that are not zero (a keyed counter: one metric per
key, `<metric><key>`, for the keys it names, or every key it counted when it names none).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.domain.model import RunStatus
from user_memory.domain.summary.pipeline import RunOutcome
from user_memory.observability import metrics


@dataclass(frozen=True)
class RunCounter:
    """One counter of the worker's batch."""

    name: str  # the tally's attribute and Tally.count's keyword
    log: str  # its field on the `batch done` line
    metric: str | None = None  # a Count metric (for a keyed counter: the prefix of one per key)
    outcome: str | None = None  # the RunOutcome field summed per user run (None: counted elsewhere)
    user_line: bool = False  # also on the `user refreshed` line, as the run's outcome has it
    scale: int = 1  # a fractional count goes out as whole units of 1/scale (a count metric is whole)
    keyed: bool = False  # counted per key (a status): logged as a dict, one metric per key
    keys: tuple[str, ...] = ()  # a keyed counter's keys that have a metric (empty: every key counted)


COUNTERS: tuple[RunCounter, ...] = (
    RunCounter("statuses", "users", "Users_", outcome="status", keyed=True, keys=tuple(s.value for s in RunStatus)),
    RunCounter("recorded", "activities_recorded", "ActivitiesRecorded"),
    RunCounter("activities", "activities_summarized", outcome="activities", user_line=True),
    RunCounter("deferred", "activities_deferred", "ActivitiesDeferred", outcome="deferred", user_line=True),
    RunCounter("activity_cut", "activities_cut", "ActivitiesCut", outcome="activity_cut", user_line=True),
    RunCounter("tokens", "tokens", "LLMTokens", outcome="tokens", user_line=True),
    RunCounter("prompt_tokens", "prompt_tokens", "LLMPromptTokens", outcome="prompt_tokens", user_line=True),
    RunCounter("cached_tokens", "cached_prompt_tokens", "LLMCachedPromptTokens", outcome="cached_tokens"),
    RunCounter("cost_usd", "cost_usd", "LLMCostMicroUSD", outcome="cost_usd", user_line=True, scale=1_000_000),
    RunCounter("over_budget", "users_over_budget", outcome="over_budget"),
    RunCounter("edits_applied", "edits_applied", "EditsApplied", outcome="edits_applied", user_line=True),
    RunCounter("edits_refused", "edits_refused", "EditsRefused", outcome="edits_refused", user_line=True),
    RunCounter("facts_restored", "facts_restored", "FactsRestored", outcome="facts_restored", user_line=True),
    RunCounter("facts_filled", "facts_filled", "FactsFilled", outcome="facts_filled", user_line=True),
    RunCounter("human_edits_kept", "human_edits_kept", "HumanEditsKept", outcome="human_edits_kept"),
    RunCounter("human_edit_conflicts", "human_edit_conflicts", "HumanEditConflicts", outcome="human_edit_conflicts"),
    RunCounter("requests_ignored", "requests_ignored", "RequestsIgnored", outcome="requests_ignored"),
    RunCounter("messages_recorded", "messages_recorded", "MessagesRecorded"),
    RunCounter(
        "conversations",
        "conversations",
        "Conversations_",
        keyed=True,
        keys=("written", "unchanged", "missing", "partial", "refused"),  # failed/deferred: their own metrics
    ),
    RunCounter("conversation_tokens", "conversation_tokens", "ConversationLLMTokens"),
    RunCounter("ratings", "ratings_summarized", "RatingsSummarized"),
    RunCounter("digests", "digests", "DigestsMade"),
)


def metric_names() -> set[str]:
    """Every metric name the counters can emit."""
    names: set[str] = set()
    for c in COUNTERS:
        if c.metric is not None:
            names |= {c.metric + key for key in c.keys} if c.keyed else {c.metric}
    return names


class Tally:
    """Per-invocation counts, logged and emitted once per batch instead of per user; counted from
    the lanes' threads, under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Any] = {c.name: Counter() if c.keyed else 0 for c in COUNTERS}

    def __getitem__(self, name: str) -> Any:
        return self._counts[name]

    def count(self, **counts: int) -> None:
        """Add to the named counts."""
        with self._lock:
            for name, n in counts.items():
                self._counts[name] += n

    def count_keyed(self, name: str, key: str, n: int = 1) -> None:
        """Add to one key of a keyed count."""
        with self._lock:
            self._counts[name][key] += n

    def add(self, outcome: RunOutcome) -> None:
        """A user run's outcome, into every counter it feeds."""
        with self._lock:
            for c in COUNTERS:
                if c.outcome is None:
                    continue
                value = getattr(outcome, c.outcome)
                if c.keyed:
                    self._counts[c.name][value.value if isinstance(value, RunStatus) else value] += 1
                else:
                    self._counts[c.name] += value

    def log_fields(self) -> dict[str, Any]:
        """The counts as the `batch done` line shows them."""
        return {c.log: _logged(c, self._counts[c.name]) for c in COUNTERS}

    def emit(self) -> None:
        """One Count metric per counter (per key of a keyed one) that is not zero."""
        for c in COUNTERS:
            if c.metric is None:
                continue
            value = self._counts[c.name]
            if c.keyed:
                for key, n in value.items():
                    if n and (not c.keys or key in c.keys):
                        metrics.add_metric(name=c.metric + key, unit=MetricUnit.Count, value=n)
            elif value:
                metrics.add_metric(name=c.metric, unit=MetricUnit.Count, value=round(value * c.scale))


def _logged(c: RunCounter, value: Any) -> Any:
    if c.keyed:
        return dict(value)
    if c.scale != 1:  # a fractional count: logged at the precision its metric keeps
        return round(value, len(str(c.scale)) - 1)
    return value


def user_line_fields(outcome: RunOutcome) -> dict[str, Any]:
    """The counters the `user refreshed` line shows, as the run's outcome has them."""
    return {c.outcome: getattr(outcome, c.outcome) for c in COUNTERS if c.user_line and c.outcome}

"""Summarize, diff, save: one user's run, through ports (store, activity reader, summarizer).

A run reads the user's unsummarized activity that occurred before the window's end (so late
arrivals and a failed run's leftovers are included), in chunks that fit the prompt budget, and
writes one version that marks every activity it summarized. Activity that does not fit the
invocation's time stays unsummarized, is logged and counted, and is found by the next run.

The summarizer answers with the whole next document, or (edit mode) with edits to the current
one: those are checked, refused one by one where the guardrail says so, applied and validated
(domain/summary/edits.py). Either way a bad answer goes back to the summarizer with the error, at most
`attempts` times in all. A valid answer is then held to the fact floor (domain/summary/facts.py): the
protected facts it lost without a request are restored; the structured activity it does not
reflect goes back to the summarizer once, named, within the same `attempts`, and what is still
missing is folded in by the rule-based fold. The fields a person set through the API or an agent
tool since the last summary (the elements they wrote, never a whole collection) are kept as they
left them unless later activity asks for a change (facts.keep_human_edits; in every schema); a
change an activity asked for is a conflict decided by time. Once per run the service sets
recency_score (1.0 for parts the activity names, the others decayed x 0.9). The version records
its provenance: mode, model, the edits and their reasons (a whole-document answer's changes
too: the summarizer's reasons, or the diff's naming the answer), the refused ones and why, what was
restored, filled and kept and why, the conflicts and who won, the forget requests ignored (they
name no part) and why, the activity the prompt left out, the tokens.

Round trips per user on the happy path: head + run key (1), the activity (1), the write (1); one
more (the newest versions' sources and changed pointers, bounded) when the head is not a summary's,
and two more (a document, then at most MAX_HUMAN_VERSIONS rows) when a person's version must be
compared with the one before it (facts.versions_to_compare).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from user_memory.domain.cost import DEFAULT_PRICES, Prices
from user_memory.domain.memory.document import check_json_size, empty_document, get_schema, validate_document
from user_memory.domain.memory.patching import PatchBudget, apply_patch, copy_json, make_patch
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import FORGET_KINDS as FORGET_KINDS  # defined there; re-exported as before
from user_memory.domain.model import Activity, Document, MemoryVersion, RunStatus, Window, WriteStatus
from user_memory.domain.ports import ActivityReader, Summarizer, SummaryResult
from user_memory.domain.summary.edits import (
    SERVICE_FIELDS,
    MemoryEdit,
    RefusedEdit,
    apply_edits,
    edits_between,
    every_error,
)
from user_memory.domain.summary.facts import (
    FLOOR_SCHEMAS,
    MAX_HUMAN_VERSIONS,
    Conflict,
    Filled,
    HumanEdit,
    Kept,
    Restored,
    changed_fields,
    fill,
    human_edits,
    keep_human_edits,
    restore_facts,
    set_recency,
    unreflected,
    unreflected_feedback,
    versions_to_compare,
)
from user_memory.domain.summary.requests import ignored_requests
from user_memory.errors import (
    ActivityChanged,
    DeadlineReached,
    InvalidDocument,
    PatchError,
    SummarizerError,
    VersionConflict,
)

MAX_REBASES = 3
CHARS_PER_TOKEN = 4
SummaryMode = Literal["edit", "document"]
# The shortest summarizer call worth starting; below it the record is deferred to a retry.
MIN_CALL_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The rules of a run; built from WorkerSettings (defaults live there)."""

    schema: str
    max_document_bytes: int
    attempts: int
    max_activities: int
    max_prompt_activity_chars: int
    call_timeout: float
    call_tries: int
    # What the summarizer is asked for (the OpenAI summarizer is built with the same setting);
    # each answer says what it is (SummaryResult.edits), and the version's provenance records it.
    summary_mode: SummaryMode = "edit"
    # The fact floor (domain/summary/facts.py: restore protected facts, send unreflected activity back,
    # fill what is still missing, keep what a person set). Always on in the service; off only where
    # a test must show what a summarizer alone would lose (tests, the simulation's checker test).
    fact_floor: bool = True
    # The model's prices: each version's provenance and each outcome carry their tokens' cost.
    prices: Prices = DEFAULT_PRICES
    # A user's LLM tokens per UTC day (0: no limit): a chunk whose estimated prompt would go past
    # what is left is deferred with the rest of the activity to the next run (RunStatus.OVER_BUDGET
    # when nothing fit), never cut.
    max_tokens_per_user_day: int = 0

    @property
    def call_budget(self) -> float:
        """The longest one summarizer call can take: every try at the client's timeout."""
        return self.call_timeout * self.call_tries


class Deadline:
    """The time this invocation has left, minus a safety margin.

    Args:
        remaining_ms: Lambda's `context.get_remaining_time_in_millis` (None: no deadline).
        margin_s: seconds kept free for writing the result and answering the event source.
    """

    def __init__(self, remaining_ms: Callable[[], int] | None = None, margin_s: float = 0.0) -> None:
        self._remaining_ms = remaining_ms
        self.margin_s = margin_s

    def left(self) -> float:
        if self._remaining_ms is None:
            return float("inf")
        return self._remaining_ms() / 1000 - self.margin_s

    def call_timeout(self, cfg: PipelineConfig) -> float:
        """Seconds one summarizer call may take in all (its tries and waits) to end before the deadline.

        Raises DeadlineReached when even a short call would not fit.
        """
        budget = min(cfg.call_budget, self.left())
        if budget < min(MIN_CALL_SECONDS, cfg.call_timeout):
            raise DeadlineReached(f"{max(self.left(), 0):.1f} s left before the deadline margin; retried later")
        return budget


NO_DEADLINE = Deadline()


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What one run for one user did."""

    user_id: uuid.UUID
    status: RunStatus
    version: int
    activities: int = 0
    deferred: int = 0  # activity left unsummarized for the next run (time ran out)
    ops: int = 0
    tokens: int = 0
    prompt_tokens: int = 0  # of `tokens`: what the prompts cost (every call of the run)
    cached_tokens: int = 0  # of `prompt_tokens`: served from the endpoint's prompt cache
    edits_applied: int = 0
    edits_refused: int = 0
    activity_cut: int = 0  # activities the prompts left out to fit their budget (still marked summarized)
    facts_restored: int = 0  # protected facts an answer lost without a request, put back (provenance "restored")
    facts_filled: int = 0  # activity an answer did not reflect, folded in by the service (provenance "filled")
    human_edits_kept: int = 0  # fields a person set that an answer changed, put back (provenance "kept_human_edits")
    human_edit_conflicts: int = 0  # a person's field an answer changed as activity asks (provenance "conflicts")
    requests_ignored: int = 0  # stored forget requests naming no part (provenance "ignored_requests")
    seconds: float = 0.0
    rebased: int = 0
    cost_usd: float = 0.0  # the tokens at PipelineConfig.prices
    over_budget: bool = False  # the daily token budget deferred activity (`deferred` counts it)
    tokens_today: int = 0  # the user's tokens earlier this UTC day (read only with a budget)


# One encoder for every line (json.dumps with an option builds one per call); each activity's
# line is measured for the prompt's chunks on every run.
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _line_object(a: Activity) -> dict[str, Any]:
    extra = {k: v for k, v in a.payload.items() if k not in ("at", "kind")}
    return {"at": a.occurred_at.isoformat(), "kind": a.kind, **extra}


def activity_line(a: Activity) -> str:
    """An activity as one line of a prompt: its time and kind, then its payload (whose own `at` or
    `kind` keys cannot override them)."""
    return _LINE_ENCODER.encode(_line_object(a))


def lines_chars(activities: Sequence[Activity]) -> int:
    """sum(activity_chars(a) for a in activities), from one encoding of them all: a JSON array is
    its members' encodings joined by ", " between brackets."""
    if not activities:
        return 0
    joined = _LINE_ENCODER.encode([_line_object(a) for a in activities])
    n = len(activities)
    return len(joined) - 2 - 2 * (n - 1) + n


def activity_chars(a: Activity) -> int:
    """How much of the prompt an activity takes: its line, as the prompt carries it."""
    return len(activity_line(a)) + 1


@dataclass(frozen=True)
class PromptActivity:
    """The activity lines one prompt carries, and what was merged or left out to get there."""

    lines: list[str]
    duplicates: int = 0  # activities whose line was identical to one kept: carried once
    cut: int = 0  # activities left out to fit the budget (their duplicates included)


def tokens_for_chars(chars: int) -> int:
    """Tokens of a text of `chars` characters, estimated as ceil(chars / 4) (no tokenizer needed)."""
    return -(-chars // CHARS_PER_TOKEN)


def prompt_activity(
    activities: Sequence[Activity], max_tokens: int, *, render: Callable[[Activity], str] = activity_line
) -> PromptActivity:
    """The lines of `activities` a prompt carries: identical lines once, then at most `max_tokens`
    (estimated) of them, newline included.

    When the lines do not fit, forget requests (FORGET_KINDS) are kept first, then the newest
    lines that fit; the oldest are left out. The kept lines stay in their order (oldest first).
    """
    counts: Counter[str] = Counter()
    unique: list[tuple[Activity, str]] = []
    for a in activities:
        line = render(a)
        if line not in counts:
            unique.append((a, line))
        counts[line] += 1
    budget = max(0, max_tokens) * CHARS_PER_TOKEN
    keep: set[int] = {i for i, (a, _) in enumerate(unique) if a.kind in FORGET_KINDS}
    used = sum(len(unique[i][1]) + 1 for i in keep)
    for i in range(len(unique) - 1, -1, -1):
        if i in keep:
            continue
        size = len(unique[i][1]) + 1
        if used + size > budget:
            break
        keep.add(i)
        used += size
    lines = [line for i, (_, line) in enumerate(unique) if i in keep]
    duplicates = sum(counts[line] - 1 for line in lines)
    return PromptActivity(lines=lines, duplicates=duplicates, cut=len(activities) - len(lines) - duplicates)


def prompt_chunks(activities: list[Activity], max_chars: int) -> Iterator[list[Activity]]:
    """Consecutive chunks whose prompt size stays within `max_chars` (an oversized item goes alone)."""
    if activities and lines_chars(activities) <= max_chars:
        yield list(activities)  # a day's activity mostly fits one prompt: measured in one piece
        return
    chunk: list[Activity] = []
    size = 0
    for a in activities:
        n = activity_chars(a)
        if chunk and size + n > max_chars:
            yield chunk
            chunk, size = [], 0
        chunk.append(a)
        size += n
    if chunk:
        yield chunk


@dataclass(frozen=True, kw_only=True)
class Summarized:
    """A summarizer's valid answer for one chunk: the next document, and what it took."""

    document: Document
    result: SummaryResult  # the answer that validated
    calls: int = 1
    tokens: int = 0  # every call's, the invalid answers' included
    prompt_tokens: int = 0
    cached_tokens: int = 0
    applied: tuple[MemoryEdit, ...] = ()
    refused: tuple[RefusedEdit, ...] = ()
    restored: tuple[Restored, ...] = ()  # protected facts the answer lost, put back
    filled: tuple[Filled, ...] = ()  # activity the answer did not reflect, folded in
    unreflected: tuple[Filled, ...] = ()  # activity left as the answer wrote it (a name of its own)
    kept: tuple[Kept, ...] = ()  # fields a person set that the answer changed, put back
    conflicts: tuple[Conflict, ...] = ()  # fields a person set that the answer changed as an activity asks


@dataclass(frozen=True)
class _Answer:
    """A valid answer after the floor's restoration, and the activity it still does not reflect."""

    result: SummaryResult
    document: Document
    applied: tuple[MemoryEdit, ...]
    refused: tuple[RefusedEdit, ...]
    restored: tuple[Restored, ...]
    kept: tuple[Kept, ...]
    conflicts: tuple[Conflict, ...]
    missing: list[Activity]


def answers_json_values(summarizer: Summarizer) -> bool:
    """Whether the summarizer says its answers hold only the values JSON decodes to
    (`answers_json_values`, see ports.Summarizer)."""
    return getattr(summarizer, "answers_json_values", False) is True


def _next_document(
    result: SummaryResult,
    document: Document,
    activities: list[Activity],
    cfg: PipelineConfig,
    json_values: bool = False,
) -> tuple[Document, tuple[MemoryEdit, ...], tuple[RefusedEdit, ...]]:
    if result.edits is None:
        answer = validate_document(
            result.document, cfg.schema, max_bytes=cfg.max_document_bytes, json_values=json_values
        )
        return answer, answer_changes(result, document, answer, cfg.schema), ()
    edited = apply_edits(
        document, result.edits, activities, schema=cfg.schema, max_bytes=cfg.max_document_bytes, author=result.model
    )
    return edited.document, edited.applied, edited.refused


def answer_changes(result: SummaryResult, document: Document, answer: Document, schema: str) -> tuple[MemoryEdit, ...]:
    """What a whole-document answer changed, each change with its reason: the summarizer's own
    (SummaryResult.changes), or, when it gives none, the diff's, each naming the answer. A first
    version is compared with the schema's starting document (what `{}` becomes), and the fields
    the service maintains are not the answer's."""
    if result.changes is not None:
        return result.changes
    why = f"in the whole document {result.model or 'the summarizer'} answered (no reason per change)"
    changed = edits_between(document or empty_document(schema), answer, why)
    return tuple(e for e in changed if e.path.split("/")[1] not in SERVICE_FIELDS)


def _keep(
    document: Document, answer: Document, activities: list[Activity], human: Sequence[HumanEdit], cfg: PipelineConfig
) -> tuple[Document, tuple[Kept, ...], tuple[Conflict, ...]]:
    """The answer with what a person set put back (facts.keep_human_edits), when the result still
    validates; a value the schema no longer accepts cannot be kept (the answer stands). The
    conflicts the activity won are the answer's either way."""
    keeping = keep_human_edits(document, answer, activities, human, cfg.schema)
    if not keeping.kept:
        return answer, (), keeping.conflicts
    try:
        valid = validate_document(keeping.document, cfg.schema, max_bytes=cfg.max_document_bytes)
    except InvalidDocument:
        return answer, (), tuple(c for c in keeping.conflicts if c.won == "activity")
    return valid, keeping.kept, keeping.conflicts


def summarize_valid(
    summarizer: Summarizer,
    document: Document,
    activities: list[Activity],
    cfg: PipelineConfig,
    deadline: Deadline,
    human: Sequence[HumanEdit] = (),
) -> Summarized:
    """Ask the summarizer until its answer validates and reflects the activity, at most
    cfg.attempts times; then hold the answer to the fact floor.

    An answer that does not validate (a document that fails the schema; edits whose path does not
    exist or whose value has the wrong shape; output that does not parse) goes back with the
    error as feedback. Refused edits are not errors: the rest of the edits apply. A valid answer's
    lost protected facts are restored (facts.restore_facts); when it still does not reflect some
    structured activity (facts.unreflected) and an attempt is left, it goes back once more with
    those activity lines named. The valid answer that misses least (the later one on a tie) is
    kept, and what it misses is folded in (facts.fill). A retry for missing facts never costs a
    valid answer: when it is invalid, or there is no time left for it, the earlier answer is kept.
    The fields a person set (`human`, facts.human_edits) that an answer changed without later
    activity asking are put back (facts.keep_human_edits), before what is unreflected is measured.
    """
    floor = cfg.fact_floor and cfg.schema in FLOOR_SCHEMAS
    feedback: str | None = None
    tokens = prompt_tokens = cached = calls = 0
    best: _Answer | None = None
    for _ in range(cfg.attempts):
        try:
            timeout = deadline.call_timeout(cfg)
        except DeadlineReached:
            if best is None:
                raise
            break  # keep the valid answer; what it misses is filled below
        calls += 1
        try:
            result = summarizer.summarize(document, activities, feedback=feedback, timeout=timeout)
        except InvalidDocument as err:  # an answer the adapter could not read; it may say what it cost
            tokens += err.prompt_tokens + err.completion_tokens
            prompt_tokens += err.prompt_tokens
            # the edits that did parse are checked too
            feedback = str(every_error(err, document, cfg.schema, cfg.max_document_bytes))
            continue
        tokens += result.total_tokens
        prompt_tokens += result.prompt_tokens
        cached += result.cached_prompt_tokens
        try:
            next_document, applied, refused = _next_document(
                result, document, activities, cfg, answers_json_values(summarizer)
            )
        except InvalidDocument as err:
            feedback = str(err)
            continue
        restored: tuple[Restored, ...] = ()
        kept: tuple[Kept, ...] = ()
        conflicts: tuple[Conflict, ...] = ()
        missing: list[Activity] = []
        if floor:
            floored = restore_facts(document, next_document, activities)
            next_document, restored = floored.document, floored.restored
        if cfg.fact_floor and human:
            next_document, kept, conflicts = _keep(document, next_document, activities, human, cfg)
        if floor:
            missing = unreflected(next_document, activities, human)
        answer = _Answer(result, next_document, applied, refused, restored, kept, conflicts, missing)
        if best is None or len(answer.missing) <= len(best.missing):
            best = answer
        if not best.missing:
            break
        feedback = unreflected_feedback(answer.missing, activity_line)
    if best is None:
        raise SummarizerError(f"summarizer output invalid after {cfg.attempts} attempts", detail=feedback)
    final = best.document
    filled = fill(final, best.missing, document)
    if best.restored or filled.filled or best.kept:
        try:
            final = validate_document(filled.document, cfg.schema, max_bytes=cfg.max_document_bytes)
        except InvalidDocument as err:
            why = "the document with the restored, filled and kept facts is invalid"
            raise SummarizerError(why, detail=str(err)) from err
    return Summarized(
        document=final,
        result=best.result,
        calls=calls,
        tokens=tokens,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        applied=best.applied,
        refused=best.refused,
        restored=best.restored,
        filled=filled.filled,
        unreflected=filled.unreflected,
        kept=best.kept,
        conflicts=best.conflicts,
    )


def is_summary_source(source: str | None) -> bool:
    """Whether a version's source is a summary's (`describe`): no person can write one (an end
    user's source starts `api` or `agent:`)."""
    return isinstance(source, str) and source.startswith(("daily summary ", "summary ("))


def people_edits(
    store: MemoryStore, user_id: uuid.UUID, head: MemoryVersion, cfg: PipelineConfig
) -> tuple[HumanEdit, ...]:
    """The fields people changed since the last summary (facts.human_edits), read in one bounded
    query, and only when the head is not itself a summary's (then there is none). A person's version
    whose pointers do not name exactly what it changed (a collection, a list, the whole document:
    facts.versions_to_compare) is compared with the version before it, read in two more (the
    document before the first such version, then the versions up to the last one)."""
    if not cfg.fact_floor or head.version == 0 or is_summary_source(head.source):
        return ()
    changes = store.recent_changes(user_id, limit=MAX_HUMAN_VERSIONS)
    wanted = versions_to_compare(changes, head.document)
    compared = {}
    if wanted:
        for version, before, after in store.walk(user_id, min(wanted), max(wanted)):
            if version in wanted:
                # Version 0 is the schema's starting document: the defaults a first write fills
                # in are not what the person wrote.
                compared[version] = changed_fields(before or empty_document(cfg.schema), after)
    return human_edits(changes, head.document, cfg.schema, compared)


def describe(window: Window, activities: int, model: str, tokens: int, run_key: str) -> str:
    """The version's source description: what produced it."""
    day = window.start.date().isoformat()
    label = "daily summary" if run_key.startswith("daily:") else f"summary ({run_key})"
    text = f"{label} {day}, {activities} activities, model {model}"
    return f"{text}, {tokens:,} tokens" if tokens else text


@dataclass
class _Draft:
    document: Document
    included: list[Activity]
    model: str = ""
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0
    deferred: int = 0
    edit_mode: bool = False
    applied: list[MemoryEdit] = field(default_factory=list)
    refused: list[RefusedEdit] = field(default_factory=list)
    activity_cut: int = 0
    activity_duplicates: int = 0
    restored: list[Restored] = field(default_factory=list)
    filled: list[Filled] = field(default_factory=list)
    unreflected: list[Filled] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    ignored: list[tuple[Activity, str]] = field(default_factory=list)
    recency_set: int = 0  # parts whose recency_score the service set (facts.set_recency)
    over_budget: bool = False  # the daily token budget stopped the fold (the rest deferred)
    largest: int = 0  # the most tokens one chunk took (its calls, retries included): the next one's guess

    def add(self, chunk: list[Activity], summarized: Summarized) -> None:
        result = summarized.result
        self.document = summarized.document
        self.included.extend(chunk)
        self.model = result.model
        self.tokens += summarized.tokens
        self.prompt_tokens += summarized.prompt_tokens
        self.completion_tokens += summarized.tokens - summarized.prompt_tokens
        self.cached_tokens += summarized.cached_tokens
        self.largest = max(self.largest, summarized.tokens)
        self.calls += summarized.calls
        self.edit_mode = self.edit_mode or result.edits is not None
        self.applied.extend(summarized.applied)
        self.refused.extend(summarized.refused)
        self.restored.extend(summarized.restored)
        self.filled.extend(summarized.filled)
        self.unreflected.extend(summarized.unreflected)
        self.kept.extend(summarized.kept)
        self.conflicts.extend(summarized.conflicts)
        self.ignored.extend(ignored_requests(chunk))
        self.activity_cut += result.activity_cut
        self.activity_duplicates += result.activity_duplicates

    def provenance(self, prices: Prices = DEFAULT_PRICES) -> dict[str, Any]:
        """What produced the version, stored with it (its tokens' cost at `prices`)."""
        record: dict[str, Any] = {"mode": "edit" if self.edit_mode else "document", "model": self.model}
        # Both modes: a whole-document answer's changes are its edits (answer_changes).
        record["edits"] = [e.describe() for e in self.applied]
        record["refused"] = [r.describe() for r in self.refused]
        record["restored"] = [r.describe() for r in self.restored]
        record["filled"] = [f.describe() for f in self.filled]
        record["unreflected"] = [f.describe() for f in self.unreflected]
        record["kept_human_edits"] = [k.describe() for k in self.kept]
        record["conflicts"] = [c.describe() for c in self.conflicts]
        record["ignored_requests"] = [{"activity_id": a.id, "kind": a.kind, "why": why} for a, why in self.ignored]
        record["recency_set"] = self.recency_set
        record.update(
            activities=len(self.included),
            activity_cut=self.activity_cut,
            activity_duplicates=self.activity_duplicates,
            calls=self.calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
        )
        if self.cached_tokens:
            record["cached_prompt_tokens"] = self.cached_tokens
        record["cost_usd"] = prices.cost(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
        return record

    def counts(self) -> dict[str, int]:
        """The outcome's counts."""
        return {
            "activities": len(self.included),
            "deferred": self.deferred,
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "edits_applied": len(self.applied),
            "edits_refused": len(self.refused),
            "activity_cut": self.activity_cut,
            "facts_restored": len(self.restored),
            "facts_filled": len(self.filled),
            "human_edits_kept": len(self.kept),
            "human_edit_conflicts": len(self.conflicts),
            "requests_ignored": len(self.ignored),
        }


def _set_recency(base: Document, draft: _Draft, cfg: PipelineConfig) -> _Draft:
    """recency_score set once for the run (facts.set_recency), once every chunk is folded in."""
    if draft.included and cfg.schema in FLOOR_SCHEMAS:
        recency = set_recency(base, draft.document, draft.included)
        draft.document, draft.recency_set = recency.document, recency.changed
    return draft


def _first_input(summarizer: Summarizer, base: Document) -> Document:
    """What the first chunk's summarizer call is given: the head read, when the summarizer says it
    never changes its input (`leaves_input_unchanged`, see ports.Summarizer); else a copy, so that
    one that changes it in place still cannot change the head the store diffs against."""
    return base if getattr(summarizer, "leaves_input_unchanged", False) is True else copy_json(base)


def _fold_chunks(
    user_id: uuid.UUID,
    base: Document,
    window: Window,
    activity: ActivityReader,
    summarizer: Summarizer,
    cfg: PipelineConfig,
    deadline: Deadline,
    human: Sequence[HumanEdit] = (),
    budget: int | None = None,
) -> _Draft:
    """Fold every unsummarized activity into the document, chunk by chunk, while time and the
    day's token budget (`budget`: tokens left, None for no limit) allow."""
    draft = _Draft(document=_first_input(summarizer, base), included=[])
    after_id = 0
    while True:
        batch = activity.unsummarized(user_id, before=window.end, after_id=after_id, limit=cfg.max_activities)
        done = 0
        for chunk in prompt_chunks(batch, cfg.max_prompt_activity_chars):
            if draft.included and deadline.left() < cfg.call_budget:
                # Keep what is summarized; the rest stays unsummarized for the next run.
                draft.deferred = len(batch) - done
                return draft
            # What the next chunk will take: its prompt's estimate, or what a chunk took already
            # (the answer and any retry included) when that was more.
            need = max(estimated_tokens(draft.document, chunk), draft.largest) if budget is not None else 0
            if budget is not None and draft.tokens + need > budget:
                draft.deferred, draft.over_budget = len(batch) - done, True
                return draft
            draft.add(chunk, summarize_valid(summarizer, draft.document, chunk, cfg, deadline, human))
            done += len(chunk)
        if len(batch) < cfg.max_activities:
            return draft
        last = batch[-1].id
        after_id = last if last is not None else after_id


def estimated_tokens(document: Document, chunk: Sequence[Activity]) -> int:
    """A prompt's tokens before it is sent, for the daily budget: the whole document and the
    chunk's lines at 4 characters a token (an upper bound for a prompt showing part of it)."""
    chars = len(json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str))
    return tokens_for_chars(chars + lines_chars(chunk))


def day_start(now: datetime) -> datetime:
    """The start of `now`'s UTC day: the daily token budget's."""
    return datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), tzinfo=UTC)


def _replayed(
    store: MemoryStore, user_id: uuid.UUID, newer: MemoryVersion, patch: list[Any], draft: _Draft, cfg: PipelineConfig
) -> Document:
    """Our change replayed on a newer head, validated; what a person changed meanwhile is kept as
    they left it unless the run's activity asks for a change there (facts.keep_human_edits)."""
    # Our own diff (any number of operations), on a head a person may have grown: size-bounded.
    replayed = apply_patch(newer.document, patch, budget=PatchBudget(2 * cfg.max_document_bytes, max_operations=None))
    proposed = validate_document(replayed, cfg.schema, max_bytes=cfg.max_document_bytes)
    human = people_edits(store, user_id, newer, cfg)
    if not human:
        return proposed
    keeping = keep_human_edits(newer.document, proposed, draft.included, human, cfg.schema)
    # An edit the run's own floor already decided comes back here when the activity won it: once.
    decided = {(c.path, c.edit.version) for c in draft.conflicts}
    draft.conflicts.extend(
        c for c in keeping.conflicts if c.won == "activity" and (c.path, c.edit.version) not in decided
    )
    if not keeping.kept:
        return proposed
    kept = validate_document(keeping.document, cfg.schema, max_bytes=cfg.max_document_bytes)
    draft.kept.extend(keeping.kept)
    draft.conflicts.extend(c for c in keeping.conflicts if c.won == "person")
    return kept


def stored_document_valid(head: MemoryVersion, cfg: PipelineConfig) -> bool:
    """Whether a run may build on the stored document: it validates against the deployment's
    schema and size limit. One that does not (written by direct SQL, or left by a schema change)
    is never summarized over (the answer could not validate either) nor repaired by guesswork
    (a repair could drop the safety notes): the run is skipped, the activity waits, and the
    caller reports it, until a valid version (the user's PUT, a revert) replaces it."""
    if head.version == 0:
        return True
    try:  # validate_document without building the stored form: a third of its time, on every run
        check_json_size(head.document, cfg.max_document_bytes)  # the head as decoded from the database
        get_schema(cfg.schema).model_validate(head.document)
    except (InvalidDocument, ValidationError):
        return False
    return True


def refresh_user(
    user_id: uuid.UUID,
    window: Window,
    run_key: str,
    *,
    store: MemoryStore,
    activity: ActivityReader,
    summarizer: Summarizer,
    cfg: PipelineConfig,
    deadline: Deadline = NO_DEADLINE,
) -> RunOutcome:
    """Run summarize -> diff -> save for one user; idempotent on `run_key`.

    When another writer moved the head meanwhile, our change is replayed on theirs if it applies
    cleanly and still validates; otherwise, or when the activity we summarized was summarized by
    another run or erased meanwhile, the run starts over from the new head and the activity
    still unsummarized (at most MAX_REBASES times).
    """
    run = _Run(user_id, window, run_key, store, activity, summarizer, cfg, deadline)
    if cfg.max_tokens_per_user_day:
        run.today = store.tokens_since(user_id, day_start(datetime.now(UTC)))
    while True:
        done = run.attempt()
        if done is not None:
            return done


_SPENT = ("tokens", "prompt_tokens", "cached_tokens")


@dataclass
class _Run:
    """One user's run under way: its steps, what its thrown-away drafts cost and how often it
    started over."""

    user_id: uuid.UUID
    window: Window
    run_key: str
    store: MemoryStore
    activity: ActivityReader
    summarizer: Summarizer
    cfg: PipelineConfig
    deadline: Deadline
    started: float = field(default_factory=time.perf_counter)
    rebased: int = 0
    spent: Counter[str] = field(default_factory=Counter)  # tokens of drafts thrown away when the run started over
    draft: _Draft | None = None
    today: int = 0  # the user's tokens earlier this UTC day (read only with a budget)

    def outcome(self, status: RunStatus, version: int, **fields: int) -> RunOutcome:
        for name in _SPENT:
            fields[name] = fields.get(name, 0) + self.spent[name]
        prompt = fields["prompt_tokens"]
        return RunOutcome(
            user_id=self.user_id,
            status=status,
            version=version,
            seconds=time.perf_counter() - self.started,
            rebased=self.rebased,
            cost_usd=self.cfg.prices.cost(prompt, fields["tokens"] - prompt, fields["cached_tokens"]),
            over_budget=self.draft is not None and self.draft.over_budget,
            tokens_today=self.today,
            **fields,
        )

    def again(self, head: MemoryVersion) -> None:
        """Count one more start over (or replay); past MAX_REBASES the run fails as a conflict."""
        self.rebased += 1
        if self.rebased > MAX_REBASES:
            raise VersionConflict(self.user_id, head.version, self.store.head(self.user_id).version)

    def attempt(self) -> RunOutcome | None:
        """One pass from the current head: summarize what is unsummarized, then write it; None when
        the run starts over."""
        if self.draft is not None:  # starting over: what the thrown-away draft cost still counts
            self.spent.update({k: v for k, v in self.draft.counts().items() if k in _SPENT})
        head, recorded = self.store.head_for_run(self.user_id, self.run_key)
        if recorded is not None:
            return self.outcome(RunStatus.ALREADY_DONE, recorded)
        if not stored_document_valid(head, self.cfg):
            return self.outcome(RunStatus.INVALID_STORED_DOCUMENT, head.version)
        draft = self.summarize(head)
        if not draft.included:
            if draft.over_budget:
                return self.outcome(RunStatus.OVER_BUDGET, head.version, deferred=draft.deferred)
            return self.outcome(RunStatus.NO_ACTIVITY, head.version)
        return self.write(head, draft)

    def summarize(self, head: MemoryVersion) -> _Draft:
        """The next document from the head and the activity, within what is left of the budget."""
        cfg = self.cfg
        human = people_edits(self.store, self.user_id, head, cfg)
        budget = (
            cfg.max_tokens_per_user_day - self.today - self.spent["tokens"] if cfg.max_tokens_per_user_day else None
        )
        draft = _fold_chunks(
            self.user_id, head.document, self.window, self.activity, self.summarizer, cfg, self.deadline, human, budget
        )
        self.draft = _set_recency(head.document, draft, cfg)
        return self.draft

    def write(self, head: MemoryVersion, draft: _Draft) -> RunOutcome | None:
        """Append the draft, replayed on a newer head when someone wrote meanwhile; None when the
        run starts over."""
        proposed = draft.document
        ids = [a.id for a in draft.included if a.id is not None]
        while True:
            try:
                written = self.store.append(
                    self.user_id,
                    proposed,
                    expected_version=head.version,
                    source=describe(self.window, len(draft.included), draft.model, draft.tokens, self.run_key),
                    idempotency_key=self.run_key,
                    base=head,
                    activity_ids=ids,
                    provenance=draft.provenance(self.cfg.prices),
                )
            except ActivityChanged:
                self.again(head)
                return None  # start over: the activity to summarize is not what it was
            except VersionConflict:
                self.again(head)
                replayed = self.replay(head, proposed, draft)
                if not isinstance(replayed, tuple):
                    return replayed
                head, proposed = replayed
                continue
            fields = {**draft.counts(), "ops": len(written.patch)}
            if written.status is WriteStatus.UNCHANGED:
                self.store.mark_summarized(self.user_id, written.version, ids)
                return self.outcome(RunStatus.UNCHANGED, written.version, **fields)
            if written.status is WriteStatus.IDEMPOTENT:
                return self.outcome(RunStatus.ALREADY_DONE, written.version, **fields)
            return self.outcome(RunStatus.WRITTEN, written.version, **fields)

    def replay(
        self, head: MemoryVersion, proposed: Document, draft: _Draft
    ) -> tuple[MemoryVersion, Document] | RunOutcome | None:
        """Someone edited meanwhile: our change on their version (the newer head and the document
        to append) when it applies cleanly and still validates; the outcome when another worker
        finished this run; None to start over. The patch is computed only here: on the happy path
        the store's own diff is the only one."""
        patch = make_patch(head.document, proposed)
        newer, recorded = self.store.head_for_run(self.user_id, self.run_key)
        if recorded is not None:  # another worker finished this run meanwhile
            return self.outcome(RunStatus.ALREADY_DONE, recorded, activities=len(draft.included))
        if newer.version < head.version:
            return None  # history went back (the user was erased): start over
        try:
            return newer, _replayed(self.store, self.user_id, newer, patch, draft, self.cfg)
        except (PatchError, InvalidDocument):
            return None  # our change does not apply to theirs: summarize again from theirs

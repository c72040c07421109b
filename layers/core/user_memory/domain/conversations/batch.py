"""One GENERATE_MEMORY_BATCH message's run: each conversation isolated, summarized within the
deadline and saved; the failed and deferred ones named for a re-send."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from user_memory.domain.conversations.model import (
    ConversationKey,
    ConversationMemory,
    ConversationMessage,
    parse_memory,
)
from user_memory.domain.conversations.ports import Clock, ConversationStore, ConversationSummarizer, ConversationSummary
from user_memory.domain.conversations.summarizer import message_chunks
from user_memory.errors import DeadlineReached, InvalidDocument, SummarizerError

# -- one batch -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """How a conversation is summarized: attempts at valid output, prompt size, time per call."""

    attempts: int = 2
    max_messages: int = 500
    max_prompt_chars: int = 24_000
    call_timeout: float = 25.0
    call_tries: int = 2
    min_call_seconds: float = 5.0

    @property
    def call_budget(self) -> float:
        """The longest one summarizer call can take: every try at the client's timeout."""
        return self.call_timeout * self.call_tries


class _NoDeadline:
    def left(self) -> float:
        return float("inf")


NO_DEADLINE: Clock = _NoDeadline()


@dataclass(frozen=True, kw_only=True)
class MemoryOutcome:
    """What one conversation's run did: `written`, `unchanged` (current already), `missing` (no such
    conversation), `partial` (time ran out: what was summarized is written, the rest waits)."""

    key: ConversationKey
    status: Literal["written", "unchanged", "missing", "partial"]
    messages: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def _call_timeout(cfg: MemoryConfig, deadline: Clock) -> float:
    budget = min(cfg.call_budget, deadline.left())
    if budget < min(cfg.min_call_seconds, cfg.call_timeout):
        raise DeadlineReached(f"{max(deadline.left(), 0):.1f} s left before the deadline margin; retried later")
    return budget


def _summarize_valid(
    summarizer: ConversationSummarizer,
    previous: ConversationMemory | None,
    chunk: Sequence[ConversationMessage],
    cfg: MemoryConfig,
    deadline: Clock,
    spent: list[int],
) -> ConversationSummary:
    feedback: str | None = None
    for _ in range(cfg.attempts):
        try:
            result = summarizer.summarize_conversation(
                previous, chunk, feedback=feedback, timeout=_call_timeout(cfg, deadline)
            )
        except InvalidDocument as err:  # the answer was not a memory: ask again, once more at most
            spent[0] += 1
            spent[1] += err.prompt_tokens
            spent[2] += err.completion_tokens
            feedback = str(err)  # every error, bounded where it is described (errors.join_problems)
            continue
        spent[0] += 1
        spent[1] += result.prompt_tokens
        spent[2] += result.completion_tokens
        return result
    raise SummarizerError(f"conversation memory output invalid after {cfg.attempts} attempts", detail=feedback)


def generate_memory(
    key: ConversationKey,
    *,
    store: ConversationStore,
    summarizer: ConversationSummarizer,
    cfg: MemoryConfig,
    deadline: Clock = NO_DEADLINE,
) -> MemoryOutcome:
    """Summarize one conversation's messages newer than its memory into its memory, and upsert it.

    Nothing new (the memory covers the last message) is `unchanged` without a model call. Long
    conversations are read `max_messages` at a time and sent in chunks that fit the prompt, each
    folded into the memory so far; if the time runs out between chunks, the memory covering what
    was summarized is written (`partial`) and the conversation stays pending for the next trigger.
    """
    started = time.perf_counter()
    state = store.state(key)
    if state is None:
        return MemoryOutcome(key=key, status="missing")
    if state.up_to_date:
        return MemoryOutcome(key=key, status="unchanged")
    memory = parse_memory(state.memory) if state.memory is not None else None
    spent = [0, 0, 0]
    covered = state.memory_through or 0
    last: ConversationMessage | None = None
    model = summarizer.name
    partial = False
    summarized = 0
    while covered < state.messages and not partial:
        page = store.messages(key, after_seq=covered, through_seq=state.messages, limit=cfg.max_messages)
        if not page:
            break
        for chunk in message_chunks(page, cfg.max_prompt_chars):
            if last is not None and deadline.left() < cfg.call_budget:
                partial = True  # keep what is summarized; the rest waits for the next trigger
                break
            result = _summarize_valid(summarizer, memory, chunk, cfg, deadline, spent)
            memory, model, last = result.memory.normalized(), result.model, chunk[-1]
            covered = last.seq
            summarized += len(chunk)
    if last is None or memory is None:  # the counted messages were not there (erased meanwhile)
        return MemoryOutcome(key=key, status="missing", seconds=time.perf_counter() - started)
    status = store.save_memory(state, memory.model_dump(), last, model=model)
    if status == "written" and covered < state.messages:
        status_out: Literal["written", "unchanged", "missing", "partial"] = "partial"
    else:
        status_out = status
    return MemoryOutcome(
        key=key,
        status=status_out,
        messages=summarized,
        calls=spent[0],
        prompt_tokens=spent[1],
        completion_tokens=spent[2],
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, kw_only=True)
class Failure:
    key: ConversationKey
    error: BaseException


@dataclass(kw_only=True)
class BatchRun:
    """One GENERATE_MEMORY_BATCH's outcome: what each conversation did, which failed (with the
    exception), and which were not started because the invocation's time ran out."""

    outcomes: list[MemoryOutcome] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    deferred: list[ConversationKey] = field(default_factory=list)

    @property
    def failed_keys(self) -> list[ConversationKey]:
        return [f.key for f in self.failures]


def run_batch(
    keys: Sequence[ConversationKey],
    *,
    store: ConversationStore,
    summarizer: ConversationSummarizer,
    cfg: MemoryConfig,
    deadline: Clock = NO_DEADLINE,
) -> BatchRun:
    """Each conversation in turn, isolated: a failure is recorded and the next one starts. Once
    the time left is below one call's worst case (after the first conversation), the rest are
    deferred, not started."""
    run = BatchRun()
    for n, key in enumerate(keys):
        if n > 0 and deadline.left() < cfg.call_budget:
            run.deferred.extend(keys[n:])
            break
        try:
            run.outcomes.append(generate_memory(key, store=store, summarizer=summarizer, cfg=cfg, deadline=deadline))
        except DeadlineReached:
            run.deferred.extend(keys[n:])
            break
        except Exception as err:  # one conversation's failure, whatever it is, must not stop the others
            run.failures.append(Failure(key=key, error=err))
    return run

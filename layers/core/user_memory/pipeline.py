"""Summarize, diff, save: one user's run for one window.

Round trips per user on the happy path: head + run key (1), the window's activity (1), the
locked head (1), the version row + head update (1), plus BEGIN/COMMIT of the write.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from user_memory.activity import Activity, window_activity
from user_memory.document import validate_document
from user_memory.errors import GuardrailRefused, InvalidDocument, PatchError, SummarizerError, VersionConflict
from user_memory.messages import Window
from user_memory.patching import apply_patch, make_patch
from user_memory.store import MemoryStore
from user_memory.summarizer.base import Summarizer, SummaryResult

# Activity kinds through which a user explicitly asks to forget; they let an update remove memory.
FORGET_KINDS = frozenset({"forget_part", "forget_request", "memory_reset"})
MAX_REBASES = 3


@dataclass(frozen=True)
class RunOutcome:
    """What one run for one user did."""

    user_id: uuid.UUID
    status: str  # written | already_done | no_activity | unchanged
    version: int
    activities: int = 0
    ops: int = 0
    tokens: int = 0
    seconds: float = 0.0
    rebased: int = 0


@dataclass(frozen=True)
class PipelineConfig:
    schema: str = "user_state"
    max_document_bytes: int = 256 * 1024
    attempts: int = 3
    max_activities: int = 500
    max_removed_parts_share: float = 0.5
    guardrail_min_parts: int = 4

    @classmethod
    def from_settings(cls, settings: Any) -> PipelineConfig:
        return cls(
            schema=settings.document_schema,
            max_document_bytes=settings.max_document_bytes,
            attempts=settings.summarizer_attempts,
            max_activities=settings.max_activities_per_run,
            max_removed_parts_share=settings.guardrail_max_removed_parts_share,
            guardrail_min_parts=settings.guardrail_min_parts,
        )


def check_guardrail(old: dict[str, Any], new: dict[str, Any], activities: list[Activity], cfg: PipelineConfig) -> None:
    """Refuse an update that removes a large share of parts or the safety notes, unless asked."""
    if any(a.kind in FORGET_KINDS for a in activities):
        return
    old_parts = set(old.get("parts", {}))
    removed = old_parts - set(new.get("parts", {}))
    if len(old_parts) >= cfg.guardrail_min_parts and len(removed) / len(old_parts) > cfg.max_removed_parts_share:
        raise GuardrailRefused(
            f"update would remove {len(removed)} of {len(old_parts)} parts "
            f"(limit {cfg.max_removed_parts_share:.0%}) and no activity asked for it"
        )
    if old.get("safety_notes") and not new.get("safety_notes"):
        raise GuardrailRefused("update would clear the safety notes and no activity asked for it")


def summarize_valid(
    summarizer: Summarizer, document: dict[str, Any], activities: list[Activity], cfg: PipelineConfig
) -> tuple[dict[str, Any], SummaryResult, int]:
    """Ask the summarizer until its output validates, at most cfg.attempts times."""
    feedback: str | None = None
    tokens = 0
    for _ in range(cfg.attempts):
        try:
            result = summarizer.summarize(document, activities, feedback=feedback)
            tokens += result.total_tokens
            return (
                validate_document(result.document, cfg.schema, max_bytes=cfg.max_document_bytes),
                result,
                tokens,
            )
        except InvalidDocument as err:
            feedback = str(err)
    raise SummarizerError(f"summarizer output invalid after {cfg.attempts} attempts: {feedback}")


def describe(window: Window, activities: list[Activity], result: SummaryResult, tokens: int, run_key: str) -> str:
    day = window.start.date().isoformat()
    label = "daily summary" if run_key.startswith("daily:") else f"summary ({run_key})"
    text = f"{label} {day}, {len(activities)} activities, model {result.model}"
    return f"{text}, {tokens:,} tokens" if tokens else text


def refresh_user(
    store: MemoryStore,
    conn: psycopg.Connection,
    summarizer: Summarizer,
    user_id: uuid.UUID,
    window: Window,
    run_key: str,
    cfg: PipelineConfig | None = None,
) -> RunOutcome:
    """Run summarize -> diff -> save for one user; idempotent on `run_key`."""
    cfg = cfg or PipelineConfig()
    started = time.perf_counter()
    head, recorded = store.head_for_run(user_id, run_key)
    if recorded is not None:
        return RunOutcome(user_id, "already_done", recorded)
    activities = window_activity(conn, user_id, window.start, window.end, limit=cfg.max_activities)
    if not activities:
        return RunOutcome(user_id, "no_activity", head.version)
    base = head.document or {}
    proposed, result, tokens = summarize_valid(summarizer, base, activities, cfg)
    rebased = 0
    while True:
        check_guardrail(base, proposed, activities, cfg)
        try:
            written = store.append(
                user_id,
                proposed,
                expected_version=head.version,
                source=describe(window, activities, result, tokens, run_key),
                idempotency_key=run_key,
                base=head,
            )
        except VersionConflict:
            rebased += 1
            if rebased > MAX_REBASES:
                raise
            # Someone edited meanwhile: replay our change on their version when it applies
            # cleanly and still validates, else summarize again from the new head. The patch
            # is computed only here: on the happy path the store's own diff is the only one.
            patch = make_patch(head.document, proposed)
            head, recorded = store.head_for_run(user_id, run_key)
            if recorded is not None:  # another worker finished this run meanwhile
                return RunOutcome(
                    user_id,
                    "already_done",
                    recorded,
                    len(activities),
                    0,
                    tokens,
                    time.perf_counter() - started,
                    rebased,
                )
            try:
                proposed = validate_document(
                    apply_patch(head.document, patch), cfg.schema, max_bytes=cfg.max_document_bytes
                )
            except (PatchError, InvalidDocument):
                base = head.document
                proposed, result, more = summarize_valid(summarizer, base, activities, cfg)
                tokens += more
            continue
        status = {"written": "written", "idempotent": "already_done", "unchanged": "unchanged"}[written.reason]
        return RunOutcome(
            user_id,
            status,
            written.version,
            len(activities),
            len(written.patch),
            tokens,
            time.perf_counter() - started,
            rebased,
        )

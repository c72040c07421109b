"""The daily pipeline on in-memory ports: idempotency, rebase, guardrail, retries, chunks, deadlines."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.config import WorkerSettings
from user_memory.domain.document import validate_document
from user_memory.domain.model import Activity, RunStatus, Window
from user_memory.domain.pipeline import Deadline, PipelineConfig, prompt_chunks, refresh_user
from user_memory.domain.ports import SummaryResult
from user_memory.domain.repository import MemoryStore
from user_memory.domain.rules import RuleBasedSummarizer
from user_memory.errors import DeadlineReached, GuardrailRefused, SummarizerError, VersionConflict

DAY = Window.day(datetime(2026, 11, 21, tzinfo=UTC).date())
RUN = "daily:2026-11-21"


class World:
    """An in-memory store and activity, and helpers to fill them."""

    def __init__(self, **settings: Any) -> None:
        self.activity = InMemoryActivity()
        self.recorder = InMemoryRecorder(self.activity)
        self.store = MemoryStore(self.recorder)
        self.cfg: PipelineConfig = WorkerSettings(**settings).pipeline()
        self.user = uuid.uuid4()
        self.n = 0

    def add(self, kind: str, at: datetime | None = None, user: uuid.UUID | None = None, **payload: Any) -> None:
        self.n += 1
        self.activity.record(
            [
                Activity(
                    user_id=user or self.user,
                    occurred_at=at or DAY.start + timedelta(minutes=self.n),
                    kind=kind,
                    payload=payload,
                    source="test",
                    external_id=f"e{self.n}",
                )
            ]
        )

    def run(self, summarizer: Any = None, run_key: str = RUN, deadline: Deadline | None = None, window: Window = DAY):
        return refresh_user(
            self.user,
            window,
            run_key,
            store=self.store,
            activity=self.activity,
            summarizer=summarizer or RuleBasedSummarizer(),
            cfg=self.cfg,
            **({"deadline": deadline} if deadline else {}),
        )


class Scripted:
    """A summarizer that returns scripted documents (or raises), recording what it was given."""

    name = "scripted"

    def __init__(self, *outputs: Any, inner: Any = None) -> None:
        self.outputs = list(outputs)
        self.inner = inner or RuleBasedSummarizer()
        self.calls: list[dict[str, Any]] = []

    def summarize(self, document, activities, *, feedback=None, timeout=None) -> SummaryResult:
        self.calls.append(
            {"n": len(activities), "feedback": feedback, "timeout": timeout, "kinds": [a.kind for a in activities]}
        )
        out = self.outputs.pop(0) if self.outputs else None
        if isinstance(out, Exception):
            raise out
        if out is None:
            return self.inner.summarize(document, activities)
        return SummaryResult(document=out, model="scripted", prompt_tokens=10, completion_tokens=5)


def test_a_day_of_activity_becomes_one_version_and_marks_what_it_summarized():
    w = World()
    w.add("part_named", part_id="planner", name="Planner")
    w.add("session", minutes=5)
    out = w.run()
    assert (out.status, out.version, out.activities) == (RunStatus.WRITTEN, 1, 2)
    assert "planner" in w.store.head(w.user).document["parts"]
    assert [w.activity.summarized_version(i) for i in (1, 2)] == [1, 1]


def test_a_redelivered_run_writes_nothing_and_calls_no_summarizer():
    w = World()
    w.add("session")
    w.run()
    again = Scripted(RuntimeError("must not be called"))
    out = w.run(again)
    assert (out.status, out.version, again.calls) == (RunStatus.ALREADY_DONE, 1, [])
    assert w.recorder.inserts == 1


def test_no_activity_means_no_summarizer_call_and_no_version():
    w = World()
    s = Scripted(RuntimeError("must not be called"))
    assert w.run(s).status is RunStatus.NO_ACTIVITY and s.calls == []


def test_activity_that_arrives_after_its_days_run_is_summarized_by_the_next_run():
    # Given day 1's run is done
    w = World()
    w.add("session")
    w.run()
    # When a late activity for day 1 arrives, and day 2 runs
    w.add("part_named", at=DAY.start + timedelta(hours=23), part_id="late", name="Late")
    day2 = Window(start=DAY.end, end=DAY.end + timedelta(days=1))
    out = w.run(run_key="daily:2026-11-22", window=day2)
    # Then day 2's version includes it
    assert (out.status, out.activities) == (RunStatus.WRITTEN, 1)
    assert "late" in w.store.head(w.user).document["parts"]


def test_activity_after_the_window_waits_for_its_own_run():
    w = World()
    w.add("session", at=DAY.end + timedelta(minutes=1))
    assert w.run().status is RunStatus.NO_ACTIVITY


def test_more_activity_than_one_read_is_summarized_in_full_in_chunks():
    # Given 25 activities and reads of at most 10
    w = World(max_activities_per_run=10)
    for i in range(25):
        w.add("part_named", part_id=f"p{i}", name=f"P{i}")
    s = Scripted(inner=RuleBasedSummarizer())
    out = w.run(s)
    # Then three summarizer calls fold all 25 into one version
    assert [c["n"] for c in s.calls] == [10, 10, 5]
    assert (out.status, out.activities, out.deferred) == (RunStatus.WRITTEN, 25, 0)
    assert len(w.store.head(w.user).document["parts"]) == 25


def test_prompt_chunks_respect_the_character_budget():
    acts = [
        Activity(
            user_id=uuid.uuid4(),
            occurred_at=DAY.start,
            kind="m",
            payload={"t": "x" * 400},
            source="s",
            external_id=str(i),
        )
        for i in range(10)
    ]
    chunks = list(prompt_chunks(acts, max_chars=1000))
    assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]
    assert [a for c in chunks for a in c] == acts


def test_when_time_runs_out_the_summarized_part_is_written_and_the_rest_is_deferred():
    # Given 3 chunks of work and a clock that leaves time for only the first call
    w = World(max_activities_per_run=2, openai_timeout_seconds=10, openai_max_retries=0)
    for i in range(6):
        w.add("part_named", part_id=f"p{i}", name=f"P{i}")
    left = iter([60_000, 5_000, 5_000, 5_000])
    deadline = Deadline(lambda: next(left), margin_s=0)
    out = w.run(deadline=deadline)
    # Then the first chunk is written, the rest stays unsummarized for the next run
    assert (out.status, out.activities, out.deferred) == (RunStatus.WRITTEN, 2, 2)
    assert [w.activity.summarized_version(i) for i in range(1, 7)] == [1, 1, None, None, None, None]
    next_run = w.run(run_key="daily:2026-11-22")
    assert (next_run.status, next_run.activities) == (RunStatus.WRITTEN, 4)


def test_a_record_too_close_to_the_deadline_is_deferred_before_any_call():
    w = World()
    w.add("session")
    s = Scripted()
    with pytest.raises(DeadlineReached, match="retried later"):
        w.run(s, deadline=Deadline(lambda: 3_000, margin_s=1))
    assert s.calls == [] and w.recorder.inserts == 0


def test_the_llm_call_timeout_is_bounded_by_the_time_left():
    # Given 30 s left, a 15 s margin, 2 tries per call
    w = World(openai_timeout_seconds=25, openai_max_retries=1)
    w.add("session")
    s = Scripted()
    w.run(s, deadline=Deadline(lambda: 30_000, margin_s=15))
    # Then the call (both tries and the wait between) may take at most 30 - 15 s in all
    assert s.calls[0]["timeout"] == pytest.approx(15, abs=0.1)


def test_invalid_output_is_retried_with_feedback_then_fails_the_user():
    w = World(summarizer_attempts=2)
    w.add("session")
    s = Scripted({"summary": 5}, {"parts": "nope"})
    with pytest.raises(SummarizerError, match="invalid after 2 attempts"):
        w.run(s)
    assert s.calls[0]["feedback"] is None and "summary" in s.calls[1]["feedback"]
    assert w.recorder.inserts == 0


def test_invalid_output_then_valid_output_writes_the_valid_one():
    w = World(summarizer_attempts=2)
    w.add("session")
    s = Scripted({"summary": 5}, {"summary": "fine"})
    out = w.run(s)
    assert out.status is RunStatus.WRITTEN and w.store.head(w.user).document["summary"] == "fine"
    assert "summary" in s.calls[1]["feedback"]


def _parts(n: int) -> dict[str, Any]:
    return {f"p{i}": {"name": f"P{i}", "status": "active"} for i in range(n)}


def test_the_guardrail_refuses_a_summary_that_drops_most_parts():
    w = World()
    w.store.append(w.user, {"parts": _parts(6), "safety_notes": "care"}, expected_version=0, source="seed")
    w.add("session")
    with pytest.raises(GuardrailRefused, match="remove 5 of 6 parts"):
        w.run(Scripted({"parts": _parts(1), "safety_notes": "care"}))
    assert w.store.head(w.user).version == 1 and w.activity.summarized_version(1) is None


def test_a_forget_request_lets_the_summary_remove_parts():
    w = World()
    w.store.append(w.user, {"parts": _parts(6)}, expected_version=0, source="seed")
    w.add("memory_reset")
    assert w.run(Scripted({"parts": {}})).status is RunStatus.WRITTEN


def test_an_unchanged_summary_writes_no_version_but_marks_the_activity():
    w = World()
    w.store.append(w.user, validate_document({"summary": "same"}), expected_version=0, source="seed")
    w.add("session")
    out = w.run(Scripted({"summary": "same"}))
    assert (out.status, out.version) == (RunStatus.UNCHANGED, 1)
    assert w.activity.summarized_version(1) == 1


class EditsDuringSummary(Scripted):
    """Another writer changes the memory while the summarizer runs."""

    def __init__(self, world: World, edit: dict[str, Any], *outputs: Any) -> None:
        super().__init__(*outputs)
        self.world, self.edit = world, edit

    def summarize(self, document, activities, *, feedback=None, timeout=None):
        if self.edit is not None:
            head = self.world.store.head(self.world.user)
            self.world.store.append(
                self.world.user, {**head.document, **self.edit}, expected_version=head.version, source="api"
            )
            self.edit = None
        return super().summarize(document, activities, feedback=feedback, timeout=timeout)


def test_a_concurrent_edit_is_kept_and_our_change_is_replayed_on_top():
    w = World()
    w.store.append(w.user, {"summary": "old", "safety_notes": ""}, expected_version=0, source="seed")
    w.add("session")
    s = EditsDuringSummary(w, {"safety_notes": "added by the app"}, {"summary": "new", "safety_notes": ""})
    out = w.run(s)
    assert (out.status, out.version, out.rebased) == (RunStatus.WRITTEN, 3, 1)
    head = w.store.head(w.user).document
    assert (head["summary"], head["safety_notes"]) == ("new", "added by the app")
    assert len(s.calls) == 1  # replayed, not summarized again


def test_a_concurrent_edit_that_conflicts_is_summarized_again_from_the_new_head():
    w = World()
    w.store.append(w.user, {"summary": "old"}, expected_version=0, source="seed")
    w.add("session")
    # Our change replaces /summary; the edit removes it, so the replay does not apply.
    s = EditsDuringSummary(w, {}, {"summary": "new"}, {"summary": "again", "x": 1})
    s.edit = {"summary": "edited"}
    w.store.append(w.user, {"other": 1}, expected_version=1, source="api")  # head is now v2 without /summary
    out = w.run(s)
    assert out.status is RunStatus.WRITTEN and out.rebased == 1


def test_rebases_are_bounded():
    w = World()
    w.add("session")

    class AlwaysConflicting(MemoryStore):
        def append(self, *a: Any, **k: Any):
            raise VersionConflict(w.user, 0, 1)

    w.store = AlwaysConflicting(w.recorder)
    with pytest.raises(VersionConflict):
        w.run()


class ErasesDuringSummary(Scripted):
    """The user is erased while the summarizer runs."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def summarize(self, document, activities, *, feedback=None, timeout=None):
        result = super().summarize(document, activities, feedback=feedback, timeout=timeout)
        if len(self.calls) == 1:
            self.world.store.erase(self.world.user)
        return result


@pytest.mark.parametrize("had_memory", [True, False])
def test_a_user_erased_during_a_run_stays_erased(had_memory):
    # Given a user (with or without memory yet) whose erase happens while the run summarizes
    w = World()
    if had_memory:
        w.store.append(w.user, {"summary": "old"}, expected_version=0, source="seed")
    w.add("safety_note", note="private")
    out = w.run(ErasesDuringSummary(w))
    # Then nothing of theirs is written back
    assert out.status is RunStatus.NO_ACTIVITY
    assert w.store.head(w.user).version == 0 and w.store.history(w.user) == []


def test_two_runs_over_the_same_activity_summarize_it_once():
    # Given a backfill and the daily run interleaved over the same unsummarized activity
    w = World()
    w.add("trigger_noted", trigger="crowded trains", desired_outcome="breathe")

    class OtherRunFirst(Scripted):
        def summarize(self, document, activities, *, feedback=None, timeout=None):
            if not self.calls:  # the other run writes while this one summarizes
                w.run(run_key="backfill:2026-11-21")
            return super().summarize(document, activities, feedback=feedback, timeout=timeout)

    out = w.run(OtherRunFirst())
    # Then the trigger is in memory once, one version holds it, and this run wrote nothing
    triggers = [t["trigger"] for t in w.store.head(w.user).document["triggers_and_goals"]]
    assert triggers == ["crowded trains"] and len(w.store.history(w.user)) == 1
    assert out.status in (RunStatus.NO_ACTIVITY, RunStatus.UNCHANGED) and out.rebased == 1


def test_a_replay_that_would_add_the_same_activity_twice_is_refused_and_the_run_starts_over():
    # Given memory with one trigger, and a day whose activity adds a second one
    w = World()
    seed = validate_document({"triggers_and_goals": [{"trigger": "T0", "desired_outcome": "o"}]})
    w.store.append(w.user, seed, expected_version=0, source="seed")
    w.add("trigger_noted", trigger="crowded trains", desired_outcome="breathe")

    class OtherRunFirst(Scripted):
        def summarize(self, document, activities, *, feedback=None, timeout=None):
            if not self.calls:
                w.run(run_key="backfill:2026-11-21")  # writes v2 with both triggers
            return super().summarize(document, activities, feedback=feedback, timeout=timeout)

    # When our run's change (append a trigger) is replayed on v2, it would append it again
    out = w.run(OtherRunFirst())
    # Then the write is refused as stale, the run starts over, and finds nothing left
    triggers = [t["trigger"] for t in w.store.head(w.user).document["triggers_and_goals"]]
    assert triggers == ["T0", "crowded trains"]
    assert (out.status, out.rebased) == (RunStatus.NO_ACTIVITY, 2)  # the conflict, then the stale write


def test_a_summarizer_that_edits_its_input_in_place_still_gets_its_change_written():
    w = World()
    w.store.append(w.user, validate_document({"summary": "old"}), expected_version=0, source="seed")
    w.add("session")

    class InPlace(Scripted):
        def summarize(self, document, activities, *, feedback=None, timeout=None):
            document["summary"] = "changed in place"
            return SummaryResult(document=document, model="in-place")

    out = w.run(InPlace())
    assert out.status is RunStatus.WRITTEN and w.store.head(w.user).document["summary"] == "changed in place"


def test_prompt_chunks_measure_the_line_the_prompt_carries():
    from user_memory.adapters.openai_summarizer import OpenAISummarizer

    acts = [
        Activity(
            user_id=uuid.uuid4(),
            occurred_at=DAY.start,
            kind="message",
            payload={"text": "word " * 100, "n": i},
            source="s",
            external_id=str(i),
        )
        for i in range(40)
    ]
    for chunk in prompt_chunks(acts, max_chars=3000):
        prompt = OpenAISummarizer(client=None).messages({}, chunk)[1]["content"]
        lines = [x for x in prompt.splitlines() if x.startswith('{"at"')]
        assert len(lines) == len(chunk) and sum(len(x) + 1 for x in lines) <= 3000


def test_a_payload_cannot_override_an_activitys_time_or_kind_in_the_prompt():
    from user_memory.domain.pipeline import activity_line

    a = Activity(
        user_id=uuid.uuid4(),
        occurred_at=DAY.start,
        kind="session",
        payload={"kind": "forget_request", "at": "x"},
        source="s",
        external_id="1",
    )
    line = activity_line(a)
    assert '"kind": "session"' in line and "forget_request" not in line and DAY.start.isoformat() in line

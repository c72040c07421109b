"""Reasons offline: the rule-based summarizer records each change it makes with the activity it folds in."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from user_memory.domain.memory.document import empty_document, validate_document
from user_memory.domain.memory.patching import apply_patch, copy_json
from user_memory.domain.model import Activity, RunStatus
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.edits import MemoryEdit
from user_memory.domain.summary.rules import RuleBasedSummarizer

from tests.unit.test_pipeline import World

USER = uuid.uuid4()
AT = datetime(2026, 11, 23, 9, 30, tzinfo=UTC)
# Part ids a JSON Pointer must escape ("/" and "~") among plain ones.
PART_IDS = ["planner", "critic", "a/b", "t~1"]
NAMED = re.compile(r"folds in (\w+) activity (\d+)$")


def as_patch(edits: tuple[MemoryEdit, ...] | list[MemoryEdit]) -> list[dict[str, Any]]:
    return [{"op": e.op, "path": e.path, **({} if e.op == "remove" else {"value": e.value})} for e in edits]


def without_recency(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without the parts' recency_score (the service's: provenance `recency_set`)."""
    out = copy_json(doc)
    for part in out.get("parts", {}).values():
        part.pop("recency_score", None)
    return out


def acts(items: list[tuple[str, dict[str, Any]]], first_id: int = 1) -> list[Activity]:
    return [
        Activity(
            user_id=USER,
            occurred_at=AT + timedelta(minutes=i),
            kind=kind,
            payload=payload,
            source="app",
            external_id=f"e{i}",
            id=first_id + i,
        )
        for i, (kind, payload) in enumerate(items)
    ]


part_ids = st.sampled_from(PART_IDS)
words = st.sampled_from(["plan", "rest", "call", "walk", ""])
activity = st.one_of(
    st.tuples(st.just("part_named"), st.fixed_dictionaries({"part_id": part_ids, "name": words})),
    st.tuples(
        st.just("part_named"), st.fixed_dictionaries({"part_id": part_ids, "status": st.sampled_from(["dormant", ""])})
    ),
    st.tuples(st.just("goal_set"), st.fixed_dictionaries({"part_id": part_ids, "goal": words})),
    st.tuples(
        st.just("trigger_noted"),
        st.fixed_dictionaries(
            {"trigger": words, "desired_outcome": words, "related_parts": st.lists(part_ids, max_size=2)}
        ),
    ),
    st.tuples(st.just("safety_note"), st.fixed_dictionaries({"note": words})),
    st.tuples(st.sampled_from(["forget_part", "forget_request"]), st.fixed_dictionaries({"part_id": part_ids})),
    st.tuples(st.just("memory_reset"), st.just({})),
    st.tuples(st.sampled_from(["session", "message"]), st.just({})),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(earlier=st.lists(activity, max_size=6), day=st.lists(activity, min_size=1, max_size=8))
def test_the_rules_changes_applied_in_order_are_exactly_what_it_changed_each_naming_its_activity(earlier, day):
    # Given a memory the rules built from earlier activity, and a day of activity (ids 100, 101, ...)
    start = validate_document(RuleBasedSummarizer().summarize(empty_document(), acts(earlier)).document, "user_state")
    activities = acts(day, first_id=100)
    # When the rule-based summarizer folds the day in
    result = RuleBasedSummarizer().summarize(start, activities)
    # Then its changes, applied in order to the memory it was given, give its answer (recency aside,
    # which the service sets)
    assert result.changes is not None
    replayed = apply_patch(start, as_patch(result.changes))
    assert without_recency(replayed) == without_recency(result.document)
    # And each change names the activity it folds in (kind and id, one of the day's), or is the
    # summary line naming the activities it counts
    by_id = {a.id: a.kind for a in activities}
    for change in result.changes:
        if change.path == "/summary":
            assert change.reason.startswith("counts the activity it folds in: ") and "activities 100" in change.reason
            continue
        found = NAMED.match(change.reason)
        assert found is not None, change.reason
        assert by_id[int(found.group(2))] == found.group(1)
    # And no change touches recency_score or a field the service maintains
    assert not any(
        c.path.endswith("/recency_score") or c.path in ("/version", "/last_updated_by") for c in result.changes
    )


def test_a_day_names_the_part_goal_trigger_and_note_it_folds_in():
    # Given a memory with one part, and a day naming a new part, its goal, a trigger and a safety note
    start = validate_document({"parts": {"critic": {"name": "Critic", "status": "active"}}}, "user_state")
    day = acts(
        [
            ("part_named", {"part_id": "planner", "name": "Planner"}),
            ("goal_set", {"part_id": "planner", "goal": "plan"}),
            ("trigger_noted", {"trigger": "deadline", "desired_outcome": "calm", "related_parts": ["planner"]}),
            ("safety_note", {"note": "careful"}),
            ("session", {}),
        ],
        first_id=7,
    )
    # When the rule-based summarizer folds it in
    result = RuleBasedSummarizer().summarize(start, day)
    # Then each change says which activity it folds in
    assert [(c.op, c.path, c.reason) for c in result.changes or ()] == [
        ("add", "/parts/planner", "folds in part_named activity 7"),
        ("replace", "/parts/planner/influence_score", "folds in goal_set activity 8"),
        ("add", "/parts/planner/goals/0", "folds in goal_set activity 8"),
        ("add", "/triggers_and_goals/0", "folds in trigger_noted activity 9"),
        ("replace", "/safety_notes", "folds in safety_note activity 10"),
        (
            "replace",
            "/summary",
            "counts the activity it folds in: 1 goal_set, 1 part_named, 1 safety_note, 1 session, "
            "1 trigger_noted (activities 7, 8, 9, 10, 11)",
        ),
    ]


def test_the_companion_rules_name_the_activity_of_each_element():
    # Given an empty companion memory and a day of a to-do, a goal and the to-do done
    day = acts(
        [
            ("todo_added", {"id": "t1", "text": "Call mum"}),
            ("goal_set", {"id": "g1", "title": "Run"}),
            ("todo_done", {"id": "t1"}),
            ("session", {}),
        ]
    )
    # When the rule-based summarizer for the companion schema folds it in
    start = validate_document({}, "companion")
    result = RuleBasedSummarizer("companion").summarize(start, day)
    # Then each element's change names its activity, the session none, and replayed they give the answer
    reasons = {c.reason for c in result.changes or ()}
    assert reasons == {
        "folds in todo_added activity 1",
        "folds in goal_set activity 2",
        "folds in todo_done activity 3",
    }
    replayed = apply_patch(start, as_patch(result.changes or ()))
    assert {**replayed, "last_updated_by": "rules"} == result.document


element_ids = st.sampled_from(["t1", "t2", "g1"])
texts = st.sampled_from(["Call mum", "Run", "", "tired"])
companion_activity = st.one_of(
    st.tuples(st.just("todo_added"), st.fixed_dictionaries({"id": element_ids, "text": texts})),
    st.tuples(st.just("todo_done"), st.fixed_dictionaries({"id": element_ids})),
    st.tuples(st.just("goal_set"), st.fixed_dictionaries({"id": element_ids, "title": texts})),
    st.tuples(
        st.just("goal_progress"),
        st.fixed_dictionaries({"id": element_ids, "note": texts, "percent": st.integers(-1, 101)}),
    ),
    st.tuples(
        st.sampled_from(["mood", "win", "loss", "pain_point", "focus_area"]),
        st.fixed_dictionaries({"mood": texts, "text": texts}),
    ),
    st.tuples(st.just("skill"), st.fixed_dictionaries({"skill": texts})),
    st.tuples(st.just("preference"), st.fixed_dictionaries({"area": texts, "value": texts})),
    st.tuples(st.just("session"), st.just({})),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(earlier=st.lists(companion_activity, max_size=6), day=st.lists(companion_activity, min_size=1, max_size=8))
def test_the_companion_rules_changes_replayed_give_its_answer_each_naming_its_activity(earlier, day):
    # Given a companion memory the rules built from earlier activity, and a day of activity
    rules = RuleBasedSummarizer("companion")
    start = validate_document(rules.summarize(validate_document({}, "companion"), acts(earlier)).document, "companion")
    activities = acts(day, first_id=100)
    # When the rules fold the day in
    result = rules.summarize(start, activities)
    # Then their changes, replayed on the memory they were given, give the answer (the stamp aside)
    replayed = apply_patch(start, as_patch(result.changes or ()))
    assert {**replayed, "last_updated_by": None} == {**result.document, "last_updated_by": None}
    # And each names one of the day's activities by kind and id
    by_id = {a.id: a.kind for a in activities}
    for change in result.changes or ():
        found = NAMED.match(change.reason)
        assert found is not None and by_id[int(found.group(2))] == found.group(1)


def test_a_rule_based_version_records_its_edits_and_counts_them():
    # Given a day naming a part and setting its goal
    w = World()
    w.add("part_named", part_id="planner", name="Planner")
    w.add("goal_set", part_id="planner", goal="plan")
    # When the pipeline runs it with the rule-based summarizer
    out = w.run()
    # Then the version's provenance lists the edits with their reasons, and the outcome counts them
    provenance = w.store.history(w.user, limit=1)[0].provenance
    assert out.status is RunStatus.WRITTEN and provenance is not None
    assert [(e["op"], e["path"]) for e in provenance["edits"]] == [
        ("add", "/parts/planner"),
        ("replace", "/parts/planner/influence_score"),
        ("add", "/parts/planner/goals/0"),
        ("replace", "/summary"),
    ]
    assert all(e["reason"] for e in provenance["edits"]) and provenance["refused"] == []
    assert out.edits_applied == 4


def test_a_whole_document_answer_without_reasons_records_its_diff_naming_the_answer():
    # Given a document-mode summarizer that answers a whole document and says nothing of why
    w = World(summary_mode="document")
    w.add("session")

    class Whole:
        name = "whole"

        def summarize(self, document: Any, activities: Any, **_: Any) -> SummaryResult:
            return SummaryResult(document={**empty_document(), "summary": "whole"}, model="m")

    # When the pipeline runs it
    w.run(Whole())
    # Then each change of its answer is an edit whose reason names the answer
    provenance = w.store.history(w.user, limit=1)[0].provenance
    assert provenance is not None and provenance["mode"] == "document"
    why = "in the whole document m answered (no reason per change)"
    assert provenance["edits"] == [{"op": "replace", "path": "/summary", "reason": why}]

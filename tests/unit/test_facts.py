"""The fact floor (domain/facts.py): protected facts restored unless an activity asks, activity the
answer does not reflect found and filled, recency set by the service."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.domain.document import validate_document
from user_memory.domain.facts import fill, recency_for, restore_facts, set_recency, unreflected
from user_memory.domain.model import Activity
from user_memory.domain.patching import copy_json

U = uuid.uuid4()
T0 = datetime(2026, 11, 21, 9, tzinfo=UTC)


def part(name: str, *goals: str, recency: float = 0.5) -> dict[str, Any]:
    return {
        "name": name,
        "status": "active",
        "recency_score": recency,
        "influence_score": 0.3,
        "goals": [{"goal": g} for g in goals],
    }


OLD = validate_document(
    {
        "summary": "Plans a lot.",
        "parts": {
            "planner": part("Planner", "plan the week", "rest on Sunday"),
            "critic": part("Harsh critic", "notice the voice"),
        },
        "triggers_and_goals": [
            {"trigger": "deadlines", "desired_outcome": "breathe", "related_parts": ["planner", "critic"]},
            {"trigger": "crowds", "desired_outcome": "leave early", "related_parts": []},
        ],
        "safety_notes": "No medical advice.\nAsked not to discuss weight.",
    }
)


def act(kind: str, n: int = 1, **payload: Any) -> Activity:
    return Activity(
        user_id=U,
        occurred_at=T0 + timedelta(minutes=n),
        kind=kind,
        payload=payload,
        source="t",
        external_id=str(n),
        id=n,
    )


def changed(fn) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    doc = copy_json(OLD)
    fn(doc)
    return doc


# -- 1. protected facts: restored without a request, allowed with one ------------------------------

LOSSES = {
    "a part": (lambda d: d["parts"].pop("critic"), "/parts/critic", ("forget_part", {"part_id": "critic"})),
    "a part's name": (
        lambda d: d["parts"]["critic"].update(name="Inner critic"),
        "/parts/critic/name",
        ("part_named", {"part_id": "critic", "name": "Inner critic"}),
    ),
    "a goal": (
        lambda d: d["parts"]["planner"]["goals"].pop(0),
        "/parts/planner/goals/1",
        ("forget_part", {"part_id": "planner"}),
    ),
    "a reworded goal": (
        lambda d: d["parts"]["planner"]["goals"].__setitem__(0, {"goal": "plan the weekend"}),
        "/parts/planner/goals/2",
        ("forget_part", {}),
    ),
    "a trigger": (lambda d: d["triggers_and_goals"].pop(0), "/triggers_and_goals/1", ("forget_request", {})),
    "a trigger's desired outcome": (
        lambda d: d["triggers_and_goals"][1].update(desired_outcome="stay home"),
        "/triggers_and_goals/1/desired_outcome",
        ("trigger_noted", {"trigger": "crowds", "desired_outcome": "stay home"}),
    ),
    "the safety notes": (lambda d: d.update(safety_notes=""), "/safety_notes", ("memory_reset", {})),
    "a safety note line": (
        lambda d: d.update(safety_notes="No medical advice."),
        "/safety_notes",
        ("forget_request", {}),
    ),
}


@pytest.mark.parametrize("what", list(LOSSES))
def test_a_protected_fact_lost_without_a_request_is_restored_and_recorded(what):
    # Given an answer that lost or changed one protected fact, and activity that does not ask for it
    lose, path, _ = LOSSES[what]
    new = changed(lose)
    # When the floor holds it to the old document
    floored = restore_facts(OLD, new, [act("session"), act("part_named", 2, part_id="planner", name="Planner")])
    # Then the fact is back where the answer left its document, and the restoration names the path
    assert [r.path for r in floored.restored] == [path]
    assert floored.restored[0].why
    doc = floored.document
    assert doc["parts"]["critic"]["name"] == "Harsh critic"
    assert {g["goal"] for g in doc["parts"]["planner"]["goals"]} >= {"plan the week", "rest on Sunday"}
    assert [(t["trigger"], t["desired_outcome"]) for t in doc["triggers_and_goals"]] in (
        [("deadlines", "breathe"), ("crowds", "leave early")],
        [("crowds", "leave early"), ("deadlines", "breathe")],
    )
    assert all(line in doc["safety_notes"] for line in ("No medical advice.", "Asked not to discuss weight."))
    # And the answer itself was not modified
    assert new == changed(lose)


@pytest.mark.parametrize("what", list(LOSSES))
def test_a_protected_fact_changed_on_request_stays_as_the_answer_has_it(what):
    # Given the same change, and an activity that asks for it
    lose, _, (kind, payload) = LOSSES[what]
    new = changed(lose)
    # When the floor holds it to the old document
    floored = restore_facts(OLD, new, [act(kind, **payload)])
    # Then nothing is restored
    assert floored.restored == () and floored.document == new


def test_a_restored_part_comes_back_whole_with_its_trigger_links():
    new = changed(lambda d: (d["parts"].pop("critic"), d["triggers_and_goals"][0].update(related_parts=["planner"])))
    doc = restore_facts(OLD, new, []).document
    assert doc["parts"]["critic"] == OLD["parts"]["critic"]
    assert doc["triggers_and_goals"][0]["related_parts"] == ["planner", "critic"]
    validate_document(doc)


def test_a_part_moved_to_a_new_id_goes_back_to_its_id_with_the_answers_changes():
    # Given an answer that moved the critic to a new id (and raised its influence there)
    def move(d: dict[str, Any]) -> None:
        moved = d["parts"].pop("critic")
        moved["influence_score"] = 0.9
        d["parts"]["harsh_critic"] = moved
        d["triggers_and_goals"][0]["related_parts"] = ["planner", "harsh_critic"]

    floored = restore_facts(OLD, changed(move), [])
    # Then the part is back under its id, once, with the answer's change, and the links follow
    doc = floored.document
    assert sorted(doc["parts"]) == ["critic", "planner"] and doc["parts"]["critic"]["influence_score"] == 0.9
    assert doc["triggers_and_goals"][0]["related_parts"] == ["planner", "critic"]
    assert [(r.path, r.why) for r in floored.restored] == [
        ("/parts/critic", "its id was changed to 'harsh_critic' without a request")
    ]


def test_the_safety_notes_restoration_names_the_lines_it_put_back():
    floored = restore_facts(OLD, changed(lambda d: d.update(safety_notes="Loves cats.")), [])
    [restored] = floored.restored
    lines = floored.document["safety_notes"].splitlines()
    assert lines == ["Loves cats.", "No medical advice.", "Asked not to discuss weight."]
    assert restored.lines == (1, 2) and restored.describe()["lines"] == [1, 2]


def test_nothing_to_protect_in_an_empty_memory():
    new = {"parts": {}, "safety_notes": ""}
    assert restore_facts({}, new, []).document is new


# -- 2. activity the answer does not reflect --------------------------------------------------------


def test_each_structured_activity_must_be_reflected():
    acts = [
        act("part_named", 1, part_id="rebel", name="Rebel"),
        act("goal_set", 2, part_id="planner", goal="call a friend"),
        act("trigger_noted", 3, trigger="bills", desired_outcome="open them"),
        act("safety_note", 4, note="Bereaved recently."),
        act("session", 5, minutes=3),
    ]
    assert unreflected(OLD, acts) == acts[:4]
    done = fill(OLD, acts[:4], OLD).document
    assert unreflected(done, acts) == []


def test_a_later_forget_releases_and_a_later_name_supersedes():
    acts = [
        act("part_named", 1, part_id="rebel", name="Rebel"),
        act("goal_set", 2, part_id="rebel", goal="say no"),
        act("forget_part", 3, part_id="rebel"),
        act("part_named", 4, part_id="critic", name="Loud critic"),
        act("part_named", 5, part_id="critic", name="Quiet critic"),
        act("safety_note", 6, note="Asthma."),
        act("memory_reset", 7),
        act("trigger_noted", 8, trigger="bills", desired_outcome="open them"),
    ]
    assert unreflected(OLD, acts) == [acts[7]]
    assert unreflected(OLD, acts[:6]) == [acts[4], acts[5]]


def test_fill_folds_in_only_what_is_missing_and_never_overrides_the_answer():
    # Given an answer that changed the summary, added its own part, and left four activities out
    answer = changed(lambda d: (d.update(summary="The model's words."), d["parts"].update(own=part("Own"))))
    acts = [
        act("part_named", 1, part_id="rebel", name="Rebel"),
        act("goal_set", 2, part_id="ghost", goal="appear"),
        act("part_named", 3, part_id="critic", name="Inner critic"),
        act("part_named", 4, part_id="own", name="Activity's name"),
    ]
    result = fill(answer, acts, OLD)
    doc = validate_document(result.document)
    # Then each is folded in the way the rule-based summarizer folds it, and the rest is the answer's
    assert doc["summary"] == "The model's words." and doc["parts"]["planner"] == OLD["parts"]["planner"]
    assert doc["parts"]["rebel"]["name"] == "Rebel"
    assert doc["parts"]["ghost"]["name"] == "ghost" and doc["parts"]["ghost"]["goals"] == [{"goal": "appear"}]
    assert doc["parts"]["critic"]["name"] == "Inner critic"  # the answer had left the old name
    assert doc["parts"]["own"]["name"] == "Own"  # a name of the answer's own is kept...
    assert [f.describe() for f in result.unreflected] == [  # ...and recorded as unreflected
        {"activity_id": 4, "kind": "part_named", "why": "the answer gave the part a name of its own; kept"}
    ]
    assert [(f.activity.id, f.activity.kind) for f in result.filled] == [
        (1, "part_named"),
        (2, "goal_set"),
        (3, "part_named"),
    ]
    assert "added under its id" in result.filled[1].why
    # And the answer itself was not modified
    assert "rebel" not in answer["parts"]


# -- 3. recency -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("previous", "decayed"), [(1.0, 0.9), (0.5, 0.45), (0.123, 0.111), (0.004, 0.004), (0.0, 0.0)])
def test_the_decay_formula(previous, decayed):
    assert recency_for(previous) == decayed


def test_recency_is_the_services_whatever_the_answer_wrote():
    # Given an answer that raised a quiet part's recency and lowered an active one's
    answer = changed(
        lambda d: (d["parts"]["critic"].update(recency_score=0.99), d["parts"]["planner"].update(recency_score=0.1))
    )
    answer["parts"]["rebel"] = part("Rebel", recency=0.7)  # new, named by no activity
    # When the service sets recency for a run whose activity names the planner
    result = set_recency(OLD, answer, [act("goal_set", part_id="planner", goal="x"), act("session", 2)])
    # Then the active part is at 1.0, the quiet one decayed from what it was, the new one as written
    parts = result.document["parts"]
    assert (parts["planner"]["recency_score"], parts["critic"]["recency_score"]) == (1.0, 0.45)
    assert parts["rebel"]["recency_score"] == 0.7 and result.changed == 2
    assert answer["parts"]["critic"]["recency_score"] == 0.99  # not modified

"""The summary prompt's view of the memory: the day's parts in full, an outline of the rest, a
stable prefix; and the whole-document answer merged back into the whole."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.adapters.openai_summarizer import OpenAISummarizer, response_format, to_llm_shape
from user_memory.domain.model import Activity
from user_memory.domain.summary.view import merge_answer, prompt_view

U = uuid.uuid4()
T0 = datetime(2026, 11, 21, 9, tzinfo=UTC)


def act(kind: str, minute: int = 0, user: uuid.UUID = U, day: int = 0, **payload: object) -> Activity:
    return Activity(
        user_id=user,
        occurred_at=T0 + timedelta(days=day, minutes=minute),
        kind=kind,
        payload=dict(payload),
        source="chat",
        external_id=f"{kind}-{minute}-{day}",
    )


def part(name: str, *goals: str) -> dict:
    return {
        "name": name,
        "status": "active",
        "recency_score": 0.5,
        "influence_score": 0.3,
        "goals": [{"goal": g} for g in goals],
    }


DOC = {
    "version": 1,
    "last_updated_by": "rules",
    "summary": "Works with Critic, Planner and Worrier.",
    "parts": {
        "critic": part("Critic", "be kinder"),
        "planner": part("Planner", "plan the week"),
        "worrier": part("Worrier", "sleep before midnight"),
    },
    "triggers_and_goals": [
        {"trigger": "deadlines", "desired_outcome": "rest", "related_parts": ["planner"]},
        {"trigger": "late-night scrolling", "desired_outcome": "sleep", "related_parts": ["worrier"]},
    ],
    "safety_notes": "never mention calories",
}


def _block(text: str, tag: str) -> str:
    return text.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]


def test_the_prompt_shows_the_parts_the_activity_names_in_full_and_outlines_every_other_by_id_and_name():
    # Given a day naming the planner and noting an existing trigger
    acts = [act("goal_set", 1, part_id="planner", goal="rest on Sundays"), act("trigger_noted", 2, trigger="deadlines")]
    # When the prompt is built
    user = OpenAISummarizer(client=None).messages(DOC, acts)[1]["content"]
    memory = json.loads(_block(user, "memory"))
    outline = _block(user, "outline")
    # Then the planner is there in full, goals and all; the others only in the outline, id and name
    assert memory["parts"] == [{"id": "planner", **DOC["parts"]["planner"]}]
    assert "parts not shown (id: name): critic: Critic; worrier: Worrier" in outline
    # And the noted trigger is shown, with its index in the whole list; the count says there are more
    assert memory["triggers_and_goals"] == [DOC["triggers_and_goals"][0]]
    assert "triggers_and_goals: 2 in all; shown (their indexes, in order): 0" in outline
    # And the summary and the safety notes are always in full
    assert memory["summary"] == DOC["summary"] and memory["safety_notes"] == DOC["safety_notes"]
    assert "be kinder" not in user and "sleep before midnight" not in user


def test_a_reset_or_another_schema_shows_the_whole_document():
    reset = prompt_view(DOC, [act("memory_reset")], "user_state")
    other = prompt_view(DOC, [act("session")], "companion")
    assert reset.whole and reset.document is DOC and reset.outline() == ""
    assert other.whole and other.document is DOC


def test_the_stable_prefix_is_byte_identical_across_users_days_and_documents():
    # Given two users with different memories on different days
    other_doc = {**DOC, "summary": "someone else", "parts": {"loner": part("Loner", "call a friend")}}
    for mode in ("edit", "document"):
        s = OpenAISummarizer(client=None, mode=mode)
        a = s.messages(DOC, [act("goal_set", 1, part_id="planner", goal="x")])
        b = s.messages(other_doc, [act("session", 5, user=uuid.uuid4(), day=3, minutes=4)])
        # Then the system message (and the response schema before it) are the same bytes
        assert a[0] == b[0] and a[0]["role"] == "system"
        assert json.dumps(response_format(mode)) == json.dumps(response_format(mode))
        # And nothing of the user's is in it
        assert "planner" not in a[0]["content"] and "loner" not in b[0]["content"]
        # And the user message starts after it, with the day's window
        assert a[1]["content"].startswith("Window: 2026-11-21T09:01Z") and b[1]["content"].startswith(
            "Window: 2026-11-24T09:05Z"
        )


_ids = st.sampled_from(["a", "b", "c", "d", "e", "f"])
_parts = st.dictionaries(_ids, st.builds(part, st.text(min_size=1, max_size=8)), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(parts=_parts, named=st.lists(_ids, max_size=4))
def test_every_part_is_either_shown_in_full_or_outlined_by_id_and_name(parts, named):
    doc = {**DOC, "parts": parts, "triggers_and_goals": []}
    acts = [act("goal_set", i, part_id=pid, goal="g") for i, pid in enumerate(named)]
    view = prompt_view(doc, acts, "user_state")
    # Then the shown parts are exactly the named ones that exist, whole
    assert view.document["parts"] == {pid: p for pid, p in parts.items() if pid in named}
    # And every other part is in the outline, with its name
    assert view.outlined == {pid: p["name"] for pid, p in parts.items() if pid not in named}
    for pid, name in view.outlined.items():
        assert f"{pid}: {name}" in view.outline()


@settings(max_examples=200, deadline=None)
@given(parts=_parts, named=st.lists(_ids, max_size=4))
def test_an_answer_that_repeats_what_it_was_shown_merges_back_to_the_whole_document(parts, named):
    doc = {**DOC, "parts": parts, "triggers_and_goals": [{"trigger": "t", "desired_outcome": "", "related_parts": []}]}
    acts = [act("goal_set", i, part_id=pid, goal="g") for i, pid in enumerate(named)]
    view = prompt_view(doc, acts, "user_state")
    merged = merge_answer(doc, view, json.loads(json.dumps(view.document)))
    assert merged == doc
    assert to_llm_shape(merged)["parts"] == to_llm_shape(doc)["parts"]  # the parts' order too


def test_a_merged_answer_keeps_outlined_parts_drops_a_shown_part_it_left_out_and_adds_new_ones():
    view = prompt_view(DOC, [act("forget_part", part_id="planner"), act("part_named", part_id="dreamer")], "user_state")
    answer = {
        **view.document,
        "parts": {"dreamer": part("Dreamer")},  # the planner forgotten, the dreamer new
        "triggers_and_goals": [{"trigger": "new", "desired_outcome": "", "related_parts": ["dreamer"]}],
    }
    merged = merge_answer(DOC, view, answer)
    # Then the outlined parts stay as they were, the planner is gone, the dreamer added at the end
    assert list(merged["parts"]) == ["critic", "worrier", "dreamer"]
    assert merged["parts"]["critic"] == DOC["parts"]["critic"]
    # And the outlined triggers stay, the planner's link taken out (the model never saw it), the new one added
    assert merged["triggers_and_goals"] == [
        {"trigger": "deadlines", "desired_outcome": "rest", "related_parts": []},
        DOC["triggers_and_goals"][1],
        {"trigger": "new", "desired_outcome": "", "related_parts": ["dreamer"]},
    ]
    # And the head's own objects are untouched
    assert DOC["triggers_and_goals"][0]["related_parts"] == ["planner"]

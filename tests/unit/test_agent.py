"""The agent's side of memory: the tutor schema, rendering for a prompt, updates, forget, tools."""

from __future__ import annotations

import copy
import json
import re
import uuid
from datetime import date
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageToolCall
from pydantic import BaseModel
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.domain.memory.agent import (
    MAX_CONFLICT_RETRIES,
    SECTION_HINTS,
    apply_update,
    execute_tool_call,
    forget,
    parse_tool_call,
    tool_definitions,
)
from user_memory.domain.memory.document import empty_document, register_schema, section_names, validate_document
from user_memory.domain.memory.patching import json_equal, merge_patch
from user_memory.domain.memory.render import estimate_tokens, render_memory
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import WriteStatus
from user_memory.errors import (
    InvalidDocument,
    InvalidToolCall,
    InvalidUpdate,
    PatchError,
    UnknownSection,
    VersionConflict,
)

# -- fixtures and strategies -------------------------------------------------------------------


def tutor_doc() -> dict:
    return {
        "version": 1,
        "last_updated_by": "system",
        "personal_info": {
            "name": "Ada",
            "preferred_name": "Addie",
            "language": "en",
            "timezone": "Europe/Paris",
            "age_group": "adult",
            "learning_goals": ["pass the algebra exam"],
            "other": {"school": "evening classes"},
        },
        "areas_to_improve": [
            {
                "topic": "spelling",
                "evidence": ["misspelt 'necessary'"],
                "first_noted": "2026-10-01",
                "last_noted": "2026-11-01",
                "severity": 2,
            },
            {
                "topic": "fractions",
                "evidence": ["1/2 + 1/3 = 2/5", "could not simplify 4/8"],
                "first_noted": "2026-11-02",
                "last_noted": "2026-11-20",
                "severity": 4,
            },
            {"topic": "long division", "evidence": [], "first_noted": None, "last_noted": None, "severity": 4},
        ],
        "knowledge_strengths": [
            {"topic": "linear equations", "evidence": ["solved 3x + 2 = 11"], "level": "advanced"},
        ],
    }


def user_state_doc() -> dict:
    return {
        "version": 1,
        "last_updated_by": "summarizer",
        "summary": "Prefers short answers.",
        "parts": {
            "critic": {
                "name": "Inner critic",
                "status": "active",
                "recency_score": 0.4,
                "influence_score": 0.9,
                "goals": [{"goal": "be kinder"}],
            },
            "planner": {"name": "Planner", "status": "calm", "recency_score": 0.8, "influence_score": 0.1, "goals": []},
        },
        "triggers_and_goals": [{"trigger": "deadlines", "desired_outcome": "stay calm", "related_parts": ["critic"]}],
        "safety_notes": "Do not discuss weight.",
    }


def new_store() -> MemoryStore:
    return MemoryStore(InMemoryRecorder(InMemoryActivity()))


def call(name: str, arguments: Any, call_id: str = "call_1") -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def update_call(section: str, mode: str, value: Any, call_id: str = "call_1") -> dict:
    return call("update_memory", {"section": section, "mode": mode, "value_json": json.dumps(value)}, call_id)


def forget_call(target: str, call_id: str = "call_f") -> dict:
    return call("forget_memory", {"target": target}, call_id)


text = st.text(st.characters(codec="utf-8"), max_size=24)
topic = st.text(st.characters(codec="utf-8"), min_size=1, max_size=24)
day = st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31)).map(date.isoformat)


@st.composite
def areas(draw: Any) -> dict:
    first, last = draw(st.none() | day), draw(st.none() | day)
    if first and last and last < first:
        first, last = last, first
    return {
        "topic": draw(topic),
        "evidence": draw(st.lists(text, max_size=5)),
        "first_noted": first,
        "last_noted": last,
        "severity": draw(st.integers(1, 5)),
    }


strengths = st.fixed_dictionaries(
    {
        "topic": topic,
        "evidence": st.lists(text, max_size=5),
        "level": st.sampled_from(["beginner", "intermediate", "advanced"]),
    }
)
personal_infos = st.fixed_dictionaries(
    {
        "name": text,
        "preferred_name": text,
        "language": text,
        "timezone": text,
        "age_group": text,
        "learning_goals": st.lists(text, max_size=4),
        "other": st.dictionaries(text, text, max_size=4),
    }
)
tutor_docs = st.fixed_dictionaries(
    {
        "version": st.just(1),
        "last_updated_by": st.just("system"),
        "personal_info": personal_infos,
        "areas_to_improve": st.lists(areas(), max_size=6),
        "knowledge_strengths": st.lists(strengths, max_size=6),
    }
)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=5)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the tutor schema --------------------------------------------------------------------------


def test_tutor_document_validates_as_given():
    doc = tutor_doc()
    assert validate_document(doc, "tutor") == doc


def test_empty_tutor_document_is_valid_and_empty():
    empty = empty_document("tutor")
    assert validate_document(empty, "tutor") == empty
    assert empty["personal_info"] == {
        "name": "",
        "preferred_name": "",
        "language": "",
        "timezone": "",
        "age_group": "",
        "learning_goals": [],
        "other": {},
    }
    assert (empty["areas_to_improve"], empty["knowledge_strengths"]) == ([], [])
    assert validate_document({}, "tutor") == empty  # version 0 becomes the empty document


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["areas_to_improve"][0].update(severity=0), "areas_to_improve.0.severity"),
        (lambda d: d["areas_to_improve"][1].update(severity=6), "areas_to_improve.1.severity"),
        (lambda d: d["areas_to_improve"][0].pop("severity"), "areas_to_improve.0.severity"),
        (lambda d: d["areas_to_improve"][0].update(topic=""), "areas_to_improve.0.topic"),
        (lambda d: d["areas_to_improve"][0].update(first_noted="01/10/2026"), "areas_to_improve.0.first_noted"),
        (lambda d: d["areas_to_improve"][0].update(last_noted="2026-02-30"), "areas_to_improve.0.last_noted"),
        (lambda d: d["areas_to_improve"][0].update(first_noted="20261001"), "areas_to_improve.0.first_noted"),
        (lambda d: d["areas_to_improve"][0].update(evidence="one"), "areas_to_improve.0.evidence"),
        (lambda d: d["knowledge_strengths"][0].update(level="expert"), "knowledge_strengths.0.level"),
        (lambda d: d["knowledge_strengths"][0].update(mood="x"), "knowledge_strengths.0.mood"),
        (lambda d: d["personal_info"].update(learning_goals="algebra"), "personal_info.learning_goals"),
        (lambda d: d["personal_info"]["other"].update(age=41), "personal_info.other.age"),
        (lambda d: d["personal_info"].update(nickname="A"), "personal_info.nickname"),
        (lambda d: d.update(areas_to_improve={"topic": "x"}), "areas_to_improve"),
        (lambda d: d.update(summary="not a tutor section"), "summary"),
    ],
)
def test_tutor_validation_errors_name_the_field(mutate, field):
    # Given a valid tutor document with one bad field
    doc = tutor_doc()
    mutate(doc)
    # Then validation refuses it and names that field
    with pytest.raises(InvalidDocument, match=re.escape(field)):
        validate_document(doc, "tutor")


def test_an_area_last_noted_before_it_was_first_noted_is_refused():
    doc = tutor_doc()
    doc["areas_to_improve"][0].update(first_noted="2026-11-02", last_noted="2026-11-01")
    with pytest.raises(InvalidDocument, match=r"areas_to_improve\.0: last_noted is before first_noted"):
        validate_document(doc, "tutor")


def test_sections_are_the_schema_fields_but_version_and_author():
    assert section_names("tutor") == ["personal_info", "areas_to_improve", "knowledge_strengths"]
    assert section_names() == ["summary", "parts", "triggers_and_goals", "safety_notes"]


# -- render_memory -----------------------------------------------------------------------------


def test_tutor_render_puts_sections_in_priority_order_and_areas_by_severity_then_recency():
    # Given a tutor document with areas in no particular order
    # When it is rendered with room to spare
    block = render_memory(tutor_doc(), 10_000, schema="tutor")
    # Then personal info comes first, areas by severity then last noted (undated last), then strengths
    assert block == "\n".join(
        [
            "Name: Ada",
            "Preferred name: Addie",
            "Language: en",
            "Timezone: Europe/Paris",
            "Age group: adult",
            "Learning goals: pass the algebra exam",
            "Other - school: evening classes",
            "Needs work: fractions (severity 4/5; noted 2026-11-02 to 2026-11-20)"
            " - evidence: 1/2 + 1/3 = 2/5; could not simplify 4/8",
            "Needs work: long division (severity 4/5)",
            "Needs work: spelling (severity 2/5; noted 2026-10-01 to 2026-11-01) - evidence: misspelt 'necessary'",
            "Strength: linear equations (advanced) - evidence: solved 3x + 2 = 11",
        ]
    )


def test_user_state_render_puts_safety_first_then_summary_parts_by_recency_then_triggers():
    block = render_memory(user_state_doc(), 10_000)
    assert block == "\n".join(
        [
            "Safety notes: Do not discuss weight.",
            "Summary: Prefers short answers.",
            "Part: Planner [planner] - calm; recency 0.8, influence 0.1",
            "Part: Inner critic [critic] - active; recency 0.4, influence 0.9; goals: be kinder",
            "Trigger: deadlines -> stay calm (parts: critic)",
        ]
    )


def test_render_is_deterministic_and_ignores_key_order():
    # Given the same document twice, once with its objects' keys in another order
    doc = user_state_doc()
    shuffled = copy.deepcopy(doc)
    shuffled["parts"] = dict(reversed(list(shuffled["parts"].items())))
    tutor = tutor_doc()
    tutor["personal_info"]["other"] = {"b": "2", "a": "1"}
    tutor_shuffled = copy.deepcopy(tutor)
    tutor_shuffled["personal_info"]["other"] = {"a": "1", "b": "2"}
    # Then each renders identically, every time
    for budget in (0, 20, 60, 10_000):
        assert (
            render_memory(doc, budget) == render_memory(copy.deepcopy(doc), budget) == render_memory(shuffled, budget)
        )
        assert render_memory(tutor, budget, schema="tutor") == render_memory(tutor_shuffled, budget, schema="tutor")


def test_older_evidence_beyond_three_entries_is_counted_not_shown():
    doc = tutor_doc()
    doc["knowledge_strengths"][0]["evidence"] = ["e1", "e2", "e3", "e4", "e5"]
    block = render_memory(doc, 10_000, schema="tutor")
    assert block.endswith("Strength: linear equations (advanced) - evidence: e3; e4; e5 (+2 earlier)")


def test_values_with_newlines_stay_on_one_line():
    doc = user_state_doc()
    doc["summary"] = "line one\n\nline two\t end"
    assert "Summary: line one line two end" in render_memory(doc, 10_000).split("\n")


def test_the_cut_is_whole_lines_and_the_marker_names_what_was_left_out():
    # Given a tutor document of 11 lines, and a budget that holds the personal info and a little more
    full = render_memory(tutor_doc(), 10_000, schema="tutor").split("\n")
    budget = estimate_tokens("\n".join(full[:8])) + 25
    # When it is rendered within that budget
    block = render_memory(tutor_doc(), budget, schema="tutor")
    # Then the first lines come whole, and the marker counts and names the rest
    lines = block.split("\n")
    assert lines[:-1] == full[: len(lines) - 1]
    assert lines[-1] == (
        f"[memory truncated: {len(full) - len(lines) + 1} more items in areas_to_improve, knowledge_strengths]"
    )
    assert estimate_tokens(block) <= budget


def test_a_budget_below_the_smallest_block_gives_just_the_marker():
    block = render_memory(tutor_doc(), 0, schema="tutor")
    assert block == "[memory truncated: 11 more items in personal_info, areas_to_improve, knowledge_strengths]"
    assert render_memory(user_state_doc(), 3) == (
        "[memory truncated: 5 more items in safety_notes, summary, parts, triggers_and_goals]"
    )


def test_one_item_left_out_is_singular():
    doc = {"areas_to_improve": [{"topic": "a", "severity": 1}, {"topic": "b" * 200, "severity": 1}]}
    first = "Needs work: a (severity 1/5)"
    marker = "[memory truncated: 1 more item in areas_to_improve]"
    budget = estimate_tokens(f"{first}\n{marker}")
    assert render_memory(doc, budget, schema="tutor") == f"{first}\n{marker}"


@pytest.mark.parametrize("schema", ["user_state", "tutor"])
def test_an_empty_document_renders_as_nothing(schema):
    assert render_memory({}, 100, schema=schema) == ""
    assert render_memory(empty_document(schema), 0, schema=schema) == ""


def test_empty_sections_are_left_out():
    doc = empty_document("tutor")
    doc["personal_info"]["timezone"] = "UTC"
    doc["personal_info"]["name"] = "   "
    assert render_memory(doc, 100, schema="tutor") == "Timezone: UTC"


def test_render_refuses_an_invalid_document_and_a_negative_budget():
    with pytest.raises(InvalidDocument, match=r"areas_to_improve\.0\.severity"):
        render_memory({"areas_to_improve": [{"topic": "x", "severity": 9}]}, 100, schema="tutor")
    with pytest.raises(ValueError, match="budget_tokens"):
        render_memory({}, -1)


def test_another_registered_schema_renders_its_sections_in_schema_order():
    class AgentNotes(BaseModel):
        notes: list[str] = []
        prefs: dict[str, int] = {}
        mood: str = ""

    register_schema("agent_test_notes", AgentNotes)
    block = render_memory({"prefs": {"b": 2, "a": 1}, "notes": ["n1"], "mood": ""}, 100, schema="agent_test_notes")
    assert block == "notes: n1\nprefs - a: 1\nprefs - b: 2"


def test_another_schema_renders_no_empty_values_and_its_sensitive_fields_only_when_asked():
    # Given a schema with nested objects, optional fields and a field it declares sensitive
    class Contact(BaseModel):
        city: str = ""
        email: str | None = None
        zip: str | None = None

    class AgentProfile(BaseModel):
        contact: Contact = Contact()
        tags: list[str] = []
        notes: dict[str, Any] = {}

    register_schema("agent_test_profile", AgentProfile, sensitive=frozenset({"email"}))
    document = {"contact": {"city": "Porto", "email": "p@example.org"}, "notes": {"a": {"b": None, "c": []}, "d": "x"}}
    # When it is rendered, and rendered for a deployment that opts in
    plain = render_memory(document, 100, schema="agent_test_profile")
    opted_in = render_memory(document, 100, schema="agent_test_profile", include_sensitive=True)
    # Then nulls, empty strings, lists and objects are left out at any depth, and so is the email
    assert plain == "contact - city: Porto\nnotes - d: x"
    assert opted_in == "contact - city: Porto\ncontact - email: p@example.org\nnotes - d: x"


def test_the_schemas_declare_their_sensitive_fields():
    from user_memory.domain.memory.document import sensitive_fields

    assert sensitive_fields("companion") == {"date_of_birth", "email", "phone"}
    assert sensitive_fields("user_state") == sensitive_fields("tutor") == frozenset()


_EMAILS = st.from_regex(r"[a-z][a-z0-9._]{0,20}@[a-z]{1,12}\.(org|com|pt)", fullmatch=True)


@PROPERTY
@given(email=_EMAILS, phone=st.from_regex(r"\+?[0-9]{5,15}", fullmatch=True), year=st.integers(1900, 2020))
def test_a_companion_prompt_never_carries_a_sensitive_field_unless_the_deployment_opts_in(email, phone, year):
    # Given a companion memory whose sensitive fields hold anything, beside a name and an attendee's email
    birth = f"{year}-02-03"
    document = {
        "basic_info": {"name": "Rui", "email": email, "phone": phone, "date_of_birth": birth},
        "events": {"e1": {"id": "e1", "summary": "Lunch", "start": "2026-01-02", "attendees": [{"email": email}]}},
    }
    # When it is rendered with any budget
    for budget in (5, 40, 4000):
        block = render_memory(document, budget, schema="companion")
        # Then none of them is in it
        assert email not in block and phone not in block and birth not in block
    # And a deployment that opts in sees them all
    block = render_memory(document, 4000, schema="companion", include_sensitive=True)
    assert f"Email: {email}" in block and f"Phone: {phone}" in block and f"Date of birth: {birth}" in block


def test_a_companion_prompt_orders_what_is_open_and_marks_what_was_cut():
    # Given goals, to-dos and events in no particular order, some finished
    document = {
        "basic_info": {"name": "Rui"},
        "goals": {
            "g2": {"id": "g2", "title": "Read more", "priority": "low"},
            "g1": {"id": "g1", "title": "Swim", "priority": "high", "target_date": "2026-09-01"},
            "g3": {"id": "g3", "title": "Paint", "status": "paused"},
            "g4": {"id": "g4", "title": "Done goal", "status": "abandoned"},
        },
        "todos": {
            "t3": {"id": "t3", "text": "Someday"},
            "t2": {"id": "t2", "text": "Later", "due_date": "2026-03-01", "status": "in_progress"},
            "t1": {"id": "t1", "text": "Soon", "due_date": "2026-02-01", "priority": "high", "tags": ["home"]},
        },
    }
    # When it is rendered in full, and within a small budget
    lines = render_memory(document, 4000, schema="companion").splitlines()
    small = render_memory(document, 20, schema="companion").splitlines()
    # Then active goals come first by priority, paused after; to-dos by due date, undated last
    assert lines == [
        "Name: Rui",
        "Goal: Swim [g1] - high priority; target 2026-09-01",
        "Goal: Read more [g2] - low priority",
        "Goal: Paint [g3] - paused",
        "To-do: Soon [t1] - due 2026-02-01; high priority; tags home",
        "To-do: Later [t2] - due 2026-03-01; in progress",
        "To-do: Someday [t3]",
    ]
    # And a cut names the sections left out, as for every schema
    assert small[-1] == "[memory truncated: 6 more items in goals, todos]"


_SECTION_OF = {"Needs work:": "areas_to_improve", "Strength:": "knowledge_strengths"}


def _section_of(line: str) -> str:
    return next((s for prefix, s in _SECTION_OF.items() if line.startswith(prefix)), "personal_info")


@PROPERTY
@given(doc=tutor_docs, budget=st.integers(0, 300))
def test_render_keeps_to_the_budget_with_a_prefix_and_an_exact_marker(doc, budget):
    full = render_memory(doc, 10**9, schema="tutor")
    block = render_memory(doc, budget, schema="tutor")
    assert block == render_memory(copy.deepcopy(doc), budget, schema="tutor")  # deterministic
    if estimate_tokens(full) <= budget:
        assert block == full
        return
    full_lines, lines = full.split("\n"), block.split("\n")
    kept, marker = lines[:-1], lines[-1]
    # whole lines, highest priority first
    assert kept == full_lines[: len(kept)]
    # the marker counts and names exactly what was left out
    left_out = full_lines[len(kept) :]
    names = ", ".join(dict.fromkeys(_section_of(line) for line in left_out))
    n = len(left_out)
    assert marker == f"[memory truncated: {n} more item{'' if n == 1 else 's'} in {names}]"
    # within budget, unless the marker alone does not fit
    assert estimate_tokens(block) <= budget or kept == []
    # and no whole line more would have fitted
    if len(left_out) > 1:
        one_more = full_lines[: len(kept) + 1]
        rest = full_lines[len(kept) + 1 :]
        more_names = ", ".join(dict.fromkeys(_section_of(line) for line in rest))
        more_marker = f"[memory truncated: {len(rest)} more item{'' if len(rest) == 1 else 's'} in {more_names}]"
        assert estimate_tokens("\n".join([*one_more, more_marker])) > budget


# -- apply_update ------------------------------------------------------------------------------


def test_merge_changes_what_it_names_keeps_siblings_and_null_deletes():
    # Given a tutor document
    doc = tutor_doc()
    # When personal_info is merged with a new timezone, an emptied preferred name and a new `other` key
    out = apply_update(
        doc,
        "personal_info",
        "merge",
        {"timezone": "Asia/Tokyo", "preferred_name": None, "other": {"pace": "slow"}},
        schema="tutor",
    )
    # Then only those change: null deleted the key (read back as its default), `other` merged
    info = out["personal_info"]
    assert info["timezone"] == "Asia/Tokyo"
    assert info["preferred_name"] == ""
    assert info["other"] == {"school": "evening classes", "pace": "slow"}
    assert info["name"] == "Ada" and info["learning_goals"] == ["pass the algebra exam"]
    assert out["areas_to_improve"] == doc["areas_to_improve"]
    assert out["knowledge_strengths"] == doc["knowledge_strengths"]


def test_merge_replaces_lists_and_null_deletes_a_nested_key():
    doc = tutor_doc()
    out = apply_update(
        doc, "personal_info", "merge", {"learning_goals": ["geometry"], "other": {"school": None}}, schema="tutor"
    )
    assert out["personal_info"]["learning_goals"] == ["geometry"]
    assert out["personal_info"]["other"] == {}


def test_merge_of_parts_updates_one_part_and_deletes_another():
    doc = user_state_doc()
    doc["triggers_and_goals"] = []
    out = apply_update(doc, "parts", "merge", {"critic": {"status": "quiet"}, "planner": None})
    assert list(out["parts"]) == ["critic"]
    assert out["parts"]["critic"]["status"] == "quiet"
    assert out["parts"]["critic"]["goals"] == [{"goal": "be kinder"}]


def test_merge_with_null_resets_the_section_to_its_default():
    assert apply_update(user_state_doc(), "summary", "merge", None)["summary"] == ""
    assert apply_update(tutor_doc(), "areas_to_improve", "merge", None, schema="tutor")["areas_to_improve"] == []


def test_a_merge_that_leaves_the_document_invalid_names_the_field():
    with pytest.raises(InvalidDocument, match=r"triggers_and_goals\[0\]\.related_parts names unknown part 'critic'"):
        apply_update(user_state_doc(), "parts", "merge", {"critic": None})  # a trigger still names it
    with pytest.raises(InvalidDocument, match=r"areas_to_improve"):
        apply_update(tutor_doc(), "areas_to_improve", "merge", {"topic": "x"}, schema="tutor")


def test_replace_replaces_the_section_whole():
    new = [{"topic": "geometry", "evidence": [], "first_noted": None, "last_noted": None, "severity": 1}]
    out = apply_update(tutor_doc(), "areas_to_improve", "replace", new, schema="tutor")
    assert out["areas_to_improve"] == new
    out = apply_update(tutor_doc(), "personal_info", "replace", {"name": "Bea"}, schema="tutor")
    assert out["personal_info"] == {**empty_document("tutor")["personal_info"], "name": "Bea"}


def test_append_to_a_list_section_takes_one_item_or_a_list_of_items():
    doc = tutor_doc()
    one = {"topic": "geometry", "level": "beginner"}
    out = apply_update(doc, "knowledge_strengths", "append", one, schema="tutor")
    assert [s["topic"] for s in out["knowledge_strengths"]] == ["linear equations", "geometry"]
    out = apply_update(doc, "knowledge_strengths", "append", [one, {**one, "topic": "logic"}], schema="tutor")
    assert [s["topic"] for s in out["knowledge_strengths"]] == ["linear equations", "geometry", "logic"]


def test_append_to_an_object_section_extends_its_list_members():
    out = apply_update(tutor_doc(), "personal_info", "append", {"learning_goals": ["read novels"]}, schema="tutor")
    assert out["personal_info"]["learning_goals"] == ["pass the algebra exam", "read novels"]
    out = apply_update(tutor_doc(), "personal_info", "append", {"learning_goals": "one more"}, schema="tutor")
    assert out["personal_info"]["learning_goals"][-1] == "one more"


@pytest.mark.parametrize(
    "schema, section, value, message",
    [
        ("user_state", "summary", "more text", "'summary' is neither"),
        ("tutor", "personal_info", ["x"], "needs an object of lists"),
        ("tutor", "personal_info", {"name": ["x"]}, "member 'name' is not a list"),
    ],
)
def test_append_that_does_not_fit_the_section_is_an_invalid_update(schema, section, value, message):
    doc = tutor_doc() if schema == "tutor" else user_state_doc()
    with pytest.raises(InvalidUpdate, match=message):
        apply_update(doc, section, "append", value, schema=schema)


def test_unknown_section_and_unknown_mode_are_typed_errors():
    with pytest.raises(UnknownSection, match="no section 'mood'; sections: personal_info") as info:
        apply_update(tutor_doc(), "mood", "merge", {}, schema="tutor")
    assert isinstance(info.value, LookupError)
    with pytest.raises(UnknownSection):
        apply_update(tutor_doc(), "version", "replace", 2, schema="tutor")  # metadata is not a section
    with pytest.raises(InvalidUpdate, match="mode must be one of merge, replace, append"):
        apply_update(tutor_doc(), "personal_info", "upsert", {}, schema="tutor")


def test_updates_start_from_version_zero():
    out = apply_update({}, "areas_to_improve", "append", {"topic": "x", "severity": 3}, schema="tutor")
    assert out == {
        **empty_document("tutor"),
        "areas_to_improve": [{"topic": "x", "evidence": [], "first_noted": None, "last_noted": None, "severity": 3}],
    }


def test_an_update_over_the_size_limit_is_refused():
    with pytest.raises(InvalidDocument, match="over the limit"):
        apply_update(user_state_doc(), "summary", "replace", "x" * 500, max_document_bytes=400)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: apply_update(d, "personal_info", "merge", {"name": None, "other": {"x": "y"}}, schema="tutor"),
        lambda d: apply_update(d, "personal_info", "append", {"learning_goals": ["g"]}, schema="tutor"),
        lambda d: apply_update(d, "areas_to_improve", "append", {"topic": "t", "severity": 1}, schema="tutor"),
        lambda d: apply_update(d, "knowledge_strengths", "replace", [], schema="tutor"),
        lambda d: forget(d, "/areas_to_improve/0/evidence/0", schema="tutor"),
        lambda d: forget(d, "/personal_info/other/school", schema="tutor"),
        lambda d: forget(d, "areas_to_improve", schema="tutor"),
    ],
)
def test_the_input_document_is_never_modified(edit):
    doc = tutor_doc()
    before = copy.deepcopy(doc)
    out = edit(doc)
    assert json_equal(doc, before)
    assert out != doc
    # and the result shares nothing with it: changing it leaves the input alone
    out["personal_info"]["learning_goals"].append("z")
    out["personal_info"]["other"]["k"] = "v"
    assert json_equal(doc, before)


def _check_merge(target: Any, patch: dict, result: Any) -> None:
    """RFC 7396, member by member: unnamed keys kept, null deletes, objects recurse, the rest replaces."""
    assert isinstance(result, dict)
    base = target if isinstance(target, dict) else {}
    for key, value in base.items():
        if key not in patch:
            assert json_equal(result[key], value), f"sibling {key!r} changed"
    for key, value in patch.items():
        if value is None:
            assert key not in result
        elif isinstance(value, dict):
            _check_merge(base.get(key), value, result[key])
        else:
            assert json_equal(result[key], value)
    assert set(result) == ({*base} - {k for k, v in patch.items() if v is None}) | {
        k for k, v in patch.items() if v is not None
    }


@PROPERTY
@given(target=json_objects, patch=json_objects)
def test_merge_patch_keeps_every_sibling_it_does_not_name(target, patch):
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = merge_patch(target, patch)
    _check_merge(target, patch, result)
    assert json_equal(merge_patch(result, patch), result)  # applying it twice changes nothing more
    assert json_equal(target, target_before) and json_equal(patch, patch_before)


@PROPERTY
@given(target=json_values, patch=json_values.filter(lambda v: not isinstance(v, dict)))
def test_a_merge_patch_that_is_not_an_object_replaces_the_target(target, patch):
    assert json_equal(merge_patch(target, patch), patch)


_INFO_FIELDS = ["name", "preferred_name", "language", "timezone", "age_group", "learning_goals", "other"]


@PROPERTY
@given(doc=tutor_docs, data=st.data())
def test_a_section_merge_never_touches_what_it_does_not_name(doc, data):
    # Given a valid tutor document and a merge naming some personal_info fields (null for a few)
    named = data.draw(st.lists(st.sampled_from(_INFO_FIELDS), unique=True, max_size=4))
    values = data.draw(personal_infos)
    patch = {f: (None if data.draw(st.booleans()) else values[f]) for f in named}
    # When it is applied
    out = apply_update(doc, "personal_info", "merge", patch, schema="tutor")
    # Then other sections and unnamed fields are as they were
    assert out["areas_to_improve"] == doc["areas_to_improve"]
    assert out["knowledge_strengths"] == doc["knowledge_strengths"]
    default = empty_document("tutor")["personal_info"]
    for f in _INFO_FIELDS:
        if f not in patch:
            assert out["personal_info"][f] == doc["personal_info"][f]
        elif patch[f] is None:
            assert out["personal_info"][f] == default[f]
        elif f == "other":
            assert out["personal_info"][f] == {**doc["personal_info"][f], **patch[f]}
        else:
            assert out["personal_info"][f] == patch[f]


@PROPERTY
@given(doc=tutor_docs, items=st.lists(areas(), max_size=3))
def test_append_keeps_what_was_there_and_adds_in_order(doc, items):
    out = apply_update(doc, "areas_to_improve", "append", items, schema="tutor")
    assert out["areas_to_improve"] == doc["areas_to_improve"] + items
    assert {k: v for k, v in out.items() if k != "areas_to_improve"} == {
        k: v for k, v in doc.items() if k != "areas_to_improve"
    }


# -- forget ------------------------------------------------------------------------------------


def test_forgetting_a_section_resets_it_to_its_default_and_the_document_still_validates():
    for target in ("areas_to_improve", "/areas_to_improve"):
        out = forget(tutor_doc(), target, schema="tutor")
        assert out["areas_to_improve"] == []
        assert out["personal_info"] == tutor_doc()["personal_info"]
        assert validate_document(out, "tutor") == out
    forgotten = forget(tutor_doc(), "personal_info", schema="tutor")
    assert forgotten["personal_info"] == empty_document("tutor")["personal_info"]


def test_forgetting_by_pointer_removes_one_member_or_item():
    out = forget(tutor_doc(), "/areas_to_improve/0", schema="tutor")
    assert [a["topic"] for a in out["areas_to_improve"]] == ["fractions", "long division"]
    out = forget(tutor_doc(), "/personal_info/timezone", schema="tutor")
    assert out["personal_info"]["timezone"] == ""  # gone, read back as its default
    doc = tutor_doc()
    doc["personal_info"]["other"]["a/b"] = "slash"
    assert "a/b" not in forget(doc, "/personal_info/other/a~1b", schema="tutor")["personal_info"]["other"]


@pytest.mark.parametrize(
    "target, error, message",
    [
        ("mood", UnknownSection, "no section 'mood'"),
        ("/mood/x", UnknownSection, "no section 'mood'"),
        ("/version", UnknownSection, "no section 'version'"),
        ("", UnknownSection, "no section ''"),
        ("/", UnknownSection, "no section ''"),
        ("/personal_info/other/nothing", PatchError, "does not exist"),
        ("/areas_to_improve/7", PatchError, "out of range"),
        ("/personal_info/~x", PatchError, "invalid escape"),
        ("/areas_to_improve/0/topic", InvalidDocument, r"areas_to_improve\.0\.topic"),
    ],
)
def test_forget_refuses_what_it_cannot_forget(target, error, message):
    doc = tutor_doc()
    with pytest.raises(error, match=message):
        forget(doc, target, schema="tutor")
    assert doc == tutor_doc()


def test_forgetting_a_part_a_trigger_still_names_is_refused():
    with pytest.raises(InvalidDocument, match="unknown part 'critic'"):
        forget(user_state_doc(), "/parts/critic")


# -- tool definitions --------------------------------------------------------------------------


def _assert_strict(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert set(node["required"]) == set(node["properties"])
        assert "default" not in node
        for value in node.values():
            _assert_strict(value)
    elif isinstance(node, list):
        for value in node:
            _assert_strict(value)


@pytest.mark.parametrize("schema", ["user_state", "tutor"])
def test_tool_definitions_are_strict_mode_compatible(schema):
    tools = tool_definitions(schema)
    assert [t["type"] for t in tools] == ["function", "function"]
    assert [t["function"]["name"] for t in tools] == ["update_memory", "forget_memory"]
    for tool in tools:
        assert tool["function"]["strict"] is True
        _assert_strict(tool["function"]["parameters"])
    update = tools[0]["function"]["parameters"]["properties"]
    assert update["section"]["enum"] == section_names(schema)
    assert update["mode"]["enum"] == ["merge", "replace", "append"]
    assert update["value_json"]["type"] == "string"
    json.dumps(tools)  # plain JSON


@pytest.mark.parametrize("schema", sorted(SECTION_HINTS))
def test_every_section_has_a_shape_hint_in_the_description(schema):
    assert set(SECTION_HINTS[schema]) == set(section_names(schema))
    description = tool_definitions(schema)[0]["function"]["description"]
    for section in section_names(schema):
        assert f"- {section}: " in description


def test_tool_definitions_are_new_each_call():
    tools = tool_definitions()
    tools[0]["function"]["parameters"]["properties"]["section"]["enum"].append("x")
    assert "x" not in tool_definitions()[0]["function"]["parameters"]["properties"]["section"]["enum"]


# -- execute_tool_call -------------------------------------------------------------------------


def test_a_tool_call_writes_a_new_version_with_the_agent_as_source():
    # Given a user with a tutor memory
    store, user = new_store(), uuid.uuid4()
    store.append(user, tutor_doc(), expected_version=0, source="seed")
    # When the model sets the timezone
    result = execute_tool_call(store, user, update_call("personal_info", "merge", {"timezone": "UTC"}), schema="tutor")
    # Then version 2 is written by the agent, with only that change
    assert (result.status, result.version) == (WriteStatus.WRITTEN, 2)
    head = store.head(user)
    assert head.source == "agent:update_memory"
    assert head.document["personal_info"]["timezone"] == "UTC"
    assert head.document["last_updated_by"] == "agent:update_memory"
    assert {op["path"] for op in result.patch} == {"/personal_info/timezone", "/last_updated_by"}


def test_the_sdk_tool_call_object_is_accepted():
    store, user = new_store(), uuid.uuid4()
    tool_call = ChatCompletionMessageToolCall.model_validate(update_call("summary", "replace", "Likes tea."))
    result = execute_tool_call(store, user, tool_call)
    assert result.written and store.head(user).document["summary"] == "Likes tea."


@pytest.mark.parametrize(
    "tool_call",
    [
        update_call("areas_to_improve", "append", {"topic": "x", "severity": 3}, call_id="call_a"),
        update_call("personal_info", "merge", {"name": "Bea"}, call_id="call_m"),
        forget_call("/areas_to_improve/0", call_id="call_f"),
    ],
)
def test_the_same_tool_call_id_again_writes_nothing(tool_call):
    # Given a tool call that was executed once
    store, user = new_store(), uuid.uuid4()
    store.append(user, tutor_doc(), expected_version=0, source="seed")
    first = execute_tool_call(store, user, tool_call, schema="tutor")
    inserts = store.recorder.inserts
    # When the same call (same id) is delivered again
    again = execute_tool_call(store, user, tool_call, schema="tutor")
    # Then nothing is written: the recorded version is returned (an append is not appended twice,
    # a forget does not remove the next item)
    assert (again.status, again.version) == (WriteStatus.IDEMPOTENT, first.version)
    assert store.recorder.inserts == inserts
    assert store.head(user).version == first.version
    assert json_equal(again.document, first.document)


def test_a_tool_call_that_changes_nothing_writes_nothing():
    store, user = new_store(), uuid.uuid4()
    store.append(user, tutor_doc(), expected_version=0, source="seed")
    result = execute_tool_call(store, user, update_call("personal_info", "merge", {"name": "Ada"}), schema="tutor")
    assert (result.status, result.version) == (WriteStatus.UNCHANGED, 1)
    assert store.head(user).document["last_updated_by"] == "system"


def test_forget_through_the_tool_leaves_the_section_out_of_the_rendered_memory():
    # Given a rendered memory that carries the areas to improve
    store, user = new_store(), uuid.uuid4()
    store.append(user, tutor_doc(), expected_version=0, source="seed")
    assert "Needs work:" in render_memory(store.head(user).document, 1000, schema="tutor")
    # When the model forgets the section
    result = execute_tool_call(store, user, forget_call("areas_to_improve"), schema="tutor")
    # Then the new version no longer renders it, and says who forgot it
    block = render_memory(store.head(user).document, 1000, schema="tutor")
    assert result.written and "Needs work:" not in block and "fractions" not in block
    assert "Name: Ada" in block
    assert store.head(user).source == "agent:forget_memory"


def test_the_first_tool_call_of_a_new_user_writes_version_one():
    store, user = new_store(), uuid.uuid4()
    result = execute_tool_call(store, user, update_call("safety_notes", "replace", "Allergic to nuts."))
    assert (result.version, result.written) == (1, True)
    assert validate_document(store.head(user).document) == store.head(user).document


class InterleavedStore(MemoryStore):
    """A store where another writer gets in before each of the first `times` appends."""

    def __init__(self, recorder: InMemoryRecorder, times: int) -> None:
        super().__init__(recorder)
        self.times = times
        self.appends = 0
        self.other = MemoryStore(recorder)

    def append(self, user_id: object, document: dict, **kw: Any) -> Any:
        self.appends += 1
        if self.appends <= self.times:
            head = self.other.head(user_id)
            edited = copy.deepcopy(head.document)
            edited["knowledge_strengths"].append(
                {"topic": f"other {self.appends}", "evidence": [], "level": "beginner"}
            )
            self.other.append(user_id, edited, expected_version=head.version, source="other writer")
        return super().append(user_id, document, **kw)


def test_a_concurrent_edit_between_read_and_write_is_kept():
    # Given another writer that writes between the tool call's head read and its write
    store, user = InterleavedStore(InMemoryRecorder(InMemoryActivity()), times=1), uuid.uuid4()
    store.other.append(user, tutor_doc(), expected_version=0, source="seed")
    # When the tool call runs
    result = execute_tool_call(store, user, update_call("personal_info", "merge", {"name": "Bea"}), schema="tutor")
    # Then its first write conflicted, it re-read and re-applied, and both edits are in the head
    assert store.appends == 2
    assert (result.status, result.version) == (WriteStatus.WRITTEN, 3)
    head = store.head(user)
    assert head.document["personal_info"]["name"] == "Bea"
    assert [s["topic"] for s in head.document["knowledge_strengths"]] == ["linear equations", "other 1"]
    assert [h.source for h in store.history(user)] == ["agent:update_memory", "other writer", "seed"]


def test_conflicts_beyond_the_retries_are_raised():
    store, user = InterleavedStore(InMemoryRecorder(InMemoryActivity()), times=99), uuid.uuid4()
    store.other.append(user, tutor_doc(), expected_version=0, source="seed")
    with pytest.raises(VersionConflict):
        execute_tool_call(store, user, update_call("personal_info", "merge", {"name": "Bea"}), schema="tutor")
    assert store.appends == MAX_CONFLICT_RETRIES + 1
    assert all(h.source != "agent:update_memory" for h in store.history(user))


SECRET = "s3cret-diagnosis"


@pytest.mark.parametrize(
    "tool_call, message",
    [
        ({"type": "function", "function": {"name": "update_memory", "arguments": "{}"}}, "has no id"),
        ({**call("update_memory", {}), "id": "x" * 300}, "id is over 256 characters"),
        ({**call("update_memory", {}), "type": "custom"}, "not a function call"),
        (call("delete_user", {"target": SECRET}), "unknown tool"),
        ({"id": "c", "function": {"name": "forget_memory", "arguments": {"target": SECRET}}}, "must be JSON text"),
        (call("forget_memory", f'{{"target": "{SECRET}"'), "forget_memory arguments is not valid JSON"),
        (call("forget_memory", [SECRET]), "must be a JSON object"),
        (call("forget_memory", {"target": SECRET, "why": SECRET}), "why: Extra inputs are not permitted"),
        (call("forget_memory", {"target": 5}), "target: Input should be a valid string"),
        (call("update_memory", {"section": "summary", "value_json": f'"{SECRET}"'}), "mode: Field required"),
        (
            call("update_memory", {"section": "summary", "mode": SECRET, "value_json": '"x"'}),
            "mode: Input should be 'merge', 'replace' or 'append'",
        ),
        (
            call("update_memory", {"section": "summary", "mode": "replace", "value_json": SECRET}),
            "value_json is not valid JSON",
        ),
        (
            call("update_memory", {"section": "summary", "mode": "replace", "value_json": '{"x": NaN}'}),
            "NaN is not JSON",
        ),
        (
            call("update_memory", {"section": "summary", "mode": "replace", "value_json": "[" * 100_000}),
            "nested too deeply",
        ),
    ],
)
def test_a_malformed_tool_call_is_a_typed_error_that_does_not_echo_values(tool_call, message):
    store, user = new_store(), uuid.uuid4()
    with pytest.raises(InvalidToolCall, match=re.escape(message)) as info:
        execute_tool_call(store, user, tool_call)
    assert SECRET not in str(info.value)
    # nothing chained that could hold the input
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__)
    assert isinstance(info.value, ValueError)
    assert store.head(user).version == 0


def test_an_invalid_update_through_the_tool_writes_nothing():
    store, user = new_store(), uuid.uuid4()
    store.append(user, tutor_doc(), expected_version=0, source="seed")
    bad = update_call("areas_to_improve", "append", {"topic": "x", "severity": 9})
    with pytest.raises(InvalidDocument, match=r"areas_to_improve\.3\.severity"):
        execute_tool_call(store, user, bad, schema="tutor")
    with pytest.raises(UnknownSection):
        execute_tool_call(store, user, update_call("mood", "replace", "x"), schema="tutor")
    assert store.head(user).version == 1


def test_parse_tool_call_reads_the_value_from_json_text():
    parsed = parse_tool_call(update_call("parts", "merge", {"critic": None}))
    assert (parsed.id, parsed.name, parsed.section, parsed.mode, parsed.value) == (
        "call_1",
        "update_memory",
        "parts",
        "merge",
        {"critic": None},
    )
    assert parse_tool_call(forget_call("/parts/critic")).target == "/parts/critic"

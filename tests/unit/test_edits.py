"""Edits: paths in the document's own terms -> RFC 6902, value shapes, per-edit guardrail, errors."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from user_memory.domain.memory.document import empty_document, validate_document
from user_memory.domain.memory.patching import apply_patch, json_equal
from user_memory.domain.model import Activity
from user_memory.domain.summary.edits import (
    MAX_REASON_CHARS,
    MemoryEdit,
    apply_edits,
    edit_from_json,
    edits_to_patch,
    every_error,
    forget_allows,
    parse_edits,
)
from user_memory.errors import InvalidDocument, InvalidEdits

U = uuid.uuid4()


def part(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "status": "active", "recency_score": 0.5, "influence_score": 0.5, "goals": [], **fields}


DOC = validate_document(
    {
        "last_updated_by": "rules",
        "summary": "Plans a lot.",
        "parts": {
            "planner": part("Planner", goals=[{"goal": "plan the week"}, {"goal": "rest on Sunday"}]),
            "critic": part("Critic"),
            "a/b": part("Slash"),
        },
        "triggers_and_goals": [
            {"trigger": "deadlines", "desired_outcome": "breathe", "related_parts": ["planner", "critic"]},
            {"trigger": "crowds", "desired_outcome": "leave early", "related_parts": []},
        ],
        "safety_notes": "No medical advice.",
    }
)


def act(kind: str, **payload: Any) -> Activity:
    return Activity(
        user_id=U,
        occurred_at=datetime(2026, 11, 21, tzinfo=UTC),
        kind=kind,
        payload=payload,
        source="t",
        external_id="1",
    )


def edit(op: str, path: str, value: Any = None, reason: str = "r") -> MemoryEdit:
    return MemoryEdit(op=op, path=path, value=value, reason=reason)  # type: ignore[arg-type]


def patch_of(*edits: MemoryEdit, document: Any = None) -> list[dict[str, Any]]:
    return edits_to_patch(DOC if document is None else document, list(edits))


# -- edits -> RFC 6902: every op, every path kind ---------------------------------------------------


@pytest.mark.parametrize(
    ("the_edit", "expected"),
    [
        pytest.param(
            edit("replace", "/summary", "Plans less."),
            [{"op": "replace", "path": "/summary", "value": "Plans less."}],
            id="replace-summary",
        ),
        pytest.param(
            edit("add", "/summary", "Plans less."),
            [{"op": "add", "path": "/summary", "value": "Plans less."}],
            id="add-summary-replaces-it",
        ),
        pytest.param(
            edit("remove", "/summary"),
            [{"op": "replace", "path": "/summary", "value": ""}],
            id="remove-summary-resets-it",
        ),
        pytest.param(
            edit("replace", "/safety_notes", "No medical or legal advice."),
            [{"op": "replace", "path": "/safety_notes", "value": "No medical or legal advice."}],
            id="replace-safety-notes",
        ),
        pytest.param(
            edit("add", "/parts/sleeper", {"name": "Sleeper", "status": "quiet"}),
            [
                {
                    "op": "add",
                    "path": "/parts/sleeper",
                    "value": {
                        "name": "Sleeper",
                        "status": "quiet",
                        "recency_score": 0.0,
                        "influence_score": 0.0,
                        "goals": [],
                    },
                }
            ],
            id="add-part-defaults-filled",
        ),
        pytest.param(
            edit("add", "/parts/sleeper", {"id": "sleeper", **part("Sleeper")}),
            [{"op": "add", "path": "/parts/sleeper", "value": part("Sleeper")}],
            id="add-part-in-the-llm-shape-drops-its-id",
        ),
        pytest.param(
            edit("replace", "/parts/critic", part("Inner critic", status="quiet")),
            [{"op": "replace", "path": "/parts/critic", "value": part("Inner critic", status="quiet")}],
            id="replace-part",
        ),
        pytest.param(
            edit("replace", "/parts/critic/status", "quiet"),
            [{"op": "replace", "path": "/parts/critic/status", "value": "quiet"}],
            id="replace-part-field",
        ),
        pytest.param(
            edit("replace", "/parts/critic/recency_score", 1),
            [{"op": "replace", "path": "/parts/critic/recency_score", "value": 1.0}],
            id="replace-score-as-a-float",
        ),
        pytest.param(
            edit("replace", "/parts/a~1b/name", "Slashed"),
            [{"op": "replace", "path": "/parts/a~1b/name", "value": "Slashed"}],
            id="escaped-part-id",
        ),
        pytest.param(
            edit("add", "/parts/planner/goals/-", {"goal": "call mum"}),
            [{"op": "add", "path": "/parts/planner/goals/-", "value": {"goal": "call mum"}}],
            id="append-goal",
        ),
        pytest.param(
            edit("add", "/parts/planner/goals/0", {"goal": "first"}),
            [{"op": "add", "path": "/parts/planner/goals/0", "value": {"goal": "first"}}],
            id="insert-goal",
        ),
        pytest.param(
            edit("replace", "/parts/planner/goals/1/goal", "rest on Saturday"),
            [{"op": "replace", "path": "/parts/planner/goals/1/goal", "value": "rest on Saturday"}],
            id="replace-goal-text",
        ),
        pytest.param(
            edit("remove", "/parts/planner/goals/0"),
            [{"op": "remove", "path": "/parts/planner/goals/0"}],
            id="remove-goal",
        ),
        pytest.param(
            edit("add", "/triggers_and_goals/-", {"trigger": "noise", "desired_outcome": "earplugs"}),
            [
                {
                    "op": "add",
                    "path": "/triggers_and_goals/-",
                    "value": {"trigger": "noise", "desired_outcome": "earplugs", "related_parts": []},
                }
            ],
            id="append-trigger",
        ),
        pytest.param(
            edit("replace", "/triggers_and_goals/1/desired_outcome", "stay home"),
            [{"op": "replace", "path": "/triggers_and_goals/1/desired_outcome", "value": "stay home"}],
            id="replace-trigger-field",
        ),
        pytest.param(
            edit("remove", "/triggers_and_goals/0"),
            [{"op": "remove", "path": "/triggers_and_goals/0"}],
            id="remove-trigger",
        ),
        pytest.param(
            edit("remove", "/parts/critic"),
            [
                {"op": "remove", "path": "/parts/critic"},
                {"op": "replace", "path": "/triggers_and_goals/0/related_parts", "value": ["planner"]},
            ],
            id="remove-part-also-clears-its-references",
        ),
    ],
)
def test_each_edit_becomes_rfc_6902_operations_that_reproduce_it(the_edit, expected):
    # Given the document, When one edit is translated
    patch = patch_of(the_edit)
    # Then it is exactly the expected operations
    assert patch == expected
    # And they apply to the document, change it, and give what applying the edit gives
    after = validate_document(apply_patch(DOC, patch))
    assert after != DOC
    assert after == apply_edits(DOC, [the_edit], [act("memory_reset")]).document


def test_edits_apply_in_order_like_one_json_patch():
    # Given edits where a later index refers to the list as the earlier edits left it
    edits = [
        edit("add", "/parts/planner/goals/-", {"goal": "third"}),
        edit("remove", "/parts/planner/goals/0"),
        edit("replace", "/parts/planner/goals/1/goal", "still third"),
        edit("add", "/parts/new", part("New")),
        edit("add", "/triggers_and_goals/-", {"trigger": "t", "desired_outcome": "o", "related_parts": ["new"]}),
    ]
    # When they are applied
    result = apply_edits(DOC, edits)
    # Then each saw the one before it, and the patch reproduces the result from the document
    assert result.document["parts"]["planner"]["goals"] == [{"goal": "rest on Sunday"}, {"goal": "still third"}]
    assert result.document["triggers_and_goals"][-1]["related_parts"] == ["new"]
    assert json_equal(validate_document(apply_patch(DOC, result.patch)), result.document)
    assert result.applied == tuple(edits) and result.refused == ()


def test_version_zero_is_edited_in_its_schemas_normal_form():
    # Given the empty document of version 0, When the summary is replaced and a part added
    result = apply_edits({}, [edit("replace", "/summary", "New user."), edit("add", "/parts/p", part("P"))])
    # Then the document is the schema's empty document with those two changes
    assert result.document == {**empty_document(), "summary": "New user.", "parts": {"p": part("P")}}


def test_the_input_document_is_never_modified():
    before = copy.deepcopy(DOC)
    apply_edits(DOC, [edit("remove", "/parts/planner/goals/0"), edit("replace", "/parts/critic/status", "x")])
    assert before == DOC


# -- bad paths and wrong shapes: collected, named ---------------------------------------------------


@pytest.mark.parametrize(
    ("the_edit", "message"),
    [
        pytest.param(edit("replace", "/nope", "x"), "the document has no field 'nope'", id="unknown-field"),
        pytest.param(edit("replace", "/parts/ghost", part("G")), "member 'ghost' does not exist", id="missing-part"),
        pytest.param(edit("remove", "/parts/ghost"), "member 'ghost' does not exist", id="remove-missing-part"),
        pytest.param(edit("replace", "/parts/ghost/status", "x"), "'ghost' does not exist", id="field-of-missing-part"),
        pytest.param(edit("replace", "/parts/critic/colour", "red"), "has no field 'colour'", id="unknown-part-field"),
        pytest.param(edit("replace", "/summary/x", "y"), "single value", id="inside-a-text"),
        pytest.param(edit("replace", "summary", "y"), "must be empty or start with '/'", id="not-a-pointer"),
        pytest.param(edit("replace", "", {}), "not the whole of it", id="whole-document"),
        pytest.param(edit("replace", "/version", 2), "maintained by the service", id="service-field"),
        pytest.param(edit("replace", "/last_updated_by", "me"), "maintained by the service", id="author-field"),
        pytest.param(edit("add", "/parts/-", part("X")), "keyed by id, not a list", id="parts-as-a-list"),
        pytest.param(
            edit("replace", "/triggers_and_goals/5", {"trigger": "t", "desired_outcome": "o"}),
            "out of range",
            id="trigger-index-out-of-range",
        ),
        pytest.param(edit("remove", "/parts/critic/name"), "required: replace it instead", id="remove-required-field"),
        pytest.param(edit("replace", "/summary", 5), "wrong shape", id="summary-not-text"),
        pytest.param(
            edit("add", "/parts/x", {"status": "active"}), "wrong shape: name: Field required", id="part-no-name"
        ),
        pytest.param(edit("replace", "/parts/critic/recency_score", 3), "less than or equal to 1", id="score-over-1"),
        pytest.param(edit("add", "/parts/planner/goals/-", "call mum"), "wrong shape", id="goal-as-text"),
        pytest.param(edit("add", "/parts/x", part("X", mood="sad")), "mood: Extra inputs", id="part-extra-field"),
        pytest.param(
            edit("add", "/triggers_and_goals/-", {"desired_outcome": "o"}),
            "trigger: Field required",
            id="trigger-shape",
        ),
        pytest.param(
            edit("add", "/parts/x", {"id": "y", **part("X")}), "id is not the one its path names", id="id-mismatch"
        ),
    ],
)
def test_a_bad_edit_is_an_error_that_names_it(the_edit, message):
    # When an edit whose path does not exist (or whose value has the wrong shape) is applied
    with pytest.raises(InvalidEdits) as info:
        apply_edits(DOC, [edit("replace", "/summary", "fine"), the_edit])
    # Then the error names the edit by number, op and path, and says why
    assert info.value.errors == [f"edit 2 ({the_edit.op} {the_edit.path}): {info.value.errors[0].split(': ', 1)[1]}"]
    assert message in info.value.errors[0]
    assert isinstance(info.value, InvalidDocument)  # the pipeline's retry-with-feedback error


def test_every_bad_edit_is_collected_in_one_error():
    edits = [
        edit("replace", "/parts/ghost/status", "x"),
        edit("replace", "/summary", "fine"),
        edit("replace", "/summary", 5),
        edit("add", "/nope", 1),
    ]
    with pytest.raises(InvalidEdits, match=r"^3 of 4 edits are invalid: edit 1 .*; edit 3 .*; edit 4 ") as info:
        apply_edits(DOC, edits)
    assert [e.split(" ", 2)[1] for e in info.value.errors] == ["1", "3", "4"]


def test_a_document_that_no_longer_validates_after_the_edits_is_an_error():
    # Given a trigger that names a part no edit creates
    edits = [edit("add", "/triggers_and_goals/-", {"trigger": "t", "desired_outcome": "o", "related_parts": ["x"]})]
    with pytest.raises(InvalidEdits, match="after the edits is invalid: .*unknown part 'x'"):
        apply_edits(DOC, edits)


def test_a_document_over_the_size_limit_after_the_edits_is_an_error():
    with pytest.raises(InvalidEdits, match="over the limit"):
        apply_edits(DOC, [edit("replace", "/summary", "x" * 5000)], max_bytes=2000)


# -- the guardrail, one edit at a time ---------------------------------------------------------------


def test_removing_a_part_without_a_forget_request_is_refused_and_the_rest_applies():
    edits = [edit("remove", "/parts/critic", reason="not mentioned"), edit("replace", "/summary", "Plans less.")]
    # When the activity holds no forget request
    result = apply_edits(DOC, edits, [act("session")])
    # Then the removal is refused with why, the other edit applied, the part and its references stay
    assert [r.edit for r in result.refused] == [edits[0]]
    assert "removes part 'critic'" in result.refused[0].why
    assert result.refused[0].describe() == {
        "op": "remove",
        "path": "/parts/critic",
        "reason": "not mentioned",
        "why": result.refused[0].why,
    }
    assert result.applied == (edits[1],)
    assert "critic" in result.document["parts"] and result.document["summary"] == "Plans less."
    assert result.document["triggers_and_goals"][0]["related_parts"] == ["planner", "critic"]


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(act("forget_part", part_id="critic"), id="forget-naming-the-part"),
        pytest.param(act("forget_request", part_id="critic"), id="request-naming-the-part"),
        pytest.param(act("memory_reset"), id="reset"),
    ],
)
def test_a_forget_request_for_the_part_lets_its_removal_apply(request_):
    result = apply_edits(DOC, [edit("remove", "/parts/critic")], [act("session"), request_])
    assert result.refused == () and "critic" not in result.document["parts"]
    # And the part's id left every related_parts with it
    assert result.document["triggers_and_goals"][0]["related_parts"] == ["planner"]


@pytest.mark.parametrize(
    "vague",
    [
        pytest.param(act("forget_request", text="forget the critic"), id="free-text"),
        pytest.param(act("forget_request"), id="no-payload"),
        pytest.param(act("forget_part", part_id=""), id="empty-part-id"),
        pytest.param(act("forget_part", part_id="   "), id="blank-part-id"),
        pytest.param(act("forget_part", part_id=None), id="null-part-id"),
        pytest.param(act("forget_part", part_id=["critic"]), id="list-part-id"),
        pytest.param(act("message", text="delete every part and the safety notes"), id="a-message"),
    ],
)
def test_a_request_that_names_no_part_lets_nothing_go(vague):
    # Given edits that remove every part and clear the safety notes, and a vague "request"
    wipe = [edit("remove", f"/parts/{p.replace('/', '~1')}") for p in DOC["parts"]] + [edit("remove", "/safety_notes")]
    # When they are applied
    result = apply_edits(DOC, wipe, [act("session"), vague])
    # Then each is refused, and the memory keeps its parts and its notes
    assert len(result.refused) == len(wipe) and result.applied == ()
    assert (
        set(result.document["parts"]) == set(DOC["parts"]) and result.document["safety_notes"] == "No medical advice."
    )


def test_a_forget_request_for_another_part_does_not_let_this_one_go():
    result = apply_edits(DOC, [edit("remove", "/parts/critic")], [act("forget_part", part_id="planner")])
    assert len(result.refused) == 1 and "critic" in result.document["parts"]


def test_replacing_all_parts_at_once_cannot_slip_a_removal_past_the_guardrail():
    result = apply_edits(DOC, [edit("replace", "/parts", {"planner": part("Planner")})], [act("session")])
    assert "removes part 'a/b', 'critic'" in result.refused[0].why
    assert set(result.document["parts"]) == {"planner", "critic", "a/b"}


@pytest.mark.parametrize(
    "clearing",
    [
        pytest.param(edit("replace", "/safety_notes", ""), id="replace-with-empty"),
        pytest.param(edit("replace", "/safety_notes", "   "), id="replace-with-blank"),
        pytest.param(edit("remove", "/safety_notes"), id="remove"),
    ],
)
def test_clearing_the_safety_notes_is_refused_unless_a_memory_reset_asks(clearing):
    # Without a request, with one for a single part, or with one that names nothing: refused, the notes stay
    for activity in ([act("session")], [act("forget_part", part_id="critic")], [act("forget_request")]):
        result = apply_edits(DOC, [clearing], activity)
        assert "clears the safety notes" in result.refused[0].why
        assert result.document["safety_notes"] == "No medical advice."
    # With a reset: applied
    result = apply_edits(DOC, [clearing], [act("memory_reset")])
    assert result.refused == () and result.document["safety_notes"].strip() == ""


def test_rewording_the_safety_notes_is_not_clearing_them():
    result = apply_edits(DOC, [edit("replace", "/safety_notes", "No medical advice; no diagnosis.")], [])
    assert result.refused == () and result.document["safety_notes"] == "No medical advice; no diagnosis."


def test_forget_allows_reads_the_part_id_from_the_payload():
    assert forget_allows([act("forget_part", part_id="x")], "x") is True
    assert forget_allows([act("forget_part", part_id="x")], "y") is False
    assert forget_allows([act("forget_part", part_id="x")]) is False  # the safety notes
    assert forget_allows([act("session", part_id="x")], "x") is False
    assert forget_allows([act("memory_reset")]) is True
    assert forget_allows([act("forget_request")]) is False  # names nothing, so covers nothing
    assert forget_allows([act("forget_request")], "x") is False
    assert forget_allows([act("forget_part", part_id="")], "") is False


# -- the author and the service's fields -------------------------------------------------------------


def test_the_model_is_recorded_as_the_author_only_when_an_edit_applied():
    applied = apply_edits(DOC, [edit("replace", "/summary", "new")], author="gpt-test")
    assert applied.document["last_updated_by"] == "gpt-test"
    assert applied.patch[-1] == {"op": "replace", "path": "/last_updated_by", "value": "gpt-test"}
    # Nothing applied (everything refused, or no edits): the document is as it was
    nothing = apply_edits(DOC, [edit("remove", "/parts/critic")], [], author="gpt-test")
    assert nothing.document == DOC and nothing.patch == []
    assert apply_edits(DOC, [], author="gpt-test").document == DOC


def test_other_schemas_are_edited_through_their_own_model():
    # Given a tutor document
    doc = validate_document({"personal_info": {"name": "Ana"}}, "tutor")
    edits = [
        edit("replace", "/personal_info/preferred_name", "Ani"),
        edit("add", "/areas_to_improve/-", {"topic": "fractions", "severity": 3, "first_noted": "2026-11-21"}),
        edit("add", "/personal_info/learning_goals/-", "pass the exam"),
    ]
    result = apply_edits(doc, edits, schema="tutor")
    assert result.document["personal_info"]["preferred_name"] == "Ani"
    assert result.document["areas_to_improve"][0]["severity"] == 3
    # And a value that breaks the type at its path is named
    with pytest.raises(InvalidEdits, match="severity"):
        apply_edits(doc, [edit("add", "/areas_to_improve/-", {"topic": "x", "severity": 9})], schema="tutor")
    with pytest.raises(InvalidEdits, match="YYYY-MM-DD"):
        apply_edits(
            doc,
            [edit("add", "/areas_to_improve/-", {"topic": "x", "severity": 1, "first_noted": "today"})],
            schema="tutor",
        )


# -- the model's answer -> edits ---------------------------------------------------------------------


def test_an_answer_parses_into_edits_with_values_from_their_json_text():
    edits = parse_edits(
        [
            {"op": "replace", "path": "/summary", "value_json": '"New."', "reason": "said so"},
            {"op": "remove", "path": "/parts/x", "value_json": "", "reason": "asked\nto forget  it"},
            {"op": "add", "path": "/parts/y/goals/-", "value_json": '{"goal": "g"}', "reason": "r"},
        ]
    )
    assert edits == (
        MemoryEdit(op="replace", path="/summary", value="New.", reason="said so"),
        MemoryEdit(op="remove", path="/parts/x", value=None, reason="asked to forget it"),
        MemoryEdit(op="add", path="/parts/y/goals/-", value={"goal": "g"}, reason="r"),
    )


def test_unreadable_items_of_an_answer_are_all_named():
    with pytest.raises(InvalidEdits) as info:
        parse_edits(
            [
                {"op": "replace", "path": "/summary", "value_json": "New.", "reason": ""},
                {"op": "add", "path": "/parts/x", "value_json": "", "reason": ""},
                {"op": "remove", "path": "/summary", "value_json": "ignored", "reason": ""},
                {"op": "move", "path": "/summary", "value_json": "1", "reason": ""},
            ]
        )
    assert [e.split(":")[0] for e in info.value.errors] == [
        "edit 1 (replace /summary)",
        "edit 2 (add /parts/x)",
        "edit 4 (move /summary)",
    ]
    assert "not JSON" in info.value.errors[0] and "written with its quotes" in info.value.errors[0]
    assert "needs value_json" in info.value.errors[1]


def test_a_reason_is_one_bounded_line():
    e = edit_from_json("replace", "/summary", '"x"', "a\n b\t c " + "y" * 1000)
    assert "\n" not in e.reason and len(e.reason) == MAX_REASON_CHARS and e.reason.startswith("a b c y")


# -- an answer's every error, whatever mix of unreadable and inapplicable edits it has ---------------------


class _ItemShape(BaseModel):
    """One item of an edit-mode answer, as the OpenAI adapter's strict schema has it."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["add", "replace", "remove"]
    path: str
    value_json: str
    reason: str


# Items whose validity does not depend on the others: (item, what is wrong with it or None).
ITEMS = [
    ({"op": "replace", "path": "/summary", "value_json": '"Plans less."', "reason": "r"}, None),
    ({"op": "replace", "path": "/parts/critic/status", "value_json": '"quiet"', "reason": "r"}, None),
    ({"op": "replace", "path": "/parts/ghost/status", "value_json": '"x"', "reason": "r"}, "does not exist"),
    ({"op": "add", "path": "/parts/p", "value_json": '{"status": 1}', "reason": "r"}, "wrong shape"),
    ({"op": "add", "path": "/summary", "value_json": "{not json", "reason": "r"}, "value_json is not JSON"),
    ({"op": "add", "path": "/summary", "value_json": "", "reason": "r"}, "needs value_json"),
    ({"op": "move", "path": "/summary", "value_json": "", "reason": "r"}, "does not match the schema"),
    ({"op": "add", "path": "/version", "value_json": "3", "reason": "r"}, "maintained by the service"),
]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(chosen=st.lists(st.sampled_from(range(len(ITEMS))), min_size=1, max_size=8))
def test_the_retry_names_every_bad_edit_of_any_answer_in_its_order(chosen):
    # Given an answer made of any mix of good edits, edits that do not parse, and edits that parse
    # but do not apply to the document
    items = [ITEMS[i][0] for i in chosen]
    wrong = [(n, ITEMS[i][1]) for n, i in enumerate(chosen, 1) if ITEMS[i][1] is not None]
    # When it is read and checked as the pipeline does before asking again
    try:
        edits = parse_edits(items, shape=_ItemShape)
        found: InvalidDocument | None = None
        edits_to_patch(DOC, edits)
    except InvalidDocument as err:
        found = every_error(err, DOC, "user_state")
    # Then exactly the bad edits are named, each with its own problem, in the answer's order
    if not wrong:
        assert found is None
        return
    assert isinstance(found, InvalidEdits) and found.numbers == [n for n, _ in wrong]
    for (n, why), text in zip(wrong, found.errors, strict=True):
        assert text.startswith(f"edit {n} (") and why in text, (n, why, text)
    assert str(found).startswith(f"{len(wrong)} of {len(items)} edits are invalid")

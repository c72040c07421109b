"""The default memory document schema: validation errors name the field; size limit."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from user_memory.domain.memory.document import (
    DocumentTooLarge,
    InvalidDocument,
    check_size,
    document_size,
    empty_document,
    register_schema,
    validate_document,
)


def valid_doc() -> dict:
    return {
        "version": 1,
        "last_updated_by": "summarizer",
        "summary": "Prefers short answers.",
        "parts": {
            "critic": {
                "name": "Inner critic",
                "status": "active",
                "recency_score": 0.8,
                "influence_score": 0.4,
                "goals": [{"goal": "be kinder"}],
            }
        },
        "triggers_and_goals": [{"trigger": "deadlines", "desired_outcome": "stay calm", "related_parts": ["critic"]}],
        "safety_notes": "",
    }


def test_valid_document_round_trips():
    doc = valid_doc()
    assert validate_document(doc) == doc


def test_empty_document_is_valid():
    assert validate_document(empty_document())["parts"] == {}


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["parts"]["critic"].update(recency_score=1.5), "parts.critic.recency_score"),
        (lambda d: d["parts"]["critic"].update(influence_score=-0.1), "parts.critic.influence_score"),
        (lambda d: d["parts"]["critic"].pop("name"), "parts.critic.name"),
        (lambda d: d.update(summary=5), "summary"),
        (lambda d: d.update(unexpected="x"), "unexpected"),
        (lambda d: d["triggers_and_goals"][0].update(related_parts=["ghost"]), "related_parts"),
        (lambda d: d["parts"]["critic"]["goals"].append({"goal": ""}), "parts.critic.goals.1.goal"),
    ],
)
def test_validation_errors_name_the_field(mutate, field):
    doc = valid_doc()
    mutate(doc)
    with pytest.raises(InvalidDocument, match=field.replace(".", r"\.")):
        validate_document(doc)


def test_unknown_related_part_is_named():
    doc = valid_doc()
    doc["triggers_and_goals"][0]["related_parts"] = ["ghost"]
    with pytest.raises(InvalidDocument, match="unknown part 'ghost'"):
        validate_document(doc)


def test_not_an_object_is_refused():
    with pytest.raises(InvalidDocument, match="JSON object"):
        validate_document([1, 2])


def test_size_limit_default_and_configurable():
    doc = valid_doc()
    doc["summary"] = "x" * (256 * 1024)
    with pytest.raises(DocumentTooLarge, match="over the limit of 262,144 bytes") as info:
        validate_document(doc)
    assert info.value.size > info.value.limit
    small = valid_doc()
    with pytest.raises(DocumentTooLarge):
        validate_document(small, max_bytes=100)


@pytest.mark.parametrize("text", ["plain ascii", "é", "naïve café ☃", "\U0001f600 \u2028", "\x00\x7f"])
def test_the_size_is_the_compact_json_in_utf8_bytes(text):
    # Given documents whose text is ASCII or not (ASCII is measured without being encoded)
    doc = {"summary": text, "n": [1, 2.5, True, None]}
    expected = len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    # Then the size is the bytes of the stored form, and the limit refuses one byte over it
    assert document_size(doc) == expected
    assert check_size(doc, expected) == expected
    with pytest.raises(DocumentTooLarge):
        check_size(doc, expected - 1)


def test_other_schemas_can_be_registered_by_name():
    class Notes(BaseModel):
        notes: list[str]

    register_schema("notes", Notes)
    assert validate_document({"notes": ["a"]}, "notes") == {"notes": ["a"]}
    with pytest.raises(InvalidDocument, match="notes"):
        validate_document({"notes": "a"}, "notes")
    with pytest.raises(InvalidDocument, match="unknown document schema"):
        validate_document({}, "missing")

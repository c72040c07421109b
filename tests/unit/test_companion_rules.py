"""The rule-based summarizer on the companion schema: structured activity folded into elements."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from user_memory.domain.memory.document import validate_document
from user_memory.domain.model import Activity
from user_memory.domain.summary.rules import RuleBasedSummarizer
from user_memory.errors import SummarizerUnsupported

USER = uuid.uuid4()
AT = datetime(2026, 11, 23, 9, 30, tzinfo=UTC)


def acts(*items: tuple[str, dict]) -> list[Activity]:
    return [
        Activity(user_id=USER, occurred_at=AT, kind=kind, payload=payload, source="app", external_id=f"e{i}")
        for i, (kind, payload) in enumerate(items)
    ]


def test_structured_activity_becomes_elements_and_state_and_the_result_validates():
    # Given a day of companion activity, one of it invalid and one kind the rules do not know
    day = acts(
        ("todo_added", {"text": "Renew passport", "due_date": "2026-12-01", "tags": ["travel"]}),
        ("goal_set", {"id": "g1", "title": "Run a half marathon", "target_date": "2027-03-01"}),
        ("todo_added", {"id": "t2", "text": "Buy running shoes", "goal_id": "g1"}),
        ("goal_progress", {"id": "g1", "note": "ran 10k", "percent": 40}),
        ("event_added", {"id": "e1", "summary": "Dentist", "start": "2026-11-25T09:00:00Z"}),
        ("todo_added", {"text": "never valid", "due_date": "tomorrow"}),
        ("todo_done", {"id": "t2"}),
        ("mood", {"mood": "tired but hopeful"}),
        ("win", {"text": "finished the report"}),
        ("preference", {"area": "food", "value": "vegan"}),
        ("conversation_memory", {"memory": {"learned": ["likes trains"]}}),
    )
    # When the rule-based summarizer for the companion schema folds it into an empty memory
    result = RuleBasedSummarizer("companion").summarize({}, day)
    doc = validate_document(result.document, "companion")
    # Then each understood activity is an element or a state field, the invalid to-do is left out
    assert sorted(doc["todos"]) == ["app:e0", "t2"]
    assert doc["todos"]["app:e0"]["tags"] == ["travel"]
    assert doc["todos"]["t2"]["goal_id"] == "g1" and doc["todos"]["t2"]["status"] == "done"
    assert doc["goals"]["g1"]["progress"] == [{"at": "2026-11-23T09:30:00Z", "note": "ran 10k", "percent": 40}]
    assert doc["events"]["e1"]["start"] == "2026-11-25T09:00:00Z"
    assert doc["current_state"]["mood"] == "tired but hopeful"
    assert doc["current_state"]["recent_wins"] == ["finished the report"]
    assert doc["advanced_info"]["preferences"] == {"food": ["vegan"]}
    assert doc["last_updated_by"] == "rules"


def test_a_repeat_changes_nothing_and_unknown_kinds_leave_the_document_as_it_was():
    # Given a memory that already holds the to-do
    first = RuleBasedSummarizer("companion").summarize({}, acts(("todo_added", {"id": "t1", "text": "Call mum"})))
    # When the same activity and an unknown kind come again
    again = RuleBasedSummarizer("companion").summarize(
        first.document, acts(("todo_added", {"id": "t1", "text": "Call mum"}), ("session", {}))
    )
    # Then the document is unchanged
    assert again.document == first.document


def test_a_schema_without_rules_is_refused_rather_than_answered_unchanged():
    # Given a tutor memory, a schema the rules know nothing of
    tutor = {"personal_info": {"name": "Amira"}}
    # When the rules are asked to summarize activity for it
    # Then they refuse (an unchanged answer would mark the activity summarized unread)
    with pytest.raises(SummarizerUnsupported, match="DOCUMENT_SCHEMA=tutor"):
        RuleBasedSummarizer("tutor").summarize(tutor, acts(("session", {})))


@pytest.mark.parametrize("kind", ["win", "loss", "pain_point", "focus_area", "skill"])
def test_a_new_entry_of_a_state_list_counts_as_folded_and_stamps_the_state(kind):
    # Given a companion memory, and a day with one new entry of a current-state list
    start = validate_document({}, "companion")
    payload = {"skill": "Knitting"} if kind == "skill" else {"text": "finished the report"}
    # When the rule-based summarizer folds it in
    doc = RuleBasedSummarizer("companion").summarize(start, acts((kind, payload))).document
    # Then the fold says so: the state's time and the document's stamp are set, as for any other fold
    assert doc["current_state"]["last_updated"] == "2026-11-23T09:30:00Z"
    assert doc["last_updated_by"] == "rules"

"""Items of a memory document (domain/companion/items.py): what search and the companion's queries read.

Every schema's items (user_state parts, tutor list entries, companion elements with their typed
columns), the sensitive fields that never become items, text that does not depend on key order,
and `item_changes`: which rows a version's patch writes.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from user_memory.domain.companion.items import Item, document_items, item_changes, touched_sections
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.patching import make_patch

PLUS_TWO = timezone(timedelta(hours=2))
MINUS_FIVE = timezone(timedelta(hours=-5))

SENSITIVE_VALUES = ("1990-04-01", "owner@example.com", "+1 555 0100", "guide@example.org", "host@example.net")


def companion() -> dict[str, Any]:
    """A companion document with every element kind and every sensitive field filled."""
    return validate_document(
        {
            "basic_info": {
                "name": "Sam",
                "date_of_birth": "1990-04-01",
                "email": "owner@example.com",
                "phone": "+1 555 0100",
                "timezone": "Europe/Lisbon",
            },
            "advanced_info": {
                "occupation": "nurse",
                "preferences": {"food": ["ramen", "figs"]},
                "other_attributes": {"email": "host@example.net", "pet": "a cat"},
            },
            "goals": {
                "run": {
                    "id": "run",
                    "title": "Run a marathon",
                    "description": "Build up to 42 km",
                    "category": "health",
                    "target_date": "2026-10-01",
                    "progress": [{"at": "2026-02-01", "note": "first 10 km", "percent": 25}],
                },
            },
            "todos": {
                "shoes": {"id": "shoes", "text": "Buy running shoes", "due_date": "2026-03-05", "tags": ["run"]},
                "clinic": {
                    "id": "clinic",
                    "text": "Call the clinic",
                    "due_date": "2026-03-05T09:30:00+02:00",
                    "status": "in_progress",
                    "goal_id": "run",
                    "notes": "ask about the knee",
                },
            },
            "events": {
                "standup": {
                    "id": "standup",
                    "summary": "Team standup",
                    "description": "Daily sync",
                    "location": "Room 4",
                    "start": "2026-03-02T09:00:00-05:00",
                    "end": "2026-03-02T09:15:00-05:00",
                    "attendees": [
                        {"name": "Guide", "email": "guide@example.org", "response_status": "accepted"},
                        {"name": "Host", "email": "host@example.net", "response_status": "tentative"},
                    ],
                    "recurrence": ["RRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=3"],
                },
                "dentist": {"id": "dentist", "summary": "Dentist", "start": "2026-03-10T15:00:00Z"},
            },
            "current_state": {"mood": "calm", "skills": ["triage"]},
            "feedback": {"positives": ["short answers"], "ratings_count": 1, "average_rating": 5},
        },
        "companion",
    )


def event_item(**event: Any) -> Item:
    doc = validate_document({"events": {"e": {"id": "e", "summary": "Class", **event}}}, "companion")
    return document_items(doc)["/events/e"]


# -- items of each schema -----------------------------------------------------------------------------


def test_user_state_parts_are_elements_and_other_strings_are_leaves():
    # Given a user_state document with a part, a trigger and a summary
    doc = validate_document(
        {
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
            "triggers_and_goals": [
                {"trigger": "deadlines", "desired_outcome": "stay calm", "related_parts": ["critic"]}
            ],
            "safety_notes": "",
        }
    )
    # When its items are taken
    items = document_items(doc)
    # Then the part is one element, the trigger one list entry, the summary one leaf; the empty
    # safety notes and the bookkeeping (version, last_updated_by, scores) are no items
    assert {p: (i.kind, i.text, i.status) for p, i in items.items()} == {
        "/summary": ("leaf", "summary: Prefers short answers.", None),
        "/parts/critic": ("part", "part: Inner critic · be kinder", "active"),
        "/triggers_and_goals/0": ("entry", "entry: stay calm · critic · deadlines", None),
    }
    # And the part's value leaves its bookkeeping out (a score that moves is no reason to rewrite it)
    assert items["/parts/critic"].value == {
        "name": "Inner critic",
        "status": "active",
        "goals": [{"goal": "be kinder"}],
    }


def test_tutor_list_entries_are_entries_at_their_index():
    # Given a tutor document with two areas to improve and one strength
    doc = validate_document(
        {
            "personal_info": {"name": "Kim", "learning_goals": ["algebra"], "other": {"school": "North"}},
            "areas_to_improve": [
                {"topic": "fractions", "evidence": ["quiz 3"], "severity": 3, "first_noted": "2026-01-02"},
                {"topic": "decimals", "severity": 2},
            ],
            "knowledge_strengths": [{"topic": "geometry", "level": "advanced"}],
        },
        "tutor",
    )
    # When its items are taken
    items = document_items(doc)
    # Then each list object is an 'entry' at its index (severity and dates are not words), and
    # strings are leaves labelled by their key
    assert {p: (i.kind, i.text) for p, i in items.items()} == {
        "/personal_info/name": ("leaf", "name: Kim"),
        "/personal_info/learning_goals/0": ("leaf", "learning goals: algebra"),
        "/personal_info/other/school": ("leaf", "school: North"),
        "/areas_to_improve/0": ("entry", "entry: quiz 3 · fractions"),
        "/areas_to_improve/1": ("entry", "entry: decimals"),
        "/knowledge_strengths/0": ("entry", "entry: advanced · geometry"),
    }
    assert items["/areas_to_improve/1"].value == {
        "topic": "decimals",
        "evidence": [],
        "first_noted": None,
        "last_noted": None,
        "severity": 2,
    }


def test_companion_elements_have_their_words_and_typed_columns():
    # Given a companion document
    doc = companion()
    # When its items are taken
    items = document_items(doc)
    # Then every element is one item at /<collection>/<id>, each leaf of the other sections one
    assert list(items) == [
        "/basic_info/name",
        "/basic_info/timezone",
        "/advanced_info/occupation",
        "/advanced_info/preferences/food/0",
        "/advanced_info/preferences/food/1",
        "/advanced_info/other_attributes/pet",
        "/goals/run",
        "/todos/shoes",
        "/todos/clinic",
        "/events/standup",
        "/events/dentist",
        "/current_state/skills/0",
        "/current_state/mood",
        "/feedback/positives/0",
    ]
    # And the element texts are their words in a fixed order, without ids, dates or statuses
    assert items["/goals/run"].text == "goal: Run a marathon · Build up to 42 km · health · first 10 km"
    assert items["/todos/shoes"].text == "todo: Buy running shoes · run"
    assert items["/todos/clinic"].text == "todo: Call the clinic · ask about the knee"
    assert items["/events/standup"].text == "event: Team standup · Daily sync · Room 4 · Guide · Host"
    assert items["/advanced_info/occupation"].text == "occupation: nurse"
    # And the typed columns are filled for the queries
    goal = items["/goals/run"]
    assert (goal.kind, goal.status, goal.due_at) == ("goal", "active", datetime(2026, 10, 1, tzinfo=UTC))
    shoes = items["/todos/shoes"]
    assert (shoes.kind, shoes.status, shoes.due_at) == ("todo", "open", datetime(2026, 3, 5, tzinfo=UTC))
    assert shoes.starts_at is None and shoes.ends_at is None and shoes.recurring is False
    clinic = items["/todos/clinic"]
    assert clinic.status == "in_progress"
    assert clinic.due_at == datetime(2026, 3, 5, 7, 30, tzinfo=UTC)
    assert clinic.due_at.utcoffset() == timedelta(hours=2)
    dentist = items["/events/dentist"]
    assert (dentist.kind, dentist.status, dentist.due_at) == ("event", "confirmed", None)
    assert dentist.starts_at == dentist.ends_at == datetime(2026, 3, 10, 15, tzinfo=UTC)
    assert (dentist.recurring, dentist.recur_until) == (False, None)


def test_an_items_row_carries_timestamps_as_iso_text():
    # Given the to-do due at a date-time with an offset and the recurring event
    items = document_items(companion())
    # When they become rows for user_memory_append
    clinic, standup = items["/todos/clinic"].row(), items["/events/standup"].row()
    # Then every column is there, the timestamps in ISO 8601 with their offsets
    assert clinic == {
        "path": "/todos/clinic",
        "kind": "todo",
        "text": "todo: Call the clinic · ask about the knee",
        "value": companion()["todos"]["clinic"],
        "status": "in_progress",
        "due_at": "2026-03-05T09:30:00+02:00",
        "starts_at": None,
        "ends_at": None,
        "recurring": False,
        "recur_until": None,
    }
    assert (standup["starts_at"], standup["ends_at"], standup["recurring"], standup["recur_until"]) == (
        "2026-03-02T09:00:00-05:00",
        "2026-03-02T09:15:00-05:00",
        True,
        "2026-03-16T09:00:00-05:00",
    )


@pytest.mark.parametrize(
    "event, starts, ends, until",
    [
        pytest.param(
            {"start": "2026-03-02T09:00:00-05:00", "end": "2026-03-02T10:00:00-05:00", "recurrence": []},
            datetime(2026, 3, 2, 9, tzinfo=MINUS_FIVE),
            datetime(2026, 3, 2, 10, tzinfo=MINUS_FIVE),
            None,
            id="one-off",
        ),
        pytest.param(
            {"start": "2026-03-02T09:00:00+02:00", "recurrence": ["RRULE:FREQ=DAILY;COUNT=4"]},
            datetime(2026, 3, 2, 9, tzinfo=PLUS_TWO),
            datetime(2026, 3, 2, 9, tzinfo=PLUS_TWO),
            datetime(2026, 3, 5, 9, tzinfo=PLUS_TWO),
            id="count",
        ),
        pytest.param(
            {"start": "2026-03-02T09:00:00-05:00", "recurrence": ["RRULE:FREQ=WEEKLY;UNTIL=20260323T140000Z"]},
            datetime(2026, 3, 2, 9, tzinfo=MINUS_FIVE),
            datetime(2026, 3, 2, 9, tzinfo=MINUS_FIVE),
            datetime(2026, 3, 23, 9, tzinfo=MINUS_FIVE),
            id="until-utc",
        ),
        pytest.param(
            {"start": "2026-03-02", "end": "2026-03-03", "recurrence": ["RRULE:FREQ=WEEKLY;UNTIL=20260323"]},
            datetime(2026, 3, 2, tzinfo=UTC),
            datetime(2026, 3, 3, tzinfo=UTC),
            datetime(2026, 3, 23, tzinfo=UTC),
            id="all-day-until-date",
        ),
        pytest.param(
            {"start": "2026-03-02", "end": "2026-03-03", "recurrence": ["RRULE:FREQ=MONTHLY;COUNT=3"]},
            datetime(2026, 3, 2, tzinfo=UTC),
            datetime(2026, 3, 3, tzinfo=UTC),
            datetime(2026, 5, 2, tzinfo=UTC),
            id="all-day-count",
        ),
        pytest.param(
            {"start": "2026-03-02T09:00:00Z", "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=2", "RDATE:20260401T090000Z"]},
            datetime(2026, 3, 2, 9, tzinfo=UTC),
            datetime(2026, 3, 2, 9, tzinfo=UTC),
            datetime(2026, 4, 1, 9, tzinfo=UTC),
            id="rdate-after-the-rule",
        ),
        pytest.param(
            {"start": "2026-03-02T09:00:00Z", "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=3", "EXDATE:20260316T090000Z"]},
            datetime(2026, 3, 2, 9, tzinfo=UTC),
            datetime(2026, 3, 2, 9, tzinfo=UTC),
            datetime(2026, 3, 9, 9, tzinfo=UTC),
            id="exdate-of-the-last",
        ),
    ],
)
def test_an_events_start_end_and_last_occurrence(event, starts, ends, until):
    # Given an event, When its item is taken
    item = event_item(**event)
    # Then it starts and ends as written (no end: ends when it starts), and a rule with COUNT or
    # UNTIL gives the last occurrence's start
    assert (item.starts_at, item.ends_at) == (starts, ends)
    assert item.starts_at.utcoffset() == starts.utcoffset()
    assert item.recurring is bool(event["recurrence"])
    assert item.recur_until == until


@pytest.mark.parametrize(
    "recurrence",
    [
        pytest.param(["RRULE:FREQ=WEEKLY;BYDAY=MO"], id="weekly"),
        pytest.param(["RRULE:FREQ=DAILY;COUNT=3", "RRULE:FREQ=YEARLY"], id="one-rule-for-ever"),
        pytest.param(["RRULE:FREQ=WEEKLY", "EXDATE:20260309T140000Z"], id="with-exdate"),
    ],
)
def test_an_event_that_recurs_for_ever_has_no_recur_until(recurrence):
    # Given an event with a rule that has neither COUNT nor UNTIL
    item = event_item(start="2026-03-02T09:00:00-05:00", recurrence=recurrence)
    # Then it recurs, with no last occurrence
    assert (item.recurring, item.recur_until) == (True, None)


# -- sensitive fields -----------------------------------------------------------------------------


def test_sensitive_fields_are_never_item_text_or_item_paths():
    # Given a companion document whose date of birth, email, phone and attendee emails are filled
    doc = companion()
    # When its items and their rows are taken
    items = document_items(doc)
    rows = [item.row() for item in items.values()]
    # Then no text mentions any sensitive value, and no path names a sensitive field
    for row in rows:
        for secret in SENSITIVE_VALUES:
            assert secret not in row["text"], (row["path"], secret)
        for field in ("date_of_birth", "email", "phone", "response_status"):
            assert field not in row["path"]
    # And the only basic_info items are the name and the time zone
    assert [p for p in items if p.startswith("/basic_info")] == ["/basic_info/name", "/basic_info/timezone"]
    # And the first version's changes (what reaches the database) carry none of them either
    texts = " ".join(change["text"] for change in item_changes({}, doc, make_patch({}, doc)))
    assert not any(secret in texts for secret in SENSITIVE_VALUES)


def test_sensitive_fields_are_skipped_in_tutor_and_user_state_documents_too():
    # Given schema-less documents (the store takes any JSON object) with sensitive keys deep inside
    doc = {
        "summary": "likes tea",
        "contact": {"email": "owner@example.com", "phone": "+1 555 0100", "city": "Porto"},
        "people": [{"name": "Guide", "email": "guide@example.org"}],
        "date_of_birth": "1990-04-01",
    }
    # When its items are taken
    items = document_items(doc)
    # Then the sensitive keys are gone at every depth
    assert {p: i.text for p, i in items.items()} == {
        "/summary": "summary: likes tea",
        "/contact/city": "city: Porto",
        "/people/0": "entry: Guide",
    }


# -- text independent of key order -----------------------------------------------------------------


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@pytest.mark.parametrize("seed", range(5))
def test_an_elements_text_does_not_depend_on_its_key_order(seed):
    # Given the companion document, and the same document with every object's keys shuffled
    doc = companion()
    other = shuffled(doc, random.Random(seed))
    assert list(other["events"]["standup"]) != list(doc["events"]["standup"]) or seed  # shuffled indeed
    # When the items of both are taken
    mine, theirs = document_items(doc), document_items(other)
    # Then every item has the same text (and so the same embedding) and the same typed columns
    assert set(mine) == set(theirs)
    for path, item in mine.items():
        assert theirs[path].text == item.text, path
        assert theirs[path].row() == item.row(), path
    # And item_changes between the two writes nothing
    assert item_changes(doc, other, [{"op": "replace", "path": "", "value": other}]) == []


def test_an_entrys_text_does_not_depend_on_its_key_order():
    # Given the same list entry with its keys in two orders
    one = {"areas": [{"topic": "fractions", "evidence": ["quiz 3"], "note": "slow"}]}
    two = {"areas": [{"note": "slow", "evidence": ["quiz 3"], "topic": "fractions"}]}
    # Then its text is the same
    assert (
        document_items(one)["/areas/0"].text
        == document_items(two)["/areas/0"].text
        == ("entry: quiz 3 · slow · fractions")
    )


# -- item_changes -----------------------------------------------------------------------------------


def test_the_first_version_upserts_every_item():
    # Given a first version (from {})
    doc = companion()
    patch = make_patch({}, doc)
    # When its item changes are computed
    changes = item_changes({}, doc, patch)
    # Then every item of the document is upserted, in document order, and nothing is removed
    assert changes == [item.row() for item in document_items(doc).values()]
    assert len(changes) == 14
    assert not any(change.get("remove") for change in changes)


def test_a_patch_touching_one_todo_changes_exactly_that_row():
    # Given the document and a version that moves one to-do's due date
    old = companion()
    new = validate_document(old, "companion")
    new["todos"]["shoes"]["due_date"] = "2026-03-06T18:00:00Z"
    patch = make_patch(old, new)
    assert touched_sections(patch) == {"/todos/shoes"}
    # When the item changes are computed
    changes = item_changes(old, new, patch)
    # Then exactly that to-do's row is written, with its new due time (its text did not change)
    assert changes == [
        {
            "path": "/todos/shoes",
            "kind": "todo",
            "text": "todo: Buy running shoes · run",
            "value": new["todos"]["shoes"],
            "status": "open",
            "due_at": "2026-03-06T18:00:00+00:00",
            "starts_at": None,
            "ends_at": None,
            "recurring": False,
            "recur_until": None,
        }
    ]


def test_a_removed_element_is_a_remove_row():
    # Given a version that deletes one event
    old = companion()
    new = validate_document(old, "companion")
    del new["events"]["dentist"]
    # When the item changes are computed
    changes = item_changes(old, new, make_patch(old, new))
    # Then the event's row is removed, and nothing else is touched
    assert changes == [{"path": "/events/dentist", "remove": True}]


def test_an_unchanged_sibling_in_a_touched_section_is_not_rewritten():
    # Given a version that changes the occupation (advanced_info is walked as a whole section)
    old = companion()
    new = validate_document(old, "companion")
    new["advanced_info"]["occupation"] = "midwife"
    new["advanced_info"]["preferences"]["food"].pop()
    patch = make_patch(old, new)
    assert touched_sections(patch) == {"/advanced_info"}
    # When the item changes are computed
    changes = item_changes(old, new, patch)
    # Then the changed leaf is upserted and the gone one removed; its unchanged siblings
    # (ramen, the pet) are not rewritten, so they keep their version
    assert changes == [
        {"path": "/advanced_info/preferences/food/1", "remove": True},
        {
            "path": "/advanced_info/occupation",
            "kind": "leaf",
            "text": "occupation: midwife",
            "value": "midwife",
            "status": None,
            "due_at": None,
            "starts_at": None,
            "ends_at": None,
            "recurring": False,
            "recur_until": None,
        },
    ]


def test_a_whole_document_replace_walks_everything():
    # Given a version written as one replace of the whole document, changing a to-do and an event
    # and dropping a goal link and the current state's mood
    old = companion()
    new = validate_document(old, "companion")
    new["todos"]["clinic"]["status"] = "done"
    new["events"]["standup"]["summary"] = "Team sync"
    new["current_state"]["mood"] = ""
    patch = [{"op": "replace", "path": "", "value": new}]
    assert touched_sections(patch) == set()
    # When the item changes are computed
    changes = item_changes(old, new, patch)
    # Then every section was compared: the mood's leaf is removed, both elements upserted, and
    # nothing that did not change is rewritten
    assert [(c["path"], c.get("remove", False)) for c in changes] == [
        ("/current_state/mood", True),
        ("/todos/clinic", False),
        ("/events/standup", False),
    ]
    by_path = {c["path"]: c for c in changes}
    assert by_path["/todos/clinic"]["status"] == "done"
    assert by_path["/events/standup"]["text"] == "event: Team sync · Daily sync · Room 4 · Guide · Host"


def test_a_patch_naming_one_element_does_not_see_changes_elsewhere():
    # Given a (wrong) patch that names one to-do, over documents that also differ in an event
    old = companion()
    new = validate_document(old, "companion")
    new["todos"]["shoes"]["text"] = "Buy trail shoes"
    new["events"]["dentist"]["summary"] = "Orthodontist"
    # When the item changes are computed for that patch
    changes = item_changes(old, new, [{"op": "replace", "path": "/todos/shoes/text", "value": "Buy trail shoes"}])
    # Then only the named section is walked (which is why the service passes the real patch)
    assert [c["path"] for c in changes] == ["/todos/shoes"]
    assert changes[0]["text"] == "todo: Buy trail shoes · run"


def test_an_item_whose_pointer_is_too_long_for_the_index_is_left_out():
    # Given a document with a key of 1,200 characters (and one of 300 four-byte characters)
    doc = {"summary": "short", "parts": {"p" * 1200: {"name": "Long"}, "\U0001f600" * 300: {"name": "Wide"}}}
    # When its items are listed
    found = document_items(doc)
    # Then only the item whose pointer fits is there (the version can still be written)
    assert sorted(found) == ["/summary"]


def test_schema_free_documents_keep_the_index_in_step():
    # Given schema-free documents: a list where an element map usually is, and a null element
    old = {"todos": ["call", "write"], "parts": {"a": {"name": "A"}}}
    new = {"todos": ["call", "write", "read"], "parts": {"a": {"name": "A"}, "b": None}}
    patch = make_patch(old, new)
    # When the changes are computed, then applying them to the old items gives exactly the new items
    rows = {path: item.row() for path, item in document_items(old).items()}
    for change in item_changes(old, new, patch):
        if change.get("remove"):
            rows.pop(change["path"])
        else:
            rows[change["path"]] = change
    assert rows == {path: item.row() for path, item in document_items(new).items()}
    assert "/todos/2" in rows and "/parts/b" not in rows


def test_a_version_that_only_moves_scores_changes_no_item():
    # Given a user_state document with a part, and a version that only decays its scores
    old = {"parts": {"critic": {"name": "Inner critic", "recency_score": 0.8, "influence_score": 0.4, "goals": []}}}
    new = {"parts": {"critic": {"name": "Inner critic", "recency_score": 0.72, "influence_score": 0.36, "goals": []}}}
    patch = make_patch(old, new)
    # When its item changes are taken, Then there are none: the part's row stays as it is
    assert patch and item_changes(old, new, patch) == []

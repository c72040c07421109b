"""A person's edits and the day's activity in one nightly run (domain/summary/facts.py, step 4), over
generated edits, answers and activity times: what a person wrote is the elements they wrote, never
the whole collection; a conflict on one element goes to the later side."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.config import WorkerSettings
from user_memory.domain.companion import elements
from user_memory.domain.memory.document import empty_document, validate_document
from user_memory.domain.memory.patching import copy_json
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, Window
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.facts import HumanEdit, changed_fields, human_edits, keep_human_edits
from user_memory.domain.summary.pipeline import people_edits, refresh_user
from user_memory.domain.summary.rules import RuleBasedSummarizer

IDS = ["a", "b", "c", "d"]
# Per collection: the element's text field, the activity that adds one, the one that changes one.
COLLECTIONS = {"todos": ("text", "todo_added", "todo_done"), "goals": ("title", "goal_set", "goal_progress")}


class World:
    """An in-memory store and activity with the companion schema."""

    def __init__(self) -> None:
        self.activity = InMemoryActivity()
        self.store = MemoryStore(InMemoryRecorder(self.activity))
        self.cfg = WorkerSettings(document_schema="companion").pipeline()
        self.user = uuid.uuid4()
        self.n = 0

    def write(self, change: Any, source: str) -> tuple[dict[str, Any], dict[str, Any], datetime | None]:
        """`change` of the head as the next version: the documents before and after, and its time."""
        head = self.store.head(self.user)
        after = validate_document(change(head.document or empty_document("companion")), "companion")
        result = self.store.append(self.user, after, expected_version=head.version, source=source)
        written = self.store.head(self.user)
        at = written.created_at if written.version == result.version and written.version > head.version else None
        return head.document, written.document, at

    def add(self, kind: str, payload: dict[str, Any], at: datetime) -> None:
        self.n += 1
        self.activity.record(
            [
                Activity(
                    user_id=self.user, occurred_at=at, kind=kind, payload=payload, source="app", external_id=str(self.n)
                )
            ]
        )

    def run(self, summarizer: Any, around: datetime) -> Any:
        window = Window(start=around - timedelta(days=1), end=around + timedelta(days=1))
        return refresh_user(
            self.user,
            window,
            "daily:test",
            store=self.store,
            activity=self.activity,
            summarizer=summarizer,
            cfg=self.cfg,
        )


class FoldThenModel:
    """The rule-based fold of the day's activity, then a model's own edits of some elements (changed,
    removed, added): what an LLM's answer may hold beside what the activity asks."""

    name = "fold-then-model"

    def __init__(self, collection: str, model_edits: list[tuple[str, str, str]]) -> None:
        self.collection = collection
        self.model_edits = model_edits

    def summarize(self, document, activities, *, feedback=None, timeout=None) -> SummaryResult:  # type: ignore[no-untyped-def]
        doc = RuleBasedSummarizer("companion").summarize(document, activities).document
        field = COLLECTIONS[self.collection][0]
        items = doc[self.collection]
        for op, element_id, text in self.model_edits:
            if op == "remove":
                items.pop(element_id, None)
            elif op == "set":
                items[element_id] = {**items.get(element_id, {"id": element_id}), field: text}
        return SummaryResult(document=validate_document(doc, "companion"), model="scripted")


person_ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "update", "delete", "complete"]), st.sampled_from(IDS), st.sampled_from("xyz")
    ),
    min_size=1,
    max_size=4,
)
activity_items = st.lists(  # a run without activity writes nothing
    st.tuples(st.sampled_from(["adds", "changes"]), st.sampled_from(IDS), st.sampled_from(["before", "after"])),
    min_size=1,
    max_size=4,
)
model_edit_items = st.lists(
    st.tuples(st.sampled_from(["remove", "set"]), st.sampled_from(IDS), st.sampled_from("mn")), max_size=3
)


def _person_change(collection: str, op: str, element_id: str, text: str) -> Any:
    field = COLLECTIONS[collection][0]

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        present = element_id in (doc.get(collection) or {})
        if op == "create" and not present:
            return elements.create(collection, {"id": element_id, field: f"mine {text}"})[1](doc)  # type: ignore[arg-type]
        if op == "update" and present:
            return elements.update(collection, element_id, {field: f"mine {text}"})(doc)  # type: ignore[arg-type]
        if op == "delete" and present:
            return elements.delete(collection, element_id)(doc)  # type: ignore[arg-type]
        if op == "complete" and present:
            return elements.complete(collection, element_id)(doc)  # type: ignore[arg-type]
        return copy_json(doc)

    return change


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    collection=st.sampled_from(sorted(COLLECTIONS)),
    seeded=st.sets(st.sampled_from(IDS), max_size=3),
    start_empty=st.booleans(),
    ops=person_ops,
    acts=activity_items,
    model=model_edit_items,
)
def test_what_a_person_wrote_survives_unless_later_activity_asks_and_the_answers_elements_stay(
    collection, seeded, start_empty, ops, acts, model
):
    field, adds, changes = COLLECTIONS[collection]
    w = World()
    # Given a memory (empty: the person's first write is its first version, the collection as one
    # value; else the service's version with some elements), then the person's edits through the API
    if not start_empty:
        base = {i: {"id": i, field: f"seed {i}"} for i in seeded}
        w.write(lambda d: {**copy_json(d), collection: base}, "seed")
    mine: set[str] = set()
    times: list[datetime] = []
    for op, element_id, text in ops:
        before, after, at = w.write(_person_change(collection, op, element_id, text), "api")
        if at is not None:
            times.append(at)
            mine |= {i for i in IDS if (before.get(collection) or {}).get(i) != (after.get(collection) or {}).get(i)}
    assume(times)  # an edit of the person's was written
    head = w.store.head(w.user).document
    # And the day's activity about some elements, each before every edit of the person's or after them all
    later_ids: set[str] = set()
    for kind, element_id, when in acts:
        at = min(times) - timedelta(minutes=5) if when == "before" else max(times) + timedelta(minutes=5)
        later_ids |= {element_id} if when == "after" else set()
        payload = {"id": element_id, field: f"activity {element_id}"} if kind == "adds" else {"id": element_id}
        w.add(adds if kind == "adds" else changes, payload, at)
    # And an answer that folds the activity in and holds a model's own edits besides
    summarizer = FoldThenModel(collection, model)
    answer = summarizer.summarize(
        copy_json(head), w.activity.unsummarized(w.user, before=max(times) + timedelta(days=1), after_id=0, limit=100)
    ).document
    # When the nightly run summarizes the day
    w.run(summarizer, max(times))
    result = w.store.head(w.user).document
    # Then every element the person wrote is as they left it, unless activity after their edit names it
    for i in IDS:
        want = answer[collection].get(i) if (i not in mine or i in later_ids) else head[collection].get(i)
        assert result[collection].get(i) == want, (i, sorted(mine), sorted(later_ids))
    # And nothing else changed: the other collections and sections are the answer's
    for key in result:
        if key not in (collection, "last_updated_by"):
            assert result[key] == answer[key], key


# -- the fields found -------------------------------------------------------------------------------


def test_a_version_compared_with_the_one_before_names_the_elements_it_added_changed_and_removed():
    before = validate_document(
        {"todos": {"a": {"id": "a", "text": "A"}, "b": {"id": "b", "text": "B"}, "c": {"id": "c", "text": "C"}}},
        "companion",
    )
    after = copy_json(before)
    after["todos"]["a"]["status"] = "done"
    del after["todos"]["b"]
    after["todos"]["d"] = validate_document({"todos": {"d": {"id": "d", "text": "D"}}}, "companion")["todos"]["d"]
    after["current_state"]["mood"] = "calm"
    assert changed_fields(before, after) == [
        (("todos", "a"), None),
        (("todos", "b"), None),
        (("todos", "d"), None),
        (("current_state", "mood"), None),
    ]


def test_a_list_is_compared_by_its_elements_identity_not_their_index():
    before = {"triggers_and_goals": [{"trigger": "x"}, {"trigger": "y"}, {"trigger": "z"}]}
    after = {"triggers_and_goals": [{"trigger": "y"}, {"trigger": "z", "desired_outcome": "calm"}, {"trigger": "w"}]}
    assert changed_fields(before, after) == [
        (("triggers_and_goals",), ("trigger", "x")),
        (("triggers_and_goals",), ("trigger", "z")),
        (("triggers_and_goals",), ("trigger", "w")),
    ]


@pytest.mark.parametrize("first_write", ["the whole collection", "the whole document"])
def test_the_first_write_of_a_collection_is_its_elements_not_the_collection(first_write):
    # Given a person's first write whose patch names the collection (or the document) as one value
    w = World()
    doc = validate_document({"todos": {"passport": {"id": "passport", "text": "Renew the passport"}}}, "companion")
    w.store.append(w.user, doc, expected_version=0, source="api")
    head = w.store.head(w.user)
    assert [c.paths for c in w.store.recent_changes(w.user, limit=50)][0]  # pointers at top-level fields
    # When the run looks for what the person wrote
    found = people_edits(w.store, w.user, head, w.cfg)
    # Then it is the to-do, not the to-dos
    assert ("/todos/passport", 1, "api") in [(e.path, e.version, e.source) for e in found]
    assert "/todos" not in [e.path for e in found]


def test_a_goal_set_after_a_persons_edit_does_not_let_the_answer_drop_another_goal_of_theirs():
    # Given a part whose goals a person wrote as a whole list
    old = validate_document({"parts": {"p": {"name": "P", "status": "a", "goals": [{"goal": "x"}, {"goal": "y"}]}}})
    at = datetime(2031, 1, 1, tzinfo=UTC)
    from user_memory.domain.model import VersionChange

    human = human_edits(
        [VersionChange(version=3, source="api", created_at=at, summary=False, paths=("/parts/p/goals",))],
        old,
        "user_state",
    )
    answer = copy_json(old)
    answer["parts"]["p"]["goals"] = [{"goal": "y"}, {"goal": "z"}]
    later = Activity(
        user_id=uuid.uuid4(),
        occurred_at=at + timedelta(minutes=1),
        kind="goal_set",
        payload={"part_id": "p", "goal": "z"},
        source="t",
        external_id="1",
        id=1,
    )
    # When the floor keeps what the person wrote, Then their goal x is back and the activity's z stays
    result = keep_human_edits(old, answer, [later], human, "user_state")
    assert result.document["parts"]["p"]["goals"] == [{"goal": "y"}, {"goal": "z"}, {"goal": "x"}]
    assert [k.path for k in result.kept] == ["/parts/p/goals/2"] and result.conflicts == ()


# -- the fields found by comparing are every difference, and nothing else ------------------------------

_texts = st.sampled_from(["", "p", "q"])
_sections = st.fixed_dictionaries({}, optional={"a": _texts, "b": st.lists(_texts, max_size=2)})
documents = st.fixed_dictionaries(
    {},
    optional={
        "summary": _texts,
        "todos": st.dictionaries(st.sampled_from(IDS), _texts.map(lambda t: {"text": t}), max_size=3).map(
            lambda d: {k: {"id": k, **v} for k, v in d.items()}
        ),
        "triggers": st.dictionaries(st.sampled_from(IDS), st.integers(0, 2), max_size=3).map(
            lambda d: [{"trigger": k, "v": v} for k, v in d.items()]
        ),
        "section": _sections,
    },
)


def _normal(value: Any) -> Any:
    """A document with each list of elements by identity in identity order (their order is not a
    field), and without empty objects and lists (an empty collection holds nothing anyone wrote: the
    schema fills it in)."""
    if isinstance(value, dict):
        return {k: n for k, v in value.items() if (n := _normal(v)) not in ({}, [])}
    if isinstance(value, list):
        items = [_normal(v) for v in value]
        if items and all(isinstance(x, dict) and "trigger" in x for x in items):
            return sorted(items, key=lambda x: x["trigger"])
        return items
    return value


@settings(max_examples=300, deadline=None)
@given(before=documents, after=documents)
def test_putting_back_every_field_found_by_comparing_two_documents_gives_the_second(before, after):
    # Given the fields found by comparing two documents, each as a person's edit
    at = datetime(2031, 1, 1, tzinfo=UTC)
    edits = [HumanEdit(tokens, 2, at, "api", element) for tokens, element in changed_fields(before, after)]
    # When each is put back into the first document as the second has it (no activity asks)
    result = copy_json(keep_human_edits(after, copy_json(before), [], edits, "tutor").document)
    before, after = copy_json(before), copy_json(after)
    # Then the result is the second document: every difference is a field, and nothing else changed;
    # but for a list whose elements have no identity (one field), which keeps every element the
    # person left and the answer's own besides
    mine, theirs, got = (d.get("section", {}).pop("b", []) for d in (after, before, result))
    assert set(mine) <= set(got) <= set(mine) | set(theirs)
    assert _normal(result) == _normal(after)
    # And comparing a document with itself finds nothing
    assert changed_fields(after, copy_json(after)) == []

"""Undoing one run's version (domain/runs.py): the inverse of the run's change, and its conflicts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.domain.memory.patching import copy_json, json_equal, parse_pointer
from user_memory.domain.runs import changed_paths, inverse, overlaps, plan_undo, pointer

KEYS = st.sampled_from(["a", "b", "c", "x/y", "t~1"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "s", "t"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=4)


def nodes(doc: Any, at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every value's path in `doc` (the root's excluded), parents before children."""
    out: list[tuple[str, ...]] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.append((*at, key))
            out.extend(nodes(value, (*at, key)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.append((*at, str(i)))
            out.extend(nodes(value, (*at, str(i))))
    return out


def set_at(doc: dict[str, Any], tokens: list[str], value: Any, *, remove: bool = False) -> None:
    """Set (or remove, for an object's member) the value at `tokens`, in place."""
    parent: Any = doc
    for t in tokens[:-1]:
        parent = parent[int(t)] if isinstance(parent, list) else parent[t]
    last = tokens[-1]
    if isinstance(parent, list):
        parent[int(last)] = value
    elif remove:
        parent.pop(last, None)
    else:
        parent[last] = value


@st.composite
def mutated(
    draw: st.DrawFn, doc: dict[str, Any], avoid: list[str]
) -> tuple[dict[str, Any], list[tuple[list[str], Any, bool]]]:
    """`doc` with a few values set or removed at paths overlapping none of `avoid`; the changes made."""
    free = [list(t) for t in nodes(doc) if not any(overlaps(pointer(t), a) for a in avoid)]
    free += [[k] for k in ["a", "b", "c"] if k not in doc and not any(overlaps(f"/{k}", a) for a in avoid)]
    changes = []
    out = copy_json(doc)
    for tokens in draw(st.lists(st.sampled_from(free), max_size=3, unique_by=tuple)) if free else []:
        try:
            value, remove = draw(VALUES), draw(st.booleans())
            set_at(out, tokens, value, remove=remove)
        except (KeyError, IndexError, TypeError):  # an earlier change removed or replaced its parent
            continue
        changes.append((tokens, value, remove))
    return out, changes


@settings(max_examples=300)
@given(DOCUMENTS, DOCUMENTS)
def test_undoing_a_run_whose_version_is_the_head_gives_back_the_document_before_it(before, run):
    # Given a run that turned `before` into `run`, and nothing written after it
    # When its version is undone, reverted or inverted on the head
    reverted = plan_undo(before, run, run, head_is_run=True)
    inverted = plan_undo(before, run, run, head_is_run=False)
    # Then both give back `before`, without conflict
    assert reverted.kind == "revert" and json_equal(reverted.document, before)
    assert inverted.kind == "inverse" and inverted.conflicts == []
    assert json_equal(inverted.document, before)


@settings(max_examples=300)
@given(st.data(), DOCUMENTS, DOCUMENTS)
def test_later_changes_elsewhere_are_kept_and_the_runs_change_is_undone(data, before, run):
    # Given later versions that changed only values the run did not touch
    paths = changed_paths(before, run)
    head, changes = data.draw(mutated(run, paths))
    # When the run is undone on that head
    undo = plan_undo(before, run, head, head_is_run=False)
    # Then there is no conflict, and the result is `before` with the same later changes made
    expected = copy_json(before)
    for tokens, value, remove in changes:
        set_at(expected, tokens, value, remove=remove)
    assert undo.conflicts == [], (paths, changes)
    assert json_equal(undo.document, expected)


@settings(max_examples=300)
@given(st.data(), DOCUMENTS, DOCUMENTS)
def test_a_later_change_of_a_value_the_run_changed_is_a_conflict_naming_it(data, before, run):
    # Given later versions, one of which changed a value the run changed
    paths = changed_paths(before, run)
    if not paths or paths == [""]:
        return
    target = data.draw(st.sampled_from(paths))
    head = copy_json(run)
    tokens = parse_pointer(target)
    value = data.draw(VALUES.filter(lambda v: not _holds(run, tokens, v)))
    set_at(head, tokens, value)
    # When the run is undone on that head
    undo = plan_undo(before, run, head, head_is_run=False)
    # Then that user is left untouched and the conflict names that path, and only paths the
    # later change overlaps
    later = changed_paths(run, head)
    assert undo.kind == "conflict" and undo.document is None
    assert target in undo.conflicts
    assert undo.conflicts == [p for p in paths if any(overlaps(p, q) for q in later)]


def _holds(doc: Any, tokens: list[str], value: Any) -> bool:
    node = doc
    for t in tokens:
        if isinstance(node, dict) and t in node:
            node = node[t]
        elif isinstance(node, list) and t.isdigit() and int(t) < len(node):
            node = node[int(t)]
        else:
            return False
    return json_equal(node, value)


def test_an_edit_of_another_part_is_independent_and_one_of_the_same_goal_is_a_conflict():
    # Given a run that damaged part p1's goals, and a person who then renamed part p2
    before = {"summary": "s", "parts": {"p1": {"name": "one", "goals": [{"goal": "run"}]}, "p2": {"name": "two"}}}
    run = {"summary": "s", "parts": {"p1": {"name": "one", "goals": []}, "p2": {"name": "two"}}}
    head = copy_json(run)
    head["parts"]["p2"]["name"] = "second"
    # When the run is undone
    undo = plan_undo(before, run, head, head_is_run=False)
    # Then p1's goals come back and p2 keeps the person's name
    assert undo.kind == "inverse" and undo.paths == ["/parts/p1/goals"]
    assert undo.document == {
        "summary": "s",
        "parts": {"p1": {"name": "one", "goals": [{"goal": "run"}]}, "p2": {"name": "second"}},
    }
    # And when the person had written p1's goals instead, it is a conflict naming that path
    head = copy_json(run)
    head["parts"]["p1"]["goals"] = [{"goal": "mine"}]
    conflict = plan_undo(before, run, head, head_is_run=False)
    assert (conflict.kind, conflict.conflicts, conflict.document) == ("conflict", ["/parts/p1/goals"], None)


def test_the_inverse_of_a_removed_member_removes_what_the_run_added():
    # Given a run that added a field and removed another
    before, run = {"a": 1}, {"b": 2}
    # When inverted on a head that also has a later field
    assert inverse(before, changed_paths(before, run), {"b": 2, "c": 3}) == {"a": 1, "c": 3}


def test_revert_messages_parse_and_one_over_the_users_limit_is_refused_naming_it():
    import json
    import uuid

    import pytest
    from user_memory.domain.messages import MAX_USERS_PER_MESSAGE, RevertRun, RevertRunUsers, parse_message
    from user_memory.errors import InvalidMessage

    # Given the undo's two messages as the worker queue carries them
    revert_id = uuid.uuid4()
    fan_out = parse_message(json.dumps({"type": "revert_run", "revert_id": str(revert_id)}))
    users = [str(uuid.uuid4()) for _ in range(MAX_USERS_PER_MESSAGE + 1)]
    body = {"type": "revert_run_users", "revert_id": str(revert_id), "user_ids": users[:-1]}
    # Then both parse to their models
    assert fan_out == RevertRun(type="revert_run", revert_id=revert_id)
    assert isinstance(parse_message(json.dumps(body)), RevertRunUsers)
    # And one user too many, or a revert id that is no UUID, is refused naming the field
    with pytest.raises(InvalidMessage, match="user_ids"):
        parse_message(json.dumps({**body, "user_ids": users}))
    with pytest.raises(InvalidMessage, match="revert_id"):
        parse_message(json.dumps({"type": "revert_run", "revert_id": "nope"}))

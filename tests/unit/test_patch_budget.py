"""The appliers' running budget (issue 21): a patch's operations and pointers are checked at the
door, and the working document is held under twice the size limit while it applies, so that a
1 KB patch cannot double a document per operation. Memory and work are bounded, not time."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from user_memory.domain.memory import patching
from user_memory.domain.memory.agent import apply_update
from user_memory.domain.memory.document import document_size
from user_memory.domain.memory.patching import (
    MAX_OPERATIONS,
    PatchBudget,
    PatchError,
    apply_patch,
    json_equal,
)
from user_memory.domain.service import Edit
from user_memory.domain.summary.edits import MemoryEdit, apply_edits
from user_memory.errors import DocumentGrowsTooLarge, DocumentTooLarge, InvalidEdits, PatchOverBounds
from user_memory.http.problems import BUDGET_EXCEEDED, INVALID_INPUT, TOO_LARGE, kind_of

from tests.json_patch_suite import conformance_cases
from tests.unit.test_service import seeded, state_doc

LIMIT = 256 * 1024  # the default document limit
CEILING = 2 * LIMIT


def doubling_patch(copies: int = 22) -> list[dict[str, Any]]:
    """The finding: copies of the whole document ("") into new members, each doubling it."""
    return [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(copies)]


def test_copies_of_the_whole_document_stop_at_the_operation_that_crosses_the_ceiling():
    # Given a small memory document, and the 22 copies of the finding (958 bytes)
    doc = state_doc()
    assert len(json.dumps(doubling_patch())) < 1024
    size = document_size(doc)
    # When it is applied with the budget of a document limit of 256 KiB
    tracemalloc.start()
    try:
        with pytest.raises(DocumentGrowsTooLarge) as err:
            apply_patch(doc, doubling_patch(), budget=PatchBudget(CEILING))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Then it is refused at the first copy that would take it over the ceiling, before that copy
    # is made: the document doubles each time, so that is operation n with size * 2**(n+1) > CEILING
    crossing = next(n for n in range(22) if size * 2 ** (n + 1) > CEILING)
    assert str(err.value).startswith(f"operation {crossing}: ")
    assert err.value.limit == CEILING and err.value.size > CEILING
    # And it is the size error (413), and the memory it took stays within a few ceilings
    assert isinstance(err.value, DocumentTooLarge) and kind_of(err.value) is TOO_LARGE
    assert peak < 8 * CEILING, f"peak {peak:,} bytes"
    assert json_equal(doc, state_doc()), "the input was modified"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        pytest.param([{"op": "test", "path": "/no", "value": 1}] * 1001, "1,001 operations", id="1001-operations"),
        pytest.param([{"op": "add", "path": "/" + "é" * 1024, "value": 1}], "'path' is over the limits", id="bytes"),
        pytest.param([{"op": "copy", "from": "/a" * 101, "path": "/b"}], "'from' is over the limits", id="tokens"),
    ],
)
def test_a_patch_over_the_bounds_is_refused_at_the_door_with_a_422(patch, message):
    # Given a patch whose first operation would fail on its own (a test of a missing member)
    # When it is applied with a budget, Then the door refuses it first, typed, as a 422
    with pytest.raises(PatchOverBounds, match=message) as err:
        apply_patch({"a": 1}, patch, budget=PatchBudget(CEILING))
    assert kind_of(err.value) is INVALID_INPUT and kind_of(err.value) is not BUDGET_EXCEEDED


def test_the_bounds_at_the_door_are_the_databases():
    # Given exactly the maximum of operations and pointers at their maximum, Then they apply
    patch = [{"op": "add", "path": f"/{i}", "value": i} for i in range(MAX_OPERATIONS)]
    assert len(apply_patch({}, patch, budget=PatchBudget(CEILING))) == MAX_OPERATIONS
    deepest = {"op": "add", "path": "/a" * 99 + "/" + "é" * 500, "value": 1}
    patching.check_bounds([deepest])


def test_a_value_nested_deeper_than_can_be_measured_is_refused():
    # Given a value nested 300 levels deep (no body of the API is over 100), When it is added
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(PatchOverBounds, match="nested too deeply"):
        apply_patch({}, [{"op": "add", "path": "/a", "value": deep}], budget=PatchBudget(CEILING))


def chain(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"k": value}
    return value


def deepening_patch(steps: int = 12) -> list[dict[str, Any]]:
    """Adds of 90-level chains (within the API's nesting of bodies) and moves of each into the next
    one's tail: 90 levels deeper per step, a few hundred bytes each."""
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/a", "value": chain(90)}]
    for i in range(steps):
        source, target = ("/a", "/b") if i % 2 == 0 else ("/b", "/a")
        ops += [
            {"op": "add", "path": target, "value": chain(90)},
            {"op": "move", "from": source, "path": target + "/k" * 90},
        ]
    return ops


def test_moves_that_nest_the_document_deeper_and_deeper_are_refused():
    # Given 12 KB of adds and moves that would nest a document 1,100 levels deep (its size check
    # then failed with RecursionError: a 500)
    patch = deepening_patch()
    assert len(json.dumps(patch)) < 12 * 1024
    # When it is applied with a budget, Then the first move past the bound is refused, typed (422)
    with pytest.raises(PatchOverBounds, match=f"more than {patching.MAX_NESTING} levels deep") as err:
        apply_patch({}, patch, budget=PatchBudget(CEILING))
    assert kind_of(err.value) is INVALID_INPUT
    # And a few such steps, within the bound, apply
    assert apply_patch({}, deepening_patch(2), budget=PatchBudget(CEILING))


def test_a_trusted_patch_has_no_budget():
    # Given our own diff of a large rewrite (more operations than an end user may send)
    patch = [{"op": "add", "path": f"/{i}", "value": i} for i in range(MAX_OPERATIONS + 1)]
    # Then it applies without a budget (history rebuilds, verified diffs)
    assert len(apply_patch({}, patch)) == MAX_OPERATIONS + 1


def test_a_failed_patch_leaves_a_shared_budget_as_it_was():
    budget = PatchBudget(1000)
    apply_patch({"a": "x" * 100}, [{"op": "add", "path": "/b", "value": "y"}], budget=budget)
    size, operations = budget.size, budget.operations
    with pytest.raises(DocumentGrowsTooLarge):
        apply_patch({"a": "x" * 100}, doubling_patch(5), budget=budget)
    assert (budget.size, budget.operations) == (size, operations)


@pytest.mark.parametrize("case", conformance_cases())
def test_the_conformance_suite_applies_alike_with_a_budget(case):
    # Given a record of the public suite, When it applies with the API's budget
    try:
        got: Any = apply_patch(case["doc"], case["patch"], budget=PatchBudget(CEILING))
    except PatchError:
        got = PatchError
    # Then the budget changes nothing: it fails where the record says, else gives `expected`
    if "error" in case:
        assert got is PatchError
    else:
        assert got is not PatchError
        if "expected" in case:
            assert json_equal(got, case["expected"])


# -- the other appliers: merge patch, a tool's section update, a model's edits -----------------------


def test_a_merge_patch_over_the_ceiling_is_refused_before_it_is_merged():
    # Given a memory under a 2,000-byte limit
    world = seeded(max_document_bytes=2000)
    # When a merge patch would take it over twice that, Then it is refused by the budget (413), not
    # after the merged document was built
    with pytest.raises(DocumentGrowsTooLarge, match="over the limit of 4,000 bytes while it applies"):
        world.svc.apply_merge_patch({"summary": "x" * 4000}, Edit())
    assert world.versions() == [1]


def test_the_service_refuses_a_json_patch_over_the_bounds_before_reading_the_head():
    world = seeded()
    with pytest.raises(PatchOverBounds):
        world.svc.apply_json_patch([{"op": "remove", "path": "/summary"}] * 1001, Edit())
    assert world.versions() == [1]


def test_a_tools_section_update_over_the_ceiling_is_refused_before_it_is_built():
    with pytest.raises(DocumentGrowsTooLarge):
        apply_update(state_doc(), "summary", "replace", "x" * 5000, max_document_bytes=2000)


def test_a_models_edits_over_the_ceiling_name_the_edit_that_crosses_it():
    # Given edits that each add 1,500 bytes to a document limited to 2,000 (a ceiling of 4,000)
    edits = [MemoryEdit(op="replace", path="/summary", value="x" * 1500, reason="r")] * 3
    # Then the third is the one that crosses the ceiling, named as an edit error
    with pytest.raises(InvalidEdits, match="edit 3 .*over the limit of 4,000 bytes while it applies"):
        apply_edits(state_doc(), edits, max_bytes=2000)


def test_more_edits_than_a_patch_may_have_operations_are_refused_at_the_door():
    edits = [MemoryEdit(op="replace", path="/summary", value="x", reason="r")] * (MAX_OPERATIONS + 1)
    with pytest.raises(InvalidEdits, match="over the limit of 1,000"):
        apply_edits(state_doc(), edits)


# -- any chain of copies, moves and adds --------------------------------------------------------------

_SMALL_LIMIT = 1024
_keys = st.sampled_from(["a", "b", "c", "d"])
# Mostly members of the root (they always take an add or a copy), sometimes deeper
_member = _keys.map(lambda k: "/" + k)
_pointer = st.one_of(_member, _member, _member, st.lists(_keys, max_size=3).map(lambda t: "".join("/" + x for x in t)))
_source = st.one_of(st.sampled_from(["/a", "/b"]), _pointer)
_value = st.recursive(
    st.none() | st.integers(-9, 9) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=20,
)
_chain_op = st.one_of(
    st.builds(lambda p: {"op": "copy", "from": "", "path": p}, _member),  # the finding: the root, doubled
    st.builds(lambda f, p: {"op": "copy", "from": f, "path": p}, _source, _pointer),
    st.builds(lambda f, p: {"op": "move", "from": f, "path": p}, _source, _pointer),
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, _pointer, _value),
    st.builds(lambda p, v: {"op": "replace", "path": p, "value": v}, _pointer, _value),
    st.builds(lambda p: {"op": "copy", "from": "", "path": p + "/x"}, _pointer),  # the root, anywhere
)
# Operations that always apply to a document holding /a and /b: chains that grow until they stop
_growing_op = st.one_of(
    st.builds(lambda p: {"op": "copy", "from": "", "path": p}, st.sampled_from(["/c", "/d"])),
    st.builds(lambda f, p: {"op": "copy", "from": f, "path": p}, st.sampled_from(["/a", "/b"]), _member),
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, st.sampled_from(["/c", "/d"]), _value),
    st.just({"op": "move", "from": "/b", "path": "/b"}),
)


class CountingCopies:
    """copy_json, counting every value it copies (the work a patch does is mostly copies)."""

    def __init__(self) -> None:
        self.values = 0
        self.original = patching.copy_json

    def __call__(self, value: Any) -> Any:
        self.values += 1
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.fixed_dictionaries({"a": _value, "b": _value}),
    chain=st.lists(_chain_op, min_size=1, max_size=60) | st.lists(_growing_op, min_size=4, max_size=60),
    repeat=st.integers(1, 20),
)
def test_any_chain_of_copies_moves_and_adds_stays_within_the_budget(monkeypatch, doc, chain, repeat):
    # Given any document and a chain of copies (the root's too), moves, adds and replaces, repeated
    patch = (chain * repeat)[:MAX_OPERATIONS]
    budget = PatchBudget(2 * _SMALL_LIMIT)
    counting = CountingCopies()
    monkeypatch.setattr(patching, "copy_json", counting)
    tracemalloc.start()
    try:
        result: Any = apply_patch(doc, patch, budget=budget)
    except DocumentGrowsTooLarge as err:
        result = err
    except PatchError:
        result = None  # a pointer that names nothing: refused like any patch that does not apply
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        monkeypatch.undo()
    start = document_size(doc)
    event(
        "refused at the ceiling"
        if isinstance(result, DocumentGrowsTooLarge)
        else "applied"
        if result
        else "no such path"
    )
    # Then it applies within the ceiling, or is refused with the size error at the ceiling
    if isinstance(result, DocumentGrowsTooLarge):
        assert result.limit == 2 * _SMALL_LIMIT and result.size > result.limit
    elif result is not None:
        assert document_size(result) <= max(2 * _SMALL_LIMIT, start)
        assert budget.size is not None and budget.size >= document_size(result)  # an upper bound
        assert json_equal(result, apply_patch(doc, patch))  # and the budget changed nothing
    # And the work and the memory stay bounded by the ceiling, whatever the chain: every value
    # copied is at least one byte of the document it was copied from or into
    assert counting.values <= start + 2 * 2 * _SMALL_LIMIT + len(json.dumps(patch))
    assert peak < 64 * 2 * _SMALL_LIMIT + 64 * len(json.dumps(patch)), f"peak {peak:,} bytes"

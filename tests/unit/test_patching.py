"""make_patch / apply_patch: RFC 6902 conformance, exact JSON types, typed errors, round trips."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from user_memory.domain.memory import patching
from user_memory.domain.memory.patching import PatchError, apply_patch, json_equal, make_patch

from tests.json_patch_suite import CONFORMANCE, conformance_cases


def test_conformance_suite_is_present():
    # Given the public suite beside the project, Then it has its 112 records
    assert CONFORMANCE.is_dir(), f"conformance data not found at {CONFORMANCE}"
    total = sum(len(json.loads((CONFORMANCE / n).read_text())) for n in ("tests.json", "spec_tests.json"))
    assert total == 112


@pytest.mark.parametrize("case", conformance_cases())
def test_rfc6902_conformance(case):
    doc_before = copy.deepcopy(case["doc"])
    if "error" in case:
        with pytest.raises(PatchError):
            apply_patch(case["doc"], case["patch"])
    else:
        result = apply_patch(case["doc"], case["patch"])
        if "expected" in case:
            assert json_equal(result, case["expected"])
    assert json_equal(case["doc"], doc_before), "apply_patch must not modify its input"


@pytest.mark.parametrize(
    "doc, patch, message",
    [
        ({}, "not a list", "must be a list"),
        ({}, [1], "must be an object"),
        ({}, [{"op": "frobnicate", "path": "/a"}], "unknown op"),
        ({}, [{"op": "add", "value": 1}], "missing 'path'"),
        ({}, [{"op": "add", "path": "/a"}], "missing 'value'"),
        ({"a": 1}, [{"op": "move", "path": "/b"}], "missing 'from'"),
        ({}, [{"op": "add", "path": "a", "value": 1}], "start with '/'"),
        ({}, [{"op": "add", "path": 5, "value": 1}], "must be a string"),
        ({"a": [1]}, [{"op": "replace", "path": "/a/5", "value": 1}], "out of range"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/x"}], "not a valid array index"),
        ({"a": [1]}, [{"op": "add", "path": "/a/01", "value": 1}], "not a valid array index"),
        ({"a": 1}, [{"op": "add", "path": "/a/b", "value": 1}], "not a container"),
        ({"a": 1}, [{"op": "remove", "path": "/b"}], "does not exist"),
        ({"a": "x"}, [{"op": "replace", "path": "/a/b/c", "value": 1}], "cannot descend"),
        ({"a~": 1}, [{"op": "remove", "path": "/a~2"}], "invalid escape"),
        ({"a": {}}, [{"op": "move", "from": "/a", "path": "/a/b"}], "own child"),
        ({}, [{"op": "remove", "path": ""}], "whole document"),
        ({"a": True}, [{"op": "test", "path": "/a", "value": 1}], "test failed"),
    ],
)
def test_invalid_patches_raise_patch_error_with_a_clear_message(doc, patch, message):
    with pytest.raises(PatchError, match=message) as info:
        apply_patch(doc, patch)
    assert isinstance(info.value, ValueError)


def test_patch_error_leaves_input_untouched():
    doc = {"a": [1, 2], "b": {"c": 1}}
    before = copy.deepcopy(doc)
    with pytest.raises(PatchError):
        apply_patch(doc, [{"op": "remove", "path": "/a/0"}, {"op": "remove", "path": "/missing"}])
    assert doc == before


@pytest.mark.parametrize(
    "old, new",
    [
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ({"a": 0}, {"a": False}),
        ({"a": [1, 0, 1]}, {"a": [True, False, 1.0]}),
        ({"a": [{"x": 1}]}, {"a": [{"x": 1.0}]}),
        ({"a": [True]}, {"a": [1]}),
    ],
)
def test_make_patch_sees_type_changes(old, new):
    patch = make_patch(old, new)
    assert patch, "a type change is a change"
    assert json_equal(apply_patch(old, patch), new)


def test_json_equal_is_exact_about_types():
    assert json_equal({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "c"}]})
    assert not json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal([0], [False])
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})


def test_make_patch_falls_back_when_the_library_diff_is_wrong(monkeypatch):
    # Given a diff library that returns a patch which does not reproduce the target
    class WrongPatch:
        patch = [{"op": "replace", "path": "/a", "value": 999}]

    monkeypatch.setattr(patching.jsonpatch, "make_patch", lambda old, new: WrongPatch())
    old, new = {"a": 1, "b": {"c": [1, 2]}}, {"a": 2, "b": {"c": [1, 3]}, "d": "~/"}
    # When we diff
    patch = make_patch(old, new)
    # Then the result is still exact, and only the smallest enclosing values are replaced
    assert json_equal(apply_patch(old, patch), new)
    assert {"op": "replace", "path": "/b/c", "value": [1, 3]} in patch


def test_make_patch_of_equal_documents_is_empty():
    assert make_patch({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}) == []


# -- property-based round trips -----------------------------------------------------------

keys = st.text(alphabet=st.sampled_from(list("ab~/ é01-\u2603")), min_size=0, max_size=4)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 1.0, 0.0, -1, 2.5]),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=5),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(keys, children, max_size=5)),
    max_leaves=25,
)
documents = st.dictionaries(keys, json_values, max_size=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=documents, new=documents)
def test_round_trip_random_documents(old, new):
    old_copy = copy.deepcopy(old)
    patch = make_patch(old, new)
    assert json_equal(apply_patch(old, patch), new)
    assert json_equal(old, old_copy)


@settings(max_examples=300, deadline=None)
@given(old=documents, data=st.data())
def test_round_trip_small_edits(old, data):
    # Mostly-equal documents are the realistic case: a few keys change per version.
    new = copy.deepcopy(old)
    for key in data.draw(st.lists(keys, max_size=3)):
        new[key] = data.draw(json_values)
    if new and data.draw(st.booleans()):
        new.pop(data.draw(st.sampled_from(sorted(new))))
    patch = make_patch(old, new)
    assert json_equal(apply_patch(old, patch), new)
    assert json_equal(json.loads(json.dumps(patch)), patch)


def _defined_equal(a, b) -> bool:
    """json_equal's definition, written the plain way: same type, then members equal."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_defined_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_defined_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _retyped(value, at: int, seen: list[int]):
    """`value` with its `at`-th leaf turned into an equal value of another type (True -> 1 -> 1.0)."""
    if isinstance(value, dict):
        return {k: _retyped(v, at, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [_retyped(v, at, seen) for v in value]
    seen.append(1)
    if len(seen) - 1 != at:
        return value
    if isinstance(value, bool):
        return int(value)
    return float(value) if isinstance(value, int) else value


@settings(max_examples=400, deadline=None)
@given(a=json_values, data=st.data())
def test_json_equal_agrees_with_its_definition(a, data):
    # Given a value and another: a copy, a copy with one leaf of another type, or any value
    b = data.draw(
        st.one_of(
            st.just(copy.deepcopy(a)),
            st.integers(0, 25).map(lambda at: _retyped(a, at, [])),
            json_values,
        )
    )
    # Then json_equal says what its definition says, both ways round
    assert json_equal(a, b) == _defined_equal(a, b)
    assert json_equal(b, a) == _defined_equal(b, a)


_keys = st.sampled_from(["a", "b", "c", ""])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)
_pointer = st.lists(st.sampled_from(["a", "b", "c", "0", "1", "-"]), max_size=3).map(
    lambda t: "".join("/" + x for x in t)
)
_op = st.one_of(
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, _pointer, _json),
    st.builds(lambda p, v: {"op": "replace", "path": p, "value": v}, _pointer, _json),
    st.builds(lambda p: {"op": "remove", "path": p}, _pointer),
    st.builds(lambda f, p: {"op": "move", "from": f, "path": p}, _pointer, _pointer),
    st.builds(lambda f, p: {"op": "copy", "from": f, "path": p}, _pointer, _pointer),
)


@given(doc=_json, patch=st.lists(_op, max_size=5), share=st.booleans())
@settings(max_examples=400, deadline=None)
def test_applying_any_patch_never_changes_its_input(doc, patch, share):
    # Given any document and any patch (moves and copies to the root included), shared or not
    before = copy.deepcopy(doc)
    try:
        result = apply_patch(doc, patch, share=share)
    except PatchError:
        result = None
    # Then the input is untouched, and a shared result equals an independent one
    assert json_equal(doc, before)
    if result is not None:
        assert json_equal(result, apply_patch(before, patch))


@given(doc=_json, patch=st.lists(_op, max_size=5))
@settings(max_examples=400, deadline=None)
def test_the_default_result_shares_nothing_with_the_input(doc, patch):
    before = copy.deepcopy(doc)
    try:
        result = apply_patch(doc, patch)
    except PatchError:
        return
    # When every container of the result is emptied afterwards, Then the input is still untouched
    if isinstance(result, dict | list):
        for node in _containers(result):
            node.clear()
    assert json_equal(doc, before), "the result shares a container with the input"


def _containers(node):
    if isinstance(node, dict):
        yield from (c for v in list(node.values()) for c in _containers(v))
        yield node
    elif isinstance(node, list):
        yield from (c for v in list(node) for c in _containers(v))
        yield node


# -- what the database's applier takes (migrations/015) ----------------------------------------------


@pytest.mark.parametrize(
    ("patch", "kept"),
    [
        pytest.param([{"op": "add", "path": f"/{i}", "value": i} for i in range(1000)], True, id="1000-operations"),
        pytest.param([{"op": "add", "path": f"/{i}", "value": i} for i in range(1001)], False, id="1001-operations"),
        pytest.param([{"op": "add", "path": "/" + "é" * 1023, "value": 1}], True, id="2047-byte-pointer"),
        pytest.param([{"op": "add", "path": "/" + "é" * 1024, "value": 1}], False, id="2049-byte-pointer"),
        pytest.param([{"op": "move", "from": "/a" * 101, "path": "/b"}], False, id="101-token-from"),
        pytest.param([{"op": "remove", "path": "/a" * 100}], True, id="100-tokens"),
    ],
)
def test_a_patch_over_the_databases_bounds_is_stored_as_a_whole_document(patch, kept):
    document = {"new": ["document"]}
    stored = patching.storable_patch(patch, document)
    if kept:
        assert stored is patch
    else:
        assert stored == [{"op": "replace", "path": "", "value": document}]
        assert stored[0]["value"] is not document


def test_an_op_that_is_not_a_string_is_a_patch_error():
    with pytest.raises(PatchError, match="unknown op"):
        apply_patch({}, [{"op": ["add"], "path": "/a", "value": 1}])

"""What the console reads that is computed in Python: the document check's problems and the size
plot's points (bounded by points and by bytes measured)."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.adapters.memory import InMemoryRecorder
from user_memory.domain.memory.document import MAX_CHECK_PROBLEMS, document_problems, validate_document
from user_memory.domain.memory.repository import MemoryStore
from user_memory.errors import UserMemoryError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
SECTIONS = ["basic_info", "goals", "todos", "events", "current_state", "feedback", "advanced_info", "version"]


@settings(max_examples=200, deadline=None)
@given(
    document=st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=10), JSON, max_size=6),
    schema=st.sampled_from(["user_state", "tutor", "companion"]),
)
def test_the_check_agrees_with_the_write_and_names_fields_by_pointer(document, schema):
    # When any JSON object is checked
    problems = document_problems(document, schema, max_bytes=4096)
    # Then it is refused by the write exactly when the check finds problems
    try:
        validate_document(document, schema, max_bytes=4096)
        accepted = True
    except UserMemoryError:
        accepted = False
    assert accepted == (problems == [])
    # And each problem is a JSON Pointer and a reason, at most MAX_CHECK_PROBLEMS of them
    assert len(problems) <= MAX_CHECK_PROBLEMS
    assert all(path == "" or path.startswith("/") for path, _ in problems)


def test_the_check_never_quotes_values():
    secret = "my-password-1234"
    problems = document_problems({"basic_info": {"email": secret, "phone": secret}}, "companion")
    assert problems and secret not in json.dumps(problems)
    assert {p for p, _ in problems} == {"/basic_info/email", "/basic_info/phone"}


def test_sizes_are_each_versions_compact_json_newest_within_the_points():
    store = MemoryStore(InMemoryRecorder(), checkpoint_interval=7)
    user = uuid.uuid4()
    for n in range(30):
        store.append(user, {"s": "x" * n}, expected_version=n, source="api")
    found = store.sizes(user, points=10, byte_budget=10**6)
    assert [v for v, _, _ in found] == list(range(21, 31))
    assert [size for _, _, size in found] == [
        len(json.dumps({"s": "x" * (v - 1)}, separators=(",", ":"))) for v in range(21, 31)
    ]


@pytest.mark.parametrize(("budget", "expected"), [(10**6, 10), (88, 2), (1, 1)])
def test_sizes_measure_at_most_the_byte_budget(budget, expected):
    # Given versions of 44 bytes each: the budget bounds how many are measured
    store = MemoryStore(InMemoryRecorder())
    user = uuid.uuid4()
    for n in range(10):
        store.append(user, {"s": "x" * 30, "n": n}, expected_version=n, source="api")
    assert len(store.sizes(user, points=50, byte_budget=budget)) == expected
    assert store.sizes(uuid.uuid4(), points=50, byte_budget=budget) == []

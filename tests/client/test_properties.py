"""Properties of the client's pure parts, on generated input: the store's keys, its filters and
namespace matches (against LangGraph's own InMemoryStore functions), and error answers of any shape."""

from __future__ import annotations

import json
import random

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base import MatchCondition
from langgraph.store.memory import _compare_values, _does_match
from user_memory_client import Retries, errors
from user_memory_client.langgraph_store import _does_match as store_does_match
from user_memory_client.langgraph_store import _matches, decode_key, encode_key, encode_prefix

labels = st.text(min_size=1, max_size=12).filter(lambda s: "." not in s and "\x00" not in s)
namespaces = st.lists(labels, max_size=4).map(tuple)
keys = st.text(min_size=1, max_size=20)
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "b", ""])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner, max_size=3),
    max_leaves=8,
)
numbers = st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False)


@given(namespaces, keys)
def test_a_namespace_and_key_round_trip_and_hold_no_control_characters(labels_, key):
    encoded = encode_key(labels_, key)
    assert decode_key("u", encoded) == (("u", *labels_), key)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in encoded)


@given(namespaces, namespaces, keys)
def test_a_prefix_selects_exactly_the_namespaces_that_start_with_its_labels(prefix, namespace, key):
    selected = encode_key(namespace, key).startswith(encode_prefix(prefix) or "")
    assert selected == (namespace[: len(prefix)] == prefix)


@given(st.dictionaries(st.sampled_from("xyz"), values, max_size=3), st.sampled_from("xyz"), values)
def test_equality_filters_match_as_langgraphs_in_memory_store_does(item, field, wanted):
    assert _matches(item.get(field), wanted) == _compare_values(item.get(field), wanted)


@given(numbers, st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), numbers)
def test_operator_filters_match_as_langgraphs_in_memory_store_does(value, operator, operand):
    assert _matches(value, {operator: operand}) == _compare_values(value, {operator: operand})


@given(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(tuple),
    st.sampled_from(["prefix", "suffix"]),
    st.lists(st.sampled_from(["a", "b", "*"]), max_size=4).map(tuple),
)
def test_namespace_conditions_match_as_langgraphs_in_memory_store_does(namespace, kind, path):
    condition = MatchCondition(match_type=kind, path=path)
    assert store_does_match(condition, namespace) == _does_match(condition, namespace)


problem_bodies = st.binary(max_size=300) | st.fixed_dictionaries(
    {"type": st.text(max_size=60), "title": st.text(max_size=20), "status": st.integers(), "detail": st.text()}
).map(lambda d: json.dumps(d).encode())


@settings(max_examples=200)
@given(st.integers(100, 599), problem_bodies, st.sampled_from(["application/problem+json", "text/html"]))
def test_any_error_answer_becomes_a_typed_error(status, body, content_type):
    response = httpx.Response(status, content=body, headers={"content-type": content_type, "retry-after": "x"})
    err = errors.error_for(response)
    assert isinstance(err, errors.ApiError) and err.status == status and str(err)


@given(st.integers(1, 30), st.none() | st.floats(0, 100))
def test_a_wait_is_within_the_backoff_or_the_servers_retry_after(retry, retry_after):
    policy = Retries(backoff=0.2, max_backoff=5.0)
    wait = policy.wait(retry, retry_after, random.Random(retry))
    assert wait == retry_after if retry_after is not None else 0 <= wait <= min(5.0, 0.2 * 2 ** (retry - 1))

"""The Batch API mode's pure parts: the request digest, the output files' lines, the head a
collected answer is applied to, the collect_batch message and the mode's settings."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from user_memory.adapters.memory import InMemoryRecorder
from user_memory.adapters.openai_batch import batch_line, parse_output, request_sha256
from user_memory.config import WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.messages import CollectBatch, parse_message
from user_memory.errors import ConfigError, InvalidMessage
from user_memory.jobs.summary_batch import PinnedHeads

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_a_request_has_one_digest_whatever_the_order_of_its_keys(body):
    # Given a request body and the same body with its keys in reverse order
    reordered = dict(reversed(list(body.items())))
    # Then both have the same digest, and a changed body another
    assert request_sha256(reordered) == request_sha256(body)
    assert request_sha256({**body, "extra key": 1}) != request_sha256(body)


outcomes = st.sampled_from(["answered", "http_error", "expired", "garbage"])


@given(st.dictionaries(st.uuids().map(str), outcomes, max_size=12))
def test_every_output_line_is_an_answer_or_a_failure_never_both(items):
    # Given output and error files with one line per item, as the endpoint writes them
    out, errors = [], []
    for cid, outcome in items.items():
        if outcome == "answered":
            out.append(
                json.dumps({"custom_id": cid, "response": {"status_code": 200, "body": {"id": cid}}, "error": None})
            )
        elif outcome == "http_error":
            response = {"status_code": 500, "body": {"error": {"message": "x"}}}
            errors.append(json.dumps({"custom_id": cid, "response": response, "error": None}))
        elif outcome == "expired":
            error = {"code": "batch_expired", "message": "not run"}
            errors.append(json.dumps({"custom_id": cid, "response": None, "error": error}))
        else:
            errors.append("{not json")
    # When they are read
    output = parse_output("\n".join(out), "\n".join(errors))
    # Then the answered items are the answers, each with its body; the failed ones are failures, named
    assert output.answers == {cid: {"id": cid} for cid, o in items.items() if o == "answered"}
    assert output.failed == {
        cid: ("HTTP 500" if o == "http_error" else "batch_expired")
        for cid, o in items.items()
        if o in ("http_error", "expired")
    }


def test_a_batch_line_is_a_post_to_chat_completions_with_the_body():
    line = json.loads(batch_line("u1", {"model": "m", "messages": []}))
    assert line == {
        "custom_id": "u1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": []},
    }


def test_a_pinned_users_first_head_read_is_the_version_its_request_was_built_on():
    # Given a user at version 3, pinned at version 1 (its batch request was built there)
    store = MemoryStore(InMemoryRecorder())
    user = uuid.uuid4()
    for v in (1, 2, 3):
        store.append(user, {"summary": f"v{v}"}, expected_version=v - 1, source="seed" if v == 1 else "api")
    pinned = PinnedHeads(store, {user: 1})
    # When the run reads its head, the changes people made, then (rebasing) the head again
    first, _ = pinned.head_for_run(user, "daily:x")
    changes = pinned.recent_changes(user, limit=50)
    again, _ = pinned.head_for_run(user, "daily:x")
    # Then the first read is version 1 with the changes up to it, and the second the real head
    assert (first.version, first.document["summary"]) == (1, "v1")
    assert [c.version for c in changes] == [1]
    assert again.version == 3 and [c.version for c in pinned.recent_changes(user, limit=50)] == [3, 2, 1]


def test_a_pin_above_the_head_reads_the_head_as_it_is():
    # Given a user whose history went back below the pin (an erasure, then a new first version)
    store = MemoryStore(InMemoryRecorder())
    user = uuid.uuid4()
    store.append(user, {"summary": "new"}, expected_version=0, source="api")
    # Then the run reads the head as it is
    head, _ = PinnedHeads(store, {user: 4}).head_for_run(user, "daily:x")
    assert head.version == 1


def test_a_collect_batch_message_parses_and_a_malformed_one_is_refused():
    window = {"start": "2031-03-02T00:00:00Z", "end": "2031-03-03T00:00:00Z"}
    body = {"type": "collect_batch", "batch_id": "batch_1", "run_key": "daily:2031-03-02", "window": window}
    message = parse_message(json.dumps(body))
    assert isinstance(message, CollectBatch) and message.polls == 0
    with pytest.raises(InvalidMessage):
        parse_message(json.dumps({**body, "batch_id": ""}))


@pytest.mark.parametrize(
    "env",
    [
        {
            "summary_delivery": "batch",
            "summarizer": "rules",
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        },
        {"summary_delivery": "batch", "openai_base_url": "http://127.0.0.1:1/v1"},
    ],
)
def test_batch_delivery_needs_the_openai_summarizer_and_the_queue(env):
    with pytest.raises(ConfigError, match="SUMMARY_DELIVERY=batch"):
        WorkerSettings.from_env({}, **env)

"""Hostile queue messages through the real worker handler: a malformed or hostile record fails
alone (named in the partial batch response), the good records beside it are kept, and whatever a
record stored is summarized by the next run and read back and exported through the API.

The queue is the service's own door, but its senders are other services: their bugs are its input.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from user_memory_local.poller import sqs_record

from tests.api_client import ApiClient
from tests.e2e.helpers import Stack, ok

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

# A run summarizes the activity that occurred before its window's end, whenever: this one takes all.
WINDOW = {"start": "2999-12-30T00:00:00Z", "end": "2999-12-31T00:00:00Z"}

# Text as other services send it: any code point, NUL and lone surrogates' neighbours included.
texts = st.text(max_size=40) | st.sampled_from(["", "\x00", "a\x00b", "/", "~1", "-", "..", "\u202e", "0" * 300])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=12,
)
kinds = st.sampled_from(
    ["session", "message", "part_named", "goal_set", "trigger_noted", "safety_note", "forget_part", "note"]
) | st.text(max_size=30)
# The structured kinds' fields, hostile values in them (the rule-based fold takes ids as keys).
fact_payloads = st.fixed_dictionaries(
    {},
    optional={
        "part_id": texts,
        "name": texts,
        "goal": texts,
        "trigger": texts,
        "desired_outcome": texts,
        "note": texts,
        "status": texts,
        "related_parts": st.lists(texts, max_size=3),
        "conversation_id": texts,
        "role": texts,
        "text": texts,
    },
)
payloads = fact_payloads | st.dictionaries(texts, json_values, max_size=4)
# Mostly times the door takes (any aware time from 1900 to 2999), sometimes ones it refuses.
good_times = st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(2999, 12, 29), timezones=st.just(UTC)).map(
    lambda d: d.isoformat()
)
times = st.one_of(
    good_times,
    good_times,
    good_times,
    good_times,
    st.sampled_from(["2031-03-05T10:00:00+14:00", "2031-03-05T10:00:00", "0001-01-01T00:00:00Z", "noon", ""]),
)


def activity(user: uuid.UUID, n: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "user_id": st.just(str(user)),
            "occurred_at": times,
            "kind": kinds,
            "payload": payloads,
            "source": st.sampled_from(["app", "chat"]) | texts,
            "external_id": st.sampled_from([f"hostile-{n}", f"hostile-{n}-\x00"]) | texts,
        }
    )


def hostile_body(user: uuid.UUID) -> st.SearchStrategy[str]:
    """A body as a buggy sender might send it: not JSON, JSON of any shape, or a message of the
    right type with hostile fields."""
    record = st.lists(st.integers(0, 10_000).flatmap(lambda n: activity(user, n)), min_size=1, max_size=2).map(
        lambda acts: {"type": "record_activity", "activities": acts}
    )
    refresh = st.fixed_dictionaries(
        {
            "type": st.just("refresh_user"),
            "user_ids": st.lists(st.just(str(user)) | texts, max_size=2),
            "run_key": texts,
            "window": st.just(WINDOW) | st.dictionaries(texts, texts, max_size=2),
        }
    )
    return st.one_of(
        texts,
        json_values.map(json.dumps),
        record.map(json.dumps),
        record.map(json.dumps),
        record.map(json.dumps),
        refresh.map(json.dumps),
    )


@pytest.fixture
def stack_and_api(database_url: str, pool: Any, sqs: Any, make_api: Any) -> tuple[Stack, Any]:
    return Stack(database_url, pool, sqs), make_api("user_state")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_hostile_record_fails_alone_and_what_any_record_stored_is_summarized_and_exported(stack_and_api, data, logs):
    stack, api = stack_and_api
    logs.records.clear()  # one example's records only
    # Given a batch of hostile bodies for one user, and a good record for another user beside them
    user, bystander = uuid.uuid4(), uuid.uuid4()
    bodies = data.draw(st.lists(hostile_body(user), min_size=1, max_size=4), label="bodies")
    good = {
        "type": "record_activity",
        "activities": [
            {
                "user_id": str(bystander),
                "occurred_at": "2031-03-05T10:00:00Z",
                "kind": "part_named",
                "payload": {"part_id": "planner", "name": "Planner"},
                "source": "app",
                "external_id": "good",
            }
        ],
    }
    records = [sqs_record(message_id=f"h{i}", body=b) for i, b in enumerate(bodies)]
    records.append(sqs_record(message_id="good", body=json.dumps(good)))
    # When the worker takes the batch
    result = stack.worker({"Records": records})
    # Then only hostile records can fail, each named; the good one is kept
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    assert failed <= {f"h{i}" for i in range(len(bodies))}
    # refused at the door as the sender's error, named; never a database error SQS would retry
    refusals = logs.named("record failed")
    assert {r["message_id"] for r in refusals} == failed
    assert {r["error"] for r in refusals} <= {"InvalidMessage", "MessageTooLarge"}
    # And the next run summarizes whatever was stored, for both users, without a failure
    refresh = {"type": "refresh_user", "user_ids": [str(user), str(bystander)], "run_key": "hostile", "window": WINDOW}
    assert stack.deliver(refresh) == {"batchItemFailures": []}
    assert "planner" in stack.store.head(bystander).document["parts"]
    # And the user's memory, history and export read back through the API
    client = ApiClient(api, user)
    memory = ok(client.get("/me/memory"))
    ok(client.get("/me/memory/history"))
    export = ok(client.get("/me/export"))
    assert [v["version"] for v in export["versions"]] == list(range(1, memory["version"] + 1))
    if export["versions"]:
        assert export["versions"][-1]["document"] == memory["document"]
    # and nothing stored was left behind: every activity row the records wrote was summarized
    with stack.pool.connection() as conn:
        stored, left = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE summarized_version IS NULL) FROM user_activity WHERE user_id = %s",
            (user,),
        ).fetchone()
    event(f"activity rows stored: {min(stored, 2)}{'+' if stored >= 2 else ''}")
    event(f"records failed: {len(failed)} of {len(bodies)}")
    assert left == 0

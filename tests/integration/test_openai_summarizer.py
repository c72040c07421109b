"""The OpenAI path: the real `openai` client against a local OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import openai
import pytest
from user_memory.adapters.openai_summarizer import MAX_ACTIVITY_LINE_CHARS, OpenAISummarizer, response_schema
from user_memory.config import WorkerSettings
from user_memory.domain.model import Activity
from user_memory.domain.pipeline import NO_DEADLINE, summarize_valid
from user_memory.errors import InvalidDocument, SummarizerError, SummarizerUnavailable

from tests.fake_openai import completion, fake_openai_server

U = uuid.uuid4()
ACTS = [
    Activity(
        user_id=U,
        occurred_at=datetime(2026, 11, 21, 9, tzinfo=UTC),
        kind="part_named",
        payload={"part_id": "planner"},
        source="chat",
        external_id="1",
    )
]
CURRENT = {
    "version": 1,
    "last_updated_by": "rules",
    "summary": "old",
    "safety_notes": "",
    "parts": {
        "critic": {
            "name": "Critic",
            "status": "active",
            "recency_score": 0.5,
            "influence_score": 0.5,
            "goals": [],
        }
    },
    "triggers_and_goals": [],
}
GOOD = {
    "summary": "Named a planner part.",
    "safety_notes": "",
    "parts": [
        {
            "id": "critic",
            "name": "Critic",
            "status": "active",
            "recency_score": 0.45,
            "influence_score": 0.5,
            "goals": [],
        },
        {
            "id": "planner",
            "name": "Planner",
            "status": "active",
            "recency_score": 1.0,
            "influence_score": 0.2,
            "goals": [{"goal": "plan the week"}],
        },
    ],
    "triggers_and_goals": [{"trigger": "deadlines", "desired_outcome": "rest", "related_parts": ["planner"]}],
}


def summarizer(url: str, **overrides) -> OpenAISummarizer:
    values = {"openai_max_retries": 2, "openai_timeout_seconds": overrides.pop("timeout", 5.0), **overrides}
    settings = WorkerSettings.from_env({}, openai_base_url=url, openai_api_key="test-key", **values)
    return OpenAISummarizer.from_settings(settings)


def cfg(**overrides):
    return WorkerSettings(**overrides).pipeline()


def test_valid_output_maps_to_the_stored_shape_with_token_usage():
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(GOOD)))
        result = summarizer(url).summarize(CURRENT, ACTS)
    assert set(result.document["parts"]) == {"critic", "planner"}
    assert result.document["parts"]["planner"]["goals"] == [{"goal": "plan the week"}]
    assert (result.prompt_tokens, result.completion_tokens) == (1200, 300)
    sent = fake.requests[0]["body"]
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert '"id":"critic"' in sent["messages"][1]["content"]  # the model sees parts as a list


def test_response_schema_is_strict_mode_compatible():
    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False
                assert set(node["required"]) == set(node["properties"])
            assert "default" not in node
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(response_schema())


def test_invalid_json_is_an_invalid_document():
    with fake_openai_server() as (fake, url):
        fake.reply(completion("{not json"))
        with pytest.raises(InvalidDocument, match="not JSON"):
            summarizer(url).summarize(CURRENT, ACTS)


def test_schema_violating_output_is_retried_with_feedback_then_succeeds():
    bad = {**GOOD, "parts": [{**GOOD["parts"][0], "recency_score": 7}]}
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(bad)))
        fake.reply(completion(json.dumps(GOOD)))
        document, _result, tokens = summarize_valid(summarizer(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    assert document["parts"]["planner"]["name"] == "Planner"
    assert tokens == 3000  # both answers were paid for: the usage of each is counted
    assert "recency_score" in fake.requests[1]["body"]["messages"][1]["content"]


def test_output_that_never_validates_fails_after_bounded_attempts():
    dangling = {
        **GOOD,
        "triggers_and_goals": [{"trigger": "t", "desired_outcome": "o", "related_parts": ["ghost"]}],
    }
    with fake_openai_server() as (fake, url):
        for _ in range(3):
            fake.reply(completion(json.dumps(dangling)))
        with pytest.raises(SummarizerError, match="after 3 attempts$") as info:
            summarize_valid(summarizer(url), CURRENT, ACTS, cfg(summarizer_attempts=3), NO_DEADLINE)
        assert len(fake.requests) == 3
    # The message (what logs carry) does not quote the model's output; the detail does
    assert "ghost" not in str(info.value) and "ghost" in info.value.detail


def test_rate_limit_then_success_is_retried_by_the_client():
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down", "type": "rate_limit"}}, status=429)
        fake.reply(completion(json.dumps(GOOD)))
        result = summarizer(url).summarize(CURRENT, ACTS)
    assert len(fake.requests) == 2 and "planner" in result.document["parts"]


def test_timeout_fails_as_unavailable_after_bounded_retries():
    with fake_openai_server() as (fake, url):
        fake.default = completion(json.dumps(GOOD))
        for _ in range(3):
            fake.reply(completion(json.dumps(GOOD)), delay=1.5)
        with pytest.raises(SummarizerUnavailable, match="timed out") as info:
            summarizer(url, timeout=0.5, openai_max_retries=1).summarize(CURRENT, ACTS)
        assert isinstance(info.value.__cause__, openai.APITimeoutError)
        assert len(fake.requests) == 2


def test_the_per_call_timeout_overrides_the_client_timeout():
    # Given a client timeout of 5 s and an endpoint that answers after 1.5 s
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(GOOD)), delay=1.5)
        # When the pipeline allows this call only 0.5 s
        with pytest.raises(SummarizerUnavailable, match="timed out after 0.5"):
            summarizer(url, openai_max_retries=0).summarize(CURRENT, ACTS, timeout=0.5)


def test_a_server_error_fails_as_unavailable_with_its_status():
    with fake_openai_server() as (fake, url):
        for _ in range(3):
            fake.reply({"error": {"message": "boom"}}, status=500)
        with pytest.raises(SummarizerUnavailable, match="HTTP 500"):
            summarizer(url, openai_max_retries=1).summarize(CURRENT, ACTS)


def test_an_unreachable_endpoint_fails_as_unavailable():
    with pytest.raises(SummarizerUnavailable, match="cannot reach"):
        summarizer("http://127.0.0.1:9/v1", openai_max_retries=0).summarize(CURRENT, ACTS)


def test_an_oversized_activity_is_cut_in_the_prompt_with_a_marker():
    big = Activity(
        user_id=U,
        occurred_at=datetime(2026, 11, 21, 9, tzinfo=UTC),
        kind="message",
        payload={"text": "x" * (MAX_ACTIVITY_LINE_CHARS + 500)},
        source="chat",
        external_id="big",
    )
    content = OpenAISummarizer(client=None).messages(CURRENT, [big])[1]["content"]
    assert "[truncated: " in content and "more characters]" in content
    assert "x" * (MAX_ACTIVITY_LINE_CHARS + 1) not in content


def test_a_long_retry_after_is_not_waited_out_past_the_calls_budget():
    # Given an endpoint that rate-limits with Retry-After: 10 s, and a call allowed 2 s in all
    waits: list[float] = []
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "10"})
        s = summarizer(url, openai_max_retries=3)
        s.sleep = waits.append
        with pytest.raises(SummarizerUnavailable, match="HTTP 429"):
            s.summarize(CURRENT, ACTS, timeout=2)
    # Then it gives up at once instead of sleeping past the budget
    assert waits == [] and len(fake.requests) == 1


def test_retries_wait_as_the_server_asks_within_the_budget():
    waits: list[float] = []
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down"}}, status=429)
        fake.reply(completion(json.dumps(GOOD)))
        s = summarizer(url, openai_max_retries=1)
        s.sleep = waits.append
        result = s.summarize(CURRENT, ACTS, timeout=5)
    assert "planner" in result.document["parts"] and waits == [pytest.approx(0.01)]

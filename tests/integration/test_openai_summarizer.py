"""The OpenAI path: the real `openai` client against a local OpenAI-compatible endpoint."""

from __future__ import annotations

import copy
import json
import time
import uuid
from datetime import UTC, datetime

import openai
import pytest
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.openai_summarizer import (
    MAX_ACTIVITY_LINE_CHARS,
    OpenAISummarizer,
    edits_schema,
    prompt_line,
    response_schema,
    to_llm_shape,
)
from user_memory.config import WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, RunStatus, Window
from user_memory.domain.summary.edits import MemoryEdit
from user_memory.domain.summary.pipeline import NO_DEADLINE, refresh_user, summarize_valid
from user_memory.domain.summary.view import prompt_view
from user_memory.errors import InvalidDocument, InvalidEdits, SummarizerError, SummarizerUnavailable

from tests.fake_openai import completion, edit, edits_completion, fake_openai_server

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
    """From settings, as the worker builds it; the whole-document mode unless `summary_mode` says."""
    values = {
        "openai_max_retries": 2,
        "openai_timeout_seconds": overrides.pop("timeout", 5.0),
        "summary_mode": "document",
        **overrides,
    }
    settings = WorkerSettings.from_env({}, openai_base_url=url, openai_api_key="test-key", **values)
    return OpenAISummarizer.from_settings(settings)


def editor(url: str, **overrides) -> OpenAISummarizer:
    """The edit-mode summarizer (the default mode)."""
    return summarizer(url, summary_mode="edit", **overrides)


def cfg(**overrides):
    return WorkerSettings(**overrides).pipeline()


def test_valid_output_maps_to_the_stored_shape_with_token_usage():
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(GOOD)))
        result = summarizer(url).summarize(CURRENT, ACTS)
    assert set(result.document["parts"]) == {"critic", "planner"}
    assert result.document["parts"]["planner"]["goals"] == [{"goal": "plan the week"}]
    assert (result.prompt_tokens, result.completion_tokens) == (1200, 300)
    assert result.edits is None  # whole-document mode
    # And the request asked for the whole document, strictly, under its usual name
    assert fake.response_format() == {
        "type": "json_schema",
        "json_schema": {"name": "user_memory", "strict": True, "schema": response_schema()},
    }
    # the activity names no part the memory has: the critic is in the outline, by id and name
    assert "<outline>\nparts not shown (id: name): critic: Critic\n" in fake.user_prompt()


@pytest.mark.parametrize("mode", ["document", "edit"])
def test_the_summarizer_leaves_the_document_it_is_given_unchanged(mode):
    # Given a summarizer that says it never changes its input (the pipeline then gives it the head as read)
    document = copy.deepcopy(CURRENT)
    with fake_openai_server() as (fake, url):
        fake.reply(
            completion(json.dumps(GOOD)) if mode == "document" else edits_completion(edit("remove", "/parts/critic"))
        )
        made = summarizer(url, summary_mode=mode)
        assert made.leaves_input_unchanged is True
        # When it summarizes
        made.summarize(document, ACTS)
    # Then the document is as it was
    assert document == CURRENT


@pytest.mark.parametrize("schema", [response_schema, edits_schema], ids=["document", "edits"])
def test_response_schemas_are_strict_mode_compatible(schema):
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

    walk(schema())


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
        summarized = summarize_valid(summarizer(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    assert summarized.document["parts"]["planner"]["name"] == "Planner"
    assert summarized.tokens == 3000  # both answers were paid for: the usage of each is counted
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


def test_a_retry_after_given_to_one_call_holds_the_other_callers_of_the_endpoint():
    # Given two summarizers of the same endpoint and model (two lanes of the worker), the first of
    # which is answered 429 with Retry-After: 10 s on a call allowed 2 s
    waits: list[float] = []
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "10"})
        first, second = summarizer(url, openai_max_retries=3), summarizer(url, openai_max_retries=3)
        first.sleep = second.sleep = waits.append
        with pytest.raises(SummarizerUnavailable, match="HTTP 429"):
            first.summarize(CURRENT, ACTS, timeout=2)
        # When the second asks within those 10 s, with 2 s of its own
        with pytest.raises(SummarizerUnavailable, match="HTTP 429"):
            second.summarize(CURRENT, ACTS, timeout=2)
    # Then it fails at once as rate-limited, without asking the endpoint or sleeping past its budget
    assert waits == [] and len(fake.requests) == 1


def test_a_caller_waits_out_anothers_retry_after_when_its_budget_allows():
    # Given a summarizer rate-limited with Retry-After: 1 s and no retries left
    waits: list[float] = []
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "1"})
        fake.reply(completion(json.dumps(GOOD)))
        first, second = summarizer(url, openai_max_retries=0), summarizer(url, openai_max_retries=0)
        first.sleep = second.sleep = waits.append
        with pytest.raises(SummarizerUnavailable, match="HTTP 429"):
            first.summarize(CURRENT, ACTS, timeout=5)
        # When another caller of the endpoint asks with 5 s to spare
        result = second.summarize(CURRENT, ACTS, timeout=5)
    # Then it waited (what was left of the second) before its request, which was answered
    assert "planner" in result.document["parts"] and len(fake.requests) == 2
    assert len(waits) == 1 and 0 < waits[0] <= 1.0


def test_retries_wait_as_the_server_asks_within_the_budget():
    waits: list[float] = []
    with fake_openai_server() as (fake, url):
        fake.reply({"error": {"message": "slow down"}}, status=429)
        fake.reply(completion(json.dumps(GOOD)))
        s = summarizer(url, openai_max_retries=1)
        s.sleep = waits.append
        result = s.summarize(CURRENT, ACTS, timeout=5)
    assert "planner" in result.document["parts"] and waits == [pytest.approx(0.01)]


# -- edit mode (the default): the model answers with edits ---------------------------------------------


def test_edit_mode_asks_for_strict_edits_and_returns_them_parsed():
    # Given an endpoint that answers with two edits
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner", {"id": "planner", "name": "Planner", "status": "active"}, "part_named"),
                edit("remove", "/parts/critic", reason="forget request"),
            )
        )
        # When the edit-mode summarizer is asked
        result = editor(url).summarize(CURRENT, ACTS)
    # Then the request asked for the edits' schema, strictly, named memory_edits
    assert fake.response_format() == {
        "type": "json_schema",
        "json_schema": {"name": "memory_edits", "strict": True, "schema": edits_schema()},
    }
    edit_item = edits_schema()["$defs"]["_LLMEdit"]
    assert edit_item["properties"]["op"]["enum"] == ["add", "replace", "remove"]
    assert set(edit_item["required"]) == {"op", "path", "value_json", "reason"}
    # And the answer comes back as edits with their values read from JSON text, and no document
    assert result.edits == (
        MemoryEdit(
            op="add",
            path="/parts/planner",
            value={"id": "planner", "name": "Planner", "status": "active"},
            reason="part_named",
        ),
        MemoryEdit(op="remove", path="/parts/critic", reason="forget request"),
    )
    assert result.document == {} and (result.prompt_tokens, result.completion_tokens) == (1200, 300)
    # And the system prompt is the edit rules
    assert "return the edits" in fake.system_prompt() and "value_json" in fake.system_prompt()


def _block(prompt: str, tag: str) -> list[str]:
    lines = prompt.split("\n")
    start, end = lines.index(f"<{tag}>"), lines.index(f"</{tag}>")
    return lines[start + 1 : end]


def _acts(*specs: tuple[str, int, dict]) -> list[Activity]:
    return [
        Activity(
            user_id=U,
            occurred_at=datetime(2026, 11, 21, 9, minute, tzinfo=UTC),
            kind=kind,
            payload=payload,
            source="chat",
            external_id=f"{i}",
        )
        for i, (kind, minute, payload) in enumerate(specs)
    ]


@pytest.mark.parametrize("mode", ["edit", "document"])
def test_the_prompt_puts_the_fixed_instructions_first_then_the_document_once_then_the_activity(mode):
    acts = _acts(("message", 1, {"text": "hello"}), ("message", 1, {"text": "hello"}), ("session", 2, {"minutes": 5}))
    answer = edits_completion() if mode == "edit" else completion(json.dumps(GOOD))
    other_user = {**CURRENT, "summary": "someone else entirely"}
    with fake_openai_server() as (fake, url):
        fake.reply(answer)
        fake.reply(answer)
        s = summarizer(url, summary_mode=mode)
        s.summarize(CURRENT, acts)
        s.summarize(other_user, acts[2:])
    # Then the system message comes first and is the same for every user and day (a cacheable prefix)
    assert [m["role"] for m in fake.messages(0)] == ["system", "user"]
    assert fake.system_prompt(0) == fake.system_prompt(1) and "{" not in fake.system_prompt(0)[:200]
    assert '"summary":"old"' not in fake.system_prompt(0) and "hello" not in fake.system_prompt(0)
    prompt = fake.user_prompt(0)
    # And the user message carries the document's view exactly once (the activity names no part:
    # the critic is outlined), as compact JSON of the model's shape
    view = prompt_view(CURRENT, acts, "user_state")
    document = json.dumps(to_llm_shape(view.document), ensure_ascii=False, separators=(",", ":"))
    assert _block(prompt, "memory") == [document]
    assert prompt.count('"summary":"old"') == 1
    # And the activity one line each, as prompt_line renders it, the repeated line once
    assert _block(prompt, "activity") == [prompt_line(acts[0]), prompt_line(acts[2])]
    assert "1 repeated lines merged" in prompt and "left out" not in prompt
    # And the memory block comes before the activity block
    assert prompt.index("<memory>") < prompt.index("<activity>")


def test_the_activity_is_capped_by_its_token_budget_and_the_prompt_says_how_much_was_left_out():
    # Given 30 distinct lines of about 110 characters and a budget of 100 tokens (about 400 characters)
    acts = _acts(*[("message", i, {"text": f"{i:02d}" + "x" * 40}) for i in range(30)])
    with fake_openai_server() as (fake, url):
        fake.reply(edits_completion())
        result = editor(url, max_prompt_activity_tokens=100).summarize(CURRENT, acts)
    lines = _block(fake.user_prompt(), "activity")
    # Then only the newest lines that fit are carried, oldest first, within the budget
    assert lines == [prompt_line(a) for a in acts[-len(lines) :]] and 0 < len(lines) < 30
    assert sum(len(x) + 1 for x in lines) <= 400
    # And the prompt and the result say how many were left out
    assert f"{30 - len(lines)} older activities were left out" in fake.user_prompt()
    assert result.activity_cut == 30 - len(lines)


def test_bad_edits_go_back_to_the_model_once_with_the_errors_then_the_good_ones_apply():
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("replace", "/parts/ghost/status", "x"),
                edit("replace", "/summary", value_json="Named a planner."),  # not JSON: no quotes
            )
        )
        fake.reply(edits_completion(edit("replace", "/summary", "Named a planner.")))
        summarized = summarize_valid(editor(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    # Then the unreadable answer was sent back with what was wrong with it
    retry = fake.user_prompt(1)
    assert "could not be used" in retry and "edit 2 (replace /summary)" in retry and "not JSON" in retry
    # And the retry repeats the first prompt's document and activity before the feedback (a cacheable prefix)
    first = fake.user_prompt(0)
    assert retry.startswith(first[: first.index("</activity>")])
    # And the corrected edits applied, both answers counted
    assert summarized.document["summary"] == "Named a planner." and summarized.tokens == 3000
    assert summarized.document["last_updated_by"] == "gpt-4o-mini"


def test_edits_whose_paths_do_not_exist_are_named_in_the_feedback():
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(edit("replace", "/parts/ghost/status", "x"), edit("add", "/parts/p", {"status": 1}))
        )
        fake.reply(edits_completion(edit("replace", "/parts/critic/status", "quiet")))
        summarized = summarize_valid(editor(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    retry = fake.user_prompt(1)
    assert "edit 1 (replace /parts/ghost/status)" in retry and "does not exist" in retry
    assert "edit 2 (add /parts/p)" in retry and "wrong shape" in retry
    assert summarized.document["parts"]["critic"]["status"] == "quiet"


def test_a_retry_names_every_error_of_an_answer_with_one_edit_that_does_not_parse():
    # Given a model whose answer has one edit that does not parse (a schema error) between two that
    # do but break the document's rules (a path that does not exist, a value of the wrong shape),
    # and one more that breaks the item's schema itself
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("replace", "/parts/ghost/status", "x"),
                edit("add", "/summary", value_json="{not json"),
                edit("add", "/parts/p", {"status": 1}),
                {"op": "move", "path": "/summary", "value_json": "", "reason": ""},
            )
        )
        fake.reply(edits_completion(edit("replace", "/parts/critic/status", "quiet")))
        # When the pipeline asks again
        summarized = summarize_valid(editor(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    # Then the second request names every error, in the answer's order
    retry = fake.user_prompt(1)
    assert "4 of 4 edits are invalid" in retry
    assert "edit 1 (replace /parts/ghost/status)" in retry and "does not exist" in retry
    assert "edit 2 (add /summary): value_json is not JSON" in retry
    assert "edit 3 (add /parts/p)" in retry and "wrong shape" in retry
    assert "edit 4 (move /summary): does not match the schema" in retry
    assert retry.index("edit 1 (") < retry.index("edit 2 (") < retry.index("edit 3 (") < retry.index("edit 4 (")
    assert summarized.document["parts"]["critic"]["status"] == "quiet" and summarized.calls == 2


def test_bad_edits_twice_fail_with_the_errors_kept_out_of_the_message():
    with fake_openai_server() as (fake, url):
        for _ in range(2):
            fake.reply(edits_completion(edit("replace", "/parts/secret-part/status", "x")))
        with pytest.raises(SummarizerError, match="after 2 attempts$") as info:
            summarize_valid(editor(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    assert len(fake.requests) == 2
    assert "secret-part" not in str(info.value) and "secret-part" in (info.value.detail or "")


def test_an_edit_answer_that_misses_the_schema_is_an_invalid_document():
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps({"edits": [{"op": "move", "path": "/a", "value_json": "", "reason": ""}]})))
        with pytest.raises(InvalidDocument, match="does not match the schema") as info:
            editor(url).summarize(CURRENT, ACTS)
    # And it says what the answer cost, for the run's count
    assert (info.value.prompt_tokens, info.value.completion_tokens) == (1200, 300)
    with fake_openai_server() as (fake, url):
        fake.reply(edits_completion(edit("add", "/summary", value_json="")))
        with pytest.raises(InvalidEdits, match="needs value_json"):
            editor(url).summarize(CURRENT, ACTS)


def test_cached_prompt_tokens_are_reported_and_missing_usage_is_estimated():
    with fake_openai_server() as (fake, url):
        fake.reply(edits_completion(cached_tokens=1024))
        fake.reply(edits_completion(usage=False))
        s = editor(url)
        cached = s.summarize(CURRENT, ACTS)
        estimated = s.summarize(CURRENT, ACTS)
    assert (cached.prompt_tokens, cached.cached_prompt_tokens) == (1200, 1024)
    chars = sum(len(m["content"]) for m in fake.messages(1))
    assert estimated.prompt_tokens == -(-chars // 4) and estimated.completion_tokens == 0


def test_a_day_through_the_real_client_in_edit_mode_writes_a_version_with_its_provenance():
    # Given a user with memory and a day with a forget request and a repeated message
    activity = InMemoryActivity()
    store = MemoryStore(InMemoryRecorder(activity))
    store.append(U, CURRENT | {"safety_notes": "be gentle"}, expected_version=0, source="seed")
    acts = _acts(
        ("message", 1, {"text": "hi"}), ("message", 1, {"text": "hi"}), ("forget_part", 2, {"part_id": "critic"})
    )
    activity.record(acts)
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("remove", "/parts/critic", reason="asked to forget the critic"),
                edit("replace", "/safety_notes", "", reason="not needed"),
                edit("replace", "/summary", "Said hi; forgot the critic.", reason="message, forget_part"),
                prompt_tokens=900,
                cached_tokens=512,
            )
        )
        out = refresh_user(
            U,
            Window.day(datetime(2026, 11, 21, tzinfo=UTC).date()),
            "daily:2026-11-21",
            store=store,
            activity=activity,
            summarizer=editor(url),
            cfg=cfg(),
        )
    # Then one call, the removal asked for applied, the clearing not asked for refused
    assert len(fake.requests) == 1
    assert (out.status, out.edits_applied, out.edits_refused) == (RunStatus.WRITTEN, 2, 1)
    assert (out.prompt_tokens, out.cached_tokens) == (900, 512)
    head = store.head(U).document
    assert "critic" not in head["parts"] and head["safety_notes"] == "be gentle"
    provenance = store.history(U, limit=1)[0].provenance
    assert provenance is not None
    assert provenance["mode"] == "edit" and provenance["model"] == "gpt-4o-mini"
    assert [e["path"] for e in provenance["edits"]] == ["/parts/critic", "/summary"]
    assert provenance["refused"][0]["path"] == "/safety_notes" and "safety notes" in provenance["refused"][0]["why"]
    assert provenance["activity_duplicates"] == 1 and provenance["activity_cut"] == 0
    assert provenance["prompt_tokens"] == 900 and provenance["cached_prompt_tokens"] == 512


# -- a rejected answer's one retry names every error ---------------------------------------------------


def test_an_edit_answer_rejected_by_the_schema_is_sent_back_once_naming_every_error():
    # Given a model whose first answer has seven edits with an op the schema does not allow
    bad = edits_completion(*(edit("frobnicate", f"/parts/p{i}", {"name": "x"}) for i in range(7)))
    with fake_openai_server() as (fake, url):
        fake.reply(bad)
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
            )
        )
        # When the pipeline asks it (two attempts: the answer and one retry)
        summarized = summarize_valid(editor(url), CURRENT, ACTS, cfg(summary_mode="edit"), NO_DEADLINE)
    # Then the retry named each of the seven errors, not only the first ones
    assert "planner" in summarized.document["parts"]
    retry = fake.user_prompt(1)
    assert all(f"edit {i + 1} (frobnicate /parts/p{i}): does not match the schema: op:" in retry for i in range(7)), (
        retry
    )
    assert "more" not in retry.split("could not be used:", 1)[1]


def test_a_whole_document_rejected_by_the_schema_is_sent_back_once_naming_every_error():
    # Given a model whose first document has seven parts whose recency is not a number
    parts = [{**GOOD["parts"][1], "id": f"p{i}", "recency_score": "high"} for i in range(7)]
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps({**GOOD, "parts": parts})))
        fake.reply(completion(json.dumps(GOOD)))
        summarize_valid(summarizer(url), CURRENT, ACTS, cfg(), NO_DEADLINE)
    # Then the retry named each part's error
    retry = fake.user_prompt(1)
    assert all(f"parts.{i}.recency_score" in retry for i in range(7)), retry


def test_the_errors_sent_back_are_bounded_in_size_and_say_how_many_were_left_out():
    # Given a model whose first answer has 400 invalid edits, each with a long path
    bad = edits_completion(*(edit("frobnicate", "/parts/" + "p" * 200 + str(i), 1) for i in range(400)))
    with fake_openai_server() as (fake, url):
        fake.reply(bad)
        fake.reply(
            edits_completion(edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"))
        )
        summarize_valid(editor(url), CURRENT, ACTS, cfg(summary_mode="edit"), NO_DEADLINE)
    # Then the feedback stays within its bound and says how many errors it did not list
    feedback = fake.user_prompt(1).split("could not be used:", 1)[1]
    assert len(feedback) < 2_500
    assert "edit 1 (frobnicate /parts/" in feedback and feedback.rstrip().rsplit("; ", 1)[-1].startswith("and ")
    assert "more" in feedback.rsplit("; ", 1)[-1]


def test_a_conversation_memory_rejected_by_the_schema_is_sent_back_naming_every_error():
    from user_memory.adapters.openai_conversations import OpenAIConversationSummarizer
    from user_memory.domain.conversations.batch import MemoryConfig, _summarize_valid
    from user_memory.domain.conversations.model import ConversationMessage

    # Given a model whose first memory has six items of the wrong type, then a valid one
    memory = {"discussed": "d", "learned_about_user": [], "decisions": [], "open_loops": [], "tone": "t"}
    bad = {**memory, "learned_about_user": [1, 2, 3], "decisions": [4, 5, 6]}
    message = ConversationMessage(
        conversation_id="c",
        seq=1,
        message_id="m1",
        role="user",
        text="hi",
        occurred_at=datetime(2026, 11, 21, tzinfo=UTC),
    )
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(bad)))
        fake.reply(completion(json.dumps(memory)))
        settings = WorkerSettings.from_env({}, openai_base_url=url, openai_api_key="k")
        summarizer_ = OpenAIConversationSummarizer.from_settings(settings)
        _summarize_valid(summarizer_, None, [message], MemoryConfig(attempts=2), NO_DEADLINE, [0, 0, 0])
    # Then the retry named all six
    retry = fake.user_prompt(1)
    expected = [f"learned_about_user.{i}" for i in range(3)] + [f"decisions.{i}" for i in range(3)]
    assert all(loc in retry for loc in expected), retry


def test_a_trickling_endpoint_is_cut_off_at_the_calls_wall_clock_budget():
    # Given an endpoint that answers one byte every 0.2 s (each read well inside the 5 s timeout)
    with fake_openai_server() as (fake, url):
        fake.reply(completion(json.dumps(GOOD)), trickle=0.2)
        s = summarizer(url, timeout=5.0, openai_max_retries=2)
        # When the pipeline allows the call 1.5 s in all
        started = time.monotonic()
        with pytest.raises(SummarizerUnavailable, match="timed out after 1.5 s") as info:
            s.summarize(CURRENT, ACTS, timeout=1.5)
        elapsed = time.monotonic() - started
    # Then it ends at its budget (plus slack), as a timeout, with no retry past the budget
    assert elapsed < 2.5, elapsed
    assert isinstance(info.value.__cause__, openai.APITimeoutError)
    assert len(fake.requests) == 1

"""The chat agent end to end: the real `openai` client against a scripted local endpoint, real PostgreSQL."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator

import openai
import pytest
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.domain.memory.agent import tool_definitions
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.service import Edit
from user_memory.http.app import create_api
from user_memory.runtime import ApiServices, build_api
from user_memory_local import cli
from user_memory_local.chat import MAX_TOOL_ROUNDS, ChatAgent

from tests.api_client import ApiClient
from tests.fake_openai import FakeOpenAI, completion, fake_openai_server, tool_call, tool_call_completion

pytestmark = pytest.mark.e2e

MISTAKE = "Is 7 x 8 = 54? I'm sure it's 54."
AREA = {
    "topic": "multiplication table of 7",
    "evidence": ["said 7 x 8 = 54, three times"],
    "severity": 3,
}


@pytest.fixture
def services(pool: ConnectionPool) -> ApiServices:
    return build_api(ApiSettings(document_schema="tutor"), pool=pool)


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeOpenAI, str]]:
    with fake_openai_server() as (fake, url):
        yield fake, url


@pytest.fixture
def user() -> uuid.UUID:
    return uuid.uuid4()


def make_agent(services: ApiServices, url: str, user: uuid.UUID, **kwargs) -> ChatAgent:
    client = openai.OpenAI(api_key="test-key", base_url=url, max_retries=0, timeout=10)
    return ChatAgent(client=client, model="gpt-4o-mini", services=services, user_id=user, schema="tutor", **kwargs)


def remember_name(services: ApiServices, user: uuid.UUID, name: str) -> None:
    with services.session(user) as memory:
        memory.memory.apply_merge_patch({"personal_info": {"name": name}}, Edit())


def test_the_system_prompt_carries_the_current_memory(services, endpoint, user):
    fake, url = endpoint
    remember_name(services, user, "Amira")
    fake.reply(completion("Hello Amira! What shall we practise today?"))

    reply = make_agent(services, url, user).turn("Hi!")

    assert reply == "Hello Amira! What shall we practise today?"
    sent = fake.requests[0]["body"]
    assert "Amira" in fake.system_prompt(0)
    assert "memory version 1" in fake.system_prompt(0)
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][1]["content"] == "Hi!"
    assert sent["tools"] == tool_definitions("tutor")
    assert sent["model"] == "gpt-4o-mini"


@pytest.mark.filterwarnings("ignore:No application metrics to publish")  # the API handler
def test_a_repeated_mistake_becomes_an_area_to_improve_and_pruning_removes_it(
    services, endpoint, user, store: MemoryStore
):
    fake, url = endpoint
    remember_name(services, user, "Amira")
    agent = make_agent(services, url, user)

    # Given a learner who makes the same mistake twice
    fake.reply(completion("Not quite: 7 x 8 = 56."))
    fake.reply(completion("Still 56, not 54. Try 7 x 7 + 7."))
    assert agent.turn(MISTAKE) == "Not quite: 7 x 8 = 56."
    assert agent.turn(MISTAKE) == "Still 56, not 54. Try 7 x 7 + 7."
    assert "Needs work" not in fake.system_prompt(1)

    # When they make it a third time and the model records it with update_memory
    call = tool_call(
        "update_memory",
        {"section": "areas_to_improve", "mode": "append", "value_json": json.dumps(AREA)},
        call_id="call_area_1",
    )
    fake.reply(tool_call_completion(call))
    fake.reply(completion("Let's practise the 7 times table together: 7, 14, 21..."))
    reply = agent.turn(MISTAKE)

    # Then the final answer comes back, after a new agent version holding the area
    assert reply == "Let's practise the 7 times table together: 7, 14, 21..."
    head = store.head(user)
    assert head.version == 2 and head.source == "agent:update_memory"
    assert head.document["areas_to_improve"] == [{**AREA, "first_noted": None, "last_noted": None}]
    assert head.document["personal_info"]["name"] == "Amira"  # the append kept the rest

    # and the request after the tool call carries the call and its result
    followup = fake.messages(3)
    assistant, result = followup[-2], followup[-1]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_area_1"
    assert assistant["tool_calls"][0]["function"]["name"] == "update_memory"
    assert result == {
        "role": "tool",
        "tool_call_id": "call_area_1",
        "content": json.dumps({"version": 2, "status": "written"}),
    }
    assert len(fake.requests) == 4

    # The next turn's system prompt is rebuilt from the new memory
    fake.reply(completion("Ready for a quiz?"))
    agent.turn("OK, quiz me.")
    assert "Needs work: multiplication table of 7 (severity 3/5)" in fake.system_prompt(4)

    # When the user prunes the section through the API: DELETE /me/memory?section=areas_to_improve
    api = ApiClient(create_api(services, services.settings), user)
    pruned = api.delete("/me/memory", query={"section": "areas_to_improve"})
    assert pruned.status == 200, pruned.text
    assert pruned.json["version"] == 3
    assert store.head(user).document["areas_to_improve"] == []

    # Then the next system prompt no longer carries the area, and keeps the rest
    fake.reply(completion("Sure."))
    agent.turn("Let's do something else.")
    prompt = fake.system_prompt(5)
    assert "multiplication" not in prompt and "Needs work" not in prompt
    assert "Amira" in prompt and "memory version 3" in prompt
    # The conversation itself is kept across turns: system, then every user and assistant message
    roles = [m["role"] for m in fake.messages(5)]
    assert roles[0] == "system" and roles.count("system") == 1 and roles.count("user") == 5


def test_a_bad_tool_call_is_reported_to_the_model_not_raised(services, endpoint, user, store: MemoryStore):
    fake, url = endpoint
    bad = tool_call("update_memory", {"section": "hobbies", "mode": "merge", "value_json": "{}"}, call_id="call_bad")
    fake.reply(tool_call_completion(bad))
    fake.reply(completion("Sorry, I could not remember that."))

    reply = make_agent(services, url, user).turn("I like chess.")

    assert reply == "Sorry, I could not remember that."
    result = fake.messages(1)[-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_bad"
    error = json.loads(result["content"])["error"]
    assert "no section 'hobbies'" in error and "\n" not in error
    assert store.head(user).version == 0


def test_the_tool_loop_is_capped_then_the_model_must_answer(services, endpoint, user, store: MemoryStore):
    fake, url = endpoint
    for i in range(MAX_TOOL_ROUNDS):
        value = json.dumps({"other": {f"fact{i}": "x"}})
        fake.reply(
            tool_call_completion(
                tool_call("update_memory", {"section": "personal_info", "mode": "merge", "value_json": value})
            )
        )
    fake.reply(completion("Done."))

    assert make_agent(services, url, user).turn("Remember lots.") == "Done."

    assert len(fake.requests) == MAX_TOOL_ROUNDS + 1
    assert [r["body"]["tool_choice"] for r in fake.requests] == ["auto"] * MAX_TOOL_ROUNDS + ["none"]
    assert store.head(user).version == MAX_TOOL_ROUNDS


def test_a_failed_turn_leaves_the_conversation_as_it_was(services, endpoint, user):
    fake, url = endpoint
    agent = make_agent(services, url, user)
    fake.reply(completion("Hi."))
    agent.turn("Hello")
    before = list(agent.messages)
    fake.reply({"error": {"message": "boom"}}, status=500)
    with pytest.raises(openai.InternalServerError):
        agent.turn("Are you there?")
    assert agent.messages == before


def test_the_chat_command_answers_each_line_until_quit(database_url, endpoint, user, monkeypatch, capsys, services):
    fake, url = endpoint
    remember_name(services, user, "Amira")
    for name, value in {
        "DATABASE_URL": database_url,
        "DOCUMENT_SCHEMA": "tutor",
        "OPENAI_BASE_URL": url,
        "OPENAI_MODEL": "local-model",
        "OPENAI_MAX_RETRIES": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake.reply(completion("Hello Amira."))
    fake.reply({"error": {"message": "overloaded"}}, status=503)
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi\n\nAgain\n/quit\nnever read\n"))

    code = cli.main(["chat", str(user), "--budget", "200"])

    out, err = capsys.readouterr()
    assert out.splitlines() == ["Hello Amira."]
    assert err.strip().splitlines() == ["error: the model endpoint answered HTTP 503"]
    assert code == 1  # a turn failed
    assert len(fake.requests) == 2 and fake.requests[0]["body"]["model"] == "local-model"
    assert "Amira" in fake.system_prompt(0)


def test_the_chat_command_without_a_model_is_one_error_line(user, monkeypatch, capsys):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    # Checked before the database: this one does not exist
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi\n"))

    code = cli.main(["chat", str(user)])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_ERROR
    assert len(err) == 1 and err[0].startswith("error: ") and "OPENAI_API_KEY" in err[0], err


def test_a_trickling_model_ends_the_chat_turn_at_its_timeout(database_url, endpoint, user, monkeypatch, capsys):
    # Given the chat command against an endpoint that answers one byte every 0.2 s, with a 1 s timeout
    fake, url = endpoint
    for name, value in {
        "DATABASE_URL": database_url,
        "DOCUMENT_SCHEMA": "tutor",
        "OPENAI_BASE_URL": url,
        "OPENAI_TIMEOUT_SECONDS": "1",
        "OPENAI_MAX_RETRIES": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake.reply(completion("Hello."), trickle=0.2)
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi\n/quit\n"))
    # When a turn is asked
    started = time.monotonic()
    code = cli.main(["chat", str(user)])
    elapsed = time.monotonic() - started
    # Then it ends after its 1 s of wall clock (plus the command's start), as a timeout, and the chat goes on
    assert elapsed < 4, elapsed
    assert capsys.readouterr().err.strip().splitlines() == ["error: the model endpoint timed out"]
    assert code == 1

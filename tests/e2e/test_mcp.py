"""`user-memory mcp` end to end: the real CLI as a stdio MCP server, driven by the `mcp` package's own client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from user_memory.domain.memory.repository import MemoryStore
from user_memory_local.tokens import issue_token

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECRET = "e2e-mcp-test-secret-0123456789abcdefghijkl"
COMMAND = [sys.executable, "-m", "user_memory_local.cli", "mcp"]
TIMEOUT = 60


@pytest.fixture
def server_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "USER_MEMORY_HOME": str(tmp_path / "home"),  # never the developer's own
        "DOCUMENT_SCHEMA": "tutor",
    }


def with_client(env: dict[str, str], token: str, errlog_path: Path, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Start `user-memory mcp` with `token` in USER_MEMORY_TOKEN, connect, run `body`, stop."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=COMMAND[0], args=COMMAND[1:], env={**env, "USER_MEMORY_TOKEN": token}, cwd=str(ROOT)
        )
        with errlog_path.open("a") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await body(client)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "text", None) is not None)


def test_update_then_read_over_stdio_writes_an_agent_version(server_env, tmp_path, store: MemoryStore):
    user = uuid.uuid4()
    token = issue_token(user, secret=SECRET)

    async def session(client: Client) -> dict[str, Any]:
        tools = await client.list_tools()
        update = await client.call_tool(
            "update_memory",
            {"section": "personal_info", "mode": "merge", "value_json": json.dumps({"name": "Amira"})},
        )
        append = await client.call_tool(
            "update_memory",
            {
                "section": "areas_to_improve",
                "mode": "append",
                "value_json": json.dumps({"topic": "fractions", "severity": 3, "evidence": ["1/2 + 1/3 = 2/5"]}),
            },
        )
        read = await client.call_tool("read_memory", {})
        small = await client.call_tool("read_memory", {"budget_tokens": 12})
        found = await client.call_tool("search_memory", {"query": "fractions", "k": 3})
        return {"tools": tools, "update": update, "append": append, "read": read, "small": small, "found": found}

    out = with_client(server_env, token, tmp_path / "stderr.log", session)

    names = [tool.name for tool in out["tools"].tools]
    assert names == ["read_memory", "search_memory", "update_memory", "forget_memory"]
    update_tool = next(tool for tool in out["tools"].tools if tool.name == "update_memory")
    assert "areas_to_improve" in (update_tool.description or "")  # the deployment's schema (tutor)
    assert set(update_tool.input_schema["required"]) == {"section", "mode", "value_json"}

    assert not out["update"].is_error and out["update"].structured_content == {"version": 1, "status": "written"}
    assert out["append"].structured_content == {"version": 2, "status": "written"}
    read = out["read"].structured_content
    assert read["version"] == 2
    assert read["memory"].splitlines()[0] == "Name: Amira"
    assert "Needs work: fractions (severity 3/5)" in read["memory"]
    assert "memory truncated" in out["small"].structured_content["memory"]
    # And search_memory finds the appended item by a word of it, with its pointer and version (full text, offline)
    found = out["found"].structured_content
    assert found["mode"] == "fts"
    assert [(i["path"], i["version"]) for i in found["items"]] == [("/areas_to_improve/0", 2)]

    # The store holds what the tools wrote, as agent versions of this user
    head = store.head(user)
    assert head.version == 2 and head.document["personal_info"]["name"] == "Amira"
    assert [h.source for h in store.history(user, limit=10)] == ["agent:update_memory", "agent:update_memory"]
    assert head.document["last_updated_by"] == "agent:update_memory"


def test_domain_errors_are_tool_errors_and_the_server_keeps_serving(server_env, tmp_path, store: MemoryStore):
    user = uuid.uuid4()
    token = issue_token(user, secret=SECRET)

    async def session(client: Client) -> dict[str, Any]:
        return {
            "section": await client.call_tool(
                "update_memory", {"section": "hobbies", "mode": "merge", "value_json": "{}"}
            ),
            "json": await client.call_tool(
                "update_memory", {"section": "personal_info", "mode": "merge", "value_json": "{not json"}
            ),
            "append": await client.call_tool(
                "update_memory", {"section": "personal_info", "mode": "append", "value_json": '"x"'}
            ),
            "forget": await client.call_tool("forget_memory", {"target": "/areas_to_improve/7"}),
            "after": await client.call_tool(
                "update_memory", {"section": "personal_info", "mode": "merge", "value_json": '{"language": "fr"}'}
            ),
        }

    out = with_client(server_env, token, tmp_path / "stderr.log", session)
    for name, fragment in [
        ("section", "no section 'hobbies'"),
        ("json", "not valid JSON"),
        ("append", "append"),
        ("forget", ""),
    ]:
        result = out[name]
        assert result.is_error, name
        message = text_of(result)
        assert len(message.splitlines()) == 1 and fragment in message, (name, message)
        assert "Traceback" not in message
    assert out["after"].structured_content == {"version": 1, "status": "written"}
    assert store.head(user).version == 1
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


def test_tools_take_the_http_apis_names_and_refuse_arguments_they_do_not_take(server_env, tmp_path, store: MemoryStore):
    # Given a user with a memory of a few lines
    user = uuid.uuid4()
    token = issue_token(user, secret=SECRET)
    store.append(user, {"personal_info": {"name": "Amira", "language": "ar"}}, expected_version=0, source="test")

    async def session(client: Client) -> dict[str, Any]:
        return {
            "tools": await client.list_tools(),
            "tiny": await client.call_tool("read_memory", {"budget_tokens": 1}),
            "old_name": await client.call_tool("read_memory", {"budget": 1}),
            "typo": await client.call_tool("search_memory", {"query": "Amira", "top_k": 3}),
            "blank": await client.call_tool("search_memory", {"query": "   "}),
            "extra": await client.call_tool("forget_memory", {"target": "personal_info", "force": True}),
        }

    out = with_client(server_env, token, tmp_path / "stderr.log", session)
    # Then read_memory's budget is budget_tokens, as GET /me/memory/prompt calls it, and it is applied
    read = next(tool for tool in out["tools"].tools if tool.name == "read_memory")
    assert set(read.input_schema["properties"]) == {"budget_tokens"}
    assert read.input_schema["properties"]["budget_tokens"]["maximum"] == 32_000
    assert out["tiny"].structured_content["memory"].startswith("[memory truncated")
    # And every tool says it takes nothing else
    assert all(tool.input_schema.get("additionalProperties") is False for tool in out["tools"].tools)
    # And an argument a tool does not take is a one-line tool error naming it and what the tool takes,
    # never silently dropped (the old name would have read the default budget)
    for name, message in [
        ("old_name", "read_memory does not take 'budget'; it takes: budget_tokens"),
        ("typo", "search_memory does not take 'top_k'; it takes: k, query"),
        ("extra", "forget_memory does not take 'force'; it takes: target"),
    ]:
        assert out[name].is_error, name
        assert text_of(out[name]) == message
    # And a bad argument is named as the tool names it
    assert out["blank"].is_error and text_of(out["blank"]).endswith(": query must not be empty")
    # And nothing was forgotten
    assert store.head(user).version == 1


def test_each_server_run_has_its_own_tool_call_ids(server_env, tmp_path, store: MemoryStore):
    # JSON-RPC request ids restart with every connection; the same id in a new run is a new call.
    user = uuid.uuid4()
    token = issue_token(user, secret=SECRET)
    for language in ("fr", "de"):

        async def session(client: Client, language: str = language) -> Any:
            value = json.dumps({"language": language})
            return await client.call_tool(
                "update_memory", {"section": "personal_info", "mode": "merge", "value_json": value}
            )

        with_client(server_env, token, tmp_path / "stderr.log", session)
    head = store.head(user)
    assert head.version == 2 and head.document["personal_info"]["language"] == "de"


def test_forget_memory_removes_a_section(server_env, tmp_path, store: MemoryStore):
    user = uuid.uuid4()
    token = issue_token(user, secret=SECRET)

    async def session(client: Client) -> tuple[Any, Any]:
        value = json.dumps({"topic": "commas", "severity": 2})
        added = await client.call_tool(
            "update_memory", {"section": "areas_to_improve", "mode": "append", "value_json": value}
        )
        assert not added.is_error, text_of(added)
        forget = await client.call_tool("forget_memory", {"target": "areas_to_improve"})
        read = await client.call_tool("read_memory", {})
        return forget, read

    forget, read = with_client(server_env, token, tmp_path / "stderr.log", session)
    assert forget.structured_content == {"version": 2, "status": "written"}
    assert "commas" not in read.structured_content["memory"]
    assert store.history(user, limit=1)[0].source == "agent:forget_memory"


def run_mcp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        env={**os.environ, **env},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def assert_one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""  # nothing on the MCP channel
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("make_token", "fragment"),
    [
        (lambda user: "not-a-token", "malformed"),
        (lambda user: issue_token(user, secret="some-other-secret-0123456789abcdefghijkl"), "signature"),
        (lambda user: issue_token(user, secret=SECRET, ttl_seconds=1, now=1_000_000), "expired"),
    ],
    ids=["garbage", "wrong-secret", "expired"],
)
def test_a_bad_token_is_one_error_line_and_exit_2_before_serving(server_env, make_token, fragment):
    token = make_token(uuid.uuid4())
    line = assert_one_error_line(run_mcp(server_env, "--token", token), "invalid token", fragment)
    assert token not in line
    # The same through the environment, and with no database configured at all (checked first)
    env = {**server_env, "USER_MEMORY_TOKEN": token, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    assert_one_error_line(run_mcp(env), "invalid token", fragment)


def test_no_token_is_one_error_line(server_env):
    env = {k: v for k, v in os.environ.items() if k != "USER_MEMORY_TOKEN"}
    result = subprocess.run(
        COMMAND,
        env={**env, **server_env},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert_one_error_line(result, "no token", "USER_MEMORY_TOKEN")


CLI = [sys.executable, "-m", "user_memory_local.cli"]


def _printed_config(database_url: str, home: Path, user: uuid.UUID) -> dict[str, Any]:
    """`user-memory mcp-config USER` as a person runs it: in a shell with USER_MEMORY_HOME and
    DATABASE_URL set, the development secret in that home (no USER_MEMORY_TOKEN_SECRET)."""
    env = {**os.environ, "USER_MEMORY_HOME": str(home), "DATABASE_URL": database_url, "DOCUMENT_SCHEMA": "tutor"}
    for name in ("USER_MEMORY_TOKEN_SECRET", "USER_MEMORY_TOKEN"):
        env.pop(name, None)
    printed = subprocess.run(
        [*CLI, "mcp-config", str(user)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert printed.returncode == 0, printed.stderr
    return json.loads(printed.stdout)["mcpServers"]["user-memory"]


def _official_client(config: dict[str, Any], cwd: Path, errlog_path: Path, body: Callable[[Client], Awaitable[Any]]):
    """The `mcp` package's own client, started from `config` exactly (its env replaces the environment)."""

    async def main() -> Any:
        params = StdioServerParameters(command=config["command"], args=config["args"], env=config["env"], cwd=str(cwd))
        with errlog_path.open("a") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await body(client)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_the_printed_configuration_works_with_the_official_client(database_url, tmp_path, store: MemoryStore):
    # Given the configuration `mcp-config` prints for a user
    user = uuid.uuid4()
    home = tmp_path / "home"
    config = _printed_config(database_url, home, user)
    # Then it names the command by its absolute path and passes what the server reads
    assert Path(config["command"]).is_absolute() and config["args"][-1] == "mcp"
    assert config["env"]["USER_MEMORY_HOME"] == str(home.resolve())
    assert config["env"]["DATABASE_URL"] == database_url and config["env"]["DOCUMENT_SCHEMA"] == "tutor"

    # When the official client starts the server with exactly that, from another directory
    async def session(client: Client) -> Any:
        name = json.dumps({"name": "Amira"})
        await client.call_tool("update_memory", {"section": "personal_info", "mode": "merge", "value_json": name})
        return await client.call_tool("read_memory", {})

    read = _official_client(config, tmp_path, tmp_path / "stderr.log", session)
    # Then the token verifies and the tools serve that user's memory
    assert not read.is_error and read.structured_content["version"] == 1
    assert store.head(user).document["personal_info"]["name"] == "Amira"


def test_a_configuration_that_loses_the_home_says_why_instead_of_connection_closed(database_url, tmp_path):
    # Given the token alone in the client's env (as the docs used to say): the server then reads
    # the secret of another home than the one that signed the token
    config = _printed_config(database_url, tmp_path / "home", uuid.uuid4())
    config["env"] = {"USER_MEMORY_TOKEN": config["env"]["USER_MEMORY_TOKEN"], "HOME": str(tmp_path / "elsewhere")}

    async def session(client: Client) -> Any:
        return await client.list_tools()

    # When the official client connects
    with pytest.raises(Exception) as failed:
        _official_client(config, tmp_path, tmp_path / "stderr.log", session)
    # Then what it shows is the server's reason, naming the home it read and the command that helps
    shown = " | ".join(str(leaf) for leaf in _leaves(failed.value))
    assert "Connection closed" not in shown
    assert "did not start: invalid token" in shown and "mcp-config USER_ID" in shown, repr(failed.value)
    assert str(tmp_path / "elsewhere") in shown
    # And the server's stderr says the same on one line
    assert "error: invalid token" in (tmp_path / "stderr.log").read_text()


def _leaves(err: BaseException) -> list[BaseException]:
    """The errors inside (nested) exception groups, as the client's task groups raise them."""
    if isinstance(err, BaseExceptionGroup):
        return [leaf for inner in err.exceptions for leaf in _leaves(inner)]
    return [err]

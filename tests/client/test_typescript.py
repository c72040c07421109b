"""The TypeScript client (clients/typescript) and its AI SDK tools: its vitest suite, run against
`user-memory serve` (the command, as a subprocess) on the session's embedded PostgreSQL.

Node is a test-time dependency, as Chromium is for tests/browser: without `node` and `npm` on PATH
these tests skip, and under CI=true they fail (.ci/run installs Node where it is missing). The
packages come from clients/typescript/package-lock.json (`npm ci`, from npm's cache when it has
them), installed again only when the lock changes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_memory_local.tokens import issue_token

from tests.client.typescript_support import definitions

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
SECRET = "typescript-test-secret-of-at-least-32-bytes"


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node and npm are needed for the TypeScript client's tests (.ci/run installs them)")
        pytest.skip("node and npm are not installed: the TypeScript client's tests need them")
    return npm


@pytest.fixture(scope="module")
def npm() -> str:
    """npm, with the package's dependencies installed from its lock (again only when it changed)."""
    npm = _npm()
    lock = PACKAGE / "package-lock.json"
    stamp = PACKAGE / "node_modules" / ".package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund"],
            cwd=PACKAGE,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return npm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _serve(database_url: str, home: Path, schema: str | None, *options: str) -> Iterator[str]:
    """`user-memory serve` (the command) on the session's database, with DOCUMENT_SCHEMA `schema`
    (the default when None) and its `options` (--worker); its URL."""
    port = _free_port()
    env = {
        **os.environ,
        "USER_MEMORY_HOME": str(home),
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "USER_MEMORY_DEBUG", "POWERTOOLS_LOG_LEVEL", "DOCUMENT_SCHEMA"):
        env.pop(name, None)
    if schema is not None:
        env["DOCUMENT_SCHEMA"] = schema
    command = [sys.executable, "-m", "user_memory_local.cli", "serve", "--port", str(port), *options]
    process = subprocess.Popen(
        [*command, "--database-url", database_url],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # one line per failed request, which the tests provoke on purpose
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith(f"user-memory API on http://127.0.0.1:{port}"), banner
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def serve(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The default schema, with a worker queue of its own (the refresh and a run's undo go through it)."""
    with _serve(database_url, tmp_path_factory.mktemp("serve-home"), None, "--worker") as url:
        yield url


@pytest.fixture(scope="module")
def serve_companion(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _serve(database_url, tmp_path_factory.mktemp("serve-home"), "companion") as url:
        yield url


def test_the_generated_types_are_those_of_the_served_openapi_document(npm: str, serve: str, tmp_path: Path) -> None:
    """Given the OpenAPI document `user-memory serve` serves, when openapi-typescript generates the
    types again, then they are the committed src/openapi.ts (regenerate with `npm run generate`)."""
    served = tmp_path / "openapi.json"
    with urllib.request.urlopen(f"{serve}/openapi.json", timeout=30) as answer:
        served.write_bytes(answer.read())
    generated = tmp_path / "openapi.ts"
    done = subprocess.run(
        ["npx", "openapi-typescript", str(served), "-o", str(generated)],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert generated.read_text() == (PACKAGE / "src" / "openapi.ts").read_text(), (
        "clients/typescript/src/openapi.ts is stale: cd clients/typescript && npm run generate"
    )


def test_the_package_type_checks_against_the_generated_types(npm: str) -> None:
    """Given the generated types, when the package, its tests and example are type-checked, then
    every route the client calls exists with the answer it expects (tsc fails otherwise)."""
    done = subprocess.run([npm, "run", "--silent", "typecheck"], cwd=PACKAGE, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]


def test_the_vitest_suite_passes_against_user_memory_serve(
    npm: str, serve: str, serve_companion: str, tmp_path: Path
) -> None:
    """Given `user-memory serve`, when the TypeScript client's vitest suite runs against it (the
    client, retries through a misbehaving proxy, the AI SDK tools, the example chat, the guide's
    examples), then every test passes; a failing vitest test fails this one."""
    tools = tmp_path / "tool-definitions.json"
    tools.write_text(json.dumps(definitions()))
    env = {
        **os.environ,
        "USER_MEMORY_API": serve,
        "USER_MEMORY_COMPANION_API": serve_companion,
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "USER_MEMORY_TOOL_DEFINITIONS": str(tools),
        "CI": "true",  # vitest: no watch mode, no interactive reporter
        "NO_COLOR": "1",
    }
    report = tmp_path / "vitest.json"
    done = subprocess.run(
        ["npx", "vitest", "run", "--reporter=default", "--reporter=json", f"--outputFile.json={report}"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
    )
    output = done.stdout[-20000:] + done.stderr[-5000:]
    assert done.returncode == 0, output
    summary = json.loads(report.read_text())
    assert summary["numFailedTests"] == 0 and summary["numPassedTests"] >= 20, output


SESSION_PRELUDE = """\
import { MockLanguageModelV3 } from "ai/test";

// The reader's names (docs/client.md): the API, the user's token, a model, the conversation.
const API = process.env.API;
const getToken = () => process.env.TOKEN;
const messages = [{ role: "user", content: process.env.SAID }];
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
// A model that keeps a name it is told (updateMemory) and answers from the system prompt.
const model = new MockLanguageModelV3({
  doGenerate: async (options) => {
    const said = JSON.stringify(options.prompt.filter((m) => m.role === "user"));
    const system = options.prompt.filter((m) => m.role === "system").map((m) => m.content).join("\\n");
    const called = options.prompt.some((m) => m.role === "tool");
    const name = /call me (\\w+)/.exec(said)?.[1];
    const content = name && !called
      ? [{ type: "tool-call", toolCallId: `call-${Date.now()}`, toolName: "updateMemory",
           input: JSON.stringify({ section: "summary", mode: "merge", value_json: JSON.stringify(`Called ${name}`) }) }]
      : [{ type: "text", text: name ? "Noted." : `You are ${/Called (\\w+)/.exec(system)?.[1] ?? "new here"}.` }];
    const finish = content[0].type === "tool-call" ? "tool-calls" : "stop";
    return { content, finishReason: { unified: finish, raw: undefined }, usage, warnings: [] };
  },
});
"""


def test_from_npm_install_to_a_chat_that_remembers_its_user_in_the_guides_ten_lines(
    npm: str, serve: str, tmp_path: Path
) -> None:
    """Given the package packed (`npm pack`) and installed into a new app with `ai` and `zod`,
    when docs/client.md's ten-line chat runs there under plain Node, twice, then the second session
    knows the name the first was told; the installed package has no runtime dependency."""
    packed = subprocess.run(
        [npm, "pack", "--silent", "--pack-destination", str(tmp_path)], cwd=PACKAGE, capture_output=True, text=True
    )
    assert packed.returncode == 0, packed.stdout[-3000:] + packed.stderr[-3000:]
    tarball = tmp_path / packed.stdout.strip().splitlines()[-1]
    dev = json.loads((PACKAGE / "package.json").read_text())["devDependencies"]
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "private": True, "type": "module"}))
    installed = subprocess.run(
        [
            npm,
            "install",
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
            str(tarball),
            f"ai@{dev['ai']}",
            f"zod@{dev['zod']}",
        ],
        cwd=app,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    manifest = json.loads((app / "node_modules" / "user-memory-client" / "package.json").read_text())
    assert "dependencies" not in manifest
    assert (app / "node_modules" / "user-memory-client" / "dist" / "ai.d.ts").exists()

    guide = (ROOT / "docs" / "client.md").read_text(encoding="utf-8")
    chat = code_blocks_after(guide, "## TypeScript and the Vercel AI SDK")[0]
    (app / "session.mjs").write_text(SESSION_PRELUDE + chat + "\nconsole.log(text);\n")
    token = issue_token(str(uuid.uuid4()), secret=SECRET)

    def session(said: str) -> str:
        done = subprocess.run(
            ["node", "session.mjs"],
            cwd=app,
            env={**os.environ, "API": serve, "TOKEN": token, "SAID": said},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    assert session("Hello, call me Annie") == "Noted."
    assert session("Who am I?") == "You are Annie."


def code_blocks_after(page: str, heading: str) -> list[str]:
    """The ```ts blocks of the page after `heading`."""
    return re.findall(r"^```ts\n(.*?)^```", page[page.index(heading) :], re.S | re.M)

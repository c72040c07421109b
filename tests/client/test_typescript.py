"""The TypeScript client (clients/typescript) and its AI SDK tools: its vitest suite, run against
`user-memory serve` (the command, as a subprocess) on the session's embedded PostgreSQL.

Node is a test-time dependency, as Chromium is for tests/browser: without `node` and `npm` on PATH
these tests skip, and under CI=true they fail (.ci/run installs Node where it is missing). The
packages come from clients/typescript/package-lock.json (`npm ci`, from npm's cache when it has
them), installed again only when the lock changes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.typescript_support import definitions

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
SECRET = "typescript-test-secret-of-at-least-32-bytes"
OPENAPI = ROOT / "layers" / "core" / "user_memory" / "http" / "openapi.json"


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


@pytest.fixture(scope="module")
def serve(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`user-memory serve` on the session's database; its URL."""
    port = _free_port()
    env = {
        **os.environ,
        "USER_MEMORY_HOME": str(tmp_path_factory.mktemp("serve-home")),
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "USER_MEMORY_DEBUG", "POWERTOOLS_LOG_LEVEL", "DOCUMENT_SCHEMA"):
        env.pop(name, None)
    command = [sys.executable, "-m", "user_memory_local.cli", "serve", "--port", str(port)]
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


def test_the_generated_types_are_those_of_the_served_openapi_document(npm: str, tmp_path: Path) -> None:
    """Given the OpenAPI document the server serves, when openapi-typescript generates the types
    again, then they are the committed src/openapi.ts (regenerate with `npm run generate`)."""
    generated = tmp_path / "openapi.ts"
    done = subprocess.run(
        ["npx", "openapi-typescript", str(OPENAPI), "-o", str(generated)],
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


def test_the_vitest_suite_passes_against_user_memory_serve(npm: str, serve: str, tmp_path: Path) -> None:
    """Given `user-memory serve`, when the TypeScript client's vitest suite runs against it (the
    client, retries through a misbehaving proxy, the AI SDK tools, the example chat, the guide's
    examples), then every test passes; a failing vitest test fails this one."""
    tools = tmp_path / "tool-definitions.json"
    tools.write_text(json.dumps(definitions()))
    env = {
        **os.environ,
        "USER_MEMORY_API": serve,
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "USER_MEMORY_TOOL_DEFINITIONS": str(tools),
        "CI": "true",  # vitest: no watch mode, no interactive reporter
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

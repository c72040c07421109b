"""The browser tier: Debian's Chromium driven by Playwright (never a browser Playwright downloads)
against `user-memory serve` (a subprocess, on the session's embedded PostgreSQL): one in
development (signed in with a token in the URL), one signing in at a small OpenID Connect issuer
beside it, as deployed. The servers for the whole tier, a browser per module; a fresh browser
context (its own sessionStorage) per test.

Without Chromium the tier is skipped with one reason (`make test` prints it once), and fails
instead when CI=true: CI must run it (`.ci/run` installs chromium).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from user_memory_local.serve import console_url
from user_memory_local.tokens import issue_token

from tests.browser.oidc_issuer import OidcIssuer

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
SECRET = "browser-test-secret-of-at-least-32-bytes"
OPERATOR_SCOPE = "user-memory/operator"
CLIENT_ID = "console-test"
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")


def chromium_path() -> str | None:
    found = os.environ.get("CHROMIUM_PATH") or next(filter(None, map(shutil.which, CHROMIUM_CANDIDATES)), None)
    return found if found and os.access(found, os.X_OK) else None


def _missing() -> str | None:
    """Why the tier cannot run here, or None."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the browser tests need the playwright package (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "no Chromium here (apt-get install -y chromium)"
    return None


_NOT_RUN: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where the tier cannot run, its tests are left out and the summary says why in one line;
    where CI=true they fail instead (CI must run them)."""
    reason = _missing()
    ours = [item for item in items if Path(str(item.fspath)).is_relative_to(Path(__file__).parent)]
    if reason is None or not ours:
        return
    if os.environ.get("CI", "").lower() == "true":
        for item in ours:
            item.add_marker(pytest.mark.usefixtures("_fail_in_ci"))
        return
    items[:] = [item for item in items if item not in ours]
    config.hook.pytest_deselected(items=ours)
    _NOT_RUN.append(f"{len(ours)} browser tests not run: {reason}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _NOT_RUN:
        terminalreporter.write_line(line, yellow=True)


@pytest.fixture(scope="session")
def _fail_in_ci() -> None:
    pytest.fail(f"CI: {_missing()}", pytrace=False)


@dataclass
class Console:
    """A running `user-memory serve` and what a test needs to sign in to it."""

    url: str
    issuer: OidcIssuer | None
    pool: ConnectionPool
    log: Path

    def token(self, user: str, *, operator: bool = False) -> str:
        return issue_token(user, secret=SECRET, scopes=[OPERATOR_SCOPE] if operator else [])

    def signed_in(self, user: str, *, operator: bool = False) -> str:
        return console_url(self.url, self.token(user, operator=operator))


@dataclass
class OidcConsole(Console):
    """A `user-memory serve` whose console signs in at the test issuer (as deployed)."""

    issuer: OidcIssuer


@pytest.fixture(scope="session")
def oidc_issuer() -> Iterator[OidcIssuer]:
    issuer = OidcIssuer(CLIENT_ID).start()
    yield issuer
    issuer.close()


@contextmanager
def _serve(database_url: str, log: Path, *arguments: str) -> Iterator[str]:
    """`user-memory serve` on a free port, the companion schema and this suite's token secret; its URL."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "DOCUMENT_SCHEMA": "companion",
        "OPERATOR_SCOPE": OPERATOR_SCOPE,
        "PYTHONUNBUFFERED": "1",
    }
    command = [
        str(Path(sys.executable).with_name("user-memory")), "serve", "--port", "0", *arguments, "--verbose", "--worker"
    ]  # fmt: skip
    with log.open("w") as out:  # stdout and stderr: the service's JSON logs (--verbose) are read by tests
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    match = None
    while match is None and time.monotonic() < deadline and process.poll() is None:
        match = re.search(r"user-memory API on (http://\S+)", log.read_text())
        time.sleep(0.1)
    if match is None:
        process.kill()
        raise RuntimeError(f"user-memory serve did not start: {log.read_text()[-2000:]}")
    try:
        yield match.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def console(database_url: str, pool: ConnectionPool, tmp_path_factory) -> Iterator[Console]:
    """The console in development: no issuer, so it signs in with a token in its URL's fragment."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with _serve(database_url, log) as url:
        yield Console(url=url, issuer=None, pool=pool, log=log)


@pytest.fixture(scope="session")
def oidc_console(
    database_url: str, pool: ConnectionPool, oidc_issuer: OidcIssuer, tmp_path_factory
) -> Iterator[OidcConsole]:
    """The console as deployed: it signs in at the test issuer (whose tokens the API accepts too)."""
    log = tmp_path_factory.mktemp("serve-oidc") / "serve.log"
    with _serve(database_url, log, "--oidc-issuer", oidc_issuer.url, "--console-client-id", CLIENT_ID) as url:
        yield OidcConsole(url=url, issuer=oidc_issuer, pool=pool, log=log)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module: Playwright's sync API runs an event loop on this thread until it
    stops, and a later test's asyncio.run() (the MCP tests) would find it running."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = p.chromium.launch(executable_path=chromium_path(), args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda err: errors.append(str(err)))
    opened.errors = errors
    yield opened
    context.close()


@pytest.fixture
def user() -> str:
    return str(uuid.uuid4())


SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", "")) if os.environ.get("CONSOLE_SCREENSHOTS") else None


@pytest.fixture(scope="session")
def shots_dir(tmp_path_factory) -> Path:
    """Where each view's screenshot goes: $CONSOLE_SCREENSHOTS (docs/console for the docs), else a temp folder."""
    folder = (ROOT / SHOTS) if SHOTS is not None and not SHOTS.is_absolute() else SHOTS
    folder = folder or tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder

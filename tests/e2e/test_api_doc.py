"""docs/api.md's curl lines, run as written against `user-memory serve` (the companion schema), each
answering the status its comment says: the guide cannot drift from the API."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer
from user_memory_local.tokens import issue_token

from tests.doc_pages import code_blocks, shell_commands

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs/api.md"
SECRET = "api-doc-test-secret-of-at-least-32-bytes"
OPERATOR = "user-memory/operator"
# Each curl of the guide records its status instead of printing the answer.
PRELUDE = """
set -euo pipefail
curl() { command curl -s -o /dev/null -w '%{http_code}\\n' "$@" >> "$STATUSES"; }
"""


def sessions(path: Path) -> tuple[str, list[int]]:
    """The guide's sh blocks after its setup block, as one script, and each curl's expected status."""
    blocks = code_blocks(path, "sh")[1:]  # the first block starts the server: the test does that itself
    script = "\n".join(blocks)
    expected = []
    for command in curls(script):
        found = re.search(r"\s#\s+(\d{3})\b", command)
        assert found, f"a curl without its expected status: {command}"
        expected.append(int(found.group(1)))
    return script, expected


def curls(script: str) -> list[str]:
    return [c for c in shell_commands(script) if c.startswith("curl ")]


def test_the_expected_statuses_are_read_from_every_curl():
    script, expected = sessions(GUIDE)
    assert len(expected) == script.count("curl ") and len(expected) >= 46
    assert {200, 404, 405, 412} <= set(expected)


def test_every_curl_of_the_guide_answers_as_its_comment_says(pool: ConnectionPool, tmp_path):
    assert shutil.which("curl"), "curl is needed to run the guide as written"
    # Given the API on the companion schema, a new user and an operator, as the guide's setup makes them
    # (exports go to a folder, as under `serve`)
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "companion", "EXPORT_DIR": str(tmp_path / "exports")})
    api = create_api(build_api(settings, pool=pool), settings)
    me = str(uuid.uuid4())
    statuses = tmp_path / "statuses"
    script, expected = sessions(GUIDE)
    with ApiServer(api, secret=SECRET, port=0) as server:
        env = {
            **os.environ,
            "API": server.url,
            "ME": me,
            "H": f"Authorization: Bearer {issue_token(me, secret=SECRET)}",
            "OP": f"Authorization: Bearer {issue_token(uuid.uuid4(), secret=SECRET, scopes=[OPERATOR])}",
            "JSON": "Content-Type: application/json",
            "STATUSES": str(statuses),
        }
        # When the guide's curl lines run in order, as written
        ran = subprocess.run(
            ["bash", "-c", PRELUDE + script], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
        )
    assert ran.returncode == 0, ran.stderr
    # Then each answered the status its comment names
    answered = [int(line) for line in statuses.read_text().split()]
    commands = curls(script)
    mismatches = [(c[:110], e, a) for c, e, a in zip(commands, expected, answered, strict=True) if e != a]
    assert mismatches == []

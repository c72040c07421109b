"""The checkout a test run leaves behind, and the test tiers' own files: nothing untracked that git
does not ignore, and no conftest that holds nothing."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("written", [".schemathesis/reports/run.json", ".hypothesis/examples/x", ".pgdata/PG_VERSION"])
def test_what_make_test_writes_is_ignored_by_git(written: str):
    # Given a file `make test` writes into the checkout (schemathesis's reports, hypothesis's
    # examples, the embedded PostgreSQL); When git is asked about it; Then it is ignored
    done = subprocess.run(["git", "check-ignore", "--no-index", "-q", written], cwd=ROOT, check=False)
    assert done.returncode == 0, f"{written} would show up in `git status`"


def test_every_conftest_holds_fixtures_or_hooks():
    # Given every conftest.py of the test tiers
    empty = []
    for path in sorted((ROOT / "tests").rglob("conftest.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        # Then each holds something besides its docstring (an empty one is a place a reader looks in vain)
        code = [node for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        if not code:
            empty.append(str(path.relative_to(ROOT)))
    assert empty == []

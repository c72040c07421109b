"""The previous release, named by `.ci/previous-release` (a commit of this repository): its
migrations' names and its tree, for the checks that a deploy's two releases work on one schema
(tests/unit/test_expand_only.py, tests/e2e/test_previous_release.py).

The commit must be in the clone (CI clones the whole history); without it the checks fail under
CI=true, with a message saying how to fetch it, and are skipped elsewhere (a shallow clone).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMED_IN = ROOT / ".ci" / "previous-release"


def commit() -> str:
    """The previous release's commit (the file's one line that is not a comment)."""
    (sha,) = [line.strip() for line in NAMED_IN.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return sha


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def require() -> str:
    """The commit, once it is known to be in this clone; fails under CI=true, skips elsewhere."""
    sha = commit()
    if _git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
        message = (
            f"the previous release's commit {sha} (.ci/previous-release) is not in this clone: "
            f"fetch it (git fetch --unshallow, or git fetch origin {sha})"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return sha


def migration_names(sha: str) -> set[str]:
    """The names (NNN_name) of the previous release's migrations."""
    listed = _git("ls-tree", "--name-only", f"{sha}:migrations")
    assert listed.returncode == 0, listed.stderr.decode()
    return {Path(name).stem for name in listed.stdout.decode().split() if name.endswith(".sql")}


def extract(sha: str, into: Path) -> Path:
    """The previous release's tree written into `into` (git archive); returns `into`."""
    archive = _git("archive", "--format=tar", sha)
    assert archive.returncode == 0, archive.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into

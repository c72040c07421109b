"""Upgrades without downtime: during a deploy the previous release's functions keep running on the
schema this release's migrations made (the stack migrates first, then replaces the functions one by
one). So the previous release's API and worker end-to-end tests run here, with its own code, against
a database migrated by this checkout (its test fixtures then run its own `migrate`, which must accept
a database ahead of it).

The previous release is the commit in `.ci/previous-release`; its tree is extracted with `git archive`
and put first on PYTHONPATH, in a pytest of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from user_memory.adapters.migrations import load_migrations, migrate, packaged_migrations

from tests import owners, previous_release

pytestmark = pytest.mark.e2e

# The previous release's tests of the API and of the worker and fan-out (the daily job), by file.
# A subset keeps this short: the routes of every resource, the job's write, retry and failure paths.
PREVIOUS_TESTS = ("tests/e2e/test_api_routes.py", "tests/e2e/test_daily_job.py")
# Packages that live in folders of another name (pyproject.toml's package-dir), linked under their names.
LINKED = {"user_memory_functions": "functions", "user_memory_migrations": "migrations"}
DATABASE = "user_memory_previous_release"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's tree, extracted."""
    sha = previous_release.require()
    return previous_release.extract(sha, tmp_path_factory.mktemp("previous-release"))


@pytest.fixture(scope="module")
def new_schema(owner_mode: str, cluster_admin_url: str | None, database_url: str) -> Iterator[str]:
    """A database of its own, owned as the session's, migrated by this checkout's migrations."""
    if cluster_admin_url is None:  # DATABASE_URL: its owner creates the database
        admin = make_conninfo(database_url, dbname="postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            owners.drop_database(conn, DATABASE)
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        url = make_conninfo(database_url, dbname=DATABASE)
    else:
        admin = cluster_admin_url
        url = owners.create_database(cluster_admin_url, DATABASE, owner_mode)
    migrate(url)
    if cluster_admin_url is not None:
        owners.after_migrations(url, owner_mode)
    yield url
    with psycopg.connect(admin, autocommit=True) as conn:
        owners.drop_database(conn, DATABASE)


def previous_environment(previous: Path, links: Path, database: str) -> dict[str, str]:
    """The environment of a Python whose imports find the previous release's packages first."""
    for package, folder in LINKED.items():
        (links / package).symlink_to(previous / folder, target_is_directory=True)
    path = [previous / "layers" / "core", previous / "local", links, previous / "clients" / "python"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "USER_MEMORY_TEST"))}
    return {**env, "PYTHONPATH": os.pathsep.join(map(str, path)), "DATABASE_URL": database}


def test_the_previous_releases_api_and_worker_pass_their_end_to_end_tests_on_this_schema(
    previous, new_schema, tmp_path
):
    # Given a database migrated by this checkout, and the previous release's code and tests
    env = previous_environment(previous, tmp_path, new_schema)
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import user_memory, user_memory_functions, user_memory_migrations as m; "
            "print(user_memory.__file__, user_memory_functions.__path__[0], m.__path__[0])",
        ],  # fmt: skip
        cwd=previous,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # (the packages imported are the previous release's, not this checkout's)
    assert all(Path(p).resolve().is_relative_to(previous.resolve()) for p in where.stdout.split()), where.stdout
    with psycopg.connect(new_schema) as conn:
        applied = [r[0] for r in conn.execute("SELECT name FROM user_memory_migrations ORDER BY name")]
    assert applied == [m.name for m in load_migrations(packaged_migrations())]
    # When its API and worker end-to-end tests run against that database
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PREVIOUS_TESTS],
        cwd=previous,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    # Then they pass: this release's migrations only expanded the schema the previous code uses
    assert run.returncode == 0, (
        f"the previous release's tests failed on this schema:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    )
    # And its own migrate accepted the database ahead of it, leaving every record as it was
    with psycopg.connect(new_schema) as conn:
        after = [r[0] for r in conn.execute("SELECT name FROM user_memory_migrations ORDER BY name")]
    assert after == applied

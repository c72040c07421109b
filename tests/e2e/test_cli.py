"""The command line a person meets: `user-memory` end to end, its errors, and the demo."""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql
from user_memory.domain.memory.repository import MemoryStore
from user_memory_local import cli, command, demo, embedded
from user_memory_local.poller import LambdaSqsPoller, create_queues

from tests.e2e.helpers import assert_one_error_line, new_database, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("cli_env")]

UNREACHABLE = "postgresql://user-memory@127.0.0.1:1/nothing_here"
ROOT = Path(__file__).resolve().parents[2]


def report_value(report: str, label: str) -> str:
    return next(line[len(label) :].strip() for line in report.splitlines() if line.startswith(label))


@pytest.fixture(scope="module")
def demo_url(database_url: str) -> Iterator[str]:
    """The demos' own migrated database: the fan-out takes every user with unsummarized activity,
    so sharing the session's database would mix other tests' users into the demo (and back)."""
    with new_database(database_url, f"user_memory_cli_demo_{os.getpid()}", migrated=True) as url:
        yield url


@pytest.fixture
def fresh_url(database_url: str) -> Iterator[str]:
    """A migrated, empty database for one test."""
    with new_database(database_url, f"user_memory_cli_fresh_{os.getpid()}", migrated=True) as url:
        yield url


@pytest.fixture
def unmigrated_url(database_url: str) -> Iterator[str]:
    with new_database(database_url, f"user_memory_cli_bare_{os.getpid()}", migrated=False) as url:
        yield url


def count_rows(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


# -- bad input: one line, no traceback -------------------------------------------------------------

USER = "4f8a3c9e-1b2d-4e5f-8a7b-9c0d1e2f3a4b"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["demo", "--date", "2026-13-45"], "not a valid date (YYYY-MM-DD): '2026-13-45'"),
        (["demo", "--date", "yesterday"], "not a valid date"),
        (["demo", "--date", "0001-01-01"], "between 1970-01-02 and 9998-12-31"),
        (["demo", "--users", "0"], "--users: the number of users must be at least 1, got 0"),
        (["demo", "--users", "-5"], "must be at least 1, got -5"),
        (["demo", "--users", "many"], "must be a whole number, got 'many'"),
        (["demo", "--summarizer", "gpt"], "invalid choice: 'gpt'"),
        (["history", USER, "--limit", "0"], "--limit: the limit must be at least 1, got 0"),
        (["history", USER, "--before", "-1"], "--before: the version must be at least 1, got -1"),
        (["history", USER, "--before", "99999999999"], "--before: the version must be at most 2147483647, got 999"),
        (["show", USER, "--version", "-1"], "--version: a version must be at least 0, got -1"),
        (["diff", USER, "-1", "2"], "a version must be at least 0, got -1"),
        (["diff", USER, "1"], "the following arguments are required: B"),
        (["show", "not-a-uuid"], "not a user id (a UUID): 'not-a-uuid'"),
        (["show", USER, "--database-url", "nonsense"], "is not a PostgreSQL connection string"),
        (["demo", "--database-url", ""], "the database URL is empty"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        # an option is never taken by a prefix: --user is not --users
        (["demo", "--user", "10"], "unrecognized arguments: --user 10 (did you mean --users?)"),
        (["search", USER, "Rust", "--mo", "fts"], "unrecognized arguments: --mo fts"),
        # an unknown option is reported by the command it was given to, with that command's help
        (["serve", "--prot", "8081"], "--prot 8081 (did you mean --port?) (see `user-memory serve --help`)"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_are_one_error_line(capsys, argv, fragment):
    # Given a command line that cannot be right
    # When it is run
    result = run(capsys, *argv)
    # Then it says why on one line, exits 2 like argparse, and prints nothing else
    assert_one_error_line(result, fragment)
    assert result.code == 2
    assert result.out == ""


def test_a_password_in_a_bad_database_url_is_not_echoed(capsys):
    # Given a malformed connection string that contains a password
    result = run(capsys, "show", USER, "--database-url", "host=db password=s3cret port")
    # Then the error does not repeat it
    assert_one_error_line(result, "not a PostgreSQL connection string")
    assert "s3cret" not in result.err


def test_a_bad_database_url_in_the_environment_is_one_error_line(capsys, monkeypatch):
    # Given DATABASE_URL that is not a connection string
    monkeypatch.setenv("DATABASE_URL", "nonsense")
    # When a command needs the database
    result = run(capsys, "show", USER)
    # Then it names the variable
    assert_one_error_line(result, "DATABASE_URL is not a PostgreSQL connection string")


@pytest.mark.parametrize(
    "argv", [["show", USER], ["migrate"], ["erase", USER], ["demo", "--users", "3", "--summarizer", "rules", "--quiet"]]
)
def test_an_unreachable_database_is_one_error_line(capsys, argv):
    # Given a server that refuses connections
    # When any command needs it
    result = run(capsys, *argv, "--database-url", UNREACHABLE)
    # Then the driver's reason is the one line
    assert_one_error_line(result, "database unavailable", "Connection refused")
    assert result.code == 1


def test_an_unmigrated_database_says_to_migrate_then_migrate_fixes_it(capsys, unmigrated_url):
    # Given a database without the schema
    # When a user is shown
    result = run(capsys, "show", USER, "--database-url", unmigrated_url)
    # Then the error says what to do
    assert_one_error_line(result, f"run `{command.cli_command()} migrate`")
    # When it is migrated, twice
    first = run(capsys, "migrate", "--database-url", unmigrated_url)
    second = run(capsys, "migrate", "--database-url", unmigrated_url)
    # Then the first applies every migration, the second nothing, and the user is now merely unknown
    assert first.code == 0 and first.out.startswith("applied ") and "001_platform" in first.out
    assert second.code == 0 and second.out.splitlines()[0] == "database is up to date"
    assert_one_error_line(run(capsys, "show", USER, "--database-url", unmigrated_url), "has no memory yet")


# -- users and versions --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["show"], ["show", "--version", "0"], ["history"], ["diff", "0", "1"]])
def test_an_unknown_user_says_so(capsys, database_url, argv):
    # Given a user with no memory
    user = str(uuid.uuid4())
    # When it is shown, listed or diffed
    command, *rest = argv
    result = run(capsys, command, user, *rest, "--database-url", database_url)
    # Then the one line says the user has no memory
    assert_one_error_line(result, f"user {user} has no memory yet")
    assert result.out == ""


def test_show_prints_json_with_null_for_missing_values(capsys, database_url, store: MemoryStore):
    # Given a user with one version
    user = str(uuid.uuid4())
    store.append(user, {"summary": "likes walks"}, expected_version=0, source="test")
    # When version 0 (the empty document) and the head are shown
    v0 = run(capsys, "show", user, "--version", "0", "--database-url", database_url)
    head = run(capsys, "show", user, "--database-url", database_url)
    # Then both are JSON; version 0 has no creation time or source: null, not "None"
    assert v0.code == 0 and head.code == 0
    shown0, shown1 = json.loads(v0.out), json.loads(head.out)
    assert shown0 == {"user_id": user, "version": 0, "head": 1, "created_at": None, "source": None, "document": {}}
    assert "None" not in v0.out
    assert shown1["version"] == 1 and shown1["document"] == {"summary": "likes walks"}
    assert shown1["source"] == "test" and shown1["created_at"].startswith("20")


def test_missing_versions_name_the_range_that_exists(capsys, database_url, store: MemoryStore):
    # Given a user with two versions
    user = str(uuid.uuid4())
    store.append(user, {"summary": "a"}, expected_version=0, source="test")
    store.append(user, {"summary": "b"}, expected_version=1, source="test")
    # When a version past the head is shown or diffed
    shown = run(capsys, "show", user, "--version", "7", "--database-url", database_url)
    diffed = run(capsys, "diff", user, "0", "9", "--database-url", database_url)
    # Then the message names the versions that exist
    assert_one_error_line(shown, f"user {user} has no version 7 (versions 0..2 exist)")
    assert_one_error_line(diffed, "has no version 9 (versions 0..2 exist)")
    # And the versions that exist diff and list fine
    diff = run(capsys, "diff", user, "1", "2", "--database-url", database_url)
    history = run(capsys, "history", user, "--database-url", database_url)
    assert json.loads(diff.out) == [{"op": "replace", "path": "/summary", "value": "b"}]
    assert [line.split()[0] for line in history.out.splitlines()] == ["v2", "v1"]


def test_erase_prints_what_was_removed_and_the_user_is_gone(capsys, database_url, store: MemoryStore):
    # Given a user with a version
    user = str(uuid.uuid4())
    store.append(user, {"summary": "forget me"}, expected_version=0, source="test")
    # When the user is erased, twice
    first = run(capsys, "erase", user, "--database-url", database_url)
    again = run(capsys, "erase", user, "--database-url", database_url)
    # Then the first removal is printed as JSON, the second removes nothing and says so, and the user is unknown
    assert first.code == 0
    removed = json.loads(first.out)
    assert removed["user_id"] == user
    assert removed["removed"]["user_memory_heads"] == 1 and removed["removed"]["user_memory_snapshots"] == 1
    assert again.code == 0 and not any(json.loads(again.out)["removed"].values())
    assert "nothing was removed" in again.err and "error" not in again.err
    assert_one_error_line(run(capsys, "show", user, "--database-url", database_url), "has no memory yet")
    # And each erase stored a receipt naming the CLI, listed newest first by the user's id
    assert removed["receipt"]["requested_by"] == "cli" and removed["receipt"]["deleted"] == removed["removed"]
    listed = run(capsys, "erasures", "--user", user, "--database-url", database_url)
    receipts = json.loads(listed.out)
    assert [r["id"] for r in receipts] == [json.loads(again.out)["receipt"]["id"], removed["receipt"]["id"]]
    assert user not in listed.out and "forget me" not in listed.out


# -- configuration is checked first ---------------------------------------------------------------


def test_openai_without_a_key_fails_before_anything_is_written(capsys, monkeypatch, fresh_url):
    # Given no OpenAI key or endpoint
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY_SECRET_NAME", "OPENAI_API_KEY_PARAMETER"):
        monkeypatch.delenv(name, raising=False)
    # When the demo is asked for 1,000 users with the OpenAI summarizer
    result = run(capsys, "demo", "--summarizer", "openai", "--users", "1000", "--database-url", fresh_url)
    # Then it fails on the configuration, and nothing was seeded
    assert_one_error_line(result, "OPENAI_API_KEY")
    assert count_rows(fresh_url, "user_activity") == 0
    assert count_rows(fresh_url, "users") == 0


def test_configuration_is_checked_before_the_database_is_touched(capsys, monkeypatch):
    # Given an invalid setting and a database that cannot be reached
    monkeypatch.setenv("USERS_PER_MESSAGE", "0")
    # When the demo runs
    result = run(capsys, "demo", "--database-url", UNREACHABLE)
    # Then the configuration is what fails (the database was never tried)
    assert_one_error_line(result, "invalid configuration", "USERS_PER_MESSAGE")


# -- failures nobody planned for ------------------------------------------------------------------


def test_ctrl_c_is_interrupted_and_exit_130(capsys, monkeypatch, demo_url):
    # Given a demo interrupted while seeding
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "seed", interrupted)
    # When it runs
    result = run(capsys, "demo", "--users", "5", "--summarizer", "rules", "--quiet", "--database-url", demo_url)
    # Then it says so on one line and exits 130
    assert_one_error_line(result, "interrupted")
    assert result.code == 130


def test_ctrl_c_in_any_command_is_interrupted(capsys, monkeypatch):
    # Given a command interrupted while it runs
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_show", interrupted)
    # When it runs
    result = run(capsys, "show", USER)
    # Then it says so on one line and exits 130
    assert_one_error_line(result, "interrupted")
    assert result.code == 130


def test_an_unexpected_error_is_one_line_with_its_type_and_a_traceback_only_in_debug(capsys, monkeypatch):
    # Given a command that fails with an error nobody named
    def broken(args):
        raise RuntimeError("boom\nsecond line of detail")

    monkeypatch.setattr(cli, "cmd_show", broken)
    # When it runs, then with USER_MEMORY_DEBUG=1
    plain = run(capsys, "show", USER)
    monkeypatch.setenv("USER_MEMORY_DEBUG", "1")
    debug = run(capsys, "show", USER)
    # Then the plain run prints one line with the error's type; the debug run adds the traceback
    assert_one_error_line(plain, "error: RuntimeError: boom")
    assert "second line" not in plain.err
    assert debug.code == 1 and "Traceback" in debug.err
    assert debug.err.strip().splitlines()[-1] == "error: RuntimeError: boom"


def test_help_exits_zero(capsys):
    # Given --help, When it runs, Then the commands are listed on stdout and the exit status is 0
    result = run(capsys, "--help")
    assert result.code == 0 and "erase" in result.out and result.err == ""


# -- the embedded database's home ------------------------------------------------------------------


def test_the_data_directory_does_not_depend_on_the_current_directory(tmp_path, monkeypatch):
    # Given USER_MEMORY_HOME
    monkeypatch.setenv("USER_MEMORY_HOME", str(tmp_path / "home"))
    # When the data directory is asked for from two working directories
    seen = set()
    for cwd in (tmp_path, tmp_path / "elsewhere"):
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        seen.add(embedded.default_data_dir())
    # Then it is the same one, under USER_MEMORY_HOME
    assert seen == {tmp_path / "home" / "pgdata"}


def test_the_default_home_is_the_user_data_directory(tmp_path, monkeypatch):
    # Given no USER_MEMORY_HOME, a home directory and no XDG_DATA_HOME
    monkeypatch.delenv("USER_MEMORY_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    # Then the data directory is in the user's data directory, not in the working directory
    path = embedded.default_data_dir()
    assert path.name == "pgdata" and path.parent.name == "user-memory"
    assert path.is_relative_to(tmp_path) and path.parent != tmp_path
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert path == tmp_path / ".local" / "share" / "user-memory" / "pgdata"


def test_start_embedded_uses_the_home_when_given_no_directory(tmp_path, monkeypatch, database_url):
    # Given USER_MEMORY_HOME and a pgserver that records where it is asked to run
    import pgserver

    monkeypatch.setenv("USER_MEMORY_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    started: list[Path] = []

    class Server:
        def get_uri(self, database: str | None = None) -> str:
            return database_url

    def get_server(path, cleanup_mode=None):
        started.append(Path(path))
        return Server()

    monkeypatch.setattr(pgserver, "get_server", get_server)
    # When the embedded server is started without a directory
    dbname = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    _, dsn = embedded.start_embedded(database=str(dbname))
    # Then it runs in $USER_MEMORY_HOME/pgdata
    assert started == [tmp_path / "home" / "pgdata"]
    assert (tmp_path / "home" / "pgdata").is_dir()
    assert dsn == database_url


def test_the_cli_finds_the_same_embedded_database_from_any_directory(capsys, tmp_path, monkeypatch, database_url):
    # Given no database URL, USER_MEMORY_HOME, and an embedded server that records its directory
    monkeypatch.setenv("USER_MEMORY_HOME", str(tmp_path / "home"))
    started: list[Path] = []

    def start(data_dir=None, database="user_memory"):
        started.append(Path(data_dir) if data_dir else embedded.default_data_dir())
        return None, database_url

    monkeypatch.setattr(embedded, "start_embedded", start)
    # When the CLI runs from two directories
    for cwd in (tmp_path, tmp_path / "elsewhere"):
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        assert_one_error_line(run(capsys, "show", USER), "has no memory yet")
    # Then both runs used the same data directory
    assert started == [tmp_path / "home" / "pgdata"] * 2


def test_an_embedded_server_that_cannot_start_is_one_error_line(capsys, tmp_path, monkeypatch):
    # Given a home where no directory can be created
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("USER_MEMORY_HOME", str(blocker))
    # When a command needs the embedded database
    result = run(capsys, "show", USER)
    # Then the one line names the directory and the way out
    assert_one_error_line(result, str(blocker / "pgdata"), "USER_MEMORY_HOME")


# -- the demo ------------------------------------------------------------------------------------


def emf_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('{"_aws"')]


def test_the_demo_runs_quietly_and_a_rerun_writes_nothing(capsys, demo_url):
    # Given metrics left over by earlier invocations in this process (Powertools shares them
    # across instances and, with metrics disabled, never clears them): one more value would
    # make add_metric print its EMF blob
    from user_memory.observability import logger, metrics

    for _ in range(99):
        metrics.add_metric(name="Users_written", unit="Count", value=1)
    # And the service's Logger at INFO (it reads POWERTOOLS_LOG_LEVEL when it is first imported)
    service = logging.getLogger(logger.name)
    level = service.level
    service.setLevel(logging.INFO)
    # When the demo runs for 20 users, then again for the same day
    argv = ["demo", "--users", "20", "--date", "2026-11-20", "--summarizer", "rules", "--database-url", demo_url]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = run(capsys, *argv)
            again = run(capsys, *argv, "--quiet")
    finally:
        service.setLevel(level)
    # Then every seeded user (also those active only the day before) got exactly one version
    assert first.code == 0, first.err
    assert report_value(first.out, "users active (to summarize)") == "20"
    assert report_value(first.out, "versions written") == "20"
    assert report_value(first.out, "in DLQ") == "0"
    assert "latest patch:" in first.out
    # And the sample version says why it changed: its edits, each naming the activity it folds in
    why = re.search(r"^why \((\d+) edits applied, 0 refused\):$", first.out, re.M)
    assert why is not None and int(why.group(1)) > 0
    reasons = first.out[why.end() :].split("\n\n")[0].strip().splitlines()
    assert len(reasons) == int(why.group(1))
    assert all(re.search(r": (folds in \w+ activity \d+|counts the activity it folds in: .+)$", r) for r in reasons)
    # And the rerun found nobody to summarize and wrote 0 versions
    assert again.code == 0, again.err
    assert report_value(again.out, "activities seeded").endswith("(0 new)")
    assert report_value(again.out, "users active (to summarize)") == "0"
    assert report_value(again.out, "versions written") == "0"
    # And neither printed metric JSON, log lines, warnings or tracebacks; progress went to
    # stderr, except with --quiet
    for result in (first, again):
        assert emf_lines(result.out) == [] and emf_lines(result.err) == []
        assert '"level"' not in result.out + result.err
        assert "Traceback" not in result.err and "Warning" not in result.err
    assert all(name in first.err for name in ("seed", "fan-out", "worker"))
    assert again.err == ""
    hidden_by_default = DeprecationWarning | PendingDeprecationWarning | ResourceWarning
    shown = [w for w in caught if not issubclass(w.category, hidden_by_default)]
    assert shown == [], [str(w.message) for w in shown]


def test_the_demos_see_more_command_works_when_pasted_into_the_same_shell(demo_url):
    # Given the installed `user-memory` run as `make demo` runs it, from the checkout, with the
    # virtual environment's bin/ not on PATH (nobody activated it)
    bin_dir = Path(sys.executable).parent
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if Path(d) != bin_dir)
    env = {**os.environ, "PATH": path, "DATABASE_URL": demo_url}
    env.pop("POWERTOOLS_LOG_LEVEL", None)
    argv = ["demo", "--users", "3", "--date", "2026-11-10", "--summarizer", "rules", "--quiet"]
    demo_run = subprocess.run(
        [str(bin_dir / "user-memory"), *argv], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert demo_run.returncode == 0, demo_run.stderr
    # When its last line's command is pasted into that shell
    last = demo_run.stdout.strip().splitlines()[-1]
    assert last.startswith("see more: "), last
    pasted = last.removeprefix("see more: ")
    assert shlex.split(pasted)[0] != "user-memory"  # that name is not on this PATH
    result = subprocess.run(pasted, shell=True, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    # Then it runs and lists the user's history
    assert result.returncode == 0, (pasted, result.stderr)
    assert "daily summary 2026-11-10" in result.stdout.splitlines()[0], result.stdout


def test_the_command_the_hints_print_is_the_bare_name_when_it_is_on_path(monkeypatch, tmp_path):
    # Given this installation's bin/ on PATH (an activated virtual environment)
    bin_dir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]))
    assert command.cli_command() == "user-memory"
    # And given a PATH without it, from a directory outside the checkout: the absolute path
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert command.cli_command() == str((bin_dir / "user-memory").absolute())


def test_run_demo_takes_the_handlers_it_is_given(capsys, demo_url):
    # Given the real handlers, wrapped to count their invocations, and a stack composed here
    from user_memory_functions.fanout.app import handler as fanout_handler
    from user_memory_functions.worker.app import handler as worker_handler

    calls = {"fanout": 0, "worker": 0}

    def counted(name, handler):
        @functools.wraps(handler)
        def invoke(event, context, *, services):
            calls[name] += 1
            return handler(event, context, services=services)

        return invoke

    worker_settings, fanout_settings = demo.demo_settings(summarizer="rules", environ={})
    out = io.StringIO()
    # When the demo runs for 15 users on that stack
    with demo.local_stack(demo_url, worker_settings=worker_settings, fanout_settings=fanout_settings) as stack:
        code = demo.run_demo(
            stack,
            fanout_handler=counted("fanout", fanout_handler),
            worker_handler=counted("worker", worker_handler),
            users=15,
            day=date(2026, 11, 21),
            progress=False,
            out=out,
            seed_value=7,
        )
    # Then the given handlers did the work the report shows, and stdout stayed empty
    report = out.getvalue()
    assert code == 0
    assert calls == {"fanout": 1, "worker": int(report_value(report, "worker invocations"))}
    assert report_value(report, "versions written") == "15"
    assert emf_lines(report) == []
    assert capsys.readouterr().out == ""


def test_the_poller_moves_a_failing_message_to_the_dlq_on_its_fifth_receive():
    # Given the queues as the template declares them and a handler that always fails
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs, name="poller-test")
        sqs.send_message(QueueUrl=queue_url, MessageBody="{}")

        def failing(event, context):
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}

        # When the queue is drained
        report = LambdaSqsPoller(sqs, queue_url, dlq_url, failing).drain()
        attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
        in_dlq = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    # Then it was tried 5 times (maxReceiveCount's default) before it moved to the DLQ
    assert (report.invocations, report.failed_attempts, report.to_dlq, report.succeeded) == (5, 5, 1, 0)
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] in (5, "5")
    assert in_dlq["Attributes"]["ApproximateNumberOfMessages"] == "1"


def test_search_and_reindex_from_the_command_line(capsys, fresh_url, monkeypatch):
    monkeypatch.delenv("EMBEDDING_MODEL", raising=False)
    # Given a user whose memory mentions a passport, and whose index was then left behind
    user = uuid.uuid4()
    from user_memory.adapters.postgres import PostgresRecorder, open_pool

    pool = open_pool(fresh_url)
    try:
        store = MemoryStore(PostgresRecorder(pool))
        store.append(user, {"summary": "renewing a passport before a trip"}, expected_version=0, source="test")
        store.append(user, {"summary": "renewing a passport", "safety_notes": "none"}, expected_version=1, source="t")
    finally:
        pool.close()
    # When the CLI searches it (full text: no embeddings configured)
    found = run(capsys, "search", str(user), "passports", "--database-url", fresh_url)
    # Then the item is found with its pointer and the version that last changed it
    assert found.code == 0, found.err
    body = json.loads(found.out)
    assert body["mode"] == "fts"
    assert [(i["path"], i["version"]) for i in body["items"]] == [("/summary", 2)]
    # When the index is set behind, reindex brings it back
    with psycopg.connect(fresh_url, autocommit=True) as conn:
        conn.execute("DELETE FROM memory_items WHERE user_id = %s", (user,))
        conn.execute("UPDATE user_memory_heads SET indexed_version = 0 WHERE user_id = %s", (user,))
    assert json.loads(run(capsys, "search", str(user), "passport", "--database-url", fresh_url).out)["items"] == []
    reindexed = run(capsys, "reindex", "--database-url", fresh_url)
    assert reindexed.code == 0 and json.loads(reindexed.out)["reindexed"] == 1
    again = json.loads(run(capsys, "search", str(user), "passport", "--database-url", fresh_url).out)
    assert [i["path"] for i in again["items"]] == ["/summary"]
    # And bad input is one error line
    assert_one_error_line(
        run(capsys, "search", str(user), "x", "--mode", "vector", "--database-url", fresh_url), "embeddings"
    )
    assert_one_error_line(run(capsys, "reindex", "--user", str(uuid.uuid4()), "--database-url", fresh_url))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["   "], "QUERY must not be empty"),
        (["x" * 501], "QUERY must be at most 500 characters"),
        (["walks", "--k", "101"], "--k must be between 1 and 100"),
        (["walks", "--k", "0"], "--k: k must be at least 1, got 0"),
    ],
)
def test_search_names_the_argument_as_it_was_typed(capsys, argv, message):
    # Given a search whose query or --k is out of bounds (and a database that is not even there)
    result = run(capsys, "search", USER, *argv, "--database-url", UNREACHABLE)
    # Then the one line names QUERY or --k, never the API's q and k, and exits 2 like any usage error
    assert_one_error_line(result, message)
    assert result.code == 2 and result.out == ""


def test_searching_an_unknown_user_says_so_as_show_does(capsys, fresh_url):
    # Given a user who has no memory
    user = str(uuid.uuid4())
    # When the user is searched, and shown
    searched = run(capsys, "search", user, "walks", "--database-url", fresh_url)
    shown = run(capsys, "show", user, "--database-url", fresh_url)
    # Then both say so on the same one line, and neither exits 0
    assert_one_error_line(searched, f"user {user} has no memory yet")
    assert searched.err == shown.err and searched.code == shown.code == 1
    assert searched.out == ""


def test_history_before_a_version_past_any_is_refused_by_the_store_too(store: MemoryStore):
    # Given the store itself (the CLI refuses the number before it gets there)
    from user_memory.errors import InvalidArgument

    # When a page is asked for before a version no PostgreSQL integer can hold
    # Then it is a typed error naming the cursor, not the database's "integer out of range"
    with pytest.raises(InvalidArgument, match="before must be a version from 1 to 2147483647"):
        store.history(uuid.uuid4(), limit=5, before_version=99_999_999_999)


# -- what goes to stdout: the result, and only the result ---------------------------------------------


def cli_subprocess(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command as a person runs it (its own process: the log handler's stream is the real stdout)."""
    return subprocess.run(
        [sys.executable, "-m", "user_memory_local.cli", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_reindex_prints_its_json_result_alone_on_stdout_and_its_log_line_on_stderr(fresh_url):
    # Given the service's logs at INFO, where reindex logs its "index upkeep" line
    env = {**os.environ, "POWERTOOLS_LOG_LEVEL": "INFO"}
    env.pop("DATABASE_URL", None)
    # When reindex runs
    result = cli_subprocess("reindex", "--database-url", fresh_url, env=env)
    # Then stdout is exactly its JSON result, so `| jq` works
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"reindexed": 0, "reindex_failed": 0, "orphan_vectors": 0}
    # And the log line went to stderr, where logs belong
    assert '"message":"index upkeep"' in result.stderr


def test_without_a_log_level_a_command_prints_no_log_lines_at_all(fresh_url):
    env = {k: v for k, v in os.environ.items() if k not in ("POWERTOOLS_LOG_LEVEL", "DATABASE_URL")}
    result = cli_subprocess("reindex", "--database-url", fresh_url, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reindexed"] == 0
    assert '"level"' not in result.stdout + result.stderr


def test_run_report_prints_a_runs_totals(capsys, database_url, store: MemoryStore):
    # Given a run that wrote a version with its tokens and cost
    from tests.browser.seed import nightly_provenance

    user, run_key = uuid.uuid4(), f"daily:{uuid.uuid4().hex[:8]}"
    provenance = nightly_provenance([("add", "/a", "r")], [], 2_400)
    store.append(user, {"summary": "s"}, expected_version=0, source="s", idempotency_key=run_key, provenance=provenance)
    # When an operator asks for the run's report
    result = run(capsys, "run-report", run_key, "--database-url", database_url)
    # Then it prints the totals as JSON
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert (body["run_key"], body["users"], body["tokens"], body["cost_usd"]) == (run_key, 1, 2_400, 0.00045)
    assert body["first_written_at"] == body["last_written_at"] is not None


def test_runs_lists_a_run_and_run_revert_undoes_it_here(capsys, database_url, store: MemoryStore):
    # Given a run that rewrote two users' summaries, one of whom then rewrote it again
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    users = [uuid.uuid4(), uuid.uuid4()]
    for user in users:
        store.append(user, {"summary": "kept"}, expected_version=0, source="api")
        store.append(user, {"summary": "lost"}, expected_version=1, source="s", idempotency_key=run_key)
    store.append(users[1], {"summary": "mine"}, expected_version=2, source="api")
    # When an operator lists the runs
    listed = run(capsys, "runs", "--limit", "100", "--database-url", database_url)
    assert listed.code == 0, listed.err
    assert run_key in [r["run_key"] for r in json.loads(listed.out)]
    # And undoes that run
    result = run(capsys, "run-revert", run_key, "--database-url", database_url)
    # Then it prints the report: one user reverted, one conflict naming the summary
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["done"], report["reverted"], report["conflict"]) == (True, 1, 1)
    assert report["conflicts"] == [{"user_id": str(users[1]), "paths": ["/summary"]}]
    assert store.head(users[0]).document == {"summary": "kept"}
    # And the report reads the same afterwards
    again = run(capsys, "run-revert-status", report["revert_id"], "--database-url", database_url)
    assert json.loads(again.out)["reverted"] == 1


def test_export_and_import_round_trip_and_an_import_never_lands_on_a_memory(capsys, database_url, store, tmp_path):
    # Given a user with three versions
    user, importer = str(uuid.uuid4()), str(uuid.uuid4())
    for n in range(3):
        store.append(user, {"summary": f"v{n + 1}"}, expected_version=n, source="test")
    out = tmp_path / "export.jsonl"
    # When it is exported to a file and imported under another id
    exported = run(capsys, "export", user, "--out", str(out), "--database-url", database_url)
    imported = run(capsys, "import", str(out), importer, "--database-url", database_url)
    # Then the import reports the versions, and each reads as the original
    assert exported.code == 0 and "exported 3 versions" in exported.err
    assert imported.code == 0 and json.loads(imported.out)["versions"] == 3
    for v in (1, 2, 3):
        assert store.at(importer, v).document == store.at(user, v).document
    # And importing again (a memory that is not empty) or a truncated file is one error line
    assert_one_error_line(run(capsys, "import", str(out), importer, "--database-url", database_url), "empty memory")
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:-1]))
    other = str(uuid.uuid4())
    assert_one_error_line(run(capsys, "import", str(truncated), other, "--database-url", database_url), "truncated")
    assert store.head(other).version == 0  # one transaction: nothing written

"""user-memory: versioned per-user memory on PostgreSQL, from the command line.

The database is --database-url, else $DATABASE_URL, else an embedded PostgreSQL in
$USER_MEMORY_HOME/pgdata (USER_MEMORY_HOME defaults to the user data directory,
~/.local/share/user-memory on Linux). Errors are one line on stderr starting with "error:";
set USER_MEMORY_DEBUG=1 for a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, NoReturn

import psycopg
from user_memory.errors import ConfigError, InvalidArgument, StorageError, UnknownUser, UserMemoryError

from user_memory_local.logs import service_logs_to

if TYPE_CHECKING:
    from user_memory.domain.memory.repository import MemoryStore
    from user_memory.domain.model import MemoryVersion

PROG = "user-memory"
DEBUG_ENV = "USER_MEMORY_DEBUG"
CONNECT_TIMEOUT_SECONDS = 10
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Embedded servers stop when their last handle goes; the CLI holds them until it exits.
_KEEP_ALIVE: list[Any] = []


class UsageError(Exception):
    """The command line itself is wrong (reported like argparse would, on one line)."""


# -- argument types: checked while parsing, before anything runs -----------------------------------


def _int_at_least(minimum: int, what: str, maximum: int | None = None) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {n}")
        if maximum is not None and n > maximum:
            raise argparse.ArgumentTypeError(f"{what} must be at most {maximum}, got {n}")
        return n

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def _number_between(low: float, high: float, what: str, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number in [low, high] (or (low, high] with `low_open`)."""

    def parse(value: str) -> float:
        try:
            n = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {value!r}") from None
        if not math.isfinite(n) or n > high or (n <= low if low_open else n < low):
            bound = f"above {low:g}" if low_open else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{what} must be {bound} and at most {high:g}, got {value}")
        return n

    parse.__name__ = what
    return parse


def _day(value: str) -> date:
    try:
        day = datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a valid date (YYYY-MM-DD): {value!r}") from None
    if not date(1970, 1, 2) <= day <= date(9998, 12, 31):
        raise argparse.ArgumentTypeError(f"the date must be between 1970-01-02 and 9998-12-31, got {value}")
    return day


def _dsn(value: str) -> str:
    """A PostgreSQL connection string (URI or key=value); its text is never echoed (passwords)."""
    check_dsn(value, "the database URL")
    return value


def check_dsn(value: str, what: str) -> None:
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{what} is empty")
    try:
        psycopg.conninfo.conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        raise argparse.ArgumentTypeError(
            f"{what} is not a PostgreSQL connection string "
            "(expected postgresql://user@host:port/dbname or 'host=... dbname=...')"
        ) from None


def _user(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a user id (a UUID): {value!r}") from None


_users = _int_at_least(1, "the number of users")
_limit = _int_at_least(1, "the limit")
_version = _int_at_least(0, "a version")


def _before(value: str) -> int:
    from user_memory.domain.model import MAX_VERSION  # the domain's bounds, loaded only when asked for

    return _int_at_least(1, "the version", MAX_VERSION)(value)


def _threshold(value: str) -> int:
    from user_memory.domain.conversations.model import MAX_INACTIVITY_THRESHOLD_MINUTES

    return _int_at_least(1, "the threshold", MAX_INACTIVITY_THRESHOLD_MINUTES)(value)


def _refresh_interval(value: str) -> int:
    """--min-interval-seconds (and REFRESH_MIN_INTERVAL_SECONDS) within the API's bounds: 1 to 86400."""
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not 1 <= seconds <= 86_400:
        raise argparse.ArgumentTypeError("the minimum interval is 1 to 86400 seconds")
    return seconds


def _queue_url(value: str) -> str:
    from user_memory.adapters.sqs import parse_queue_url

    try:
        parse_queue_url(value)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value.strip()


def _port(value: str) -> int:
    port = _int_at_least(0, "the port")(value)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"the port must be at most 65535, got {port}")
    return port


# -- the database --------------------------------------------------------------------------------


def _with_connect_timeout(dsn: str) -> str:
    """An unreachable host fails after CONNECT_TIMEOUT_SECONDS unless the DSN or PGCONNECT_TIMEOUT says otherwise."""
    if "connect_timeout" in psycopg.conninfo.conninfo_to_dict(dsn) or os.environ.get("PGCONNECT_TIMEOUT"):
        return dsn
    return psycopg.conninfo.make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_SECONDS)


def database_url(args: argparse.Namespace, *, migrate_embedded: bool = True) -> str:
    """--database-url, else $DATABASE_URL (both checked, then reachable), else the embedded
    server (started, and migrated unless the caller migrates: it is this tool's own)."""
    url = args.database_url or os.environ.get("DATABASE_URL")
    if url:
        try:
            check_dsn(url, "DATABASE_URL" if not args.database_url else "the database URL")
        except argparse.ArgumentTypeError as err:
            raise ConfigError(str(err)) from None
        url = _with_connect_timeout(url)
        _probe(url)
        return url
    from user_memory.adapters.migrations import migrate

    from user_memory_local.embedded import start_embedded

    server, dsn = start_embedded()
    _KEEP_ALIVE.append(server)
    if migrate_embedded:
        migrate(dsn)
    return dsn


def _probe(dsn: str) -> None:
    """Connect once: an unreachable server fails now, with the driver's reason."""
    from user_memory.adapters.postgres import translate

    try:
        psycopg.connect(dsn, autocommit=True).close()
    except psycopg.Error as err:
        raise translate(err) from err


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[MemoryStore]:
    from user_memory.adapters.postgres import PostgresRecorder, open_pool
    from user_memory.domain.memory.repository import MemoryStore

    pool = open_pool(database_url(args))
    try:
        yield MemoryStore(PostgresRecorder(pool))
    finally:
        pool.close()


def _known_head(store: MemoryStore, user: uuid.UUID) -> MemoryVersion:
    """The user's head; UnknownUser when no version was ever written."""
    head = store.head(user)
    if head.version == 0:
        raise UnknownUser(user)
    return head


def cmd_export(args: argparse.Namespace) -> int:
    """A user's JSON Lines (the async export's format) to a file or stdout, streamed."""
    from datetime import UTC

    from user_memory.adapters.exports import PostgresExports
    from user_memory.adapters.postgres import open_pool
    from user_memory.domain.export import ExportCounts, export_lines

    pool = open_pool(database_url(args))
    counts = ExportCounts()
    try:
        exports = PostgresExports(pool)
        now = datetime.now(UTC)
        lines = export_lines(
            args.user, now, exports.versions(args.user), exports.kv(args.user, now), exports.activity(args.user), counts
        )
        if args.out in (None, "-"):
            out = sys.stdout.buffer
            for line in lines:
                out.write(line)
            out.flush()
        else:
            with open(args.out, "wb") as f:
                for line in lines:
                    f.write(line)
    finally:
        pool.close()
    print(f"exported {counts.versions} versions, {counts.kv} entries, {counts.activity} activities", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """An export written back under USER (an empty memory), in one transaction."""
    from user_memory.adapters.exports import PostgresExports
    from user_memory.adapters.postgres import open_pool, transaction
    from user_memory.jobs.export import run_import

    pool = open_pool(database_url(args))
    try:
        with open(args.file, "rb") as f, transaction(pool) as tx:
            done = run_import(PostgresExports(tx), args.user, f)
    finally:
        pool.close()
    _print_json({"user_id": str(args.user), "versions": done.versions, "kv": done.kv})
    return 0


def cmd_erasures(args: argparse.Namespace) -> int:
    from user_memory.adapters.account import PostgresAccount
    from user_memory.adapters.postgres import open_pool

    pool = open_pool(database_url(args))
    try:
        found = PostgresAccount(pool).receipts(limit=args.limit, user_id=args.user)
    finally:
        pool.close()
    _print_json([_receipt_json(r) for r in found])
    return 0


def _receipt_json(receipt: Any) -> dict[str, Any]:
    return {**receipt.as_dict(), "erased_at": receipt.erased_at.isoformat()}


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# -- commands ------------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from user_memory.adapters.migrations import migrate, vectors_enabled

    dsn = database_url(args, migrate_embedded=False)
    applied = migrate(dsn)
    print(f"applied {len(applied)} migration(s): {', '.join(applied)}" if applied else "database is up to date")
    if not vectors_enabled(dsn):
        print(
            "vector search is off: pgvector is not installed in this database (full-text search works); "
            "to turn it on, CREATE EXTENSION vector as a role allowed to, then run migrate again"
        )
    return 0


LOGIN_PASSWORD_ENV = "USER_MEMORY_LOGIN_PASSWORD"


def cmd_create_login(args: argparse.Namespace) -> int:
    from user_memory.adapters.migrations import create_login

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else os.environ.get(LOGIN_PASSWORD_ENV, "")
    if not password:
        raise UsageError(f"give the login's password in ${LOGIN_PASSWORD_ENV} or on standard input (--password-stdin)")
    created = create_login(database_url(args, migrate_embedded=False), args.name, password, args.group)
    group = {"api": "user_memory_api", "service": "user_memory_service"}[args.group]
    print(f"{'created' if created else 'updated'} login {args.name} in {group}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _store(args) as store:
        head = _known_head(store, args.user)
        mv = head if args.version is None else store.at(args.user, args.version)
    _print_json(
        {
            "user_id": str(args.user),
            "version": mv.version,
            "head": head.version,
            "created_at": _iso(mv.created_at),
            "source": mv.source,
            "document": mv.document,
        }
    )
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _store(args) as store:
        _known_head(store, args.user)
        entries = store.history(args.user, limit=args.limit, before_version=args.before)
    for h in entries:
        mark = "checkpoint" if h.is_checkpoint else f"{len(h.patch)} ops"
        print(f"v{h.version:<5} {h.created_at:%Y-%m-%d %H:%M:%S}  {mark:<11} {h.source or ''}".rstrip())
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    with _store(args) as store:
        _known_head(store, args.user)
        patch = store.diff(args.user, args.a, args.b)
    _print_json(patch)
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    from user_memory.adapters.account import PostgresAccount
    from user_memory.adapters.postgres import open_pool

    pool = open_pool(database_url(args))
    try:
        # The CLI runs as the owner; the receipt names it as the requester (migration 027).
        receipt = PostgresAccount(pool).erase_with_receipt(args.user, "cli")
    finally:
        pool.close()
    removed = receipt.deleted
    _print_json({"user_id": str(args.user), "removed": removed, "receipt": _receipt_json(receipt)})
    if not any(removed.values()):
        print(f"note: user {args.user} had no memory and no activity; nothing was removed", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from user_memory.adapters.migrations import migrate
    from user_memory.runtime import build_summarizer

    from user_memory_local import demo

    # Configuration first: a bad setting fails before a server starts or a row is written.
    worker_settings, fanout_settings = demo.demo_settings(summarizer=args.summarizer)
    summarizer = build_summarizer(worker_settings)
    demo.prepare_environment()  # before the handlers' modules create their Logger and Tracer
    from user_memory_functions.fanout.app import handler as fanout_handler
    from user_memory_functions.worker.app import handler as worker_handler

    dsn = database_url(args, migrate_embedded=False)
    migrate(dsn)  # the demo writes: the schema must be current, whichever database it is
    with demo.local_stack(
        dsn, worker_settings=worker_settings, fanout_settings=fanout_settings, summarizer=summarizer
    ) as stack:
        return demo.run_demo(
            stack,
            fanout_handler=fanout_handler,
            worker_handler=worker_handler,
            users=args.users,
            day=args.date,
            progress=not args.quiet,
        )


def cmd_token(args: argparse.Namespace) -> int:
    from user_memory_local.embedded import user_memory_home
    from user_memory_local.tokens import issue_token, token_secret

    scopes: list[str] = []
    if args.operator:
        from user_memory.config import ApiSettings

        scopes.append(ApiSettings.from_env().operator_scope)  # OPERATOR_SCOPE, else the default
    print(issue_token(args.user, secret=token_secret(user_memory_home()), scopes=scopes, ttl_seconds=args.ttl))
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    from user_memory_local.embedded import user_memory_home
    from user_memory_local.serve import console_url
    from user_memory_local.tokens import issue_token, token_secret

    scopes: list[str] = []
    if args.operator:
        from user_memory.config import ApiSettings

        scopes.append(ApiSettings.from_env().operator_scope)
    token = issue_token(args.user, secret=token_secret(user_memory_home()), scopes=scopes, ttl_seconds=args.ttl)
    print(console_url(args.url, token))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from user_memory.errors import Unauthenticated

    from user_memory_local import mcp_server

    try:
        user = mcp_server.authenticate(args.token)  # before anything starts: a bad token serves nothing
    except Unauthenticated as err:
        mcp_server.refuse_client(_first_line(str(err)))
        return _fail(_first_line(str(err)), EXIT_USAGE)
    mcp_server.run(user, database_url=lambda: database_url(args))
    return 0


def cmd_mcp_config(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from user_memory_local.command import cli_command
    from user_memory_local.embedded import user_memory_home
    from user_memory_local.mcp_server import client_config
    from user_memory_local.tokens import issue_token, token_secret

    token = issue_token(args.user, secret=token_secret(user_memory_home()), ttl_seconds=args.ttl)
    # An absolute command: an MCP client starts it from its own directory, with its own PATH.
    command = [str(Path(part).absolute()) if "/" in part else part for part in shlex.split(cli_command())]
    if command == [PROG]:
        command = [str(Path(sys.executable).with_name(PROG))]
    print(json.dumps(client_config(token, command=command), indent=2))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from user_memory_local import chat

    with service_logs_to(sys.stderr):
        return chat.main(args.user, budget=args.budget_tokens, database_url=lambda: database_url(args))


def cmd_trigger_conversations(args: argparse.Namespace) -> int:
    from user_memory.config import ConversationTriggerSettings

    from user_memory_local import conversations

    if args.queue_url and args.seed:
        return _fail("--seed is for the local run only (without --queue-url)", EXIT_USAGE)
    # Configuration first (INACTIVITY_THRESHOLD_MINUTES, CONVERSATIONS_PER_MESSAGE): nothing runs on a
    # bad one. --threshold-minutes was checked against the same bounds when it was parsed.
    settings = ConversationTriggerSettings.from_env(inactivity_threshold_minutes=args.threshold_minutes)
    if args.queue_url:
        with service_logs_to(sys.stderr):
            _print_json(conversations.trigger_on_queue(lambda: database_url(args), args.queue_url, settings))
        return 0
    with service_logs_to(sys.stderr):
        report = conversations.trigger_locally(
            database_url(args),
            threshold_minutes=settings.inactivity_threshold_minutes,
            summarizer=args.summarizer,
            seed=args.seed,
        )
    _print_json(report)
    if report["in_dlq"]:
        print(f"error: {report['in_dlq']} message(s) ended in the DLQ; the worker's warnings say why", file=sys.stderr)
        return EXIT_ERROR
    return 0


def cmd_refresh(args: argparse.Namespace) -> int:
    from user_memory_local import refresh

    interval = args.min_interval_seconds
    if interval is None:
        try:
            interval = _refresh_interval(os.environ.get("REFRESH_MIN_INTERVAL_SECONDS") or "300")
        except argparse.ArgumentTypeError as err:
            return _fail(f"REFRESH_MIN_INTERVAL_SECONDS: {err}", EXIT_USAGE)
    with service_logs_to(sys.stderr):
        if args.queue_url:
            url = args.queue_url
            _print_json(refresh.refresh_on_queue(lambda: database_url(args), url, args.user, interval_seconds=interval))
            return 0
        report = refresh.refresh_locally(
            database_url(args), args.user, interval_seconds=interval, summarizer=args.summarizer
        )
    _print_json(report)
    if report["in_dlq"]:
        print(f"error: {report['in_dlq']} message(s) ended in the DLQ; the worker's warnings say why", file=sys.stderr)
        return EXIT_ERROR
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from user_memory.adapters.postgres import PostgresRecorder, open_pool
    from user_memory.adapters.search import PostgresSearch, check_query, embed_after_write
    from user_memory.config import EmbeddingSettings
    from user_memory.domain.memory.repository import MemoryStore
    from user_memory.runtime import build_embedder

    try:  # the query first, named as it was typed
        check_query(args.query, args.k)
    except InvalidArgument as err:
        raise UsageError(err.named({"q": "QUERY", "k": "--k"})) from None
    embedder = build_embedder(EmbeddingSettings.from_env())  # a bad configuration fails next
    pool = open_pool(database_url(args))
    try:
        _known_head(MemoryStore(PostgresRecorder(pool)), args.user)  # as `show` says it
        search = PostgresSearch(pool, embedder)
        with service_logs_to(sys.stderr):
            if embedder is not None:
                embed_after_write(search, args.user)  # texts still pending (a failed write-time embedding)
            result = search.search(args.user, args.query, args.k, args.mode)
    finally:
        pool.close()
    _print_json(
        {
            "user_id": str(args.user),
            "query": args.query,
            "mode": result.mode,
            "items": [
                {"path": h.path, "version": h.version, "kind": h.kind, "text": h.text, "score": h.score,
                 "matched_by": list(h.matched_by)}
                for h in result.hits
            ],
        }
    )  # fmt: skip
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.search import PostgresSearch
    from user_memory.domain.companion.items import reindex
    from user_memory.jobs.retention import index_upkeep

    pool = open_pool(database_url(args))
    try:
        index = PostgresSearch(pool)
        if args.user is not None:
            if not reindex(index, args.user):
                raise UnknownUser(args.user)
            _print_json({"user_id": str(args.user), "reindexed": True})
            return 0
        with service_logs_to(sys.stderr):  # its log line is the result's twin; stdout is the result
            report = index_upkeep(index, max_users=args.max_users)
        _print_json(report)
    finally:
        pool.close()
    return 0


# The plan's arguments as the command line spells them (InvalidArgument names the library's).
PLAN_ARGUMENTS = {
    "users_per_day": "--users-per-day",
    "llm_seconds": "--llm-seconds",
    "llm_concurrency": "--llm-concurrency",
    "window_hours": "--window-hours",
    "headroom": "--headroom",
    "summary_delivery": "--summary-delivery",
}


def cmd_plan(args: argparse.Namespace) -> int:
    from user_memory.domain.plan import plan, sizing_table

    options = {
        "llm_seconds": args.llm_seconds,
        "llm_concurrency": args.llm_concurrency,
        "window_hours": args.window_hours,
        "headroom": args.headroom,
        "summary_delivery": args.summary_delivery,
    }
    try:
        plans = [plan(n, **options) for n in args.users_per_day]
    except InvalidArgument as err:
        raise UsageError(err.named(PLAN_ARGUMENTS)) from None
    if args.json:
        _print_json([p.as_dict() for p in plans])
    else:
        print(sizing_table(plans))
    return 0


def cmd_run_report(args: argparse.Namespace) -> int:
    from user_memory.adapters.overview import PostgresOverview
    from user_memory.adapters.postgres import open_pool

    pool = open_pool(database_url(args))
    try:
        report = PostgresOverview(pool).run_report(args.run_key)
    finally:
        pool.close()
    _print_json({**report, **{k: _iso(report[k]) for k in ("first_written_at", "last_written_at")}})
    return 0


def _report_json(report: dict[str, Any]) -> dict[str, Any]:
    return {k: _iso(v) if isinstance(v, datetime) else v for k, v in report.items()}


def cmd_runs(args: argparse.Namespace) -> int:
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.runs import PostgresRuns

    pool = open_pool(database_url(args))
    try:
        runs = PostgresRuns(pool).list_runs(limit=args.limit, after=None)
    finally:
        pool.close()
    _print_json([_report_json(r) for r in runs])
    return 0


def cmd_run_revert(args: argparse.Namespace) -> int:
    """Undo a run here, in this process: the same bookkeeping and per-user undo as the worker's
    (jobs/run_revert.py), without the queue; run again, it resumes (pending and failed users)."""
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.runs import PostgresRuns
    from user_memory.config import MemorySettings
    from user_memory.jobs.run_revert import undo_user
    from user_memory.runtime import memory_store

    settings = MemorySettings.from_env(database_url=database_url(args))  # DOCUMENT_SCHEMA, the size limit
    pool = open_pool(database_url(args))
    try:
        runs = PostgresRuns(pool)
        store = memory_store(pool, settings)
        revert_id = runs.start(args.run_key, args.user, "cli")["revert_id"]
        after = None
        while page := runs.pending(revert_id, after=after):
            for user in page:
                undo_user(
                    runs,
                    store,
                    revert_id,
                    user,
                    schema=settings.document_schema,
                    max_bytes=settings.max_document_bytes,
                )
            after = page[-1]
        report = runs.status(revert_id)
    finally:
        pool.close()
    _print_json(_report_json(report))
    return 0


def cmd_run_revert_status(args: argparse.Namespace) -> int:
    from user_memory.adapters.postgres import open_pool
    from user_memory.adapters.runs import PostgresRuns

    pool = open_pool(database_url(args))
    try:
        report = PostgresRuns(pool).status(args.revert_id)
    finally:
        pool.close()
    _print_json(_report_json(report))
    return 0


def _endpoint_json(endpoint: Any) -> dict[str, Any]:
    from dataclasses import asdict

    fields = asdict(endpoint)
    fields.pop("secret_name")  # where the secret is: an operator's business on AWS, not this listing's
    return {
        k: (_iso(v) if isinstance(v, datetime) else str(v) if isinstance(v, uuid.UUID) else v)
        for k, v in fields.items()
    }


def cmd_webhooks(args: argparse.Namespace) -> int:
    """Operators' webhook endpoints, as the API's /admin/webhooks routes manage them."""
    from user_memory.adapters.events import PostgresEvents, SecretsManagerSecrets
    from user_memory.adapters.postgres import open_pool
    from user_memory.domain.events import WebhookRegistry

    pool = open_pool(database_url(args))
    try:
        registry = WebhookRegistry(PostgresEvents(pool), SecretsManagerSecrets(), args.secret_prefix)
        if args.action == "list":
            _print_json({"webhooks": [_endpoint_json(e) for e in registry.list()]})
            return 0
        if args.target is None:
            raise SystemExit(f"error: webhooks {args.action} needs {'a URL' if args.action == 'add' else 'an id'}")
        if args.action == "add":
            endpoint, secret = registry.register(args.target, args.description, "cli")
            _print_json({"webhook": _endpoint_json(endpoint), "secret": secret})
            return 0
        try:
            endpoint_id = uuid.UUID(args.target)
        except ValueError:
            raise SystemExit(f"error: {args.target!r} is not an endpoint id (a UUID)") from None
        if args.action == "delete":
            registry.delete(endpoint_id)
            _print_json({"id": str(endpoint_id), "deleted": True})
        else:
            _print_json(_endpoint_json(registry.set_enabled(endpoint_id, args.action == "enable")))
        return 0
    finally:
        pool.close()


def cmd_relay_events(args: argparse.Namespace) -> int:
    """One run of the events relay (as the events function's schedule runs it)."""
    from user_memory.adapters.postgres import open_pool
    from user_memory.config import EventsSettings
    from user_memory.jobs.events import relay_events
    from user_memory.runtime import build_events

    env = {"EVENT_BUS_NAME": args.event_bus} if args.event_bus else {}
    pool = open_pool(database_url(args))
    try:
        services = build_events(EventsSettings.from_env({**os.environ, **env}), pool=pool)
        _print_json(relay_events(services.relay))
    finally:
        pool.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from user_memory_local import serve

    return serve.run(
        host=args.host,
        port=args.port,
        database_url=lambda: database_url(args),
        verbose=args.verbose,
        oidc_issuer=args.oidc_issuer,
        oidc_audiences=args.oidc_audience,
        console_client_id=args.console_client_id,
        console_user=args.console_user,
        console_operator=args.operator,
        worker=args.worker,
    )


# -- parsing and the top level -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as UsageError instead of printed with the usage; options
    are never taken by a prefix (`demo --user 10` is an error, not `--users 10`), and an unknown
    option is reported by the command it was given to (`serve --prot`: serve's help, `--port`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._command_parser(getattr(parsed, "command", None)) or self
            owner.error(f"unrecognized arguments: {' '.join(extras)}{owner._suggestion(extras)}")
        return parsed

    def _command_parser(self, command: str | None) -> _Parser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                chosen = action.choices[command]
                return chosen if isinstance(chosen, _Parser) else None
        return None

    def _suggestion(self, extras: Sequence[str]) -> str:
        import difflib

        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        close = [
            m for e in extras if e.startswith("--") for m in difflib.get_close_matches(e.split("=")[0], options, 1)
        ]
        return f" (did you mean {' '.join(close)}?)" if close else ""


def _add_migrate(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("migrate", parents=[common], help="apply pending migrations").set_defaults(func=cmd_migrate)


def _add_create_login(sub: Any, common: argparse.ArgumentParser) -> None:
    login = sub.add_parser(
        "create-login",
        parents=[common],
        help="create (or set the password of) a function's login role: api or service (run as the owner)",
    )
    login.add_argument("name", metavar="NAME", help="the login role, e.g. user_memory_api_login")
    login.add_argument("--group", choices=["api", "service"], required=True, help="what the login may do")
    login.add_argument(
        "--password-stdin",
        action="store_true",
        help=f"read the password from standard input (default: ${LOGIN_PASSWORD_ENV})",
    )
    login.set_defaults(func=cmd_create_login)


def _add_demo(sub: Any, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser("demo", parents=[common], help="the daily job end to end on local stand-ins")
    demo.add_argument("--users", type=_users, default=200, metavar="N", help="demo users to seed (default 200)")
    demo.add_argument(
        "--date",
        type=_day,
        default=None,
        metavar="YYYY-MM-DD",
        help="the day to summarize (default: yesterday, UTC)",
    )
    demo.add_argument("--summarizer", choices=["rules", "openai"], default=None, help="default: $SUMMARIZER, else auto")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=cmd_demo)


def _add_show(sub: Any, common: argparse.ArgumentParser) -> None:
    show = sub.add_parser("show", parents=[common], help="a user's memory as JSON (head, or --version N)")
    show.add_argument("user", type=_user, metavar="USER")
    show.add_argument("--version", type=_version, metavar="N")
    show.set_defaults(func=cmd_show)


def _add_history(sub: Any, common: argparse.ArgumentParser) -> None:
    history = sub.add_parser("history", parents=[common], help="a user's versions, newest first")
    history.add_argument("user", type=_user, metavar="USER")
    history.add_argument("--limit", type=_limit, default=20, metavar="N", help="at most N versions (default 20)")
    history.add_argument("--before", type=_before, metavar="V", help="only versions below V")
    history.set_defaults(func=cmd_history)


def _add_diff(sub: Any, common: argparse.ArgumentParser) -> None:
    diff = sub.add_parser("diff", parents=[common], help="one JSON Patch from version A to version B")
    diff.add_argument("user", type=_user, metavar="USER")
    diff.add_argument("a", type=_version, metavar="A")
    diff.add_argument("b", type=_version, metavar="B")
    diff.set_defaults(func=cmd_diff)


def _add_erase(sub: Any, common: argparse.ArgumentParser) -> None:
    erase = sub.add_parser(
        "erase", parents=[common], help="delete a user's memory and activity; prints the counts and the receipt"
    )
    erase.add_argument("user", type=_user, metavar="USER")
    erase.set_defaults(func=cmd_erase)


def _add_export(sub: Any, common: argparse.ArgumentParser) -> None:
    export = sub.add_parser("export", parents=[common], help="a user's export as JSON Lines (any size)")
    export.add_argument("user", type=_user, metavar="USER")
    export.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
    export.set_defaults(func=cmd_export)


def _add_import(sub: Any, common: argparse.ArgumentParser) -> None:
    imp = sub.add_parser("import", parents=[common], help="write an export back under USER (an empty memory)")
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("user", type=_user, metavar="USER")
    imp.set_defaults(func=cmd_import)


def _add_erasures(sub: Any, common: argparse.ArgumentParser) -> None:
    erasures = sub.add_parser("erasures", parents=[common], help="erasure receipts, newest first (JSON)")
    erasures.add_argument("--user", type=_user, metavar="USER", help="only this user's receipts")
    erasures.add_argument("--limit", type=_limit, default=20, metavar="N", help="at most N receipts (default 20)")
    erasures.set_defaults(func=cmd_erasures)


def _add_token(sub: Any, common: argparse.ArgumentParser) -> None:
    token = sub.add_parser("token", help="a development token for USER (for `serve` and `mcp`)")
    token.add_argument("user", type=_user, metavar="USER_ID")
    token.add_argument("--operator", action="store_true", help="add the operator scope ($OPERATOR_SCOPE)")
    token.add_argument(
        "--ttl", type=_int_at_least(1, "the TTL"), default=12 * 3600, metavar="SECONDS", help="default 43200 (12 h)"
    )
    token.set_defaults(func=cmd_token)


def _add_console(sub: Any, common: argparse.ArgumentParser) -> None:
    console = sub.add_parser("console", help="the console's URL for `serve`, signed in as USER (development token)")
    console.add_argument("user", type=_user, metavar="USER_ID")
    console.add_argument("--operator", action="store_true", help="as an operator: look up any user")
    console.add_argument("--url", default="http://127.0.0.1:8080", metavar="URL", help="where `serve` listens")
    console.add_argument(
        "--ttl", type=_int_at_least(1, "the TTL"), default=12 * 3600, metavar="SECONDS", help="default 43200 (12 h)"
    )
    console.set_defaults(func=cmd_console)


def _add_mcp(sub: Any, common: argparse.ArgumentParser) -> None:
    mcp = sub.add_parser("mcp", parents=[common], help="serve a user's memory over MCP (stdio)")
    mcp.add_argument("--token", metavar="T", help="the user's token (default: $USER_MEMORY_TOKEN)")
    mcp.set_defaults(func=cmd_mcp)


def _add_mcp_config(sub: Any, common: argparse.ArgumentParser) -> None:
    mcp_config = sub.add_parser(
        "mcp-config", help="an MCP client's configuration for USER's memory (its env: the token, the home, ...)"
    )
    mcp_config.add_argument("user", type=_user, metavar="USER_ID")
    mcp_config.add_argument(
        "--ttl",
        type=_int_at_least(1, "the TTL"),
        default=30 * 86400,
        metavar="SECONDS",
        help="the token's lifetime (default 2592000: 30 days)",
    )
    mcp_config.set_defaults(func=cmd_mcp_config)


def _add_chat(sub: Any, common: argparse.ArgumentParser) -> None:
    chat = sub.add_parser("chat", parents=[common], help="talk to the configured model with USER's memory")
    chat.add_argument("user", type=_user, metavar="USER_ID")
    chat.add_argument(
        "--budget-tokens",
        "--budget",
        dest="budget_tokens",
        type=_int_at_least(1, "the budget"),
        default=800,
        metavar="N",
        help="tokens the memory may take in the prompt (default 800; as GET /me/memory/prompt's budget_tokens)",
    )
    chat.set_defaults(func=cmd_chat)


def _add_trigger_conversations(sub: Any, common: argparse.ArgumentParser) -> None:
    trigger = sub.add_parser(
        "trigger-conversations",
        parents=[common],
        help="queue memory generation for quiet conversations (a queue URL, or locally: moto + the worker)",
    )
    trigger.add_argument(
        "--threshold-minutes",
        type=_threshold,
        default=None,
        metavar="N",
        help="minutes a conversation must have been quiet (default: $INACTIVITY_THRESHOLD_MINUTES, else 120)",
    )
    trigger.add_argument(
        "--queue-url",
        type=_queue_url,
        metavar="URL",
        help="send to this SQS queue: https://sqs.<region>.amazonaws.com/<account>/<name> (default: moto, drained)",
    )
    trigger.add_argument("--summarizer", choices=["rules", "openai"], default=None, help="local run: default auto")
    trigger.add_argument(
        "--seed",
        type=_int_at_least(0, "the seed count"),
        default=0,
        metavar="N",
        help="local run: N demo conversations",
    )
    trigger.set_defaults(func=cmd_trigger_conversations)


def _add_refresh(sub: Any, common: argparse.ArgumentParser) -> None:
    refresh_ = sub.add_parser(
        "refresh",
        parents=[common],
        help="summarize USER's pending activity now, run key ondemand:<time> (a queue URL, or locally)",
    )
    refresh_.add_argument("user", type=_user, metavar="USER_ID")
    refresh_.add_argument(
        "--queue-url",
        type=_queue_url,
        metavar="URL",
        help="send to this SQS queue: https://sqs.<region>.amazonaws.com/<account>/<name> (default: moto, drained)",
    )
    refresh_.add_argument(
        "--min-interval-seconds",
        type=_refresh_interval,
        default=None,
        metavar="N",
        help="at most one refresh per user per N seconds (default: $REFRESH_MIN_INTERVAL_SECONDS, else 300)",
    )
    refresh_.add_argument("--summarizer", choices=["rules", "openai"], default=None, help="local run: default auto")
    refresh_.set_defaults(func=cmd_refresh)


def _add_search(sub: Any, common: argparse.ArgumentParser) -> None:
    search = sub.add_parser(
        "search",
        parents=[common],
        help="search a user's memory items (full text; fused with vectors when EMBEDDING_MODEL is set)",
    )
    search.add_argument("user", type=_user, metavar="USER")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--k", type=_int_at_least(1, "k"), default=10, metavar="K", help="how many items (default 10)")
    search.add_argument("--mode", choices=["auto", "fts", "vector", "fused"], default="auto")
    search.set_defaults(func=cmd_search)


def _add_reindex(sub: Any, common: argparse.ArgumentParser) -> None:
    reindex = sub.add_parser(
        "reindex", parents=[common], help="rebuild the search index of users whose index is behind (or of --user)"
    )
    reindex.add_argument("--user", type=_user, default=None, metavar="USER", help="this user only")
    reindex.add_argument("--max-users", type=_int_at_least(1, "the maximum"), default=100_000, metavar="N")
    reindex.set_defaults(func=cmd_reindex)


def _add_plan(sub: Any, common: argparse.ArgumentParser) -> None:
    from user_memory.domain import plan as sizing  # its bounds and defaults (pure arithmetic, no I/O)

    plan = sub.add_parser(
        "plan",
        help="size a deployment for N users a day: the template's parameters, the nightly window, the cost",
    )
    plan.add_argument(
        "--users-per-day",
        type=_int_at_least(1, "the users a day", sizing.MAX_USERS_PER_DAY),
        action="append",
        required=True,
        metavar="N",
        help="active users a day (repeat for a column each)",
    )
    plan.add_argument(
        "--llm-seconds",
        type=_number_between(0, sizing.MAX_LLM_SECONDS, "the seconds an LLM call takes", low_open=True),
        default=sizing.c.LLM_SECONDS_PER_CALL,
        metavar="S",
        help=f"measured seconds an LLM call takes (default {sizing.c.LLM_SECONDS_PER_CALL:g})",
    )
    plan.add_argument(
        "--llm-concurrency",
        type=_int_at_least(1, "the LLM concurrency", sizing.MAX_LLM_CONCURRENCY),
        default=sizing.DEFAULT_LLM_CONCURRENCY,
        metavar="C",
        help=f"LLM calls an invocation makes at once (WorkerLlmConcurrency; default {sizing.DEFAULT_LLM_CONCURRENCY})",
    )
    plan.add_argument(
        "--window-hours",
        type=_number_between(0, 24, "the window", low_open=True),
        default=sizing.DEFAULT_WINDOW_HOURS,
        metavar="H",
        help=f"hours the nightly run must finish in (default {sizing.DEFAULT_WINDOW_HOURS:g}, at most 24)",
    )
    plan.add_argument(
        "--headroom",
        type=_number_between(1, 100, "the headroom"),
        default=sizing.DEFAULT_HEADROOM,
        metavar="X",
        help=f"capacity over need (default {sizing.DEFAULT_HEADROOM:g}: the run takes at most half the window)",
    )
    plan.add_argument(
        "--summary-delivery",
        choices=sizing.SUMMARY_DELIVERIES,
        default="online",
        help="price the nightly run online (default) or through the Batch API (SummaryDelivery; the same parameters)",
    )
    plan.add_argument("--json", action="store_true", help="every figure as JSON instead of the table")
    plan.set_defaults(func=cmd_plan)
    run_report = sub.add_parser(
        "run-report",
        parents=[common],
        help="a run's totals over the versions it wrote: users, activities, calls, tokens and their cost",
    )
    run_report.add_argument("run_key", metavar="RUN_KEY", help="e.g. daily:2026-11-21")
    run_report.set_defaults(func=cmd_run_report)
    runs = sub.add_parser("runs", parents=[common], help="the runs, newest first, each with its totals (JSON)")
    runs.add_argument(
        "--limit",
        type=_int_at_least(1, "the limit"),
        default=20,
        metavar="N",
        help="runs to list (default 20, at most 100)",
    )
    runs.set_defaults(func=cmd_runs)
    run_revert = sub.add_parser(
        "run-revert",
        parents=[common],
        help="undo a run's version for every user it touched (or --user): reverted, conflicts with paths, failures",
    )
    run_revert.add_argument("run_key", metavar="RUN_KEY", help="e.g. daily:2026-11-21")
    run_revert.add_argument("--user", type=_user, default=None, metavar="USER_ID", help="undo it for this user only")
    run_revert.set_defaults(func=cmd_run_revert)
    revert_status = sub.add_parser(
        "run-revert-status", parents=[common], help="an undo's report: users reverted, conflicts, failures, pending"
    )
    revert_status.add_argument("revert_id", type=_user, metavar="REVERT_ID")
    revert_status.set_defaults(func=cmd_run_revert_status)


def _add_webhooks(sub: Any, common: argparse.ArgumentParser) -> None:
    webhooks = sub.add_parser(
        "webhooks", parents=[common], help="operators' webhook endpoints of memory-changed events (secrets in AWS)"
    )
    webhooks.add_argument("action", choices=["list", "add", "disable", "enable", "delete"])
    webhooks.add_argument("target", nargs="?", metavar="URL_OR_ID", help="add: the URL; the others: the endpoint id")
    webhooks.add_argument("--description", default="", help="add: what the endpoint is for")
    webhooks.add_argument(
        "--secret-prefix",
        default="user-memory/webhooks/",
        help="add: where the signing secret is created in Secrets Manager (the deployment's WEBHOOK_SECRET_PREFIX)",
    )
    webhooks.set_defaults(func=cmd_webhooks)
    relay = sub.add_parser(
        "relay-events", parents=[common], help="relay memory-changed events once (the bus, then each due webhook)"
    )
    relay.add_argument("--event-bus", default=None, help="the EventBridge bus (EVENT_BUS_NAME); none: webhooks only")
    relay.set_defaults(func=cmd_relay_events)


def _add_serve(sub: Any, common: argparse.ArgumentParser) -> None:
    serve = sub.add_parser("serve", parents=[common], help="the HTTP API on this machine (development tokens)")
    serve.add_argument("--host", default="127.0.0.1", metavar="H", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8080, metavar="P", help="port (default 8080; 0: any free port)")
    serve.add_argument("--verbose", action="store_true", help="one line per request, and the service's JSON logs")
    serve.add_argument(
        "--console-user",
        type=_user,
        metavar="USER_ID",
        help="print a console URL signed in as USER (development: not with --oidc-issuer)",
    )
    serve.add_argument("--operator", action="store_true", help="with --console-user: signed in as an operator")
    serve.add_argument(
        "--worker",
        action="store_true",
        help="a worker queue of its own (moto) drained here: a run's undo and the trigger run locally",
    )
    serve.add_argument("--oidc-issuer", metavar="URL", help="also accept this OpenID Connect issuer's tokens")
    serve.add_argument("--oidc-audience", action="append", metavar="AUD", help="accepted audience (repeatable)")
    serve.add_argument("--console-client-id", metavar="ID", help="the console's client id at --oidc-issuer")
    serve.set_defaults(func=cmd_serve)


# Every command, in the order `--help` lists them: one function each, adding its parser and options.
_COMMANDS = (
    _add_migrate,
    _add_create_login,
    _add_demo,
    _add_show,
    _add_history,
    _add_diff,
    _add_erase,
    _add_export,
    _add_import,
    _add_erasures,
    _add_token,
    _add_console,
    _add_mcp,
    _add_mcp_config,
    _add_chat,
    _add_trigger_conversations,
    _add_refresh,
    _add_search,
    _add_reindex,
    _add_plan,
    _add_webhooks,
    _add_serve,
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = _Parser(add_help=False)
    common.add_argument(
        "--database-url", type=_dsn, metavar="URL", help="PostgreSQL DSN (default: $DATABASE_URL, else embedded)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in _COMMANDS:
        add(sub, common)
    return parser


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0].strip()[:500]


def _describe(err: BaseException) -> str:
    """One line for the user: our errors by their message, anything else by its type too."""
    if isinstance(err, UserMemoryError):
        message = _first_line(str(err)) or type(err).__name__
        if isinstance(err, StorageError) and isinstance(
            err.__cause__, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedFunction
        ):
            from user_memory_local.command import cli_command

            message += f" (is the database migrated? run `{cli_command()} migrate`)"
        return message
    if isinstance(err, psycopg.Error):
        return f"database: {_first_line(str(err)) or type(err).__name__}"
    detail = _first_line(str(err))
    return f"{type(err).__name__}: {detail}" if detail else type(err).__name__


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (never raises, never prints a traceback
    unless USER_MEMORY_DEBUG=1)."""
    debug = os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")
    try:
        try:
            args = build_parser().parse_args(argv)
        except UsageError as err:
            return _fail(str(err), EXIT_USAGE)
        except SystemExit as done:  # --help
            return done.code if isinstance(done.code, int) else 0
        return int(args.func(args) or 0)
    except UsageError as err:  # an argument the command itself checked (against the domain's bounds)
        return _fail(str(err), EXIT_USAGE)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): nothing more to say, and nowhere to say it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as err:  # the top level: every failure becomes one line
        if debug:
            traceback.print_exc()
        return _fail(_describe(err), EXIT_ERROR)


if __name__ == "__main__":
    sys.exit(main())

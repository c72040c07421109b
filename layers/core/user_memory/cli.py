"""`user-memory`: migrate, demo, show, history, diff.

With no --database-url and no DATABASE_URL, an embedded PostgreSQL is started in ./.pgdata.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import psycopg

from user_memory.errors import UserMemoryError

_KEEP_ALIVE: list[Any] = []


def _database_url(args: argparse.Namespace) -> tuple[str, Any]:
    url = args.database_url or os.environ.get("DATABASE_URL")
    if url:
        return url, None
    from user_memory.local.embedded import start_embedded

    server, dsn = start_embedded()
    return dsn, server


def _store(args: argparse.Namespace):
    from user_memory.db import migrate
    from user_memory.store import MemoryStore

    dsn, server = _database_url(args)
    migrate(dsn)
    _KEEP_ALIVE.append(server)  # the embedded server stops when its last handle goes
    return MemoryStore(dsn)


def cmd_migrate(args: argparse.Namespace) -> int:
    from user_memory.db import migrate

    dsn, _server = _database_url(args)
    applied = migrate(dsn)
    print(f"applied {len(applied)} migration(s): {', '.join(applied)}" if applied else "database is up to date")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    mv = store.head(args.user) if args.version is None else store.at(args.user, args.version)
    print(
        json.dumps(
            {
                "version": mv.version,
                "source": mv.source,
                "created_at": str(mv.created_at),
                "document": mv.document,
            },
            indent=2,
            ensure_ascii=False,
        )
    )
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    store = _store(args)
    for h in store.history(args.user, limit=args.limit, before_version=args.before):
        mark = "checkpoint" if h.is_checkpoint else f"{len(h.patch)} ops"
        print(f"v{h.version:<5} {h.created_at:%Y-%m-%d %H:%M:%S}  {mark:<11} {h.source or ''}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    store = _store(args)
    print(json.dumps(store.diff(args.user, args.a, args.b), indent=2, ensure_ascii=False))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from user_memory.local.demo import run_demo

    dsn, server = _database_url(args)
    return run_demo(dsn, users=args.users, date=args.date, summarizer=args.summarizer, progress=not args.quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="user-memory", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="PostgreSQL DSN (default: $DATABASE_URL, else embedded)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", parents=[common], help="apply pending migrations").set_defaults(func=cmd_migrate)

    demo = sub.add_parser("demo", parents=[common], help="the daily job end to end on local stand-ins")
    demo.add_argument("--users", type=int, default=200)
    demo.add_argument("--date", help="the day to summarize, YYYY-MM-DD (default: yesterday, UTC)")
    demo.add_argument("--summarizer", choices=["rules", "openai"], default=None)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=cmd_demo)

    show = sub.add_parser("show", parents=[common], help="a user's memory (head, or --version N)")
    show.add_argument("user")
    show.add_argument("--version", type=int)
    show.set_defaults(func=cmd_show)

    history = sub.add_parser("history", parents=[common], help="a user's versions, newest first")
    history.add_argument("user")
    history.add_argument("--limit", type=int, default=20)
    history.add_argument("--before", type=int)
    history.set_defaults(func=cmd_history)

    diff = sub.add_parser("diff", parents=[common], help="the patch between two versions")
    diff.add_argument("user")
    diff.add_argument("a", type=int)
    diff.add_argument("b", type=int)
    diff.set_defaults(func=cmd_diff)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except UserMemoryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as err:
        print(f"error: cannot reach the database: {err}".splitlines()[0], file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

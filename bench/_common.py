"""Shared helpers for the benchmarks: a fresh database, percentiles, table printing."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]


def fresh_database(name: str) -> str:
    """DSN of an empty, migrated database `name` (embedded server unless DATABASE_URL is set)."""
    from user_memory.db import migrate

    base = os.environ.get("DATABASE_URL")
    if base:
        admin = psycopg.conninfo.make_conninfo(base, dbname="postgres")
    else:
        from user_memory.local.embedded import start_embedded

        server, admin = start_embedded(ROOT / ".pgdata" / "bench", database="postgres")
        fresh_database.server = server  # type: ignore[attr-defined]  # keep it alive
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=name)
    migrate(dsn)
    return dsn


def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary_ms(values: Sequence[float]) -> str:
    p50, p99, mean = pct(values, 50) * 1000, pct(values, 99) * 1000, statistics.fmean(values) * 1000
    return f"p50 {p50:.3f} ms, p99 {p99:.3f} ms, mean {mean:.3f} ms"


def table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"\n{title}\n" + "-" * (width + 40))
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

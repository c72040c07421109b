"""Shared helpers for the benchmarks: a fresh database, percentiles, table printing, round-trip
counting from libpq's protocol trace, and a ~10 KB user_state document."""

from __future__ import annotations

import os
import random
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]


def fresh_database(name: str) -> str:
    """DSN of an empty, migrated database `name` (embedded server unless DATABASE_URL is set)."""
    from user_memory.adapters.migrations import migrate

    base = os.environ.get("DATABASE_URL")
    if base:
        admin = psycopg.conninfo.make_conninfo(base, dbname="postgres")
    else:
        from user_memory_local.embedded import start_embedded

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


# -- round trips ----------------------------------------------------------------------------------


def count_round_trips(trace_path: Path) -> int:
    """Round trips in a libpq protocol trace: each switch from client (F) to server (B) messages."""
    trips, last = 0, ""
    for line in trace_path.read_text().splitlines():
        parts = line.split("\t")
        direction = parts[1] if len(parts) > 2 else ""
        if direction == "B" and last == "F":
            trips += 1
        if direction in ("F", "B"):
            last = direction
    return trips


class RoundTrips:
    """The count of a `traced` block, available once the block has ended."""

    count = 0


@contextmanager
def traced(*connections: psycopg.Connection) -> Iterator[RoundTrips]:
    """Count the round trips the given connections make inside the block (libpq's trace)."""
    result = RoundTrips()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, conn in enumerate(connections):
            f = open(Path(tmp) / f"{i}.trace", "w+")  # noqa: SIM115 - closed below
            conn.pgconn.trace(f.fileno())
            files.append(f)
        try:
            yield result
        finally:
            for conn, f in zip(connections, files, strict=True):
                conn.pgconn.untrace()
                f.close()
            result.count = sum(count_round_trips(Path(f.name)) for f in files)


# -- documents ------------------------------------------------------------------------------------

_letters = random.Random(1)
# A vocabulary large enough that TOAST compression behaves as with real text.
WORDS = [
    "".join(_letters.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_letters.randint(3, 9))) for _ in range(3000)
]


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def user_state_document(rng: random.Random, *, parts: int = 32, recent: int = 3) -> dict[str, Any]:
    """A ~10 KB user_state document (valid against the schema): `parts` parts with two goals each,
    18 triggers, a long summary and safety notes. Only `recent` parts have a recency score the
    rule-based summarizer's daily decay still changes; the others have decayed to (almost) zero,
    as the parts of a long-time user do."""
    recent_ids = set(rng.sample(range(parts), recent))
    document_parts = {
        f"part_{i}": {
            "name": f"Part {i} {rng.choice(WORDS)}",
            "status": rng.choice(["active", "dormant", "integrating"]),
            # round(x * 0.9, 3) == x for x <= 0.004: the decay leaves these alone
            "recency_score": round(rng.uniform(0.2, 0.95), 3) if i in recent_ids else rng.choice([0.0, 0.002, 0.004]),
            "influence_score": round(rng.random(), 3),
            "goals": [{"goal": sentence(rng, 6)} for _ in range(2)],
        }
        for i in range(parts)
    }
    return {
        "version": 1,
        "last_updated_by": "rules",
        "summary": sentence(rng, 60),
        "parts": document_parts,
        "triggers_and_goals": [
            {
                "trigger": sentence(rng, 5),
                "desired_outcome": sentence(rng, 6),
                "related_parts": [f"part_{rng.randrange(parts)}"],
            }
            for _ in range(18)
        ],
        "safety_notes": sentence(rng, 20),
    }

"""The service's append beside its floor, by the backend's CPU as well as the wall clock.

    .venv/bin/python bench/bench_append_cpu.py [--users 25] [--versions 40]

bench_store.py's history (~13 KiB documents, ~5% changed a version), each version written four
ways, interleaved version by version (each way in turn first), each on a connection of its own so
that its PostgreSQL backend's CPU (/proc/<pid>/schedstat, Linux) is its own:
  floor          bench_store.py's floor: the patch row and the head's upsert, one statement;
  append         the adapter's user_memory_append statement on a held connection (the worker
                 holds one for a user's run, the API one for a request);
  020's append   the same statement to a copy of migration 020's user_memory_append (read from
                 migrations/020, created under another name): the append's function as 020 made
                 it, beside whatever a later migration makes of it (while none does, the two
                 differ by the measure's noise alone);
  checkout       PostgresRecorder.insert through the pool: a checkout (with the pool's liveness
                 check, an empty statement) for the statement, as bench_store.py timed it until 023.
Other load on a shared machine stretches wall time far more than a backend's CPU time.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, fresh_database, table
from bench_store import _FLOOR, _FLOOR_TABLES, histories
from user_memory.adapters.postgres import _APPEND, PostgresRecorder, open_pool
from user_memory.domain.memory.document import encode
from user_memory.domain.ports import NewVersion

BEFORE = "bench_user_memory_append_020"


def function_of_020() -> str:
    """Migration 020's user_memory_append, as it was, under another name."""
    text = (ROOT / "migrations" / "020_end_user_index_from_document.sql").read_text()
    start = text.index("CREATE OR REPLACE FUNCTION public.user_memory_append(")
    end = text.index("$$;", text.index("AS $$", start) + 5) + 3
    return re.sub(
        r"^CREATE OR REPLACE FUNCTION public\.user_memory_append\(",
        f"CREATE FUNCTION public.{BEFORE}(",
        text[start:end],
    )


def backend_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=25)
    parser.add_argument("--versions", type=int, default=40)
    args = parser.parse_args()
    dsn = fresh_database("user_memory_bench_append_cpu")
    ways = ["floor", "append", "020's append", "checkout"]
    conns = {w: psycopg.connect(dsn, autocommit=True) for w in ways if w != "checkout"}
    conns["floor"].execute(_FLOOR_TABLES)
    conns["floor"].execute(function_of_020())
    pool = open_pool(dsn)
    with pool.connection() as conn:
        pids = {"checkout": conn.info.backend_pid}
    pids |= {w: c.info.backend_pid for w, c in conns.items()}
    recorder = PostgresRecorder(pool)
    wall: dict[str, list[float]] = {w: [] for w in ways}
    cpu: dict[str, list[int]] = {w: [] for w in ways}
    order = list(ways)
    for _, docs, patches in histories(args.users, args.versions):
        users = {w: uuid.uuid4() for w in ways}
        for v, (doc, patch) in enumerate(zip(docs, patches, strict=True), start=1):
            document_json = encode(doc)
            checkpoint = v % 50 == 0
            for way in order:
                user = users[way]
                before = backend_cpu_ns(pids[way])
                t0 = time.perf_counter()
                if way == "floor":
                    conns[way].execute(_FLOOR, {"u": user, "v": v, "p": Jsonb(patch), "d": document_json}, prepare=True)
                elif way == "checkout":
                    new = NewVersion(
                        user_id=user,
                        expected_version=v - 1,
                        patch=patch,
                        document=doc,
                        document_json=document_json,
                        checkpoint=checkpoint,
                        source="bench",
                    )
                    assert recorder.insert(new).status == "written"
                else:
                    statement = _APPEND if way == "append" else _APPEND.replace("user_memory_append", BEFORE)
                    params = (user, v - 1, Jsonb(patch), checkpoint, document_json, "bench", None, None, None, None)
                    row = conns[way].execute(statement, params, prepare=True).fetchone()
                    assert row is not None and row[0] == "written"
                wall[way].append(time.perf_counter() - t0)
                cpu[way].append(backend_cpu_ns(pids[way]) - before)
            order = order[1:] + order[:1]
    pool.close()
    floor_wall, floor_cpu = statistics.fmean(wall["floor"]), statistics.fmean(cpu["floor"])
    rows = []
    for way in ways:
        w, c = statistics.fmean(wall[way]), statistics.fmean(cpu[way])
        rows.append(
            (
                way,
                f"wall {w * 1000:.3f} ms ({w / floor_wall:.2f}x), backend CPU {c / 1000:.0f} us ({c / floor_cpu:.2f}x)",
            )
        )
    table(
        f"{args.users} users x {args.versions} versions, each way interleaved version by version; mean a version", rows
    )


if __name__ == "__main__":
    main()

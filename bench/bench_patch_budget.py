"""Patch budget benchmark: 1,000 hostile RFC 6902 patches against both appliers, beside a floor.

    .venv/bin/python bench/bench_patch_budget.py [--patches 1000] [--seed 21] [--no-sql]

Generates `--patches` hostile patches (seeded), each on one of two documents: a ~10 KB user_state
document and one near the default limit (~250 KB). The kinds, in turn:

- root-doubling: copies of the whole document ("") into new members (the finding of issue 21);
- member-doubling: copies of a growing member into another, and of that one back;
- copy-remove: copies of the largest section then removals of it, up to 1,000 operations;
- deep: copies and adds along pointers of up to 100 tokens, values nested up to 100 levels;
- many-ops: 1,000 adds of new members with values of a few hundred bytes;
- over-bounds: 1,001 operations, or pointers over 2,048 bytes or 100 tokens.

Each patch is applied by the service's applier (`apply_patch` with the API's budget: twice the
default document limit of 256 KiB) and by the database's (`user_memory_apply_patch(doc, patch,
2 * limit)`, embedded PostgreSQL unless DATABASE_URL is set). Its floor is a benign patch of the
same number of operations on the same document (replaces of existing members with short text),
applied the same way in the same run. Reported per applier: p50 and worst time, and peak memory:
Python's by tracemalloc (a second pass, so that tracing does not slow the timed one), the
database backend's as its peak resident set (VmHWM, a fresh connection per patch) above the
connection's own.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fresh_database, pct, table, user_state_document  # noqa: E402
from user_memory.domain.memory.document import document_size  # noqa: E402
from user_memory.domain.memory.patching import PatchBudget, apply_patch  # noqa: E402
from user_memory.domain.model import DEFAULT_MAX_DOCUMENT_BYTES  # noqa: E402
from user_memory.errors import DocumentGrowsTooLarge, PatchError, PatchOverBounds  # noqa: E402

CEILING = 2 * DEFAULT_MAX_DOCUMENT_BYTES
KINDS = ("root-doubling", "member-doubling", "copy-remove", "deep", "many-ops", "over-bounds")


def documents(rng: random.Random) -> list[dict[str, Any]]:
    small = user_state_document(rng)
    large = user_state_document(rng, parts=32)
    while document_size(large) < 240 * 1024:  # near the limit: the worst place to start from
        large["parts"][f"p{len(large['parts'])}"] = dict(next(iter(small["parts"].values())))
        large["summary"] += " " + small["summary"]
    return [small, large]


def hostile(kind: str, doc: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    if kind == "root-doubling":
        return [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(rng.randint(10, 1000))]
    if kind == "member-doubling":
        ops = [{"op": "copy", "from": "/parts", "path": "/x"}, {"op": "copy", "from": "/parts", "path": "/y"}]
        for i in range(rng.randint(10, 999)):
            ops.append(
                {"op": "copy", "from": "/x" if i % 2 == 0 else "/y", "path": f"/{'y' if i % 2 == 0 else 'x'}/n{i}"}
            )
        return ops
    if kind == "copy-remove":
        ops = []
        while len(ops) < 1000:
            ops += [{"op": "copy", "from": "/parts", "path": "/spare"}, {"op": "remove", "path": "/spare"}]
        return ops
    if kind == "deep":
        depth = rng.randint(10, 99)
        value: Any = "leaf"
        for _ in range(rng.randint(depth, 99)):
            value = {"k": value}
        ops = [{"op": "add", "path": "/d", "value": value}]
        ops += [
            {"op": "copy", "from": "/d", "path": "/d" + "/k" * min(i + 1, depth)} for i in range(rng.randint(5, 500))
        ]
        ops += [{"op": "copy", "from": "", "path": "/d" + "/k" * depth} for _ in range(rng.randint(1, 50))]
        return ops
    if kind == "many-ops":
        return [{"op": "add", "path": f"/m{i}", "value": "v" * rng.randint(100, 600)} for i in range(1000)]
    # over-bounds
    choice = rng.randrange(3)
    if choice == 0:
        return [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(1001)]
    if choice == 1:
        return [{"op": "add", "path": "/" + "a" * 2100, "value": 1}]
    return [{"op": "add", "path": "/a" * 101, "value": 1}]


def benign(doc: dict[str, Any], ops: int) -> list[dict[str, Any]]:
    """The floor: `ops` replaces of existing members with short text (what a client's edit is)."""
    parts = list(doc["parts"])
    return [{"op": "replace", "path": f"/parts/{parts[i % len(parts)]}/status", "value": f"s{i}"} for i in range(ops)]


def outcome(call: Any) -> str:
    try:
        call()
    except DocumentGrowsTooLarge:
        return "413 too large"
    except PatchOverBounds:
        return "422 over bounds"
    except PatchError:
        return "409 does not apply"
    return "applied"


def python_run(cases: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> tuple[list[float], list[int], Counter[str]]:
    times, peaks, outcomes = [], [], Counter()
    for doc, patch in cases:
        began = time.perf_counter()
        outcomes[outcome(lambda: apply_patch(doc, patch, budget=PatchBudget(CEILING)))] += 1  # noqa: B023
        times.append(time.perf_counter() - began)
    for doc, patch in cases:
        tracemalloc.start()
        outcome(lambda: apply_patch(doc, patch, budget=PatchBudget(CEILING)))  # noqa: B023
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return times, peaks, outcomes


def _hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def sql_run(
    dsn: str, cases: list[tuple[dict[str, Any], list[dict[str, Any]]]]
) -> tuple[list[float], list[int], Counter[str]]:
    import psycopg
    from psycopg.types.json import Jsonb

    times, peaks, outcomes = [], [], Counter()
    for doc, patch in cases:
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            conn.execute("SELECT user_memory_apply_patch('{}', '[]', 1)")  # the function's plan, cached
            local = Path(f"/proc/{pid}/status").exists()
            before = _hwm_kib(pid) if local else 0
            began = time.perf_counter()
            try:
                conn.execute("SELECT 1 FROM user_memory_apply_patch(%s, %s, %s)", (Jsonb(doc), Jsonb(patch), CEILING))
                outcomes["applied"] += 1
            except psycopg.DatabaseError as err:
                text = str(err)
                outcomes[
                    "413 too large (UMP02)"
                    if "grows over" in text
                    else f"{'422 over bounds' if err.sqlstate == 'UMP02' else '409 does not apply'} ({err.sqlstate})"
                ] += 1
            times.append(time.perf_counter() - began)
            peaks.append((_hwm_kib(pid) - before) * 1024 if local else 0)
    return times, peaks, outcomes


def rows(name: str, times: list[float], peaks: list[int]) -> list[tuple[str, str]]:
    ms = [t * 1000 for t in times]
    kib = [p / 1024 for p in peaks]
    return [
        (f"{name}: time p50 / p99 / worst", f"{pct(ms, 50):8.3f} / {pct(ms, 99):8.3f} / {max(ms):8.3f} ms"),
        (f"{name}: peak memory p50 / p99 / worst", f"{pct(kib, 50):8.0f} / {pct(kib, 99):8.0f} / {max(kib):8.0f} KiB"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patches", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--no-sql", action="store_true", help="the service's applier only")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    docs = documents(rng)
    # Every kind on both documents: the kind turns with each patch, the document with each round
    place = [(KINDS[i % len(KINDS)], docs[(i // len(KINDS)) % 2]) for i in range(args.patches)]
    cases = [(doc, hostile(kind, doc, rng)) for kind, doc in place]
    floors = [(doc, benign(doc, min(len(patch), 1000))) for doc, patch in cases]
    print(
        f"{args.patches} hostile patches ({', '.join(KINDS)}), {len(json.dumps(cases[0][1]))}..."
        f"{max(len(json.dumps(p)) for _, p in cases):,} bytes each, on documents of "
        f"{document_size(docs[0]):,} and {document_size(docs[1]):,} bytes; ceiling {CEILING:,} bytes"
    )
    # The cases are hundreds of MB of Python objects: out of the collector's sight, so that its full
    # passes over them do not land in one patch's time (a function holds one patch, not a thousand)
    gc.collect()
    gc.freeze()
    py = python_run(cases)
    py_floor = python_run(floors)
    out = rows("python hostile", py[0], py[1]) + rows("python floor", py_floor[0], py_floor[1])
    out.append(("python outcomes", ", ".join(f"{k} {v}" for k, v in sorted(py[2].items()))))
    if not args.no_sql:
        dsn = fresh_database("bench_patch_budget")
        sq = sql_run(dsn, cases)
        sq_floor = sql_run(dsn, floors)
        out += rows("sql hostile", sq[0], sq[1]) + rows("sql floor", sq_floor[0], sq_floor[1])
        out.append(("sql outcomes", ", ".join(f"{k} {v}" for k, v in sorted(sq[2].items()))))
    table("Patch budget: hostile patches against a benign floor of the same operations", out)
    for name, result in (("python", py), *((("sql", sq),) if not args.no_sql else ())):
        slowest = max(range(len(cases)), key=lambda i: result[0][i])  # noqa: B023
        print(f"{name}'s slowest hostile patch: {KINDS[slowest % len(KINDS)]}, {len(cases[slowest][1])} operations")


if __name__ == "__main__":
    main()

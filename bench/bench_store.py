"""Store benchmark: users x versions of a ~10 KB document changing ~5% per version.

    .venv/bin/python bench/bench_store.py [--users 1000] [--versions 100]

Prints append throughput (diff time reported separately), head and at() latencies, table
bytes against a full-copy-per-version table, and the floors: a bare INSERT + UPDATE
transaction and a bare primary-key SELECT of the same bytes.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, pct, summary_ms, table  # noqa: E402
from user_memory.patching import make_patch  # noqa: E402
from user_memory.store import MemoryStore  # noqa: E402

_letters = random.Random(1)
# A vocabulary large enough that TOAST compression of the full-copy table is realistic.
WORDS = [
    "".join(_letters.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_letters.randint(3, 9))) for _ in range(3000)
]


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def initial_document(rng: random.Random) -> dict:
    parts = {
        f"part_{i}": {
            "name": f"Part {i} {rng.choice(WORDS)}",
            "status": rng.choice(["active", "dormant", "integrating"]),
            "recency_score": round(rng.random(), 3),
            "influence_score": round(rng.random(), 3),
            "goals": [{"goal": sentence(rng, 6)} for _ in range(2)],
        }
        for i in range(29)
    }
    return {
        "version": 1,
        "last_updated_by": "bench",
        "summary": sentence(rng, 60),
        "parts": parts,
        "triggers_and_goals": [
            {"trigger": sentence(rng, 5), "desired_outcome": sentence(rng, 6), "related_parts": [f"part_{i}"]}
            for i in range(18)
        ],
        "safety_notes": sentence(rng, 20),
    }


def evolve(doc: dict, rng: random.Random) -> dict:
    """Change about 5% of the document's bytes: a few scores, a goal or an outcome, sometimes the summary."""
    new = copy.deepcopy(doc)
    for key in rng.sample(sorted(new["parts"]), 2):
        new["parts"][key]["recency_score"] = round(rng.random(), 3)
    tg = new["triggers_and_goals"]
    if rng.random() < 0.5:
        part = new["parts"][rng.choice(sorted(new["parts"]))]
        part["goals"][rng.randrange(len(part["goals"]))] = {"goal": sentence(rng, 6)}
    else:
        tg[rng.randrange(len(tg))]["desired_outcome"] = sentence(rng, 6)
    if rng.random() < 0.15:
        tg.append({"trigger": sentence(rng, 5), "desired_outcome": sentence(rng, 6), "related_parts": ["part_1"]})
        tg.pop(0)
    if rng.random() < 0.25:
        words = new["summary"].split()
        start = rng.randrange(0, len(words) - 12)
        words[start : start + 12] = sentence(rng, 12).split()
        new["summary"] = " ".join(words)
    return new


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    dsn = fresh_database("user_memory_bench_store")
    rng = random.Random(7)
    store = MemoryStore(dsn)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(
        """CREATE TABLE bench_full_copy (user_id uuid, version int, document jsonb, PRIMARY KEY (user_id, version));
           CREATE TABLE bench_bare_rows (user_id uuid, version int, patch jsonb, PRIMARY KEY (user_id, version));
           CREATE TABLE bench_bare_head (user_id uuid PRIMARY KEY, version int, document jsonb);"""
    )
    users = [str(uuid.uuid4()) for _ in range(args.users)]
    docs = {u: initial_document(rng) for u in users}
    doc_bytes, patch_bytes, append_s, diff_s, bare_s = [], [], [], [], []
    started = time.perf_counter()
    for v in range(1, args.versions + 1):
        for u in users:
            old = docs[u] if v > 1 else {}
            new = evolve(docs[u], rng) if v > 1 else docs[u]
            t0 = time.perf_counter()
            patch = make_patch(old, new)
            diff_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            store.append(u, new, expected_version=v - 1, source="bench")
            append_s.append(time.perf_counter() - t0)
            doc_json, patch_json = json.dumps(new), json.dumps(patch)
            doc_bytes.append(len(doc_json))
            patch_bytes.append(len(patch_json))
            # the floor: the same bytes, no locking, no diff, no checks
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("INSERT INTO bench_bare_rows VALUES (%s, %s, %s)", (u, v, Jsonb(patch)), prepare=True)
                conn.execute(
                    """INSERT INTO bench_bare_head VALUES (%s, %s, %s)
                       ON CONFLICT (user_id) DO UPDATE SET version = EXCLUDED.version, document = EXCLUDED.document""",
                    (u, v, Jsonb(new)),
                    prepare=True,
                )
            bare_s.append(time.perf_counter() - t0)
            conn.execute("INSERT INTO bench_full_copy VALUES (%s, %s, %s)", (u, v, Jsonb(new)), prepare=True)
            docs[u] = new
        if v % 10 == 0:
            print(
                f"  {v}/{args.versions} versions written ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
    # Heads are updated in place: measure them as autovacuum keeps them, not with dead tuples.
    conn.execute("VACUUM (FULL, ANALYZE) user_memory_heads")
    conn.execute("VACUUM ANALYZE")

    head_s, bare_read_s, at_s = [], [], []
    for _ in range(args.reads):
        u = rng.choice(users)
        t0 = time.perf_counter()
        store.head(u)
        head_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        conn.execute("SELECT version, document FROM bench_bare_head WHERE user_id = %s", (u,), prepare=True).fetchone()
        bare_read_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.at(u, rng.randint(1, args.versions))
        at_s.append(time.perf_counter() - t0)

    def size(*tables: str) -> int:
        return sum(conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0] for t in tables)

    ours = size("user_memory_snapshots", "user_memory_heads")
    history_only = size("user_memory_snapshots")
    full = size("bench_full_copy")
    n = len(append_s)
    append_total = sum(append_s)
    diff_total = sum(diff_s)
    table(
        f"Store benchmark: {args.users} users x {args.versions} versions, document ~{sum(doc_bytes) / n / 1024:.1f} KB",
        [
            ("appends", f"{n}"),
            ("append throughput (incl. diff)", f"{n / append_total:,.0f} appends/s"),
            ("append latency (incl. diff)", summary_ms(append_s)),
            ("diff (make_patch, verified)", summary_ms(diff_s)),
            ("append excluding diff", f"mean {(append_total - diff_total) / n * 1000:.3f} ms"),
            ("floor: bare INSERT + UPDATE txn", summary_ms(bare_s)),
            ("append excl. diff / floor (mean)", f"{(append_total - diff_total) / sum(bare_s):.2f}x"),
            (
                "patch size / document size",
                f"{sum(patch_bytes) / sum(doc_bytes) * 100:.1f}% (mean patch {sum(patch_bytes) / n:,.0f} B)",
            ),
            ("head()", summary_ms(head_s)),
            ("floor: bare PK SELECT", summary_ms(bare_read_s)),
            ("head / floor (p50)", f"{pct(head_s, 50) / pct(bare_read_s, 50):.2f}x"),
            ("at(random version)", summary_ms(at_s)),
            ("snapshots + heads bytes", f"{ours / 1e6:,.1f} MB (history alone {history_only / 1e6:,.1f} MB)"),
            ("full copy per version bytes", f"{full / 1e6:,.1f} MB"),
            (
                "storage vs full copy",
                f"{ours / full * 100:.1f}% (history alone {history_only / full * 100:.1f}%)",
            ),
        ],
    )


if __name__ == "__main__":
    main()

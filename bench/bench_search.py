"""Search benchmark: recall per matcher and query category, latency at 100k+ items, HNSW recall
for the operators' search across users, and embedding work per version.

    python bench/bench_search.py [--users 1200] [--per-category 60] [--edits 500] [--quick]

Corpus (bench/search_corpus.py, seeded): companion memories of 60-120 items each, loaded through
MemoryStore.append (so memory_items is written as the service writes it), embedded with the
hashing embedder of tests/fake_embeddings.py in-process through PostgresSearch.embed_pending.
The hashing embedder is a stand-in for an embedding model: it sees shared words, word forms and
typos, not meaning, so the paraphrase figures say little about a real model (expect them to be
much better with one), while the others are a floor.

Tables:
  (a) recall@5 of fts, vector and fused per query category (one labelled item per query);
  (b) per-user search latency per mode (k = 10), measured around the adapter's database call
      (full_text / nearest, fused = both at depth 40 plus the fusion) from this process over a
      local socket; the query vector is computed beforehand, so no embedding time is included;
  (c) the operators' global nearest-neighbour query (search_all's SQL) through HNSW at
      ef_search 40 and 100 against the exact answer (the same ORDER BY with index scans off),
      recall@10 and latency;
  (d) embedding inputs per new version against the items whose text the version changed.
Output goes to stdout and bench/results/search.txt (or --output; --quick writes no file by default).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

from _common import fresh_database, pct
from search_corpus import (
    CATEGORIES,
    CONCEPTS,
    DETAILS,
    GOALS,
    Query,
    companion_memory,
    labelled_queries,
)
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.adapters.search import _NEAREST, PostgresSearch, fuse, vector_literal
from user_memory.domain.companion.items import document_items, item_changes
from user_memory.domain.memory.document import validate_document
from user_memory.domain.memory.patching import make_patch
from user_memory.domain.memory.repository import MemoryStore

from tests.fake_embeddings import HashingEmbedder

MODES = ("fts", "vector", "fused")
LINES: list[str] = []


def out(line: str = "") -> None:
    print(line, flush=True)
    LINES.append(line)


def grid(title: str, header: list[str], rows: list[list[str]], note: str = "") -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out()
    out(title)
    out("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))))
    out("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        out(
            "  ".join(
                str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    if note:
        for line in note.splitlines():
            out("  " + line)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def ms(values: list[float], p: float) -> str:
    return f"{pct(values, p) * 1000:.2f}"


# -- load ------------------------------------------------------------------------------------------


def load(
    store: MemoryStore, search: PostgresSearch, users: list[tuple[dict[str, Any], dict[str, str]]]
) -> list[uuid.UUID]:
    ids = [uuid.UUID(int=random.Random(i).getrandbits(128)) for i in range(len(users))]
    t = time.perf_counter()
    for uid, (doc, _) in zip(ids, users, strict=True):
        store.append(uid, doc, expected_version=0, source="bench")
    appended = time.perf_counter() - t
    t = time.perf_counter()
    inputs = calls = 0
    for uid in ids:
        report = search.embed_pending(uid)
        inputs += report.inputs
        calls += report.calls
    embedded = time.perf_counter() - t
    out(f"loaded {len(ids)} users in {appended:.1f} s (MemoryStore.append, items indexed right after each append)")
    out(f"embedded {inputs} texts in {calls} calls in {embedded:.1f} s (embed_pending, hashing embedder in-process,")
    out("  vectors stored through user_memory_store_embeddings, HNSW index maintained on insert)")
    return ids


# -- (a) recall ------------------------------------------------------------------------------------


def recall(search: PostgresSearch, ids: list[uuid.UUID], queries: list[Query]) -> None:
    found: dict[tuple[str, str], list[bool]] = defaultdict(list)
    fts_empty: dict[str, int] = defaultdict(int)
    for q in queries:
        for mode in MODES:
            hits = search.search(ids[q.user], q.text, k=5, mode=mode).hits  # type: ignore[arg-type]
            ok = any(h.path in q.relevant for h in hits)
            found[(q.category, mode)].append(ok)
            found[("overall", mode)].append(ok)
            if mode == "fts" and not hits:
                fts_empty[q.category] += 1
                fts_empty["overall"] += 1
    rows = []
    for category in (*CATEGORIES, "overall"):
        n = len(found[(category, "fts")])
        row = [category, str(n)]
        row += [f"{sum(found[(category, m)]) / n:.3f}" for m in MODES]
        row.append(f"{fts_empty[category] / n:.2f}")
        rows.append(row)
    grid(
        "(a) recall@5 (one labelled item per query, searched within its user)",
        ["category", "queries", "fts", "vector", "fused", "fts empty"],
        rows,
        "fts empty: share of queries full text answered with no item at all.\n"
        "vector/fused use the hashing embedder (words, word forms, trigrams; no meaning): paraphrase\n"
        "recall is what shared letters and hash collisions give, not what an embedding model would.",
    )


# -- (b) latency -----------------------------------------------------------------------------------


def latency(
    search: PostgresSearch, embedder: HashingEmbedder, ids: list[uuid.UUID], queries: list[Query], rounds: int
) -> None:
    with search.connection() as conn:
        items = conn.execute("SELECT count(*) FROM memory_items").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0]
        per_user = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY n)"
            " FROM (SELECT count(*) n FROM memory_items GROUP BY user_id) c"
        ).fetchone()[0]
    prepared = [(ids[q.user], q.text, embedder.embed([q.text])[0]) for q in queries]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for uid, text, vector in prepared[:20]:  # warm-up: prepared statements, caches
        search.full_text(uid, text, 10)
        search.nearest(uid, vector, 10)
    for _ in range(rounds):
        for uid, text, vector in prepared:
            times["fts"].append(timed(lambda: search.full_text(uid, text, 10))[0])  # noqa: B023
            times["vector"].append(timed(lambda: search.nearest(uid, vector, 10))[0])  # noqa: B023

            def fused() -> list[Any]:
                return fuse([search.full_text(uid, text, 40), search.nearest(uid, vector, 40)], 10)  # noqa: B023

            times["fused"].append(timed(fused)[0])
    rows = [
        [m, str(len(times[m])), ms(times[m], 50), ms(times[m], 99), f"{sum(times[m]) / len(times[m]) * 1000:.2f}"]
        for m in MODES
    ]
    grid(
        f"(b) per-user search latency, k = 10, {items} items / {vectors} vectors in the database "
        f"(median {per_user:.0f} items per user)",
        ["mode", "samples", "p50 ms", "p99 ms", "mean ms"],
        rows,
        "Timed around PostgresSearch.full_text / nearest (pool checkout, one round trip, rows decoded) on\n"
        "a local socket; the query vector was computed beforehand (embedding time excluded). fused = both\n"
        "rankings at depth 40 (two round trips, sequential) plus the rank fusion in Python.",
    )


# -- (c) HNSW against exact ------------------------------------------------------------------------


def hnsw_recall(search: PostgresSearch, embedder: HashingEmbedder, queries: list[Query], n: int) -> None:
    texts = list(dict.fromkeys(q.text for q in queries))[:n]
    vectors = [vector_literal(embedder.embed([t])[0]) for t in texts]
    exact_plan = ann_plan = ""
    results: dict[str, list[list[tuple[str, float]]]] = {}
    times: dict[str, list[float]] = {}

    def run(label: str, settings: list[str]) -> None:
        nonlocal exact_plan, ann_plan
        results[label], times[label] = [], []
        with search.connection() as conn, conn.transaction():
            for s in settings:
                conn.execute(s)
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + _NEAREST, {"v": vectors[0], "n": 10}).fetchall())
            if label == "exact":
                exact_plan = plan
            else:
                ann_plan = plan
            for v in vectors[:3]:  # warm-up
                conn.execute(_NEAREST, {"v": v, "n": 10}, prepare=False).fetchall()
            for v in vectors:
                elapsed, rows = timed(lambda: conn.execute(_NEAREST, {"v": v, "n": 10}, prepare=False).fetchall())  # noqa: B023
                times[label].append(elapsed)
                results[label].append([(f"{r[0]}/{r[1]}", 1.0 - float(r[2])) for r in rows])

    run("exact", ["SET LOCAL enable_indexscan = off"])
    run("ef_search 40", ["SET LOCAL hnsw.ef_search = 40"])
    run("ef_search 100", ["SET LOCAL hnsw.ef_search = 100"])
    run("ef_search 400", ["SET LOCAL hnsw.ef_search = 400"])
    assert "idx_memory_embeddings_hnsw" not in exact_plan, exact_plan
    assert "idx_memory_embeddings_hnsw" in ann_plan, ann_plan
    with search.connection() as conn:
        total, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT embedding::text) FROM memory_embeddings"
        ).fetchone()
    rows = []
    for label in ("exact", "ef_search 40", "ef_search 100", "ef_search 400"):
        strict = tied = 0.0
        for got, want in zip(results[label], results["exact"], strict=True):
            want_ids = {w[0] for w in want}
            kth = want[-1][1] if want else 0.0
            strict += len({g[0] for g in got} & want_ids) / max(1, len(want))
            # With identical texts across users, many vectors tie: a result as near as the exact
            # 10th is as good an answer as the one the exact scan happened to return.
            tied += sum(1 for g in got if g[1] <= kth + 1e-6) / max(1, len(want))
        rows.append(
            [
                label,
                str(len(vectors)),
                f"{strict / len(vectors):.3f}",
                f"{tied / len(vectors):.3f}",
                ms(times[label], 50),
                ms(times[label], 99),
            ]
        )
    grid(
        f"(c) global nearest neighbours (search_all's query, k = 10) over {total} vectors "
        f"({distinct} distinct): HNSW (m 16, ef_construction 64) vs exact",
        ["plan", "queries", "recall@10 (ids)", "recall@10 (distance)", "p50 ms", "p99 ms"],
        rows,
        "exact: the same ORDER BY ... LIMIT with SET LOCAL enable_indexscan = off (EXPLAIN checked, below).\n"
        "recall (ids): share of the exact ids returned. recall (distance):\n"
        "share of results at most as far as the exact 10th (ties between identical texts of different\n"
        "users count as correct). Latency: the one SQL statement, query vector precomputed, not prepared\n"
        "(a statement prepared under enable_indexscan = off would keep its seq scan plan).",
    )
    for label, plan in (("exact plan", exact_plan), ("HNSW plan", ann_plan)):
        plan = re.sub(r"'\[[^']*\]'::vector", "'[...]'::vector", plan)
        nodes = [line.strip().removeprefix("->").strip().split("  (cost")[0] for line in plan.splitlines()]
        out(f"  {label}: " + " <- ".join(n for n in nodes if n))


# -- (d) embedding work per version ----------------------------------------------------------------


def edit(rng: random.Random, doc: dict[str, Any], kind: str, step: int) -> dict[str, Any] | None:
    new = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
    if kind == "todo text":
        if not doc["todos"]:
            return None
        tid = rng.choice(sorted(doc["todos"]))
        concept = CONCEPTS.get(tid.removeprefix("t_"))
        text = rng.choice(concept.phrasings) if concept else doc["todos"][tid]["text"]
        new["todos"][tid] = {**doc["todos"][tid], "text": f"{text} {rng.choice(DETAILS)} (try {step})"}
    elif kind == "add goal":
        goal = rng.choice(GOALS)
        gid = f"g_{goal.key}_{step}"
        new["goals"][gid] = {"id": gid, "title": f"{rng.choice(goal.phrasings)} by {2026 + step % 5}"}
    elif kind == "status only":
        open_todos = sorted(t for t, v in doc["todos"].items() if v.get("status") != "done")
        if not open_todos:
            return None
        tid = rng.choice(open_todos)
        new["todos"][tid] = {**doc["todos"][tid], "status": "done"}
    elif kind == "remove element":
        section = rng.choice(["todos", "events"])
        if not doc[section]:
            return None
        del new[section][rng.choice(sorted(doc[section]))]
    elif kind == "remove list entry":
        skills = list(doc["current_state"]["skills"])
        if len(skills) < 2:
            return None
        skills.pop(rng.randrange(len(skills)))
        new["current_state"] = {**doc["current_state"], "skills": skills}
    return validate_document(new, "companion")


def embedding_work(store: MemoryStore, search: PostgresSearch, ids: list[uuid.UUID], edits: int) -> None:
    rng = random.Random(4242)
    kinds = ["todo text", "add goal", "status only", "remove element", "remove list entry"]
    stats: dict[str, dict[str, int]] = {k: defaultdict(int) for k in [*kinds, "all"]}
    done = 0
    while done < edits:
        uid = rng.choice(ids)
        kind = kinds[done % len(kinds)]
        head = store.head(uid)
        old = head.document
        new = edit(rng, old, kind, done)
        if new is None:
            continue
        changes = item_changes(old, new, make_patch(old, new))
        old_texts = {i.text for i in document_items(old).values()}
        upserts = [c for c in changes if not c.get("remove")]
        new_texts = {c["text"] for c in upserts} - old_texts
        store.append(uid, new, expected_version=head.version, source="bench", base=head)
        report = search.embed_pending(uid)
        for key in (kind, "all"):
            s = stats[key]
            s["versions"] += 1
            s["upserted"] += len(upserts)
            s["removed"] += len(changes) - len(upserts)
            s["new text"] += len(new_texts)
            s["inputs"] += report.inputs
            s["calls"] += report.calls
            s["mismatch"] += int(report.inputs != len(new_texts))
        done += 1
    rows = [
        [
            k,
            str(s["versions"]),
            str(s["upserted"]),
            str(s["removed"]),
            str(s["new text"]),
            str(s["inputs"]),
            str(s["calls"]),
            str(s["mismatch"]),
        ]
        for k, s in stats.items()
    ]
    grid(
        f"(d) embedding work per version ({edits} random edits, embed_pending after each)",
        ["edit", "versions", "items upserted", "items removed", "new texts", "embed inputs", "calls", "inputs != new"],
        rows,
        "new texts: distinct texts of upserted items the user had no item with before the version\n"
        "(target: embed inputs == new texts). A removed list entry shifts the later entries' pointers:\n"
        "they are upserted under new paths, but their texts (and so their vectors) are reused.",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1200)
    parser.add_argument("--per-category", type=int, default=60)
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2, help="latency: passes over the query set")
    parser.add_argument("--global-queries", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="a small run (80 users) to check the script")
    parser.add_argument("--output", type=Path, help="default: bench/results/search.txt (a --quick run writes none)")
    args = parser.parse_args()
    if args.quick:
        args.users, args.per_category, args.edits, args.rounds, args.global_queries = 80, 15, 50, 1, 30
    elif args.output is None:
        args.output = Path(__file__).resolve().parent / "results" / "search.txt"
    started = time.perf_counter()
    out(f"bench_search: {args.users} users, {args.per_category} queries per category, {args.edits} edits")
    rng = random.Random(20250601)
    users = [companion_memory(rng) for _ in range(args.users)]
    queries = labelled_queries(random.Random(77), users, args.per_category)
    dsn = fresh_database("user_memory_bench_search")
    pool = open_pool(dsn, size=4)
    embedder = HashingEmbedder()
    store = MemoryStore(PostgresRecorder(pool))
    search = PostgresSearch(pool, embedder)
    ids = load(store, search, users)
    with pool.connection() as conn:
        conn.execute("ANALYZE memory_items")
        conn.execute("ANALYZE memory_embeddings")
    recall(search, ids, queries)
    latency(search, embedder, ids, queries, args.rounds)
    hnsw_recall(search, embedder, queries, args.global_queries)
    embedding_work(store, search, ids, args.edits)
    out()
    out(f"total {time.perf_counter() - started:.0f} s")
    pool.close()
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text("\n".join(LINES) + "\n")


if __name__ == "__main__":
    main()

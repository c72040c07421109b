"""Store benchmark: users x versions of a ~10 KB document changing ~5% per version.

    .venv/bin/python bench/bench_store.py [--users 1000] [--versions 100]
    .venv/bin/python bench/bench_store.py --compare-eventsourcing [--users 100] [--versions 60]
        [--wal-by-relation] [--database-applies]

The first form prints append throughput (diff time reported separately), head and at()
latencies, table bytes against a full-copy-per-version table, the floors (a bare INSERT +
UPDATE transaction and a bare primary-key SELECT of the same bytes), and the bytes of every
relation: heap, TOAST and each index of user_memory_snapshots and user_memory_heads.

The second stores the same history three times, side by side on the same server: through
MemoryStore, through the bare floor (one statement: the patch row's INSERT and the head's upsert,
each keyed by its primary key only) and with the `eventsourcing` library (9.x,
`pip install -e .[bench]`), each version an event holding the same JSON patch, snapshots every 50
versions like our checkpoints. It prints the bytes of each, the time of a version's database
write (MemoryStore's `user_memory_append` call against the floor's statement, interleaved version
by version; each version's statements on one checked-out connection, as the worker holds one for a
user's run, and that checkout timed apart) and the WAL a version writes (insert-LSN differences
around each write; defaults: 100 users x 60 versions of a ~13 KiB document, ~5% changed per
version). `--wal-by-relation` also reads MemoryStore's WAL with pg_waldump (local embedded server
only) and prints where it goes, relation by relation; `--database-applies` sends MemoryStore's patches without their
documents, so that user_memory_append applies each to the head as it does an end user's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, pct, summary_ms, table
from psycopg import sql
from user_memory.adapters.postgres import HeldConnections, PostgresRecorder, open_pool
from user_memory.domain.memory.patching import make_patch
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.ports import InsertOutcome, NewVersion

_letters = random.Random(1)
# A vocabulary large enough that TOAST compression of the full-copy table is realistic.
WORDS = [
    "".join(_letters.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_letters.randint(3, 9))) for _ in range(3000)
]


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def initial_document(rng: random.Random, parts_count: int = 29) -> dict:
    """~9.7 KB of JSON with the default 29 parts; each further part adds about 230 bytes."""
    parts = {
        f"part_{i}": {
            "name": f"Part {i} {rng.choice(WORDS)}",
            "status": rng.choice(["active", "dormant", "integrating"]),
            "recency_score": round(rng.random(), 3),
            "influence_score": round(rng.random(), 3),
            "goals": [{"goal": sentence(rng, 6)} for _ in range(2)],
        }
        for i in range(parts_count)
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
    parser.add_argument(
        "--compare-eventsourcing",
        action="store_true",
        help="store the same history with MemoryStore, the bare floor and the eventsourcing library",
    )
    parser.add_argument(
        "--wal-by-relation", action="store_true", help="with --compare-eventsourcing: MemoryStore's WAL per relation"
    )
    parser.add_argument(
        "--database-applies",
        action="store_true",
        help="with --compare-eventsourcing: MemoryStore sends the patch alone, the database applies it to the head",
    )
    args = parser.parse_args()
    if args.compare_eventsourcing:
        users = args.users if "--users" in sys.argv else 100
        versions = args.versions if "--versions" in sys.argv else 60
        compare_eventsourcing(
            users, versions, wal_by_relation=args.wal_by_relation, database_applies=args.database_applies
        )
        return
    dsn = fresh_database("user_memory_bench_store")
    rng = random.Random(7)
    store = MemoryStore(PostgresRecorder(open_pool(dsn)))
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
    items = size("memory_items")  # the search index, written with each version (migration 012)
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
            ("search index (memory_items) bytes", f"{items / 1e6:,.1f} MB (not in the ratios)"),
            (
                "storage vs full copy",
                f"{ours / full * 100:.1f}% (history alone {history_only / full * 100:.1f}%)",
            ),
        ],
    )

    print_relation_bytes(conn, "Bytes per relation", ["user_memory_snapshots", "user_memory_heads", "memory_items"])


# -- bytes per relation ---------------------------------------------------------------------------

_RELATION = """
SELECT pg_relation_size(c.oid, 'main'),
       pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm'),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       pg_table_size(c.oid),
       pg_total_relation_size(c.oid)
  FROM pg_class c WHERE c.oid = to_regclass(%s)
"""

_INDEXES = """
SELECT i.indexname, pg_relation_size(format('%%I.%%I', i.schemaname, i.indexname)::regclass)
  FROM pg_indexes i WHERE i.schemaname = current_schema() AND i.tablename = %s ORDER BY i.indexname
"""


def relation_bytes(conn: psycopg.Connection, name: str) -> list[tuple[str, int]]:
    """(part, bytes) of one table: heap, free-space and visibility maps, TOAST (with its index),
    each index, and the total, which is their sum."""
    row = conn.execute(_RELATION, (name,)).fetchone()
    assert row is not None and row[0] is not None, f"no relation {name}"
    heap, maps, toast, table_size, total = row
    assert table_size == heap + maps + toast
    parts = [("heap", heap), ("free-space + visibility maps", maps), ("TOAST (heap + index)", toast)]
    parts += [(f"index {index}", size) for index, size in conn.execute(_INDEXES, (name,))]
    assert sum(size for _, size in parts) == total
    return [*parts, ("total", total)]


def print_relation_bytes(conn: psycopg.Connection, title: str, names: list[str]) -> int:
    """Print relation_bytes of each table; return the sum of their totals."""
    rows: list[tuple[str, str]] = []
    grand = 0
    for name in names:
        parts = relation_bytes(conn, name)
        rows += [(f"{name} {part}", f"{size:>12,} B") for part, size in parts]
        grand += parts[-1][1]
    rows.append(("all of the above", f"{grand:>12,} B"))
    table(title, rows)
    return grand


# -- side by side with the eventsourcing library --------------------------------------------------


def evolve_share(doc: dict, rng: random.Random, again: float) -> dict:
    """evolve(), then with probability `again` a second round: ~5% of a ~13 KiB document at 0.7."""
    new = evolve(doc, rng)
    return evolve(new, rng) if rng.random() < again else new


History = tuple[uuid.UUID, list[dict], list[list[dict]]]


def histories(users: int, versions: int) -> list[History]:
    """The same deterministic histories for both stores: ~13 KiB documents (45 parts), ~5% changed
    a version; each with its documents and the patch of every version (the first from {})."""
    rng = random.Random(11)
    result = []
    for _ in range(users):
        docs = [initial_document(rng, 45)]
        for _ in range(versions - 1):
            docs.append(evolve_share(docs[-1], rng, 0.7))
        patches = [make_patch(old, new) for old, new in zip([{}, *docs], docs, strict=False)]
        result.append((uuid.UUID(int=rng.getrandbits(128), version=4), docs, patches))
    return result


def empty_database(dsn: str, name: str) -> str:
    """DSN of a new, empty database `name` on the same server as `dsn`."""
    with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def store_with_eventsourcing(dsn: str, data: list[History], interval: int) -> None:
    """Each version an event holding the version's JSON patch; a snapshot every `interval` versions.

    Settings: PostgreSQL persistence (eventsourcing.postgres) on the same server, default JSON
    transcoder, no compressor, no cipher; the library's own tables (memories_events with its
    primary key and notification-id index, memories_snapshots).
    """
    try:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event
    except ImportError:
        sys.exit("the comparison needs the eventsourcing library: pip install -e '.[bench]'")
    from user_memory.domain.memory.patching import apply_patch

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(info["dbname"]),
        "POSTGRES_HOST": str(info.get("host") or "localhost"),
        "POSTGRES_PORT": str(info.get("port") or 5432),
        "POSTGRES_USER": str(info.get("user") or "postgres"),
        "POSTGRES_PASSWORD": str(info.get("password") or ""),
    }

    class Memory(Aggregate):
        @event("Created")
        def __init__(self, patch: list) -> None:
            self.document = apply_patch({}, patch)

        @event("Patched")
        def patch(self, patch: list) -> None:
            self.document = apply_patch(self.document, patch)

    class Memories(Application):
        snapshotting_intervals = {Memory: interval}

    app = Memories(env=env)
    for _user, _docs, patches in data:
        memory = Memory(patches[0])
        app.save(memory)
        for patch in patches[1:]:
            memory.patch(patch)
            app.save(memory)
    app.close()


# -- WAL -------------------------------------------------------------------------------------------


def wal_position(conn: psycopg.Connection) -> int:
    """The server's WAL insert position in bytes (cluster-wide)."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint", prepare=True).fetchone()
    assert row is not None
    return int(row[0])


class MeasuredRecorder(PostgresRecorder):
    """PostgresRecorder that times each version's database write (`insert`: the one
    user_memory_append statement) and the WAL it writes, read from another connection; and,
    apart, the search index's catch-up that follows it (migration 022; none before it)."""

    def __init__(self, pool: Any, lsn: psycopg.Connection, *, send_document: bool = True) -> None:
        super().__init__(pool)
        self.lsn = lsn
        self.send_document = send_document
        self.seconds: list[float] = []
        self.wal: list[int] = []
        self.spans: list[tuple[int, int]] = []
        self.index_seconds: list[float] = []
        self.index_wal: list[int] = []
        self.index_spans: list[tuple[int, int]] = []

    def catch_up_index(self, user_id: uuid.UUID) -> str:
        catch_up = getattr(super(), "catch_up_index", None)
        if catch_up is None:  # a release before 022: the index is written in the append
            return "current"
        before = wal_position(self.lsn)
        t0 = time.perf_counter()
        status = str(catch_up(user_id))
        self.index_seconds.append(time.perf_counter() - t0)
        after = wal_position(self.lsn)
        self.index_wal.append(after - before)
        self.index_spans.append((before, after))
        return status

    def insert(self, new: NewVersion) -> InsertOutcome:
        if not self.send_document:  # the patch alone: the database applies it to the head (015)
            new = dataclasses.replace(new, document_json=None)  # type: ignore[arg-type]
        before = wal_position(self.lsn)
        t0 = time.perf_counter()
        outcome = super().insert(new)
        self.seconds.append(time.perf_counter() - t0)
        after = wal_position(self.lsn)
        self.wal.append(after - before)
        self.spans.append((before, after))
        return outcome


_FLOOR_TABLES = """
CREATE TABLE bench_floor_rows (user_id uuid, version int, patch jsonb NOT NULL, PRIMARY KEY (user_id, version));
CREATE TABLE bench_floor_heads (user_id uuid PRIMARY KEY, version int NOT NULL, document jsonb NOT NULL);
"""
# The floor of a version: its patch row and the head's rewrite, one statement (one round trip and
# one transaction, as user_memory_append), no lock taken first, no checks, nothing else.
_FLOOR = """
WITH r AS (INSERT INTO bench_floor_rows VALUES (%(u)s, %(v)s, %(p)s))
INSERT INTO bench_floor_heads VALUES (%(u)s, %(v)s, %(d)s::jsonb)
ON CONFLICT (user_id) DO UPDATE SET version = EXCLUDED.version, document = EXCLUDED.document
"""


def wal_by_relation_rows(conn: psycopg.Connection, spans: list[tuple[int, int]]) -> list[tuple[str, str]]:
    """Bytes of WAL (records with their full-page images) per relation within `spans`, read with
    pg_waldump from the server's own pg_wal; a record is counted for its first block's relation."""
    try:
        from pgserver._commands import POSTGRES_BIN_PATH

        waldump = str(POSTGRES_BIN_PATH / "pg_waldump")
    except ImportError:
        waldump = shutil.which("pg_waldump") or "pg_waldump"
    data = conn.execute("SHOW data_directory").fetchone()
    assert data is not None
    names: dict[str, str] = {}
    for filenode, name, kind, owner in conn.execute(
        """SELECT c.relfilenode::text, c.relname, c.relkind,
                  (SELECT t.relname FROM pg_class t WHERE t.reltoastrelid IN (c.oid,
                     (SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = c.oid)))
             FROM pg_class c WHERE c.relfilenode <> 0"""
    ):
        names[filenode] = f"{owner} TOAST" + (" index" if kind == "i" else "") if owner else name
    totals: dict[str, int] = {}
    fpi: dict[str, int] = {}
    start, end = spans[0][0], spans[-1][1]
    fmt = "{:X}/{:X}".format
    out = subprocess.run(
        [
            waldump,
            "-p",
            str(Path(data[0]) / "pg_wal"),
            "-s",
            fmt(start >> 32, start & 0xFFFFFFFF),
            "-e",
            fmt(end >> 32, end & 0xFFFFFFFF),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if not out.stdout:
        sys.exit(f"pg_waldump read nothing: {out.stderr.strip()[:300]}")
    ranges = iter(spans)
    span = next(ranges)
    record = re.compile(
        r"rmgr: (\w+)\s+len \(rec/tot\):\s+(\d+)/\s*(\d+),.*?lsn: ([0-9A-F]+)/([0-9A-F]+),.*?desc: (\w+)"
    )
    for line in out.stdout.splitlines():
        m = record.search(line)
        if not m:
            continue
        lsn = (int(m.group(4), 16) << 32) + int(m.group(5), 16)
        while lsn >= span[1]:
            span = next(ranges, (1 << 64, 1 << 64))
        if lsn < span[0]:
            continue  # between two versions: another connection's (the floor's, a LSN query)
        rel = re.search(r"rel \d+/\d+/(\d+)", line)
        where = names.get(rel.group(1), f"relfilenode {rel.group(1)}") if rel else f"{m.group(1)} {m.group(6)}"
        totals[where] = totals.get(where, 0) + int(m.group(3))
        fpi[where] = fpi.get(where, 0) + int(m.group(3)) - int(m.group(2))
    n = len(spans)
    return [
        (where, f"{total / n:>9,.0f} B a version (full-page images {fpi[where] / n:,.0f} B)")
        for where, total in sorted(totals.items(), key=lambda kv: -kv[1])
    ]


def compare_eventsourcing(
    users: int, versions: int, *, wal_by_relation: bool = False, database_applies: bool = False
) -> None:
    import importlib.metadata

    data = histories(users, versions)
    doc_bytes = sum(len(json.dumps(d, separators=(",", ":"))) for _, docs, _ in data for d in docs[1:])
    patch_bytes = sum(len(json.dumps(p, separators=(",", ":"))) for _, _, patches in data for p in patches[1:])
    doc_kib = doc_bytes / (users * (versions - 1)) / 1024
    changed = f"patch {patch_bytes / doc_bytes * 100:.1f}% of the document's bytes"

    ours_dsn = fresh_database("user_memory_bench_compare")
    pool = open_pool(ours_dsn)
    lsn = psycopg.connect(ours_dsn, autocommit=True)
    floor = psycopg.connect(ours_dsn, autocommit=True)
    floor.execute(_FLOOR_TABLES)
    # Each version's statements (head, append, catch-up) on one checked-out connection, as the worker
    # holds one for a user's run and the API one for a request: the append's time is its statement's,
    # like the floor's on its own connection; the checkout (the pool's liveness check, a round trip)
    # is timed apart.
    held = HeldConnections(pool)
    recorder = MeasuredRecorder(held, lsn, send_document=not database_applies)
    store = MemoryStore(recorder)  # checkpoints every 50 versions, version 1 a patch only
    floor_s: list[float] = []
    floor_wal: list[int] = []
    checkout_s: list[float] = []
    lsn.execute("CHECKPOINT")  # both start with the same full-page images to write
    started = time.perf_counter()
    for user, docs, patches in data:
        for v, (doc, patch) in enumerate(zip(docs, patches, strict=True), start=1):
            with contextlib.ExitStack() as holding:
                t0 = time.perf_counter()
                holding.enter_context(held.hold())
                checkout_s.append(time.perf_counter() - t0)
                store.append(user, doc, expected_version=v - 1, source="bench")
            # The floor is handed the patch, and the document already encoded, as the store's insert is.
            params = {"u": user, "v": v, "p": Jsonb(patch), "d": json.dumps(doc, separators=(",", ":"))}
            before = wal_position(lsn)
            t0 = time.perf_counter()
            floor.execute(_FLOOR, params, prepare=True)
            floor_s.append(time.perf_counter() - t0)
            floor_wal.append(wal_position(lsn) - before)
    ours_s = time.perf_counter() - started
    pool.close()
    floor.close()

    if wal_by_relation:  # before the next checkpoint recycles the segments
        table("MemoryStore's WAL per relation (pg_waldump)", wal_by_relation_rows(lsn, recorder.spans))
        if recorder.index_spans:
            table("The index catch-up's WAL per relation (pg_waldump)", wal_by_relation_rows(lsn, recorder.index_spans))

    es_dsn = empty_database(ours_dsn, "user_memory_bench_eventsourcing")
    lsn.execute("CHECKPOINT")
    es_before = wal_position(lsn)
    started = time.perf_counter()
    store_with_eventsourcing(es_dsn, data, store.checkpoint_interval)
    es_s = time.perf_counter() - started
    es_wal = wal_position(lsn) - es_before
    n = users * versions
    ours_version_s, floor_version_s = statistics.fmean(recorder.seconds), statistics.fmean(floor_s)
    ours_wal, floor_wal_mean = sum(recorder.wal) / n, sum(floor_wal) / n
    index_s = sum(recorder.index_seconds) / n  # per version, as the append's
    checkout_version_s = statistics.fmean(checkout_s)
    index_wal = sum(recorder.index_wal) / n
    lsn.close()

    with psycopg.connect(ours_dsn, autocommit=True) as ours, psycopg.connect(es_dsn, autocommit=True) as es:
        # Heads are updated in place: measure them as autovacuum keeps them, not with dead tuples.
        ours.execute("VACUUM (FULL, ANALYZE) user_memory_heads")
        ours.execute("VACUUM ANALYZE")
        es.execute("VACUUM ANALYZE")
        lz4 = ours.execute(
            "SELECT attcompression FROM pg_attribute WHERE attrelid = 'user_memory_heads'::regclass "
            "AND attname = 'document'"
        ).fetchone()
        compression = "lz4" if lz4 and lz4[0] == "l" else "pglz (server default)"
        ours_total = print_relation_bytes(
            ours, "MemoryStore: version rows + heads", ["user_memory_snapshots", "user_memory_heads"]
        )
        history_total = relation_bytes(ours, "user_memory_snapshots")[-1][1]
        es_total = print_relation_bytes(
            es, "eventsourcing: events + snapshots", ["memories_events", "memories_snapshots"]
        )
        counts = es.execute(
            "SELECT (SELECT count(*) FROM memories_events), (SELECT count(*) FROM memories_snapshots)"
        ).fetchone()
    assert counts is not None
    table(
        f"Side by side: {users} users x {versions} versions, document ~{doc_kib:.1f} KiB (compact JSON), {changed}",
        [
            (
                "MemoryStore settings",
                f"checkpoint every {store.checkpoint_interval} versions, TOAST {compression}, "
                + ("the patch alone (the database applies it)" if database_applies else "the verified document sent"),
            ),
            (
                "eventsourcing settings",
                f"{importlib.metadata.version('eventsourcing')}, eventsourcing.postgres, JSON transcoder, "
                f"no compressor or cipher, snapshot every {store.checkpoint_interval} versions, "
                f"TOAST {compression}",
            ),
            ("eventsourcing rows", f"{counts[0]:,} events, {counts[1]:,} snapshots"),
            (
                "write time, one transaction a version",
                f"MemoryStore {ours_s:.1f} s (diffs and verifies each version; the floor's writes interleaved), "
                f"eventsourcing {es_s:.1f} s (is handed the patches)",
            ),
            (
                "a version's database write, mean",
                f"MemoryStore {ours_version_s * 1000:.3f} ms (user_memory_append), "
                f"floor {floor_version_s * 1000:.3f} ms = {ours_version_s / floor_version_s:.2f}x the floor",
            ),
            (
                "the version's checkout before it (apart)",
                f"{checkout_version_s * 1000:.3f} ms (the pool's liveness check; once for head, append and "
                f"catch-up); the append with it {(ours_version_s + checkout_version_s) / floor_version_s:.2f}x "
                "the floor (the measure before it was timed apart)",
            ),
            (
                "WAL a version, mean",
                f"MemoryStore {ours_wal:,.0f} B, floor {floor_wal_mean:,.0f} B "
                f"= {ours_wal / floor_wal_mean:.2f}x the floor; eventsourcing {es_wal / n:,.0f} B",
            ),
            (
                "the index's catch-up after it, mean a version",
                (
                    f"{index_s * 1000:.3f} ms, {index_wal:,.0f} B of WAL; append + catch-up "
                    f"{(ours_version_s + index_s) / floor_version_s:.2f}x the floor's time, "
                    f"{(ours_wal + index_wal) / floor_wal_mean:.2f}x its WAL"
                )
                if recorder.index_seconds
                else "none (the index is written in the append)",
            ),
            ("MemoryStore: history + heads", f"{ours_total:>12,} B"),
            ("MemoryStore: history alone", f"{history_total:>12,} B"),
            ("eventsourcing: events + snapshots", f"{es_total:>12,} B"),
            ("ratio history + heads / eventsourcing", f"{ours_total / es_total:.3f}"),
            ("ratio history alone / eventsourcing", f"{history_total / es_total:.3f}"),
        ],
    )


if __name__ == "__main__":
    main()

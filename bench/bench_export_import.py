"""Export and import of one user with a long history: JSON Lines out, JSON Lines back in.

    .venv/bin/python bench/bench_export_import.py [--versions 100000] [--checkpoint-interval 50]

A ~10 KB user_state memory (bench/_common.py) edited once per version (a part's status, a goal,
the summary's last sentence; about a nightly summary's change), with provenance on every fourth
version and an idempotency key on every third. The history is generated as an export file
(domain/export.py's export_lines over the generated rows, streamed to a temporary file), then:
  import  `run_import` into an empty user, in one transaction (as `user-memory import` runs it):
          every line parsed, every patch applied and every checkpoint compared, pages of 500 rows
          through user_memory_import_versions, then the search index's catch-up;
  export  `run_export` of that user to a folder (as the worker runs an export_user message, with
          LocalExportObjects instead of S3): keyset pages of 1,000 rows, streamed to the file;
  check   the exported version lines are byte-equal to the generated ones.
Printed: each step's seconds, versions a second, the file's bytes, and the process's peak RSS
after generating, importing and exporting (it stays flat: nothing holds the history).
"""

from __future__ import annotations

import os

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import argparse
import json
import random
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, sentence, table, user_state_document
from user_memory.adapters.exports import LocalExportObjects, PostgresExports
from user_memory.adapters.postgres import open_pool, transaction
from user_memory.domain.export import VersionRow, export_lines
from user_memory.domain.memory.patching import json_equal
from user_memory.jobs.export import run_export, run_import


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def history(n: int, interval: int, seed: int = 7) -> Iterator[VersionRow]:
    """n versions of one document, each a small edit of the one before, written as the patch that
    makes it (one document in memory, edited in place: each row is serialized before the next)."""
    rng = random.Random(seed)
    doc = user_state_document(rng)
    parts = sorted(doc["parts"])
    start = datetime(2031, 1, 1, tzinfo=UTC)
    for v in range(1, n + 1):
        if v == 1:
            patch = [{"op": "add", "path": f"/{k}", "value": value} for k, value in doc.items()]
        else:
            part = rng.choice(parts)
            status = rng.choice(["active", "dormant", "resolved"])
            summary = doc["summary"].rsplit(". ", 1)[0] + ". " + sentence(rng, 8)
            patch = [
                {"op": "replace", "path": f"/parts/{part}/status", "value": status},
                {"op": "replace", "path": "/summary", "value": summary},
            ]
            doc["parts"][part]["status"] = status
            doc["summary"] = summary
        yield VersionRow(
            version=v,
            patch=patch,
            checkpoint=doc if v % interval == 0 else None,
            created_at=start + timedelta(minutes=v),
            source="daily" if v % 2 else "api",
            idempotency_key=f"run:{v}" if v % 3 == 0 else None,
            provenance={"mode": "edit", "edits": [{"op": "replace", "reason": "bench"}]} if v % 4 == 0 else None,
        )


def version_lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        for line in f:
            if line.startswith(b'{"kind":"version"'):
                yield line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--checkpoint-interval", type=int, default=50)
    args = parser.parse_args()
    dsn = fresh_database("bench_export_import")
    pool = open_pool(dsn, size=2)
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    generated = work / "generated.jsonl"
    user, importer = uuid.uuid4(), uuid.uuid4()
    rows: list[tuple[str, str]] = []

    t = time.perf_counter()
    with generated.open("wb") as f:
        for line in export_lines(user, datetime.now(UTC), history(args.versions, args.checkpoint_interval), [], []):
            f.write(line)
    rows.append(("generate the export file", f"{time.perf_counter() - t:.1f} s, {generated.stat().st_size:,} bytes"))
    rows.append(("peak RSS after generating", f"{rss_mb():.0f} MB"))

    t = time.perf_counter()
    with generated.open("rb") as f, transaction(pool) as tx:
        done = run_import(PostgresExports(tx), importer, f)
    seconds = time.perf_counter() - t
    assert done.versions == args.versions
    rows.append((f"import {args.versions:,} versions", f"{seconds:.1f} s ({args.versions / seconds:,.0f} versions/s)"))
    rows.append(("peak RSS after importing", f"{rss_mb():.0f} MB"))

    exports = PostgresExports(pool)

    def export(who: uuid.UUID) -> tuple[Path, float, int, int]:
        job = exports.create(who, "bench")
        t = time.perf_counter()
        finished = run_export(exports, LocalExportObjects(work), job.id)
        assert finished.object_key is not None and finished.bytes is not None and finished.lines is not None
        return work / finished.object_key, time.perf_counter() - t, finished.bytes, finished.lines

    first, seconds, size, lines = export(importer)
    rows.append((f"export {args.versions:,} versions", f"{seconds:.1f} s ({args.versions / seconds:,.0f} versions/s)"))
    rows.append(("exported file", f"{size:,} bytes, {lines:,} lines"))
    rows.append(("peak RSS after exporting", f"{rss_mb():.0f} MB"))
    same = all(
        json_equal(json.loads(a), json.loads(b))
        for a, b in zip(version_lines(generated), version_lines(first), strict=True)
    )
    rows.append(("every version as generated (JSON-equal)", str(same)))
    # The stored form round-trips byte for byte: import the export, export again, compare.
    again = uuid.uuid4()
    with first.open("rb") as f, transaction(pool) as tx:
        run_import(PostgresExports(tx), again, f)
    second, *_ = export(again)
    equal = all(a == b for a, b in zip(version_lines(first), version_lines(second), strict=True))
    rows.append(("export of the import of the export: byte-equal", str(equal)))
    title = f"export and import, one user, {args.versions:,} versions (checkpoint every {args.checkpoint_interval})"
    table(title, rows)
    pool.close()


if __name__ == "__main__":
    main()

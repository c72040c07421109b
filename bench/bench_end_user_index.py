"""End users' index benchmark: the time of user_memory_append as an end user (the API's requests,
Supabase's Data API), whose item rows the database derives from the stored document (migration
020), beside the same writes as the service (its diffed rows taken as they are).

    .venv/bin/python bench/bench_end_user_index.py [--users 20] [--versions 50]

Prints, per kind of write, the append's time as the end user and as the service:
  edit       a ~10 KB companion document (30 to-dos, 10 goals, 10 events), each version changing
             one to-do (a patch of one or two operations: one section derived);
  replace    the same change sent as one whole-document replace (every section derived);
  large      a document of 2,000 to-dos (about the companion schema's most), written whole;
  hostile    a document at the size limit made of one-character strings under a 100-character
             key (its index would be far larger than itself): the time until it is refused.
To compare with the code before migration 020, run it once with that file moved out of
migrations/ (the end user's rows are then the ones sent).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, summary_ms, table
from user_memory.domain.companion.items import item_changes
from user_memory.domain.memory.patching import make_patch

_APPEND = "SELECT status FROM user_memory_append(%s, %s, %s, false, %s, 'api: bench', NULL, NULL, NULL, %s)"
WORDS = ["call", "mum", "buy", "milk", "run", "plan", "trip", "read", "book", "pay", "rent", "gym", "tax", "walk"]


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def companion_document(rng: random.Random, todos: int = 30) -> dict[str, Any]:
    """A companion document: ~10 KB with the default 30 to-dos."""
    return {
        "basic_info": {"name": "Sam", "email": "sam@example.com", "timezone": "Europe/Paris"},
        "advanced_info": {"occupation": "nurse", "hobbies": [words(rng, 2) for _ in range(5)]},
        "todos": {
            f"t{i}": {"id": f"t{i}", "text": words(rng, 6), "status": "open", "due_date": f"2026-03-{1 + i % 28:02d}"}
            for i in range(todos)
        },
        "goals": {
            f"g{i}": {"id": f"g{i}", "title": words(rng, 5), "status": "active", "target_date": "2026-10-01"}
            for i in range(10)
        },
        "events": {
            f"e{i}": {
                "id": f"e{i}",
                "summary": words(rng, 4),
                "start": f"2026-03-{1 + i:02d}T09:00:00Z",
                "end": f"2026-03-{1 + i:02d}T10:00:00Z",
                **({"recurrence": ["RRULE:FREQ=WEEKLY;COUNT=10"]} if i % 3 == 0 else {}),
            }
            for i in range(10)
        },
    }


def append(
    conn: psycopg.Connection,
    user: uuid.UUID,
    version: int,
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    end_user: bool,
    whole: bool = False,
    items: list[dict[str, Any]] | None = None,
) -> float:
    """Seconds the append statement took (the role and claims set before the clock starts); the
    items are the service's for the change unless given."""
    patch = [{"op": "replace", "path": "", "value": new}] if whole else make_patch(old, new)
    items = item_changes(old, new, patch) if items is None else items
    with conn.transaction():
        if end_user:
            conn.execute("SET LOCAL ROLE authenticated")
            conn.execute(
                "SELECT set_config('request.jwt.claims', %s, true)",
                (json.dumps({"sub": str(user), "role": "authenticated"}),),
            )
        else:
            conn.execute("SET LOCAL ROLE service_role")
        start = time.perf_counter()
        try:
            status = conn.execute(_APPEND, (user, version, Jsonb(patch), Jsonb(new), Jsonb(items))).fetchone()
        except psycopg.Error as err:
            raise Refused(time.perf_counter() - start, f"{type(err).__name__}: {err.diag.message_primary}") from err
        took = time.perf_counter() - start
    assert status == ("written",), status
    return took


class Refused(Exception):
    """An append the database refused, after `took` seconds."""

    def __init__(self, took: float, error: str) -> None:
        super().__init__(error)
        self.took = took
        self.error = error


def history(conn: psycopg.Connection, users: int, versions: int, *, end_user: bool, whole: bool) -> list[float]:
    rng = random.Random(11)
    times = []
    for _ in range(users):
        user = uuid.uuid4()
        doc = companion_document(rng)
        append(conn, user, 0, {}, doc, end_user=end_user)
        for v in range(1, versions + 1):
            new = json.loads(json.dumps(doc))
            todo = new["todos"][f"t{rng.randrange(30)}"]
            todo["text"] = words(rng, 6)
            todo["status"] = rng.choice(["open", "done", "in_progress"])
            times.append(append(conn, user, v, doc, new, end_user=end_user, whole=whole))
            doc = new
    return times


def once(conn: psycopg.Connection, doc: dict[str, Any], *, end_user: bool, items: Any = None) -> tuple[float, str]:
    try:
        return append(conn, uuid.uuid4(), 0, {}, doc, end_user=end_user, items=items), "written"
    except Refused as refused:
        return refused.took, refused.error


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--versions", type=int, default=50)
    args = parser.parse_args()
    dsn = fresh_database("user_memory_bench_end_user_index")
    conn = psycopg.connect(dsn, autocommit=True)
    limit = conn.execute("SELECT value::integer FROM user_memory_settings WHERE name = 'max_document_bytes'").fetchone()
    max_bytes = limit[0] if limit else 524288
    rows = []
    for name, whole in (("edit", False), ("replace", True)):
        for who, end_user in (("end user", True), ("service", False)):
            times = history(conn, args.users, args.versions, end_user=end_user, whole=whole)
            rows.append((f"{name}, {who} ({len(times)} appends)", summary_ms(times)))
    large = companion_document(random.Random(3), todos=2000)
    hostile = {"k" * 100: ["a"] * ((max_bytes - 200) // 5)}  # 5 bytes each in jsonb's text
    for name, doc in (("large", large), ("hostile", hostile)):
        size = len(json.dumps(doc, separators=(",", ":")))
        for who, end_user in (("end user", True), ("service", False)):
            if name == "hostile" and not end_user:
                continue
            # the hostile writer sends no rows (the service's would be over the rows' own bound)
            items: list[dict[str, Any]] | None = [] if name == "hostile" else None
            runs = [once(conn, doc, end_user=end_user, items=items) for _ in range(3)]
            took = sorted(t for t, _ in runs)[1]
            rows.append((f"{name} ({size // 1024} KiB), {who}", f"{took * 1000:.1f} ms (median of 3), {runs[0][1]}"))
    applied = conn.execute("SELECT count(*) FROM user_memory_migrations WHERE name LIKE '020%%'").fetchone()
    table(f"user_memory_append, end user and service (migration 020 applied: {bool(applied and applied[0])})", rows)


if __name__ == "__main__":
    main()

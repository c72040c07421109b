"""History bytes of a month of nightly summaries and agent edits, beside a patches-only floor.

    .venv/bin/python bench/bench_history.py [--users 100] [--days 30] [--edits 10] [--checkpoint-interval 50]

Each user starts with a ~10 KB user_state memory (bench/_common.py) and then, every day:
  - one nightly summary, written as the worker writes it: MemoryStore.append with the service's
    rights, its run key (daily:<day>) and a provenance record, the document changed by about 5%
    (recent parts' scores decayed, a goal rewritten, sometimes a summary sentence);
  - `--edits` agent edits, each one an `update_memory` or `forget_memory` tool call through the
    API's unit of work as the end user (ApiServices.session: role authenticated, the user's
    claims, row-level security), as `POST /me/memory/tool-calls` runs it: a part's status merged,
    a trigger appended or the oldest one forgotten, the safety notes replaced.
Beside it, in the same run and database, the floor: every version's patch in a table of its own
(user_id, version, patch) with its primary key only, nothing else. Printed: bytes of history per
user (user_memory_snapshots: heap, TOAST, indexes) against the floor's, their ratio (target
<= 1.25), the checkpoints written, and an agent edit's time through the session.
"""

from __future__ import annotations

import os

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import argparse
import copy
import json
import random
import sys
import time
import uuid
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, sentence, summary_ms, table, user_state_document
from bench_store import relation_bytes
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import WriteStatus
from user_memory.runtime import build_api

FIRST_DAY = date(2031, 3, 1)


def nightly(document: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The next night's summary: scores decayed, a goal rewritten, now and then a summary sentence."""
    new = copy.deepcopy(document)
    new["last_updated_by"] = "rules"
    for part in new["parts"].values():
        part["recency_score"] = round(part["recency_score"] * 0.9, 3)
    part = new["parts"][rng.choice(sorted(new["parts"]))]
    part["recency_score"] = round(rng.uniform(0.5, 0.95), 3)
    part["goals"][rng.randrange(len(part["goals"]))] = {"goal": sentence(rng, 6)}
    if rng.random() < 0.3:
        words = new["summary"].split()
        start = rng.randrange(0, len(words) - 12)
        words[start : start + 12] = sentence(rng, 12).split()
        new["summary"] = " ".join(words)
    return new


def provenance(rng: random.Random) -> dict[str, Any]:
    """A provenance record of the size the daily run writes (document mode, rules)."""
    return {
        "mode": "document",
        "model": "rules",
        "restored": [],
        "filled": [],
        "unreflected": [],
        "recency_set": [f"part_{rng.randrange(32)}"],
        "activities": rng.randint(2, 9),
        "activity_cut": 0,
        "activity_duplicates": 0,
        "calls": 1,
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }


def tool_call(day: int, n: int, document: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One agent edit, as a model would call the memory tools; the memory stays about its size
    (a trigger is appended while there are fewer than 18, else the oldest is forgotten)."""
    roll = rng.random()
    if roll < 0.4:
        part = {rng.choice(sorted(document["parts"])): {"status": rng.choice(["active", "dormant", "integrating"])}}
        name, arguments = "update_memory", {"section": "parts", "mode": "merge", "value_json": json.dumps(part)}
    elif roll < 0.6:
        notes = json.dumps(sentence(rng, 20))
        name, arguments = "update_memory", {"section": "safety_notes", "mode": "replace", "value_json": notes}
    elif len(document.get("triggers_and_goals") or []) < 18:
        trigger = {"trigger": sentence(rng, 5), "desired_outcome": sentence(rng, 6), "related_parts": ["part_1"]}
        name, arguments = (
            "update_memory",
            {"section": "triggers_and_goals", "mode": "append", "value_json": json.dumps(trigger)},
        )
    else:
        name, arguments = "forget_memory", {"target": "/triggers_and_goals/0"}
    return {"id": f"call_{day}_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


_FLOOR = (
    "CREATE TABLE bench_patch_floor (user_id uuid, version int, patch jsonb NOT NULL, PRIMARY KEY (user_id, version))"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--edits", type=int, default=10, help="agent edits a user and day")
    parser.add_argument("--checkpoint-interval", type=int, default=None, help="CHECKPOINT_INTERVAL (default 50)")
    args = parser.parse_args()

    dsn = fresh_database("user_memory_bench_history")
    pool = open_pool(dsn, size=2)
    settings = ApiSettings.from_env({}, document_schema="user_state", checkpoint_interval=args.checkpoint_interval)
    api = build_api(settings, pool=pool)
    service = MemoryStore(PostgresRecorder(pool), checkpoint_interval=settings.checkpoint_interval)
    floor = psycopg.connect(dsn, autocommit=True)
    floor.execute(_FLOOR)
    rng = random.Random(5)
    users = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(args.users)]
    edit_s: list[float] = []
    versions = 0
    started = time.perf_counter()

    def keep(user: uuid.UUID, version: int, patch: Any) -> None:
        floor.execute("INSERT INTO bench_patch_floor VALUES (%s, %s, %s)", (user, version, Jsonb(patch)), prepare=True)

    for user in users:
        first = service.append(user, user_state_document(rng), expected_version=0, source="import")
        keep(user, first.version, first.patch)
        versions += 1
    for day in range(args.days):
        today = FIRST_DAY + timedelta(days=day)
        for user in users:
            head = service.head(user)
            written = service.append(
                user,
                nightly(head.document, rng),
                expected_version=head.version,
                base=head,
                source=f"daily summary {today.isoformat()}, model rules",
                idempotency_key=f"daily:{today.isoformat()}",
                provenance=provenance(rng),
            )
            keep(user, written.version, written.patch)
            versions += 1
            for n in range(args.edits):
                call = tool_call(day, n, service.head(user).document, rng)
                t0 = time.perf_counter()
                with api.session(user) as svc:
                    result = svc.memory.tool_call(call)
                edit_s.append(time.perf_counter() - t0)
                if result.status is WriteStatus.WRITTEN:
                    keep(user, result.version, result.patch)
                    versions += 1
        print(f"  day {day + 1}/{args.days} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    floor.execute("VACUUM (FULL, ANALYZE) user_memory_heads")  # updated in place: measured as autovacuum keeps it
    floor.execute("VACUUM ANALYZE")
    history = relation_bytes(floor, "user_memory_snapshots")
    floor_bytes = relation_bytes(floor, "bench_patch_floor")
    heads = relation_bytes(floor, "user_memory_heads")[-1][1]
    items = relation_bytes(floor, "memory_items")[-1][1]
    counts = floor.execute(
        """SELECT count(*), count(*) FILTER (WHERE is_full_snapshot),
                  count(*) FILTER (WHERE source_description LIKE 'agent:%%'),
                  avg(octet_length(patch::text))::int,
                  avg(octet_length(full_snapshot_content::text))::int
             FROM user_memory_snapshots"""
    ).fetchone()
    assert counts is not None and counts[0] == versions
    total, floor_total = history[-1][1], floor_bytes[-1][1]
    n = args.users
    table(
        f"History of {n} users x {args.days} days x (1 nightly summary + {args.edits} agent edits), "
        f"~{len(json.dumps(service.head(users[0]).document)) / 1024:.1f} KB memories",
        [
            (
                "versions",
                f"{versions:,} ({counts[2]:,} by agent edits), {counts[1]:,} checkpoints "
                f"(CHECKPOINT_INTERVAL {settings.checkpoint_interval})",
            ),
            ("mean patch / checkpoint (jsonb text)", f"{counts[3]:,} B / {counts[4] or 0:,} B"),
            ("history per user (user_memory_snapshots)", f"{total / n:,.0f} B"),
            ("floor per user (the same patches alone)", f"{floor_total / n:,.0f} B"),
            ("history / floor", f"{total / floor_total:.3f}x (target <= 1.25x)"),
            ("heads per user (not in the ratio)", f"{heads / n:,.0f} B"),
            ("search index per user (memory_items, not in the ratio)", f"{items / n:,.0f} B"),
            ("agent edit through the API's session", summary_ms(edit_s)),
        ],
    )
    table(
        "Bytes per relation",
        [(f"user_memory_snapshots {part}", f"{size:>12,} B") for part, size in history]
        + [(f"bench_patch_floor {part}", f"{size:>12,} B") for part, size in floor_bytes],
    )
    floor.close()
    pool.close()


if __name__ == "__main__":
    main()

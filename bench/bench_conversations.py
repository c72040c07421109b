"""Conversation-memory trigger benchmark: conversations found per second, and the query plan.

    .venv/bin/python bench/bench_conversations.py [--conversations 100000] [--repeat 5]

A fresh database gets `--conversations` conversations (two messages each) in two mixes:

- mixed: 30% quiet without a memory or with a stale one (what the trigger must find), 10% active
  (pending but not yet quiet), 60% with a current memory;
- all pending: every conversation quiet and without a memory (the first run after a backfill).

For each, the trigger's database side (`PostgresConversations.pending_pages`, keyset pages of
1,000 from the partial index idx_conversations_pending) and the whole trigger with a sender that
only counts (`run_trigger`: pages, GENERATE_MEMORY_BATCH bodies of 10 conversations) are timed, best of
`--repeat` runs, and the plan of one page is printed (EXPLAIN ANALYZE, BUFFERS). SQS is left out:
SendMessageBatch's own latency (10 messages a call) is the same whatever finds the ids.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, table
from user_memory.adapters.conversations import PENDING_PAGE, PostgresConversations
from user_memory.adapters.postgres import open_pool
from user_memory.domain.conversations.trigger import run_trigger

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
THRESHOLD = timedelta(hours=2)
PAGE = 1000

# One statement per table: conversations with their state by share, two messages each, and a
# memory for those that have one (current, or stale: covering the first message of two).
SEED = """
INSERT INTO conversations (conversation_id, user_id, messages, first_message_at, last_message_at, memory_through)
SELECT 'conv-' || lpad(g::text, 7, '0'),
       md5('user' || (g %% (%(n)s / 5 + 1)))::uuid,
       2,
       ts - interval '3 minutes',
       ts,
       CASE WHEN kind = 'current' THEN 2 WHEN kind = 'stale' THEN 1 END
  FROM (SELECT g,
               CASE WHEN r < %(quiet_new)s THEN 'quiet'
                    WHEN r < %(quiet_new)s + %(stale)s THEN 'stale'
                    WHEN r < %(quiet_new)s + %(stale)s + %(active)s THEN 'active'
                    ELSE 'current' END AS kind,
               CASE WHEN r >= %(quiet_new)s + %(stale)s AND r < %(quiet_new)s + %(stale)s + %(active)s
                    THEN %(now)s::timestamptz - (g %% 100) * interval '1 minute'
                    ELSE %(now)s::timestamptz - interval '3 hours' - (g %% 10000) * interval '1 minute' END AS ts
          FROM (SELECT g, (hashint4(g)::bigint & 2147483647) / 2147483647.0 AS r
                  FROM generate_series(1, %(n)s) g) s) c
"""
SEED_MESSAGES = """
INSERT INTO conversation_messages (conversation_id, seq, user_id, message_id, role, text, occurred_at, source)
SELECT c.conversation_id, s, c.user_id, 'm' || s, CASE WHEN s = 1 THEN 'user' ELSE 'assistant' END,
       CASE WHEN s = 1 THEN 'I am planning a trip to Lisbon in May.' ELSE 'Noted: Lisbon in May.' END,
       c.last_message_at - (2 - s) * interval '3 minutes', 'bench'
  FROM conversations c, generate_series(1, 2) s
"""
SEED_MEMORIES = """
INSERT INTO conversation_memories
       (conversation_id, user_id, memory, last_message_seq, last_message_id, last_message_at, model)
SELECT conversation_id, user_id,
       '{"discussed": "A trip to Lisbon.", "learned_about_user": ["Plans a trip to Lisbon in May"],
         "decisions": [], "open_loops": [], "tone": "neutral"}',
       memory_through, 'm' || memory_through, last_message_at, 'bench'
  FROM conversations WHERE memory_through IS NOT NULL
"""


class CountingSender:
    def __init__(self) -> None:
        self.messages = 0

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        self.messages += len(bodies)
        return len(bodies)


def seed(dsn_pool, n: int, *, quiet_new: float, stale: float, active: float) -> dict[str, int]:
    with dsn_pool.connection() as conn:
        conn.execute("TRUNCATE conversation_memories, conversation_messages, conversations")
        t0 = time.perf_counter()
        params = {"n": n, "quiet_new": quiet_new, "stale": stale, "active": active, "now": NOW}
        conn.execute(SEED, params)
        conn.execute(SEED_MESSAGES)
        conn.execute(SEED_MEMORIES)
        conn.execute("VACUUM ANALYZE conversations")
        conn.execute("VACUUM ANALYZE conversation_messages")
        conn.execute("VACUUM ANALYZE conversation_memories")
        seconds = time.perf_counter() - t0
        row = conn.execute(
            """SELECT count(*), count(*) FILTER (WHERE coalesce(memory_through, 0) < messages AND last_message_at < %s),
                      count(*) FILTER (WHERE coalesce(memory_through, 0) < messages),
                      (SELECT count(*) FROM conversation_messages)
                 FROM conversations""",
            (NOW - THRESHOLD,),
        ).fetchone()
    assert row is not None
    return {"conversations": row[0], "to_find": row[1], "pending": row[2], "messages": row[3], "seed_s": seconds}


def best(repeat: int, run) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    return min(times), result


def plan(pool) -> str:
    params = {
        "before": NOW - THRESHOLD,
        "after_at": datetime(1, 1, 1, tzinfo=UTC),
        "after_user": uuid.UUID(int=0),
        "after_id": "",
        "limit": PAGE,
    }
    with pool.connection() as conn:
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + PENDING_PAGE, params).fetchall()
    return "\n".join(r[0] for r in rows)


def measure(pool, label: str, counts: dict[str, int], repeat: int) -> list[tuple[str, str]]:
    store = PostgresConversations(pool)

    def pages() -> int:
        return sum(len(p) for p in store.pending_pages(NOW - THRESHOLD, page_size=PAGE))

    db_s, found = best(repeat, pages)
    sender = CountingSender()

    def trigger():
        return run_trigger(store, sender, threshold=THRESHOLD, per_message=10, page_size=PAGE, now=NOW)

    all_s, report = best(repeat, trigger)
    assert found == counts["to_find"] == report.conversations, (found, counts, report)  # type: ignore[union-attr]
    return [
        (
            f"{label}: stored",
            f"{counts['conversations']:,} conversations, {counts['messages']:,} messages, "
            f"{counts['pending']:,} pending of which {counts['to_find']:,} quiet (seeded in {counts['seed_s']:.1f} s)",
        ),
        (
            f"{label}: database side (pending_pages)",
            f"{found:,} found in {db_s:.3f} s = {found / db_s:,.0f} conversations/s "
            f"({-(-found // PAGE)} pages of {PAGE:,})",
        ),
        (
            f"{label}: whole trigger (pages + batch bodies)",
            f"{report.conversations:,} in {report.messages:,} messages, {all_s:.3f} s = "  # type: ignore[union-attr]
            f"{report.conversations / all_s:,.0f} conversations/s",  # type: ignore[union-attr]
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    dsn = fresh_database("user_memory_bench_conversations")
    pool = open_pool(dsn, size=1)
    rows: list[tuple[str, str]] = []
    plans = {}
    try:
        for label, mix in (
            ("mixed", {"quiet_new": 0.2, "stale": 0.1, "active": 0.1}),
            ("all pending", {"quiet_new": 1.0, "stale": 0.0, "active": 0.0}),
        ):
            counts = seed(pool, args.conversations, **mix)
            rows += measure(pool, label, counts, args.repeat)
            plans[label] = plan(pool)
    finally:
        pool.close()
    table(f"Conversation-memory trigger, {args.conversations:,} conversations (best of {args.repeat})", rows)
    for label, text in plans.items():
        print(f"\nPlan of one page ({label}):\n{text}")


if __name__ == "__main__":
    main()

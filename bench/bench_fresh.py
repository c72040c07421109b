"""Fresh within minutes: how long a chat's facts take to reach the prompt and the memory document, and
the extra LLM tokens a refresh after each conversation memory (REFRESH_AFTER_CONVERSATION_SECONDS)
costs per active user-day.

    .venv/bin/python bench/bench_fresh.py [--users 30] [--refresh-after-seconds 300] [--seed 7]

One simulated day, twice on a fresh database (opt-in off, then on), with the real handlers: the
fan-out's conversation-memory trigger every `--schedule-minutes` (the template's
ConversationScheduleExpression, rate(15 minutes)) with INACTIVITY_THRESHOLD_MINUTES, the worker
over moto's SQS (Lambda's event source played by the local poller), the API's prompt route, and the
nightly fan-out after the day. Each user has 1 to 4 chats at random times of the day; each chat
says two facts. The clock is simulated: the day lies in the past, the trigger's event names the
threshold that makes its cut the simulated time's, the worker's refreshes are asked at the
simulated time, and SQS's DelaySeconds is played by holding a delayed message until the simulated
clock reaches it. Each minute of the day the queue is drained and the prompts of the users with
pending chats are read.

Measured per chat, from its last message (the chat going quiet): the minutes until its facts are in
`GET /me/memory/prompt` (marked recent, before any summary) and until a version holds them (its
memory's activity marked summarized: the nightly run when off; the refresh when on). Tokens: the
daily summaries' prompt and completion tokens, counted by the scripted model (bench/sim/model.py,
o200k when `bpe-openai` is installed, else 4 characters a token), conversation memories by the
rule-based summarizer (the same in both arms, so they cancel out).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import sys
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import boto3
from _common import fresh_database, pct
from moto import mock_aws
from sim.model import Rates, ScriptedModel, serve
from sim.tokens import load_tokenizer
from user_memory.adapters.postgres import open_pool
from user_memory.config import ApiSettings, FanoutSettings, WorkerSettings
from user_memory.domain.conversations.model import NewMessage
from user_memory.domain.conversations.summarizer import RuleBasedConversationSummarizer
from user_memory.http.app import create_api
from user_memory.runtime import build_api, build_fanout, build_worker
from user_memory_functions.fanout.app import handler as fanout_handler
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext, LambdaSqsPoller, create_queues

from tests.api_client import ApiClient

PLACES = ["Porto", "Lyon", "Kyoto", "Quito", "Oslo", "Hanoi", "Cusco", "Bergen"]
PLANS = ["keep a sleep diary", "run on Sundays", "call my sister weekly", "learn ten words a day"]


@dataclass
class Chat:
    user: uuid.UUID
    cid: str
    last: datetime
    facts: tuple[str, str]
    in_prompt: datetime | None = None
    in_document: datetime | None = None


@dataclass
class DelayedSender:
    """SQS's DelaySeconds on the simulated clock: a delayed message is held until the clock reaches it."""

    real: Any
    clock: Any
    held: list[tuple[datetime, list[str]]] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return int(self.real.calls)

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        if delay_seconds:
            self.held.append((self.clock() + timedelta(seconds=delay_seconds), bodies))
            return len(bodies)
        return int(self.real.send(bodies))

    def release(self, now: datetime) -> None:
        due = [b for at, b in self.held if at <= now]
        self.held = [(at, b) for at, b in self.held if at > now]
        for bodies in due:
            self.real.send(bodies)


def plan_day(rng: random.Random, users: int, day: datetime) -> list[Chat]:
    chats = []
    for u in range(users):
        user = uuid.uuid5(uuid.NAMESPACE_URL, f"bench-fresh-{u}")
        starts = sorted(rng.sample(range(8 * 60, 22 * 60, 50), rng.randint(1, 4)))
        for n, slot in enumerate(starts):
            # Anywhere in its 50-minute slot, off the minute (no ties with the trigger's cut)
            last = day + timedelta(minutes=slot + rng.randrange(5, 45), seconds=rng.randrange(1, 60))
            place, plan = rng.choice(PLACES), rng.choice(PLANS)
            chats.append(Chat(user, f"chat-{n}", last, (f"I live in {place} now.", f"I will {plan}.")))
    return chats


def messages(chat: Chat) -> list[NewMessage]:
    lines = [("user", chat.facts[0]), ("assistant", "Noted."), ("user", chat.facts[1]), ("assistant", "Good.")]
    return [
        NewMessage(
            user_id=chat.user,
            conversation_id=chat.cid,
            message_id=f"{chat.cid}:{n}",
            role=role,
            text=text,
            occurred_at=chat.last - timedelta(minutes=len(lines) - 1 - n),
            source="chat",
        )
        for n, (role, text) in enumerate(lines)
    ]


def run_arm(dsn: str, *, users: int, seed: int, refresh_after: int, threshold: int, schedule: int) -> dict[str, Any]:
    rng = random.Random(seed)
    day = (datetime.now(UTC) - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    chats = plan_day(rng, users, day)
    model = ScriptedModel(seed, Rates.none(), load_tokenizer())
    pool = open_pool(dsn, size=2)
    sim = {"now": day}
    nightly_users = 0

    def clock() -> datetime:
        return sim["now"]

    with mock_aws(), serve(model) as url:
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url, dlq_url = create_queues(sqs, name=f"fresh-{uuid.uuid4().hex[:6]}", max_receive_count=5)
        env = {"database_url": dsn, "queue_url": queue_url}
        worker_settings = WorkerSettings.from_env(
            {},
            **env,
            summarizer="openai",
            openai_base_url=url,
            openai_api_key="bench",
            refresh_after_conversation_seconds=refresh_after,
        )
        worker = build_worker(
            worker_settings, pool=pool, sqs_client=sqs, conversation_summarizer=RuleBasedConversationSummarizer()
        )
        delayed = DelayedSender(worker.sender, clock)
        worker.sender = delayed
        worker.clock = clock
        fanout = build_fanout(FanoutSettings.from_env({}, **env), sqs_client=sqs, pool=pool)
        api_settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "user_state"})
        api = create_api(build_api(api_settings, pool=pool), api_settings)
        poller = LambdaSqsPoller(
            sqs, queue_url, dlq_url, functools.partial(worker_handler, services=worker), max_receive_count=5
        )
        store = fanout.conversations
        for chat in chats:
            store.record(messages(chat))

        def settle(now: datetime) -> None:
            sim["now"] = now
            delayed.release(now)
            if not poller.drain().received:
                return
            for chat in chats:
                if chat.in_prompt is None and chat.last <= now:
                    reply = ApiClient(api, chat.user).get("/me/memory/prompt", query={"budget_tokens": 2000})
                    recent = [line for line in reply.json["text"].splitlines() if line.startswith("Recent - ")]
                    if all(any(fact in line for line in recent) for fact in chat.facts):
                        chat.in_prompt = now
            with pool.connection() as conn:
                rows = conn.execute(
                    "SELECT user_id, payload->>'conversation_id' FROM user_activity"
                    " WHERE kind = 'conversation_memory' AND summarized_version IS NOT NULL"
                ).fetchall()
            done = {(r[0], r[1]) for r in rows}
            for chat in chats:
                if chat.in_document is None and (chat.user, chat.cid) in done:
                    chat.in_document = now

        end = day + timedelta(days=1)
        minute = timedelta(minutes=1)
        now = day
        while now < end + timedelta(minutes=threshold + 2 * schedule):
            if (now - day) % timedelta(minutes=schedule) == timedelta(0):
                # The trigger's cut is now - threshold: the event names it in minutes before the real now.
                behind = int((datetime.now(UTC) - now).total_seconds() // 60)
                event = {"task_type": "TRIGGER_MEMORY_GENERATION", "threshold_minutes": behind + threshold}
                fanout_handler(event, FakeLambdaContext(function_name="fanout", timeout_seconds=300), services=fanout)
            settle(now)
            if now == end + timedelta(minutes=threshold + schedule):  # the nightly run, after the day
                context = FakeLambdaContext(function_name="fanout", timeout_seconds=300)
                nightly = fanout_handler({"date": day.date().isoformat()}, context, services=fanout)
                nightly_users = nightly["users"]
                settle(now)
            now += minute
        pool.close()
    quiet_to_prompt = [(c.in_prompt - c.last).total_seconds() / 60 for c in chats if c.in_prompt]
    quiet_to_document = [(c.in_document - c.last).total_seconds() / 60 for c in chats if c.in_document]
    calls = model.calls
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    return {
        "refresh_after_seconds": refresh_after,
        "users": users,
        "chats": len(chats),
        "in_prompt": len(quiet_to_prompt),
        "in_document": len(quiet_to_document),
        "quiet_to_prompt": quiet_to_prompt,
        "quiet_to_document": quiet_to_document,
        "summary_calls": len(calls),
        "tokens": tokens,
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "tokenizer": model.tokenizer.name,
        "nightly_users": nightly_users,
        "model_errors": len(model.errors),
    }


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(["---"] + ["---:"] * (len(headers) - 1)) + " |"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def minutes(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{pct(values, 50):.0f} / {pct(values, 90):.0f} / {max(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--refresh-after-seconds", type=int, default=300)
    parser.add_argument("--threshold-minutes", type=int, default=120)
    parser.add_argument("--schedule-minutes", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for name, value in {
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }.items():
        os.environ.setdefault(name, value)
    logging.getLogger("user-memory").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    arms = []
    for after in (0, args.refresh_after_seconds):
        dsn = fresh_database(f"bench_fresh_{after}")
        arms.append(
            run_arm(
                dsn,
                users=args.users,
                seed=args.seed,
                refresh_after=after,
                threshold=args.threshold_minutes,
                schedule=args.schedule_minutes,
            )
        )
    off, on = arms
    print(
        f"{args.users} users, {off['chats']} chats in one simulated day; INACTIVITY_THRESHOLD_MINUTES="
        f"{args.threshold_minutes}, trigger every {args.schedule_minutes} min; tokens: {off['tokenizer']}"
    )
    print()
    rows = []
    for arm in arms:
        label = f"REFRESH_AFTER_CONVERSATION_SECONDS={arm['refresh_after_seconds']}"
        rows.append(
            [
                label,
                f"{arm['in_prompt']}/{arm['chats']}",
                minutes(arm["quiet_to_prompt"]),
                f"{arm['in_document']}/{arm['chats']}",
                minutes(arm["quiet_to_document"]),
                str(arm["summary_calls"]),
                f"{arm['tokens']:,}",
                f"{arm['tokens'] / arm['users']:,.0f}",
                str(arm["nightly_users"]),
            ]
        )
    print(
        md_table(
            [
                "arm",
                "chats in prompt",
                "quiet to prompt, min (p50 / p90 / max)",
                "chats in document",
                "quiet to document, min (p50 / p90 / max)",
                "summary calls",
                "summary tokens",
                "tokens / user-day",
                "users the nightly run found",
            ],
            rows,
        )
    )
    extra = (on["tokens"] - off["tokens"]) / on["users"]
    print()
    print(
        f"extra LLM tokens per active user-day with the opt-in on: {extra:,.0f} "
        f"({on['tokens'] / max(off['tokens'], 1):.2f}x the nightly-only summaries); model errors: "
        f"{off['model_errors'] + on['model_errors']}"
    )
    print(
        json.dumps(
            {
                name: {k: v for k, v in arm.items() if not k.startswith("quiet")}
                for name, arm in zip(("off", "on"), arms, strict=True)
            }
        )
    )


if __name__ == "__main__":
    main()

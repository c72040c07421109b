"""One mode's 30 days: the real worker handler, the real OpenAI summarizer and client, PostgreSQL.

Per day: the generator's activity is recorded through the worker handler (record_activity
messages), the users with activity to summarize are listed by the fan-out's own query
(`PostgresActivity.active_user_pages`) and get one refresh_user message each (`refresh_bodies`,
as the fan-out writes them; moto is left out: it would measure moto), and the messages go to
`user_memory_functions.worker.app.handler` in SQS-shaped events of 3 records (the template's
WorkerBatchSize). A record the handler reports failed is delivered again, with its receive
count, until MaxReceiveCount (5), then counted in the DLQ, as the event source mapping does.
After each day every user's head is read, so the accounting knows when a fact first reached
memory and whether it was later dropped. Before day 0 every user's existing memory (generator.py:
`initial_memory`, ~10 KB) is written as version 1, as the service's store writes any version.

The accounting (`Accounting`) on the last day, per expected fact (see generator.py):
    present            in the head document; of which, apart, the facts the service's fact floor
                       put back at some point (a version's provenance "restored": the fact at
                       that path in that version's document) or folded in from the activity
                       (provenance "filled": the activity's external id): flagged, not lost
    lost, flagged      absent, and a flag covers it: an activity carrying it is still
                       unsummarized (its run failed, which the worker logged and counted), or a
                       refused edit in the versions' provenance names it (its part, its text,
                       the safety notes), or provenance records its activity as unreflected
    lost, no flag      absent, and nothing anywhere says so: the target is zero
                       (split into "never in memory" and "dropped later")
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from user_memory.adapters.openai_summarizer import to_llm_shape
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.config import WorkerSettings
from user_memory.domain.fanout import FanoutPlan, refresh_bodies
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, Window
from user_memory.observability import logger, metrics
from user_memory.runtime import build_worker
from user_memory_functions.worker.app import handler
from user_memory_local.poller import MAX_RECEIVE_COUNT, FakeLambdaContext, sqs_record

from .generator import Fact, GenConfig, Generator, UserState, present
from .model import EDIT_SCHEMA_NAME, Rates, ScriptedModel, serve
from .tokens import Tokenizer

BATCH_SIZE = 3  # template.yaml WorkerBatchSize default
MODES = ("document", "edit")


def edit_mode_available() -> bool:
    """Whether this checkout's summarizer has the edit mode (SUMMARY_MODE)."""
    if "summary_mode" not in WorkerSettings.model_fields:
        return False
    from user_memory.adapters import openai_summarizer

    return EDIT_SCHEMA_NAME in getattr(openai_summarizer, "RESPONSE_NAMES", {}).values()


class LogTap(logging.Handler):
    """The service's warnings (failed users and records, refusals), kept with their fields."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append({"message": record.getMessage(), **record.__dict__})

    def users(self, message: str) -> Counter[str]:
        return Counter(str(r.get("user_id")) for r in self.records if r["message"] == message)


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _route_logs(stream: Any) -> None:
    for h in logger.handlers:
        if hasattr(h, "setStream"):
            h.setStream(stream)


@dataclass
class ModeResult:
    mode: str
    users: int
    days: int
    tokenizer: str
    rates: str
    user_days: int = 0  # refresh_user messages: users with activity to summarize, per day
    floor: bool = True  # the service's fact floor (off only in the checker's own test)
    calls: int = 0
    retries: int = 0
    fact_retries: int = 0  # of the retries: feedback naming activity the answer left out
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefix_tokens: int = 0  # of prompt_tokens: the stable prefix (system message and schema)
    cached_tokens: int = 0  # of prompt_tokens: what a warm prefix cache serves (model.cached_of)
    misbehaved: Counter[str] = field(default_factory=Counter)
    model_errors: int = 0  # requests the scripted model could not read (answered 400): a bug if not 0
    completion_by_day: Counter[str] = field(default_factory=Counter)
    by_edit: Counter[str] = field(default_factory=Counter)
    memory_tokens: float = 0.0  # mean size of the last day's memory in the model's shape, in tokens
    memory_tokens_start: float = 0.0  # the same, of the memory users start with (version 1)
    memory_bytes_start: float = 0.0  # its compact JSON, in bytes
    versions: int = 0
    versions_refused: int = 0
    refused_edits: int = 0
    provenance: bool = False
    deliveries_failed: int = 0
    users_failed: int = 0
    dlq: int = 0
    unsummarized: int = 0
    failure_reasons: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)
    expected: int = 0
    present: int = 0
    lost_flagged: int = 0
    lost_unflagged: int = 0
    never_in_memory: int = 0
    lost_left_out: int = 0  # of the unflagged: a mention the model left out (forget_fact)
    dropped_later: int = 0
    present_restored: int = 0  # present, and put back by the fact floor at some point (provenance)
    present_filled: int = 0  # present, and folded in from the activity by the service (provenance)
    restorations: int = 0  # provenance "restored" entries, every version
    versions_restored: int = 0
    fills: int = 0  # provenance "filled" entries
    unreflected: int = 0  # provenance "unreflected" entries (a name the answer chose itself, kept)
    flagged_by: Counter[str] = field(default_factory=Counter)
    lost_by_kind: Counter[str] = field(default_factory=Counter)
    forgotten: int = 0
    forgotten_still_present: int = 0
    lost_examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def per_user_day(self, n: int) -> float:
        return n / self.user_days if self.user_days else 0.0


class Accounting:
    """Tracks every expected fact through the daily heads; classifies what is missing at the end."""

    def __init__(self, users: list[UserState]) -> None:
        self.users = users
        self.ever: dict[uuid.UUID, set[Fact]] = {u.user_id: set() for u in users}

    def observe(self, heads: dict[uuid.UUID, dict[str, Any]]) -> None:
        for u in self.users:
            doc = heads.get(u.user_id, {})
            for fact in u.mentions:
                if present(fact, doc):
                    self.ever[u.user_id].add(fact)

    def close(
        self,
        result: ModeResult,
        heads: dict[uuid.UUID, dict[str, Any]],
        flags: dict[uuid.UUID, Flags],
        left_out: set[tuple[str, Fact]],
        date_of: Callable[[int], Any],
    ) -> None:
        """Classify every expected fact; `left_out` holds the (date, fact) of each activity the model
        chose not to write (forget_fact), matched by date and content (the model never sees user ids)."""
        for u in self.users:
            doc = heads.get(u.user_id, {})
            result.forgotten += u.forgotten_facts
            result.forgotten_still_present += sum(1 for pid in u.forgotten if pid in (doc.get("parts") or {}))
            for fact, mentions in u.mentions.items():
                result.expected += 1
                user_flags = flags.get(u.user_id, Flags())
                if present(fact, doc):
                    result.present += 1
                    if fact in user_flags.restored_facts:
                        result.present_restored += 1
                    if any(ext in user_flags.filled for _, ext in mentions):
                        result.present_filled += 1
                    continue
                flag = user_flags.covering(fact, [ext for _, ext in mentions])
                if flag:
                    result.lost_flagged += 1
                    result.flagged_by[flag] += 1
                    continue
                result.lost_unflagged += 1
                result.lost_by_kind[fact[0]] += 1
                if fact in self.ever[u.user_id]:
                    result.dropped_later += 1
                else:
                    result.never_in_memory += 1
                if any((date_of(d).isoformat(), fact) in left_out for d, _ in mentions):
                    result.lost_left_out += 1
                if len(result.lost_examples) < 5:
                    days = [d for d, _ in mentions]
                    result.lost_examples.append(f"user {u.index}: {fact} (mentioned on days {days})")


@dataclass
class Flags:
    """What the service recorded about one user that could explain a missing fact."""

    pending: set[str] = field(default_factory=set)  # external ids still unsummarized (a failed run left them)
    cut: set[str] = field(default_factory=set)  # summarized by a version whose prompt left activity out
    refused: list[dict[str, Any]] = field(default_factory=list)  # provenance's refused edits
    restored_facts: set[Fact] = field(default_factory=set)  # facts the fact floor put back (provenance)
    filled: set[str] = field(default_factory=set)  # external ids whose fact the service folded in
    unreflected: set[str] = field(default_factory=set)  # external ids provenance records as unreflected

    def covering(self, fact: Fact, external_ids: list[str]) -> str:
        """The flag that covers `fact` ("" when none does)."""
        if any(ext in self.pending for ext in external_ids):
            return "its activity is unsummarized (the run failed, logged)"
        if any(ext in self.cut for ext in external_ids):
            return "its activity was left out of the prompt (provenance counts it)"
        if any(ext in self.unreflected for ext in external_ids):
            return "its activity is recorded as unreflected (provenance)"
        # A refusal blocks a removal (or clearing the notes), which keeps facts: it covers a missing
        # fact only when the refused edit could have written it (not a remove) where the fact lives.
        for edit in self.refused:
            path = str(edit.get("path", ""))
            if edit.get("op") == "remove" or str(edit.get("why", "")).startswith(("removes", "clears")):
                continue
            if fact[0] in ("part", "goal") and (path == f"/parts/{fact[1]}" or path.startswith(f"/parts/{fact[1]}/")):
                return "a refused edit wrote where it lives (provenance)"
            if fact[0] == "trigger" and path.startswith("/triggers_and_goals"):
                return "a refused edit wrote where it lives (provenance)"
            if fact[0] == "safety" and path == "/safety_notes":
                return "a refused edit wrote where it lives (provenance)"
        return ""


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _heads(conn: psycopg.Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    rows = conn.execute("SELECT user_id, document FROM user_memory_heads WHERE user_id = ANY(%s)", (ids,)).fetchall()
    return {r[0]: r[1] for r in rows}


def _record_bodies(activities: list[Activity]) -> list[str]:
    by_user: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for a in activities:
        by_user.setdefault(a.user_id, []).append(
            {
                "user_id": str(a.user_id),
                "occurred_at": a.occurred_at.isoformat(),
                "kind": a.kind,
                "payload": a.payload,
                "source": a.source,
                "external_id": a.external_id,
            }
        )
    return [json.dumps({"type": "record_activity", "activities": items}) for items in by_user.values()]


class Deliverer:
    """Plays the SQS event source: batches of BATCH_SIZE, redelivery of failures, then the DLQ."""

    def __init__(self, services: Any) -> None:
        self.services = services
        self.failed = 0
        self.dlq = 0
        self._n = 0

    def deliver(self, bodies: list[str]) -> None:
        pending = [(body, self._id(), 1) for body in bodies]
        while pending:
            again = []
            for i in range(0, len(pending), BATCH_SIZE):
                chunk = pending[i : i + BATCH_SIZE]
                sent = str(int(datetime.now(UTC).timestamp() * 1000))
                event = {
                    "Records": [
                        sqs_record(
                            message_id=mid,
                            body=body,
                            attributes={
                                "ApproximateReceiveCount": str(n),
                                "SentTimestamp": sent,
                                "SenderId": "AROAEXAMPLEFANOUT:user-memory-fanout",
                                "ApproximateFirstReceiveTimestamp": sent,
                            },
                        )
                        for body, mid, n in chunk
                    ]
                }
                try:
                    response = handler(
                        event, FakeLambdaContext(function_name="user-memory-worker"), services=self.services
                    )
                finally:
                    metrics.clear_metrics()
                failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
                for body, mid, n in chunk:
                    if mid not in failed:
                        continue
                    self.failed += 1
                    if n >= MAX_RECEIVE_COUNT:
                        self.dlq += 1
                    else:
                        again.append((body, mid, n + 1))
            pending = again

    def _id(self) -> str:
        self._n += 1
        return str(uuid.UUID(int=self._n, version=4))


def _restored_facts(document: dict[str, Any], entry: dict[str, Any]) -> set[Fact]:
    """The expected-fact shapes a provenance "restored" entry stands for, read from the version's document."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in str(entry.get("path", "")).split("/")[1:]]
    parts = document.get("parts") or {}
    triggers = document.get("triggers_and_goals") or []
    if tokens[:1] == ["parts"] and len(tokens) >= 2 and tokens[1] in parts:
        part = parts[tokens[1]]
        goals = [str(g.get("goal")) for g in part.get("goals") or []]
        if len(tokens) == 2:  # the whole part
            return {("part", tokens[1], part.get("name")), *(("goal", tokens[1], g) for g in goals)}
        if tokens[2] == "name":
            return {("part", tokens[1], part.get("name"))}
        if tokens[2] == "goals" and len(tokens) == 4 and tokens[3].isdigit() and int(tokens[3]) < len(goals):
            return {("goal", tokens[1], goals[int(tokens[3])])}
    if (
        tokens[:1] == ["triggers_and_goals"]
        and len(tokens) >= 2
        and tokens[1].isdigit()
        and int(tokens[1]) < len(triggers)
    ):
        return {("trigger", str(triggers[int(tokens[1])].get("trigger")))}
    if tokens == ["safety_notes"]:
        lines = str(document.get("safety_notes") or "").splitlines()
        return {("safety", lines[i]) for i in entry.get("lines") or [] if i < len(lines)}
    return set()


def _flags(
    conn: psycopg.Connection, ids: list[uuid.UUID], result: ModeResult, store: MemoryStore
) -> tuple[dict[uuid.UUID, Flags], int]:
    """Per user: unsummarized activity, activity a prompt left out, refused edits, what the fact
    floor restored and filled; and the count unsummarized."""
    flags: dict[uuid.UUID, Flags] = {u: Flags() for u in ids}
    has = conn.execute(
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_name = 'user_memory_snapshots' AND column_name = 'provenance'"
    ).fetchone()
    result.provenance = has is not None
    cut_versions: set[tuple[uuid.UUID, int]] = set()
    filled_ids: dict[uuid.UUID, set[int]] = {u: set() for u in ids}
    unreflected_ids: dict[uuid.UUID, set[int]] = {u: set() for u in ids}
    if has:
        rows = conn.execute(
            "SELECT user_id, version, provenance FROM user_memory_snapshots"
            " WHERE user_id = ANY(%s) AND provenance IS NOT NULL",
            (ids,),
        ).fetchall()
        for user_id, version, prov in rows:
            if not isinstance(prov, dict):
                continue
            if prov.get("activity_cut"):
                cut_versions.add((user_id, version))
            refused = [i for i in prov.get("refused") or [] if isinstance(i, dict)]
            if refused:
                result.versions_refused += 1
                result.refused_edits += len(refused)
                flags[user_id].refused.extend(refused)
            restored = [i for i in prov.get("restored") or [] if isinstance(i, dict)]
            if restored:
                result.versions_restored += 1
                result.restorations += len(restored)
                document = store.at(user_id, version).document
                for entry in restored:
                    flags[user_id].restored_facts |= _restored_facts(document, entry)
            for entry in prov.get("filled") or []:
                result.fills += 1
                filled_ids[user_id].add(int(entry["activity_id"]))
            for entry in prov.get("unreflected") or []:
                result.unreflected += 1
                unreflected_ids[user_id].add(int(entry["activity_id"]))
    unsummarized = 0
    for user_id, activity_id, ext, version in conn.execute(
        "SELECT user_id, id, external_id, summarized_version FROM user_activity WHERE user_id = ANY(%s)", (ids,)
    ).fetchall():
        if activity_id in filled_ids[user_id]:
            flags[user_id].filled.add(ext)
        if activity_id in unreflected_ids[user_id]:
            flags[user_id].unreflected.add(ext)
        if version is None:
            flags[user_id].pending.add(ext)
            unsummarized += 1
        elif (user_id, version) in cut_versions:
            flags[user_id].cut.add(ext)
    return flags, unsummarized


def run_mode(
    dsn: str,
    mode: str,
    *,
    seed: int,
    users: int,
    days: int,
    rates: Rates,
    tokenizer: Tokenizer,
    gen: GenConfig | None = None,
    floor: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> ModeResult:
    """Simulate `days` days for `users` users in one mode on the (migrated, empty) database `dsn`.

    `floor=False` switches the pipeline's fact floor off (PipelineConfig.fact_floor, a test-only
    switch): what the checker sees of a summarizer on its own."""
    if mode == "edit" and not edit_mode_available():
        raise RuntimeError("this checkout's summarizer has no edit mode (WorkerSettings.summary_mode)")
    started = time.perf_counter()
    generator = Generator(seed, users, gen)
    ids = [u.user_id for u in generator.users]
    model = ScriptedModel(seed, rates, tokenizer)
    result = ModeResult(
        mode=mode, users=users, days=days, tokenizer=tokenizer.name, rates=rates.describe(mode), floor=floor
    )
    accounting = Accounting(generator.users)
    tap = LogTap()
    service_log = logging.getLogger(logger.name)
    service_log.addHandler(tap)
    _route_logs(_Sink())
    pool = open_pool(dsn, size=1)  # one connection, as in Lambda
    try:
        with serve(model) as url, psycopg.connect(dsn, autocommit=True) as conn:
            overrides: dict[str, Any] = {"summary_mode": mode} if edit_mode_available() else {}
            settings = WorkerSettings.from_env(
                {},
                database_url=dsn,
                summarizer="openai",
                openai_base_url=url,
                openai_api_key="sim",
                openai_model="sim-scripted",
                **overrides,
            )
            services = build_worker(settings, pool=pool)
            if not floor:
                services.pipeline = replace(services.pipeline, fact_floor=False)
            store = MemoryStore(PostgresRecorder(pool))
            starting = [u for u in generator.users if u.initial is not None]
            for u in starting:
                store.append(u.user_id, u.initial, expected_version=0, source="import: existing memory")
            if starting:
                shown = [_compact(to_llm_shape(u.initial or {})) for u in starting]
                result.memory_tokens_start = sum(tokenizer.count(t) for t in shown) / len(starting)
                result.memory_bytes_start = sum(len(_compact(u.initial).encode()) for u in starting) / len(starting)
            accounting.observe(_heads(conn, ids))
            deliverer = Deliverer(services)
            for day in range(days):
                activities = generator.day(day)
                deliverer.deliver(_record_bodies(activities))
                window = Window.day(generator.date_of(day))
                plan = FanoutPlan(window=window, run_key=f"daily:{window.start.date().isoformat()}")
                active = [u for page in services.activity.active_user_pages(window, page_size=1000) for u in page]
                bodies = refresh_bodies(active, plan, users_per_message=1)
                result.user_days += len(bodies)
                deliverer.deliver(bodies)
                accounting.observe(_heads(conn, ids))
                if (day + 1) % 5 == 0 or day + 1 == days:
                    progress(f"{mode}: day {day + 1}/{days}, {time.perf_counter() - started:.0f} s")
            heads = _heads(conn, ids)
            flags, result.unsummarized = _flags(conn, ids, result, store)
            row = conn.execute(  # the daily summaries' versions (not the existing memories written before day 0)
                "SELECT count(*) FROM user_memory_snapshots"
                " WHERE user_id = ANY(%s) AND idempotency_key LIKE 'daily:%%'",
                (ids,),
            ).fetchone()
            result.versions = int(row[0]) if row else 0
        tally = model.tally(mode)
        accounting.close(result, heads, flags, tally["left_out"], generator.date_of)
        result.calls, result.retries, result.fact_retries = tally["calls"], tally["retries"], tally["fact_retries"]
        result.prompt_tokens, result.completion_tokens = tally["prompt_tokens"], tally["completion_tokens"]
        result.prefix_tokens, result.cached_tokens = tally["prefix_tokens"], tally["cached_tokens"]
        result.misbehaved = tally["misbehaved"]
        result.completion_by_day, result.by_edit = tally["completion_by_day"], tally["by_edit"]
        result.model_errors = len(model.errors)
        sizes = [
            tokenizer.count(json.dumps(to_llm_shape(d), ensure_ascii=False, separators=(",", ":")))
            for d in heads.values()
        ]
        result.memory_tokens = sum(sizes) / len(sizes) if sizes else 0.0
        result.deliveries_failed, result.dlq = deliverer.failed, deliverer.dlq
        result.users_failed = sum(tap.users("user refresh failed").values())
        result.failure_reasons = Counter(str(r.get("error")) for r in tap.records if r["message"] == "record failed")
        result.warnings = Counter(r["message"] for r in tap.records)
    finally:
        service_log.removeHandler(tap)
        pool.close()
    result.seconds = time.perf_counter() - started
    return result


def erase_users(dsn: str, seed: int, users: int) -> None:
    """Remove the simulated users' rows (to run the other mode on the same database)."""
    from user_memory.adapters.postgres import PostgresRecorder

    from .generator import user_ids

    pool = open_pool(dsn, size=1)
    try:
        recorder = PostgresRecorder(pool)
        for u in user_ids(seed, users):
            recorder.erase(u)
    finally:
        pool.close()

"""What a deployment costs a month, on paper, at 10k, 100k and 1M active users a day.

Run: python bench/cost_model.py   (standard library only; prints the table docs/deploy.md shows,
and tests/infrastructure/test_deploy_guide.py checks that the two agree).

Every figure comes from a named constant below: a list price, a measurement of this repository
(bench/results/*.txt, with the file it comes from), or an assumption about the workload (said so).
Prices: AWS us-east-1 and OpenAI list prices as published in 2025 (the last time they were read
for this model; PRICES_AS_OF), on-demand, without free tiers, savings plans or taxes. They change:
check them against the providers' pricing pages before relying on the result.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

PRICES_AS_OF = "2025 list prices, us-east-1 (check before use)"
HOURS_PER_MONTH = 730
DAYS_PER_MONTH = 30
GB = 1024**3

# ---------------------------------------------------------------- prices (USD)
LAMBDA_ARM_PER_GB_SECOND = 0.0000133334
LAMBDA_PER_MILLION_REQUESTS = 0.20
SQS_PER_MILLION_REQUESTS = 0.40  # standard queue; each 64 KiB of a request counts as one
HTTP_API_PER_MILLION_FIRST_300M = 1.00  # API Gateway HTTP API, per month
HTTP_API_PER_MILLION_AFTER_300M = 0.90
AURORA_SERVERLESS_V2_PER_ACU_HOUR = 0.12  # Aurora Standard
AURORA_STORAGE_PER_GB_MONTH = 0.10
AURORA_PER_MILLION_IO = 0.20
RDS_PROXY_PER_ACU_HOUR = 0.015  # in front of Aurora Serverless v2
RDS_PROXY_MINIMUM_ACUS = 8  # the proxy is billed for at least 8 ACUs
NAT_GATEWAY_PER_HOUR = 0.045
NAT_GATEWAY_PER_GB = 0.045
CLOUDWATCH_LOGS_PER_GB_INGESTED = 0.50
CLOUDWATCH_LOGS_BYTES_PER_EVENT = 26  # metered on top of each log event's size
CLOUDWATCH_ALARM_PER_MONTH = 0.10
CLOUDWATCH_METRIC_PER_MONTH = 0.30
XRAY_PER_MILLION_TRACES = 5.00
SECRET_PER_MONTH = 0.40
# The worker's default model (template parameter OpenAIModel): gpt-4o-mini, per million tokens
# (the worker's LLM_PRICE_* settings default to the same).
LLM_INPUT_PER_MILLION_TOKENS = 0.15
LLM_CACHED_INPUT_PER_MILLION_TOKENS = 0.075
LLM_OUTPUT_PER_MILLION_TOKENS = 0.60
# OpenAI's Batch API: half the price of input and output (the nightly run's opt-in delivery mode,
# SummaryDelivery=batch).
LLM_BATCH_DISCOUNT = 0.5
DATA_TRANSFER_OUT_PER_GB = 0.09  # EC2/API Gateway to the internet, the first 10 TB a month
CLOUDWATCH_LOGS_STORAGE_PER_GB_MONTH = 0.03
SECRETS_MANAGER_PER_10K_CALLS = 0.05

# ---------------------------------------------------------------- measured in this repository
# bench/results/sim_30_days.txt, edit mode (the default SummaryMode): 4,520 user-days summarized,
# 4,832 LLM calls, prompt and completion tokens per user-day (o200k_base, the real tokenizer), with
# the prompt's view of the memory (the day's parts in full, an outline of the rest).
LLM_PROMPT_TOKENS_PER_USER_DAY = 1314.4
LLM_COMPLETION_TOKENS_PER_USER_DAY = 131.5
LLM_CALLS_PER_USER_DAY = 4832 / 4520
# Of the prompt tokens, what a warm prefix cache serves under OpenAI's rule (prompts of 1,024
# tokens or more, in steps of 128): the view's prompts are shorter, so none (the same file: 0.0%;
# their stable prefix, the instructions and the schema, is 52.9% of them).
LLM_CACHED_PROMPT_SHARE = 0.0
LLM_STABLE_PREFIX_SHARE = 0.529
# The same simulation in document mode, for the comparison below.
LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 298.0
LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 1191.1
# Before the prompt's view (the whole memory in every prompt), the same simulation, edit mode:
# the month this model priced at $25,276 for 1M users a day.
BEFORE_PROMPT_TOKENS_PER_USER_DAY = 3905.9
BEFORE_COMPLETION_TOKENS_PER_USER_DAY = 138.3
BEFORE_CALLS_PER_USER_DAY = 4809 / 4520
BEFORE_CUSTOM_METRICS = 26
# bench/results/worker.txt: the worker's own time per user with ~10 KB documents (the simulation's
# size), rule-based summarizer, embedded PostgreSQL: 7.087 ms and 3 database round trips per user.
WORKER_MS_PER_USER = 7.087
WORKER_ROUND_TRIPS_PER_USER = 3
# bench/results/worker.txt: max RSS 168 MB; bench/results/api.txt: handler p50 0.48-1.88 ms per
# route on the embedded database; bench/results/cold_import.txt: the API's first invocation
# (import, composition, one event, the DSN from a secret) 0.359 s.
WORKER_MAX_RSS_MB = 168
API_HANDLER_MS = 1.0
API_FIRST_INVOCATION_SECONDS = 0.359
# template.yaml: every function's MemorySize (Globals); the worker's BatchSize default.
FUNCTION_MEMORY_MB = 1024
WORKER_BATCH_SIZE = 3
ALARMS = 11  # template.yaml's AWS::CloudWatch::Alarm resources (with the migrate function's)
# Distinct metric names the functions emit (one dimension: service): 27 named in layers/core, the
# Users_<status> (6) and Conversations_<status> (5) families, RecordsFailed and RecordsDeferred, the
# worker's 15 batch counts (LLMTokens ... LLMCostMicroUSD). The model counted 26 before.
CUSTOM_METRICS = 27 + 6 + 5 + 2 + 15
SECRETS = 7  # infra/database.yaml's six (master, two logins, three DSNs) and the OpenAI key

# ---------------------------------------------------------------- assumptions (not measured)
API_REQUESTS_PER_USER_DAY = 20  # an agent reads the memory or its prompt per session, writes kv and activity
API_ROUND_TRIPS_PER_REQUEST = 3  # BEGIN + role and claims, the query, COMMIT
PROXY_ROUND_TRIP_MS = 1.0  # Lambda -> RDS Proxy -> Aurora in one region, connection already open
LLM_SECONDS_PER_CALL = 2.0  # gpt-4o-mini, ~4k tokens in, ~140 out; the simulation's model is local
COLD_START_SHARE = 0.01  # share of API invocations that start an execution environment
# The measured first invocation, plus Secrets Manager and the TLS handshake with the proxy over the network.
COLD_START_SECONDS = API_FIRST_INVOCATION_SECONDS + 0.25
FANOUT_MS_PER_USER = 0.2  # one keyset-page row and a tenth of a SendMessageBatch
SQS_IDLE_POLL_REQUESTS_PER_MONTH = 5 * 3 * 60 * 24 * DAYS_PER_MONTH  # 5 pollers, 20 s long polls
LOG_BYTES_PER_API_REQUEST = 450 + 300  # the access log line, and START/END/REPORT (3 events)
LOG_EVENTS_PER_API_REQUEST = 4
LOG_BYTES_PER_USER_REFRESH = 900 + 600 / WORKER_BATCH_SIZE  # `user refreshed`, a share of EMF + platform
LOG_EVENTS_PER_USER_REFRESH = 1 + 4 / WORKER_BATCH_SIZE
# What leaves the VPC per user-day: the LLM request and answer (about 4 characters of JSON a
# token, as the pipeline estimates) and a fixed share for TLS, headers and SQS sends. Through the
# NAT gateway (processing) and out to the internet (data transfer out).
LLM_BYTES_PER_TOKEN = 4
NAT_OVERHEAD_BYTES_PER_USER_DAY = 4_000
API_BYTES_PER_RESPONSE = 2_500  # an answer to an agent: a memory, its prompt block, a kv value
LOG_RETENTION_MONTHS = 1  # the log groups' retention (30 days): a month of logs stored at a time
SECRET_READS_PER_COLD_START = 1  # the DSN (the key is read once per worker environment too)
API_PEAK_TO_AVERAGE = 3.0
DB_CPU_MS_PER_API_REQUEST = 0.5  # the store's share of a request (bench/results/api.txt: 0.12-1.0 ms)
DB_CPU_MS_PER_USER_REFRESH = 1.7  # bench/results/worker.txt: database round trips, 1.73 ms per user
VCPU_PER_ACU = 0.25  # ~2 GiB and its share of CPU: a 2-vCPU, 16-GiB instance is ~8 ACUs
DB_TARGET_CPU_UTILIZATION = 0.5
CACHE_BYTES_PER_ACU = 1 * GB  # half of an ACU's ~2 GiB serves as buffer cache
HOT_BYTES_PER_ACTIVE_USER = 30_000  # head document (~10 KB), its index rows, key-value entries
STORED_BYTES_PER_USER = 350_000  # a year of daily versions (patches, checkpoints, provenance, items)
IO_PER_API_REQUEST = 2
IO_PER_USER_REFRESH = 10
MIN_CAPACITY_ACUS = 0.5  # infra/database.yaml's MinCapacity default
XRAY_SAMPLED_SHARE = 0.05  # X-Ray's default rule: 1 request a second, then 5 %

SCALES = (10_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class Line:
    name: str
    monthly: tuple[float, ...]


def lambda_cost(invocations: float, seconds_each: float, memory_mb: float = FUNCTION_MEMORY_MB) -> float:
    gb_seconds = invocations * seconds_each * memory_mb / 1024
    return gb_seconds * LAMBDA_ARM_PER_GB_SECOND + invocations / 1e6 * LAMBDA_PER_MILLION_REQUESTS


def http_api_cost(requests: float) -> float:
    first = min(requests, 300e6)
    return first / 1e6 * HTTP_API_PER_MILLION_FIRST_300M + (requests - first) / 1e6 * HTTP_API_PER_MILLION_AFTER_300M


def aurora_acus(users: int) -> float:
    """Average ACUs: the most of the minimum, the CPU at the API's peak, and the hot data in cache."""
    api_per_second = users * API_REQUESTS_PER_USER_DAY / 86400 * API_PEAK_TO_AVERAGE
    cpu_seconds = api_per_second * DB_CPU_MS_PER_API_REQUEST / 1000
    cpu_acus = cpu_seconds / VCPU_PER_ACU / DB_TARGET_CPU_UTILIZATION
    cache_acus = users * HOT_BYTES_PER_ACTIVE_USER / CACHE_BYTES_PER_ACU
    return max(MIN_CAPACITY_ACUS, cpu_acus, cache_acus)


def llm_cost_per_user_day(
    prompt: float, completion: float, *, cached_share: float = LLM_CACHED_PROMPT_SHARE, batch: bool = False
) -> float:
    """One user-day's tokens at the list prices: the cached share of the prompt at the cached rate
    (online only: cache hits are not assumed for batch requests), and half of it all through the
    Batch API."""
    if batch:
        full = prompt * LLM_INPUT_PER_MILLION_TOKENS + completion * LLM_OUTPUT_PER_MILLION_TOKENS
        return full / 1e6 * (1 - LLM_BATCH_DISCOUNT)
    cached = prompt * cached_share
    return (
        (prompt - cached) * LLM_INPUT_PER_MILLION_TOKENS
        + cached * LLM_CACHED_INPUT_PER_MILLION_TOKENS
        + completion * LLM_OUTPUT_PER_MILLION_TOKENS
    ) / 1e6


def nat_bytes_per_user_day(prompt: float, completion: float) -> float:
    return (prompt + completion) * LLM_BYTES_PER_TOKEN + NAT_OVERHEAD_BYTES_PER_USER_DAY


def lines(
    *,
    prompt: float = LLM_PROMPT_TOKENS_PER_USER_DAY,
    completion: float = LLM_COMPLETION_TOKENS_PER_USER_DAY,
    calls: float = LLM_CALLS_PER_USER_DAY,
    batch: bool = False,
    uncounted: bool = True,
    custom_metrics: int = CUSTOM_METRICS,
) -> list[Line]:
    """Each cost line at each scale, USD a month: the LLM's figures as given (the defaults are the
    measured ones), online or through the Batch API; `uncounted=False` leaves out the lines this
    model did not count before (data transfer out, log storage, secret reads), for the comparison."""
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    for users in SCALES:
        user_days = users * DAYS_PER_MONTH
        api_requests = user_days * API_REQUESTS_PER_USER_DAY
        api_seconds = (API_HANDLER_MS + API_ROUND_TRIPS_PER_REQUEST * PROXY_ROUND_TRIP_MS) / 1000
        api_seconds += COLD_START_SHARE * COLD_START_SECONDS
        worker_seconds_per_user = (
            WORKER_MS_PER_USER / 1000
            + WORKER_ROUND_TRIPS_PER_USER * PROXY_ROUND_TRIP_MS / 1000
            # Through the Batch API no function waits on the model: the results come back as a file.
            + (0.0 if batch else calls * LLM_SECONDS_PER_CALL)
        )
        worker = lambda_cost(user_days / WORKER_BATCH_SIZE, WORKER_BATCH_SIZE * worker_seconds_per_user)
        fanout = lambda_cost(DAYS_PER_MONTH, users * FANOUT_MS_PER_USER / 1000)
        add("Lambda: API function", lambda_cost(api_requests, api_seconds))
        add("Lambda: worker (waits on the LLM) and fan-out", worker + fanout)
        sqs_requests = user_days * (0.1 + 2 / WORKER_BATCH_SIZE) + SQS_IDLE_POLL_REQUESTS_PER_MONTH
        add("SQS", sqs_requests / 1e6 * SQS_PER_MILLION_REQUESTS)
        add("API Gateway HTTP API", http_api_cost(api_requests))
        acus = aurora_acus(users)
        add("Aurora Serverless v2 (ACUs below)", acus * AURORA_SERVERLESS_V2_PER_ACU_HOUR * HOURS_PER_MONTH)
        storage = users * STORED_BYTES_PER_USER / GB * AURORA_STORAGE_PER_GB_MONTH
        io = (api_requests * IO_PER_API_REQUEST + user_days * IO_PER_USER_REFRESH) / 1e6 * AURORA_PER_MILLION_IO
        add("Aurora storage (a year of history) and I/O", storage + io)
        add(
            "RDS Proxy (billed for at least 8 ACUs)",
            max(RDS_PROXY_MINIMUM_ACUS, acus) * RDS_PROXY_PER_ACU_HOUR * HOURS_PER_MONTH,
        )
        llm_bytes = user_days * nat_bytes_per_user_day(prompt, completion)
        nat = NAT_GATEWAY_PER_HOUR * HOURS_PER_MONTH + llm_bytes / GB * NAT_GATEWAY_PER_GB
        add("NAT gateway (one, with its data)", nat)
        if uncounted:
            out = llm_bytes + api_requests * API_BYTES_PER_RESPONSE
            add("Data transfer out (LLM requests, API answers)", out / GB * DATA_TRANSFER_OUT_PER_GB)
        log_bytes = api_requests * (
            LOG_BYTES_PER_API_REQUEST + LOG_EVENTS_PER_API_REQUEST * CLOUDWATCH_LOGS_BYTES_PER_EVENT
        )
        log_bytes += user_days * (
            LOG_BYTES_PER_USER_REFRESH + LOG_EVENTS_PER_USER_REFRESH * CLOUDWATCH_LOGS_BYTES_PER_EVENT
        )
        add("CloudWatch Logs ingestion", log_bytes / GB * CLOUDWATCH_LOGS_PER_GB_INGESTED)
        if uncounted:
            stored = log_bytes * LOG_RETENTION_MONTHS / GB * CLOUDWATCH_LOGS_STORAGE_PER_GB_MONTH
            reads = api_requests * COLD_START_SHARE * SECRET_READS_PER_COLD_START
            add("Log storage (30 days) and secret reads", stored + reads / 1e4 * SECRETS_MANAGER_PER_10K_CALLS)
        reservoir = 86400 * DAYS_PER_MONTH
        traced = min(api_requests, reservoir) + XRAY_SAMPLED_SHARE * max(0.0, api_requests - reservoir)
        add("X-Ray traces (Tracing: Active)", traced / 1e6 * XRAY_PER_MILLION_TRACES)
        fixed = ALARMS * CLOUDWATCH_ALARM_PER_MONTH + custom_metrics * CLOUDWATCH_METRIC_PER_MONTH
        add("Alarms, custom metrics, secrets", fixed + SECRETS * SECRET_PER_MONTH)
        label = "LLM tokens (gpt-4o-mini, edit mode" + (", Batch API)" if batch else ")")
        add(label, user_days * llm_cost_per_user_day(prompt, completion, batch=batch))
    return [Line(name.strip(), tuple(values)) for name, values in rows.items()]


def month(**figures: object) -> float:
    """The 1M-users-a-day month's total with these figures (see `lines`)."""
    return sum(line.monthly[-1] for line in lines(**figures))  # type: ignore[arg-type]


def before_after() -> str:
    """The 1M-users-a-day month before the prompt's view and after each step (docs/benchmarks.md)."""
    before = {
        "prompt": BEFORE_PROMPT_TOKENS_PER_USER_DAY,
        "completion": BEFORE_COMPLETION_TOKENS_PER_USER_DAY,
        "calls": BEFORE_CALLS_PER_USER_DAY,
        "uncounted": False,
        "custom_metrics": BEFORE_CUSTOM_METRICS,
    }
    base = month(**before)
    steps = [
        ("before: the whole memory in every prompt, online (as counted before)", base),
        (
            "the same, with data transfer out, log storage and every metric counted",
            month(**{**before, "uncounted": True, "custom_metrics": CUSTOM_METRICS}),
        ),
        ("the prompt's view (the day's parts, an outline), online", month()),
        ("the prompt's view through the Batch API (SummaryDelivery=batch)", month(batch=True)),
    ]
    out = [f"| {SCALES[-1]:,} users/day, USD a month | total | of before |", "| --- | ---: | ---: |"]
    out += [f"| {name} | {dollars(value)} | {value / base:.0%} |" for name, value in steps]
    return "\n".join(out)


def dollars(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.2f}"


def table() -> str:
    """The Markdown table of docs/deploy.md: each line, the total, per active user, the largest line."""
    rows = lines()
    totals = [sum(line.monthly[i] for line in rows) for i in range(len(SCALES))]
    head = "| USD a month | " + " | ".join(f"{n:,} users/day" for n in SCALES) + " |"
    out = [head, "| --- |" + " ---: |" * len(SCALES)]
    for line in rows:
        out.append(f"| {line.name} | " + " | ".join(dollars(v) for v in line.monthly) + " |")
    out.append("| **total** | " + " | ".join(f"**{dollars(t)}**" for t in totals) + " |")
    out.append(
        "| per active user a month | " + " | ".join(f"{t / n:.3f}" for t, n in zip(totals, SCALES, strict=True)) + " |"
    )
    largest = []
    for i, total in enumerate(totals):
        top = max(rows, key=lambda line: line.monthly[i])
        largest.append(f"{top.name.split(' (')[0]} {top.monthly[i] / total:.0%}")
    out.append("| largest line | " + " | ".join(largest) + " |")
    acus = " | ".join(f"{aurora_acus(n):.1f}" for n in SCALES)
    out.append(f"| Aurora ACUs on average (minimum {MIN_CAPACITY_ACUS}) | {acus} |")
    return "\n".join(out)


def levers() -> str:
    """What the largest lines would cost with each lever, at the largest scale."""
    users = SCALES[-1]
    user_days = users * DAYS_PER_MONTH
    edit = user_days * llm_cost_per_user_day(LLM_PROMPT_TOKENS_PER_USER_DAY, LLM_COMPLETION_TOKENS_PER_USER_DAY)
    document = user_days * llm_cost_per_user_day(
        LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE, LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE
    )
    worker_llm_wait = lambda_cost(user_days, LLM_CALLS_PER_USER_DAY * LLM_SECONDS_PER_CALL)
    worker_llm_wait_256 = lambda_cost(user_days, LLM_CALLS_PER_USER_DAY * LLM_SECONDS_PER_CALL, memory_mb=256)
    rows = [
        ("LLM, document mode (SummaryMode=document) instead of edit", document),
        ("LLM, edit mode (the default)", edit),
        ("LLM, edit mode through the Batch API at half price", edit * (1 - LLM_BATCH_DISCOUNT)),
        (
            f"LLM, edit mode if every stable prefix ({LLM_STABLE_PREFIX_SHARE:.0%} of the prompt) were cached",
            user_days
            * llm_cost_per_user_day(
                LLM_PROMPT_TOKENS_PER_USER_DAY, LLM_COMPLETION_TOKENS_PER_USER_DAY, cached_share=LLM_STABLE_PREFIX_SHARE
            ),
        ),
        ("worker Lambda waiting on the LLM at 1024 MB", worker_llm_wait),
        (f"the same at 256 MB (max RSS measured {WORKER_MAX_RSS_MB} MB)", worker_llm_wait_256),
    ]
    out = [f"| at {users:,} users/day | USD a month |", "| --- | ---: |"]
    out += [f"| {name} | {dollars(value)} |" for name, value in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(f"prices: {PRICES_AS_OF}")
    print()
    print(table())
    print()
    print(levers())
    print()
    print(before_after())


if __name__ == "__main__":
    main()

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
# The worker's default model (template parameter OpenAIModel): gpt-4o-mini, per million tokens.
LLM_INPUT_PER_MILLION_TOKENS = 0.15
LLM_OUTPUT_PER_MILLION_TOKENS = 0.60

# ---------------------------------------------------------------- measured in this repository
# bench/results/sim_30_days.txt, edit mode (the default SummaryMode): 4,520 user-days summarized,
# 4,809 LLM calls, prompt and completion tokens per user-day (o200k_base, the real tokenizer).
LLM_PROMPT_TOKENS_PER_USER_DAY = 3905.9
LLM_COMPLETION_TOKENS_PER_USER_DAY = 138.3
LLM_CALLS_PER_USER_DAY = 4809 / 4520
# The same simulation in document mode, for the comparison below.
LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 3049.6
LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 3375.9
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
CUSTOM_METRICS = 26  # distinct add_metric names in layers/core (one dimension: service)
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
NAT_BYTES_PER_USER_DAY = 20_000  # the LLM request and answer (~4k tokens of JSON), SQS sends
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


def llm_cost_per_user_day(prompt: float, completion: float) -> float:
    return prompt / 1e6 * LLM_INPUT_PER_MILLION_TOKENS + completion / 1e6 * LLM_OUTPUT_PER_MILLION_TOKENS


def lines() -> list[Line]:
    """Each cost line at each scale, USD a month."""
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
            + LLM_CALLS_PER_USER_DAY * LLM_SECONDS_PER_CALL
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
        nat = NAT_GATEWAY_PER_HOUR * HOURS_PER_MONTH + user_days * NAT_BYTES_PER_USER_DAY / GB * NAT_GATEWAY_PER_GB
        add("NAT gateway (one, with its data)", nat)
        log_bytes = api_requests * (
            LOG_BYTES_PER_API_REQUEST + LOG_EVENTS_PER_API_REQUEST * CLOUDWATCH_LOGS_BYTES_PER_EVENT
        )
        log_bytes += user_days * (
            LOG_BYTES_PER_USER_REFRESH + LOG_EVENTS_PER_USER_REFRESH * CLOUDWATCH_LOGS_BYTES_PER_EVENT
        )
        add("CloudWatch Logs ingestion", log_bytes / GB * CLOUDWATCH_LOGS_PER_GB_INGESTED)
        reservoir = 86400 * DAYS_PER_MONTH
        traced = min(api_requests, reservoir) + XRAY_SAMPLED_SHARE * max(0.0, api_requests - reservoir)
        add("X-Ray traces (Tracing: Active)", traced / 1e6 * XRAY_PER_MILLION_TRACES)
        fixed = ALARMS * CLOUDWATCH_ALARM_PER_MONTH + CUSTOM_METRICS * CLOUDWATCH_METRIC_PER_MONTH
        add("Alarms, custom metrics, secrets", fixed + SECRETS * SECRET_PER_MONTH)
        add(
            "LLM tokens (gpt-4o-mini, edit mode)",
            user_days * llm_cost_per_user_day(LLM_PROMPT_TOKENS_PER_USER_DAY, LLM_COMPLETION_TOKENS_PER_USER_DAY),
        )
    return [Line(name.strip(), tuple(values)) for name, values in rows.items()]


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
        ("LLM, edit mode through a batch API at half price", edit / 2),
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


if __name__ == "__main__":
    main()

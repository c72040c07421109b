"""Sizing: the users a day (and the seconds an LLM call takes) in, the deployment's parameters and
their monthly cost out. Pure arithmetic over domain/costs.py's figures; no I/O.

The shape it plans: a worker invocation takes WorkerBatchSize messages of UsersPerMessage users
and runs their LLM calls LLM_CONCURRENCY at a time, so one invocation of n users takes about
ceil(n / LLM_CONCURRENCY) waves, each as long as its slowest lane (not the mean call: with the
latency spread below, the slowest of 10 calls at once takes about 2.6 mean calls), and the worker drains
WorkerMaximumConcurrency x n / that many users a second. `user-memory plan` prints a plan,
docs/deploy.md's sizing table is its output, and the fan-out refuses a day whose backlog the
planned throughput (`users_per_second`, from its own settings) cannot drain before the queue's
retention (`backlog_limit`).

Through the Batch API (`summary_delivery="batch"`) the shape is the online one: whatever a batch
does not answer (a failed item, an expired batch, the fact floor's retry) is summarized online,
inside the same window. Only the bill changes: the first call of each user-day at the batch price,
and no worker waiting on the model for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

from user_memory.domain import costs as c
from user_memory.errors import InvalidArgument, PlanDoesNotFit

# The template's bounds and fixed values (tests/infrastructure/test_template.py checks each).
MIN_WORKER_CONCURRENCY = 2  # Lambda's least MaximumConcurrency for an SQS event source
MAX_WORKER_CONCURRENCY = 1000  # WorkerMaximumConcurrency's MaxValue
MAX_BATCH_SIZE = 10  # WorkerBatchSize's MaxValue
MAX_USERS_PER_MESSAGE = 100  # UsersPerMessage's MaxValue
WORKER_TIMEOUT_SECONDS = 120
VISIBILITY_TIMEOUT_SECONDS = 6 * WORKER_TIMEOUT_SECONDS
QUEUE_RETENTION_SECONDS = 14 * 86400  # SQS's most: the worker queue's and its DLQ's MessageRetentionPeriod
# What the fan-out keeps free of the retention: a message queued at the limit still has a day to
# be received, retried (MaxReceiveCount x the visibility timeout) and, failing, reach the DLQ.
BACKLOG_MARGIN_SECONDS = 86400
# The queue-age alarm never fires below this: a message waiting out its visibility timeout between
# receives (720 s each) ages without the run being late; failing ones have RecordsFailed's alarm.
MIN_QUEUE_AGE_ALARM_SECONDS = 3600
MAX_CAPACITY_ACUS = 256  # Aurora Serverless v2's most
MIN_MAX_CAPACITY_ACUS = 2  # room for migrations and a burst at the smallest scale
MAX_API_RATE_LIMIT = 10_000  # ApiThrottlingRateLimit's MaxValue
MAX_API_BURST_LIMIT = 5_000  # ApiThrottlingBurstLimit's MaxValue
MIN_API_RATE_LIMIT = 50  # the smallest the plan proposes: a developer's burst of requests
MAX_USERS_PER_DAY = 1_000_000_000
MAX_LLM_SECONDS = 105.0  # the worker's budget: one call cannot take longer
MAX_LLM_CONCURRENCY = 50  # WorkerLlmConcurrency's MaxValue
DEFAULT_WINDOW_HOURS = 6.0
DEFAULT_HEADROOM = 2.0
DEFAULT_LLM_CONCURRENCY = 10
# The latency spread the plan assumes (`llm_seconds` is its mean): log-normal with p99 / p50 of
# 8 s / 1.5 s, the spread bench/sim_scale.py scripts and measured drains 2.4-2.6x the mean-call plan.
LLM_LATENCY_P50_SECONDS = 1.5
LLM_LATENCY_P99_SECONDS = 8.0
SUMMARY_DELIVERIES = ("online", "batch")  # SummaryDelivery's AllowedValues
SummaryDelivery = Literal["online", "batch"]


@dataclass(frozen=True, kw_only=True)
class LlmFigures:
    """What the nightly run sends the model per user-day (edit mode, the default SummaryMode), and
    what the month counts beside it: the measured figures by default (domain/costs.py)."""

    prompt_tokens: float = c.LLM_PROMPT_TOKENS_PER_USER_DAY
    completion_tokens: float = c.LLM_COMPLETION_TOKENS_PER_USER_DAY
    calls: float = c.LLM_CALLS_PER_USER_DAY
    cached_share: float = c.LLM_CACHED_PROMPT_SHARE
    # The lines the model did not count before issue 22 (data transfer out, log storage, secret
    # reads) and the metrics it counts: off and 26 only to reprice the month as it was counted.
    uncounted: bool = True
    custom_metrics: int = c.CUSTOM_METRICS


MEASURED = LlmFigures()
# The whole memory in every prompt, as counted then (bench/cost_model.py's before_after()).
BEFORE_PROMPT_VIEW = LlmFigures(
    prompt_tokens=c.BEFORE_PROMPT_TOKENS_PER_USER_DAY,
    completion_tokens=c.BEFORE_COMPLETION_TOKENS_PER_USER_DAY,
    calls=c.BEFORE_CALLS_PER_USER_DAY,
    uncounted=False,
    custom_metrics=c.BEFORE_CUSTOM_METRICS,
)


@lru_cache(maxsize=256)
def tail_factor(lanes: int) -> float:
    """The expected slowest of `lanes` LLM calls at once over the mean call, for the log-normal
    spread above (it depends only on p99 / p50): E[max of k] / E[X] = the integral over z of
    exp(sigma z - sigma^2 / 2) k Phi(z)^(k-1) phi(z) dz, by Simpson's rule. 1.0 for one lane."""
    if lanes <= 1:
        return 1.0
    normal = NormalDist()
    sigma = math.log(LLM_LATENCY_P99_SECONDS / LLM_LATENCY_P50_SECONDS) / normal.inv_cdf(0.99)
    low, high, steps = -8.0, 8.0 + 2 * sigma, 4000  # the integrand is below 1e-12 outside
    width = (high - low) / steps
    total = 0.0
    for i in range(steps + 1):
        z = low + i * width
        value = math.exp(sigma * z - sigma * sigma / 2) * lanes * normal.cdf(z) ** (lanes - 1) * normal.pdf(z)
        total += value * (1 if i in (0, steps) else 4 if i % 2 else 2)
    return total * width / 3


def invocation_seconds(
    users: int, llm_concurrency: int, llm_seconds: float, *, calls: float = c.LLM_CALLS_PER_USER_DAY
) -> float:
    """About how long one worker invocation of `users` users takes: ceil(users / llm_concurrency)
    waves of LLM calls (`calls` a user, `llm_seconds` the mean call), each wave as long as its
    slowest lane (tail_factor of its lanes), each user's own work (its database round trips) beside."""
    waves = math.ceil(users / llm_concurrency)
    lanes = min(users, llm_concurrency)
    per_wave = calls * llm_seconds * tail_factor(lanes) + c.WORKER_MS_PER_USER / 1000
    per_wave += c.WORKER_ROUND_TRIPS_PER_USER * c.PROXY_ROUND_TRIP_MS / 1000
    return waves * per_wave


def users_per_second(
    *, worker_concurrency: int, batch_size: int, users_per_message: int, llm_concurrency: int, llm_seconds: float
) -> float:
    """Users the worker summarizes a second at full concurrency, with these settings."""
    users = batch_size * users_per_message
    return worker_concurrency * users / invocation_seconds(users, llm_concurrency, llm_seconds)


def backlog_limit(retention_seconds: int) -> int:
    """Seconds of draining a backlog may need before the fan-out refuses to add to it."""
    return max(0, retention_seconds - BACKLOG_MARGIN_SECONDS)


def _shape(llm_concurrency: int) -> tuple[int, int]:
    """(batch size, users per message): as many users an invocation as it runs LLM calls at once,
    at most 10 messages (SQS's batch without a window), so one invocation is one wave."""
    users_per_message = math.ceil(llm_concurrency / MAX_BATCH_SIZE)
    return llm_concurrency // users_per_message, users_per_message


def max_connections(max_capacity: float) -> int:
    """Aurora PostgreSQL's default max_connections at this MaxCapacity (MinCapacity 0.5)."""
    return min(int(max_capacity * c.BYTES_PER_ACU / c.BYTES_PER_CONNECTION), c.MAX_CONNECTIONS_LOW_MINIMUM)


def api_peak_per_second(users: int) -> float:
    return users * c.API_REQUESTS_PER_USER_DAY / 86400 * c.API_PEAK_TO_AVERAGE


def average_acus(users: int) -> float:
    """Average ACUs: the most of the minimum, the CPU at the API's peak, and the hot data in cache."""
    cpu_acus = api_peak_per_second(users) * c.DB_CPU_MS_PER_API_REQUEST / 1000 / c.VCPU_PER_ACU
    cpu_acus /= c.DB_TARGET_CPU_UTILIZATION
    cache_acus = users * c.HOT_BYTES_PER_ACTIVE_USER / c.CACHE_BYTES_PER_ACU
    return max(c.MIN_CAPACITY_ACUS, cpu_acus, cache_acus)


def _api_seconds_per_request() -> float:
    seconds = (c.API_HANDLER_MS + c.API_ROUND_TRIPS_PER_REQUEST * c.PROXY_ROUND_TRIP_MS) / 1000
    return seconds + c.COLD_START_SHARE * c.COLD_START_SECONDS


def _round_up(value: float, step: int) -> int:
    return int(math.ceil(value / step) * step)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A deployment sized for `users_per_day` (each field a template parameter or a figure to check)."""

    users_per_day: int
    llm_seconds: float
    llm_concurrency: int  # WorkerLlmConcurrency
    summary_delivery: SummaryDelivery  # SummaryDelivery
    window_hours: float
    headroom: float
    batch_size: int  # WorkerBatchSize
    users_per_message: int  # UsersPerMessage
    invocation_seconds: float
    worker_concurrency: int  # WorkerMaximumConcurrency
    users_per_second: float
    drain_seconds: float
    queue_age_alarm_seconds: int  # QueueAgeAlarmSeconds
    queue_retention_seconds: int  # the worker queue's and its DLQ's MessageRetentionPeriod
    backlog_limit_seconds: int  # the fan-out refuses a day beyond it (FanoutRefused)
    backlog_limit_users: int
    min_capacity: float  # infra/database.yaml MinCapacity
    max_capacity: int  # infra/database.yaml MaxCapacity
    average_acus: float
    connections_at_peak: int  # through the RDS Proxy (worker users in flight + API environments)
    proxy_connections: int  # what the proxy may open at MaxCapacity (MaxConnectionsPercent)
    api_rate_limit: int  # ApiThrottlingRateLimit
    api_burst_limit: int  # ApiThrottlingBurstLimit
    llm_requests_per_minute: int
    llm_tokens_per_minute: int
    monthly_cost: dict[str, float] = field(default_factory=dict)

    @property
    def total_monthly_cost(self) -> float:
        return sum(self.monthly_cost.values())

    def parameters(self) -> dict[str, Any]:
        """The template parameters (template.yaml and infra/database.yaml) this plan sets."""
        return {
            "WorkerMaximumConcurrency": self.worker_concurrency,
            "WorkerBatchSize": self.batch_size,
            "UsersPerMessage": self.users_per_message,
            "WorkerLlmConcurrency": self.llm_concurrency,
            "SummaryDelivery": self.summary_delivery,
            "LlmSecondsPerCall": self.llm_seconds,
            "QueueAgeAlarmSeconds": self.queue_age_alarm_seconds,
            "ApiThrottlingRateLimit": self.api_rate_limit,
            "ApiThrottlingBurstLimit": self.api_burst_limit,
            "MinCapacity": self.min_capacity,
            "MaxCapacity": self.max_capacity,
        }

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "monthly_cost"}
        out["parameters"] = self.parameters()
        out["monthly_cost"] = {k: round(v, 2) for k, v in self.monthly_cost.items()}
        out["total_monthly_cost"] = round(self.total_monthly_cost, 2)
        return out


def _check(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    if not math.isfinite(value) or value > high or (value <= low if low_open else value < low):
        bound = f"above {low:g}" if low_open else f"at least {low:g}"
        raise InvalidArgument(name, f"must be {bound} and at most {high:g}, got {value:g}")


def plan(
    users_per_day: int,
    *,
    llm_seconds: float = c.LLM_SECONDS_PER_CALL,
    llm_concurrency: int = DEFAULT_LLM_CONCURRENCY,
    window_hours: float = DEFAULT_WINDOW_HOURS,
    headroom: float = DEFAULT_HEADROOM,
    summary_delivery: SummaryDelivery = "online",
) -> Plan:
    """The parameters that summarize `users_per_day` users inside `window_hours` with `headroom`
    (capacity over need), and what they cost a month (the nightly run online, or through the
    Batch API: the same parameters, another bill).

    Raises InvalidArgument for an input out of bounds (named as its argument), PlanDoesNotFit
    when no parameters the template allows finish inside the window.
    """
    _check("users_per_day", users_per_day, 1, MAX_USERS_PER_DAY)
    _check("llm_seconds", llm_seconds, 0, MAX_LLM_SECONDS, low_open=True)
    _check("llm_concurrency", llm_concurrency, 1, MAX_LLM_CONCURRENCY)
    _check("window_hours", window_hours, 0, 24, low_open=True)
    _check("headroom", headroom, 1, 100)
    if summary_delivery not in SUMMARY_DELIVERIES:
        raise InvalidArgument(
            "summary_delivery", f"must be one of {', '.join(SUMMARY_DELIVERIES)}, got {summary_delivery!r}"
        )
    batch_size, users_per_message = _shape(llm_concurrency)
    users = batch_size * users_per_message
    seconds = invocation_seconds(users, llm_concurrency, llm_seconds)
    per_invocation = users / seconds
    window = window_hours * 3600
    needed = math.ceil(users_per_day * headroom / (window * per_invocation))
    concurrency = max(MIN_WORKER_CONCURRENCY, needed)
    if concurrency > MAX_WORKER_CONCURRENCY:
        raise PlanDoesNotFit(
            f"{users_per_day:,} users a day at {llm_seconds:g} s an LLM call need {concurrency:,} concurrent worker "
            f"invocations to finish within {window_hours:g} h with {headroom:g}x headroom; the most is "
            f"{MAX_WORKER_CONCURRENCY:,} (WorkerMaximumConcurrency): raise the LLM concurrency or the window"
        )
    rate = concurrency * per_invocation
    drain = users_per_day / rate
    alarm = max(MIN_QUEUE_AGE_ALARM_SECONDS, _round_up(drain * headroom, 60))
    limit = backlog_limit(QUEUE_RETENTION_SECONDS)

    # The database: CPU at the API's peak while the nightly run writes, or the hot data in cache,
    # with the same headroom; then enough connections for every user in flight and the API's.
    api_peak = api_peak_per_second(users_per_day)
    worker_cpu = rate * c.DB_CPU_MS_PER_USER_REFRESH / 1000
    cpu_acus = (api_peak * c.DB_CPU_MS_PER_API_REQUEST / 1000 + worker_cpu) / c.VCPU_PER_ACU
    cpu_acus /= c.DB_TARGET_CPU_UTILIZATION
    cache_acus = users_per_day * c.HOT_BYTES_PER_ACTIVE_USER / c.CACHE_BYTES_PER_ACU
    max_capacity = max(MIN_MAX_CAPACITY_ACUS, math.ceil(max(cpu_acus, cache_acus) * headroom))
    if max_capacity > MAX_CAPACITY_ACUS:
        raise PlanDoesNotFit(
            f"{users_per_day:,} users a day need {max_capacity:,} ACUs of Aurora with {headroom:g}x headroom (their "
            f"hot data in cache, the CPU at the peak); one Serverless v2 writer has at most {MAX_CAPACITY_ACUS}"
        )
    connections = concurrency * users + math.ceil(api_peak * _api_seconds_per_request() * headroom)
    while connections > max_connections(max_capacity) * c.PROXY_MAX_CONNECTIONS_PERCENT // 100:
        if max_capacity >= MAX_CAPACITY_ACUS or max_connections(max_capacity) >= c.MAX_CONNECTIONS_LOW_MINIMUM:
            raise PlanDoesNotFit(
                f"{connections:,} database connections at peak are more than the proxy may open "
                f"({c.PROXY_MAX_CONNECTIONS_PERCENT}% of {c.MAX_CONNECTIONS_LOW_MINIMUM:,}); lower the concurrency"
            )
        max_capacity += 1
    rate_limit = max(MIN_API_RATE_LIMIT, _round_up(api_peak * headroom, 10))
    if rate_limit > MAX_API_RATE_LIMIT:
        raise PlanDoesNotFit(
            f"the API's peak of {api_peak:,.0f} requests a second with {headroom:g}x headroom is above the "
            f"{MAX_API_RATE_LIMIT:,} requests a second ApiThrottlingRateLimit allows (and the account's default quota)"
        )
    calls_per_minute = rate * c.LLM_CALLS_PER_USER_DAY * 60
    tokens_per_user = c.LLM_PROMPT_TOKENS_PER_USER_DAY + c.LLM_COMPLETION_TOKENS_PER_USER_DAY
    result = Plan(
        users_per_day=users_per_day,
        llm_seconds=llm_seconds,
        llm_concurrency=llm_concurrency,
        summary_delivery=summary_delivery,
        window_hours=window_hours,
        headroom=headroom,
        batch_size=batch_size,
        users_per_message=users_per_message,
        invocation_seconds=seconds,
        worker_concurrency=concurrency,
        users_per_second=rate,
        drain_seconds=drain,
        queue_age_alarm_seconds=alarm,
        queue_retention_seconds=QUEUE_RETENTION_SECONDS,
        backlog_limit_seconds=limit,
        backlog_limit_users=int(limit * rate),
        min_capacity=c.MIN_CAPACITY_ACUS,
        max_capacity=max_capacity,
        average_acus=average_acus(users_per_day),
        connections_at_peak=connections,
        proxy_connections=max_connections(max_capacity) * c.PROXY_MAX_CONNECTIONS_PERCENT // 100,
        api_rate_limit=rate_limit,
        api_burst_limit=min(MAX_API_BURST_LIMIT, 2 * rate_limit),
        llm_requests_per_minute=math.ceil(calls_per_minute),
        llm_tokens_per_minute=math.ceil(rate * tokens_per_user * 60),
    )
    return Plan(**{**result.__dict__, "monthly_cost": monthly_cost(result)})


# ---------------------------------------------------------------- the monthly bill


def lambda_cost(invocations: float, seconds_each: float, memory_mb: float = c.FUNCTION_MEMORY_MB) -> float:
    gb_seconds = invocations * seconds_each * memory_mb / 1024
    return gb_seconds * c.LAMBDA_ARM_PER_GB_SECOND + invocations / 1e6 * c.LAMBDA_PER_MILLION_REQUESTS


def http_api_cost(requests: float) -> float:
    first = min(requests, 300e6)
    return (
        first / 1e6 * c.HTTP_API_PER_MILLION_FIRST_300M + (requests - first) / 1e6 * c.HTTP_API_PER_MILLION_AFTER_300M
    )


def llm_cost_per_user_day(
    prompt: float, completion: float, *, cached_share: float = c.LLM_CACHED_PROMPT_SHARE, batch: bool = False
) -> float:
    """One user-day's tokens at the list prices (domain/cost.py's DEFAULT_PRICES): the cached share
    of the prompt at the cached rate (online only: cache hits are not assumed for batch requests),
    and everything at LLM_BATCH_DISCOUNT off through the Batch API."""
    if batch:
        full = prompt * c.LLM_INPUT_PER_MILLION_TOKENS + completion * c.LLM_OUTPUT_PER_MILLION_TOKENS
        return full / 1e6 * (1 - c.LLM_BATCH_DISCOUNT)
    cached = prompt * min(max(cached_share, 0.0), 1.0)
    return (
        (prompt - cached) * c.LLM_INPUT_PER_MILLION_TOKENS
        + cached * c.LLM_CACHED_INPUT_PER_MILLION_TOKENS
        + completion * c.LLM_OUTPUT_PER_MILLION_TOKENS
    ) / 1e6


def llm_month(p: Plan, figures: LlmFigures = MEASURED) -> float:
    """The month's tokens. Through the Batch API only each user-day's first call is in the batch;
    the rest (the fact floor's and a bad answer's retries: `calls` - 1 a user-day, of tokens like
    the first's) goes online."""
    user_days = p.users_per_day * c.DAYS_PER_MONTH
    online = llm_cost_per_user_day(figures.prompt_tokens, figures.completion_tokens, cached_share=figures.cached_share)
    if p.summary_delivery == "online":
        return user_days * online
    batched = llm_cost_per_user_day(figures.prompt_tokens, figures.completion_tokens, batch=True)
    first = 1 / max(figures.calls, 1.0)
    return user_days * (first * batched + (1 - first) * online)


def worker_cost(p: Plan, memory_mb: float = c.FUNCTION_MEMORY_MB, figures: LlmFigures = MEASURED) -> float:
    """The worker's Lambda a month: each invocation billed for its users' LLM waves. Through the
    Batch API no invocation waits on the batch's answers (they come back as a file), only on the
    online retries, and each user's run goes through the pipeline twice (submit, collect)."""
    users = p.batch_size * p.users_per_message
    if p.summary_delivery == "online":
        seconds = invocation_seconds(users, p.llm_concurrency, p.llm_seconds, calls=figures.calls)
        return lambda_cost(p.users_per_day * c.DAYS_PER_MONTH / users, seconds, memory_mb)
    collect = invocation_seconds(users, p.llm_concurrency, p.llm_seconds, calls=max(figures.calls - 1, 0.0))
    submit = invocation_seconds(users, p.llm_concurrency, p.llm_seconds, calls=0.0)
    return lambda_cost(2 * p.users_per_day * c.DAYS_PER_MONTH / users, (collect + submit) / 2, memory_mb)


def monthly_cost(p: Plan, figures: LlmFigures = MEASURED) -> dict[str, float]:
    """Each cost line of a month at this plan, USD (bench/cost_model.py prints them side by side);
    `figures` reprices it with other LLM figures (the defaults are the measured ones)."""
    users = p.users_per_day
    user_days = users * c.DAYS_PER_MONTH
    per_invocation = p.batch_size * p.users_per_message
    messages = user_days / p.users_per_message
    if p.summary_delivery == "batch":
        messages *= 2  # each refresh_user message's batch is collected by a collect_batch message
    api_requests = user_days * c.API_REQUESTS_PER_USER_DAY
    fanout = lambda_cost(c.DAYS_PER_MONTH, users * c.FANOUT_MS_PER_USER / 1000)
    acus = p.average_acus
    storage = users * c.STORED_BYTES_PER_USER / c.GB * c.AURORA_STORAGE_PER_GB_MONTH
    io = (api_requests * c.IO_PER_API_REQUEST + user_days * c.IO_PER_USER_REFRESH) / 1e6 * c.AURORA_PER_MILLION_IO
    tokens = figures.calls / c.LLM_CALLS_PER_USER_DAY * (figures.prompt_tokens + figures.completion_tokens)
    llm_bytes = user_days * (tokens * c.LLM_BYTES_PER_TOKEN + c.NAT_OVERHEAD_BYTES_PER_USER_DAY)
    nat = c.NAT_GATEWAY_PER_HOUR * c.HOURS_PER_MONTH + llm_bytes / c.GB * c.NAT_GATEWAY_PER_GB
    log_bytes: float = api_requests * (
        c.LOG_BYTES_PER_API_REQUEST + c.LOG_EVENTS_PER_API_REQUEST * c.CLOUDWATCH_LOGS_BYTES_PER_EVENT
    )
    refresh_bytes = c.LOG_BYTES_PER_USER_REFRESH + c.CLOUDWATCH_LOGS_BYTES_PER_EVENT
    invocation_bytes = c.LOG_BYTES_PER_INVOCATION + c.LOG_EVENTS_PER_INVOCATION * c.CLOUDWATCH_LOGS_BYTES_PER_EVENT
    log_bytes += user_days * (refresh_bytes + invocation_bytes / per_invocation)
    reservoir = 86400 * c.DAYS_PER_MONTH
    traced = min(api_requests, reservoir) + c.XRAY_SAMPLED_SHARE * max(0.0, api_requests - reservoir)
    fixed = c.ALARMS * c.CLOUDWATCH_ALARM_PER_MONTH + figures.custom_metrics * c.CLOUDWATCH_METRIC_PER_MONTH
    lines = {
        "Lambda: API function": lambda_cost(api_requests, _api_seconds_per_request()),
        "Lambda: worker (waits on the LLM) and fan-out": worker_cost(p, figures=figures) + fanout,
        "SQS": (messages * (0.1 + 2 / p.batch_size) + c.SQS_IDLE_POLL_REQUESTS_PER_MONTH)
        / 1e6
        * c.SQS_PER_MILLION_REQUESTS,
        "API Gateway HTTP API": http_api_cost(api_requests),
        "Aurora Serverless v2 (ACUs below)": acus * c.AURORA_SERVERLESS_V2_PER_ACU_HOUR * c.HOURS_PER_MONTH,
        "Aurora storage (a year of history) and I/O": storage + io,
        "RDS Proxy (billed for at least 8 ACUs)": max(c.RDS_PROXY_MINIMUM_ACUS, acus)
        * c.RDS_PROXY_PER_ACU_HOUR
        * c.HOURS_PER_MONTH,
        "NAT gateway (one, with its data)": nat,
    }
    if figures.uncounted:
        out = llm_bytes + api_requests * c.API_BYTES_PER_RESPONSE
        lines["Data transfer out (LLM requests, API answers)"] = out / c.GB * c.DATA_TRANSFER_OUT_PER_GB
    lines["CloudWatch Logs ingestion"] = log_bytes / c.GB * c.CLOUDWATCH_LOGS_PER_GB_INGESTED
    if figures.uncounted:
        stored = log_bytes * c.LOG_RETENTION_MONTHS / c.GB * c.CLOUDWATCH_LOGS_STORAGE_PER_GB_MONTH
        reads = api_requests * c.COLD_START_SHARE * c.SECRET_READS_PER_COLD_START
        lines["Log storage (30 days) and secret reads"] = stored + reads / 1e4 * c.SECRETS_MANAGER_PER_10K_CALLS
    lines["X-Ray traces (Tracing: Active)"] = traced / 1e6 * c.XRAY_PER_MILLION_TRACES
    lines["Alarms, custom metrics, secrets"] = fixed + c.SECRETS * c.SECRET_PER_MONTH
    batch = ", Batch API" if p.summary_delivery == "batch" else ""
    lines[f"LLM tokens (gpt-4o-mini, edit mode{batch})"] = llm_month(p, figures)
    return lines


# ---------------------------------------------------------------- the table docs/deploy.md shows


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _count(n: float) -> str:
    return f"{n:,.0f}" if n >= 10 else f"{n:.1f}"


def _pair(a: int, b: int) -> str:
    return f"{a:,} / {b:,}"


def dollars(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.2f}"


def sizing_table(plans: list[Plan]) -> str:
    """A Markdown table, one column a plan: the parameters to deploy with, what they give, the cost."""
    rows: list[tuple[str, Callable[[Plan], str]]] = [
        ("nightly summaries (`SummaryDelivery`)", lambda p: p.summary_delivery),
        ("LLM calls at once per invocation (`WorkerLlmConcurrency`)", lambda p: str(p.llm_concurrency)),
        ("messages per invocation (`WorkerBatchSize`)", lambda p: str(p.batch_size)),
        ("users per message (`UsersPerMessage`)", lambda p: str(p.users_per_message)),
        ("one invocation takes", lambda p: f"{p.invocation_seconds:.1f} s"),
        ("worker invocations at once (`WorkerMaximumConcurrency`)", lambda p: str(p.worker_concurrency)),
        ("users summarized a second", lambda p: _count(p.users_per_second)),
        ("the night's run drains in", lambda p: _duration(p.drain_seconds)),
        ("within the nightly window, with headroom", lambda p: f"{p.window_hours:g} h, {p.headroom:g}x"),
        ("queue age alarm (`QueueAgeAlarmSeconds`)", lambda p: str(p.queue_age_alarm_seconds)),
        ("worker queue and DLQ retention", lambda p: f"{p.queue_retention_seconds // 86400} days"),
        ("the fan-out refuses a backlog over (`FanoutRefused`)", lambda p: f"{_count(p.backlog_limit_users)} users"),
        ("Aurora ACUs (`MinCapacity` - `MaxCapacity`)", lambda p: f"{p.min_capacity:g} - {p.max_capacity}"),
        ("Aurora ACUs on average", lambda p: f"{p.average_acus:.1f}"),
        ("connections at peak / the RDS Proxy may open", lambda p: _pair(p.connections_at_peak, p.proxy_connections)),
        ("API rate / burst (`ApiThrottling*Limit`)", lambda p: _pair(p.api_rate_limit, p.api_burst_limit)),
        ("LLM calls / tokens a minute", lambda p: _pair(p.llm_requests_per_minute, p.llm_tokens_per_minute)),
        ("USD a month (the cost model's lines)", lambda p: dollars(p.total_monthly_cost)),
    ]  # fmt: skip
    head = "| plan | " + " | ".join(f"{p.users_per_day:,} users/day" for p in plans) + " |"
    out = [head, "| --- |" + " ---: |" * len(plans)]
    out += [f"| {name} | " + " | ".join(shown(p) for p in plans) + " |" for name, shown in rows]
    return "\n".join(out)

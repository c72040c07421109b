"""The figures a deployment is sized and priced from: list prices, measurements of this
repository, and assumptions about the workload, each a named constant.

One source for `user-memory plan` (domain/plan.py) and bench/cost_model.py (which imports them).
Prices: AWS us-east-1 and OpenAI list prices as published in 2025 (the last time they were read;
PRICES_AS_OF), on-demand, without free tiers, savings plans or taxes. They change: check them
against the providers' pricing pages before relying on a result.
"""

from __future__ import annotations

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
# The same simulation in document mode, for the comparison of the levers.
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
# template.yaml: every function's MemorySize (Globals), its alarms and the worker's timeout.
FUNCTION_MEMORY_MB = 1024
ALARMS = 12  # template.yaml's AWS::CloudWatch::Alarm resources (with the migrate function's)
CUSTOM_METRICS = 27  # distinct add_metric names in layers/core (one dimension: service)
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
LOG_BYTES_PER_USER_REFRESH = 900  # `user refreshed`; each invocation adds LOG_BYTES_PER_INVOCATION
LOG_BYTES_PER_INVOCATION = 600  # EMF and the platform's START/END/REPORT, shared by its users
LOG_EVENTS_PER_INVOCATION = 4
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
# Aurora PostgreSQL's default max_connections: LEAST(memory / 9,531,392 bytes, 5,000), the memory
# of Serverless v2 being that of its MaxCapacity (~2 GiB an ACU); with MinCapacity 0 or 0.5 it is
# capped at 2,000 (the Aurora user guide, "Maximum connections for Aurora Serverless v2").
BYTES_PER_ACU = 2 * GB
BYTES_PER_CONNECTION = 9_531_392
MAX_CONNECTIONS_LOW_MINIMUM = 2_000
PROXY_MAX_CONNECTIONS_PERCENT = 90  # infra/database.yaml: the proxy's target group

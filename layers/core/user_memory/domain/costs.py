"""The figures a deployment is sized and priced from: list prices, measurements of this
repository, and assumptions about the workload, each a named constant.

One source for `user-memory plan` (domain/plan.py) and bench/cost_model.py (which imports them).
Prices: AWS us-east-1 and OpenAI list prices as published in 2025 (the last time they were read;
PRICES_AS_OF), on-demand, without free tiers, savings plans or taxes. They change: check them
against the providers' pricing pages before relying on a result.
"""

from __future__ import annotations

from user_memory.domain.cost import DEFAULT_PRICES

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
# The worker's default model (template parameter OpenAIModel): gpt-4o-mini, per million tokens;
# the worker's LLM_PRICE_* settings default to the same (domain/cost.py, one source).
LLM_INPUT_PER_MILLION_TOKENS = DEFAULT_PRICES.input_per_1m
LLM_CACHED_INPUT_PER_MILLION_TOKENS = DEFAULT_PRICES.cached_input_per_1m
LLM_OUTPUT_PER_MILLION_TOKENS = DEFAULT_PRICES.output_per_1m
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
# The same simulation in document mode, for the comparison of the levers.
LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 298.0
LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE = 1191.1
# Before the prompt's view (the whole memory in every prompt), the same simulation, edit mode
# (commit 1a6aec6), and what the model counted then: bench/cost_model.py at 236415a~1 printed
# $25,276 for the 1M-users-a-day month (its serial worker, 3 users an invocation, 11 alarms, 26
# metrics; bench/cost_model.py's before_after() starts from it).
BEFORE_PROMPT_TOKENS_PER_USER_DAY = 3905.9
BEFORE_COMPLETION_TOKENS_PER_USER_DAY = 138.3
BEFORE_CALLS_PER_USER_DAY = 4809 / 4520
BEFORE_CUSTOM_METRICS = 26
BEFORE_MONTH_AS_COUNTED = 25_276
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
ALARMS = 15  # template.yaml's AWS::CloudWatch::Alarm resources (with the migrate function's and the events relay's 3)
# Distinct metric names the functions emit (one dimension: service): 48 named in layers/core, the
# Users_<status> (6) and Conversations_<status> (5) families, RecordsFailed and RecordsDeferred, the
# worker's 15 batch counts (LLMTokens ... DigestsMade). The model counted 26 before.
CUSTOM_METRICS = 48 + 6 + 5 + 2 + 15
SECRETS = 7  # infra/database.yaml's six (master, two logins, three DSNs) and the OpenAI key

# ---------------------------------------------------------------- assumptions (not measured)
API_REQUESTS_PER_USER_DAY = 20  # an agent reads the memory or its prompt per session, writes kv and activity
API_ROUND_TRIPS_PER_REQUEST = 3  # BEGIN + role and claims, the query, COMMIT
PROXY_ROUND_TRIP_MS = 1.0  # Lambda -> RDS Proxy -> Aurora in one region, connection already open
LLM_SECONDS_PER_CALL = 2.0  # gpt-4o-mini, ~1.3-4k tokens in, ~130 out; the simulation's model is local
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
# Aurora PostgreSQL's default max_connections: LEAST(memory / 9,531,392 bytes, 5,000), the memory
# of Serverless v2 being that of its MaxCapacity (~2 GiB an ACU); with MinCapacity 0 or 0.5 it is
# capped at 2,000 (the Aurora user guide, "Maximum connections for Aurora Serverless v2").
BYTES_PER_ACU = 2 * GB
BYTES_PER_CONNECTION = 9_531_392
MAX_CONNECTIONS_LOW_MINIMUM = 2_000
PROXY_MAX_CONNECTIONS_PERCENT = 90  # infra/database.yaml: the proxy's target group

# Every target bootstraps its own virtual environment on a fresh machine (Python 3.11+ and make only).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench migrate clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# PYTHONWARNINGS: setuptools' banners about editable installs, which need no action here
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet -e '.[dev]' -e 'clients/python[langgraph]'
	touch $(STAMP)

demo: $(STAMP)  ## the daily job on local stand-ins (PostgreSQL in $USER_MEMORY_HOME/pgdata, moto SQS), then the report
	$(BIN)/user-memory demo $(ARGS)

# The whole suite runs as an owner like RDS's master user (no SUPERUSER, no BYPASSRLS); then the
# migrations, integration and security suites again as a Supabase-like owner and as a superuser
# (tests/owners.py). With ARGS or DATABASE_URL, only the first run.
# tests/client/test_typescript.py runs clients/typescript's vitest suite too (Node 18+ and npm; .ci/run
# installs them where missing, and without them those tests skip outside CI).
test: $(STAMP)  ## the whole suite: unit, integration (embedded PostgreSQL), e2e, template checks
	$(BIN)/python -m pytest $(ARGS)
	@if [ -z "$(ARGS)" ] && [ -z "$$DATABASE_URL" ]; then \
	  for owner in supabase superuser; do \
	    echo "make test: tests/integration as the $$owner owner"; \
	    USER_MEMORY_TEST_OWNER=$$owner $(BIN)/python -m pytest -q tests/integration || exit 1; \
	  done; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)  ## every benchmark (about 30 minutes); figures go into docs/benchmarks.md by hand
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_store.py --compare-eventsourcing --wal-by-relation
	$(BIN)/python bench/bench_append_cpu.py
	$(BIN)/python bench/bench_history.py
	$(BIN)/python bench/bench_worker.py --users 10000 --profile
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_conversations.py
	$(BIN)/python bench/bench_search.py
	$(BIN)/python bench/bench_cold_import.py --runs 9
	$(BIN)/python bench/bench_first_invocation.py --runs 5
	$(BIN)/python bench/bench_console.py --runs 7

migrate: $(STAMP)
	$(BIN)/user-memory migrate

.PHONY: sim
sim: $(STAMP)  ## 200 users x 30 days, a scripted model with a bad day, both summary modes; bench/results/sim_30_days.txt
	$(BIN)/pip install --quiet -e '.[dev,bench]' || echo "make sim: the bench extra (bpe-openai) is not installed; tokens are estimated (4 characters each)" >&2
	$(BIN)/python bench/sim_30_days.py $(ARGS)

.PHONY: openapi
openapi: $(STAMP)  ## regenerate layers/core/user_memory/http/openapi.json from the routes and models
	$(BIN)/python -m user_memory_local.openapi

clean:
	rm -rf $(VENV) .pgdata .pytest_cache .mypy_cache .ruff_cache

# ---- Lambda build (SAM). The SAM CLI and uv live in their own virtual environment.
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
SAM_STAMP := $(SAM_VENV)/.installed
SAM_CLI_VERSION ?= 1.170.0
UV_VERSION ?= 0.13.9
# The functions' runtime; `sam build` finds it on PATH by this name.
PYTHON312 ?= python3.12
# Lambda python3.12 runs on Amazon Linux 2023 (glibc 2.34), arm64.
LOCK_PLATFORM := aarch64-manylinux_2_34

.PHONY: build lock

$(SAM_STAMP):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet 'aws-sam-cli==$(SAM_CLI_VERSION)' 'uv==$(UV_VERSION)'
	touch $(SAM_STAMP)

lock: $(SAM_STAMP)  ## regenerate the layer's lock (layers/core/requirements.txt) from requirements.in
	UV_PYTHON_DOWNLOADS=never $(SAM_VENV)/bin/uv pip compile layers/core/requirements.in --python-version 3.12 \
	  --python-platform $(LOCK_PLATFORM) -o layers/core/requirements.txt

build: $(SAM_STAMP)  ## sam validate --lint, sam build (arm64 layer from the lock), then check the artifacts
	@py=$$($(PYTHON312) -c 'import sys; assert sys.version_info[:2] == (3, 12); print(sys.executable)' 2>/dev/null) \
	  || { echo "make build: no working python3.12 on PATH (sam build needs it for the python3.12 runtime); install one or run: make build PYTHON312=/path/to/python3.12" >&2; exit 1; }; \
	export PATH="$$(dirname "$$py"):$$PATH" SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="$${AWS_DEFAULT_REGION:-us-east-1}"; \
	set -x; \
	$(SAM) validate --lint --template-file template.yaml && \
	$(SAM) build --template-file template.yaml && \
	"$$py" infra/check_build.py

.PHONY: client
client: $(STAMP)  ## regenerate clients/python/user_memory_client/client.py from aio.py (the async client is the source)
	$(BIN)/python scripts/unasync_client.py

.PHONY: schema
schema: $(STAMP)  ## regenerate migrations/schema/current.sql (the live schema after every migration) from a freshly migrated embedded database
	$(BIN)/python scripts/current_schema.py

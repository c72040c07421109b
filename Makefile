# Every target bootstraps its own virtual environment on a fresh machine (Python 3.11+ and make only).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench migrate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## the main job on embedded defaults: seed, fan-out, drain the queue, report
	$(BIN)/user-memory demo $(ARGS)

test: $(STAMP)  ## the whole suite: unit, integration (embedded PostgreSQL), e2e, template checks
	$(BIN)/python -m pytest $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_pipeline.py

migrate: $(STAMP)
	$(BIN)/user-memory migrate

clean:
	rm -rf $(VENV) .pgdata .pytest_cache .mypy_cache .ruff_cache

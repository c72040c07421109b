"""The console's landing in a real browser (the memory read as a person reads it, its newest ten
versions beside it): first paint and time to interactive for a user with 50 versions and one with
5,000, beside floors measured in the same run.

    .venv/bin/python bench/bench_console.py [--runs 7] [--small 50] [--large 5000]

The API is `user-memory serve`'s server (ApiServer, in this process) on an embedded PostgreSQL
of its own; the browser is Debian's chromium through Playwright, a fresh context (no cache) per
load. Each user's versions are nightly summaries of a ~10 KB user_state memory with their
provenance, written as the worker writes them (bench_history.nightly / provenance).

Measured per load, from the navigation's start:
  first paint          the browser's first-contentful-paint
  interactive          the landing rendered and its controls live (the page's
                       `console-ready:memory` performance mark)
Floors: a one-paragraph page (the browser's own cost), and the console signed out (its page,
styles and modules, no API call).
"""

from __future__ import annotations

import os

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import argparse
import io
import random
import shutil
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_database, table, user_state_document
from bench_history import nightly, provenance
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer, console_url
from user_memory_local.tokens import issue_token

SECRET = "bench-console-secret-of-at-least-32-bytes"
FLOOR_PAGE = "data:text/html,<!doctype html><title>floor</title><p>one paragraph</p>"


def seed(store: MemoryStore, versions: int, rng: random.Random) -> str:
    user = str(uuid.uuid4())
    document = user_state_document(rng)
    for n in range(versions):
        store.append(user, document, expected_version=n, source=f"daily summary {n}", provenance=provenance(rng))
        document = nightly(document, rng)
    return user


def load(browser: Any, url: str, ready: str | None) -> tuple[float, float]:
    """(first paint, interactive) in ms of one load in a fresh context."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    try:
        page.goto(url)
        if ready:
            page.wait_for_selector(f'main[data-ready="{ready}"]', timeout=30_000)
        else:
            page.wait_for_load_state("load")
        page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0")
        paint = page.evaluate("() => performance.getEntriesByName('first-contentful-paint')[0].startTime")
        mark = page.evaluate(f"() => (performance.getEntriesByName('console-ready:{ready}')[0] || {{}}).startTime")
        interactive = (
            mark if ready else page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
        )
        return float(paint), float(interactive)
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=5000)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("bench_console: no chromium on PATH (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    pool = open_pool(fresh_database("user_memory_bench_console"), size=4)
    store = MemoryStore(PostgresRecorder(pool))
    rng = random.Random(16)
    started = time.perf_counter()
    users = {
        f"{args.small} versions": seed(store, args.small, rng),
        f"{args.large:,} versions": seed(store, args.large, rng),
    }
    print(f"seeded {args.small + args.large:,} versions in {time.perf_counter() - started:.0f} s")
    settings = ApiSettings.from_env({"DATABASE_POOL_SIZE": "4"})
    api = create_api(build_api(settings, pool=pool), settings)
    with ApiServer(api, secret=SECRET, port=0, log=io.StringIO()) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"] if os.geteuid() == 0 else [])
        cases: list[tuple[str, str, str | None]] = [
            ("floor: a one-paragraph page", FLOOR_PAGE, None),
            ("floor: the console signed out", server.url + "/console", None),
        ]
        for name, user in users.items():
            cases.append((f"landing, {name}", console_url(server.url, issue_token(user, secret=SECRET)), "memory"))
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
        for _ in range(args.runs):  # interleaved, so a busy moment of the machine hits every case
            for name, url, ready in cases:
                results[name].append(load(browser, url, ready))
        browser.close()
    rows = []
    for name, found in results.items():
        paint = [f[0] for f in found]
        ready = [f[1] for f in found]
        rows.append(
            (
                name,
                f"first paint p50 {statistics.median(paint):6.0f} ms (max {max(paint):4.0f}),  "
                f"interactive p50 {statistics.median(ready):6.0f} ms (max {max(ready):4.0f})",
            )
        )
    table(f"console landing in chromium, {args.runs} loads each (fresh context, no cache)", rows)
    print(f"\nload average: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    pool.close()


if __name__ == "__main__":
    main()

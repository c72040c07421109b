"""The X-Ray SDK is loaded only where SDK tracing is asked for: each function's cold import
without it, and the handler wrapped by Powertools' Tracer with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from user_memory.observability import metrics, traced

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("api", "worker", "fanout", "retention")

PROBE = """
import json, sys
import user_memory_functions.{name}.app as app
print(json.dumps({{"xray": "aws_xray_sdk" in sys.modules}}))
"""


def _import_in_fresh_process(name: str, tracing: str | None, tmp_path: Path) -> dict[str, bool]:
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    if not (links / "user_memory_functions").exists():
        (links / "user_memory_functions").symlink_to(ROOT / "functions")
    env = {k: v for k, v in os.environ.items() if k != "XRAY_SDK_TRACING"}
    env["PYTHONPATH"] = f"{ROOT / 'layers' / 'core'}{os.pathsep}{links}"
    env["POWERTOOLS_TRACE_DISABLED"] = "true"  # the Tracer built with tracing on must not try to send
    if tracing is not None:
        env["XRAY_SDK_TRACING"] = tracing
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(name=name)], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_cold_import_loads_no_xray_sdk_unless_sdk_tracing_is_on(name, tmp_path):
    # Given a fresh interpreter and no XRAY_SDK_TRACING (the template's default is "false")
    # When the function's module is imported
    # Then the X-Ray SDK is not loaded
    assert _import_in_fresh_process(name, None, tmp_path)["xray"] is False
    assert _import_in_fresh_process(name, "false", tmp_path)["xray"] is False


def test_with_sdk_tracing_on_the_function_loads_the_tracer(tmp_path):
    assert _import_in_fresh_process("worker", "true", tmp_path) == {"xray": True}


def test_with_sdk_tracing_on_traced_wraps_the_handler_and_still_answers(monkeypatch):
    monkeypatch.setenv("XRAY_SDK_TRACING", "true")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")

    def handler(event, context):
        return {"seen": event["id"]}

    wrapped = traced(handler)
    assert wrapped is not handler
    assert wrapped({"id": 7}, None) == {"seen": 7}


def test_traced_returns_the_handler_itself_when_sdk_tracing_is_off(monkeypatch):
    monkeypatch.delenv("XRAY_SDK_TRACING", raising=False)

    def handler(event, context):
        return event

    assert traced(handler) is handler


def test_metrics_counted_from_the_worker_lanes_at_once_lose_no_value():
    # Given four threads (the worker's lanes) that count the same metric at the same moment,
    # with the interpreter switching threads as often as it can
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    counted = []
    try:
        for _ in range(100):
            metrics.clear_metrics()
            start = threading.Barrier(4)

            def count(start: threading.Barrier = start) -> None:
                start.wait()
                for _ in range(20):
                    metrics.add_metric(name="UsersFailed", unit="Count", value=1)

            threads = [threading.Thread(target=count) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            counted.append(len(metrics.provider.metric_set["UsersFailed"]["Value"]))
    finally:
        sys.setswitchinterval(interval)
        metrics.clear_metrics()
    # Then every value is kept (Powertools' add_metric reads, extends and stores back its entry)
    assert counted == [80] * 100

"""A bound on hostile input, measured inside a test: what a call returned or raised and the CPU
time it spent, run in a daemon thread so that a call that never ends fails its test instead of
stalling the suite (the thread is left behind).

The bound is on the calling thread's CPU time, not the wall clock: other processes on a loaded
machine (CI's two cores) stretch the wall clock, never the work a call does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

BOUND_SECONDS = 1.0  # a hostile-input bound, not a benchmark: these calls took seconds, or for ever


def finishing(call: Callable[[], Any], seconds: float = BOUND_SECONDS) -> tuple[Any, BaseException | None, float]:
    """(returned, raised, CPU seconds) of `call`; fails the test when it spends `seconds` or more."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        began = time.thread_time()
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed back to the test
            outcome["error"] = err
        outcome["seconds"] = time.thread_time() - began

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(max(seconds * 10, 10.0))
    assert "seconds" in outcome, f"still running after {max(seconds * 10, 10.0):.0f} s"
    assert outcome["seconds"] < seconds, f"took {outcome['seconds']:.2f} s of CPU, over the bound of {seconds} s"
    return outcome.get("value"), outcome.get("error"), outcome["seconds"]

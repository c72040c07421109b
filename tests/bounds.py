"""A bound on hostile input, measured inside a test: what a call returned or raised and how long
it took, run in a daemon thread so that a call that never ends fails its test instead of
stalling the suite (the thread is left behind)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

BOUND_SECONDS = 1.0  # a hostile-input bound, not a benchmark: these calls took seconds, or for ever


def finishing(call: Callable[[], Any], seconds: float = BOUND_SECONDS) -> tuple[Any, BaseException | None, float]:
    """(returned, raised, seconds) of `call`; fails the test when it runs `seconds` or longer."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        began = time.perf_counter()
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed back to the test
            outcome["error"] = err
        outcome["seconds"] = time.perf_counter() - began

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(max(seconds * 5, 5.0))
    assert "seconds" in outcome, f"still running after {max(seconds * 5, 5.0):.0f} s"
    assert outcome["seconds"] < seconds, f"took {outcome['seconds']:.2f} s, over the bound of {seconds} s"
    return outcome.get("value"), outcome.get("error"), outcome["seconds"]

"""The wall-clock deadline that outbound HTTP calls must end by (a scope; standard library only).

The handlers open a scope for the whole invocation (the time Lambda gives it, minus the margin
kept for answering), each model or embeddings call opens one for itself (its configured timeout,
or less when the caller has less time); scopes nest and the earliest end wins. The clients built
by `adapters/openai_calls.py` bound every socket operation by it, so a call ends at the scope's
end whatever the endpoint does (see there for how). This module imports nothing heavy: the API
and the worker open their scope before knowing whether any call will be made.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# The monotonic time by which every HTTP call in scope must have ended (None: no deadline).
_ENDS: ContextVar[float | None] = ContextVar("user_memory_http_deadline", default=None)


def time_left() -> float | None:
    """Seconds left before the innermost deadline in scope (negative once passed), or None."""
    ends = _ENDS.get()
    return None if ends is None else ends - time.monotonic()


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """Every HTTP call made in the block (through a client from openai_calls) ends within
    `seconds` from now; None or infinity adds no bound. An enclosing earlier deadline still holds."""
    ends = _ENDS.get()
    if seconds is not None and not math.isinf(seconds):
        mine = time.monotonic() + seconds
        ends = mine if ends is None else min(ends, mine)
    token = _ENDS.set(ends)
    try:
        yield
    finally:
        _ENDS.reset(token)


def invocation_left(context: Any, margin_s: float) -> float | None:
    """Seconds a Lambda invocation has left minus `margin_s`, from its context (None: the context
    has no clock, as in some local callers)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return remaining() / 1000 - margin_s

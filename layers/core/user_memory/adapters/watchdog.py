"""A run's deadline kept by a thread of its own.

Lambda ends an invocation at its timeout without running any more of its code, and
`statement_timeout` bounds each statement, not the run: a migration that waits on a lock after a
slow one would still be waiting when the invocation is killed, and nobody would answer
CloudFormation. So a timer, not the code that may be stuck, does what must happen before the end:
at the deadline it cancels whatever the watched connections are running (again and again, so a
statement started between two cancels does not escape), and if the run has still not finished
after a grace period it says the last word itself (the custom resource's FAILED answer).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from types import TracebackType

import psycopg

# How often the cancel is repeated once the deadline has passed.
CANCEL_EVERY_SECONDS = 0.2
# A cancel request is a new connection to the server: bounded too.
CANCEL_SECONDS = 2.0


class Watchdog:
    """Used as a context manager around a run; `seconds=None` watches nothing (no deadline)."""

    def __init__(
        self, seconds: float | None, *, grace: float = 0.0, last_word: Callable[[], None] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._ends = None if seconds is None else time.monotonic() + seconds
        self._grace = grace
        self._last_word = last_word
        self._done = threading.Event()
        self._expired = threading.Event()
        self._watched: list[psycopg.Connection] = []
        self._thread: threading.Thread | None = None

    @property
    def expired(self) -> bool:
        """Whether the deadline passed before the run ended (its statements were cancelled)."""
        return self._expired.is_set()

    def reset(self, seconds: float, *, grace: float) -> None:
        """Move the deadline to `seconds` from now (once the run knows its own margin)."""
        with self._lock:
            if self._ends is not None and not self._expired.is_set():
                self._ends = time.monotonic() + seconds
                self._grace = grace

    def watch(self, conn: psycopg.Connection) -> None:
        """Cancel `conn`'s running statement from the deadline on, until the run ends."""
        with self._lock:
            self._watched.append(conn)

    def __enter__(self) -> Watchdog:
        if self._ends is not None:
            self._thread = threading.Thread(target=self._keep, name="watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _keep(self) -> None:
        while True:
            with self._lock:
                left = (self._ends or 0.0) - time.monotonic()
            if left <= 0:
                break
            if self._done.wait(min(left, 0.5)):
                return
        self._expired.set()
        with self._lock:
            last_word_at = time.monotonic() + self._grace
        # Until the run ends: a statement started after a cancel is cancelled by the next one.
        while not self._done.is_set():
            self._cancel_all()
            if self._last_word is not None and time.monotonic() >= last_word_at:
                last_word, self._last_word = self._last_word, None
                last_word()
                continue
            self._done.wait(CANCEL_EVERY_SECONDS)

    def _cancel_all(self) -> None:
        with self._lock:
            watched = list(self._watched)
        for conn in watched:
            if conn.closed:
                continue
            # The server may be gone: the run then fails on its own.
            with contextlib.suppress(psycopg.Error, OSError):
                conn.cancel_safe(timeout=CANCEL_SECONDS)

"""Where the service's JSON log lines go when the handlers and jobs run on this machine."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


@contextmanager
def service_logs_to(stream: TextIO) -> Iterator[None]:
    """The service's JSON log lines go to `stream` for the block (a command's stdout carries its
    result, so the CLI passes stderr), at POWERTOOLS_LOG_LEVEL (default WARNING) whatever the level
    was when their Logger was made; as they were afterwards."""
    from user_memory.observability import logger

    service = logging.getLogger(logger.name)
    level = os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING").strip().upper()
    # Only Powertools' own stdout handler; the stream is swapped without setStream(), which
    # flushes the old stream first, and that one may be closed already (an ended capture).
    handlers = [h for h in service.handlers if type(h) is logging.StreamHandler]
    previous = ([h.stream for h in handlers], service.level)
    for h in handlers:
        h.stream = stream
    if level in logging.getLevelNamesMapping():
        service.setLevel(level)
    try:
        yield
    finally:
        for h, old in zip(handlers, previous[0], strict=True):
            h.stream = old
        service.setLevel(previous[1])

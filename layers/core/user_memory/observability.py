"""Logger, Metrics and (opt-in) the X-Ray SDK's tracer, built once for the whole service.

Logs carry ids, counts, sizes and timings only, never document or activity content.

Tracing: the template turns on Lambda's active tracing, so every invocation has its X-Ray
segments (initialization, invocation, overhead) without any SDK in the function. Powertools'
Tracer adds a handler subsegment, a cold-start annotation and patched AWS calls, but importing it
costs every cold start about 0.2 s (aws_xray_sdk and its botocore session) even when disabled, so
it is built only where `XRAY_SDK_TRACING` is true (template parameter `XRaySdkTracing`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit

SERVICE = "user-memory"


class _Metrics(Metrics):
    """Powertools' Metrics, safe to count from the worker's threads: its add_metric reads, extends
    and stores back a shared entry (and publishes at 100 values), so two threads at once could
    lose a value. Logging needs no such lock (the logging module's handlers hold their own)."""

    _lock = threading.Lock()

    def add_metric(
        self, name: str, unit: MetricUnit | str, value: float, resolution: MetricResolution | int = 60
    ) -> None:
        with self._lock:
            super().add_metric(name=name, unit=unit, value=value, resolution=resolution)


logger = Logger(service=SERVICE)
metrics = _Metrics(namespace="UserMemory", service=SERVICE)

Handler = TypeVar("Handler", bound=Callable[..., Any])


def traced(handler: Handler) -> Handler:
    """The handler, wrapped by Powertools' Tracer when XRAY_SDK_TRACING is true; unchanged otherwise.

    Raises ConfigError (at import, so the function fails to initialize) for a value that is not a boolean.
    """
    from user_memory.config import TracingSettings

    if not TracingSettings.from_env().xray_sdk_tracing:
        return handler
    from aws_lambda_powertools import Tracer  # imported only when tracing is wanted

    return Tracer(service=SERVICE).capture_lambda_handler(handler)  # type: ignore[return-value]

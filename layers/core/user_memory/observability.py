"""Logger, Metrics and (opt-in) the X-Ray SDK's tracer, built once for the whole service.

Logs carry ids, counts, sizes and timings only, never document or activity content.

Tracing: the template turns on Lambda's active tracing, so every invocation has its X-Ray
segments (initialization, invocation, overhead) without any SDK in the function. Powertools'
Tracer adds a handler subsegment, a cold-start annotation and patched AWS calls, but importing it
costs every cold start about 0.2 s (aws_xray_sdk and its botocore session) even when disabled, so
it is built only where `XRAY_SDK_TRACING` is true (template parameter `XRaySdkTracing`).

Traces carry no content either: a handler's response is a memory, an export, a key-value entry,
and an exception's message can quote a value (pydantic's input_value, a driver's DETAIL line), so
the Tracer never records responses or errors as metadata, and what is sent to the X-Ray daemon
keeps of an exception only its type and stack (file, line, function), never its message.
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

    tracer = Tracer(service=SERVICE)
    _send_without_content()
    wrapped = tracer.capture_lambda_handler(handler, capture_response=False, capture_error=False)
    return wrapped  # type: ignore[return-value]


def _send_without_content() -> None:
    """Every segment leaves through an emitter that drops metadata and exception messages first.

    The capture flags cover the handler's subsegment only; the SDK's own context managers and its
    patches (botocore, httpx, psycopg's cursors) record `str(exception)` of whatever they saw.
    """
    from aws_xray_sdk.core import xray_recorder
    from aws_xray_sdk.core.emitters.udp_emitter import UDPEmitter

    class ContentFreeEmitter(UDPEmitter):  # type: ignore[misc]
        strips_content = True

        def send_entity(self, entity: Any) -> None:
            _strip_content(entity)
            super().send_entity(entity)

    if not getattr(xray_recorder.emitter, "strips_content", False):
        xray_recorder.configure(emitter=ContentFreeEmitter())  # the daemon's address: AWS_XRAY_DAEMON_ADDRESS


def _strip_content(entity: Any) -> None:
    """Metadata and exception messages off a segment and its subsegments, in place."""
    entity.metadata = {}
    cause = getattr(entity, "cause", None)
    if isinstance(cause, dict):
        for throwable in cause.get("exceptions", ()):
            if hasattr(throwable, "message"):
                del throwable.message
    for child in getattr(entity, "subsegments", ()):
        _strip_content(child)

"""What the schemathesis modules share: the checks every answer must pass, the committed document
as a schema, bounded and derandomized examples, and the service's log turned down while thousands
of generated requests are refused. Their servers run on helpers.SERVER_SECRET, the secret of the
`user_token` and `operator_token` fixtures (conftest.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from user_memory.http.openapi import openapi_text

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def committed_schema() -> Any:
    """The committed OpenAPI document, as schemathesis reads it."""
    return schemathesis.openapi.from_dict(json.loads(openapi_text()))


def examples(n: int) -> Any:
    """At most `n` examples an operation, the same ones every run, with no deadline."""
    return settings(
        max_examples=n, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )


@contextmanager
def service_log_at(level: int) -> Iterator[None]:
    """The service's logger at `level` for the block."""
    log = logging.getLogger("user-memory")
    previous = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(previous)

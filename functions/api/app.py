"""API Lambda: API Gateway HTTP API (JWT authorizer) -> the memory API's resolver."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import ApiSettings
from user_memory.http.app import MemoryApi, create_api, unavailable
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import build_api

_api: MemoryApi | None = None


def _cold_start_api() -> MemoryApi:
    """Built on the first invocation and reused while the execution environment lives."""
    global _api
    if _api is None:
        settings = ApiSettings.from_env()
        _api = create_api(build_api(settings), settings)
    return _api


@logger.inject_lambda_context(log_event=False, correlation_id_path="requestContext.requestId")
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext, api: MemoryApi | None = None) -> dict[str, Any]:
    """`api` is for callers that compose their own (tests, `user-memory serve`); Lambda passes none."""
    try:
        api = api or _cold_start_api()
    except Exception as err:  # no services (config, database): a 503 problem, logged
        return unavailable(err, event)
    return api.resolve(event, context)

"""Migrate Lambda: the migrations (and the functions' logins) run by the stack inside the VPC, as
the database's owner: invoked directly ({"action": "migrate" | "create-logins" | "status"}) or as
the stack's custom resource on every deploy (see user_memory.jobs.migrate).

The library (the layer) is imported inside the handler, not at module level: when it cannot be
imported (a broken or mismatched layer), a custom resource request is still answered FAILED here,
with the standard library alone; otherwise CloudFormation would wait for its ServiceTimeout and the
import error would fail every retry the same way.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The repository's migrations/ (a symlink here, copied whole by `sam build`): the layer has none.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The PUT of the answer when the library is missing (seconds).
RESPONSE_SECONDS = 10
# The names template.yaml gives Powertools (POWERTOOLS_METRICS_NAMESPACE, POWERTOOLS_SERVICE_NAME):
# the failure is counted under the same metric as the library counts (MigrateFailed).
NAMESPACE, SERVICE = "UserMemory", "user-memory"

_library_handler: Callable[..., dict[str, Any]] | None = None


def handler(event: Any, context: Any, services: Any = None) -> dict[str, Any]:
    """`services` is for callers that compose their own (tests); Lambda passes none."""
    try:
        run = _library()
    except Exception as err:
        answer_without_the_library(event, context, err)
        raise
    return run(event, context, services)


def _library() -> Callable[..., dict[str, Any]]:
    """The handler over the library, built on the first invocation."""
    global _library_handler
    if _library_handler is None:
        from user_memory.config import MigrateSettings
        from user_memory.jobs.migrate import handle_event
        from user_memory.observability import logger, metrics, traced
        from user_memory.runtime import MigrateServices, build_migrate

        def services_of(given: MigrateServices | None) -> Callable[[], MigrateServices]:
            # Built for each invocation: a deploy's secrets (a rotated password) are read anew.
            if given:
                return lambda: given
            return lambda: build_migrate(MigrateSettings.from_env(), migrations=MIGRATIONS)

        @logger.inject_lambda_context(log_event=False)
        @traced
        @metrics.log_metrics
        def run(event: Any, context: Any, services: MigrateServices | None = None) -> dict[str, Any]:
            return handle_event(event, services_of(services), context)

        _library_handler = run
    return _library_handler


def answer_without_the_library(event: Any, context: Any, err: BaseException) -> None:
    """Log and count the failure as JSON lines (CloudWatch's embedded metric format), and answer a
    custom resource request FAILED: its ids echoed, the error's type only (never its message)."""
    missing = f" ({err.name})" if isinstance(err, ImportError) and err.name else ""
    reason = f"the migrate function could not load its library: {type(err).__name__}{missing}"
    stream = getattr(context, "log_stream_name", None)
    if stream:
        reason += f" (log stream {stream})"
    line = {"level": "ERROR", "message": "migrate failed", "service": SERVICE, "action": "import"}
    line |= {"error_type": type(err).__name__, "reason": reason}
    line["function_request_id"] = getattr(context, "aws_request_id", None)
    print(json.dumps(line))
    counted = [{"Name": "MigrateFailed", "Unit": "Count"}]
    metric = {"Namespace": NAMESPACE, "Dimensions": [["service"]], "Metrics": counted}
    print(json.dumps({"_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [metric]}, "service": SERVICE,
                      "MigrateFailed": 1}))  # fmt: skip
    if not isinstance(event, dict):
        return
    url = event.get("ResponseURL")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        return

    def text(key: str) -> str:
        value = event.get(key)
        return value if isinstance(value, str) else ""

    stack_id, logical_id = text("StackId"), text("LogicalResourceId")
    stack_name = stack_id.split("/")[1] if stack_id.count("/") >= 2 else stack_id
    document = json.dumps({
        "Status": "FAILED", "Reason": reason[:1000],
        "PhysicalResourceId": text("PhysicalResourceId") or f"{stack_name}-{logical_id or 'Migrations'}"[:255],
        "StackId": stack_id, "RequestId": text("RequestId"), "LogicalResourceId": logical_id,
        "NoEcho": False, "Data": {},
    }).encode()  # fmt: skip
    # An empty content type: the URL is signed without one (as AWS's cfn-response sends it).
    put = urllib.request.Request(url, data=document, method="PUT", headers={"content-type": ""})
    try:
        with urllib.request.urlopen(put, timeout=RESPONSE_SECONDS) as response:  # noqa: S310 (CloudFormation's URL)
            response.read()
    except OSError as failed:  # the import error is what the invocation fails with
        print(json.dumps({"level": "ERROR", "message": "migrate failed", "service": SERVICE,
                          "action": "custom resource response", "error_type": type(failed).__name__}))  # fmt: skip

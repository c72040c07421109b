"""Migrate Lambda: the migrations (and the functions' logins) run by the stack inside the VPC, as
the database's owner: invoked directly ({"action": "migrate" | "create-logins" | "status"}) or as
the stack's custom resource on every deploy (see user_memory.jobs.migrate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from user_memory.config import MigrateSettings
from user_memory.jobs.migrate import handle, parse_event
from user_memory.observability import logger, metrics, traced
from user_memory.runtime import MigrateServices, build_migrate

# The repository's migrations/ (a symlink here, copied whole by `sam build`): the layer has none.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _services() -> MigrateServices:
    """Built for each invocation: a deploy's secrets (a rotated password) are read anew."""
    return build_migrate(MigrateSettings.from_env(), migrations=MIGRATIONS)


@logger.inject_lambda_context(log_event=False)
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext, services: MigrateServices | None = None) -> dict[str, Any]:
    """`services` is for callers that compose their own (tests); Lambda passes none."""
    return handle(parse_event(event), (lambda: services) if services else _services, context)

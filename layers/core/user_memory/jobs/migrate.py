"""The stack's own migration runner: the migrate function runs inside the VPC, as the database's
owner (the owner's DSN secret), where a laptop cannot reach the RDS Proxy.

Two ways in:
- invoked directly with {"action": "migrate" | "create-logins" | "status"} (`aws lambda invoke`):
  the result is returned, a failure raised (the invocation's error says why in one line);
- as the stack's custom resource (Custom::Migrations): Create and Update run the migrations, then
  create or update the functions' logins from their secrets; Delete changes nothing (a stack is
  never deleted with its data by this resource). The answer, SUCCESS or FAILED with a one-line
  reason, always goes to the request's pre-signed URL, so CloudFormation never waits for one.

Every migration applies inside its own transaction (adapters/migrations.py): a failing one leaves
nothing of itself, and the ones before it stay applied and recorded. Every statement ends before
the invocation's deadline minus a margin (statement_timeout), so a migration that runs long or a
runner that waits on another's lock fails with an answer instead of being killed without one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from user_memory.adapters.custom_resource import response_document, send_response
from user_memory.adapters.http_deadline import invocation_left
from user_memory.adapters.migrations import applied_migrations, create_login, load_migrations, migrate, vectors_enabled
from user_memory.adapters.postgres import checked_conninfo, translate
from user_memory.errors import ConfigError, InvalidMessage, describe_failure, describe_validation_error
from user_memory.observability import logger, metrics
from user_memory.runtime import MigrateServices

Action = Literal["migrate", "create-logins", "status"]
# Seconds a statement may take when the caller's context has no clock (local callers).
UNBOUNDED_SECONDS = 600.0
# The PUT to CloudFormation's URL: a small document to S3.
RESPONSE_SECONDS = 10.0
CONNECT_SECONDS = 10


class Invocation(BaseModel):
    """A direct invocation: `aws lambda invoke --payload '{"action": "migrate"}'`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    action: Action


class CustomResourceRequest(BaseModel):
    """What CloudFormation sends a custom resource's function (the fields used here)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    request_type: Literal["Create", "Update", "Delete"] = Field(alias="RequestType")
    response_url: str = Field(alias="ResponseURL", pattern=r"^https?://\S+$")
    stack_id: str = Field(alias="StackId", min_length=1)
    request_id: str = Field(alias="RequestId", min_length=1)
    logical_resource_id: str = Field(alias="LogicalResourceId", min_length=1)
    physical_resource_id: str | None = Field(default=None, alias="PhysicalResourceId")
    # Read inside the answered block: a template's mistake here must become a FAILED answer.
    resource_properties: dict[str, Any] = Field(default_factory=dict, alias="ResourceProperties")

    @property
    def physical_id(self) -> str:
        """The same id for the stack's whole life: an Update never replaces the resource."""
        if self.physical_resource_id:
            return self.physical_resource_id
        stack_name = self.stack_id.split("/")[1] if self.stack_id.count("/") >= 2 else self.stack_id
        return f"{stack_name}-{self.logical_resource_id}"[:255]


def parse_event(event: Any) -> Invocation | CustomResourceRequest:
    """The request an event is; InvalidMessage naming what is wrong."""
    try:
        if isinstance(event, dict) and "RequestType" in event:
            return CustomResourceRequest.model_validate(event)
        return Invocation.model_validate(event)
    except ValidationError as err:
        # One line, bounded: the names it quotes are the event's keys, whatever they hold.
        why = " ".join(describe_validation_error(err).split())[:500]
        raise InvalidMessage(
            'not a migrate request ({"action": "migrate" | "create-logins" | "status"}) nor a '
            f"CloudFormation custom resource request: {why}"
        ) from None


def handle(
    request: Invocation | CustomResourceRequest, services: Callable[[], MigrateServices], context: Any
) -> dict[str, Any]:
    """Run one request. `services` is called only when the request needs the database."""
    if isinstance(request, CustomResourceRequest):
        return answer_custom_resource(request, services, context)
    try:
        built = services()
        result = run_action(request.action, built, _statement_seconds(built, context))
    except Exception as err:  # every failure is logged and counted, then the invocation fails
        _report_failure(request.action, err)
        raise
    return result


def run_action(action: Action, services: MigrateServices, seconds: float) -> dict[str, Any]:
    """One action as the owner, every statement ending within `seconds`."""
    with owner_connection(services.dsn, seconds) as conn:
        if action == "status":
            return status(conn, services)
        if action == "migrate":
            return run_migrations(conn, services)
        return create_logins(conn, services)


def status(conn: psycopg.Connection, services: MigrateServices) -> dict[str, Any]:
    """What is applied, what this release would apply, and what is applied but not in this release."""
    files = [m.name for m in load_migrations(services.migrations)]
    recorded = _translated(applied_migrations, conn)
    return {
        "applied": len(recorded),
        "last_applied": recorded[-1] if recorded else None,
        "pending": [name for name in files if name not in recorded],
        # A release older than the database (after a code rollback): these stay applied.
        "not_in_this_release": [name for name in recorded if name not in files],
    }


def run_migrations(conn: psycopg.Connection, services: MigrateServices) -> dict[str, Any]:
    """Apply the pending migrations of this release."""
    applied = _translated(migrate, conn, services.migrations)
    vectors = _translated(vectors_enabled, conn)
    logger.info("migrations applied", applied=len(applied), names=applied, vectors=vectors)
    metrics.add_metric(name="MigrationsApplied", unit=MetricUnit.Count, value=len(applied))
    return {"applied": applied, "vectors": vectors}


def create_logins(conn: psycopg.Connection, services: MigrateServices) -> dict[str, Any]:
    """Create (or set the password of) each configured login, in its group; ConfigError without any."""
    if not services.login_secrets:
        raise ConfigError(
            "no login secrets: set ApiLoginSecretArn and ServiceLoginSecretArn (the database stack's outputs)"
        )
    done: dict[str, str] = {}
    for group, secret_name in sorted(services.login_secrets.items()):
        login = services.read_login(secret_name)
        created = _translated(create_login, conn, login.username, login.password.get_secret_value(), group)
        done[group] = f"{login.username} {'created' if created else 'updated'}"
    logger.info("logins created", logins=done)
    return {"logins": done}


def answer_custom_resource(
    request: CustomResourceRequest, services: Callable[[], MigrateServices], context: Any
) -> dict[str, Any]:
    """Do what the request asks and answer CloudFormation, SUCCESS or FAILED; return the answer."""
    status_: Literal["SUCCESS", "FAILED"] = "SUCCESS"
    data: dict[str, str] = {}
    try:
        reason, data = _custom_resource_work(request, services, context)
    except Exception as err:  # whatever failed, CloudFormation must get its answer (or wait an hour)
        error, why = _report_failure(f"custom resource {request.request_type}", err)
        status_, reason = "FAILED", f"{error}: {why}"
        stream = getattr(context, "log_stream_name", None)
        if stream:
            reason += f" (log stream {stream})"
    document = response_document(request, status=status_, reason=reason, physical_id=request.physical_id, data=data)
    try:
        send_response(request.response_url, document, seconds=RESPONSE_SECONDS)
    except Exception as err:  # raised: the invocation fails and Lambda retries it, which answers again
        _report_failure("custom resource response", err)
        raise
    logger.info("custom resource answered", request_type=request.request_type, status=status_)
    return {"Status": status_, "Reason": reason, "Data": data}


def _custom_resource_work(
    request: CustomResourceRequest, services: Callable[[], MigrateServices], context: Any
) -> tuple[str, dict[str, str]]:
    if request.request_type == "Delete":
        return "nothing to delete: the schema and its data stay with the database", {}
    if str(request.resource_properties.get("Run", "true")).lower() == "false":
        return "skipped: MigrateOnDeploy is false", {"AppliedCount": "0"}
    built = services()
    with owner_connection(built.dsn, _statement_seconds(built, context)) as conn:
        applied = run_migrations(conn, built)["applied"]
        logins = create_logins(conn, built)["logins"] if built.login_secrets else {}
    done = f"applied {len(applied)} migration(s)" + (f" ({', '.join(applied)})" if applied else ", up to date")
    if logins:
        done += "; logins: " + ", ".join(f"{group} {what}" for group, what in logins.items())
    return done, {"AppliedCount": str(len(applied)), "Applied": ",".join(applied)[:1000]}


@contextmanager
def owner_connection(dsn: str, seconds: float) -> Iterator[psycopg.Connection]:
    """An autocommit connection as the DSN's user whose every statement ends within `seconds`."""
    if seconds <= 0:
        raise ConfigError("no time left for the migrations before the function's deadline")
    try:
        conn = psycopg.connect(checked_conninfo(dsn), autocommit=True, connect_timeout=CONNECT_SECONDS)
    except psycopg.Error as err:
        raise translate(err) from err
    try:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(seconds * 1000)}ms",))
        yield conn
    finally:
        conn.close()


def _statement_seconds(services: MigrateServices, context: Any) -> float:
    left = invocation_left(context, services.settings.deadline_margin_ms / 1000)
    return UNBOUNDED_SECONDS if left is None else left


def _translated(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except psycopg.Error as err:
        raise translate(err) from err


def _report_failure(what: str, err: BaseException) -> tuple[str, str]:
    """Log and count a failure; its error type and a one-line reason (never a password or a DSN)."""
    error, reason = describe_failure(err)
    reason = reason.splitlines()[0] if reason else "no reason given"
    logger.error("migrate failed", action=what, error_type=error, reason=reason)
    metrics.add_metric(name="MigrateFailed", unit=MetricUnit.Count, value=1)
    return error, reason

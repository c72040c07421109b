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
nothing of itself, and the ones before it stay applied and recorded. The whole run ends before the
invocation's deadline minus a margin: a watchdog thread (adapters/watchdog.py) cancels the running
statement then, and answers FAILED itself if the run still has not (statement_timeout bounds only
each statement). So a migration that runs long or a runner that waits on another's lock fails with
an answer instead of being killed without one. A custom resource request too malformed to parse is
answered FAILED too, whenever it names a response URL; the handler (functions/migrate/app.py)
answers one even when this library cannot be imported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from user_memory.adapters.custom_resource import response_document, send_response
from user_memory.adapters.http_deadline import invocation_left
from user_memory.adapters.migrations import applied_migrations, create_login, load_migrations, migrate, vectors_enabled
from user_memory.adapters.postgres import checked_conninfo, translate
from user_memory.adapters.watchdog import Watchdog
from user_memory.config import MigrateSettings
from user_memory.errors import (
    ConfigError,
    InvalidMessage,
    MigrationTimedOut,
    describe_failure,
    describe_validation_error,
)
from user_memory.observability import logger, metrics
from user_memory.runtime import MigrateServices

Action = Literal["migrate", "create-logins", "status"]
# Seconds a statement may take when the caller's context has no clock (local callers).
UNBOUNDED_SECONDS = 600.0
# The PUT to CloudFormation's URL: a small document to S3.
RESPONSE_SECONDS = 10.0
CONNECT_SECONDS = 10
# The margin kept before the deadline until the settings (and their own margin) are read.
DEFAULT_MARGIN_SECONDS = MigrateSettings.model_fields["deadline_margin_ms"].default / 1000


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
        return physical_id(self.stack_id, self.logical_resource_id, self.physical_resource_id)


def physical_id(stack_id: str, logical_resource_id: str, given: str | None) -> str:
    """The request's own physical id, or one of the stack's and the resource's names."""
    if given:
        return given
    stack_name = stack_id.split("/")[1] if stack_id.count("/") >= 2 else stack_id
    return f"{stack_name}-{logical_resource_id}"[:255]


@dataclass(frozen=True)
class UnparsedRequest:
    """The ids a malformed custom resource request does carry (its string fields, else empty)."""

    response_url: str
    stack_id: str
    request_id: str
    logical_resource_id: str
    physical_id: str

    @classmethod
    def of(cls, event: Any) -> UnparsedRequest | None:
        """None when the event names no response URL: nobody is waiting for an answer."""
        if not isinstance(event, dict):
            return None
        field = {key: value if isinstance(value, str) else "" for key, value in event.items()}
        url = field.get("ResponseURL", "")
        if not url.startswith(("https://", "http://")):
            return None
        stack, logical = field.get("StackId", ""), field.get("LogicalResourceId", "")
        given = field.get("PhysicalResourceId")
        return cls(url, stack, field.get("RequestId", ""), logical, physical_id(stack, logical or "Migrations", given))


def parse_event(event: Any) -> Invocation | CustomResourceRequest:
    """The request an event is; InvalidMessage naming what is wrong."""
    try:
        # A response URL is CloudFormation's too: a request missing its type is still one.
        if isinstance(event, dict) and ("RequestType" in event or "ResponseURL" in event):
            return CustomResourceRequest.model_validate(event)
        return Invocation.model_validate(event)
    except ValidationError as err:
        # One line, bounded: the names it quotes are the event's keys, whatever they hold.
        why = " ".join(describe_validation_error(err).split())[:500]
        raise InvalidMessage(
            'not a migrate request ({"action": "migrate" | "create-logins" | "status"}) nor a '
            f"CloudFormation custom resource request: {why}"
        ) from None


def handle_event(event: Any, services: Callable[[], MigrateServices], context: Any) -> dict[str, Any]:
    """Parse one event and run it. A request that does not parse is refused (InvalidMessage), and
    answered FAILED first when it names a response URL: CloudFormation would wait otherwise."""
    try:
        request = parse_event(event)
    except InvalidMessage as err:
        error, why = _report_failure("parse", err)
        unparsed = UnparsedRequest.of(event)
        if unparsed is None:
            raise
        reason = f"{error}: {why}"
        document = response_document(
            unparsed, status="FAILED", reason=reason, physical_id=unparsed.physical_id, data={}
        )
        try:
            send_response(unparsed.response_url, document, seconds=RESPONSE_SECONDS)
        except Exception as failed:
            _report_failure("custom resource response", failed)
            raise
        logger.info("custom resource answered", request_type="unparsed", status="FAILED")
        return {"Status": "FAILED", "Reason": reason, "Data": {}}
    return handle(request, services, context)


def handle(
    request: Invocation | CustomResourceRequest, services: Callable[[], MigrateServices], context: Any
) -> dict[str, Any]:
    """Run one request. `services` is called only when the request needs the database."""
    if isinstance(request, CustomResourceRequest):
        return answer_custom_resource(request, services, context)
    with Watchdog(_run_seconds(context)[0]) as watchdog:
        try:
            built = services()
            seconds = _statement_seconds(built, context)
            watchdog.reset(seconds, grace=0.0)
            result = run_action(request.action, built, seconds, watchdog)
        except Exception as err:  # every failure is logged and counted, then the invocation fails
            timed_out = _timed_out(err) if watchdog.expired else None
            _report_failure(request.action, timed_out or err)
            if timed_out:
                raise timed_out from err
            raise
    return result


def run_action(
    action: Action, services: MigrateServices, seconds: float, watchdog: Watchdog | None = None
) -> dict[str, Any]:
    """One action as the owner, every statement ending within `seconds` (and cancelled by the
    watchdog once its deadline passes)."""
    with owner_connection(services.dsn, seconds, watchdog) as conn:
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


class _Answer:
    """The one answer to a request: the run's, or its watchdog's when the run is late; the first
    one sent is the answer, the other is not sent."""

    def __init__(self, request: CustomResourceRequest) -> None:
        self._request = request
        self._lock = threading.Lock()
        self.sent: dict[str, Any] | None = None

    def send(self, status: Literal["SUCCESS", "FAILED"], reason: str, data: dict[str, str]) -> bool:
        """Send unless an answer was sent already; CustomResourceResponseFailed when it cannot be."""
        request = self._request
        with self._lock:
            if self.sent is not None:
                return False
            document = response_document(
                request, status=status, reason=reason, physical_id=request.physical_id, data=data
            )
            send_response(request.response_url, document, seconds=RESPONSE_SECONDS)
            self.sent = {"Status": status, "Reason": reason, "Data": data}
        logger.info("custom resource answered", request_type=request.request_type, status=status)
        return True


def answer_custom_resource(
    request: CustomResourceRequest, services: Callable[[], MigrateServices], context: Any
) -> dict[str, Any]:
    """Do what the request asks and answer CloudFormation, SUCCESS or FAILED; return the answer."""
    answer = _Answer(request)
    stream = getattr(context, "log_stream_name", None)
    where = f" (log stream {stream})" if stream else ""

    def last_word() -> None:  # the watchdog's, when the run has not answered by its deadline
        error, why = _report_failure(f"custom resource {request.request_type}", _timed_out(None))
        try:
            answer.send("FAILED", f"{error}: {why}{where}", {})
        except Exception as err:
            _report_failure("custom resource response", err)

    status_: Literal["SUCCESS", "FAILED"] = "SUCCESS"
    data: dict[str, str] = {}
    seconds, margin = _run_seconds(context)
    with Watchdog(seconds, grace=margin / 3, last_word=last_word) as watchdog:
        try:
            reason, data = _custom_resource_work(request, services, context, watchdog)
        except Exception as err:  # whatever failed, CloudFormation must get its answer (or wait an hour)
            timed_out = _timed_out(err) if watchdog.expired else None
            error, why = _report_failure(f"custom resource {request.request_type}", timed_out or err)
            status_, reason, data = "FAILED", f"{error}: {why}{where}", {}
        try:
            answer.send(status_, reason, data)
        except Exception as err:  # raised: the invocation fails (MigrateErrorsAlarm); CloudFormation times out
            _report_failure("custom resource response", err)
            raise
    assert answer.sent is not None
    return answer.sent


def _custom_resource_work(
    request: CustomResourceRequest, services: Callable[[], MigrateServices], context: Any, watchdog: Watchdog
) -> tuple[str, dict[str, str]]:
    if request.request_type == "Delete":
        return "nothing to delete: the schema and its data stay with the database", {}
    if str(request.resource_properties.get("Run", "true")).lower() == "false":
        return "skipped: MigrateOnDeploy is false", {"AppliedCount": "0"}
    built = services()
    seconds = _statement_seconds(built, context)
    margin = built.settings.deadline_margin_ms / 1000
    watchdog.reset(seconds, grace=margin / 3)
    with owner_connection(built.dsn, seconds, watchdog) as conn:
        applied = run_migrations(conn, built)["applied"]
        logins = create_logins(conn, built)["logins"] if built.login_secrets else {}
    done = f"applied {len(applied)} migration(s)" + (f" ({', '.join(applied)})" if applied else ", up to date")
    if logins:
        done += "; logins: " + ", ".join(f"{group} {what}" for group, what in logins.items())
    return done, {"AppliedCount": str(len(applied)), "Applied": ",".join(applied)[:1000]}


@contextmanager
def owner_connection(dsn: str, seconds: float, watchdog: Watchdog | None = None) -> Iterator[psycopg.Connection]:
    """An autocommit connection as the DSN's user whose every statement ends within `seconds`,
    watched by `watchdog` (cancelled from its deadline on)."""
    if seconds <= 0 or (watchdog is not None and watchdog.expired):
        raise ConfigError("no time left for the migrations before the function's deadline")
    try:
        conn = psycopg.connect(
            checked_conninfo(dsn), autocommit=True, connect_timeout=max(1, min(CONNECT_SECONDS, int(seconds)))
        )
    except psycopg.Error as err:
        raise translate(err) from err
    if watchdog is not None:
        watchdog.watch(conn)
    try:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(seconds * 1000)}ms",))
        yield conn
    finally:
        conn.close()


def _statement_seconds(services: MigrateServices, context: Any) -> float:
    left = invocation_left(context, services.settings.deadline_margin_ms / 1000)
    return UNBOUNDED_SECONDS if left is None else left


def _run_seconds(context: Any) -> tuple[float | None, float]:
    """Seconds the run may take until its settings (and their margin) are read, and the margin
    kept meanwhile: the default one, or half of a shorter invocation (None: no clock, as in
    local callers)."""
    left = invocation_left(context, 0.0)
    margin = DEFAULT_MARGIN_SECONDS if left is None else min(DEFAULT_MARGIN_SECONDS, left / 2)
    return (None if left is None else left - margin), margin


def _timed_out(cause: BaseException | None) -> MigrationTimedOut:
    """The failure of a run its watchdog ended, naming where the run was when it did."""
    where = "it was still running"
    if cause is not None:
        error, why = describe_failure(cause)
        where = f"{error}: {why.splitlines()[0] if why else 'no reason given'}"
    return MigrationTimedOut(
        f"the run did not end DEADLINE_MARGIN_MS before the function's timeout, so its watchdog cancelled it ({where})"
    )


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

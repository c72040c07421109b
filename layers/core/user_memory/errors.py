"""Every failure a caller can act on has a name here, and one formatter for validation errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


class UserMemoryError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(UserMemoryError):
    """The environment does not describe a valid configuration."""


class InvalidUserId(UserMemoryError, ValueError):
    """A user id is not a UUID."""


class PatchError(UserMemoryError, ValueError):
    """A JSON Patch or JSON Pointer is invalid, or does not apply to the document."""


class InvalidPointer(PatchError):
    """A JSON Pointer is not one (RFC 6901): not empty and not starting with '/', or a bad '~' escape."""


class PatchOverBounds(PatchError):
    """A JSON Patch is over the appliers' bounds: too many operations, a JSON Pointer too long or too
    deep, or a value nested too deeply to measure (refused before the document is touched)."""


class InvalidDocument(UserMemoryError, ValueError):
    """A memory document does not validate against its schema.

    Raised for a summarizer's answer that cannot be read, it may say what that answer cost
    (`prompt_tokens`, `completion_tokens`), so the run still counts it.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0


class DocumentTooLarge(InvalidDocument):
    """A memory document exceeds the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"document is {size:,} bytes, over the limit of {limit:,} bytes")
        self.size = size
        self.limit = limit


class DocumentGrowsTooLarge(DocumentTooLarge):
    """A patch would take the working document past its ceiling (twice the size limit) while it
    applies: refused at that operation, before the value is copied or added."""

    def __init__(self, where: str, size: int, limit: int) -> None:
        InvalidDocument.__init__(
            self,
            f"{where}the patch would take the document over the limit of {limit:,} bytes while it applies "
            "(twice the document size limit)",
        )
        self.size = size
        self.limit = limit


class InvalidEdits(InvalidDocument):
    """A model's edits do not apply: paths that do not exist, values of the wrong shape, or a
    document that no longer validates after them. `errors` names each (edit number, op, path:
    why); like any InvalidDocument the text can quote document keys, so logs withhold it."""

    def __init__(
        self,
        errors: list[str],
        total: int | None = None,
        *,
        numbers: list[int] | None = None,
        readable: tuple[tuple[int, Any], ...] = (),
    ) -> None:
        counted = f"{len(errors)} of {total} edits are invalid" if total else f"{len(errors)} problem(s) with the edits"
        super().__init__(f"{counted}: " + join_problems(errors))
        self.errors = list(errors)
        self.total = total
        # Each error's edit number (its place in the answer), when each names one.
        self.numbers = list(numbers) if numbers is not None else None
        # The answer's edits that did parse, numbered, when others did not: still to be checked.
        self.readable = readable


class BudgetExceeded(InvalidDocument):
    """Data the request or a stored document holds needs more work than the service allows for it
    (an iteration budget): for example a recurrence rule with no occurrence in its first years."""


class VersionConflict(UserMemoryError):
    """The writer's expected_version is not the user's current version."""

    def __init__(self, user_id: object, expected: int, current: int) -> None:
        super().__init__(f"user {user_id}: expected version {expected}, current version is {current}")
        self.user_id = str(user_id)
        self.expected = expected
        self.current = current


class ActivityChanged(UserMemoryError):
    """Activity a summary covers was summarized by another run, or erased, before it was written."""


class UnknownVersion(UserMemoryError, LookupError):
    """The requested version does not exist for this user."""

    def __init__(self, user_id: object, version: object, head: int) -> None:
        versions = f"versions 0..{head} exist" if head > 0 else "only version 0 (the empty document) exists"
        super().__init__(f"user {user_id} has no version {version} ({versions})")
        self.user_id = str(user_id)
        self.version = version
        self.head = head


class UnknownUser(UserMemoryError, LookupError):
    """The user has no memory at all (no version was ever written)."""

    def __init__(self, user_id: object) -> None:
        super().__init__(f"user {user_id} has no memory yet")
        self.user_id = str(user_id)


class AccessDenied(UserMemoryError, PermissionError):
    """The database refused the operation for the current role or claims."""


class StorageUnavailable(UserMemoryError):
    """The database cannot be reached (connection refused, closed, timed out, pool exhausted)."""


class StorageError(UserMemoryError):
    """The database reported an error this library does not name more precisely."""


class PatchMismatch(StorageError):
    """The database applied a version's patch to the head and did not get the version's document
    (an end user's forged call, or the service's applier and the database's disagreeing)."""


class MigrationError(UserMemoryError):
    """A migration failed, or an applied migration file was changed afterwards."""


class CustomResourceResponseFailed(UserMemoryError):
    """The answer to a CloudFormation custom resource request could not be delivered."""


class MigrationTimedOut(MigrationError):
    """The migrations did not finish before the function's deadline; the running statement was cancelled."""


class SummarizerError(UserMemoryError):
    """The summarizer could not produce a valid next document.

    The message names what happened, never the output; `detail` holds the last validation error
    (it can quote document keys the model wrote), for the caller, not for logs.
    """

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class SummarizerUnsupported(SummarizerError):
    """The summarizer has no rules for the deployment's schema: it cannot reflect the activity, so it
    summarizes nothing (the activity stays unsummarized)."""


class SummarizerUnavailable(SummarizerError):
    """The LLM endpoint failed: connection error, timeout, rate limit or a server error."""


class BatchUnavailable(SummarizerUnavailable):
    """The Batch API could not be used: an upload, a batch's creation or retrieval, or a file's content."""


class EmbeddingsUnavailable(SummarizerUnavailable):
    """The embeddings endpoint failed, or answered vectors that cannot be stored."""


class DeadlineReached(UserMemoryError):
    """Too little time is left in this invocation to finish the work safely; it is left for a retry."""


class UsersFailed(UserMemoryError):
    """Some users of a multi-user message failed; the others were written (a retry skips them)."""

    def __init__(self, failures: dict[str, str]) -> None:
        first = next(iter(failures.items()))
        super().__init__(f"{len(failures)} user(s) failed, first {first[0]}: {first[1]}")
        self.failures = failures


class ConversationsFailed(UserMemoryError):
    """Conversations of a GENERATE_MEMORY_BATCH failed and could not be handed on (re-sent) for a
    retry, or have used their attempts: the message fails, and SQS retries it (then its DLQ)."""

    def __init__(self, failures: dict[str, str], *, why: str) -> None:
        first = next(iter(failures.items()))
        super().__init__(f"{len(failures)} conversation(s) failed ({why}), first {first[0]}: {first[1]}")
        self.failures = failures


class UnknownConversation(UserMemoryError, LookupError):
    """A GENERATE_MEMORY_BATCH names a conversation its user does not have (never recorded, or erased)."""


class InvalidMessage(UserMemoryError, ValueError):
    """A queue message does not match any known message type."""


class MessageTooLarge(InvalidMessage):
    """A queue message body exceeds the documented size limit."""


class InvalidActivity(UserMemoryError, ValueError):
    """An activity breaks a rule of its kind: a forget request that names no part (payload `part_id`)."""


class InvalidTime(UserMemoryError, ValueError):
    """A time the service cannot store and read back: not RFC 3339, without an offset, or outside 1900-2999 UTC."""


class InvalidEvent(UserMemoryError, ValueError):
    """A fan-out event is neither a scheduled event nor a valid manual request."""


class SendFailed(UserMemoryError):
    """Some messages could not be sent to the queue after retries."""


class QueueUnavailable(UserMemoryError):
    """The worker queue's attributes could not be read."""


class FanoutRefused(UserMemoryError):
    """The worker queue's backlog and the day's users would take longer to drain than the queue
    keeps messages (less a margin): the rest of the day is not queued."""

    def __init__(self, message: str, *, run_key: str, waiting_messages: int, users_queued: int, drain_days: float):
        super().__init__(message)
        self.run_key = run_key
        self.waiting_messages = waiting_messages
        self.users_queued = users_queued
        self.drain_days = drain_days


class PlanDoesNotFit(UserMemoryError):
    """No parameters the template allows summarize the users a day inside the window asked for."""


# The most a list of problems takes in a message (a model's retry feedback, a problem's detail,
# a log line's reason is cut shorter still): every problem that fits, then how many more there are.
MAX_PROBLEMS_CHARS = 2_000


def join_problems(problems: list[str], max_chars: int = MAX_PROBLEMS_CHARS, limit: int | None = None) -> str:
    """`problems` joined with "; ", as many as fit in about `max_chars` (and at most `limit`), then
    "and N more"; a problem longer than the whole budget is cut with "...". Never empty when
    `problems` is not."""
    shown: list[str] = []
    used = 0
    for problem in problems[:limit]:
        if len(problem) > max_chars:
            problem = problem[: max_chars - 3] + "..."
        if shown and used + len(problem) + 2 > max_chars:
            break
        shown.append(problem)
        used += len(problem) + 2
    if len(shown) < len(problems):
        shown.append(f"and {len(problems) - len(shown)} more")
    return "; ".join(shown)


def describe_validation_error(
    err: ValidationError, *, limit: int | None = None, max_chars: int = MAX_PROBLEMS_CHARS, env_names: bool = False
) -> str:
    """One line naming each failing field and why, all of them as far as `max_chars` allows (or
    the first `limit`); never the input values (they may be personal data).

    `env_names` names fields as their environment variables (upper case).
    """
    problems = []
    for e in err.errors(include_input=False, include_url=False):
        loc = ".".join(str(x) for x in e["loc"])
        if env_names:
            loc = loc.upper()
        msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        problems.append(f"{loc}: {msg}" if loc else msg)
    return join_problems(problems, max_chars, limit)


class UnknownSection(UserMemoryError, LookupError):
    """An update or forget names a section the document's schema does not have."""

    def __init__(self, section: str, schema: str, known: list[str]) -> None:
        shown = section if len(section) <= 64 else f"{section[:64]}..."
        super().__init__(f"schema {schema!r} has no section {shown!r}; sections: {', '.join(known)}")
        self.section = section
        self.schema = schema
        self.known = known


class InvalidUpdate(UserMemoryError, ValueError):
    """An update's mode does not fit its section or value (for example append to a text section)."""


class InvalidToolCall(UserMemoryError, ValueError):
    """A model's tool call is malformed: unknown tool, arguments not JSON, a missing or mistyped argument.

    The message names the problem, never the argument values (they can hold personal data).
    """


class InvalidKvEntry(UserMemoryError, ValueError):
    """A key-value entry, or an argument of a key-value call, breaks a documented limit.

    `field` names what is wrong (namespace, key, value, ttl_seconds, limit, ...); the message
    says why, never what the caller sent (keys and values may be personal data).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class KvValueTooLarge(InvalidKvEntry):
    """A key-value entry's value exceeds its size limit; `size` is None when the database measured it."""

    def __init__(self, size: int | None, limit: int, *, measure: str = "compact JSON") -> None:
        if size is not None:
            problem = f"is {size:,} bytes of {measure}, over the limit of {limit:,} bytes"
        else:
            problem = f"is over the limit of {limit:,} bytes of {measure}"
        super().__init__("value", problem)
        self.size = size
        self.limit = limit


class InvalidRequest(UserMemoryError, ValueError):
    """A request's arguments do not fit together (both a version and a time, an inverted range)."""


class InvalidArgument(InvalidRequest):
    """One argument of a request is outside its bounds. `argument` is its name at the HTTP API (a
    query parameter), so each door names it as its caller typed it (a CLI argument, a tool's)."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument} {problem}")
        self.argument = argument
        self.problem = problem

    def named(self, names: Mapping[str, str]) -> str:
        """The message with the argument called what `names` calls it (unchanged when it is not there)."""
        return f"{names.get(self.argument, self.argument)} {self.problem}"


class InvalidPatch(UserMemoryError, ValueError):
    """A patch body is not a patch at all: a merge patch (RFC 7396) for a document or an element that
    is not a JSON object (a JSON Patch that is not an array of operations is refused at the door)."""


class PreconditionRequired(UserMemoryError):
    """The deployment requires a write to name the version it edits (If-Match), and this one did not."""


class IdempotencyKeyReused(InvalidRequest):
    """The Idempotency-Key already wrote a version, for another request (another body or route)."""


class NotFound(UserMemoryError, LookupError):
    """The thing the request names does not exist (a key-value entry, a route)."""


class MethodNotAllowed(UserMemoryError):
    """The path is a resource of the API, but not for this method; `allowed` lists the ones it takes."""

    def __init__(self, method: str, allowed: list[str]) -> None:
        super().__init__(f"{method[:16]} is not allowed here; this resource takes {', '.join(allowed)}")
        self.method = method
        self.allowed = allowed


class ElementExists(UserMemoryError):
    """An element with this id is already there (create is not an update)."""


class WrongSchema(UserMemoryError):
    """The route needs a capability this deployment's schema or configuration does not have."""


class InvalidExport(UserMemoryError, ValueError):
    """An export file that cannot be imported: not JSON Lines of this format, truncated, out of
    order, or a version whose patches do not rebuild its checkpoint."""


class ImportTargetNotEmpty(UserMemoryError):
    """An import into a user that already has a memory: an import only writes into an empty one."""


class ExportFailed(UserMemoryError):
    """An export job could not write its file (the store refused, the user was erased meanwhile)."""


class ImportFailed(UserMemoryError):
    """An import job could not finish (the store or the database failed, the user was erased meanwhile)."""


class Forbidden(UserMemoryError, PermissionError):
    """The caller may not do this: another user's data, or an operator route without the operator scope."""


class ResetNotAllowed(Forbidden):
    """A memory_reset from a source that may not send one (an end user's own activity): only the
    service's queue records a reset."""


class Unauthenticated(UserMemoryError):
    """The request carries no usable identity (no token, an invalid token, no subject)."""


class DeliveryFailed(UserMemoryError):
    """An event was not accepted by its sink (a webhook's status, a timeout, a bus's refusal)."""


class EventsNotRelayed(UserMemoryError):
    """The relay's run left events it could not send (logged per sink; they are sent again next run)."""


class UnknownWebhook(NotFound):
    """No webhook endpoint has that id."""


class SecretsUnavailable(StorageUnavailable):
    """The signing secrets' store (Secrets Manager) refused or could not be reached (503)."""


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(error type, short reason) for a log line: ids, counts and causes only, never content."""
    if isinstance(exc, ValidationError):  # a message model: its fields are named, never their values
        return InvalidMessage.__name__, describe_validation_error(exc)[:300]
    if isinstance(exc, InvalidDocument | PatchError):  # these can quote document keys (part ids, paths)
        return type(exc).__name__, "details withheld from logs: they can quote the document's keys"
    if isinstance(exc, UserMemoryError):
        return type(exc).__name__, str(exc)[:300]
    # Anything else (a programming or SDK error): its message may quote data, so the place it
    # was raised instead.
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else "unknown place"
    return type(exc).__name__, f"unexpected error raised at {where}"


class UnknownRun(NotFound):
    """No version carries the run key (for the user named, when one is): there is nothing to undo."""

    def __init__(self, run_key: str, user_id: object = None) -> None:
        whose = f" for user {user_id}" if user_id else ""
        super().__init__(f"no version carries run key {run_key!r}{whose}")
        self.run_key = run_key


class UnknownRunRevert(NotFound):
    """No undo of a run has this id."""

    def __init__(self, revert_id: object) -> None:
        super().__init__(f"no run revert {revert_id}")

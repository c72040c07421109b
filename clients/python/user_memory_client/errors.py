"""Typed errors: every RFC 9457 problem the API answers becomes one exception class.

The class is picked by the problem's `type` (a stable URI per kind of error), else by the HTTP
status, so `except NotFound` catches an unknown version as well as a missing key-value entry.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from user_memory_client.models import Problem

TYPE_BASE = "https://user-memory.dev/problems/"


class UserMemoryError(Exception):
    """Every error this client raises."""


class InvalidBaseUrl(UserMemoryError, ValueError):
    """The base URL is not an absolute http(s) URL (e.g. no scheme): refused when the client is made."""


class TransportError(UserMemoryError):
    """The API could not be reached, or did not answer in time, within the retries and the deadline."""


class DeadlineExceeded(TransportError):
    """The call's total deadline passed before an answer came (retries included)."""


class ApiError(UserMemoryError):
    """The API answered with an error (a problem document)."""

    status: int = 0

    def __init__(self, problem: Problem, *, headers: httpx.Headers | None = None) -> None:
        super().__init__(f"{problem.status} {problem.title}: {problem.detail}")
        self.problem = problem
        self.status = problem.status
        self.type = problem.type
        self.title = problem.title
        self.detail = problem.detail
        self.request_id = problem.instance
        self.headers = headers or httpx.Headers()


class BadRequest(ApiError):
    """400: the request is malformed."""


class InvalidJson(BadRequest):
    """400: the body is not valid JSON."""


class InvalidPatch(BadRequest):
    """400: the body is not a valid JSON Patch."""


class Unauthenticated(ApiError):
    """401: no valid token (missing, expired, wrong signature)."""


class Forbidden(ApiError):
    """403: not allowed for this caller."""


class NotFound(ApiError):
    """404: no such resource."""


class UnknownVersion(NotFound):
    """404: no such version of the memory."""


class NotEnabled(NotFound):
    """404: not enabled on this deployment (a feature or schema it does not run)."""


class MethodNotAllowed(ApiError):
    """405."""


class Conflict(ApiError):
    """409: the write conflicts with the current state."""

    @property
    def current_version(self) -> int | None:
        return self.problem.current_version


class VersionConflict(Conflict):
    """409: another write got in first; retry."""


class PatchConflict(Conflict):
    """409: the patch does not apply to the current document."""


class ElementExists(Conflict):
    """409: an element with this id exists; update it instead."""


class ImportTargetNotEmpty(Conflict):
    """409: the user has a memory; an import writes only into an empty one."""


class PreconditionFailed(ApiError):
    """412: If-Match names a version that is no longer current (`current_version` is the head)."""

    @property
    def current_version(self) -> int | None:
        return self.problem.current_version


class TooLarge(ApiError):
    """413: the body or the resulting document is too large."""


class UnsupportedMediaType(ApiError):
    """415."""


class InvalidInput(ApiError):
    """422: the request does not validate."""


class InvalidDocument(InvalidInput):
    """422: the result does not match the deployment's memory schema."""


class BudgetExceeded(InvalidInput):
    """422: the data needs more work than the service allows for it."""


class InvalidExport(InvalidInput):
    """422: the file is not an export this service can import."""


class PreconditionRequired(ApiError):
    """428: this deployment requires If-Match on writes."""


class RateLimited(ApiError):
    """429: too many requests (retried until the deadline; raised when it passes)."""

    @property
    def retry_after(self) -> float | None:
        return retry_after_seconds(self.headers)


class ServerError(ApiError):
    """5xx: the service failed."""


class Unavailable(ServerError):
    """503: the storage, the queue or the embeddings endpoint is unavailable; retry later."""


_BY_SLUG: dict[str, type[ApiError]] = {
    "bad-request": BadRequest,
    "invalid-json": InvalidJson,
    "invalid-patch": InvalidPatch,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "unknown-version": UnknownVersion,
    "not-enabled": NotEnabled,
    "method-not-allowed": MethodNotAllowed,
    "version-conflict": VersionConflict,
    "patch-does-not-apply": PatchConflict,
    "element-exists": ElementExists,
    "stale-version": PreconditionFailed,
    "too-large": TooLarge,
    "unsupported-media-type": UnsupportedMediaType,
    "invalid-document": InvalidDocument,
    "invalid-input": InvalidInput,
    "budget-exceeded": BudgetExceeded,
    "if-match-required": PreconditionRequired,
    "storage-unavailable": Unavailable,
    "queue-unavailable": Unavailable,
    "embeddings-unavailable": Unavailable,
    "internal": ServerError,
    "import-target-not-empty": ImportTargetNotEmpty,
    "invalid-export": InvalidExport,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    412: PreconditionFailed,
    413: TooLarge,
    415: UnsupportedMediaType,
    422: InvalidInput,
    428: PreconditionRequired,
    429: RateLimited,
    503: Unavailable,
}


def error_for(response: httpx.Response) -> ApiError:
    """The typed error for an error answer (a problem document, or any other body)."""
    problem = _problem(response)
    cls = _BY_SLUG.get(problem.type.removeprefix(TYPE_BASE)) if problem.type.startswith(TYPE_BASE) else None
    if cls is None:
        cls = _BY_STATUS.get(response.status_code) or (ServerError if response.status_code >= 500 else ApiError)
    return cls(problem, headers=response.headers)


def _problem(response: httpx.Response) -> Problem:
    body: Any = None
    with suppress(ValueError):
        body = response.json()
    if isinstance(body, dict):
        try:
            return Problem.model_validate({**body, "status": response.status_code})
        except ValueError:
            pass
    # Not a problem document (a proxy's page, API Gateway's {"message": ...}): the status speaks.
    message = body.get("message") if isinstance(body, dict) else None
    return Problem(
        type="about:blank",
        title=response.reason_phrase or "Error",
        status=response.status_code,
        detail=str(message or response.text[:200] or response.reason_phrase or "no detail"),
    )


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Retry-After in seconds (a number of seconds or an HTTP date), or None."""
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())

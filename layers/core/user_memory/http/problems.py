"""Errors as RFC 9457 problem details: one stable `type` per kind of error, and its status.

Every error a client can cause maps to a 4xx here; only what the service itself got wrong is a
500, and the storage being unreachable is a 503. Details name fields, versions and limits, never
document content.
"""

from __future__ import annotations

from dataclasses import dataclass

from user_memory.errors import (
    AccessDenied,
    BudgetExceeded,
    DocumentTooLarge,
    ElementExists,
    EmbeddingsUnavailable,
    Forbidden,
    IdempotencyKeyReused,
    ImportTargetNotEmpty,
    InvalidActivity,
    InvalidDocument,
    InvalidExport,
    InvalidKvEntry,
    InvalidPatch,
    InvalidPointer,
    InvalidRequest,
    InvalidTime,
    InvalidToolCall,
    InvalidUpdate,
    InvalidUserId,
    KvValueTooLarge,
    MethodNotAllowed,
    NotFound,
    PatchError,
    PatchOverBounds,
    PreconditionRequired,
    SendFailed,
    StorageUnavailable,
    Unauthenticated,
    UnknownSection,
    UnknownVersion,
    VersionConflict,
    WrongSchema,
)

TYPE_BASE = "https://user-memory.dev/problems/"


@dataclass(frozen=True)
class Kind:
    status: int
    slug: str
    title: str

    @property
    def type(self) -> str:
        return TYPE_BASE + self.slug


BAD_REQUEST = Kind(400, "bad-request", "The request is malformed")
INVALID_JSON = Kind(400, "invalid-json", "The body is not valid JSON")
INVALID_PATCH = Kind(400, "invalid-patch", "The body is not a valid patch")
UNAUTHENTICATED = Kind(401, "unauthenticated", "No valid credentials")
FORBIDDEN = Kind(403, "forbidden", "Not allowed for this caller")
NOT_FOUND = Kind(404, "not-found", "No such resource")
UNKNOWN_VERSION = Kind(404, "unknown-version", "No such version")
NOT_ENABLED = Kind(404, "not-enabled", "Not enabled on this deployment")
METHOD_NOT_ALLOWED = Kind(405, "method-not-allowed", "Method not allowed on this resource")
VERSION_CONFLICT = Kind(409, "version-conflict", "Another write got in first; retry")
PATCH_CONFLICT = Kind(409, "patch-does-not-apply", "The patch does not apply to the current document")
ELEMENT_EXISTS = Kind(409, "element-exists", "An element with this id exists; update it instead")
PRECONDITION_FAILED = Kind(412, "stale-version", "If-Match names a version that is no longer current")
TOO_LARGE = Kind(413, "too-large", "The body or the resulting document is too large")
UNSUPPORTED_MEDIA = Kind(415, "unsupported-media-type", "Unsupported Content-Type")
INVALID_DOCUMENT = Kind(422, "invalid-document", "The result does not match the memory schema")
INVALID_INPUT = Kind(422, "invalid-input", "The request does not validate")
BUDGET_EXCEEDED = Kind(422, "budget-exceeded", "The data needs more work than the service allows for it")
PRECONDITION_REQUIRED = Kind(428, "if-match-required", "This deployment requires If-Match on writes")
UNAVAILABLE = Kind(503, "storage-unavailable", "The storage is unavailable; retry later")
QUEUE_UNAVAILABLE = Kind(503, "queue-unavailable", "The worker queue is unavailable; retry later")
EMBEDDINGS_UNAVAILABLE = Kind(503, "embeddings-unavailable", "The embeddings endpoint is unavailable; retry later")
INTERNAL = Kind(500, "internal", "Internal error")
IMPORT_TARGET_NOT_EMPTY = Kind(
    409, "import-target-not-empty", "The user has a memory; an import writes only into an empty one"
)
INVALID_EXPORT = Kind(422, "invalid-export", "The file is not an export this service can import")

# The statuses each route can answer with besides its success, for the OpenAPI document.
ALL_KINDS = (
    BAD_REQUEST,
    INVALID_JSON,
    INVALID_PATCH,
    UNAUTHENTICATED,
    FORBIDDEN,
    NOT_FOUND,
    UNKNOWN_VERSION,
    NOT_ENABLED,
    METHOD_NOT_ALLOWED,
    VERSION_CONFLICT,
    PATCH_CONFLICT,
    ELEMENT_EXISTS,
    PRECONDITION_FAILED,
    TOO_LARGE,
    UNSUPPORTED_MEDIA,
    INVALID_DOCUMENT,
    INVALID_INPUT,
    BUDGET_EXCEEDED,
    PRECONDITION_REQUIRED,
    UNAVAILABLE,
    QUEUE_UNAVAILABLE,
    EMBEDDINGS_UNAVAILABLE,
    INTERNAL,
    IMPORT_TARGET_NOT_EMPTY,
    INVALID_EXPORT,
)


class HttpProblem(Exception):
    """Raised by a route for an HTTP-level problem (bad header, wrong content type)."""

    def __init__(self, kind: Kind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


# An error's kind by its class, the first match winning (a subclass before its base: PatchOverBounds
# before PatchError).
_KINDS: tuple[tuple[tuple[type[BaseException], ...], Kind], ...] = (
    ((DocumentTooLarge, KvValueTooLarge), TOO_LARGE),
    ((BudgetExceeded,), BUDGET_EXCEEDED),
    ((UnknownVersion,), UNKNOWN_VERSION),
    ((NotFound,), NOT_FOUND),
    ((MethodNotAllowed,), METHOD_NOT_ALLOWED),
    ((WrongSchema,), NOT_ENABLED),
    ((ElementExists,), ELEMENT_EXISTS),
    ((InvalidPatch, InvalidPointer), INVALID_PATCH),
    ((PatchOverBounds,), INVALID_INPUT),
    ((PatchError,), PATCH_CONFLICT),
    ((InvalidDocument, UnknownSection, InvalidUpdate, InvalidToolCall), INVALID_DOCUMENT),
    ((InvalidKvEntry, InvalidUserId, IdempotencyKeyReused, InvalidActivity, InvalidTime), INVALID_INPUT),
    ((InvalidRequest,), BAD_REQUEST),
    ((PreconditionRequired,), PRECONDITION_REQUIRED),
    ((Unauthenticated,), UNAUTHENTICATED),
    ((Forbidden, AccessDenied), FORBIDDEN),
    ((StorageUnavailable,), UNAVAILABLE),
    ((SendFailed,), QUEUE_UNAVAILABLE),
    ((EmbeddingsUnavailable,), EMBEDDINGS_UNAVAILABLE),
    ((ImportTargetNotEmpty,), IMPORT_TARGET_NOT_EMPTY),
    ((InvalidExport,), INVALID_EXPORT),
)


def kind_of(err: BaseException, *, if_match: bool = False) -> Kind:
    """The problem kind for an error; `if_match` says the request named the version it edits."""
    if isinstance(err, HttpProblem):
        return err.kind
    if isinstance(err, VersionConflict):
        return PRECONDITION_FAILED if if_match else VERSION_CONFLICT
    return next((kind for classes, kind in _KINDS if isinstance(err, classes)), INTERNAL)


def problem_document(
    *, type: str, title: str, status: int, detail: str, instance: str | None = None, current_version: int | None = None
) -> dict[str, object]:
    """An RFC 9457 problem details object (what every error answer carries, Lambda's and serve's)."""
    body: dict[str, object] = {"type": type, "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    if current_version is not None:
        body["current_version"] = current_version
    return body


def detail_of(err: BaseException, kind: Kind) -> str:
    """What the client is told: the error's own one-line message, except for internal errors."""
    if kind is INTERNAL:
        return "the service failed; the request id identifies it in the logs"
    if kind is UNAVAILABLE:
        return "the database cannot be reached; retry later"
    return str(err).splitlines()[0][:500] if str(err) else kind.title

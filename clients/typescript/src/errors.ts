/**
 * Typed errors: every RFC 9457 problem the API answers becomes one error class, picked by the
 * problem's `type` (a stable URI per kind of error), else by the HTTP status, so `instanceof
 * NotFound` catches an unknown version as well as a missing key-value entry. The same tree as the
 * Python client's `user_memory_client.errors`.
 */
import type { components } from "./openapi.js";

export type Problem = components["schemas"]["Problem"];

export const TYPE_BASE = "https://user-memory.dev/problems/";

/** Every error this client throws. */
export class UserMemoryError extends Error {
  override name = "UserMemoryError";
}

/** The API could not be reached, or did not answer in time, within the retries and the deadline. */
export class TransportError extends UserMemoryError {
  override name = "TransportError";
}

/** The call's total deadline passed before an answer came (retries included). */
export class DeadlineExceeded extends TransportError {
  override name = "DeadlineExceeded";
}

/** The client was given something it cannot use (a base URL without a scheme, a bad option). */
export class ConfigurationError extends UserMemoryError {
  override name = "ConfigurationError";
}

/** An argument this client cannot send (a key-value key "." or "..", which a URL path cannot hold). */
export class InvalidArgument extends UserMemoryError {
  override name = "InvalidArgument";
}

/** The API answered with an error (a problem document). */
export class ApiError extends UserMemoryError {
  override name = "ApiError";
  readonly problem: Problem;
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly requestId: string | null;
  readonly headers: Headers;

  constructor(problem: Problem, headers: Headers = new Headers()) {
    super(`${problem.status} ${problem.title}: ${problem.detail}`);
    this.problem = problem;
    this.status = problem.status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    this.requestId = problem.instance ?? null;
    this.headers = headers;
  }

  /** On 409 and 412: the user's current version. */
  get currentVersion(): number | null {
    return this.problem.current_version ?? null;
  }
}

/** 400: the request is malformed. */
export class BadRequest extends ApiError { override name = "BadRequest"; }
/** 400: the body is not valid JSON. */
export class InvalidJson extends BadRequest { override name = "InvalidJson"; }
/** 400: the body is not a valid JSON Patch. */
export class InvalidPatch extends BadRequest { override name = "InvalidPatch"; }
/** 401: no valid token (missing, expired, wrong signature). */
export class Unauthenticated extends ApiError { override name = "Unauthenticated"; }
/** 403: not allowed for this caller. */
export class Forbidden extends ApiError { override name = "Forbidden"; }
/** 404: no such resource. */
export class NotFound extends ApiError { override name = "NotFound"; }
/** 404: no such version of the memory. */
export class UnknownVersion extends NotFound { override name = "UnknownVersion"; }
/** 404: not enabled on this deployment (a feature or schema it does not run). */
export class NotEnabled extends NotFound { override name = "NotEnabled"; }
/** 405. */
export class MethodNotAllowed extends ApiError { override name = "MethodNotAllowed"; }
/** 409: the write conflicts with the current state. */
export class Conflict extends ApiError { override name = "Conflict"; }
/** 409: another write got in first; retry. */
export class VersionConflict extends Conflict { override name = "VersionConflict"; }
/** 409: the patch does not apply to the current document. */
export class PatchConflict extends Conflict { override name = "PatchConflict"; }
/** 409: an element with this id exists; update it instead. */
export class ElementExists extends Conflict { override name = "ElementExists"; }
/** 412: If-Match names a version that is no longer current (`currentVersion` is the head). */
export class PreconditionFailed extends ApiError { override name = "PreconditionFailed"; }
/** 413: the body or the resulting document is too large. */
export class TooLarge extends ApiError { override name = "TooLarge"; }
/** 415. */
export class UnsupportedMediaType extends ApiError { override name = "UnsupportedMediaType"; }
/** 422: the request does not validate. */
export class InvalidInput extends ApiError { override name = "InvalidInput"; }
/** 422: the result does not match the deployment's memory schema. */
export class InvalidDocument extends InvalidInput { override name = "InvalidDocument"; }
/** 422: the data needs more work than the service allows for it. */
export class BudgetExceeded extends InvalidInput { override name = "BudgetExceeded"; }
/** 428: this deployment requires If-Match on writes. */
export class PreconditionRequired extends ApiError { override name = "PreconditionRequired"; }
/** 429: too many requests (retried until the deadline; thrown when it passes). */
export class RateLimited extends ApiError {
  override name = "RateLimited";
  get retryAfter(): number | null {
    return retryAfterSeconds(this.headers);
  }
}
/** 5xx: the service failed. */
export class ServerError extends ApiError { override name = "ServerError"; }
/** 503: the storage, the queue or the embeddings endpoint is unavailable; retry later. */
export class Unavailable extends ServerError { override name = "Unavailable"; }

type ErrorClass = new (problem: Problem, headers?: Headers) => ApiError;

const BY_SLUG: Record<string, ErrorClass> = {
  "bad-request": BadRequest,
  "invalid-json": InvalidJson,
  "invalid-patch": InvalidPatch,
  unauthenticated: Unauthenticated,
  forbidden: Forbidden,
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
  internal: ServerError,
};

const BY_STATUS: Record<number, ErrorClass> = {
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
};

/** The typed error for an error answer whose body was read as `text`. */
export function errorFor(status: number, statusText: string, headers: Headers, text: string): ApiError {
  const problem = problemOf(status, statusText, text);
  const slug = problem.type.startsWith(TYPE_BASE) ? problem.type.slice(TYPE_BASE.length) : undefined;
  const cls =
    (slug !== undefined ? BY_SLUG[slug] : undefined) ??
    BY_STATUS[status] ??
    (status >= 500 ? ServerError : ApiError);
  return new cls(problem, headers);
}

function problemOf(status: number, statusText: string, text: string): Problem {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (isObject(body) && typeof body.type === "string" && typeof body.title === "string" && typeof body.detail === "string") {
    return { ...(body as Problem), status };
  }
  // Not a problem document (a proxy's page, API Gateway's {"message": ...}): the status speaks.
  const message = isObject(body) && typeof body.message === "string" ? body.message : undefined;
  return {
    type: "about:blank",
    title: statusText || "Error",
    status,
    detail: message || text.slice(0, 200) || statusText || "no detail",
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Retry-After in seconds (a number of seconds or an HTTP date), or null. */
export function retryAfterSeconds(headers: Headers): number | null {
  const value = headers.get("retry-after")?.trim();
  if (!value) return null;
  if (/^\d+$/.test(value)) return Number(value);
  if (!/[a-z]{3}, /i.test(value)) return null;
  const when = Date.parse(value);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - Date.now()) / 1000);
}

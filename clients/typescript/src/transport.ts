/**
 * Sending one call: the token, retries with backoff, a total deadline, the answer or a typed error.
 *
 * Retried: connection failures and timeouts, 429 and 502/503/504, each after a wait (exponential
 * backoff with full jitter, or the answer's Retry-After when it names one), until the attempts or
 * the call's deadline run out. Every retry resends the same request, Idempotency-Key included, so
 * a write whose answer was lost is not written twice. A 401 is retried once with a fresh token when
 * the token comes from a function (it may refresh). Nothing else is retried: a 4xx is the caller's.
 *
 * The deadline is wall-clock time for the whole call, waits and the reading of the body included:
 * every try runs under an AbortSignal that fires at the try's timeout or the deadline, whichever
 * comes first. Only `fetch` is used, so this runs on Node 18+, in browsers and on edge runtimes.
 */
import {
  ApiError,
  ConfigurationError,
  DeadlineExceeded,
  TransportError,
  Unauthenticated,
  errorFor,
  retryAfterSeconds,
} from "./errors.js";

export type Token = string | (() => string | Promise<string>);
export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

/** How a call is retried; every time is in seconds, as in the Python client's `Retries`. */
export interface Retries {
  /** Tries in all (1: never retry). Default 4. */
  attempts?: number;
  /** The whole call, waits included. Default 30. */
  deadline?: number;
  /** One try at most. Default 10. */
  timeout?: number;
  /** The first wait's upper bound, doubled each retry up to maxBackoff (uniform below it). Default 0.2. */
  backoff?: number;
  /** Default 5. */
  maxBackoff?: number;
}

/** What a retry is about to wait for; the operation's path template only (keys and ids may be personal). */
export interface RetryNotice {
  method: string;
  path: string;
  error: Error;
  attempt: number;
  attempts: number;
  waitSeconds: number;
}

export const RETRY_STATUSES = new Set([429, 502, 503, 504]);
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024; // the API answers at most 6 MB (Lambda's limit)

export interface Request {
  method: string;
  /** The path template, for notices. */
  template: string;
  /** The path with its values, and the query string. */
  path: string;
  headers: Record<string, string>;
  body?: string;
}

export interface TransportOptions {
  retries?: Retries;
  fetch?: Fetch;
  userAgent?: string;
  onRetry?: (notice: RetryNotice) => void;
  /** For tests: the jitter's source of numbers in [0, 1). */
  random?: () => number;
}

/** The base URL with its trailing slashes cut; one without an http(s) scheme fails at once. */
export function checkBaseUrl(baseUrl: string): string {
  let url: URL | undefined;
  try {
    url = new URL(baseUrl);
  } catch {
    url = undefined;
  }
  // "localhost:8080" parses as the scheme "localhost:": only http and https are a base URL.
  if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:") || !url.host) {
    throw new ConfigurationError(
      `the base URL must start with http:// or https:// (got ${JSON.stringify(baseUrl.slice(0, 100))})`,
    );
  }
  return baseUrl.replace(/\/+$/, "");
}

function checkRetries(r: Retries): Required<Retries> {
  const full = { attempts: 4, deadline: 30, timeout: 10, backoff: 0.2, maxBackoff: 5, ...r };
  if (
    !(Number.isInteger(full.attempts) && full.attempts >= 1) ||
    !(full.deadline > 0) ||
    !(full.timeout > 0) ||
    !(full.backoff >= 0) ||
    !(full.maxBackoff >= 0)
  ) {
    throw new ConfigurationError("retries: attempts an integer >= 1, deadline and timeout > 0, backoffs >= 0");
  }
  return full;
}

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

export class Transport {
  readonly baseUrl: string;
  readonly retries: Required<Retries>;
  private readonly token: Token;
  private readonly fetch: Fetch;
  private readonly userAgent: string | undefined;
  private readonly onRetry: ((notice: RetryNotice) => void) | undefined;
  private readonly random: () => number;

  constructor(baseUrl: string, token: Token, options: TransportOptions = {}) {
    this.baseUrl = checkBaseUrl(baseUrl);
    if (typeof token !== "string" && typeof token !== "function") {
      throw new ConfigurationError("token: a string or a function that returns one");
    }
    this.token = token;
    this.retries = checkRetries(options.retries ?? {});
    // Bound late: a test or an app may replace globalThis.fetch after the client is made.
    this.fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.userAgent = options.userAgent;
    this.onRetry = options.onRetry;
    this.random = options.random ?? Math.random;
  }

  private async currentToken(): Promise<string> {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  /** The 2xx answer's body as text, or the typed error. */
  async send(request: Request): Promise<{ status: number; headers: Headers; text: string }> {
    const r = this.retries;
    const deadline = Date.now() + r.deadline * 1000;
    let tries = 0;
    let refreshed = false;
    let last: Error | undefined;
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) throw this.deadlineError(last);
      tries += 1;
      let error: Error;
      let retryAfter: number | null = null;
      // Outside the try: a token function that fails is the caller's error, not the network's.
      const token = await this.currentToken();
      try {
        const answer = await this.once(request, token, Math.min(r.timeout, left));
        if (answer.status < 400) return answer;
        const err = errorFor(answer.status, answer.statusText, answer.headers, answer.text);
        if (err instanceof Unauthenticated && typeof this.token === "function" && !refreshed) {
          refreshed = true; // once, at once, with a fresh token
          tries -= 1;
          continue;
        }
        if (!RETRY_STATUSES.has(answer.status)) throw err;
        error = err;
        retryAfter = retryAfterSeconds(answer.headers);
      } catch (err) {
        if (err instanceof ApiError && !RETRY_STATUSES.has(err.status)) throw err;
        error = err instanceof ApiError ? err : this.transportError(err, deadline);
        if (error instanceof DeadlineExceeded) throw error;
      }
      last = error;
      if (tries >= r.attempts) throw error;
      const wait = retryAfter ?? this.random() * Math.min(r.maxBackoff, r.backoff * 2 ** (tries - 1));
      if (Date.now() + wait * 1000 >= deadline) {
        if (error instanceof TransportError) throw this.deadlineError(error);
        throw error;
      }
      this.onRetry?.({
        method: request.method,
        path: request.template,
        error,
        attempt: tries,
        attempts: r.attempts,
        waitSeconds: wait,
      });
      await sleep(wait);
    }
  }

  private deadlineError(last: Error | undefined): DeadlineExceeded {
    const reason = last ? `: ${last.message}` : "";
    return new DeadlineExceeded(`no answer within the deadline of ${this.retries.deadline} s${reason}`, {
      cause: last,
    });
  }

  private transportError(err: unknown, deadline: number): TransportError {
    if (err instanceof TransportError) return err;
    const cause = err instanceof Error ? err : new Error(String(err));
    const inner = cause.cause instanceof Error ? `: ${cause.cause.message}` : "";
    const message = `${cause.name}: ${cause.message}${inner}`;
    if (Date.now() >= deadline) return this.deadlineError(new TransportError(message, { cause }));
    return new TransportError(message, { cause });
  }

  private async once(
    request: Request,
    token: string,
    timeout: number,
  ): Promise<{ status: number; statusText: string; headers: Headers; text: string }> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${token}`,
      Accept: "application/json",
      ...request.headers,
    };
    if (this.userAgent) headers["User-Agent"] = this.userAgent;
    const signal = AbortSignal.timeout(Math.max(1, Math.ceil(timeout * 1000)));
    const init: RequestInit = { method: request.method, headers, signal };
    if (request.body !== undefined) init.body = request.body;
    const response = await this.fetch(this.baseUrl + request.path, init);
    const length = Number(response.headers.get("content-length") ?? "0");
    if (length > MAX_ANSWER_BYTES) {
      await response.body?.cancel();
      throw new TransportError(`the answer is over ${MAX_ANSWER_BYTES} bytes`);
    }
    // The signal also bounds the reading of the body: a server that trickles bytes is cut off.
    const text = await response.text();
    return { status: response.status, statusText: response.statusText, headers: response.headers, text };
  }
}

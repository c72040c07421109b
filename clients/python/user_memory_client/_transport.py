"""Sending one call: the token, retries with backoff, a total deadline, the answer or a typed error.

Retried: connection failures and timeouts, 429 and 502/503/504, each after a wait (exponential
backoff with full jitter, or the answer's Retry-After when it names one), until the attempts or the
call's deadline run out. Every retry resends the same request, Idempotency-Key included, so a write
whose answer was lost is not written twice. A 401 is retried once with a fresh token when the token
comes from a callable (it may refresh). Nothing else is retried: a 4xx is the caller's to act on.

The deadline is wall-clock time for the whole call. The async client enforces it with
asyncio.timeout; the sync client gives every read at most the time left and checks the clock
between the chunks of the body, so a server that trickles bytes is cut off at the deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from user_memory_client._operations import Call
from user_memory_client.errors import (
    DeadlineExceeded,
    InvalidBaseUrl,
    TransportError,
    Unauthenticated,
    error_for,
    retry_after_seconds,
)

logger = logging.getLogger("user_memory_client")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # the API answers at most 6 MB (Lambda's limit)

Token = str | Callable[[], str]
AsyncToken = str | Callable[[], str] | Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class Retries:
    """How a call is retried.

    attempts: tries in all (1: never retry). deadline: seconds for the whole call, waits included.
    timeout: seconds for one try at most. backoff / max_backoff: the first wait's upper bound,
    doubled each retry up to max_backoff (the wait is uniform below it).
    """

    attempts: int = 4
    deadline: float = 30.0
    timeout: float = 10.0
    backoff: float = 0.2
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.deadline <= 0 or self.timeout <= 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retries: attempts >= 1, deadline and timeout > 0, backoffs >= 0")

    def wait(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds before retry number `retry` (1, 2, ...)."""
        if retry_after is not None:
            return retry_after
        return rng.uniform(0, min(self.max_backoff, self.backoff * 2 ** (retry - 1)))


class _Attempts:
    """The bookkeeping of one call's tries, shared by both transports. Each retry is logged (the
    operation's path template, never its values: keys and ids may be personal)."""

    def __init__(self, call: Call, retries: Retries, rng: random.Random) -> None:
        self.call = call
        self.retries = retries
        self.rng = rng
        self.deadline = time.monotonic() + retries.deadline
        self.tries = 0
        self.refreshed = False

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def next_timeout(self, last: Exception | None) -> float:
        left = self.left()
        if left <= 0:
            raise DeadlineExceeded(f"no answer within the deadline of {self.retries.deadline:g} s") from last
        self.tries += 1
        return min(self.retries.timeout, left)

    def after_answer(self, response: httpx.Response, token_refreshes: bool) -> tuple[Exception, float] | None:
        """None: retry at once (a fresh token); else the error and the wait before retrying it.
        Raises the error when it is not to be retried."""
        err = error_for(response)
        if isinstance(err, Unauthenticated) and token_refreshes and not self.refreshed:
            self.refreshed = True
            return None
        if response.status_code not in RETRY_STATUSES:
            raise err
        return err, self._wait(err, retry_after_seconds(response.headers))

    def after_failure(self, err: httpx.HTTPError) -> tuple[Exception, float]:
        failed = TransportError(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
        failed.__cause__ = err
        return failed, self._wait(failed, None)

    def _wait(self, err: Exception, retry_after: float | None) -> float:
        if self.tries >= self.retries.attempts:
            raise err
        wait = self.retries.wait(self.tries, retry_after, self.rng)
        if wait >= self.left():
            if isinstance(err, TransportError):
                raise DeadlineExceeded(f"no answer within the deadline of {self.retries.deadline:g} s: {err}") from err
            raise err
        op = self.call.operation
        logger.warning(
            "retrying %s %s after %s (try %d of %d, waiting %.2f s)",
            op.method,
            op.path,
            type(err).__name__,
            self.tries,
            self.retries.attempts,
            wait,
            extra={"request_id": getattr(err, "request_id", None), "error_type": type(err).__name__},
        )
        return wait


def checked_base_url(base_url: str) -> str:
    """`base_url` when it is an absolute http(s) URL; InvalidBaseUrl at once otherwise (without a
    scheme, every request would fail and be retried until the deadline)."""
    try:
        parts: httpx.URL | None = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError):
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.host:
        raise InvalidBaseUrl(f"the base URL must start with http:// or https://, got {base_url!r}")
    return base_url


def _url(base_url: str, call: Call) -> str:
    return base_url.rstrip("/") + call.path


def _headers(call: Call, token: str, user_agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json", "User-Agent": user_agent, **call.headers}


class SyncTransport:
    def __init__(
        self, base_url: str, token: Token, *, retries: Retries, http: httpx.Client | None, user_agent: str
    ) -> None:
        self.base_url = checked_base_url(base_url)
        self._token = token
        self.retries = retries
        self._owned = http is None
        self.http = http or httpx.Client()
        self.user_agent = user_agent
        self.rng = random.Random()

    def token(self) -> str:
        return self._token() if callable(self._token) else self._token

    def send(self, call: Call) -> httpx.Response:
        """The 2xx answer to `call` (its body read), or the typed error."""
        attempts = _Attempts(call, self.retries, self.rng)
        last: Exception | None = None
        while True:
            timeout = attempts.next_timeout(last)
            try:
                response = self._try(call, timeout, attempts.deadline)
            except httpx.HTTPError as err:
                last, wait = attempts.after_failure(err)
            else:
                if response.status_code < 400:
                    return response
                decided = attempts.after_answer(response, callable(self._token))
                if decided is None:
                    continue
                last, wait = decided
            time.sleep(wait)

    def _try(self, call: Call, timeout: float, deadline: float) -> httpx.Response:
        request = self.http.build_request(
            call.operation.method,
            _url(self.base_url, call),
            params=call.params,
            content=call.content,
            headers=_headers(call, self.token(), self.user_agent),
            timeout=httpx.Timeout(timeout),
        )
        response = self.http.send(request, stream=True)
        try:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise httpx.DecodingError(f"the answer is over {MAX_ANSWER_BYTES:,} bytes", request=request)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the deadline passed while the answer was read", request=request)
        finally:
            response.close()
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body), request=request)

    def close(self) -> None:
        if self._owned:
            self.http.close()


class AsyncTransport:
    def __init__(
        self, base_url: str, token: AsyncToken, *, retries: Retries, http: httpx.AsyncClient | None, user_agent: str
    ) -> None:
        self.base_url = checked_base_url(base_url)
        self._token = token
        self.retries = retries
        self._owned = http is None
        self.http = http or httpx.AsyncClient()
        self.user_agent = user_agent
        self.rng = random.Random()

    async def token(self) -> str:
        if not callable(self._token):
            return self._token
        value = self._token()
        return await value if inspect.isawaitable(value) else value

    async def send(self, call: Call) -> httpx.Response:
        attempts = _Attempts(call, self.retries, self.rng)
        last: Exception | None = None
        while True:
            timeout = attempts.next_timeout(last)
            try:
                async with asyncio.timeout(timeout):
                    response = await self._try(call, timeout)
            except (httpx.HTTPError, TimeoutError) as err:
                failure = err if isinstance(err, httpx.HTTPError) else httpx.TimeoutException("wall-clock timeout")
                last, wait = attempts.after_failure(failure)
            else:
                if response.status_code < 400:
                    return response
                decided = attempts.after_answer(response, callable(self._token))
                if decided is None:
                    continue
                last, wait = decided
            await asyncio.sleep(wait)

    async def _try(self, call: Call, timeout: float) -> httpx.Response:
        request = self.http.build_request(
            call.operation.method,
            _url(self.base_url, call),
            params=call.params,
            content=call.content,
            headers=_headers(call, await self.token(), self.user_agent),
            timeout=httpx.Timeout(timeout),
        )
        response = await self.http.send(request, stream=True)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise httpx.DecodingError(f"the answer is over {MAX_ANSWER_BYTES:,} bytes", request=request)
        finally:
            await response.aclose()
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body), request=request)

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

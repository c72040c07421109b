"""Calls to OpenAI-compatible endpoints that end on time: the HTTP client and the retry loop.

Why: httpx2's timeouts (like httpx's) bound each socket operation, not a request. The read
timeout starts again with every byte received, so an endpoint that trickles one byte a second
holds a call for as long as it likes, the invocation runs into Lambda's kill, and the whole
batch is lost with no partial response.

How: the clients built here (`http_client`, `openai_client`) run on a connection pool whose
network backend bounds every blocking socket operation (connect, the TLS handshake, each send,
each receive) by the time left before the innermost deadline in scope (`http_deadline.within`).
At or past it the next operation raises httpcore2's timeout at once, the connection is closed
(never reused), and the openai client reports an APITimeoutError. A call therefore ends at its
deadline plus one socket operation's scheduling delay, whatever the endpoint does, in the thread
that made it, with nothing left running behind it.

Rejected: a worker thread waited on with `future.result(timeout)` returns in time but leaves the
thread reading from the trickling endpoint (a Lambda environment is frozen and thawed with it);
SIGALRM works in the main thread only (`user-memory serve` and the local poller run handlers in
threads); closing the socket from a watchdog thread needs this same backend to find the socket,
and races with the pool. What the deadline cannot cut short: name resolution (getaddrinfo cannot
be interrupted) and a write slice the kernel accepts in one go.

The summarizers' shared pieces are here too: `ChatCaller` (the client, the model and the call's
limits, from the settings; `complete` runs one chat completion through `call_within`),
`chat_client`, `strict_schema`, `usage_tokens`, `answer_json` and `paid_answer` (an answer that
cannot be read fails with the tokens it cost).

`call_within` is the one retry loop of these calls: at most `max_retries` retries of rate
limits, 5xx, timeouts and connection errors, every try inside the deadline and every wait inside
the call's budget (the openai client's own retries would wait out any Retry-After, however long).

A 429's Retry-After holds every call to that endpoint and model, not only the one it answered
(`RetryAfterGate`, shared through `endpoint_gate`): the worker runs several users' calls at once,
and each of them asking again at once would only earn more 429s. A call whose budget or deadline
ends before the endpoint takes requests again fails at once, as a 429, without asking.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import httpcore2
import httpx2
import openai
from pydantic import ValidationError

from user_memory.adapters.http_deadline import time_left, within
from user_memory.errors import InvalidDocument, SummarizerUnavailable, describe_validation_error

if TYPE_CHECKING:
    from user_memory.config import WorkerSettings

T = TypeVar("T")
# A write is handed to the socket in slices, each bounded by the time left when it starts.
WRITE_SLICE = 64 * 1024


def _bounded(timeout: float | None, late: type[Exception]) -> float | None:
    """`timeout` cut to the time left before the deadline in scope; `late` raised once it passed."""
    left = time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise late("the call's wall-clock deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every blocking operation ends by the deadline in scope."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_SLICE):
            self._inner.write(buffer[start : start + WRITE_SLICE], _bounded(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        tls = self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore2.ConnectTimeout))
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore2's synchronous backend with every connection bounded by the deadline in scope."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        bounded = _bounded(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, bounded, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        bounded = _bounded(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def http_client() -> httpx2.Client:
    """An HTTP client for the openai client whose calls end by the deadline in scope.

    httpx2's transport takes no network backend, so its pool's backend is wrapped; a library
    version where that pool looks different fails here, when the client is built, rather than
    leaving calls unbounded. Proxies from the environment are not used (a given transport
    replaces them).
    """
    transport = httpx2.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore2.ConnectionPool) or not isinstance(backend, httpcore2.NetworkBackend):
        raise RuntimeError("httpx2's transport has no httpcore2 connection pool to bound by a deadline")
    pool._network_backend = _DeadlineBackend(backend)
    return openai.DefaultHttpxClient(transport=transport)


def openai_client(*, api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
    """The `openai` client for an endpoint, on `http_client()`. Its own retries are off: the
    callers retry with `call_within`, inside their deadline."""
    return openai.OpenAI(
        api_key=api_key or "not-needed-for-local-endpoints",
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        http_client=http_client(),
    )


class RetryAfterGate:
    """The time before which an endpoint asked not to be called (its last 429's Retry-After), for
    every call that shares the gate; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0
        self._said: Exception | None = None

    def close_for(self, seconds: float, said: Exception) -> None:
        """No request for `seconds` from now (a later end already set stays)."""
        with self._lock:
            until = time.monotonic() + seconds
            if until > self._until:
                self._until, self._said = until, said

    def closed(self) -> tuple[float, Exception | None]:
        """Seconds before the endpoint takes requests again (0: now), and the 429 that said so."""
        with self._lock:
            return max(0.0, self._until - time.monotonic()), self._said


_GATES: dict[tuple[str, str], RetryAfterGate] = {}
_GATES_LOCK = threading.Lock()


def endpoint_gate(base_url: object, model: str) -> RetryAfterGate:
    """The gate of an endpoint and model (rate limits are per model), shared in this process."""
    with _GATES_LOCK:
        return _GATES.setdefault((str(base_url), model), RetryAfterGate())


def call_within(
    call: Callable[[float], T],
    *,
    timeout: float,
    max_retries: int,
    budget: float | None,
    failure: Callable[[Exception, float], Exception],
    sleep: Callable[[float], None] = time.sleep,
    gate: RetryAfterGate | None = None,
) -> T:
    """`call(per_try)` with at most `max_retries` retries (429, 5xx, timeouts, connection errors).

    Each try runs within min(`timeout`, what is left of `budget`) of wall clock (`within`); the
    tries and the waits between them stay inside `budget` seconds in all (None: no bound beyond
    each try's). A failure is raised as `failure(error, per_try)`, from the openai error (or as
    that error itself when `failure` returns it). With a `gate`, no try starts before the time a
    429's Retry-After (this call's or another's) named; a 429 with Retry-After sets it.
    """
    ends = None if budget is None else time.monotonic() + budget

    def no_time_for(wait: float) -> bool:
        outer = time_left()
        return (ends is not None and time.monotonic() + wait >= ends) or (outer is not None and outer <= wait)

    waited_for: Exception | None = None  # the 429 this call has just waited out itself
    for attempt in range(max_retries + 1):
        closed, said = gate.closed() if gate is not None else (0.0, None)
        if closed > 0 and said is not None and said is not waited_for:
            if no_time_for(closed):
                _raise(failure(said, timeout), said)
            sleep(closed)
        # The try's own bound: the timeout, cut to what is left of the budget and of the
        # enclosing scope (the invocation's), so that errors name the bound that applied.
        bounds = (timeout, None if ends is None else ends - time.monotonic(), time_left())
        per_try = max(0.0, min(b for b in bounds if b is not None))
        try:
            with within(per_try):
                return call(per_try)
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as err:
            wait = retry_after(err, attempt)
            if gate is not None and isinstance(err, openai.RateLimitError) and server_retry_after(err) is not None:
                gate.close_for(wait, err)
            if attempt == max_retries or no_time_for(wait):
                _raise(failure(err, per_try), err)
            sleep(wait)
            waited_for = err
        except openai.APIStatusError as err:
            _raise(failure(err, per_try), err)
    raise SummarizerUnavailable("no try of the call was made")  # pragma: no cover - max_retries >= 0


def _raise(failed: Exception, err: Exception) -> NoReturn:
    if failed is err:  # the caller keeps the openai client's own error
        raise err
    raise failed from err


def llm_unavailable(err: Exception, per_try: float) -> SummarizerUnavailable:
    """A chat completion's failure, named by what happened (never the request or the answer)."""
    if isinstance(err, openai.APITimeoutError):
        return SummarizerUnavailable(f"the LLM endpoint timed out after {per_try:.1f} s")
    if isinstance(err, openai.APIConnectionError):
        return SummarizerUnavailable("cannot reach the LLM endpoint")
    status = getattr(err, "status_code", "?")
    return SummarizerUnavailable(f"the LLM endpoint answered HTTP {status}")


def retry_after(err: Exception, attempt: int) -> float:
    """The server's Retry-After (capped at 20 s), else exponential backoff from 0.5 s."""
    server = server_retry_after(err)
    return min(8.0, 0.5 * 2**attempt) if server is None else server


def server_retry_after(err: Exception) -> float | None:
    """The wait the answer's Retry-After (or retry-after-ms) header asks for, capped at 20 s; None without one."""
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return min(20.0, max(0.0, float(value) * scale))
            except ValueError:
                return None
    return None


def strict_schema(node: Any) -> Any:
    """Make a pydantic JSON schema acceptable to strict mode: closed objects, all fields required."""
    if isinstance(node, dict):
        out = {k: strict_schema(v) for k, v in node.items() if k not in ("title", "default")}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out
    if isinstance(node, list):
        return [strict_schema(x) for x in node]
    return node


def chat_client(settings: WorkerSettings, *, api_key: str | None = None) -> openai.OpenAI:
    """The client for the configured endpoint: every call ends by its wall-clock deadline
    (above); retries are ours (`ChatCaller.complete`)."""
    return openai_client(
        api_key=api_key or settings.openai_api_key,
        base_url=settings.openai_base_url,
        timeout=settings.openai_timeout_seconds,
    )


class ChatCaller:
    """What one chat completion needs, shared by the OpenAI summarizers: the client, the model and
    its temperature, the seconds a try may take (`timeout`), the retries and the sleep between them."""

    name = "openai"

    def __init__(
        self,
        client: Any,
        *,
        model: str = "gpt-4o-mini",
        temperature: float = 0.2,
        timeout: float = 25.0,
        max_retries: int = 1,
        sleep: Callable[[float], None] = time.sleep,
        gate: RetryAfterGate | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep
        # Shared with every caller of the same endpoint and model (both summarizers, every lane);
        # a client without a URL (a test's stand-in) gets one of its own.
        base_url = getattr(client, "base_url", None)
        self.gate = gate or (endpoint_gate(base_url, model) if base_url is not None else RetryAfterGate())

    @staticmethod
    def settings_of(settings: WorkerSettings) -> dict[str, Any]:
        """The model and the call's limits as the worker's settings give them (keyword arguments)."""
        return {
            "model": settings.openai_model,
            "temperature": settings.openai_temperature,
            "timeout": settings.openai_timeout_seconds,
            "max_retries": settings.openai_max_retries,
        }

    def complete(self, messages: list[dict[str, str]], answer_format: dict[str, Any], timeout: float | None) -> Any:
        """One chat completion with at most `max_retries` retries (429, 5xx, timeouts, connection
        errors), every try and every wait inside `timeout` seconds of wall clock in all, each try
        inside `self.timeout`."""

        def create(per_try: float) -> Any:
            return self.client.with_options(timeout=per_try, max_retries=0).chat.completions.create(
                model=self.model,
                temperature=self.temperature,
                messages=messages,
                response_format=answer_format,
            )

        return call_within(
            create,
            timeout=self.timeout,
            max_retries=self.max_retries,
            budget=timeout,
            failure=llm_unavailable,
            sleep=self.sleep,
            gate=self.gate,
        )


def usage_tokens(response: Any) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens the endpoint reported; 0 for what it did not."""
    usage = getattr(response, "usage", None)
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
    return getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0, cached


def answer_json(response: Any) -> Any:
    """The JSON the model answered; InvalidDocument when there is none."""
    if not response.choices:
        raise InvalidDocument("the model returned no choices")
    message = response.choices[0].message
    if getattr(message, "refusal", None):
        raise InvalidDocument("the model refused to answer")
    try:
        return json.loads(message.content or "")
    except json.JSONDecodeError as err:
        raise InvalidDocument(f"the model's output is not JSON ({err.msg} at {err.pos})") from err


@contextmanager
def paid_answer(prompt_tokens: int, completion_tokens: int) -> Iterator[None]:
    """Reading an answer that was paid for: one that is not JSON, or not of the schema (a
    ValidationError inside), raises InvalidDocument carrying what it cost, so the run still
    counts it when it asks again."""
    try:
        try:
            yield
        except ValidationError as err:
            raise InvalidDocument(
                f"the model's output does not match the schema: {describe_validation_error(err)}"
            ) from err
    except InvalidDocument as err:
        err.prompt_tokens, err.completion_tokens = prompt_tokens, completion_tokens
        raise

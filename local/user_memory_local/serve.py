"""`user-memory serve`: the memory API over plain HTTP on this machine, for development.

Each request becomes the API Gateway HTTP API (v2) event the deployed API's function receives,
after this server has done what the JWT authorizer does in AWS: it verifies the development
token (`Authorization: Bearer <token>`, see `tokens.py`) and passes its claims in the event.
The Lambda handler itself (`user_memory_functions.api.app.handler`) answers, so what runs here
is what runs deployed, problem details and all. `GET /openapi.json` and `GET /swagger` (Swagger
UI) are public, as in the template.

Powertools' resolver keeps the event being answered in a class attribute shared by every
resolver in the process (Lambda runs one request at a time per process), so the handler is
invoked under one process-wide lock: connections are accepted, read and authenticated in
parallel threads, the handler answers one request at a time.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TextIO

from user_memory.errors import ConfigError, Unauthenticated
from user_memory.http.problems import BAD_REQUEST, INTERNAL, TOO_LARGE, UNAUTHENTICATED, Kind, problem_document

from user_memory_local.apigw import http_event
from user_memory_local.command import cli_command
from user_memory_local.oidc import OidcVerifier
from user_memory_local.tokens import issue_token, verify_token

if TYPE_CHECKING:
    from user_memory.http.app import MemoryApi

__all__ = ["DEFAULT_PORT", "MAX_BODY_BYTES", "ApiServer", "run"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_POOL_SIZE = 4
MAX_BODY_BYTES = 4 * 1024 * 1024  # API Gateway's own limit is 10 MB; the API refuses far less
# The API's description and its Swagger UI are public, as in the template, and so are the root (a
# redirect to the console) and the favicon; everything else needs a token.
PUBLIC_ROUTES = {
    (method, path) for method in ("GET", "HEAD") for path in ("/openapi.json", "/swagger", "/", "/favicon.ico")
}
CONSOLE = "/console"  # the console's page and files: public, as in the template
PROBLEM_JSON = "application/problem+json"
WWW_AUTHENTICATE = 'Bearer realm="user-memory"'
REQUEST_TIMEOUT_SECONDS = 30
# Hop-by-hop and framing headers are this server's to write, not the handler's.
_OWN_HEADERS = {"content-length", "connection", "transfer-encoding", "keep-alive", "date", "server"}

_DIGITS = re.compile(r"[0-9]{1,18}")
_HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]{1,15}")

# One handler invocation at a time in this process (see the module's docstring).
_HANDLER_LOCK = threading.Lock()


class _Refused(Exception):
    """A request this server answers itself, with a problem, before the handler sees it."""

    def __init__(self, kind: Kind, detail: str, *, close: bool = False, headers: Mapping[str, str] | None = None):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.close = close
        self.headers = dict(headers or {})


def _problem_body(status: int, type_: str, title: str, detail: str, instance: str | None = None) -> bytes:
    return json.dumps(
        problem_document(type=type_, title=title, status=status, detail=detail, instance=instance)
    ).encode()


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    owner: ApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a request's own handling: one line, no traceback."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError | TimeoutError):
            return  # the client went away or stalled: nothing to report
        self.owner._log(f"connection from {client_address[0]} failed: {type(err).__name__}: {err}")


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"
    server_version = "user-memory-serve"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_SECONDS

    # -- the standard library's hooks ------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # the base class's name
        pass  # requests are logged once, by _answer; the base class's lines are not wanted

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the standard library answers (a malformed request line, a header too long) as problems."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        self.close_connection = True
        body = _problem_body(code, "about:blank", phrase, message or explain or phrase)
        self._write(code, {"Content-Type": PROBLEM_JSON}, body)
        self.server.owner._log(f"{code} {self._describe_request()}: {message or phrase}")

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` for a body over the limit: 413 at once, before the client sends it."""
        try:
            self._content_length()
        except _Refused as refused:
            self._refuse(refused)
            return False
        return super().handle_expect_100()

    # -- one request -----------------------------------------------------------------------------

    def _answer(self) -> None:
        owner = self.server.owner
        started = time.monotonic()
        method = self.command.upper()
        target = urllib.parse.urlsplit(self.path)
        raw_path = target.path or "/"
        if not raw_path.startswith("/"):
            raw_path = "/" + raw_path
        status = 500
        try:
            body = self._read_body()
            claims = None if is_public(method, raw_path) else self._claims()
            headers = self._request_headers()
            try:
                event = http_event(
                    method,
                    raw_path,
                    query=target.query,
                    headers=headers,
                    body=body,
                    claims=claims,
                    source_ip=self.client_address[0],
                )
            except UnicodeDecodeError:
                raise _Refused(BAD_REQUEST, "the body is not valid UTF-8 text") from None
            result = owner.invoke(event)
            status = int(result.get("statusCode") or 500)
            self._write_result(method, status, result)
            if status >= 400:
                owner._log_failure(method, raw_path, status, result)
        except _Refused as refused:
            status = refused.kind.status
            self._refuse(refused)
            owner._log(f"{status} {method} {raw_path}: {refused.detail}")
        except (ConnectionError, TimeoutError):
            self.close_connection = True
            return
        except Exception as err:  # one line, a 500 problem, never a traceback
            status = 500
            self.close_connection = True
            body_ = _problem_body(500, INTERNAL.type, INTERNAL.title, "the local server failed")
            with suppress(OSError):
                self._write(500, {"Content-Type": PROBLEM_JSON}, body_)
            reason = (str(err).splitlines() or [""])[0][:200]
            owner._log(f"500 {method} {raw_path}: {type(err).__name__}" + (f": {reason}" if reason else ""))
        finally:
            if owner.verbose:
                owner._log(f"{method} {raw_path} -> {status} ({(time.monotonic() - started) * 1000:.0f} ms)")

    def __getattr__(self, name: str) -> Any:
        # Every method goes to the handler, as API Gateway's $default route sends it (TRACE too).
        if name.startswith("do_") and name[3:].isalpha():
            return self._answer
        raise AttributeError(name)

    def _claims(self) -> dict[str, Any]:
        header = self.headers.get("Authorization")
        if header is None:
            raise _Refused(
                UNAUTHENTICATED, "no credentials: send Authorization: Bearer <token>", headers=_challenge(None)
            )
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(
                UNAUTHENTICATED,
                "the Authorization header must be: Bearer <token>",
                headers=_challenge("invalid_request"),
            )
        oidc = self.server.owner.oidc
        try:
            if oidc is not None and oidc.issued(token.strip()):
                return oidc.verify(token.strip())
            return verify_token(token.strip(), secret=self.server.owner.secret)
        except Unauthenticated as err:
            raise _Refused(UNAUTHENTICATED, str(err), headers=_challenge("invalid_token")) from None

    def _content_length(self) -> int | None:
        """The declared body length (None: chunked or none); _Refused when invalid or over the limit."""
        limit = self.server.owner.max_body_bytes
        encoding = (self.headers.get("Transfer-Encoding") or "").strip().lower()
        if encoding:
            if encoding != "chunked":
                raise _Refused(BAD_REQUEST, f"Transfer-Encoding {encoding!r} is not supported", close=True)
            return None
        text = self.headers.get("Content-Length")
        if text is None:
            return 0
        if _DIGITS.fullmatch(text.strip()) is None:  # ASCII only: "²".isdigit(), and int("²") fails
            raise _Refused(BAD_REQUEST, "Content-Length must be a whole number of bytes", close=True)
        length = int(text)
        if length > limit:
            raise _Refused(TOO_LARGE, f"the body is over {limit:,} bytes", close=True)
        return length

    def _read_body(self) -> bytes | None:
        length = self._content_length()
        if length is None:
            data = self._read_chunked(self.server.owner.max_body_bytes)
        else:
            data = self.rfile.read(length) if length else b""
            if len(data) < length:
                raise ConnectionError("the client closed the connection before sending the whole body")
        return data or None

    def _read_chunked(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1026)
            # Hex digits only: int(x, 16) also takes "-1", and read(-1) reads to the end of the
            # connection, past the limit.
            digits = line.split(b";", 1)[0].strip()
            if _HEX_DIGITS.fullmatch(digits) is None:
                raise _Refused(BAD_REQUEST, "malformed chunked body", close=True)
            size = int(digits, 16)
            if size == 0:
                while self.rfile.readline(8194) not in (b"\r\n", b"\n", b""):
                    pass  # trailers are ignored
                return b"".join(parts)
            total += size
            if total > limit:
                raise _Refused(TOO_LARGE, f"the body is over {limit:,} bytes", close=True)
            parts.append(self.rfile.read(size))
            self.rfile.readline(3)

    def _request_headers(self) -> dict[str, str]:
        # API Gateway joins repeated headers with commas, lower-cases names and keeps no Authorization
        # it has consumed; the claims travel in the event instead.
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            if key == "authorization":
                continue
            headers[key] = f"{headers[key]},{value}" if key in headers else value
        return headers

    # -- writing ---------------------------------------------------------------------------------

    def _refuse(self, refused: _Refused) -> None:
        if refused.close:
            self.close_connection = True
        kind = refused.kind
        body = _problem_body(kind.status, kind.type, kind.title, refused.detail)
        self._write(kind.status, {"Content-Type": PROBLEM_JSON, **refused.headers}, body)

    def _write_result(self, method: str, status: int, result: Mapping[str, Any]) -> None:
        raw = result.get("body") or ""
        body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
        headers: list[tuple[str, str]] = []
        for name, value in (result.get("headers") or {}).items():
            if name.lower() in _OWN_HEADERS:
                continue
            for one in value if isinstance(value, list) else [value]:
                headers.append((name, str(one)))
        for cookie in result.get("cookies") or []:
            headers.append(("Set-Cookie", str(cookie)))
        if status == 401 and not any(n.lower() == "www-authenticate" for n, _ in headers):
            headers.append(("WWW-Authenticate", WWW_AUTHENTICATE))
        self._write(status, headers, b"" if method == "HEAD" else body, length=len(body))

    def _write(
        self,
        status: int,
        headers: Mapping[str, str] | list[tuple[str, str]],
        body: bytes,
        *,
        length: int | None = None,
    ) -> None:
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        for name, value in headers.items() if isinstance(headers, Mapping) else headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)
        self.wfile.flush()

    def _describe_request(self) -> str:
        line = getattr(self, "requestline", "") or ""
        return line[:200] or "request"


def is_public(method: str, path: str) -> bool:
    """A route anyone may call without a token: the OpenAPI document, the root, the console's files."""
    if (method, path) in PUBLIC_ROUTES:
        return True
    return method in ("GET", "HEAD") and (path == CONSOLE or path.startswith(CONSOLE + "/"))


def _challenge(error: str | None) -> dict[str, str]:
    if error is None:
        return {"WWW-Authenticate": WWW_AUTHENTICATE}
    return {"WWW-Authenticate": f'{WWW_AUTHENTICATE}, error="{error}"'}


class ApiServer:
    """The API on a local port: `start()` serves from a background thread, `serve_forever()` from
    this one; `close()` stops either. Port 0 picks a free port (see `url`)."""

    def __init__(
        self,
        api: MemoryApi,
        *,
        secret: str,
        host: str = DEFAULT_HOST,
        port: int = 0,
        verbose: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        log: TextIO | None = None,
        handler: Callable[..., dict[str, Any]] | None = None,
        oidc: OidcVerifier | None = None,
    ) -> None:
        if not secret:
            raise ConfigError("the token secret is empty")
        self.api = api
        self.secret = secret
        self.oidc = oidc  # an OpenID Connect issuer whose tokens are accepted too (the console's sign-in)
        self.verbose = verbose
        self.max_body_bytes = max_body_bytes
        self._log_stream = log
        if handler is None:
            from user_memory_functions.api.app import handler as lambda_handler

            handler = lambda_handler
        self._handler = handler
        self._httpd = _HttpServer((host, port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> ApiServer:
        """Serve from a background thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name="user-memory-serve", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve from this thread until `close()` (from another thread) or KeyboardInterrupt."""
        self._httpd.serve_forever()

    def close(self) -> None:
        """Stop accepting, close the socket; requests being answered finish on their own threads."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
        self._httpd.server_close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by the request handler ---------------------------------------------------------------

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        """The Lambda handler's answer to one event (one at a time in this process)."""
        from user_memory_local.poller import FakeLambdaContext

        with _HANDLER_LOCK, _quiet_metrics():
            return self._handler(event, FakeLambdaContext(function_name="api"), api=self.api)

    def _log(self, line: str) -> None:
        stream = self._log_stream or sys.stderr
        with suppress(OSError, ValueError):
            print(f"serve: {line}", file=stream, flush=True)

    def _log_failure(self, method: str, path: str, status: int, result: Mapping[str, Any]) -> None:
        detail = ""
        try:
            problem = json.loads(result.get("body") or "")
            if isinstance(problem, dict):
                slug = str(problem.get("type", "")).rsplit("/", 1)[-1]
                detail = f": {slug}: {problem.get('detail', '')}"
                if status >= 500 and problem.get("instance"):
                    detail += f" (request {problem['instance']}; --verbose logs the service's reason)"
        except (ValueError, TypeError):
            pass
        self._log(f"{status} {method} {path}{detail}"[:500])


def console_url(base: str, token: str) -> str:
    """The console's URL signed in with a development token (in the fragment: never sent to a server)."""
    return f"{base.rstrip('/')}/console#token={token}"


@contextmanager
def _quiet_metrics() -> Iterator[None]:
    """The service's metrics dropped around each invocation (locally nothing collects them)."""
    from user_memory.observability import metrics

    metrics.clear_metrics()
    try:
        yield
    finally:
        metrics.clear_metrics()


# -- the command ------------------------------------------------------------------------------------


def prepare_environment(*, verbose: bool) -> None:
    """Powertools' switches for a local server; call before the handler's module is imported.
    Values already set in the environment win."""
    for name, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "INFO" if verbose else "CRITICAL",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)


def run(
    *,
    host: str,
    port: int,
    database_url: Callable[[], str],
    verbose: bool = False,
    out: TextIO | None = None,
    oidc_issuer: str | None = None,
    oidc_audiences: list[str] | None = None,
    console_client_id: str | None = None,
    console_user: object | None = None,
    console_operator: bool = False,
    worker: bool = False,
) -> int:
    """`user-memory serve`: settings from the environment (DOCUMENT_SCHEMA, REQUIRE_IF_MATCH,
    OPERATOR_SCOPE, DATABASE_POOL_SIZE...), the database, then the server until Ctrl-C.

    With `oidc_issuer`, that issuer's tokens are accepted too (for `oidc_audiences`, default the
    console's client id) and the console signs in there; with `console_user`, the console URL
    printed is signed in as that user (an operator with `console_operator`)."""
    import logging
    import signal

    prepare_environment(verbose=verbose)
    # The metrics are dropped (see _quiet_metrics): Powertools warns at every flush of an empty set.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    from user_memory.adapters.postgres import open_pool
    from user_memory.config import ApiSettings
    from user_memory.http.app import create_api
    from user_memory.observability import logger
    from user_memory.runtime import build_api

    from user_memory_local.embedded import user_memory_home
    from user_memory_local.tokens import token_secret

    out = out or sys.stdout
    level = logging.getLevelName(os.environ["POWERTOOLS_LOG_LEVEL"].strip().upper())
    if isinstance(level, int):
        logging.getLogger(logger.name).setLevel(level)
    given: dict[str, Any] = {} if os.environ.get("DATABASE_POOL_SIZE") else {"database_pool_size": DEFAULT_POOL_SIZE}
    if oidc_issuer:
        given.update(console_oidc_issuer=oidc_issuer, console_client_id=console_client_id or "")
    if not (os.environ.get("EXPORT_BUCKET") or os.environ.get("EXPORT_DIR")):
        given["export_dir"] = str(user_memory_home() / "exports")  # the local kit's exports: files
    settings = ApiSettings.from_env(**given)
    secret = token_secret(user_memory_home())
    oidc = None
    if oidc_issuer:
        audiences = oidc_audiences or ([console_client_id] if console_client_id else [])
        oidc = OidcVerifier(oidc_issuer, audiences)
    pool = open_pool(database_url(), size=settings.database_pool_size)
    queue = (
        LocalWorkerQueue(database_url(), export_dir=settings.export_dir, export_bucket=settings.export_bucket)
        if worker and not settings.queue_url
        else None
    )
    if queue is not None:  # the operators' queued work (a run's undo, the trigger) runs here
        settings = ApiSettings.model_validate({**settings.model_dump(), "queue_url": queue.queue_url})
    try:
        api = create_api(build_api(settings, pool=pool, sqs_client=queue.sqs if queue else None), settings)
        try:
            server = ApiServer(api, secret=secret, host=host, port=port, verbose=verbose, oidc=oidc)
        except OSError as err:
            reason = err.strerror or str(err)
            raise ConfigError(f"cannot listen on {host}:{port}: {reason} (choose another --port)") from None

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        # Ctrl-C stops, and so does SIGINT from a shell that started this in the background (which
        # would otherwise leave SIGINT ignored), and SIGTERM.
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        print(f"user-memory API on {server.url} (schema {settings.document_schema!r})", file=out)
        print(f"  a token:  {cli_command()} token <user id>   (--operator for /admin routes)", file=out)
        print(f'  then:     curl -H "Authorization: Bearer $TOKEN" {server.url}/me/memory', file=out)
        print(f"  OpenAPI:  {server.url}/openapi.json   Swagger UI: {server.url}/swagger", file=out)
        if oidc_issuer:  # the console then takes no token from its address: no signed-in URL to print
            print(f"  console:  {server.url}/console   (signs in at {oidc_issuer})", file=out)
        elif console_user is not None:
            scopes = [settings.operator_scope] if console_operator else []
            print(
                f"  console:  {console_url(server.url, issue_token(console_user, secret=secret, scopes=scopes))}",
                file=out,
            )
        else:
            # `console` assumes the default address: name this server's when it listens elsewhere.
            where = "" if server.url == f"http://{DEFAULT_HOST}:{DEFAULT_PORT}" else f" --url {server.url}"
            print(
                f"  console:  {cli_command()} console <user id>{where} [--operator]   (prints its URL, signed in)",
                file=out,
            )
        print("Ctrl-C stops.", file=out, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.close()
        print("stopped", file=out, flush=True)
        return 0
    finally:
        if queue is not None:
            queue.close()
        pool.close()


class LocalWorkerQueue:
    """With --worker and without QUEUE_URL, `serve` keeps a worker queue of its own: moto's SQS in this process, drained
    by the worker's handler code (jobs/worker.process_batch, the rule-based summarizer unless
    SUMMARIZER says otherwise) on a background thread, so the routes that queue work (an operator's
    undo of a run, the conversation trigger, an export) work here as deployed. The worker writes
    exports where the API reads them (its EXPORT_DIR or EXPORT_BUCKET): queued, an export would
    otherwise end in the DLQ and stay pending."""

    def __init__(self, dsn: str, *, export_dir: str | None = None, export_bucket: str | None = None) -> None:
        import boto3
        from moto import mock_aws
        from user_memory.config import WorkerSettings
        from user_memory.jobs.worker import process_batch
        from user_memory.runtime import build_worker

        from user_memory_local.poller import LambdaSqsPoller, create_queues

        self._aws = mock_aws()
        self._aws.start()
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.queue_url, dlq_url = create_queues(self.sqs, name="user-memory-serve")
        # The API's export folder: the export_user and import_user messages it queues run here.
        settings = WorkerSettings.from_env(
            database_url=dsn,
            queue_url=self.queue_url,
            summarizer=os.environ.get("SUMMARIZER") or "rules",
            export_dir=export_dir,
            export_bucket=export_bucket,
        )
        self.services = build_worker(settings, sqs_client=self.sqs)
        self._poller = LambdaSqsPoller(
            self.sqs, self.queue_url, dlq_url, lambda event, context: process_batch(event, context, self.services)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="user-memory-serve-worker", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                received = self._poller.poll_once()
            except Exception as err:  # the queue's own trouble: said once a poll, the server stays up
                print(f"serve: local worker queue: {type(err).__name__}: {err}"[:300], file=sys.stderr, flush=True)
                received = 0
            if not received:
                self._stop.wait(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.services.close()
        self._aws.stop()

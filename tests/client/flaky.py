"""A proxy in front of the API that misbehaves on cue: the answers a client meets on a bad day
(429 with Retry-After, 503, a dropped connection, a stall, a body trickled byte by byte), then
the real API's answer. Every request it sees is recorded (method, path, headers)."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Faults:
    """What the next requests meet, one fault each, in order: "429", "503", "drop" (closed
    unanswered), "lost" (sent on to the API, its answer dropped), "stall", "trickle"; after them
    every request goes through."""

    plan: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    stall_seconds: float = 3.0
    retry_after: str = "0"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> str | None:
        with self.lock:
            return self.plan.pop(0) if self.plan else None


def _handler(upstream: str, faults: Faults) -> type[BaseHTTPRequestHandler]:
    target = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            faults.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            fault = faults.next()
            if fault == "drop":
                self.close_connection = True
                self.connection.close()
                return
            if fault == "stall":
                time.sleep(faults.stall_seconds)
                self.close_connection = True
                return
            if fault == "trickle":
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "100000")
                self.end_headers()
                try:
                    for _ in range(100000):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.05)
                except OSError:
                    pass
                self.close_connection = True
                return
            if fault in ("429", "503"):
                payload = b'{"message":"Too Many Requests"}' if fault == "429" else b'{"message":"Service Unavailable"}'
                self.send_response(int(fault))
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                if fault == "429":
                    self.send_header("retry-after", faults.retry_after)
                self.end_headers()
                self.wfile.write(payload)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                if fault == "lost":
                    self.close_connection = True
                    self.connection.close()
                    return
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _any

    return Handler


@contextmanager
def flaky_proxy(upstream: str, faults: Faults) -> Iterator[str]:
    """The proxy's base URL for the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, faults))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

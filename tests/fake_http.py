"""The HTTP side of the local fake endpoints (fake_openai.py, fake_embeddings.py): a quiet handler
that reads and answers JSON, and a server on a free port of 127.0.0.1 for the length of a block."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """Reads a request's JSON body and answers JSON; logs nothing."""

    def log_message(self, *args: Any) -> None:
        pass

    def read_json(self) -> Any:
        """The request's body, parsed (json.JSONDecodeError when it is not JSON; {} when empty)."""
        length = int(self.headers.get("content-length", 0))
        return json.loads(self.rfile.read(length) or b"{}")

    def send_json(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer `payload` (JSON bytes) whole; a client that has gone away is not an error."""
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` running on 127.0.0.1 (a free port) for the block; its OpenAI-style base URL (`.../v1`)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()

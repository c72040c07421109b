"""A local OpenAI-compatible HTTP endpoint with scripted answers, for the real `openai` client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(content: str, prompt_tokens: int = 1200, completion_tokens: int = 300) -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content, "refusal": None},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class FakeOpenAI:
    """Replies are consumed in order: (status, body dict or None, delay seconds)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, Any, float, dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        self.default: Any = None

    def reply(self, body: Any, status: int = 200, delay: float = 0.0, headers: dict[str, str] | None = None) -> None:
        self.replies.append((status, body, delay, headers or {}))


@contextmanager
def fake_openai_server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("content-length", 0))
            fake.requests.append({"path": self.path, "body": json.loads(self.rfile.read(length) or b"{}")})
            status, body, delay, headers = fake.replies.pop(0) if fake.replies else (200, fake.default, 0.0, {})
            if delay:
                time.sleep(delay)
            payload = json.dumps(body if body is not None else {"error": {"message": "no reply scripted"}}).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                if status == 429 and not headers:
                    self.send_header("retry-after-ms", "10")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()

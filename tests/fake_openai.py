"""A local OpenAI-compatible HTTP endpoint with scripted answers, for the real `openai` client.

Answers are scripted in order (`FakeOpenAI.reply`): plain completions (`completion`), edit-mode
summaries (`edits_completion` of `edit`s) or tool calls (`tool_call_completion` of `tool_call`s).
Every request is recorded (`FakeOpenAI.requests`: path, JSON body, headers), so a test can check
what the client sent (`FakeOpenAI.messages`, `system_prompt`, `user_prompt`, `response_format`).

Requests may come at once (the worker's lanes): each is recorded with the endpoint's monotonic
clock when it arrived (`at`), `max_in_flight` is the most it was answering at the same time, and
`answered_429` the times it sent each 429. `default_delay` delays every unscripted answer (a
model's latency), and a reply scripted with `in_flight=n` waits until n requests are in flight
(or IN_FLIGHT_WAIT_SECONDS) before it is sent: what it answers then cannot overtake them.

A reply scripted with `trickle=s` is sent one byte every `s` seconds, from the status line on
(as an endpoint stuck behind a slow proxy): every read the client makes gets a byte before its
per-read timeout, so only a wall-clock deadline ends the call. The endpoint stops when the
client hangs up, or after TRICKLE_LIMIT_SECONDS.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fake_http import JsonHandler, serving

# A trickling reply gives up after this long, so a client without a deadline still ends (late).
TRICKLE_LIMIT_SECONDS = 30.0
# A reply that waits for requests in flight gives up waiting after this long.
IN_FLIGHT_WAIT_SECONDS = 10.0


def completion(
    content: str,
    prompt_tokens: int = 1200,
    completion_tokens: int = 300,
    *,
    cached_tokens: int | None = None,
    usage: bool = True,
) -> dict[str, Any]:
    """A chat completion answering `content`; `cached_tokens` adds prompt_tokens_details, and
    `usage=False` leaves usage out (as some OpenAI-compatible servers do)."""
    body: dict[str, Any] = {
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
    if cached_tokens is not None:
        body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if not usage:
        del body["usage"]
    return body


def edit(
    op: str, path: str, value: Any = None, reason: str = "because", *, value_json: str | None = None
) -> dict[str, Any]:
    """One item of an edit-mode answer: `value` is sent as JSON text (or `value_json` as given)."""
    if value_json is None:
        value_json = "" if op == "remove" else json.dumps(value)
    return {"op": op, "path": path, "value_json": value_json, "reason": reason}


def edits_completion(*edits: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A completion whose content is an edit-mode answer, {"edits": [...]}."""
    return completion(json.dumps({"edits": list(edits)}), **kwargs)


def tool_call(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    """One function tool call; `arguments` is a dict (sent as JSON text) or JSON text as is."""
    return {
        "id": call_id or f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
    }


def tool_call_completion(
    *calls: dict[str, Any], content: str | None = None, prompt_tokens: int = 1200, completion_tokens: int = 30
) -> dict[str, Any]:
    """A completion whose answer is the given tool calls (finish_reason "tool_calls")."""
    body = completion(content or "", prompt_tokens, completion_tokens)
    choice = body["choices"][0]
    choice["finish_reason"] = "tool_calls"
    choice["message"] = {"role": "assistant", "content": content, "refusal": None, "tool_calls": list(calls)}
    return body


class FakeOpenAI:
    """Replies are consumed in order of arrival: (status, body dict or None, delay seconds,
    headers, trickle, requests in flight to wait for)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, Any, float, dict[str, str], float, int]] = []
        self.requests: list[dict[str, Any]] = []
        self.default: Any = None
        self.default_delay = 0.0
        self.trickled: list[int] = []  # bytes each trickling reply got out before it stopped
        self.in_flight = 0
        self.max_in_flight = 0
        self.answered_429: list[float] = []
        self.changed = threading.Condition()

    def arrived(self, request: dict[str, Any]) -> tuple[int, Any, float, dict[str, str], float, int]:
        """Record a request in flight; the reply it gets."""
        with self.changed:
            request["at"] = time.monotonic()
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.changed.notify_all()
            if self.replies:
                return self.replies.pop(0)
            return (200, self.default, self.default_delay, {}, 0.0, 0)

    def wait_in_flight(self, n: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.in_flight >= n, timeout=IN_FLIGHT_WAIT_SECONDS)

    def done(self) -> None:
        with self.changed:
            self.in_flight -= 1

    def reply(
        self,
        body: Any,
        status: int = 200,
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
        *,
        trickle: float = 0.0,
        in_flight: int = 0,
    ) -> None:
        """Script the next answer; `trickle`: seconds between its bytes (0: all at once);
        `in_flight`: sent once that many requests are in flight."""
        self.replies.append((status, body, delay, headers or {}, trickle, in_flight))

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        """The chat messages of a recorded request (the last by default)."""
        return list(self.requests[index]["body"].get("messages", []))

    def system_prompt(self, index: int = -1) -> str:
        """The system message of a recorded request ("" when it has none)."""
        return next((m.get("content") or "" for m in self.messages(index) if m.get("role") == "system"), "")

    def user_prompt(self, index: int = -1) -> str:
        """The last user message of a recorded request ("" when it has none)."""
        users = [m.get("content") or "" for m in self.messages(index) if m.get("role") == "user"]
        return users[-1] if users else ""

    def response_format(self, index: int = -1) -> Any:
        """The response_format a recorded request asked for (None when it asked for none)."""
        return self.requests[index]["body"].get("response_format")


@contextmanager
def fake_openai_server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()

    class Handler(JsonHandler):
        def do_POST(self) -> None:  # http.server's name
            request = {
                "path": self.path,
                "body": self.read_json(),
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
            status, body, delay, headers, trickle, in_flight = fake.arrived(request)
            try:
                if in_flight:
                    fake.wait_in_flight(in_flight)
                if delay:
                    time.sleep(delay)
            finally:
                # No longer in flight once the answer starts: the client cannot send its next
                # request on this lane before it has it, so the count never runs ahead.
                fake.done()
            payload = json.dumps(body if body is not None else {"error": {"message": "no reply scripted"}}).encode()
            if trickle:
                self._trickle(status, payload, trickle)
                return
            if status == 429:
                fake.answered_429.append(time.monotonic())
            self.send_json(status, payload, headers if headers or status != 429 else {"retry-after-ms": "10"})

        def _trickle(self, status: int, payload: bytes, interval: float) -> None:
            self.close_connection = True
            head = f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
            data = head.encode() + payload
            ends = time.monotonic() + TRICKLE_LIMIT_SECONDS
            sent = 0
            try:
                while sent < len(data) and time.monotonic() < ends:
                    self.wfile.write(data[sent : sent + 1])
                    self.wfile.flush()
                    sent += 1
                    time.sleep(interval)
            except (BrokenPipeError, ConnectionResetError):
                pass
            fake.trickled.append(sent)

    with serving(Handler) as url:
        yield fake, url

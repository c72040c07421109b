"""A local stand-in of OpenAI's Files and Batches endpoints (and chat completions), for the real
`openai` client, built from their public contract:

- POST /v1/files: a multipart upload (fields `purpose` and `file`); answers a file object.
- POST /v1/batches: {input_file_id, endpoint, completion_window, metadata}; the input file must
  exist, have purpose "batch", and hold JSONL lines {custom_id (unique), method POST, url equal
  to the endpoint, body}; answers a batch object in status `validating`.
- GET /v1/batches/{id}: the batch object; the test moves it on (`FakeBatchAPI.run`, `.end`):
  validating, in_progress, then completed, expired, failed or cancelled, with output_file_id
  and error_file_id once ended.
- POST /v1/batches/{id}/cancel: the batch goes to `cancelling`.
- GET /v1/files/{id}/content: the file's bytes. An output line is {"id", "custom_id",
  "response": {"status_code", "request_id", "body"}, "error": null}; an error line has the
  request's error answer as its response, or `response` null and an `error` {code, message}
  (an expired batch's unanswered requests: code batch_expired).
- POST /v1/chat/completions: the online endpoint, answered by the same model as the batch.

The model is `respond(body) -> chat completion body`, one function for both paths, so a night
through the batch and a night online get the same answer for the same request.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.parser import BytesParser
from typing import Any

from tests.fake_http import JsonHandler, serving

Respond = Callable[[dict[str, Any]], dict[str, Any]]


class FakeBatchAPI:
    """The endpoint's state: files, batches, and every request it received."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.chat: list[dict[str, Any]] = []  # the online calls' bodies
        self.refuse_batches = 0  # answer the next N batch creations with this HTTP status (0: none)
        self.lock = threading.Lock()

    # -- what tests look at -------------------------------------------------------------------

    def calls(self, method: str, pattern: str) -> int:
        """How many requests matched a method and a path pattern."""
        return sum(1 for m, p in self.requests if m == method and re.fullmatch(pattern, p))

    def input_lines(self, batch_id: str) -> list[dict[str, Any]]:
        """The requests of a batch's input file."""
        data = self.files[self.batches[batch_id]["input_file_id"]]["data"]
        return [json.loads(line) for line in data.decode().splitlines() if line.strip()]

    # -- what tests do --------------------------------------------------------------------------

    def run(self, batch_id: str) -> None:
        """The batch is being processed."""
        self.batches[batch_id].update(status="in_progress", in_progress_at=int(time.time()))

    def end(
        self,
        batch_id: str,
        status: str = "completed",
        *,
        failing: dict[str, int] | None = None,
        answered: set[str] | None = None,
    ) -> None:
        """End a batch: `failing` items (custom_id: HTTP status) get an error answer; an
        `expired` batch answers only the `answered` custom_ids; a `failed` batch has no files."""
        batch = self.batches[batch_id]
        now = int(time.time())
        batch.update(status=status, **{f"{status}_at": now})
        if status == "failed":
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": "failed"}]}
            return
        out: list[str] = []
        errors: list[str] = []
        for line in self.input_lines(batch_id):
            cid = line["custom_id"]
            line_id = f"batch_req_{uuid.uuid4().hex[:12]}"
            if status != "completed" and (answered is None or cid not in answered):
                error = {"code": "batch_expired", "message": "This request could not be executed before the window."}
                errors.append(json.dumps({"id": line_id, "custom_id": cid, "response": None, "error": error}))
                continue
            if failing and cid in failing:
                response = {"status_code": failing[cid], "request_id": "req", "body": {"error": {"message": "x"}}}
                errors.append(json.dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}))
                continue
            response = {"status_code": 200, "request_id": "req", "body": self.respond(line["body"])}
            out.append(json.dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}))
        batch["output_file_id"] = self._file("batch_output", "\n".join(out).encode() + b"\n") if out else None
        batch["error_file_id"] = self._file("batch_output", "\n".join(errors).encode() + b"\n") if errors else None
        batch["request_counts"] = {"total": len(out) + len(errors), "completed": len(out), "failed": len(errors)}

    def _file(self, purpose: str, data: bytes, filename: str = "output.jsonl") -> str:
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        self.files[file_id] = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "data": data,
        }
        return file_id

    def create_batch(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file = self.files.get(request.get("input_file_id", ""))
        if file is None or file["purpose"] != "batch":
            return 400, {"error": {"message": "input_file_id must name a file of purpose batch"}}
        if request.get("completion_window") != "24h" or request.get("endpoint") != "/v1/chat/completions":
            return 400, {"error": {"message": "endpoint /v1/chat/completions and completion_window 24h"}}
        ids = []
        for raw in file["data"].decode().splitlines():
            if not raw.strip():
                continue
            line = json.loads(raw)
            if line.get("method") != "POST" or line.get("url") != request["endpoint"] or "body" not in line:
                return 400, {"error": {"message": "each line: method POST, url the endpoint, a body"}}
            ids.append(line["custom_id"])
        if len(ids) != len(set(ids)) or not ids:
            return 400, {"error": {"message": "custom_id must be unique, and a batch not empty"}}
        batch_id = f"batch_{uuid.uuid4().hex[:24]}"
        now = int(time.time())
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": request["endpoint"],
            "errors": None,
            "input_file_id": file["id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "expires_at": now + 24 * 3600,
            "request_counts": {"total": len(ids), "completed": 0, "failed": 0},
            "metadata": request.get("metadata"),
        }
        return 200, self.batches[batch_id]


def _multipart(content_type: str, data: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body's fields: name -> (filename, bytes)."""
    message = BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + data)
    fields = {}
    for part in message.get_payload():  # type: ignore[union-attr]
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


@contextmanager
def fake_batch_server(respond: Respond) -> Iterator[tuple[FakeBatchAPI, str]]:
    """The stand-in on a free local port for the block: (its state, its base URL .../v1)."""
    fake = FakeBatchAPI(respond)

    class Handler(JsonHandler):
        def answer(self, status: int, body: Any) -> None:
            self.send_json(status, json.dumps(body).encode())

        def do_POST(self) -> None:  # http.server's name
            fake.requests.append(("POST", self.path))
            if self.path == "/v1/files":
                length = int(self.headers.get("content-length", 0))
                fields = _multipart(self.headers["content-type"], self.rfile.read(length))
                filename, data = fields["file"]
                purpose = fields["purpose"][1].decode()
                file_id = fake._file(purpose, data, filename or "upload.jsonl")
                self.answer(200, {k: v for k, v in fake.files[file_id].items() if k != "data"})
            elif m := re.fullmatch(r"/v1/batches/([\w-]+)/cancel", self.path):
                batch = fake.batches[m.group(1)]
                batch.update(status="cancelling", cancelling_at=int(time.time()))
                self.answer(200, batch)
            elif self.path == "/v1/batches" and fake.refuse_batches:
                self.answer(fake.refuse_batches, {"error": {"message": "refused"}})
            elif self.path == "/v1/batches":
                self.answer(*fake.create_batch(self.read_json()))
            elif self.path == "/v1/chat/completions":
                body = self.read_json()
                fake.chat.append(body)
                self.answer(200, fake.respond(body))
            else:
                self.answer(404, {"error": {"message": "no such route"}})

        def do_GET(self) -> None:  # http.server's name
            fake.requests.append(("GET", self.path))
            if m := re.fullmatch(r"/v1/batches/([\w-]+)", self.path):
                batch = fake.batches.get(m.group(1))
                self.answer(200, batch) if batch else self.answer(404, {"error": {"message": "no such batch"}})
            elif m := re.fullmatch(r"/v1/files/([\w-]+)/content", self.path):
                file = fake.files.get(m.group(1))
                if file is None:
                    self.answer(404, {"error": {"message": "no such file"}})
                    return
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(file["data"])))
                self.end_headers()
                self.wfile.write(file["data"])
            else:
                self.answer(404, {"error": {"message": "no such route"}})

    with serving(Handler) as url:
        yield fake, url

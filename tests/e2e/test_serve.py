"""`user-memory serve` over real HTTP: `ApiServer` on a free port with development tokens, and the
command itself as a subprocess that starts, answers and stops on SIGINT."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.http.openapi import openapi_text
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer
from user_memory_local.tokens import issue_token

from tests.api_client import Reply

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

SECRET = "serve-test-secret-of-at-least-32-bytes"
OPERATOR = "user-memory/operator"
ROOT = Path(__file__).resolve().parents[2]


def call(
    base: str,
    method: str,
    path: str,
    *,
    token: str | None = None,
    body: Any = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Reply:
    data = None
    all_headers = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        all_headers["Content-Type"] = content_type
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, dict(response.headers.items()), response.read().decode())
    except urllib.error.HTTPError as err:
        return Reply(err.code, dict(err.headers.items()), err.read().decode())


def merge_memory(base: str, token: str, body: Any, **kw: Any) -> Reply:
    """PATCH /me/memory with a merge patch."""
    return call(base, "PATCH", "/me/memory", token=token, body=body, content_type="application/merge-patch+json", **kw)


def patch_memory(base: str, token: str, ops: Any, **kw: Any) -> Reply:
    """PATCH /me/memory with RFC 6902 operations."""
    return call(base, "PATCH", "/me/memory", token=token, body=ops, content_type="application/json-patch+json", **kw)


def assert_problem(answer: Reply, status: int) -> dict[str, Any]:
    assert answer.status == status, answer.text
    assert answer.header("Content-Type") == "application/problem+json"
    body = answer.json
    assert {"type", "title", "status", "detail"} <= body.keys() and body["status"] == status
    return body


@pytest.fixture
def api(pool: ConnectionPool):
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor"})
    return create_api(build_api(settings, pool=pool), settings)


@pytest.fixture
def log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def server(api, log) -> Iterator[ApiServer]:
    with ApiServer(api, secret=SECRET, port=0, log=log) as running:
        yield running


def token_for(user: str, **kw: Any) -> str:
    return issue_token(user, secret=SECRET, **kw)


def test_a_whole_session_over_http(server):
    base, user = server.url, str(uuid.uuid4())
    token = token_for(user)

    first = call(base, "GET", "/me/memory", token=token)
    assert first.status == 200 and first.json["version"] == 0 and first.header("ETag") == '"0"'

    written = merge_memory(
        base, token, {"personal_info": {"name": "Ann"}}, headers={"If-Match": first.header("ETag") or ""}
    )
    assert written.status == 200 and written.json["version"] == 1, written.text
    ops = [{"op": "add", "path": "/personal_info/learning_goals/-", "value": "algebra"}]
    second = patch_memory(base, token, ops, headers={"If-Match": '"1"'})
    assert second.json["version"] == 2 and second.header("ETag") == '"2"'
    stale = patch_memory(base, token, ops, headers={"If-Match": '"1"'})
    assert assert_problem(stale, 412)["current_version"] == 2

    history = call(base, "GET", "/me/memory/history?limit=1", token=token).json
    assert [i["version"] for i in history["items"]] == [2] and history["next_before"] == 2
    diff = call(base, "GET", "/me/memory/diff?from=1&to=2", token=token).json
    assert diff["patch"] == [{"op": "add", "path": "/personal_info/learning_goals/0", "value": "algebra"}]

    pruned = call(base, "DELETE", "/me/memory?section=personal_info", token=token, headers={"If-Match": '"2"'})
    assert pruned.status == 200 and pruned.json["document"]["personal_info"]["name"] == ""
    reverted = call(base, "POST", "/me/memory/revert", token=token, body={"version": 2})
    assert reverted.json["version"] == 4 and reverted.json["document"]["personal_info"]["name"] == "Ann"

    key = urllib.parse.quote("notes/été 1", safe="")
    put = call(base, "PUT", f"/me/kv/default/{key}", token=token, body={"value": {"n": 1}, "ttl_seconds": 600})
    assert put.status == 200 and put.json["key"] == "notes/été 1" and put.json["expires_at"]
    assert call(base, "GET", f"/me/kv/default/{key}", token=token).json["value"] == {"n": 1}
    assert [i["key"] for i in call(base, "GET", "/me/kv/default", token=token).json["items"]] == ["notes/été 1"]

    erased = call(base, "DELETE", "/me", token=token)
    assert erased.status == 200
    assert erased.json["removed"]["user_memory_snapshots"] == 4 and erased.json["removed"]["user_memory_kv"] == 1
    assert call(base, "GET", "/me/memory", token=token).json["version"] == 0
    assert_problem(call(base, "GET", f"/me/kv/default/{key}", token=token), 404)


def test_without_a_valid_token_every_route_but_the_document_is_401(server, log):
    base, user = server.url, str(uuid.uuid4())
    for headers in ({}, {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer "}):
        answer = call(base, "GET", "/me/memory", headers=headers)
        assert_problem(answer, 401)
        assert (answer.header("WWW-Authenticate") or "").startswith("Bearer")

    expired = token_for(user, ttl_seconds=60, now=time.time() - 3600)
    answer = call(base, "GET", "/me/memory", token=expired)
    assert "expired" in assert_problem(answer, 401)["detail"]
    assert 'error="invalid_token"' in (answer.header("WWW-Authenticate") or "")

    forged = issue_token(user, secret="another-secret-of-at-least-32-bytes")
    assert "signature" in assert_problem(call(base, "PUT", "/me/memory", token=forged, body={}), 401)["detail"]
    assert_problem(call(base, "GET", "/me/memory", token="not.a.jwt"), 401)
    assert_problem(call(base, "GET", "/admin/users/x/memory"), 401)

    document = call(base, "GET", "/openapi.json")
    assert document.status == 200 and document.text == openapi_text()
    assert document.header("Content-Type") == "application/json"
    # One line per refused request, never a traceback.
    lines = log.getvalue().splitlines()
    assert len(lines) == 7, lines
    assert all(line.startswith("serve: 401 ") for line in lines)
    assert "Traceback" not in log.getvalue()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_the_root_sends_a_browser_to_the_console_and_the_favicon_is_no_401(server, log):
    base = server.url
    # When a browser opens the root, without a token
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirected:
        opener.open(base + "/", timeout=30)
    # Then it is sent to the console, and the page names the console and Swagger UI
    assert redirected.value.code == 302 and redirected.value.headers["Location"] == "console"
    page = redirected.value.read().decode()
    assert 'href="console"' in page and 'href="swagger"' in page
    with urllib.request.urlopen(base + "/", timeout=30) as followed:
        assert followed.url == base + "/console" and "user-memory console" in followed.read().decode()
    # And the favicon every page load asks for is an empty answer, not a 401
    icon = call(base, "GET", "/favicon.ico")
    assert icon.status == 204 and icon.text == ""
    # And none of it was logged as a refusal
    assert log.getvalue() == ""


def test_head_answers_as_get_without_a_body(server):
    # When `curl -I` asks for Swagger UI, the document and the console
    for path in ("/swagger", "/openapi.json", "/console"):
        request = urllib.request.Request(server.url + path, method="HEAD")
        with urllib.request.urlopen(request, timeout=30) as response:
            # Then each is a 200 with GET's headers and no body
            get = call(server.url, "GET", path)
            assert response.status == 200 and response.read() == b""
            assert response.headers["Content-Type"] == get.header("Content-Type")
    # And HEAD on a route without GET is still a 405 naming what it takes
    request = urllib.request.Request(server.url + "/me/memory/revert", method="HEAD")
    request.add_header("Authorization", f"Bearer {token_for(str(uuid.uuid4()))}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 405 and "POST" in refused.value.headers["Allow"]


def test_swagger_ui_renders_every_path_in_chromium_without_a_token(server):
    # Given the local server, and a real browser with no token
    # When Swagger UI is opened
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
         "--dump-dom", f"{server.url}/swagger"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    # Then the page rendered every path of the document (its JavaScript ran on the inlined document)
    rendered = set(re.findall(r'class="opblock-summary-path" data-path="([^"]+)"', dom))
    assert rendered == set(json.loads(openapi_text())["paths"])
    assert {"/me/memory/prompt", "/me/todos/{element_id}", "/tasks/trigger-memory-generation"} <= rendered


def test_users_are_kept_apart_and_operators_use_admin_routes(server):
    base = server.url
    alice, bob = str(uuid.uuid4()), str(uuid.uuid4())
    body = {"personal_info": {"name": "Bob"}}
    merge_memory(base, token_for(bob), body)
    assert_problem(call(base, "GET", f"/users/{bob}/memory", token=token_for(alice)), 403)
    assert_problem(call(base, "GET", f"/admin/users/{bob}/memory", token=token_for(alice)), 403)
    assert call(base, "GET", f"/users/{alice}/memory", token=token_for(alice)).status == 200
    operator = token_for(alice, scopes=[OPERATOR])
    seen = call(base, "GET", f"/admin/users/{bob}/memory", token=operator)
    assert seen.status == 200 and seen.json["document"]["personal_info"]["name"] == "Bob"


def test_concurrent_requests_of_different_users_each_get_their_own_data(server):
    base = server.url
    users = [str(uuid.uuid4()) for _ in range(8)]
    errors: list[str] = []

    def session(user: str) -> None:
        token = token_for(user)
        for i in range(6):
            put = call(base, "PUT", f"/me/kv/default/k{i}", token=token, body={"value": user})
            read = call(base, "GET", "/me/memory", token=token)
            if put.status != 200 or put.json["value"] != user or read.json.get("user_id") != user:
                errors.append(f"{user}: {put.status} {put.text[:80]} / {read.text[:80]}")

    threads = [threading.Thread(target=session, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    for user in users:
        values = {i["value"] for i in call(base, "GET", "/me/kv/default", token=token_for(user)).json["items"]}
        assert values == {user}


def test_bodies_over_the_limit_are_413_and_bad_framing_is_400(api, log):
    with ApiServer(api, secret=SECRET, max_body_bytes=1024, log=log) as small:
        token = token_for(str(uuid.uuid4()))
        big = {"value": "x" * 2000}
        assert_problem(call(small.url, "PUT", "/me/kv/default/k", token=token, body=big), 413)
        assert call(small.url, "PUT", "/me/kv/default/k", token=token, body={"value": 1}).status == 200

        # Raw requests: chunked bodies are read (and capped), a bad Content-Length is refused.
        host, port = small.host, small.port

        def raw(request: bytes) -> bytes:
            with socket.create_connection((host, port), timeout=10) as s:
                s.sendall(request)
                s.shutdown(socket.SHUT_WR)
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
                return b"".join(chunks)

        auth = f"Authorization: Bearer {token}\r\n".encode()
        chunked = (
            b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth + b"Connection: "
            b'close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"val\r\n9\r\nue": 42}\r\n0\r\n\r\n'
        )
        assert b" 200 OK" in raw(chunked).split(b"\r\n")[0]
        too_long = (
            b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n"
            b"800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n"
        )
        assert b" 413 " in raw(too_long).split(b"\r\n")[0]
        bad_length = b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: lots\r\n\r\n"
        reply = raw(bad_length)
        assert b" 400 " in reply.split(b"\r\n")[0] and b"application/problem+json" in reply
        expect = (
            b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 5000\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        reply = raw(expect)
        assert b" 413 " in reply.split(b"\r\n")[0] and b"100 Continue" not in reply
        garbage = raw(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 400 " in garbage.split(b"\r\n")[0] and b"application/problem+json" in garbage
        bad_utf8 = (
            b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + auth
            + b"Content-Length: 2\r\nConnection: close\r\n\r\n\xff\xfe"
        )
        assert b" 400 " in raw(bad_utf8).split(b"\r\n")[0]
    assert "Traceback" not in log.getvalue()


def test_verbose_logs_one_line_per_request(api):
    out = io.StringIO()
    with ApiServer(api, secret=SECRET, verbose=True, log=out) as loud:
        token = token_for(str(uuid.uuid4()))
        call(loud.url, "GET", "/me/memory", token=token)
        call(loud.url, "GET", "/openapi.json")
        call(loud.url, "GET", "/nothing", token=token)
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines if "->" in line] == [
        "serve: GET /me/memory -> 200",
        "serve: GET /openapi.json -> 200",
        "serve: GET /nothing -> 404",
    ]
    assert any(line.startswith("serve: 404 GET /nothing: not-found") for line in lines)


def test_a_handler_that_fails_is_a_500_problem_and_one_log_line(api, log):
    def broken(event: Any, context: Any, api: Any = None) -> dict[str, Any]:
        raise RuntimeError("boom\nsecond line")

    with ApiServer(api, secret=SECRET, log=log, handler=broken) as failing:
        answer = call(failing.url, "GET", "/me/memory", token=token_for(str(uuid.uuid4())))
    assert_problem(answer, 500)
    assert log.getvalue().splitlines() == ["serve: 500 GET /me/memory: RuntimeError: boom"]


def test_close_stops_serving(api):
    running = ApiServer(api, secret=SECRET).start()
    url = running.url
    running.close()
    running.close()  # twice is fine
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/openapi.json", timeout=5)


# -- the command -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_serve_command_starts_answers_and_stops_on_sigint(database_url, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "USER_MEMORY_HOME": str(tmp_path),
        "USER_MEMORY_TOKEN_SECRET": SECRET,
        "DOCUMENT_SCHEMA": "tutor",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "USER_MEMORY_DEBUG", "POWERTOOLS_LOG_LEVEL"):
        env.pop(name, None)
    command = [sys.executable, "-m", "user_memory_local.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--database-url", database_url],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(6)]
        assert banner[0].startswith(f"user-memory API on http://127.0.0.1:{port}"), banner
        assert any("user-memory token <user id>" in line for line in banner)
        # And the console's hint names this port: the command it prints opens this server
        hint = next(line for line in banner if line.lstrip().startswith("console:"))
        assert f"console <user id> --url http://127.0.0.1:{port} " in hint, hint
        base = f"http://127.0.0.1:{port}"
        user = str(uuid.uuid4())
        token = token_for(user)
        written = merge_memory(base, token, {"personal_info": {"name": "Ann"}})
        assert written.status == 200 and written.json["user_id"] == user
        assert_problem(call(base, "GET", "/me/memory"), 401)
        assert call(base, "GET", "/openapi.json").status == 200
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out.strip().endswith("stopped")
    assert "Traceback" not in err and "Traceback" not in out
    assert err.strip().splitlines() == ["serve: 401 GET /me/memory: no credentials: send Authorization: Bearer <token>"]


def test_the_serve_command_reports_a_port_in_use_on_one_line(database_url, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "USER_MEMORY_HOME": str(tmp_path), "USER_MEMORY_TOKEN_SECRET": SECRET}
        env.pop("USER_MEMORY_DEBUG", None)
        done = subprocess.run(
            [sys.executable, "-m", "user_memory_local.cli", "serve", "--port", str(port)]
            + ["--database-url", database_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (choose another --port)"
    ]

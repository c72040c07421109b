"""An adversarial review of the memory API: each test pins a hole that was found and closed.

Bad input that reached the service's code as a 500 (JSON the parsers choke on, non-ASCII digits,
base64 bodies that are not UTF-8), activity payloads over the queue's limits, personal content in
the logs, idempotency keys reused for another request, loose operator-scope parsing, a prompt
whose ETag named another version than its text, and `user-memory serve`'s framing checks.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.session import UserSession
from user_memory.http.app import MemoryApi
from user_memory_functions.api.app import handler
from user_memory_local.apigw import http_event
from user_memory_local.poller import FakeLambdaContext
from user_memory_local.serve import ApiServer
from user_memory_local.tokens import issue_token

from tests.e2e.helpers import (
    JSON_PATCH,
    MERGE_PATCH,
    OPERATOR,
    ApiFactory,
    activity,
    assert_problem,
    etag,
    head_version,
    merge,
    new_client,
    ok,
    version_count,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

APPLICATION_JSON = {"Content-Type": "application/json"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# Bodies whose JSON the parsers cannot take, or whose values PostgreSQL cannot store; %s is where
# the hostile value goes, inside an otherwise valid body of each route.
HOSTILE_VALUES = {
    "nested-5000": nested(5000),  # RecursionError in the JSON decoder
    "nested-700": nested(700),  # parses, then RecursionError in the service's diff
    "int-5000-digits": "1" + "0" * 5000,  # ValueError: over Python's int digit limit
    "1e400": "1e400",  # parses as float('inf'): not storable as jsonb
    "NaN": "NaN",
    "lone-surrogate": '"\\ud800"',  # not encodable as UTF-8
}
HOSTILE_BODIES = {
    "PUT /me/memory": ("PUT", "/me/memory", APPLICATION_JSON, '{"personal_info": {"name": %s}}'),
    "PATCH merge": ("PATCH", "/me/memory", MERGE_PATCH, '{"personal_info": {"name": %s}}'),
    "PATCH json-patch": (
        "PATCH",
        "/me/memory",
        JSON_PATCH,
        '[{"op": "add", "path": "/personal_info/learning_goals/-", "value": %s}]',
    ),
    "PUT kv": ("PUT", "/me/kv/default/k", APPLICATION_JSON, '{"value": %s}'),
    "POST activity": (
        "POST",
        "/me/activity",
        APPLICATION_JSON,
        '{"items": [{"occurred_at": "2026-11-23T10:00:00Z", "kind": "k", "external_id": "e", "payload": {"x": %s}}]}',
    ),
}


@pytest.mark.parametrize("value", HOSTILE_VALUES.values(), ids=HOSTILE_VALUES.keys())
@pytest.mark.parametrize("route", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_json_the_parsers_or_the_database_cannot_take_is_4xx_and_writes_nothing(alice, route, value):
    method, path, headers, template = route
    reply = alice.request(method, path, body=template % value, headers=headers)
    assert reply.status in (400, 422), reply.text
    assert_problem(reply, reply.status)
    export = ok(alice.get("/me/export"))
    assert (export["versions"], export["kv"], export["activity"]) == ([], [], [])


def test_a_base64_body_that_is_not_utf8_or_not_base64_is_400(api):
    user = str(uuid.uuid4())
    for method, path, content_type in [
        ("PUT", "/me/kv/default/k", "application/json"),
        ("PATCH", "/me/memory", "application/merge-patch+json"),
    ]:
        for body in (base64.b64encode(b'{"value": "\xff"}').decode(), "!!! not base64 !!!"):
            event = http_event(method, path, headers={"Content-Type": content_type}, body="{}", claims={"sub": user})
            event["body"], event["isBase64Encoded"] = body, True
            result = handler(event, FakeLambdaContext(function_name="api"), api=api)
            assert result["statusCode"] == 400, result["body"]
            assert json.loads(result["body"])["type"].endswith("/invalid-json")


def test_activity_payloads_and_bodies_keep_the_queues_limits(alice):
    # An activity payload is at most 16 KB, as on the queue.
    big = {"items": [activity("big", payload={"text": "x" * 17_000})]}
    assert "16,384" in assert_problem(alice.post("/me/activity", json_body=big), 422, "invalid-input")["detail"]
    # A body is never read whole when it is far over what any route takes.
    many = {"items": [activity(f"e{i}", payload={"text": "x" * 15_000}) for i in range(40)]}
    assert_problem(alice.post("/me/activity", json_body=many), 413, "too-large")
    assert ok(alice.get("/me/export"))["activity"] == []
    ok(alice.post("/me/activity", json_body={"items": [activity("fits", payload={"text": "x" * 15_000})]}))


@pytest.mark.parametrize("value", ['"\u00b2"', '"\u0663"', "\u00b9", '"1", "2"', '"1, 2"'])
def test_if_match_is_ascii_digits_only(alice, value):
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    assert_problem(merge(alice, {"personal_info": {"name": "Bea"}}, **{"If-Match": value}), 400, "bad-request")
    assert head_version(alice) == 1


def test_a_kv_key_that_is_not_percent_encoded_utf8_is_422_not_another_key(alice):
    # %ff and %fe used to decode to the same key (U+FFFD), so one silently overwrote the other.
    assert_problem(alice.put("/me/kv/default/%ff", json_body={"value": 1}), 422, "invalid-input")
    assert_problem(alice.get("/me/kv/default/%fe"), 422, "invalid-input")
    assert_problem(alice.delete("/me/kv/default/a%C3"), 422, "invalid-input")
    assert ok(alice.get("/me/kv/default"))["items"] == []


def test_a_missing_kv_entry_does_not_put_its_key_in_the_logs(alice, service_log):
    secret_key = "diagnosis: anxiety"
    body = assert_problem(alice.get(f"/me/kv/notes/{secret_key.replace(' ', '%20')}"), 404, "not-found")
    assert_problem(alice.delete(f"/me/kv/notes/{secret_key.replace(' ', '%20')}"), 404, "not-found")
    assert "notes" in body["detail"]
    logged = service_log.lines
    assert logged and not any("anxiety" in line for line in logged)


# -- idempotency keys ---------------------------------------------------------------------------------


def test_an_idempotency_key_reused_for_another_request_is_422_and_writes_nothing(alice):
    key = {"Idempotency-Key": "edit-1"}
    first = ok(merge(alice, {"personal_info": {"name": "Ann"}}, **key))
    ok(merge(alice, {"personal_info": {"language": "fr"}}))  # another write moves the head on
    # The same request again (a retry) is answered with what it wrote, and writes nothing.
    again = merge(alice, {"personal_info": {"name": "Ann"}}, **key)
    assert ok(again)["status"] == "idempotent" and ok(again)["version"] == first["version"] == 1
    assert again.headers.get("Idempotent-Replayed") == "true" and etag(again) == '"1"'
    # Another body, or another route, with that key is a client bug: 422, not a silent no-op.
    for reply in (
        merge(alice, {"personal_info": {"name": "Bea"}}, **key),
        alice.patch(
            "/me/memory",
            body=json.dumps([{"op": "replace", "path": "/personal_info/name", "value": "Cy"}]),
            headers={**JSON_PATCH, **key},
        ),
        alice.put("/me/memory", json_body={}, headers=key),
        alice.post("/me/memory/revert", json_body={"version": 0}, headers=key),
        alice.delete("/me/memory", headers=key),
    ):
        body = assert_problem(reply, 422, "invalid-input")
        assert "Idempotency-Key" in body["detail"]
    assert head_version(alice) == 2 and version_count(alice) == 2
    assert ok(alice.get("/me/memory"))["document"]["personal_info"]["name"] == "Ann"


def test_idempotency_keys_are_per_user(api):
    alice, bob = new_client(api), new_client(api)
    key = {"Idempotency-Key": "shared-key"}
    assert ok(merge(alice, {"personal_info": {"name": "Ann"}}, **key))["status"] == "written"
    bob_write = ok(merge(bob, {"personal_info": {"name": "Bob"}}, **key))
    assert bob_write["status"] == "written" and bob_write["document"]["personal_info"]["name"] == "Bob"
    assert ok(alice.get("/me/memory"))["document"]["personal_info"]["name"] == "Ann"


# -- operators ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "claims",
    [
        {"scope": f"openid,{OPERATOR}"},  # one scope token (RFC 6749 scope tokens may hold commas)
        {"scope": f"{OPERATOR},"},
        {"cognito:groups": f"admins,{OPERATOR}"},
        {"cognito:groups": f"[admins,{OPERATOR}]"},
    ],
)
def test_the_operator_scope_is_a_whole_space_separated_token(api, claims):
    alice, bob = new_client(api), new_client(api)
    ok(merge(bob, {"personal_info": {"name": "Bob"}}))
    reply = alice.get(f"/admin/users/{bob.user_id}/memory", claims={"sub": alice.user_id, **claims})
    assert_problem(reply, 403, "forbidden")


# -- the prompt's ETag ----------------------------------------------------------------------------------


class _RacingSessions:
    """The API's sessions, with another writer committing a version right after the first head read."""

    def __init__(self, inner: Any, pool: ConnectionPool) -> None:
        self.inner = inner
        self.other = MemoryStore(PostgresRecorder(pool))

    @contextmanager
    def session(self, user_id: object, *, operator: str | None = None) -> Iterator[UserSession]:
        with self.inner.session(user_id, operator=operator) as service:
            real_head, other = service.memory.store.head, self.other
            reads: list[int] = []

            def head(uid: object) -> Any:
                found = real_head(uid)
                if not reads:  # the other writer commits right after this request's first read
                    doc = {**found.document, "personal_info": {**found.document["personal_info"], "name": "Zed"}}
                    other.append(uid, doc, expected_version=found.version, source="other")
                reads.append(found.version)
                return found

            service.memory.store.head = head  # type: ignore[method-assign]
            yield service


def test_the_prompt_text_is_the_version_its_etag_names(make_api: ApiFactory, pool: ConnectionPool):
    api_: MemoryApi = make_api("tutor")
    alice = new_client(api_)
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    api_.sessions = _RacingSessions(api_.sessions, pool)  # type: ignore[assignment]
    reply = alice.get("/me/memory/prompt")
    body = ok(reply)
    version = ok(alice.get("/me/memory", query={"version": body["version"]}))
    assert etag(reply) == f'"{body["version"]}"'
    assert version["document"]["personal_info"]["name"] in body["text"], (body, version["document"])


# -- user-memory serve -----------------------------------------------------------------------------------


SECRET = "review-test-secret-of-at-least-32-bytes"


def _raw(host: str, port: int, request: bytes, *, close_write: bool = True, timeout: float = 5) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(request)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
                if not close_write and b"\r\n\r\n" in b"".join(chunks):
                    break
        except TimeoutError:
            chunks.append(b"<timed out>")
        return b"".join(chunks)


def test_serve_refuses_non_ascii_lengths_and_negative_chunk_sizes_at_once(api):
    log = io.StringIO()
    with ApiServer(api, secret=SECRET, max_body_bytes=1024, log=log) as small:
        token = issue_token(uuid.uuid4(), secret=SECRET)
        head = (
            b"PUT /me/kv/default/c HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\n".encode()
            + b"Connection: close\r\n"
        )
        reply = _raw(small.host, small.port, head + "Content-Length: \u00b2\r\n\r\n{}".encode("latin-1"))
        assert b" 400 " in reply.split(b"\r\n")[0], reply[:200]
        # A chunk size of -1 used to read the connection to its end, past the body limit.
        reply = _raw(
            small.host,
            small.port,
            head + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n" + b"x" * 4096,
            close_write=False,
        )
        assert b" 400 " in reply.split(b"\r\n")[0], reply[:200]
    assert "Traceback" not in log.getvalue() and " 500 " not in log.getvalue()


# -- response sizes --------------------------------------------------------------------------------------

LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024  # a synchronous invocation's payload; over it, API Gateway answers 500


def test_a_kv_page_of_the_largest_values_fits_in_a_lambda_response(alice):
    # 10 KB of UTF-8 as emoji is 30 KB of JSON with \\u escapes: 1,000 of them (the page size limit) is
    # 30 MB, which Lambda cannot return. A page is cut short instead, and the cursor goes on from there.
    value = "\U0001f9ee" * 2500
    keys = [f"k{i:04d}" for i in range(220)]
    for key in keys:
        ok(alice.put(f"/me/kv/big/{key}", json_body={"value": value}))
    seen: list[str] = []
    after = None
    while True:
        reply = alice.get("/me/kv/big", query={"limit": 1000, **({"after": after} if after else {})})
        assert len(reply.text.encode()) <= LAMBDA_RESPONSE_LIMIT
        page = ok(reply)
        seen += [i["key"] for i in page["items"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == keys


# -- the OpenAPI document ------------------------------------------------------------------------------------


def test_the_document_describes_what_api_gateway_answers_itself():
    # Deployed, a refused token never reaches the function: API Gateway's JWT authorizer answers 401
    # {"message": "Unauthorized"} (application/json, not a problem), and throttling is its 429.
    from user_memory.http.openapi import openapi_text

    document = json.loads(openapi_text())
    gateway = document["components"]["schemas"]["GatewayError"]
    assert gateway["required"] == ["message"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            for status in ("401", "404", "413", "429", "500", "503"):
                content = responses[status]["content"]
                assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/GatewayError"}, (
                    method,
                    path,
                    status,
                )
            success = responses.get("200") or responses["202"]  # a refresh is accepted (202), not done
            if success["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Written"}:
                assert {"ETag", "Idempotent-Replayed"} <= set(success["headers"]), (method, path)

"""With the X-Ray SDK opted in (XRAY_SDK_TRACING), a trace never carries content: the handlers'
responses (memories, exports, key-value entries) and exceptions' messages stay out of what is sent
to the X-Ray daemon. Each probe runs in a fresh interpreter set up as Lambda sets one up (task
root, a sampled trace header, the daemon's address), so the SDK patches what it patches in
production and streams every subsegment to a local UDP socket standing in for the daemon."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-" + uuid.uuid4().hex  # content only the probe's requests carry

API_PROBE = """
import sys, uuid
from user_memory.adapters.postgres import open_pool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from tests.api_client import ApiClient

url, canary = sys.argv[1], sys.argv[2]
settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "user_state"})
client = ApiClient(create_api(build_api(settings, pool=open_pool(url, size=1)), settings), uuid.uuid4())
answers = [
    client.put("/me/memory", json_body={"summary": canary}),
    client.get("/me/memory"),
    client.get("/me/export"),
    client.put("/me/kv/notes/k", json_body={"value": canary}),
    client.get("/me/kv/notes/k"),
]
assert [a.status for a in answers] == [200] * 5, [(a.status, a.text) for a in answers]
assert all(canary in a.text for a in answers[1:]), "the responses carry the canary"
"""

RAISING_PROBE = """
import sys
import psycopg
from user_memory.observability import traced

url, canary = sys.argv[1], sys.argv[2]


@traced
def handler(event, context):
    conn = psycopg.connect(url)  # the SDK's proxy (`with` would hand out the bare connection)
    try:
        with conn.cursor() as cursor:  # each execute a subsegment
            cursor.execute("SELECT %s::int", [canary])  # the driver's message quotes the value
    except psycopg.DataError:
        pass
    finally:
        conn.close()
    raise ValueError(f"refused {canary}")


try:
    handler({}, None)
except ValueError:
    pass
else:
    raise AssertionError("the handler raised nothing")
"""


@pytest.fixture
def daemon() -> Iterator[socket.socket]:
    """A UDP socket where the X-Ray daemon would listen."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.5)
    yield sock
    sock.close()


def _traced_run(probe: str, daemon: socket.socket, *args: str) -> list[dict[str, Any]]:
    """Run the probe as a traced Lambda invocation would; the segments the daemon received."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "AWS_XRAY", "_X_AMZN"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "XRAY_SDK_TRACING": "true",
            "LAMBDA_TASK_ROOT": str(ROOT),  # Lambda's: the SDK takes its context from the trace header
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    subprocess.run([sys.executable, "-c", probe, *args], env=env, cwd=ROOT, check=True, timeout=120)
    received = []
    while True:
        try:
            datagram = daemon.recv(65_536).decode()
        except TimeoutError:
            return received
        header, _, body = datagram.partition("\n")
        assert json.loads(header) == {"format": "json", "version": 1}
        received.append(json.loads(body))


def _all(entities: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for entity in entities:
        yield entity
        yield from _all(entity.get("subsegments", []))


def test_a_traced_api_records_its_handler_but_no_response(daemon: socket.socket, database_url: str):
    # Given the API function with the X-Ray SDK on, in a sampled invocation
    # When a memory and a key-value entry are written and read, and the account exported
    entities = _traced_run(API_PROBE, daemon, database_url, CANARY)
    # Then the handler's subsegments reached the daemon, with no metadata and no content
    names = [e["name"] for e in _all(entities)]
    assert names.count("## handler") == 5, names
    assert not [e for e in _all(entities) if e.get("metadata")]
    assert not [e for e in entities if CANARY in json.dumps(e)]


def test_a_traced_failure_records_the_error_type_but_no_message(daemon: socket.socket, database_url: str):
    # Given a traced handler whose driver call fails on a value, then raises an error quoting it
    entities = _traced_run(RAISING_PROBE, daemon, database_url, CANARY)
    # Then the daemon got the faults with their types and stacks, and neither message
    causes = [x for e in _all(entities) for x in (e.get("cause") or {}).get("exceptions", [])]
    assert {"ValueError", "InvalidTextRepresentation"} <= {c["type"] for c in causes}, causes
    assert all(c.get("stack") for c in causes)
    assert not [e for e in entities if CANARY in json.dumps(e)]
    assert not [c for c in causes if "message" in c]

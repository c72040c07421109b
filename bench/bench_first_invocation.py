"""Each function's first invocation in a fresh process, as Lambda's cold start runs it: the
handler module's import, the composition on the first event (settings, pool, adapters) and that
event, then a second event in the same process for comparison. Interpreter start excluded (the
clock starts on the child's first line); bytecode compiled first; medians of N runs.

    .venv/bin/python bench/bench_first_invocation.py [--runs 5]

The events are the real shapes (tests/events/): the API a `GET /me/memory` of a user with a
memory, the worker one refresh_user message of a user with a day of activity (rule-based
summarizer), the fan-out the daily scheduled event over users with activity (its SQS calls go to
a local stand-in for SendMessageBatch), retention the daily scheduled event. One embedded
PostgreSQL, migrated, seeded once. Each worker and API run takes a user of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import ROOT, fresh_database

FUNCTIONS = ("api", "worker", "fanout", "retention")

CHILD = """
import time
start = time.perf_counter()
import json, sys
import user_memory_functions.{name}.app as app
imported = time.perf_counter()

class Context:
    function_name = "{name}"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:{name}"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    def get_remaining_time_in_millis(self):
        return 100_000

first, second = json.load(open(sys.argv[1]))
answer = app.handler(first, Context())
invoked = time.perf_counter()
app.handler(second, Context())
again = time.perf_counter()
print(json.dumps({{"import": imported - start, "first": invoked - start, "second": again - invoked,
                  "answer": answer if isinstance(answer, dict) else None}}))
"""


class _FakeAws(BaseHTTPRequestHandler):
    """AWS's JSON protocol for the two calls the functions make: SQS SendMessageBatch (every entry
    accepted) and Secrets Manager GetSecretValue (the DSN)."""

    dsn = ""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("X-Amz-Target", "").startswith("secretsmanager."):
            self._answer({"Name": body["SecretId"], "SecretString": self.dsn, "VersionId": "v1"})
            return
        entries = body.get("Entries", [])
        self._answer(
            {
                "Successful": [
                    {
                        "Id": e["Id"],
                        "MessageId": str(uuid.uuid4()),
                        "MD5OfMessageBody": hashlib.md5(e["MessageBody"].encode()).hexdigest(),  # noqa: S324 (SQS's)
                    }
                    for e in entries
                ],
                "Failed": [],
            }
        )

    def _answer(self, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _seed(dsn: str, users: int, day: date) -> list[uuid.UUID]:
    from user_memory.adapters.postgres import open_pool
    from user_memory_local.demo import demo_user_id, seed

    pool = open_pool(dsn, size=1)
    try:
        seed(pool, users, day)
    finally:
        pool.close()
    return [demo_user_id(n) for n in range(users)]


def _sqs_body(user: uuid.UUID, day: date) -> dict[str, Any]:
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    message = {
        "type": "refresh_user",
        "user_ids": [str(user)],
        "window": {"start": start.isoformat(), "end": (start + timedelta(days=1)).isoformat()},
        "run_key": f"daily:{day.isoformat()}",
    }
    from user_memory_local.poller import sqs_record

    return {"Records": [sqs_record(message_id=str(uuid.uuid4()), body=json.dumps(message))]}


def _api_event(user: uuid.UUID) -> dict[str, Any]:
    from user_memory_local.apigw import http_event

    claims = {"sub": str(user), "iss": "https://issuer.test", "aud": "user-memory"}
    return http_event("GET", "/me/memory", claims=claims)


def _scheduled(day: date) -> dict[str, Any]:
    from user_memory_local.demo import scheduled_event

    return scheduled_event(day)


MODES = ("DATABASE_URL", "secret")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    day = date(2026, 11, 21)
    dsn = fresh_database("bench_first_invocation")
    users = _seed(dsn, 4 * args.runs + 12, day)
    aws = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAws)
    _FakeAws.dsn = dsn
    threading.Thread(target=aws.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{aws.server_port}"
    links = Path(tempfile.mkdtemp()) / "links"
    links.mkdir()
    (links / "user_memory_functions").symlink_to(ROOT / "functions")
    base = {k: v for k, v in os.environ.items() if k not in {"XRAY_SDK_TRACING", "DATABASE_URL"}}
    base |= {
        "PYTHONPATH": f"{ROOT / 'layers' / 'core'}{os.pathsep}{links}",
        "SUMMARIZER": "rules",
        "QUEUE_URL": f"{endpoint}/123456789012/user-memory-worker",
        "AWS_ENDPOINT_URL_SQS": endpoint,
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
    }
    environments = {
        "DATABASE_URL": base | {"DATABASE_URL": dsn},
        "secret": base | {"DATABASE_SECRET_NAME": "user-memory/service-dsn"},  # as deployed
    }
    worker_users = iter(users[: 4 * args.runs + 8])
    api_users = list(users[4 * args.runs + 8 :])
    scratch = Path(tempfile.mkdtemp())

    def run(name: str, events: tuple[dict[str, Any], dict[str, Any]], mode: str = "DATABASE_URL") -> dict[str, Any]:
        path = scratch / f"{name}.json"
        path.write_text(json.dumps(events))
        command = [sys.executable, "-c", CHILD.format(name=name), str(path)]
        done = subprocess.run(command, env=environments[mode], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"bench_first_invocation: {name} failed: {done.stderr.strip().splitlines()[-1]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result["logs"] = done.stdout.strip().splitlines()[:-1]
        return result

    # The API's users get a memory first (a worker run each), outside any timing.
    for user in api_users:
        run("worker", (_sqs_body(user, day), _sqs_body(user, day)))

    def events(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        if name == "worker":
            return _sqs_body(next(worker_users), day), _sqs_body(next(worker_users), day)
        if name == "api":
            return _api_event(api_users[0]), _api_event(api_users[1])
        return _scheduled(day), _scheduled(day)

    for mode in MODES:  # bytecode compiled, and each answer checked, before anything is timed
        for name in FUNCTIONS:
            result = run(name, events(name), mode)
            answer = result["answer"]
            if name == "api" and answer["statusCode"] != 200:
                raise SystemExit(f"bench_first_invocation: the API answered {answer['statusCode']}")
            if name == "worker" and answer.get("batchItemFailures"):
                raise SystemExit(f"bench_first_invocation: the worker failed its record: {result['logs'][-3:]}")
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for name in FUNCTIONS:
            for mode in MODES:
                samples.setdefault((name, mode), []).append(run(name, events(name), mode))
    aws.shutdown()

    def median(name: str, mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[(name, mode)])

    print(f"first invocation, fresh process, medians of {args.runs} (interpreter start excluded)")
    heads = ("import", "+ compose + event, DSN in DATABASE_URL", "the same, DSN from a secret", "a second event")
    print(f"{'function':<10} {heads[0]:>8} {heads[1]:>40} {heads[2]:>28} {heads[3]:>15}")
    for name in FUNCTIONS:
        print(
            f"{name:<10} {median(name, 'DATABASE_URL', 'import'):>7.3f}s "
            f"{median(name, 'DATABASE_URL', 'first'):>39.3f}s {median(name, 'secret', 'first'):>27.3f}s "
            f"{median(name, 'DATABASE_URL', 'second') * 1000:>12.1f} ms"
        )


if __name__ == "__main__":
    main()

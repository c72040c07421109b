"""API benchmark: what the HTTP layer adds over the store calls it makes, the API function's cold
start, and requests/s through `user-memory serve` with concurrent clients.

    python bench/bench_api.py [--users 200] [--versions 20] [--samples 2000] [--clients 16] [--seconds 10]

Per route, two timings on the same database and documents, interleaved:
  - handler: an API Gateway HTTP API v2 event through the real Lambda handler (claims parsed,
    request validated, one transaction as the end user under RLS, response serialized);
  - store: the bare store call(s) the route makes, on a pooled autocommit connection.
"added" is handler p50 minus store p50. The target for reads is <= 1 ms p50.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from _common import fresh_database, pct, table
from user_memory.adapters.kv import PostgresKv
from user_memory.adapters.postgres import PostgresRecorder, open_pool
from user_memory.config import ApiSettings
from user_memory.domain.memory.patching import make_patch
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_functions.api.app import handler
from user_memory_local.apigw import http_event
from user_memory_local.poller import FakeLambdaContext

SCHEMA = "tutor"


def tutor_document(rng: random.Random, n: int) -> dict[str, Any]:
    return {
        "personal_info": {"name": f"Learner {n}", "language": "en", "learning_goals": ["fractions", "reading"]},
        "areas_to_improve": [
            {"topic": f"topic {i}", "evidence": [f"mistake {i}.{j}" for j in range(3)], "severity": 1 + i % 5}
            for i in range(rng.randint(5, 12))
        ],
        "knowledge_strengths": [
            {"topic": f"strength {i}", "evidence": [f"did well {i}"], "level": "intermediate"} for i in range(6)
        ],
    }


def seed(api_settings: ApiSettings, pool: Any, users: int, versions: int) -> list[uuid.UUID]:
    store = MemoryStore(PostgresRecorder(pool), checkpoint_interval=api_settings.checkpoint_interval)
    kv = PostgresKv(pool)
    rng = random.Random(7)
    ids = []
    for n in range(users):
        uid = uuid.uuid4()
        doc = tutor_document(rng, n)
        from user_memory.domain.memory.document import validate_document

        for v in range(versions):
            doc = validate_document(doc, SCHEMA)
            doc["areas_to_improve"][0]["evidence"] = [f"mistake at {v}"]
            store.append(uid, doc, expected_version=v, source="daily summary")
        kv.put(uid, "default", "last_icebreaker", {"text": "What did you read this week?"})
        ids.append(uid)
    return ids


def claims(uid: uuid.UUID) -> dict[str, str]:
    return {"sub": str(uid), "iss": "https://issuer.bench", "aud": "user-memory"}


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def route_latency(api: Any, pool: Any, ids: list[uuid.UUID], samples: int, versions: int) -> list[tuple[str, str]]:
    store = MemoryStore(PostgresRecorder(pool))
    kv = PostgresKv(pool)
    ctx = FakeLambdaContext(function_name="api")
    rng = random.Random(11)

    def call(event: dict[str, Any]) -> None:
        reply = handler(event, ctx, api=api)
        if reply["statusCode"] != 200:
            raise SystemExit(f"benchmark request failed: {reply['statusCode']} {reply.get('body', '')[:200]}")

    mid = versions // 2
    routes: list[tuple[str, Callable[[uuid.UUID], dict[str, Any]], Callable[[uuid.UUID], Any]]] = [
        ("GET /me/memory", lambda u: http_event("GET", "/me/memory", claims=claims(u)), lambda u: store.head(u)),
        (
            "GET /me/memory?version=N",
            lambda u: http_event("GET", "/me/memory", query={"version": mid}, claims=claims(u)),
            lambda u: store.at(u, mid),
        ),
        (
            "GET /me/memory/history",
            lambda u: http_event("GET", "/me/memory/history", query={"limit": 20}, claims=claims(u)),
            lambda u: store.history(u, limit=21),
        ),
        (
            "GET /me/memory/diff",
            lambda u: http_event("GET", "/me/memory/diff", query={"from": 1, "to": versions}, claims=claims(u)),
            lambda u: store.diff(u, 1, versions),
        ),
        (
            "GET /me/memory/changes",
            lambda u: http_event("GET", "/me/memory/changes", query={"since": mid}, claims=claims(u)),
            lambda u: make_patch(store.at(u, mid).document, store.head(u).document),
        ),
        (
            "GET /me/kv/default/{key}",
            lambda u: http_event("GET", "/me/kv/default/last_icebreaker", claims=claims(u)),
            lambda u: kv.get(u, "default", "last_icebreaker"),
        ),
    ]
    rows = []
    for name, event_for, bare in routes:
        handler_s, store_s = [], []
        for _ in range(50):  # warm both paths (prepared statements, caches)
            u = rng.choice(ids)
            call(event_for(u))
            bare(u)
        for _ in range(samples):
            u = rng.choice(ids)
            event = event_for(u)
            handler_s.append(timed(lambda: call(event)))  # noqa: B023
            store_s.append(timed(lambda: bare(u)))  # noqa: B023
        h50, s50 = pct(handler_s, 50) * 1000, pct(store_s, 50) * 1000
        rows.append(
            (
                name,
                f"handler p50 {h50:.3f} ms (p99 {pct(handler_s, 99) * 1000:.3f}), "
                f"store p50 {s50:.3f} ms, added {h50 - s50:.3f} ms",
            )
        )

    # A write: PATCH merge (rebased, no If-Match) against the store's own head read + append.
    handler_s, store_s = [], []
    for i in range(samples // 4):
        u = rng.choice(ids)
        body = json.dumps({"personal_info": {"timezone": f"Etc/GMT+{i % 12}"}})
        event = http_event(
            "PATCH", "/me/memory", body=body, headers={"content-type": "application/merge-patch+json"}, claims=claims(u)
        )
        handler_s.append(timed(lambda: call(event)))  # noqa: B023
        u2 = rng.choice(ids)

        def bare_write(u2: uuid.UUID = u2, i: int = i) -> None:
            head = store.head(u2)
            doc = dict(head.document)
            doc["personal_info"] = {**doc["personal_info"], "preferred_name": f"p{i}"}
            store.append(u2, doc, expected_version=head.version, base=head, source="api")

        store_s.append(timed(bare_write))
    h50, s50 = pct(handler_s, 50) * 1000, pct(store_s, 50) * 1000
    rows.append(
        (
            "PATCH /me/memory (merge)",
            f"handler p50 {h50:.3f} ms (p99 {pct(handler_s, 99) * 1000:.3f}), store p50 {s50:.3f} ms, "
            f"added {h50 - s50:.3f} ms",
        )
    )
    return rows


def cold_start() -> list[tuple[str, str]]:
    code = (
        "import time; t = time.perf_counter();"
        "from user_memory_functions.api.app import handler;"
        "from user_memory.http.app import create_api; from user_memory.config import ApiSettings;"
        "s = ApiSettings.from_env({}); a = time.perf_counter() - t;"
        "create_api(None, s); print(a, time.perf_counter() - t)"
    )
    env = {**os.environ}
    runs = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        runs.append(tuple(float(x) for x in out.split()))
    imports = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    return [
        ("API function cold import (median of 5)", f"{imports:.2f} s"),
        ("cold import + routes built (median of 5)", f"{total:.2f} s (before the first database connection)"),
    ]


def serve_throughput(
    dsn: str, settings: ApiSettings, ids: list[uuid.UUID], clients: int, seconds: float
) -> list[tuple[str, str]]:
    from user_memory_local.serve import ApiServer
    from user_memory_local.tokens import issue_token

    secret = "bench-secret-" + uuid.uuid4().hex
    pool = open_pool(dsn, size=clients)
    server = ApiServer(create_api(build_api(settings, pool=pool), settings), secret=secret)
    server.start()
    tokens = {u: issue_token(u, secret=secret) for u in ids}
    rows = []
    try:
        for label, method in (("reads (GET /me/memory)", "GET"), ("writes (PATCH merge, no If-Match)", "PATCH")):
            done = [0] * clients
            failed = [0] * clients
            stop = time.monotonic() + seconds

            def client(
                k: int, method: str = method, done: list[int] = done, failed: list[int] = failed, stop: float = stop
            ) -> None:
                rng = random.Random(k)
                n = 0
                while time.monotonic() < stop:
                    u = rng.choice(ids)
                    headers = {"Authorization": f"Bearer {tokens[u]}"}
                    data = None
                    if method == "PATCH":
                        headers["Content-Type"] = "application/merge-patch+json"
                        n += 1
                        data = json.dumps({"personal_info": {"age_group": f"g{k}-{n}"}}).encode()
                    req = urllib.request.Request(server.url + "/me/memory", data=data, method=method, headers=headers)
                    try:
                        with urllib.request.urlopen(req, timeout=30) as resp:
                            resp.read()
                        done[k] += 1
                    except Exception:  # counted and reported
                        failed[k] += 1

            threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            rows.append(
                (
                    f"serve, {clients} clients, {label}",
                    f"{sum(done) / elapsed:,.0f} requests/s ({sum(done):,} in {elapsed:.1f} s, {sum(failed)} failed)",
                )
            )
    finally:
        server.close()
        pool.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    dsn = fresh_database("bench_api")
    settings = ApiSettings.from_env({}, document_schema=SCHEMA)
    pool = open_pool(dsn, size=2)
    ids = seed(settings, pool, args.users, args.versions)
    api = create_api(build_api(settings, pool=pool), settings)
    print(f"{args.users} users x {args.versions} versions, schema {SCHEMA}, {args.samples} samples per route")
    table(
        "Per route: the handler against the bare store call(s) it makes",
        route_latency(api, pool, ids, args.samples, args.versions),
    )
    table("Cold start", cold_start())
    table(
        "Through `user-memory serve` (HTTP on localhost)",
        serve_throughput(dsn, settings, ids, args.clients, args.seconds),
    )
    pool.close()


if __name__ == "__main__":
    main()

"""The nightly run at scale, time-compressed: drain time against concurrent worker invocations, users
lost and written twice, and the database load it needed, extrapolated to a planned deployment.

    .venv/bin/python bench/sim_scale.py [--users 100000] [--invocations 1,2,4,8] [--compression 50]
                                        [--llm-concurrency 10] [--batch-size 10] [--users-per-message 1]
                                        [--p50 1.5] [--p99 8] [--rate-429 0.01] [--at-scale 1000000]

Per N in --invocations, on a fresh embedded PostgreSQL database: --users users each get a day of
activity, the real fan-out handler queues the day on moto's SQS, and N threads, each one
concurrent Lambda invocation of the real worker handler (its own services, LLM_CONCURRENCY lanes,
the template's batch size), drain the queue through Lambda's SQS event source as
user_memory_local.poller plays it. The model is scripted (bench/sim/scale.py) with a log-normal
latency (p50/p99) and 429s carrying Retry-After, served over HTTP to the real `openai` client,
every wait divided by --compression. Database work is not compressed. Checked per run: every
seeded user has exactly one version for the run key (lost 0, twice 0), and the DLQ.
"""

from __future__ import annotations

import os

# Read by Powertools when the handler modules are first imported (Logger, Tracer); set before.
os.environ.update(
    {
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
    }
)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fake_http: the endpoint's server
from _common import fresh_database  # noqa: E402
from sim.scale import Latency, Result, at_scale, simulate  # noqa: E402
from user_memory.domain.plan import invocation_seconds, plan  # noqa: E402


def _hms(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def report(results: list[Result], latency: Latency, at: int, cores: int) -> None:
    c = latency.compression
    print(
        f"\nThe nightly run, time-compressed /{c:g}: scripted LLM p50 {latency.p50:g} s, p99 {latency.p99:g} s "
        f"(mean {latency.mean:.2f} s), {latency.rate_429:.0%} answered 429 with Retry-After {latency.retry_after:g} s; "
        "database work real (not compressed)"
    )
    head = (
        f"{'N':>4}{'users':>8}{'wall s':>9}{'x' + format(c, 'g'):>10}{'plan':>10}{'drawn':>10}{'users/s':>9}"
        f"{'lost':>6}{'twice':>6}{'DLQ':>5}{'invoc.':>8}{'retried':>8}{'429':>6}{'LLM max':>8}{'conns':>6}"
        f"{'WAL KB/u':>9}{'DB ms/u':>8}{'py ms/u':>8}"
    )
    print(head)
    for r in results:
        users = r.batch_size * r.users_per_message
        # The plan's invocation (its tail factor at the mean call) against the spread's own slowest lane, drawn
        modelled = r.users / (r.invocations * users / invocation_seconds(users, r.llm_concurrency, latency.mean))
        waves = math.ceil(users / r.llm_concurrency)
        slowest = r.users / (r.invocations * users / (waves * latency.slowest_of(min(users, r.llm_concurrency))))
        db_ms = f"{r.per_user(r.db_cpu_seconds) * 1000:.1f}" if r.db_cpu_seconds is not None else "n/a"
        print(
            f"{r.invocations:>4}{r.users:>8}{r.drain_seconds:>9.1f}{_hms(r.simulated_drain_seconds):>10}"
            f"{_hms(modelled):>10}{_hms(slowest):>10}{r.users / r.simulated_drain_seconds:>9.1f}"
            f"{r.lost:>6}{r.twice:>6}{r.dlq:>5}"
            f"{r.worker_invocations:>8}{r.failed_attempts:>8}{r.answered_429:>6}{r.max_llm_in_flight:>8}"
            f"{r.peak_connections:>6}{r.per_user(r.wal_bytes) / 1024:>9.1f}{db_ms:>8}"
            f"{r.per_user(r.harness_cpu_seconds) * 1000:>8.1f}"
        )
        if r.model_errors:
            print(f"     the model could not read {len(r.model_errors)} requests, e.g. {r.model_errors[0]}")
    print(
        f"wall s: measured; x{c:g}: the drain at real LLM latencies (wall x {c:g}; overstates any part bound by "
        "the database or the CPU, which are not compressed); plan: domain/plan.py's invocation_seconds at the "
        "mean latency (each wave its slowest lane: the mean x the plan's tail factor); drawn: each invocation "
        "lasting its slowest call, the expected most of its lanes' latencies drawn from the scripted spread; "
        "users/s: at real latencies; retried: records a failed "
        "invocation left for redelivery; "
        "conns: most connections to the database at once (pg_stat_activity); WAL KB/u: WAL per user written; "
        "DB ms/u: PostgreSQL server CPU per user (/proc); py ms/u: this process's CPU per user (handlers, "
        "moto, the endpoint)"
    )
    last = max(results, key=lambda r: (r.users, r.invocations))
    lanes = last.llm_concurrency
    slowest = latency.slowest_of(lanes)
    # The plan takes the mean call and plans each wave's slowest lane itself (its tail factor).
    seconds = latency.mean
    p = plan(at, llm_seconds=seconds, llm_concurrency=lanes)
    load = at_scale(last, p)
    cpu = f"{load.db_cpu_cores:.2f} vCPU" if load.db_cpu_cores is not None else "n/a"
    print(
        f"\nAt {at:,} users a day, planned (domain/plan.py) at the mean latency ({seconds:.2f} s a call, "
        f"{p.invocation_seconds:.2f} s an invocation of {lanes} lanes): "
        f"{p.worker_concurrency} concurrent invocations x {p.llm_concurrency} lanes drain at "
        f"{p.users_per_second:.1f} users/s, the day in {_hms(p.drain_seconds)}; the database then needs, from the "
        f"N={last.invocations} run's figures per user: {load.appends_per_second:.1f} appends/s, "
        f"{load.wal_bytes_per_second / 1e6:.2f} MB/s of WAL, {cpu}, and up to {load.connections} worker "
        f"connections (the plan's peak with the API's: {p.connections_at_peak}; Aurora MaxCapacity "
        f"{p.max_capacity} ACUs)"
    )
    if last.db_cpu_seconds:
        ceiling = cores / last.per_user(last.db_cpu_seconds)
        n = ceiling * slowest / lanes
        print(
            f"On this {cores}-core machine the database alone could write at most {ceiling:.0f} users/s (all cores at "
            f"{last.per_user(last.db_cpu_seconds) * 1000:.1f} ms a user); at real latencies an invocation of {lanes} "
            f"users lasts its slowest call, {slowest:.2f} s, so the LLM-bound rate is N x {lanes} / {slowest:.2f} s "
            f"and the database, not the LLM, becomes the limit from about N = {n:.0f} concurrent invocations. In the "
            f"compressed run the harness's own Python CPU ({last.per_user(last.harness_cpu_seconds) * 1000:.1f} ms a "
            "user, one process) is what bounds it first."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--invocations", default="1,2,4,8", help="comma-separated N (concurrent worker invocations)")
    parser.add_argument("--compression", type=float, default=50.0, help="scripted waits are divided by this")
    parser.add_argument("--llm-concurrency", type=int, default=10, help="LLM_CONCURRENCY (WorkerLlmConcurrency)")
    parser.add_argument("--batch-size", type=int, default=10, help="WorkerBatchSize")
    parser.add_argument("--users-per-message", type=int, default=1, help="UsersPerMessage")
    parser.add_argument("--p50", type=float, default=1.5)
    parser.add_argument("--p99", type=float, default=8.0)
    parser.add_argument("--rate-429", type=float, default=0.01)
    parser.add_argument("--retry-after", type=float, default=2.0)
    parser.add_argument("--at-scale", type=int, default=1_000_000, help="users a day to extrapolate to")
    parser.add_argument("--seed", type=int, default=22)
    args = parser.parse_args()
    latency = Latency(args.p50, args.p99, args.rate_429, args.retry_after, args.compression)
    results = []
    for n in [int(x) for x in args.invocations.split(",")]:
        dsn = fresh_database("user_memory_bench_sim_scale")
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the handlers' metrics (EMF lines), not the report
            result = simulate(
                dsn,
                users=args.users,
                invocations=n,
                latency=latency,
                llm_concurrency=args.llm_concurrency,
                batch_size=args.batch_size,
                users_per_message=args.users_per_message,
                seed=args.seed,
                on_progress=lambda line, n=n: print(f"[N={n}] {line}", file=sys.stderr, flush=True),
            )
        print(
            f"[N={n}] drained in {result.drain_seconds:.1f} s ({time.perf_counter() - t0:.1f} s with seeding)",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    report(results, latency, args.at_scale, os.cpu_count() or 1)


if __name__ == "__main__":
    main()

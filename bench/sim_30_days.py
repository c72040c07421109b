"""30 days of synthetic activity for 200 users, summarized daily by a scripted model with a bad day,
in both summary modes (the whole document, and edits), through the real pipeline.

    .venv/bin/python bench/sim_30_days.py [--users 200] [--days 30] [--seed 1] [--modes document,edit]
    make sim ARGS="--users 50 --days 10"

Each mode runs on its own fresh embedded PostgreSQL database: the generator's activity is
recorded and summarized day by day through the real worker handler, whose OpenAISummarizer talks
through the real `openai` client to the scripted model on 127.0.0.1 (bench/sim/model.py). The
table (bench/sim/report.py) is printed and written to bench/results/sim_30_days.txt (--out).
Tokens are counted with o200k_base from the bpe-openai package when it is installed (make sim
installs it), else estimated at 4 characters per token; the table says which.
"""

from __future__ import annotations

import os

# Read by Powertools when the handler module is first imported; set before.
for _k, _v in {
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fake_http: the scripted model's server
from _common import ROOT, fresh_database  # noqa: E402
from sim.model import Rates  # noqa: E402
from sim.report import render  # noqa: E402
from sim.run import MODES, ModeResult, edit_mode_available, run_mode  # noqa: E402
from sim.tokens import load_tokenizer  # noqa: E402


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: document, edit")
    parser.add_argument("--estimate-tokens", action="store_true", help="count 4 characters per token, no tokenizer")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sim_30_days.txt")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes takes {', '.join(MODES)}")
    if args.users < 1 or args.days < 1:
        parser.error("--users and --days must be at least 1")
    tokenizer = load_tokenizer(estimate=args.estimate_tokens)
    progress(f"tokens: {tokenizer.name}")
    results: dict[str, ModeResult | str] = {}
    for mode in modes:
        if mode == "edit" and not edit_mode_available():
            results[mode] = "this checkout's summarizer has no edit mode (WorkerSettings.summary_mode)"
            progress(f"{mode}: skipped, {results[mode]}")
            continue
        dsn = fresh_database(f"user_memory_sim_{mode}")
        results[mode] = run_mode(
            dsn,
            mode,
            seed=args.seed,
            users=args.users,
            days=args.days,
            rates=Rates(),
            tokenizer=tokenizer,
            progress=progress,
        )
    command = "python bench/sim_30_days.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = render(results, command=command.strip(), seed=args.seed, users=args.users, days=args.days)
    print("\n" + text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    progress(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

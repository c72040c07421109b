"""Each function's cold import, interpreter start excluded: median of N fresh interpreters running
`python -c "import user_memory_functions.<name>.app"`, minus the median of `python -c pass`
(bytecode compiled first), and the third-party floor every function needs (`floor`). With
`--against REF`, the same at a git ref (its `layers/` and `functions/` extracted to a temporary
folder), the two trees alternating run by run so that a noisy machine weighs on both alike.

    .venv/bin/python bench/bench_cold_import.py [--runs 5] [--against main]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ("api", "worker", "fanout", "retention")
# What every function's first invocation on Lambda needs whatever this project imports: Powertools'
# Logger and Metrics, pydantic-settings, psycopg's pool (the X-Ray SDK only with XRAY_SDK_TRACING).
FLOOR = "from aws_lambda_powertools import Logger, Metrics; import pydantic_settings, psycopg_pool"


def _tree(root: Path, scratch: Path) -> str:
    """A PYTHONPATH that imports the library and the entry points from `root`."""
    links = scratch / "links"
    links.mkdir(parents=True, exist_ok=True)
    (links / "user_memory_functions").symlink_to(root / "functions")
    return f"{root / 'layers' / 'core'}{os.pathsep}{links}"


def _seconds(pythonpath: str, code: str) -> float:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", help="a git ref to measure beside the working tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": _tree(ROOT, Path(scratch) / "new")}
        if args.against:
            old = Path(scratch) / "old"
            old.mkdir()
            command = ["git", "-C", str(ROOT), "archive", args.against, "layers", "functions"]
            archive = subprocess.run(command, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
            trees[args.against] = _tree(old, old)
        imports = {name: f"import user_memory_functions.{name}.app" for name in FUNCTIONS}
        imports["floor"] = FLOOR
        for path in trees.values():  # bytecode compiled before anything is timed
            for code in imports.values():
                _seconds(path, code)
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for name, code in imports.items():
                for label, path in trees.items():
                    samples.setdefault((label, "pass"), []).append(_seconds(path, "pass"))
                    samples.setdefault((label, name), []).append(_seconds(path, code))
        for label in trees:
            start = statistics.median(samples[(label, "pass")])
            figures = "  ".join(f"{n} {statistics.median(samples[(label, n)]) - start:.3f} s" for n in imports)
            print(f"{label:>10}: {figures}   (interpreter start {start:.3f} s, excluded)")


if __name__ == "__main__":
    main()

"""The synchronous Python client generated from the asynchronous one, so the two cannot drift.

    .venv/bin/python scripts/unasync_client.py        (or `make client`)

clients/python/user_memory_client/aio.py is the source; client.py is written from it by `unasync`
(`async`/`await` dropped, the names below swapped), then the few lines only the asynchronous client
has (a rebase that may be a coroutine function) and its docstrings' wording are replaced, and the
result is formatted as ruff formats the repository. tests/unit/test_client_generated.py keeps
client.py equal to what this makes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGE = REPOSITORY / "clients" / "python" / "user_memory_client"
SOURCE = PACKAGE / "aio.py"
TARGET = PACKAGE / "client.py"

# Names: the asynchronous one and its synchronous twin where it is not the name without `Async`
# (unasync's own rule would make `AsyncMemoryApi` `SyncMemoryApi`; ours drops the prefix, so a
# resource added to aio.py needs no entry here).
NAMES = {
    "AsyncTransport": "SyncTransport",
    "aclose": "close",
}


class _Rule(unasync.Rule):  # type: ignore[misc]
    def _unasync_name(self, name: str) -> str:
        if name not in self.token_replacements and len(name) > 5 and name.startswith("Async") and name[5].isupper():
            return name[5:]
        return str(super()._unasync_name(name))


# Text after the names are swapped (unasync leaves strings and comments as they are): what the
# synchronous client says or lacks. Each must occur exactly once, so an edit of aio.py that moves
# one stops the generation rather than slipping through.
TEXT = [
    (
        '"""The asynchronous client: `AsyncClient(base_url, token)`, the same calls as `Client`, awaited."""',
        '"""The synchronous client: `Client(base_url, token)`, with `.memory`, `.kv`, `.activity`, `.account`."""',
    ),
    ("import inspect\n", ""),
    ("(self._transport.send(c)).content", "self._transport.send(c).content"),
    ("Iterator, Awaitable, Callable, Sequence", "Callable, Iterator, Sequence"),
    (
        "# Given the head after a conflict, the edit to try again (None: give up); may be a coroutine function.\n"
        "Rebase = Callable[[models.Memory], Any | Awaitable[Any]]\n",
        "# Given the head after a conflict, the edit to try again (None: give up and raise the conflict).\n"
        "Rebase = Callable[[models.Memory], Any]\n",
    ),
    ("                if inspect.isawaitable(body):\n                    body = body\n", ""),
    (
        "    token: the bearer token, or a function or coroutine function returning it (called for every\n"
        "    request, and again after a 401, so it can refresh). retries: how failures are retried (see\n"
        "    `Retries`). http: an httpx.AsyncClient to use (its connection pool, proxies, certificates);\n"
        "    closed by you, not here.\n",
        "    token: the bearer token, or a callable returning it (called for every request, and again after\n"
        "    a 401, so it can refresh). retries: how failures are retried (see `Retries`). http: an\n"
        "    httpx.Client to use (its connection pool, proxies, certificates); closed by you, not here.\n",
    ),
]
HEADER = "# Generated from aio.py by scripts/unasync_client.py (`make client`): edit aio.py, then regenerate.\n"


def generate() -> str:
    """client.py's text, made from aio.py."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "_async" / "aio.py"
        source.parent.mkdir()
        shutil.copyfile(SOURCE, source)
        rule = _Rule(f"{folder}/_async/", f"{folder}/_sync/", additional_replacements=NAMES)
        unasync.unasync_files([str(source)], rules=[rule])
        text = (Path(folder) / "_sync" / "aio.py").read_text()
    for old, new in TEXT:
        if text.count(old) != 1:
            raise SystemExit(f"scripts/unasync_client.py: expected once in the unasynced aio.py: {old!r}")
        text = text.replace(old, new)
    return _ruff_format(HEADER + text)


def _ruff_format(text: str) -> str:
    """Imports sorted, `yield from` for a loop that only yields (the async source cannot say it),
    then formatted: as `ruff check` and `ruff format` want the repository."""
    ruff = str(Path(sys.executable).parent / "ruff")
    fix = [ruff, "check", "--fix", "--unsafe-fixes", "--exit-zero", "--quiet", "--select", "I,UP028"]
    for command in (fix, [ruff, "format"]):
        text = subprocess.run(
            [*command, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=REPOSITORY,
        ).stdout
    return text


def main() -> int:
    TARGET.write_text(generate())
    print(f"wrote {TARGET.relative_to(REPOSITORY)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

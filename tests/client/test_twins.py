"""The synchronous client is generated from the asynchronous one (scripts/unasync_client.py), so the
two offer the same calls with the same behaviour and cannot drift."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    if "unasync_client" not in sys.modules:
        spec = importlib.util.spec_from_file_location("unasync_client", ROOT / "scripts" / "unasync_client.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["unasync_client"] = module
        spec.loader.exec_module(module)
    return sys.modules["unasync_client"]


def test_the_sync_client_is_what_the_async_client_generates() -> None:
    # Given the asynchronous client (aio.py), the source
    generator = _generator()
    # When the synchronous client is generated from it
    generated = generator.generate()
    # Then client.py is exactly that
    assert generator.TARGET.read_text() == generated, (
        "client.py differs from aio.py's twin: edit aio.py, then run `make client`"
    )


def test_a_call_added_to_the_async_client_appears_in_the_generated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given aio.py with one more awaited call on the key-value API
    generator = _generator()
    source = tmp_path / "aio.py"
    text = generator.SOURCE.read_text()
    anchor = "class AsyncActivityApi(_Resource):"
    added = (
        "    async def count(self, namespace: str) -> models.KvPage:\n"
        "        return await self._run(call('kv.list', path={'namespace': namespace}), models.KvPage)\n\n\n"
    )
    source.write_text(text.replace(anchor, added + anchor))
    monkeypatch.setattr(generator, "SOURCE", source)
    # When the synchronous client is generated
    generated = generator.generate()
    # Then it has the call, synchronous, and so differs from the committed client.py
    assert "    def count(self, namespace: str) -> models.KvPage:\n" in generated
    assert 'return self._run(call("kv.list", path={"namespace": namespace}), models.KvPage)' in generated
    assert generated != generator.TARGET.read_text()


def test_a_line_only_the_async_client_has_moved_in_aio_py_stops_the_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given aio.py whose rebase no longer awaits a coroutine function's answer (a line the
    # generator removes for the synchronous client)
    generator = _generator()
    source = tmp_path / "aio.py"
    text = generator.SOURCE.read_text()
    source.write_text(
        text.replace("                if inspect.isawaitable(body):\n                    body = await body\n", "")
    )
    monkeypatch.setattr(generator, "SOURCE", source)
    # When the synchronous client is generated, then it stops, naming what it expected
    with pytest.raises(SystemExit, match="expected once"):
        generator.generate()

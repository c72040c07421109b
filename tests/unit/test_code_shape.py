"""The bounds the code's shape keeps (scripts/code_shape.py measures it; run it for the figures)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _code_shape() -> ModuleType:
    if "code_shape" not in sys.modules:
        spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["code_shape"] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules["code_shape"]


def test_the_shipped_packages_have_no_import_cycle_even_counting_type_checking_imports() -> None:
    # Given the shipped packages (user_memory, user_memory_local)
    code_shape = _code_shape()
    # When their imports are measured, those under `if TYPE_CHECKING:` included
    shape = code_shape.measure(code_shape.PACKAGES.items())
    # Then no set of modules imports each other: a module can be read, typed and moved on its own
    assert shape.cycles(with_typing=True) == [], "untie it: scripts/code_shape.py prints the cycle"


def test_a_cycle_closed_only_by_a_type_checking_import_is_found(tmp_path: Path) -> None:
    # Given a package whose port imports, for its annotations only, the module that imports the port
    package = tmp_path / "knot"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "elements.py").write_text("from knot.ports import Data\n")
    (package / "ports.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from knot.elements import Rating\n\nData = 1\n"
    )
    code_shape = _code_shape()
    # When it is measured
    shape = code_shape.measure([("knot", package)])
    # Then the knot is invisible at import time but found counting TYPE_CHECKING imports
    assert shape.cycles() == []
    assert [sorted(cycle) for cycle in shape.cycles(with_typing=True)] == [["knot.elements", "knot.ports"]]


def test_the_composition_root_imports_no_job() -> None:
    # Given the shipped packages, measured
    code_shape = _code_shape()
    shape = code_shape.measure(code_shape.PACKAGES.items())
    # When runtime.py's imports are read, those for the type checker and those inside functions included
    root = "user_memory.runtime"
    imported = shape.imports[root] | shape.typing_imports.get(root, set()) | shape.deferred.get(root, set())
    # Then none is a job: the jobs are built on the composition root, never the other way round
    assert sorted(m for m in imported if m.startswith("user_memory.jobs")) == []


def test_the_memory_layer_imports_no_feature() -> None:
    # Given the shipped packages, measured
    code_shape = _code_shape()
    shape = code_shape.measure(code_shape.PACKAGES.items())
    # When the memory layer's modules' imports are read
    memory = [m for m in shape.modules if m.startswith("user_memory.domain.memory")]
    assert memory
    imported = {t for m in memory for t in shape.imports.get(m, set()) | shape.typing_imports.get(m, set())}
    # Then none is a feature's (the companion, the summary, the conversations)
    features = ("user_memory.domain.companion", "user_memory.domain.summary", "user_memory.domain.conversations")
    assert sorted(m for m in imported if m.startswith(features)) == []


def test_no_module_is_exempt_from_the_complexity_bound() -> None:
    # Given the project's ruff settings
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    # When the per-file exemptions are read
    exempt = sorted(path for path, rules in lint.get("per-file-ignores", {}).items() if "C901" in rules)
    # Then none lifts the bound: a function over it is split into named steps instead
    assert "C901" in lint["select"] and exempt == []

"""The code's shape in figures: the largest modules and functions, and the import cycles.

    .venv/bin/python scripts/code_shape.py [--top 5] [ROOT ...]

ROOT defaults to the shipped code (layers/core/user_memory and local/user_memory_local).
An import cycle is a strongly connected set of modules of the package that import each other at
module level (imports inside a function run when called and close no cycle at import time; they
are counted separately as deferred imports). Exits 0; the figures are for a reader, and
tests/unit/test_code_shape.py holds the bounds the code keeps.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGES = {
    "user_memory": REPOSITORY / "layers" / "core" / "user_memory",
    "user_memory_local": REPOSITORY / "local" / "user_memory_local",
}


@dataclasses.dataclass(frozen=True)
class Function:
    module: str
    name: str
    lines: int


@dataclasses.dataclass(frozen=True)
class Shape:
    modules: dict[str, int]
    functions: list[Function]
    imports: dict[str, set[str]]
    typing_imports: dict[str, set[str]]
    deferred_imports: int
    # What each module imports inside its functions (run when called: no cycle at import time,
    # but a dependency all the same).
    deferred: dict[str, set[str]] = dataclasses.field(default_factory=dict)

    def largest_modules(self, top: int) -> list[tuple[str, int]]:
        return sorted(self.modules.items(), key=lambda item: (-item[1], item[0]))[:top]

    def largest_functions(self, top: int) -> list[Function]:
        return sorted(self.functions, key=lambda f: (-f.lines, f.module, f.name))[:top]

    def cycles(self, *, with_typing: bool = False) -> list[list[str]]:
        """Strongly connected components of more than one module (Tarjan's algorithm); with
        `with_typing`, the imports under `if TYPE_CHECKING:` count too (a knot for a reader and
        for the type checker, though not at run time)."""
        graph = {
            module: self.imports.get(module, set()) | (self.typing_imports.get(module, set()) if with_typing else set())
            for module in self.modules
        }
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for target in sorted(graph[node]):
                if target not in index:
                    visit(target)
                    low[node] = min(low[node], low[target])
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 10_000))
        try:
            for node in sorted(self.modules):
                if node not in index:
                    visit(node)
        finally:
            sys.setrecursionlimit(limit)
        return sorted(found, key=lambda c: (-len(c), c))


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(module: str, is_package: bool, statement: ast.stmt, known: set[str]) -> Iterator[str]:
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name in known:
                yield alias.name
    elif isinstance(statement, ast.ImportFrom):
        source = _resolve(module, is_package, statement)
        for alias in statement.names:
            candidate = f"{source}.{alias.name}"
            if candidate in known:
                yield candidate
            elif source in known:
                yield source


def _module_level(tree: ast.Module, *, typing_only: bool = False) -> Iterator[ast.stmt]:
    """Statements run at import: the body and the branches of top-level if/try, not
    `if TYPE_CHECKING:` blocks (read by the type checker only); with `typing_only`, the
    statements of those blocks alone."""
    pending: list[tuple[ast.stmt, bool]] = [(statement, False) for statement in tree.body]
    while pending:
        statement, typing = pending.pop(0)
        if isinstance(statement, ast.If):
            test = ast.unparse(statement.test)
            inner = typing or test.endswith("TYPE_CHECKING")
            pending.extend((s, inner) for s in statement.body)
            pending.extend((s, typing) for s in statement.orelse)
        elif isinstance(statement, ast.Try):
            pending.extend((s, typing) for s in statement.body + statement.orelse)
            pending.extend((s, typing) for s in statement.finalbody)
            for handler in statement.handlers:
                pending.extend((s, typing) for s in handler.body)
        elif typing == typing_only:
            yield statement


def measure(roots: Iterable[tuple[str, Path]]) -> Shape:
    files: dict[str, tuple[Path, bool]] = {}
    for package, root in roots:
        for path in sorted(root.rglob("*.py")):
            files[_module_name(package, root, path)] = (path, path.name == "__init__.py")
    known = set(files)
    modules: dict[str, int] = {}
    functions: list[Function] = []
    imports: dict[str, set[str]] = {}
    typing_imports: dict[str, set[str]] = {}
    deferred = 0
    deferred_edges: dict[str, set[str]] = {}
    for module, (path, is_package) in files.items():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        modules[module] = len(source.splitlines())
        top_level = set(map(id, _module_level(tree)))
        typing_level = set(map(id, _module_level(tree, typing_only=True)))
        edges: set[str] = set()
        typing_edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                end = node.end_lineno or node.lineno
                functions.append(Function(module, node.name, end - node.lineno + 1))
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = set(_targets(module, is_package, node, known)) - {module}
                if id(node) in top_level:
                    edges |= targets
                elif id(node) in typing_level:
                    typing_edges |= targets
                elif targets:
                    deferred += 1
                    deferred_edges.setdefault(module, set()).update(targets)
        imports[module] = edges
        typing_imports[module] = typing_edges
    return Shape(modules, functions, imports, typing_imports, deferred, deferred_edges)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--top", type=int, default=5)
    arguments = parser.parse_args(argv)
    shape = measure(PACKAGES.items())
    print(f"modules: {len(shape.modules)}, lines: {sum(shape.modules.values())}")
    print("largest modules:")
    for name, lines in shape.largest_modules(arguments.top):
        print(f"  {lines:5d}  {name}")
    print("largest functions:")
    for function in shape.largest_functions(arguments.top):
        print(f"  {function.lines:5d}  {function.module}:{function.name}")
    for label, with_typing in (("at import time", False), ("counting TYPE_CHECKING", True)):
        cycles = shape.cycles(with_typing=with_typing)
        print(f"import cycles {label}: {len(cycles)}")
        for cycle in cycles:
            print(f"  {len(cycle)} modules: {', '.join(cycle)}")
    print(f"deferred imports (inside functions): {shape.deferred_imports}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

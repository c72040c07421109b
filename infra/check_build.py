"""Check what `sam build` produced in .aws-sam/build, the last step of `make build`.

Run with the Lambda runtime's Python (3.12); standard library only.

1. arm64: every compiled extension (*.so, *.so.N) in each built layer is an aarch64 ELF
   (e_machine 183), and every pin of layers/core/requirements.txt is installed in the layer at
   its locked version.
2. The handlers import from the built artifacts: for each built function a fresh python3.12
   imports `app` with sys.path = [the built function dir, the built layer's python/ dir, ...] and
   checks that `app.handler` is callable.

   On an x86_64 machine (development, CI) the layer's aarch64 extensions cannot load. For the
   import check the layer's dependencies are installed a second time, for the host, from the same lock
   (pip install --target <temp dir> --only-binary=:all: --no-deps -r requirements.txt), and that
   directory goes after the built layer on sys.path. A finder takes only the top-level packages
   that ship compiled extensions in the built layer (pydantic_core, psycopg_binary, ...) from the
   host build; user_memory and every pure-Python dependency are imported from the built layer,
   and the check fails if they are not.
3. The migrate function carries the migrations: its built `migrations/` holds exactly the
   repository's migrations/*.sql, byte for byte (the source folder is a symlink that `sam build`
   copies), so what runs on deploy is what the tests ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EM_AARCH64 = 183
LOCK = ROOT / "layers/core/requirements.txt"
MIGRATIONS = ROOT / "migrations"

# Runs in a fresh interpreter per function (every handler module is called `app`).
IMPORT_PROBE = r"""
import importlib.machinery, json, sys
function_dir, layer_dir, host_dir, compiled = sys.argv[1], sys.argv[2], sys.argv[3], set(json.loads(sys.argv[4]))

class HostCompiledPackages:
    # Top-level packages with compiled extensions come from the host build of the same lock.
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is None and name in compiled:
            return importlib.machinery.PathFinder.find_spec(name, [host_dir])
        return None

sys.path[:] = [function_dir, layer_dir, host_dir] + [p for p in sys.path if "site-packages" not in p and p]
sys.meta_path.insert(0, HostCompiledPackages)
import app
assert callable(getattr(app, "handler", None)), "app.handler is missing or not callable"
if hasattr(app, "_library"):  # the migrate function imports the library on its first request
    app._library()
origins = {}
for name, module in list(sys.modules.items()):
    file = getattr(module, "__file__", None) or ""
    top = name.partition(".")[0]
    for label, root in (("function", function_dir), ("layer", layer_dir), ("host", host_dir)):
        if file.startswith(root + "/"):
            origins.setdefault(top, label)
print(json.dumps(origins))
"""


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def elf_machine(path: Path) -> int | None:
    """e_machine of an ELF file, None if the file is not ELF."""
    with path.open("rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    endian = "<" if header[5] == 1 else ">"
    return struct.unpack(endian + "H", header[18:20])[0]


def compiled_files(layer_python: Path) -> list[Path]:
    return sorted(p for p in layer_python.rglob("*") if p.is_file() and re.search(r"\.so(\.\d+)*$", p.name))


def locked_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalize(name.split("[")[0])] = version.split(";")[0].strip()
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(layer_python: Path) -> dict[str, str]:
    found = {}
    for meta in layer_python.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1) for line in meta.read_text(errors="replace").splitlines()[:20] if ": " in line
        )
        found[normalize(fields["Name"])] = fields["Version"]
    return found


def check_layer(layer_python: Path) -> set[str]:
    """Returns the top-level module names that ship compiled extensions."""
    sos = compiled_files(layer_python)
    if not sos:
        raise SystemExit(f"FAIL {layer_python}: no compiled extensions found; expected pydantic_core, psycopg_binary")
    wrong = [(p, elf_machine(p)) for p in sos if elf_machine(p) != EM_AARCH64]
    if wrong:
        listing = "\n".join(f"  {p.relative_to(layer_python)}: e_machine={m}" for p, m in wrong)
        raise SystemExit(f"FAIL {layer_python}: compiled files that are not aarch64:\n{listing}")
    print(f"ok   {len(sos)} compiled files in {shown(layer_python)} are aarch64 ELF (e_machine 183)")

    installed = installed_versions(layer_python)
    mismatched = {n: (v, installed.get(n)) for n, v in locked_pins().items() if installed.get(n) != v}
    if mismatched:
        raise SystemExit(f"FAIL {layer_python}: versions differ from the lock (locked, installed): {mismatched}")
    print(f"ok   every pin of {shown(LOCK)} is installed at its locked version")

    tops = set()
    for p in sos:
        first = p.relative_to(layer_python).parts[0]
        tops.add(first.split(".")[0] if first == p.name else first)
    return {t for t in tops if not t.endswith(".libs")}


def package_data(layer_python: Path) -> list[str]:
    """The library's data files (pyproject's package-data of user_memory.*: the OpenAPI document,
    the console's page and scripts) missing from the built layer."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    source = ROOT / config["package-dir"]["user_memory"]
    missing = []
    for package, patterns in config["package-data"].items():
        if package.split(".")[0] != "user_memory":
            continue
        folder = Path(*package.split(".")[1:])
        for pattern in patterns:
            for found in sorted((source / folder).glob(pattern)):
                relative = Path("user_memory") / folder / found.relative_to(source / folder)
                if not (layer_python / relative).is_file():
                    missing.append(str(relative))
    return missing


def check_package_data(layer_python: Path) -> None:
    missing = package_data(layer_python)
    if missing:
        raise SystemExit(f"FAIL {layer_python}: the library's data files are missing: {missing}")
    print(f"ok   the library's data files (OpenAPI document, console) are in {shown(layer_python)}")


def host_build(target: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--target", str(target), "-r", str(LOCK)]  # fmt: skip
    print("run  " + " ".join(cmd))
    subprocess.run(cmd, check=True)


def check_handler(function_dir: Path, layer_python: Path, host_dir: Path, compiled: set[str]) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "user-memory",
        "POWERTOOLS_METRICS_NAMESPACE": "UserMemory",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    args = [str(function_dir), str(layer_python), str(host_dir), json.dumps(sorted(compiled))]
    result = subprocess.run(
        [sys.executable, "-I", "-B", "-c", IMPORT_PROBE, *args], capture_output=True, text=True, env=env, cwd=host_dir
    )
    if result.returncode != 0:
        raise SystemExit(f"FAIL {function_dir.name}: `import app` from the built artifacts failed:\n{result.stderr}")
    origins = json.loads(result.stdout.strip().splitlines()[-1])
    if origins.get("app") != "function" or origins.get("user_memory") != "layer":
        raise SystemExit(f"FAIL {function_dir.name}: app or user_memory not imported from the build: {origins}")
    from_host = sorted(t for t, o in origins.items() if o == "host")
    if set(from_host) - compiled:
        raise SystemExit(f"FAIL {function_dir.name}: pure-Python modules came from the host build: {from_host}")
    print(f"ok   {function_dir.name}: app.handler imports; compiled packages from the host build: {from_host}")


def check_migrations(built: Path, source: Path = MIGRATIONS) -> None:
    """The built function's migrations are the repository's, file for file and byte for byte."""
    if not built.is_dir():
        raise SystemExit(f"FAIL {shown(built)}: the migrate function was built without its migrations folder")
    want = {p.name: p.read_bytes() for p in source.glob("*.sql")}
    have = {p.name: p.read_bytes() for p in built.glob("*.sql")}
    missing, extra = sorted(want.keys() - have.keys()), sorted(have.keys() - want.keys())
    changed = sorted(n for n in want.keys() & have.keys() if want[n] != have[n])
    if missing or extra or changed:
        raise SystemExit(f"FAIL {shown(built)}: migrations differ from {shown(source)}: {missing=} {extra=} {changed=}")
    print(f"ok   {shown(built)}: the {len(want)} migrations of {shown(source)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=ROOT / ".aws-sam/build")
    args = parser.parse_args()
    if sys.version_info[:2] != (3, 12):
        raise SystemExit(f"FAIL run this with python3.12 (the functions' runtime), not {sys.version.split()[0]}")
    build = args.build_dir.resolve()
    layers = sorted(p / "python" for p in build.iterdir() if (p / "python").is_dir())
    functions = sorted(p for p in build.iterdir() if (p / "app.py").is_file())
    if len(layers) != 1 or not functions:
        raise SystemExit(f"FAIL {build}: expected one built layer and built functions, found {layers} {functions}")
    compiled = check_layer(layers[0])
    check_package_data(layers[0])
    migrate_functions = [f for f in functions if f.name == "MigrateFunction"]
    if not migrate_functions:
        raise SystemExit(f"FAIL {build}: no MigrateFunction was built")
    check_migrations(migrate_functions[0] / "migrations")
    with tempfile.TemporaryDirectory(prefix="user-memory-host-deps-") as tmp:
        host_build(Path(tmp))
        for function_dir in functions:
            check_handler(function_dir, layers[0], Path(tmp), compiled)
    print(f"ok   build checked: {', '.join(f.name for f in functions)} with {layers[0].parent.name}")


if __name__ == "__main__":
    main()

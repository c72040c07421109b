"""The Lambda layer's lock (layers/core/requirements.txt), `make build`'s guard and its check script."""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.infrastructure.cfn import ROOT, load

pytestmark = pytest.mark.infrastructure

LOCK = ROOT / "layers/core/requirements.txt"
LOCK_INPUT = ROOT / "layers/core/requirements.in"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)$")


def _requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in _requirement_lines(LOCK):
        match = PIN.fullmatch(line)
        assert match, f"not an exact pin: {line!r}"
        pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def test_the_lock_has_only_exact_pins_and_says_how_it_was_made():
    # Given the layer's requirements file
    lines = _requirement_lines(LOCK)
    # Then every requirement is name==version, with no ranges, URLs, options or extras
    assert lines and all(PIN.fullmatch(line) for line in lines), [x for x in lines if not PIN.fullmatch(x)]
    # And its header names the command that generated it for Lambda's python3.12 on arm64
    header = LOCK.read_text().split("\n", 3)[:2]
    assert "uv pip compile layers/core/requirements.in" in header[1]
    assert "--python-version 3.12" in header[1] and "--python-platform aarch64-manylinux" in header[1]


def test_the_lock_holds_every_runtime_dependency_and_its_transitive_ones():
    # Given the lock and its input
    pins = _pins()
    wanted = [Requirement(line) for line in _requirement_lines(LOCK_INPUT)]
    # Then every direct dependency is pinned within its range
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, req.name
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} outside {req.specifier}"
    # And the extras' and the transitive dependencies are pinned too (tracer extra, binary psycopg, pydantic core)
    assert {"aws-xray-sdk", "botocore", "psycopg-binary", "pydantic-core", "wrapt", "jsonpointer"} <= set(pins)


def test_the_lock_satisfies_the_package_ranges_in_pyproject():
    # Given the package's runtime dependencies
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    # Then the lock is one of the versions they allow, so the layer runs what the tests run against
    for line in project["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is a runtime dependency missing from the layer's lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} outside {req.specifier}"


def test_boto3_and_botocore_are_pinned_together():
    # Given the lock: botocore comes with aws-xray-sdk, boto3 with the code that calls AWS
    pins = _pins()
    boto3, botocore = pins["boto3"], pins["botocore"]
    # Then both are pinned (no botocore paired with the runtime's own boto3), and they match the way
    # boto3 1.X.Y requires: botocore >= 1.X.Y and < 1.(X+1).0
    assert boto3.release[:2] == botocore.release[:2], f"boto3 {boto3} with botocore {botocore}"
    assert botocore >= boto3, f"boto3 {boto3} needs botocore >= {boto3}, locked {botocore}"


def test_sam_builds_the_layer_from_the_one_lock():
    # Given what sam build installs: each CodeUri's and ContentUri's requirements.txt
    template = load("template.yaml")
    layer_dir = ROOT / template["Resources"]["CoreLayer"]["Properties"]["ContentUri"]
    # Then the layer's is the lock, and no function installs dependencies of its own
    assert layer_dir / "requirements.txt" == LOCK
    for name, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            requirements = ROOT / res["Properties"]["CodeUri"] / "requirements.txt"
            assert not requirements.exists() or _requirement_lines(requirements) == [], name


def _check_build():
    spec = importlib.util.spec_from_file_location("check_build", ROOT / "infra/check_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _elf_header(machine: int, little_endian: bool = True) -> bytes:
    order = "<" if little_endian else ">"
    ident = b"\x7fELF" + bytes([2, 1 if little_endian else 2, 1]) + bytes(9)
    return ident + struct.pack(order + "HH", 3, machine) + bytes(44)


def test_the_build_check_reads_the_elf_machine(tmp_path):
    # Given an aarch64 header, an x86-64 header (little and big endian) and a file that is not ELF
    check = _check_build()
    files = {
        "arm.so": _elf_header(183),
        "x86.so": _elf_header(62),
        "big.so": _elf_header(183, little_endian=False),
        "text.so": b"not an ELF file at all",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    # When the check reads e_machine
    machines = {name: check.elf_machine(tmp_path / name) for name in files}
    # Then aarch64 is 183, the host's is not, and a non-ELF file has none
    assert machines == {"arm.so": 183, "x86.so": 62, "big.so": 183, "text.so": None}


def test_the_build_check_refuses_a_layer_with_host_extensions(tmp_path):
    # Given a built layer holding an x86-64 extension next to an aarch64 one
    check = _check_build()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/_ok.cpython-312-aarch64-linux-gnu.so").write_bytes(_elf_header(183))
    (tmp_path / "pkg/_bad.cpython-312-x86_64-linux-gnu.so").write_bytes(_elf_header(62))
    # When the layer is checked
    with pytest.raises(SystemExit) as failed:
        check.check_layer(tmp_path)
    # Then the check fails naming the foreign file
    assert "_bad.cpython-312-x86_64-linux-gnu.so: e_machine=62" in str(failed.value)


def test_make_build_without_python312_says_so_in_one_line():
    # Given no python3.12 (and the SAM environment taken as present, so nothing is installed)
    cmd = ["make", "--no-print-directory", "build", "SAM_STAMP=Makefile", "PYTHON312=/nonexistent/python3.12"]
    # When make build runs
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    # Then it stops with one clear line and no traceback
    assert result.returncode != 0
    # make's own summary line ("make: ***", or "make[1]: ***" when run under make test) aside
    ours = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert ours == [
        "make build: no working python3.12 on PATH (sam build needs it for the python3.12 runtime); "
        "install one or run: make build PYTHON312=/path/to/python3.12"
    ], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_the_build_check_accepts_the_migrations_byte_for_byte_and_names_any_difference(tmp_path):
    # Given a source folder of migrations and a built copy of it
    check = _check_build()
    source, built = tmp_path / "source", tmp_path / "built"
    source.mkdir()
    built.mkdir()
    for name, text in (("001_a.sql", "SELECT 1;"), ("002_b.sql", "SELECT 2;")):
        (source / name).write_text(text)
        (built / name).write_text(text)
    # Then an identical copy passes
    check.check_migrations(built, source)
    # When the built copy lacks one, has one more and has one changed
    (built / "002_b.sql").unlink()
    (built / "003_c.sql").write_text("SELECT 3;")
    (built / "001_a.sql").write_text("SELECT 1; -- edited")
    with pytest.raises(SystemExit) as failed:
        check.check_migrations(built, source)
    # Then the check fails naming each
    assert "missing=['002_b.sql']" in str(failed.value)
    assert "extra=['003_c.sql']" in str(failed.value) and "changed=['001_a.sql']" in str(failed.value)


def test_the_build_check_refuses_a_migrate_function_built_without_migrations(tmp_path):
    # Given a built migrate function whose migrations folder is missing (a build that dropped the link)
    check = _check_build()
    # When its migrations are checked
    with pytest.raises(SystemExit) as failed:
        check.check_migrations(tmp_path / "MigrateFunction" / "migrations")
    # Then the check fails saying so
    assert "built without its migrations folder" in str(failed.value)


def test_the_build_check_finds_the_librarys_data_files_in_the_layer(tmp_path):
    # Given a layer built as sam build copies layers/core (the library with its data files)
    check = _check_build()
    shutil.copytree(ROOT / "layers/core/user_memory", tmp_path / "user_memory")
    # Then the OpenAPI document and the console's files are all found
    assert check.package_data(tmp_path) == []
    # And a layer without the console's script is refused, naming it
    (tmp_path / "user_memory/http/console/app.js").unlink()
    assert check.package_data(tmp_path) == ["user_memory/http/console/app.js"]
    with pytest.raises(SystemExit, match="console/app.js"):
        check.check_package_data(tmp_path)


def test_every_folder_of_the_library_is_a_package_of_the_distribution():
    # Given the library's folders (code, prompts, the console's files) and the packages pyproject lists
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    library = ROOT / "layers" / "core" / "user_memory"
    folders = {
        ".".join(("user_memory", *p.relative_to(library).parts))
        for p in [library, *library.rglob("*")]
        if p.is_dir() and p.name != "__pycache__" and any(f.is_file() for f in p.iterdir())
    }
    # Then a wheel (pip install ., not only an editable install) carries every one of them
    assert folders - listed == set()

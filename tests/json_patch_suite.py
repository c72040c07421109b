"""The public JSON Patch conformance suite carried with the tests (conformance/json-patch-tests,
origin and licence in its README), as pytest parameters: the Python applier (unit tier) and the
database's (integration tier) run the same cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = Path(__file__).resolve().parent / "conformance" / "json-patch-tests"
FILES = ("tests.json", "spec_tests.json")


def conformance_cases() -> list[Any]:
    """Every case of the suite that is not disabled, named by file, index and comment."""
    cases = []
    for name in FILES:
        for n, case in enumerate(json.loads((CONFORMANCE / name).read_text())):
            if not case.get("disabled"):
                cases.append(pytest.param(case, id=f"{name}:{n}:{case.get('comment', '')[:40]}"))
    return cases

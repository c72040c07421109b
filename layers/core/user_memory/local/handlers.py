"""Load the Lambda entry points from functions/ the way Lambda does (by file, not by package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FUNCTIONS_DIR = Path(__file__).resolve().parents[4] / "functions"


def load_function(name: str) -> ModuleType:
    """Import functions/<name>/app.py as module `<name>_app` (cached)."""
    module_name = f"{name}_app"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = FUNCTIONS_DIR / name / "app.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no Lambda function at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module

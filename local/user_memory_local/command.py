"""How a person runs `user-memory` from where they are: the command the hints print."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

PROG = "user-memory"


def cli_command() -> str:
    """`user-memory` when that name on PATH runs this installation; otherwise this installation's
    script, relative to the current directory when it is inside it (`.venv/bin/user-memory` after
    `make demo`), so that a printed hint works when pasted into the same shell."""
    bin_dir = Path(sys.executable).parent  # the virtual environment's bin/, where pip put the script
    script = bin_dir / PROG
    found = shutil.which(PROG)
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return PROG
    if not script.exists():  # run from a source tree without the console script
        return f"{_shown(Path(sys.executable))} -m user_memory_local.cli"
    return _shown(script)


def _shown(path: Path) -> str:
    try:
        relative = path.absolute().relative_to(Path.cwd())
    except ValueError:
        return str(path.absolute())
    return str(relative) if relative.parts and relative.parts[0] != ".." else str(path.absolute())

"""Regenerate the committed OpenAPI document from the routes and models: `make openapi`.

    python -m user_memory_local.openapi          # write layers/core/user_memory/http/openapi.json
    python -m user_memory_local.openapi --check  # exit 1 when the committed document is stale

The document does not depend on the deployment's settings; it is rendered from a clean
environment so that the same code always renders the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def document_path() -> Path:
    """The committed document, in the source tree (an editable install) or the installed package."""
    from importlib.resources import files

    return Path(str(files("user_memory.http").joinpath("openapi.json")))


def render() -> str:
    """The document the current routes and models generate (no database is needed)."""
    from user_memory.config import ApiSettings
    from user_memory.http.app import create_api
    from user_memory.http.openapi import render_openapi
    from user_memory.runtime import ApiServices

    settings = ApiSettings.from_env({})
    return render_openapi(create_api(ApiServices(settings=settings, pool=None), settings))  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m user_memory_local.openapi", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the document is stale")
    args = parser.parse_args(argv)
    path, text = document_path(), render()
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if args.check:
        if current != text:
            print(f"{path} is stale: run `make openapi`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    if current == text:
        print(f"{path} is up to date")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

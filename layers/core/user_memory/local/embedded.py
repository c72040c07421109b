"""An embedded PostgreSQL server (the `pgserver` wheel) in a project-local data directory."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

# One cluster per purpose under .pgdata/: main (CLI, demo), test, bench.
DEFAULT_DATA_DIR = Path(os.getcwd()) / ".pgdata" / "main"


def start_embedded(data_dir: Path | str | None = None, database: str = "user_memory") -> tuple[Any, str]:
    """Start (or reuse) the embedded server and return (server, DSN of `database`).

    The server stops when the last process using it exits.
    """
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import pgserver  # local extra only: never imported in Lambda
    import psycopg

    logging.getLogger("pgserver").setLevel(logging.WARNING)
    path = Path(data_dir or DEFAULT_DATA_DIR).resolve()
    path.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(path, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            from psycopg import sql

            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return server, server.get_uri(database)

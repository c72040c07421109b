"""An embedded PostgreSQL server (the `pgserver` wheel) in a per-user data directory.

The default cluster lives in `$USER_MEMORY_HOME/pgdata`, where USER_MEMORY_HOME defaults to the
platform's user data directory (`~/.local/share/user-memory` on Linux, honouring XDG_DATA_HOME),
so the CLI and the demo find the same database from any working directory. Callers that want a
cluster of their own (the tests, the benchmarks) pass its directory.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

from user_memory.errors import StorageUnavailable

APP_NAME = "user-memory"
HOME_ENV = "USER_MEMORY_HOME"


def user_memory_home() -> Path:
    """`$USER_MEMORY_HOME`, else the platform's user data directory for this application."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    try:
        import platformdirs  # installed with pgserver (the `local` extra)

        return Path(platformdirs.user_data_path(APP_NAME, appauthor=False)).resolve()
    except ImportError:
        base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return (Path(base).expanduser() / APP_NAME).resolve()


def default_data_dir() -> Path:
    """The data directory of the CLI's and the demo's embedded cluster."""
    return user_memory_home() / "pgdata"


def start_embedded(data_dir: Path | str | None = None, database: str = "user_memory") -> tuple[Any, str]:
    """Start (or reuse) the embedded server in `data_dir` (default: `default_data_dir()`) and
    return (server, DSN of `database`), creating the database when missing.

    The server stops when the last process holding a handle exits. A server that cannot start
    raises StorageUnavailable naming its log file.
    """
    path = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import pgserver  # local extra only: never imported in Lambda
    import psycopg
    from psycopg import sql

    # pgserver logs a failed start with the whole server log; the error below names the file.
    logging.getLogger("pgserver").setLevel(logging.CRITICAL)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StorageUnavailable(
            f"cannot create the embedded database's directory {path} ({err.strerror or err}); "
            f"set {HOME_ENV} to a writable directory, or set DATABASE_URL"
        ) from err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(path, cleanup_mode="stop")
    except Exception as err:  # initdb/pg_ctl/permission failures all mean "no database"
        first = (str(err).splitlines() or [""])[0][:200]
        log = path / "log"
        where = f"its log is {log}" if log.exists() else f"is {path} a writable directory?"
        raise StorageUnavailable(
            f"the embedded PostgreSQL in {path} did not start ({type(err).__name__}: {first}); {where}"
        ) from err
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    except psycopg.Error as err:
        from user_memory.adapters.postgres import translate

        raise translate(err) from err
    return server, server.get_uri(database)

"""Migrations.

Migrations are `migrations/NNN_name.sql`, applied in order inside one transaction each,
recorded in `user_memory_migrations` with a SHA-256 checksum, serialized across processes
by a PostgreSQL advisory lock. A recorded migration whose file changed is an error.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from user_memory.errors import MigrationError

_ADVISORY_LOCK_KEY = 0x55_4D_4D_49  # "UMMI": one lock id for this project's migrations
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def packaged_migrations() -> Path:
    """The migrations folder installed with the package (`user_memory_migrations`, the repository's
    migrations/); the Lambda layer does not carry it, so there the folder must be given."""
    try:
        from importlib import resources

        folder = resources.files("user_memory_migrations")
    except ModuleNotFoundError:
        raise MigrationError("the migrations are not installed with this package; pass their folder") from None
    return Path(str(folder))


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Path) -> list[Migration]:
    """Read migration files in order; names must be NNN_lowercase_name.sql and numbers unique."""
    if not directory.is_dir():
        raise MigrationError(f"migrations folder {directory} does not exist")
    found = []
    numbers: set[str] = set()
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name!r} is not named NNN_name.sql")
        if match.group(1) in numbers:
            raise MigrationError(f"two migrations are numbered {match.group(1)}")
        numbers.add(match.group(1))
        found.append(Migration(path.stem, path.read_text()))
    return found


def migrate(dsn_or_conn: str | psycopg.Connection, directory: Path | None = None) -> list[str]:
    """Apply pending migrations from `directory` (default: the packaged ones); return the names
    applied now (empty when up to date)."""
    migrations = load_migrations(directory or packaged_migrations())
    own = isinstance(dsn_or_conn, str)
    try:
        conn = psycopg.connect(dsn_or_conn, autocommit=True) if isinstance(dsn_or_conn, str) else dsn_or_conn
    except psycopg.Error as err:
        from user_memory.adapters.postgres import translate

        raise translate(err) from err
    applied_now: list[str] = []
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_LOCK_KEY,))
        try:
            conn.execute(
                """CREATE TABLE IF NOT EXISTS user_memory_migrations (
                     name text PRIMARY KEY,
                     checksum text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            recorded: dict[str, str] = dict(
                conn.execute("SELECT name, checksum FROM user_memory_migrations").fetchall()
            )
            for migration in migrations:
                if migration.name in recorded:
                    if recorded[migration.name] != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.name} was changed after it was applied "
                            f"(recorded checksum {recorded[migration.name][:12]}…, "
                            f"file {migration.checksum[:12]}…); add a new migration instead"
                        )
                    continue
                try:
                    with conn.transaction():
                        conn.execute(sql.SQL(migration.sql))  # type: ignore[arg-type]
                        conn.execute(
                            "INSERT INTO user_memory_migrations (name, checksum) VALUES (%s, %s)",
                            (migration.name, migration.checksum),
                        )
                except psycopg.Error as err:
                    raise MigrationError(f"migration {migration.name} failed: {err}") from err
                applied_now.append(migration.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_LOCK_KEY,))
    finally:
        if own:
            conn.close()
    return applied_now

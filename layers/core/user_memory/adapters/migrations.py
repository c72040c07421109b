"""Migrations.

Migrations are `migrations/NNN_name.sql`, applied in order inside one transaction each,
recorded in `user_memory_migrations` with a SHA-256 checksum, serialized across processes
by a PostgreSQL advisory lock. A recorded migration whose file changed is an error.

A database can be ahead of the release that runs (a stack rolled back after a newer release
migrated it): the migrations it records that this release does not have are accepted and logged,
and so is a checksum of a migration this release has that differs from its file (only a newer
release records one then: it rewrote it, see _REWRITTEN); the older release applies nothing. A
migration of this release that is missing below the newest one recorded is an error: applying it
now would run it out of order.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from user_memory.errors import MigrationError
from user_memory.observability import logger

_ADVISORY_LOCK_KEY = 0x55_4D_4D_49  # "UMMI": one lock id for this project's migrations
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")

# Migrations rewritten after release so that an owner without SUPERUSER or BYPASSRLS (RDS's,
# Aurora's and Supabase's) can run them: the checksums of their earlier texts. A database that
# applied an earlier text (as a superuser) ends in the same state through migration 013, so the
# record is moved to the new text instead of refusing it.
_REWRITTEN: dict[str, frozenset[str]] = {
    "001_platform": frozenset({"34958af138d9b496064618f5ca09a13e231841acbf02afa758f3a07c87534425"}),
    "006_append_only_history": frozenset({"cc5c7002f6b82f6e704b10c18cb5625ef8eb622914fd7513e3f0accfe0988a63"}),
    "010_provenance": frozenset({"99b852aabbc07eea60d1c3e2c3bdc5bab7c578e714db38b8716b550e599511d6"}),
    "012_companion_and_search": frozenset({"a45a025b622c4e60e63134208baa17cef2723061d163704f09d0fee5fe29c2b8"}),
}


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
            ahead = _check_order(migrations, recorded)
            for migration in migrations:
                if migration.name in recorded:
                    if recorded[migration.name] in _REWRITTEN.get(migration.name, ()):
                        conn.execute(
                            "UPDATE user_memory_migrations SET checksum = %s WHERE name = %s",
                            (migration.checksum, migration.name),
                        )
                    elif recorded[migration.name] != migration.checksum and ahead:
                        logger.warning(
                            "migration recorded by a newer release",
                            migration=migration.name,
                            recorded_checksum=recorded[migration.name][:12],
                            file_checksum=migration.checksum[:12],
                        )
                    elif recorded[migration.name] != migration.checksum:
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
            # Repeatable: pgvector may have been installed by an administrator since 012 ran.
            if _scalar(conn, "SELECT to_regprocedure('public.user_memory_enable_vectors()') IS NOT NULL"):
                conn.execute("SELECT public.user_memory_enable_vectors()")
        except BaseException:
            # The run's own error is the one to report, not the unlock's (a cancelled run's unlock
            # can be cancelled too); the lock ends with the session anyway.
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_LOCK_KEY,))
            raise
        conn.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_LOCK_KEY,))
    finally:
        if own:
            conn.close()
    return applied_now


def _check_order(migrations: list[Migration], recorded: dict[str, str]) -> list[str]:
    """The recorded migrations this release does not have (logged: the database is ahead of it);
    MigrationError when one of this release's is missing below the newest recorded."""
    known = {m.name for m in migrations}
    ahead = sorted(name for name in recorded if name not in known)
    if ahead:
        logger.warning("database ahead of this release", not_in_this_release=ahead)
    newest = max(recorded, key=_number, default="")
    for migration in migrations:
        if migration.name not in recorded and _number(migration.name) <= _number(newest):
            raise MigrationError(
                f"migration {migration.name} is not applied but {newest}, numbered after it or the same, is: "
                "applying it now would run it out of order; give it a number after the newest applied one"
            )
    return ahead


def _number(name: str) -> int:
    return int(name[:3]) if name[:3].isdigit() else -1


def _scalar(conn: psycopg.Connection, query: str, params: tuple[object, ...] = ()) -> object:
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


def vectors_enabled(dsn_or_conn: str | psycopg.Connection) -> bool:
    """Whether the database has the embeddings table (pgvector installed when migrated)."""
    if isinstance(dsn_or_conn, str):
        with psycopg.connect(dsn_or_conn, autocommit=True) as conn:
            return vectors_enabled(conn)
    return bool(_scalar(dsn_or_conn, "SELECT to_regclass('public.memory_embeddings') IS NOT NULL"))


class Login(BaseModel):
    """A function login's credentials, as infra/database.yaml's login secrets hold them."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    username: str = Field(min_length=1, max_length=63)
    password: SecretStr


def applied_migrations(conn: psycopg.Connection) -> list[str]:
    """The names recorded in user_memory_migrations, in order (empty before the first migrate)."""
    if not _scalar(conn, "SELECT to_regclass('public.user_memory_migrations') IS NOT NULL"):
        return []
    return [row[0] for row in conn.execute("SELECT name FROM user_memory_migrations ORDER BY name").fetchall()]


def scram_sha_256_verifier(conn: psycopg.Connection, name: str, password: str) -> str:
    """The `SCRAM-SHA-256$...` verifier of a role's password (RFC 5802, 7677), computed on this side
    by libpq (PQencryptPasswordConn) with a fresh salt.

    PostgreSQL stores a password given in this form as it is, so the ALTER ROLE statement, and any
    server log line quoting it (log_statement, an error), never holds the password itself.
    """
    return conn.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256").decode()


# The group roles of migration 013 a deployment's login roles join: what each function may do.
LOGIN_GROUPS = {"api": "user_memory_api", "service": "user_memory_service"}
_LOGIN_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def create_login(dsn_or_conn: str | psycopg.Connection, name: str, password: str, group: str) -> bool:
    """Create login role `name` (or set its password) as a member of one group of migration 013
    (`api` or `service`) and of nothing else; return True when it was created. Run as the owner.

    The API's login may only become `authenticated` or `service_role`; the service's login has
    `service_role`'s rights. Neither is a member of the owner.
    """
    if group not in LOGIN_GROUPS:
        raise MigrationError(f"the login's group must be one of {', '.join(LOGIN_GROUPS)}, got {group!r}")
    if not _LOGIN_NAME.match(name) or name in LOGIN_GROUPS.values():
        raise MigrationError(f"{name!r} is not a login role name this command creates (lowercase letters, digits, _)")
    if len(password) < 16:
        raise MigrationError("the login's password must be at least 16 characters")
    if isinstance(dsn_or_conn, str):
        with psycopg.connect(dsn_or_conn, autocommit=True) as conn:
            return create_login(conn, name, password, group)
    conn = dsn_or_conn
    role = sql.Identifier(name)
    try:
        with conn.transaction():
            if _scalar(conn, "SELECT to_regrole(%s) IS NULL", (LOGIN_GROUPS[group],)):
                raise MigrationError("the database is not migrated (no group roles); run migrate first")
            row = conn.execute(
                "SELECT rolsuper OR rolbypassrls OR rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = %s",
                (name,),
            ).fetchone()
            created = row is None
            if created:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN INHERIT").format(role))
            elif row is None or row[0] or name == conn.info.user:
                raise MigrationError(f"{name} is an administrative role; choose another name for the login")
            verifier = scram_sha_256_verifier(conn, name, password)
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN INHERIT PASSWORD {}").format(role, sql.Literal(verifier)))
            # A member of its own group only (a login moved from one group to the other leaves it).
            other = next(g for key, g in LOGIN_GROUPS.items() if key != group)
            if _scalar(conn, "SELECT pg_has_role(%s, %s, 'MEMBER')", (name, other)):
                conn.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(other), role))
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(LOGIN_GROUPS[group]), role))
    except psycopg.Error as err:
        from user_memory.adapters.postgres import translate

        raise translate(err) from err
    return created

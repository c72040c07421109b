"""PostgreSQL adapters: the memory recorder and the activity reader/writer (psycopg 3).

SQL only: no diffing, no policy. Every statement runs on a connection from one pool; driver errors
become this library's errors in one function, `translate`, called wherever a connection is used
(`connection()`, a held connection, a session's transaction, the migrations runner).
Writes are one statement each (`user_memory_append`: created by migrations/004 and redefined by
later ones; the live definition is the newest, migrations/020 today), so a write is one round trip
and one transaction.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Protocol

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from user_memory.domain.model import (
    MAX_CHANGED_PATH_CHARS,
    MAX_CHANGED_PATHS,
    Activity,
    HistoryEntry,
    MemoryVersion,
    VersionChange,
    Window,
)
from user_memory.domain.ports import InsertOutcome, NewVersion, StoredRow
from user_memory.errors import (
    AccessDenied,
    ConfigError,
    DocumentGrowsTooLarge,
    DocumentTooLarge,
    InvalidDocument,
    PatchError,
    PatchMismatch,
    PatchOverBounds,
    StorageError,
    StorageUnavailable,
    UserMemoryError,
)

# SQLSTATEs of migrations/015: the patch does not apply (UMP01) or is over its bounds (UMP02: its
# operations or pointers, or the document it grows, migrations/019); the document is not the patch
# applied to the head (UMP03).
_PATCH_REFUSED = "UMP01"
_PATCH_OVER_BOUNDS = "UMP02"
_PATCH_MISMATCH = "UMP03"
_GROWS = re.compile(r"operation (\d+): the document grows over (\d+) bytes")


def translate(err: psycopg.Error) -> UserMemoryError:
    """The library's error for a driver error; the message is the server's primary line only
    (never DETAIL, which can quote row values)."""
    primary = (getattr(err.diag, "message_primary", None) or str(err)).splitlines()[0][:300]
    if isinstance(err, pgerrors.InsufficientPrivilege):
        return AccessDenied(primary)
    if err.sqlstate == _PATCH_REFUSED:  # migrations/015: the database's applier refused the patch
        return PatchError(primary)
    if err.sqlstate == _PATCH_OVER_BOUNDS:
        grows = _GROWS.search(primary)
        if grows:  # the database's measure (jsonb's own bytes), reported as it measured it
            limit = int(grows.group(2))
            return DocumentGrowsTooLarge(f"operation {grows.group(1)}: ", limit + 1, limit)
        return PatchOverBounds(primary)
    if err.sqlstate == _PATCH_MISMATCH:
        return PatchMismatch(primary)
    if isinstance(err, pgerrors.InvalidParameterValue):
        sizes = re.search(r"document is (\d+) bytes, over the limit of (\d+)", primary)
        if sizes:  # the database's own measure (jsonb's text form), reported as it measured it
            return DocumentTooLarge(int(sizes.group(1)), int(sizes.group(2)))
        return InvalidDocument(primary)
    if isinstance(err, psycopg.OperationalError | PoolTimeout):
        return StorageUnavailable(f"database unavailable: {primary}")
    return StorageError(f"{type(err).__name__}: {primary}")


class Conninfo(Protocol):
    """Where a pool's connections get their connection string: called for each new connection,
    with `fresh` after an authentication failure (a rotated password: read the secret anew)."""

    def __call__(self, *, fresh: bool = False) -> str: ...


# Authentication refused (invalid_password, invalid_authorization_specification): the password
# may have been rotated since the connection string was read. libpq reports no SQLSTATE for a
# failed connection attempt (psycopg's sqlstate is None; RDS Proxy words its refusal its own way),
# so a failure without one is also read as possibly refused: it costs one read of the secret.
_AUTHENTICATION_FAILED = frozenset({"28P01", "28000", None})


def checked_conninfo(dsn: str) -> str:
    """The connection string if libpq can parse it, else ConfigError. libpq's message quotes the
    part it could not parse, which can be the password: it is never passed on."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeError):  # a percent-escape that decodes to no UTF-8 is the latter
        raise ConfigError(
            "the database URL is not a PostgreSQL connection string (libpq's reason is withheld: "
            "it can quote the password; check the URL's percent-encoding and key=value pairs)"
        ) from None
    return dsn


def login_conninfo(endpoint: str, username: str, password: str) -> str:
    """The connection string of a login: `endpoint` (postgresql://host:port/dbname?sslmode=...)
    with the login's user and password, escaped whatever they hold; ConfigError, never quoting
    either, when the endpoint cannot be parsed."""
    try:
        return psycopg.conninfo.make_conninfo(checked_conninfo(endpoint), user=username, password=password)
    except ConfigError:
        raise ConfigError(
            "DATABASE_ENDPOINT is not a PostgreSQL connection string (postgresql://host:port/dbname?sslmode=...)"
        ) from None


def _rereading(conninfo: Conninfo) -> type[psycopg.Connection]:
    """A connection class whose `connect`, refused authentication, reads the connection string
    anew once and connects with it when it changed (a rotated password's new secret); when it
    did not change, the refusal stands."""

    class RereadingConnection(psycopg.Connection):  # type: ignore[type-arg]
        @classmethod
        def connect(cls, conninfo_: str = "", **kwargs: object) -> RereadingConnection:  # type: ignore[override]
            try:
                return super().connect(conninfo_, **kwargs)  # type: ignore[arg-type]
            except psycopg.OperationalError as err:
                if err.sqlstate not in _AUTHENTICATION_FAILED:
                    raise
                fresh = checked_conninfo(conninfo(fresh=True))
                if fresh == conninfo_:
                    raise
            return super().connect(fresh, **kwargs)  # type: ignore[arg-type]

    return RereadingConnection


def open_pool(
    dsn: str | Conninfo,
    *,
    size: int = 1,
    max_size: int | None = None,
    timeout: float = 10.0,
    role: str | None = None,
) -> ConnectionPool:
    """A pool of autocommit connections, opened and checked; one per process (Lambda: size 1).
    `size` are opened at once, up to `max_size` more when needed (the worker's concurrent runs).

    `dsn` is a connection string, or a Conninfo read for each new connection (a login's secret,
    read anew after an authentication failure, so a rotated password needs no redeploy).
    Every checkout is checked first (one empty statement): a connection the server or RDS Proxy
    closed while idle is replaced instead of failing the request that drew it.
    With `role`, every connection takes it (SET ROLE) once, when it is opened: the function's
    login then acts as that role, and a transaction-local role (an end user's) returns to it.
    """
    if isinstance(dsn, str):
        fixed = checked_conninfo(dsn)

        def read(*, fresh: bool = False) -> str:
            return fixed

        conninfo: Conninfo = read
    else:
        conninfo = dsn
        checked_conninfo(conninfo())  # a malformed secret fails here, in one line, not in the pool's workers

    def take_role(conn: psycopg.Connection) -> None:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role or "")))

    pool = ConnectionPool(
        lambda: conninfo(),
        connection_class=_rereading(conninfo),
        min_size=size,
        max_size=max(size, max_size or size),
        kwargs={"autocommit": True},
        configure=take_role if role else None,
        check=ConnectionPool.check_connection,
        open=False,
        timeout=timeout,
        name="user-memory",
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout as err:
        pool.close()
        why = f" as role {role} (is the login a member of it?)" if role else ""
        raise StorageUnavailable(f"cannot connect to the database{why} within {timeout:g} s") from err
    return pool


class ConnectionSource(Protocol):
    """Where adapters get a connection: a pool (a connection per call) or one open transaction."""

    def connection(self) -> AbstractContextManager[psycopg.Connection]: ...


class Transaction:
    """One connection inside one transaction: every adapter built on it shares the transaction."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        yield self.conn


class HeldConnections:
    """A pool whose connection can be held for a span of statements: the worker holds one for
    each user's run, one checkout instead of one per statement. Outside `hold()` every
    `connection()` is a checkout of its own, as from the pool. Held per thread."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool
        self._held = threading.local()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        held: psycopg.Connection | None = getattr(self._held, "conn", None)
        if held is not None:
            yield held
            return
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Every `connection()` inside the block, on this thread, is the same checked-out
        connection; it goes back to the pool (which drops it if it broke) when the block ends."""
        if getattr(self._held, "conn", None) is not None:
            yield
            return
        try:
            with self.pool.connection() as conn:
                self._held.conn = conn
                try:
                    yield
                finally:
                    self._held.conn = None
        except psycopg.Error as err:
            raise translate(err) from err


_END_USER = "SELECT set_config('role', 'authenticated', true), set_config('request.jwt.claims', %s, true)"
_TAKE_ROLE = "SELECT set_config('role', %s, true)"


@contextmanager
def transaction(
    pool: ConnectionSource, *, end_user: uuid.UUID | None = None, role: str | None = None
) -> Iterator[Transaction]:
    """One transaction on one pooled connection, committed when the block ends without an error.

    With `end_user`, the transaction runs as role `authenticated` with that user as the JWT
    `sub` (both transaction-local, so nothing survives into the pooled connection's next use):
    PostgreSQL's row-level security then decides what the block can read and write, as it
    would for the user's own token on Supabase. With `role` instead (an operator's: the
    service's rights), the transaction runs as that role, transaction-local too. With neither,
    it runs as the connection's own role: the API's login holds nothing, so it reads nothing.
    """
    try:
        with pool.connection() as conn, conn.transaction():
            if end_user is not None:
                claims = json.dumps({"sub": str(end_user), "role": "authenticated"})
                conn.execute(_END_USER, (claims,), prepare=True)
            elif role is not None:
                conn.execute(_TAKE_ROLE, (role,), prepare=True)
            yield Transaction(conn)
    except psycopg.Error as err:
        raise translate(err) from err


class ActingAs:
    """A pool whose every checkout is one transaction as `role` (transaction-local): the API's
    service-side work (operators' search, vectors, the trigger) on a login that holds nothing
    itself. Without a role, plain checkouts."""

    def __init__(self, pool: ConnectionSource, role: str | None) -> None:
        self.pool = pool
        self.role = role

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with self.pool.connection() as conn:
            if self.role is None:
                yield conn
                return
            with conn.transaction():
                conn.execute(_TAKE_ROLE, (self.role,), prepare=True)
                yield conn


def _in_transaction(conn: psycopg.Connection) -> bool:
    return conn.info.transaction_status == TransactionStatus.INTRANS


class _Database:
    """A connection source whose connections turn psycopg errors into ours (through `translate`)."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        try:
            with self.pool.connection() as conn:
                yield conn
        except psycopg.Error as err:
            raise translate(err) from err


_HEAD = """
SELECT h.version, h.document, h.updated_at, h.source_description,
       (SELECT s.version FROM user_memory_snapshots s
         WHERE (s.user_id::text || ' ' || s.idempotency_key) = (%(u)s::text || ' ' || %(k)s)
           AND s.user_id = %(u)s AND s.idempotency_key = %(k)s)
  FROM (SELECT 1) one
  LEFT JOIN user_memory_heads h ON h.user_id = %(u)s
"""

# Latest checkpoint at or below the version, then every row after it up to the version.
_ROWS = """
SELECT version, patch, CASE WHEN is_full_snapshot THEN full_snapshot_content END, created_at, source_description
  FROM user_memory_snapshots
 WHERE user_id = %(u)s AND version <= %(v)s
   AND version >= coalesce((SELECT max(version) FROM user_memory_snapshots
                             WHERE user_id = %(u)s AND is_full_snapshot AND version <= %(v)s), 1)
 ORDER BY version
"""

_SPAN = """
SELECT version, patch, CASE WHEN is_full_snapshot THEN full_snapshot_content END, created_at, source_description
  FROM user_memory_snapshots
 WHERE user_id = %s AND version BETWEEN %s AND %s
 ORDER BY version
"""

# Who wrote each of the newest versions and which pointers its patch changed (never a document):
# each operation's path, and a move's from, at most %(paths)s of %(chars)s characters per version.
# The tokens of a user's versions since a time (the daily token budget), from the provenance
# only the service records; a value of another JSON type counts as nothing.
_TOKENS_SINCE = """
SELECT coalesce(sum(CASE WHEN jsonb_typeof(provenance->'prompt_tokens') = 'number'
                         THEN (provenance->>'prompt_tokens')::numeric END), 0)
     + coalesce(sum(CASE WHEN jsonb_typeof(provenance->'completion_tokens') = 'number'
                         THEN (provenance->>'completion_tokens')::numeric END), 0)
  FROM user_memory_snapshots
 WHERE user_id = %s AND created_at >= %s
"""

_CHANGES = """
SELECT s.version, s.source_description, s.created_at,
       coalesce(s.provenance->>'mode' IN ('edit', 'document'), false),
       ARRAY(SELECT left(p.path, %(chars)s)
               FROM jsonb_array_elements(CASE WHEN jsonb_typeof(s.patch) = 'array' THEN s.patch ELSE '[]' END)
                    WITH ORDINALITY AS o(op, n),
                    LATERAL (VALUES (1, o.op->>'path'),
                                    (2, CASE WHEN o.op->>'op' = 'move' THEN o.op->>'from' END)) AS p(k, path)
              WHERE jsonb_typeof(o.op) = 'object' AND p.path IS NOT NULL
              ORDER BY o.n, p.k
              LIMIT %(paths)s)
  FROM user_memory_snapshots s
 WHERE s.user_id = %(u)s
 ORDER BY s.version DESC
 LIMIT %(limit)s
"""

_APPEND = "SELECT status, version, created_at FROM user_memory_append(%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)"

# Keys are found through the hash index of "<user id> <key>" (migrations/015), then compared.
_RECORDED = """
SELECT version FROM user_memory_snapshots
 WHERE (user_id::text || ' ' || idempotency_key) = (%(u)s::text || ' ' || %(k)s)
   AND user_id = %(u)s AND idempotency_key = %(k)s
"""

# The version as of a time: a user's versions are stamped in order (migrations/015), so it lies
# between the last checkpoint at or before the time and the next one (the checkpoints' index
# carries their times), found by the primary key.
_VERSION_AT = """
SELECT max(s.version) FROM user_memory_snapshots s
 WHERE s.user_id = %(u)s AND s.created_at <= %(t)s
   AND s.version >= coalesce((SELECT max(c.version) FROM user_memory_snapshots c
                               WHERE c.user_id = %(u)s AND c.is_full_snapshot AND c.created_at <= %(t)s), 1)
   AND s.version < coalesce((SELECT min(c.version) FROM user_memory_snapshots c
                              WHERE c.user_id = %(u)s AND c.is_full_snapshot AND c.created_at > %(t)s), 2147483647)
"""


class PostgresRecorder(_Database):
    """MemoryRecorder on PostgreSQL: user_memory_snapshots + user_memory_heads."""

    def read_head(self, user_id: uuid.UUID, key: str | None = None) -> tuple[MemoryVersion | None, int | None]:
        with self.connection() as conn:
            row = conn.execute(_HEAD, {"u": user_id, "k": key}, prepare=True).fetchone()
        if row is None or row[0] is None:
            return None, row[4] if row else None
        return MemoryVersion(version=row[0], document=row[1], created_at=row[2], source=row[3]), row[4]

    def read_rows(self, user_id: uuid.UUID, version: int) -> list[StoredRow]:
        with self.connection() as conn:
            rows = conn.execute(_ROWS, {"u": user_id, "v": version}, prepare=True).fetchall()
        return [StoredRow(version=r[0], patch=r[1], checkpoint=r[2], created_at=r[3], source=r[4]) for r in rows]

    def read_span(self, user_id: uuid.UUID, first: int, last: int) -> list[StoredRow]:
        with self.connection() as conn:
            rows = conn.execute(_SPAN, (user_id, first, last)).fetchall()
        return [StoredRow(version=r[0], patch=r[1], checkpoint=r[2], created_at=r[3], source=r[4]) for r in rows]

    def version_at(self, user_id: uuid.UUID, timestamp: datetime) -> int:
        with self.connection() as conn:
            row = conn.execute(_VERSION_AT, {"u": user_id, "t": timestamp}, prepare=True).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def read_history(self, user_id: uuid.UUID, *, limit: int, before_version: int | None) -> list[HistoryEntry]:
        with self.connection() as conn:
            rows = conn.execute(
                """SELECT version, patch, source_description, created_at, is_full_snapshot, provenance
                     FROM user_memory_snapshots
                    WHERE user_id = %s AND (%s::int IS NULL OR version < %s::int)
                    ORDER BY version DESC LIMIT %s""",
                (user_id, before_version, before_version, limit),
            ).fetchall()
        return [
            HistoryEntry(version=r[0], patch=r[1], source=r[2], created_at=r[3], is_checkpoint=r[4], provenance=r[5])
            for r in rows
        ]

    def read_changes(self, user_id: uuid.UUID, *, limit: int) -> list[VersionChange]:
        params = {"u": user_id, "limit": limit, "paths": MAX_CHANGED_PATHS, "chars": MAX_CHANGED_PATH_CHARS}
        with self.connection() as conn:
            rows = conn.execute(_CHANGES, params).fetchall()
        return [
            VersionChange(version=r[0], source=r[1], created_at=r[2], summary=r[3], paths=tuple(r[4])) for r in rows
        ]

    def read_tokens(self, user_id: uuid.UUID, since: datetime) -> int:
        with self.connection() as conn:
            row = conn.execute(_TOKENS_SINCE, (user_id, since)).fetchone()
        return int(row[0]) if row else 0

    def insert(self, new: NewVersion) -> InsertOutcome:
        params = (
            new.user_id,
            new.expected_version,
            Jsonb(new.patch),
            new.checkpoint,
            new.document_json,
            new.source,
            new.idempotency_key,
            list(new.activity_ids) if new.activity_ids else None,
            Jsonb(new.provenance) if new.provenance is not None else None,
            Jsonb(new.items) if new.items is not None else None,
        )
        with self.connection() as conn:
            try:
                if _in_transaction(conn):  # a savepoint, so the transaction survives a lost race
                    with conn.transaction():
                        row = conn.execute(_APPEND, params, prepare=True).fetchone()
                else:
                    row = conn.execute(_APPEND, params, prepare=True).fetchone()
            except pgerrors.UniqueViolation:
                # A concurrent first write for this user (no head row to lock yet) got there first.
                row = None
                raced = True
            else:
                raced = False
        if raced:
            return self._after_race(new)
        if row is None:
            raise StorageError("user_memory_append returned no row")
        return InsertOutcome(status=row[0], version=row[1], created_at=row[2])

    def _after_race(self, new: NewVersion) -> InsertOutcome:
        with self.connection() as conn:
            if new.idempotency_key is not None:
                recorded = conn.execute(_RECORDED, {"u": new.user_id, "k": new.idempotency_key}).fetchone()
                if recorded:
                    return InsertOutcome(status="idempotent", version=recorded[0])
            head = conn.execute("SELECT version FROM user_memory_heads WHERE user_id = %s", (new.user_id,)).fetchone()
        return InsertOutcome(status="conflict", version=head[0] if head else 0)

    def catch_up_index(self, user_id: uuid.UUID) -> str:
        in_transaction = False
        try:
            with self.connection() as conn:
                in_transaction = _in_transaction(conn)
                row = conn.execute(_CATCH_UP, (user_id,), prepare=True).fetchone()
        except UserMemoryError as failure:
            if in_transaction:  # the request's transaction: a refused index refuses its write too
                raise
            # The version is committed: the index stays behind (indexed_version), and the next
            # catch-up or the retention job's sweep of users behind brings it up.
            from user_memory.errors import describe_failure
            from user_memory.observability import logger, metrics

            error, reason = describe_failure(failure)
            logger.warning("index catch-up failed", user_id=str(user_id), error=error, reason=reason)
            metrics.add_metric(name="IndexCatchUpFailed", unit="Count", value=1)
            return "failed"
        return str(row[0]) if row else "none"

    def mark_summarized(self, user_id: uuid.UUID, version: int, activity_ids: Sequence[int]) -> int:
        with self.connection() as conn:
            row = conn.execute(
                "SELECT user_memory_mark_summarized(%s, %s, %s)", (user_id, version, list(activity_ids))
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def erase(self, user_id: uuid.UUID) -> dict[str, int]:
        with self.connection() as conn:
            rows = conn.execute("SELECT relation, deleted FROM user_memory_erase(%s)", (user_id,)).fetchall()
        return {r[0]: int(r[1]) for r in rows}


# migrations/022: the index's rows for the versions since indexed_version, from the stored head.
_CATCH_UP = "SELECT status FROM user_memory_index_catch_up(%s)"

_INSERT_ACTIVITY = """
INSERT INTO user_activity (user_id, occurred_at, kind, payload, source, external_id)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, source, external_id) DO NOTHING
"""

# Keyset page of users with unsummarized activity that occurred before the window's end: walks
# the partial index of unsummarized rows (about a day's worth) in user order; never OFFSET.
# Late arrivals and the leftovers of a failed run are found the same way as the day's activity.
#
# The companion layer adds the users the night has work for without new activity: unsummarized
# feedback ratings (summarized into the feedback element) and open to-dos, active goals or events
# still to come (the daily digest), as they stood at the window's end. Each branch walks its own
# partial index in user order and stops at the page's size, so a page costs the same however many
# users there are.
_ACTIVE_PAGE = """
SELECT user_id FROM (
  (SELECT DISTINCT user_id FROM user_activity
    WHERE summarized_version IS NULL AND user_id > %(after)s AND occurred_at < %(end)s
    ORDER BY user_id LIMIT %(limit)s)
  UNION
  (SELECT DISTINCT user_id FROM feedback_ratings
    WHERE summarized_version IS NULL AND user_id > %(after)s AND recorded_at < %(end)s
    ORDER BY user_id LIMIT %(limit)s)
  UNION
  (SELECT DISTINCT user_id FROM memory_items
    WHERE kind = 'todo' AND status IN ('open', 'in_progress') AND user_id > %(after)s AND updated_at < %(end)s
    ORDER BY user_id LIMIT %(limit)s)
  UNION
  (SELECT DISTINCT user_id FROM memory_items
    WHERE kind = 'goal' AND status = 'active' AND user_id > %(after)s AND updated_at < %(end)s
    ORDER BY user_id LIMIT %(limit)s)
  UNION
  (SELECT DISTINCT user_id FROM memory_items
    WHERE kind = 'event' AND user_id > %(after)s AND updated_at < %(end)s AND (ends_at >= %(end)s OR recurring)
    ORDER BY user_id LIMIT %(limit)s)
) users
 ORDER BY user_id
 LIMIT %(limit)s
"""

_UNSUMMARIZED = """
SELECT id, user_id, occurred_at, kind, payload, source, external_id FROM user_activity
 WHERE user_id = %s AND summarized_version IS NULL AND occurred_at < %s AND id > %s
 ORDER BY id
 LIMIT %s
"""

_NIL = uuid.UUID(int=0)


class PostgresActivity(_Database):
    """ActivityReader and ActivityWriter on user_activity."""

    def record(self, activities: Iterable[Activity]) -> int:
        rows = [(a.user_id, a.occurred_at, a.kind, Jsonb(a.payload), a.source, a.external_id) for a in activities]
        if not rows:
            return 0
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_INSERT_ACTIVITY, rows, returning=False)
            return max(cur.rowcount, 0)

    def active_user_pages(self, window: Window, *, page_size: int) -> Iterator[list[uuid.UUID]]:
        after = _NIL
        while True:
            with self.connection() as conn:
                rows = conn.execute(
                    _ACTIVE_PAGE, {"after": after, "end": window.end, "limit": page_size}, prepare=True
                ).fetchall()
            if not rows:
                return
            page = [r[0] for r in rows]
            yield page
            if len(page) < page_size:
                return
            after = page[-1]

    def unsummarized(self, user_id: uuid.UUID, *, before: datetime, after_id: int = 0, limit: int) -> list[Activity]:
        with self.connection() as conn:
            rows = conn.execute(_UNSUMMARIZED, (user_id, before, after_id, limit), prepare=True).fetchall()
        return [
            Activity(id=r[0], user_id=r[1], occurred_at=r[2], kind=r[3], payload=r[4], source=r[5], external_id=r[6])
            for r in rows
        ]

"""Key-value memory stores: PostgreSQL (user_memory_kv, migrations/008) and in memory.

Both implement `user_memory.domain.kv.KvStore` and are held to one contract suite
(tests/contract/test_kv_contract.py). Both validate every argument with the domain's functions
before anything is read or written.

Time: each store reads its own clock (`now`, a callable returning an aware datetime; UTC now by
default) once per call and uses that reading for every timestamp and every expiry check of the
call. On PostgreSQL the reading is passed to the statements as a parameter instead of using the
server's now(), so a test (or a job replaying a day) controls expiry through the clock; the
database's own now() only applies to rows written directly by end users (a trigger stamps them).

Values come back as fresh Python objects on every read. PostgreSQL's jsonb returns an object's
keys in its own order (shorter keys first); compare values as mappings, not as text.
"""

from __future__ import annotations

import builtins
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from user_memory.adapters.postgres import ConnectionSource, _Database
from user_memory.domain.kv import (
    DATABASE_VALUE_TEXT_BYTES,
    MAX_TTL_SECONDS,
    Clock,
    JsonValue,
    KvEntry,
    KvPage,
    decode_value,
    ttl_of,
    utc_now,
    validate_key,
    validate_keys,
    validate_limit,
    validate_max_age_days,
    validate_namespace,
    validate_put,
    validate_time,
)
from user_memory.domain.model import parse_user_id
from user_memory.errors import InvalidKvEntry, KvValueTooLarge

# The CHECK constraints of user_memory_kv (migrations/008) and the field each one guards.
_CONSTRAINT_FIELDS = {
    "user_memory_kv_namespace_check": "namespace",
    "user_memory_kv_key_check": "key",
    "user_memory_kv_expiry_check": "ttl_seconds",
}
_VALUE_SIZE_CONSTRAINT = "user_memory_kv_value_size_check"


def kv_error_for_check(err: pgerrors.CheckViolation) -> InvalidKvEntry:
    """The InvalidKvEntry for a CHECK constraint of user_memory_kv that refused a row.

    Named from the constraint alone: the server's message DETAIL quotes the failing row, so
    nothing of the driver's error is carried over (callers raise this `from None`).
    """
    name = getattr(err.diag, "constraint_name", None) or ""
    if name == _VALUE_SIZE_CONSTRAINT:
        return KvValueTooLarge(None, DATABASE_VALUE_TEXT_BYTES, measure="the database's jsonb text")
    field = _CONSTRAINT_FIELDS.get(name)
    if field is None:
        return InvalidKvEntry("entry", f"refused by the database's check constraint {name or '(unnamed)'}")
    return InvalidKvEntry(field, "refused by the database's check constraint (outside the documented limits)")


# -- PostgreSQL -------------------------------------------------------------------------------------

_COLUMNS = "user_id, namespace, key, value, created_at, updated_at, expires_at"

# One statement: insert, or replace the value and the expiry of the existing row. created_at is
# kept, unless the row had expired (it no longer existed for readers: the entry starts again).
_PUT = f"""
INSERT INTO user_memory_kv AS kv (user_id, namespace, key, value, created_at, updated_at, expires_at)
VALUES (%(u)s, %(ns)s, %(k)s, %(v)s::jsonb, %(now)s, %(now)s, %(exp)s)
ON CONFLICT (user_id, namespace, key) DO UPDATE
   SET value = EXCLUDED.value,
       created_at = CASE WHEN kv.expires_at <= EXCLUDED.updated_at THEN EXCLUDED.created_at
                         ELSE kv.created_at END,
       updated_at = EXCLUDED.updated_at,
       expires_at = EXCLUDED.expires_at
RETURNING {_COLUMNS}
"""

_LIVE = "(expires_at IS NULL OR expires_at > %(now)s)"

_GET = f"""
SELECT {_COLUMNS} FROM user_memory_kv
 WHERE user_id = %(u)s AND namespace = %(ns)s AND key = %(k)s AND {_LIVE}
"""


# Keyset pages along the primary key (user_id, namespace, key). key is COLLATE "C": the index
# order and the comparison are code point order, the same as Python's str ordering. With a prefix:
# the keys from the prefix up to its upper bound (`_prefix_end`), a range of the primary key;
# starts_with keeps the rule exact where there is no bound.
def _page_statement(*, after: bool, prefix: bool) -> str:
    where = "user_id = %(u)s AND namespace = %(ns)s"
    if after:
        where += " AND key > %(after)s"
    if prefix:
        where += (
            " AND key >= %(prefix)s AND starts_with(key, %(prefix)s)"
            " AND (%(prefix_end)s::text IS NULL OR key < %(prefix_end)s::text)"
        )
    return f"SELECT {_COLUMNS} FROM user_memory_kv WHERE {where} AND {_LIVE} ORDER BY key LIMIT %(limit)s"


_PAGES = {(a, p): _page_statement(after=a, prefix=p) for a in (False, True) for p in (False, True)}

# A touch: each live entry with an expiry gets it again from now, its TTL the whole seconds between
# its last write and its expiry (for end users the table's trigger stamps updated_at with the
# database's time; the rounding keeps the TTL from drifting by that difference).
_TOUCH = f"""
UPDATE user_memory_kv
   SET updated_at = %(now)s,
       expires_at = %(now)s + make_interval(
         secs => least(greatest(round(extract(epoch FROM expires_at - updated_at)), 1), %(max_ttl)s))
 WHERE user_id = %(u)s AND namespace = %(ns)s AND key = ANY(%(keys)s)
   AND expires_at IS NOT NULL AND {_LIVE}
RETURNING key
"""

_DELETE = f"""
DELETE FROM user_memory_kv
 WHERE user_id = %(u)s AND namespace = %(ns)s AND key = %(k)s
RETURNING {_LIVE}
"""

_PURGE = "SELECT user_memory_kv_purge(%s, %s)"
# One namespace's stale entries, for every user (the service's rights; a daily scan).
_PURGE_NAMESPACE = "DELETE FROM user_memory_kv WHERE namespace = %s AND updated_at <= %s"


def _prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` in code point order (None:
    none exists, the prefix ends with the last code point)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return None
    last = ord(stripped[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # no surrogates in text: the next code point after them
        last = 0xE000
    return stripped[:-1] + chr(last)


def _entry(row: tuple[Any, ...]) -> KvEntry:
    return KvEntry(
        user_id=row[0],
        namespace=row[1],
        key=row[2],
        value=row[3],
        created_at=row[4].astimezone(UTC),
        updated_at=row[5].astimezone(UTC),
        expires_at=row[6].astimezone(UTC) if row[6] is not None else None,
    )


def _page(rows: builtins.list[KvEntry], limit: int) -> KvPage:
    """A page from up to limit + 1 entries (the extra one only says that another page exists)."""
    entries = tuple(rows[:limit])
    return KvPage(entries=entries, next_after_key=entries[-1].key if len(rows) > limit else None)


class PostgresKv(_Database):
    """KvStore on PostgreSQL's user_memory_kv; one statement (one round trip) per call.

    Runs as the service (service_role, or the owner); end users reach the table directly under
    RLS instead. A CHECK constraint that refuses a row surfaces as InvalidKvEntry naming the field;
    every other driver error is translated by `_Database.connection()`.
    """

    def __init__(self, pool: ConnectionSource, *, now: Clock = utc_now) -> None:
        super().__init__(pool)
        self._clock = now

    def _now(self) -> datetime:
        return validate_time(self._clock(), "clock")

    @contextmanager
    def _statement(self) -> Iterator[psycopg.Connection]:
        with self.connection() as conn:
            try:
                yield conn
            except pgerrors.CheckViolation as err:
                raise kv_error_for_check(err) from None

    def get(self, user_id: object, namespace: str, key: str) -> KvEntry | None:
        params = {"u": parse_user_id(user_id), "ns": validate_namespace(namespace), "k": validate_key(key)}
        params["now"] = self._now()
        with self._statement() as conn:
            row = conn.execute(_GET, params, prepare=True).fetchone()
        return _entry(row) if row is not None else None

    def put(
        self, user_id: object, namespace: str, key: str, value: JsonValue, ttl_seconds: int | None = None
    ) -> KvEntry:
        new = validate_put(user_id, namespace, key, value, ttl_seconds)
        now = self._now()
        expires = now + timedelta(seconds=new.ttl_seconds) if new.ttl_seconds is not None else None
        params = {"u": new.user_id, "ns": new.namespace, "k": new.key, "v": new.value_json, "now": now, "exp": expires}
        with self._statement() as conn:
            row = conn.execute(_PUT, params, prepare=True).fetchone()
        if row is None:  # pragma: no cover - INSERT ... RETURNING always returns the row
            raise InvalidKvEntry("entry", "the database returned no row for the put")
        return _entry(row)

    def delete(self, user_id: object, namespace: str, key: str) -> bool:
        params = {"u": parse_user_id(user_id), "ns": validate_namespace(namespace), "k": validate_key(key)}
        params["now"] = self._now()
        with self._statement() as conn:
            row = conn.execute(_DELETE, params, prepare=True).fetchone()
        return bool(row[0]) if row is not None else False

    def list(
        self, user_id: object, namespace: str, *, limit: int, after_key: str | None = None, prefix: str | None = None
    ) -> KvPage:
        params = {
            "u": parse_user_id(user_id),
            "ns": validate_namespace(namespace),
            "limit": validate_limit(limit) + 1,
            "after": validate_key(after_key, "after_key") if after_key is not None else None,
            "now": self._now(),
        }
        if prefix is not None:
            params["prefix"] = validate_key(prefix, "prefix")
            params["prefix_end"] = _prefix_end(prefix)
        statement = _PAGES[(after_key is not None, prefix is not None)]
        with self._statement() as conn:
            rows = conn.execute(statement, params, prepare=True).fetchall()
        return _page([_entry(r) for r in rows], limit)

    def touch(self, user_id: object, namespace: str, keys: Sequence[str]) -> builtins.list[str]:
        params = {
            "u": parse_user_id(user_id),
            "ns": validate_namespace(namespace),
            "keys": validate_keys(keys),
            "now": self._now(),
            "max_ttl": MAX_TTL_SECONDS,
        }
        with self._statement() as conn:
            rows = conn.execute(_TOUCH, params, prepare=True).fetchall()
        return sorted(r[0] for r in rows)

    def purge(self, *, now: datetime | None = None, max_age_days: int) -> int:
        days = validate_max_age_days(max_age_days)
        at = validate_time(now) if now is not None else self._now()
        with self._statement() as conn:
            row = conn.execute(_PURGE, (days, at)).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def purge_namespace(self, namespace: str, *, now: datetime | None = None, max_age_days: int) -> int:
        ns = validate_namespace(namespace)
        days = validate_max_age_days(max_age_days)
        at = validate_time(now) if now is not None else self._now()
        with self._statement() as conn:
            return conn.execute(_PURGE_NAMESPACE, (ns, at - timedelta(days=days))).rowcount


# -- in memory --------------------------------------------------------------------------------------


@dataclass
class _Stored:
    value_json: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None

    def live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now


class InMemoryKv:
    """KvStore in a dict, the same behaviour as PostgresKv; every call is atomic under one lock.

    Values are kept as JSON text, so callers can never alias what is stored.
    """

    def __init__(self, *, now: Clock = utc_now) -> None:
        self._namespaces: dict[tuple[uuid.UUID, str], dict[str, _Stored]] = {}
        self._lock = threading.Lock()
        self._clock = now

    def _now(self) -> datetime:
        return validate_time(self._clock(), "clock")

    @staticmethod
    def _entry(uid: uuid.UUID, namespace: str, key: str, stored: _Stored) -> KvEntry:
        return KvEntry(
            user_id=uid,
            namespace=namespace,
            key=key,
            value=decode_value(stored.value_json),
            created_at=stored.created_at,
            updated_at=stored.updated_at,
            expires_at=stored.expires_at,
        )

    def get(self, user_id: object, namespace: str, key: str) -> KvEntry | None:
        uid, ns, k = parse_user_id(user_id), validate_namespace(namespace), validate_key(key)
        now = self._now()
        with self._lock:
            stored = self._namespaces.get((uid, ns), {}).get(k)
            if stored is None or not stored.live(now):
                return None
            return self._entry(uid, ns, k, stored)

    def put(
        self, user_id: object, namespace: str, key: str, value: JsonValue, ttl_seconds: int | None = None
    ) -> KvEntry:
        new = validate_put(user_id, namespace, key, value, ttl_seconds)
        now = self._now()
        expires = now + timedelta(seconds=new.ttl_seconds) if new.ttl_seconds is not None else None
        with self._lock:
            entries = self._namespaces.setdefault((new.user_id, new.namespace), {})
            old = entries.get(new.key)
            created = old.created_at if old is not None and old.live(now) else now
            stored = _Stored(value_json=new.value_json, created_at=created, updated_at=now, expires_at=expires)
            entries[new.key] = stored
            return self._entry(new.user_id, new.namespace, new.key, stored)

    def delete(self, user_id: object, namespace: str, key: str) -> bool:
        uid, ns, k = parse_user_id(user_id), validate_namespace(namespace), validate_key(key)
        now = self._now()
        with self._lock:
            entries = self._namespaces.get((uid, ns), {})
            stored = entries.pop(k, None)
            if not entries:
                self._namespaces.pop((uid, ns), None)
            return stored is not None and stored.live(now)

    def list(
        self, user_id: object, namespace: str, *, limit: int, after_key: str | None = None, prefix: str | None = None
    ) -> KvPage:
        uid, ns, size = parse_user_id(user_id), validate_namespace(namespace), validate_limit(limit)
        after = validate_key(after_key, "after_key") if after_key is not None else None
        start = validate_key(prefix, "prefix") if prefix is not None else ""
        now = self._now()
        with self._lock:
            entries = self._namespaces.get((uid, ns), {})
            # Python orders str by code point, as PostgreSQL's "C" collation orders the key column.
            keys = sorted(
                k for k, s in entries.items() if s.live(now) and (after is None or k > after) and k.startswith(start)
            )
            picked = [self._entry(uid, ns, k, entries[k]) for k in keys[: size + 1]]
        return _page(picked, size)

    def touch(self, user_id: object, namespace: str, keys: Sequence[str]) -> builtins.list[str]:
        uid, ns, wanted = parse_user_id(user_id), validate_namespace(namespace), validate_keys(keys)
        now = self._now()
        touched = []
        with self._lock:
            entries = self._namespaces.get((uid, ns), {})
            for key in wanted:
                stored = entries.get(key)
                if stored is None or stored.expires_at is None or not stored.live(now):
                    continue
                ttl = ttl_of(stored.updated_at, stored.expires_at)
                stored.updated_at, stored.expires_at = now, now + timedelta(seconds=ttl)
                touched.append(key)
        return touched

    def purge(self, *, now: datetime | None = None, max_age_days: int) -> int:
        days = validate_max_age_days(max_age_days)
        at = validate_time(now) if now is not None else self._now()
        stale = at - timedelta(days=days)
        removed = 0
        with self._lock:
            for where, entries in builtins.list(self._namespaces.items()):
                gone = [k for k, s in entries.items() if not s.live(at) or s.updated_at <= stale]
                for k in gone:
                    del entries[k]
                removed += len(gone)
                if not entries:
                    del self._namespaces[where]
        return removed

    def purge_namespace(self, namespace: str, *, now: datetime | None = None, max_age_days: int) -> int:
        ns = validate_namespace(namespace)
        days = validate_max_age_days(max_age_days)
        at = validate_time(now) if now is not None else self._now()
        stale = at - timedelta(days=days)
        removed = 0
        with self._lock:
            for where, entries in builtins.list(self._namespaces.items()):
                if where[1] != ns:
                    continue
                gone = [k for k, s in entries.items() if s.updated_at <= stale]
                for k in gone:
                    del entries[k]
                removed += len(gone)
                if not entries:
                    del self._namespaces[where]
        return removed

    def entries_of(self, user_id: object) -> builtins.list[KvEntry]:
        """Every live entry of the user by namespace and key (an export)."""
        uid = parse_user_id(user_id)
        now = self._now()
        with self._lock:
            found = [
                self._entry(uid, where[1], key, stored)
                for where, entries in self._namespaces.items()
                if where[0] == uid
                for key, stored in entries.items()
                if stored.live(now)
            ]
        return sorted(found, key=lambda e: (e.namespace, e.key))

    def erase(self, user_id: object) -> int:
        """Every entry of the user, expired or not (what user_memory_erase does on PostgreSQL);
        for an in-memory recorder's erase to report as 'user_memory_kv'."""
        uid = parse_user_id(user_id)
        with self._lock:
            mine = [where for where in self._namespaces if where[0] == uid]
            return sum(len(self._namespaces.pop(where)) for where in mine)

"""Key-value memory: short-lived context per user, beside the versioned memory document. No I/O.

An entry is (user, namespace, key) -> a JSON value, with an optional time to live. Entries are
not versioned: a put replaces the value. Limits, checked here before anything is written (both
stores call these functions first; PostgreSQL's CHECK constraints in migrations/008 repeat them
for writers that bypass the service):

- namespace: `NAMESPACE_PATTERN`, ^[a-z0-9][a-z0-9_.-]{0,63}$: 1 to 64 characters, lower-case
  ASCII letters, digits, '_', '.' and '-', starting with a letter or a digit ("default",
  "chat.session-1"). The default namespace is "default".
- key: 1 to 256 characters of any text except control characters (Unicode category Cc:
  U+0000-U+001F and U+007F-U+009F). Keys are compared and listed in code point order.
- value: any JSON value (null, booleans, numbers, strings, arrays, objects with string keys),
  at most `MAX_VALUE_BYTES` (10,240) bytes of compact UTF-8 JSON and `MAX_VALUE_DEPTH` levels
  of nesting. Numbers are kept the way PostgreSQL's jsonb keeps them, written out in full: a
  float whose JSON form has an exponent (1e+16, 1.5e-07) is encoded and measured written out
  (10000000000000000, 0.00000015), so it reads back from every store as the number that text
  means (an integer for 1e+16). Strings may not contain U+0000 (jsonb cannot store it).
- ttl_seconds: None (no expiry) or 1 to `MAX_TTL_SECONDS` (31,536,000, 365 days). Every put sets
  the expiry again from its own time: expires_at = updated_at + ttl_seconds, or none.
- an entry whose expires_at is at or before the store's clock is expired: never returned by get
  or list, and removed by purge.
- list takes an optional key `prefix` (a key's rules, 1 to 256 characters): only keys that start
  with it, still in key order and in keyset pages.
- touch (1 to `MAX_PAGE_SIZE` keys) keeps live entries that have an expiry alive for their time to
  live again: updated_at becomes now and expires_at now + their TTL (the time between their last
  write and their expiry, in whole seconds, what the put that set it asked for). Entries without an
  expiry, expired or missing are left alone; the answer names the keys it touched.

Errors are InvalidKvEntry (a ValueError) naming the field, never its content, or
KvValueTooLarge for the value's size.
"""

from __future__ import annotations

import builtins
import json
import math
import re
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from user_memory.domain.model import parse_user_id
from user_memory.errors import InvalidKvEntry, KvValueTooLarge

JsonValue = Any

DEFAULT_NAMESPACE = "default"
NAMESPACE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # matched whole (fullmatch)
MAX_KEY_CHARS = 256
MAX_VALUE_BYTES = 10_240
MAX_VALUE_DEPTH = 64  # JSON parsers recurse; a deeper value could be stored but not read back
MAX_TTL_SECONDS = 31_536_000
MAX_PAGE_SIZE = 1_000
MAX_AGE_DAYS_LIMIT = 36_500  # a purge's max_age_days, 1 .. this (100 years)
# PostgreSQL's backstop for the value, in jsonb's text form (a space after every ',' and ':').
# A value within MAX_VALUE_BYTES is at most 1.5 times that in this form (15,360 bytes), because
# its numbers are already written out in full; see encode_value.
DATABASE_VALUE_TEXT_BYTES = 16_384

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The default clock of both stores."""
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class KvEntry:
    """One stored entry as a store returns it (a new object, and a new value, on every read)."""

    user_id: uuid.UUID
    namespace: str
    key: str
    value: JsonValue
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class KvPage:
    """One page of a namespace's live entries in key order.

    `next_after_key` is the `after_key` of the next page, None when this page is the last.
    """

    entries: tuple[KvEntry, ...]
    next_after_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class KvPut:
    """A put, validated: what a store writes. `value_json` is the value's compact JSON, encoded once."""

    user_id: uuid.UUID
    namespace: str
    key: str
    value_json: str
    ttl_seconds: int | None = None


class KvStore(Protocol):
    """Key-value memory per user (PostgresKv, InMemoryKv). Every method validates its arguments
    first and raises InvalidKvEntry (or InvalidUserId) before touching storage. Times come from
    the store's clock (`now`, injectable), never from the database's."""

    def get(self, user_id: object, namespace: str, key: str) -> KvEntry | None:
        """The entry, or None when there is none or it has expired."""
        ...

    def put(
        self, user_id: object, namespace: str, key: str, value: JsonValue, ttl_seconds: int | None = None
    ) -> KvEntry:
        """Insert or replace the entry. A replaced entry keeps its created_at (unless it had
        expired: then it starts again); updated_at is now, and expires_at is now + ttl_seconds, or
        None (no expiry) when ttl_seconds is None."""
        ...

    def delete(self, user_id: object, namespace: str, key: str) -> bool:
        """Remove the entry; True when a live entry was removed (an expired one is removed too,
        but reported as False: it no longer existed for the caller)."""
        ...

    def list(
        self, user_id: object, namespace: str, *, limit: int, after_key: str | None = None, prefix: str | None = None
    ) -> KvPage:
        """Live entries of one namespace in key order (code points), at most `limit` (1 to
        MAX_PAGE_SIZE), only keys after `after_key`: keyset paging, no gaps or repeats; with
        `prefix`, only keys that start with it."""
        ...

    def touch(self, user_id: object, namespace: str, keys: Sequence[str]) -> builtins.list[str]:
        """Live entries of `keys` that have an expiry get it again from now (their own TTL); the
        keys touched, in key order."""
        ...

    def purge(self, *, now: datetime | None = None, max_age_days: int) -> int:
        """The retention job, for every user: delete expired entries and entries not updated for
        `max_age_days` days or more (updated_at at or before now - max_age_days). Returns how
        many rows were deleted. `now` defaults to the store's clock."""
        ...

    def purge_namespace(self, namespace: str, *, now: datetime | None = None, max_age_days: int) -> int:
        """The retention job, for every user: delete the namespace's entries not updated for
        `max_age_days` days or more (KV_NAMESPACE_MAX_AGE_DAYS). Returns how many rows went."""
        ...


# -- validation ------------------------------------------------------------------------------------


def validate_namespace(namespace: object) -> str:
    if not isinstance(namespace, str):
        raise InvalidKvEntry("namespace", "must be a string")
    if not NAMESPACE_PATTERN.fullmatch(namespace):
        raise InvalidKvEntry(
            "namespace",
            "must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-', starting with a letter or a digit",
        )
    return namespace


def validate_key(key: object, field: str = "key") -> str:
    if not isinstance(key, str):
        raise InvalidKvEntry(field, "must be a string")
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise InvalidKvEntry(field, f"must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}")
    if any(unicodedata.category(ch) == "Cc" for ch in key):
        raise InvalidKvEntry(field, "must not contain control characters")
    if any(unicodedata.category(ch) == "Cs" for ch in key):
        raise InvalidKvEntry(field, "is not valid Unicode text (a lone surrogate)")
    return key


def validate_ttl(ttl_seconds: object) -> int | None:
    if ttl_seconds is None:
        return None
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
        raise InvalidKvEntry("ttl_seconds", "must be a whole number of seconds, or None for no expiry")
    if not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidKvEntry("ttl_seconds", f"must be 1 to {MAX_TTL_SECONDS:,} seconds, got {ttl_seconds}")
    return ttl_seconds


def validate_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidKvEntry("limit", f"must be a whole number from 1 to {MAX_PAGE_SIZE:,}")
    return limit


def validate_keys(keys: object) -> builtins.list[str]:
    """1 to MAX_PAGE_SIZE keys (a touch), each a valid key; duplicates once, in key order."""
    if isinstance(keys, str) or not isinstance(keys, list | tuple):
        raise InvalidKvEntry("keys", "must be a list of keys")
    if not 1 <= len(keys) <= MAX_PAGE_SIZE:
        raise InvalidKvEntry("keys", f"must hold 1 to {MAX_PAGE_SIZE:,} keys, got {len(keys)}")
    return sorted({validate_key(k, "keys") for k in keys})


def ttl_of(updated_at: datetime, expires_at: datetime) -> int:
    """An entry's time to live in whole seconds, from its last write and its expiry (at least 1)."""
    return max(1, min(MAX_TTL_SECONDS, round((expires_at - updated_at).total_seconds())))


def validate_max_age_days(max_age_days: object) -> int:
    if (
        isinstance(max_age_days, bool)
        or not isinstance(max_age_days, int)
        or not 1 <= max_age_days <= MAX_AGE_DAYS_LIMIT
    ):
        raise InvalidKvEntry("max_age_days", f"must be a whole number of days from 1 to {MAX_AGE_DAYS_LIMIT:,}")
    return max_age_days


def validate_time(value: object, field: str = "now") -> datetime:
    """An aware datetime, in UTC (a clock's reading or a caller's `now`)."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidKvEntry(field, "must be a timezone-aware datetime")
    return value.astimezone(UTC)


def validate_put(
    user_id: object, namespace: object, key: object, value: JsonValue, ttl_seconds: object = None
) -> KvPut:
    """Every check of a put, cheapest first; the value is encoded once, here."""
    uid = parse_user_id(user_id)
    ns = validate_namespace(namespace)
    k = validate_key(key)
    ttl = validate_ttl(ttl_seconds)
    return KvPut(user_id=uid, namespace=ns, key=k, value_json=encode_value(value), ttl_seconds=ttl)


def encode_value(value: JsonValue) -> str:
    """The value's compact JSON, as stored and measured; InvalidKvEntry or KvValueTooLarge.

    Written without recursion (a deeply nested value is refused, not a RecursionError).
    Objects keep their key order; numbers are written out in full (see the module docstring).
    """
    parts: list[str] = []
    size = 0
    # A stack of (value, depth) to encode, or plain text to emit (separators, closing brackets).
    stack: list[tuple[JsonValue, int] | str] = [(value, 1)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            size += len(item)
            continue
        node, depth = item
        if isinstance(node, dict | list | tuple):
            if depth > MAX_VALUE_DEPTH:
                raise InvalidKvEntry("value", f"is nested more than {MAX_VALUE_DEPTH} levels deep")
            if isinstance(node, dict):
                parts.append("{")
                pending: list[tuple[JsonValue, int] | str] = []
                for i, (k, v) in enumerate(node.items()):
                    if not isinstance(k, str):
                        raise InvalidKvEntry("value", "object keys must be strings")
                    pending.append(("," if i else "") + _string(k) + ":")
                    pending.append((v, depth + 1))
                pending.append("}")
            else:
                parts.append("[")
                pending = []
                for i, v in enumerate(node):
                    if i:
                        pending.append(",")
                    pending.append((v, depth + 1))
                pending.append("]")
            size += 1
            stack.extend(reversed(pending))
        else:
            text = _scalar(node)
            parts.append(text)
            size += len(text)
        # Characters are a lower bound of bytes, so a value this far over the limit is refused
        # without encoding the rest; nearer the limit the exact size is reported below.
        if size > MAX_VALUE_BYTES * 4:
            raise KvValueTooLarge(None, MAX_VALUE_BYTES)
    encoded = "".join(parts)
    try:
        size = len(encoded.encode())
    except UnicodeEncodeError:
        raise InvalidKvEntry("value", "is not valid Unicode text (a lone surrogate)") from None
    if size > MAX_VALUE_BYTES:
        raise KvValueTooLarge(size, MAX_VALUE_BYTES)
    return encoded


def _string(text: str) -> str:
    if "\x00" in text:
        raise InvalidKvEntry("value", "strings must not contain the NUL character (U+0000)")
    return json.dumps(text, ensure_ascii=False)


def _scalar(node: JsonValue) -> str:
    if node is None:
        return "null"
    if node is True:
        return "true"
    if node is False:
        return "false"
    if isinstance(node, str):
        return _string(node)
    if isinstance(node, int):
        try:
            return int.__repr__(node)
        except ValueError:  # more digits than Python converts to text
            raise KvValueTooLarge(None, MAX_VALUE_BYTES) from None
    if isinstance(node, float):
        if not math.isfinite(node):
            raise InvalidKvEntry("value", "NaN and Infinity are not JSON numbers")
        text = float.__repr__(node)
        if "e" in text:  # written out in full, as jsonb's numeric prints it
            text = format(Decimal(text), "f")
        if node == 0:
            text = "0.0"  # numeric has no negative zero
        return text
    raise InvalidKvEntry("value", f"a {type(node).__name__} is not a JSON value")


def decode_value(value_json: str) -> JsonValue:
    """A fresh Python value from stored JSON text."""
    return json.loads(value_json)


class KvService:
    """One user's key-value memory, on one unit of work (the store's calls bound to the user)."""

    def __init__(self, user_id: uuid.UUID, store: KvStore) -> None:
        self.user_id = user_id
        self._store = store

    def list(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        limit: int = 100,
        after: str | None = None,
        prefix: str | None = None,
    ) -> KvPage:
        return self._store.list(self.user_id, namespace, limit=limit, after_key=after, prefix=prefix)

    def touch(self, namespace: str, keys: builtins.list[str]) -> builtins.list[str]:
        return self._store.touch(self.user_id, namespace, keys)

    def get(self, namespace: str, key: str) -> KvEntry | None:
        return self._store.get(self.user_id, namespace, key)

    def put(self, namespace: str, key: str, value: JsonValue, ttl_seconds: int | None = None) -> KvEntry:
        return self._store.put(self.user_id, namespace, key, value, ttl_seconds)

    def delete(self, namespace: str, key: str) -> bool:
        return self._store.delete(self.user_id, namespace, key)

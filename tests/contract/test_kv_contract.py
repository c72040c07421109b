"""One contract for key-value memory, run against every store: in-memory and PostgreSQL.

Put, get, overwrite, expiry, keyset paging, delete, every documented limit, unicode keys and
the purge behave the same whichever store holds the entries. Time is an injected clock that the
tests move forward; PostgreSQL receives its readings as parameters, so expiry is exact there too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from user_memory.adapters.kv import InMemoryKv, PostgresKv
from user_memory.domain.kv import (
    DEFAULT_NAMESPACE,
    MAX_TTL_SECONDS,
    MAX_VALUE_BYTES,
    KvStore,
    encode_value,
)
from user_memory.domain.memory.patching import json_equal
from user_memory.errors import InvalidKvEntry, InvalidUserId, KvValueTooLarge

# Clock readings of these tests are years from the real time on purpose: the purge tests delete
# across every user of the database, and what one test writes must not be stale for another.
START = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
PURGE_START = datetime(2001, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves; the stores call it for every reading."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


KvFactory = Callable[[Clock], KvStore]


@pytest.fixture(params=["memory", "postgres"])
def make_kv(request) -> KvFactory:
    """A store of the parametrized kind that reads the given clock (PostgreSQL: the session's database)."""
    if request.param == "memory":
        return lambda clock: InMemoryKv(now=clock)
    pool = request.getfixturevalue("pool")
    return lambda clock: PostgresKv(pool, now=clock)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kv(make_kv: KvFactory, clock: Clock) -> KvStore:
    return make_kv(clock)


def all_keys(kv: KvStore, user: object, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    page = kv.list(user, namespace, limit=1000)
    assert page.next_after_key is None
    return [e.key for e in page.entries]


# -- put and get ------------------------------------------------------------------------------------


def test_put_then_get_returns_the_entry(kv, clock, user_id):
    # Given an entry written with no expiry
    value = {"topic": "sleep", "mood": ["tired", 3, 1.5, True, None], "nested": {"é": "ü"}}
    written = kv.put(user_id, "chat", "session:1", value)
    # When it is read
    got = kv.get(user_id, "chat", "session:1")
    # Then both carry the value, the names, and the clock's time, and no expiry
    for entry in (written, got):
        assert entry is not None
        assert entry.user_id == uuid.UUID(user_id)
        assert (entry.namespace, entry.key) == ("chat", "session:1")
        assert json_equal(entry.value, value)
        assert entry.created_at == entry.updated_at == clock.now
        assert entry.expires_at is None
    # And a key that was never written is None
    assert kv.get(user_id, "chat", "session:2") is None
    assert kv.get(user_id, DEFAULT_NAMESPACE, "session:1") is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -7,
        2**70,
        0.1,
        1.0,
        -2.5,
        "",
        'text with "quotes", \\ and \n',
        [],
        {},
        [[[]]],
        {"a": {"b": [1, {"c": None}]}},
    ],
    ids=repr,
)
def test_any_json_value_round_trips_with_exact_types(kv, user_id, value):
    kv.put(user_id, DEFAULT_NAMESPACE, "k", value)
    got = kv.get(user_id, DEFAULT_NAMESPACE, "k")
    assert got is not None and json_equal(got.value, value)


def test_numbers_in_exponent_form_are_kept_written_out_in_every_store(kv, user_id):
    # Given floats whose JSON form has an exponent
    kv.put(user_id, DEFAULT_NAMESPACE, "n", [1e16, 1.5e-07, -0.0, 1e300])
    # Then every store returns the numbers that the written-out text means (jsonb's numeric)
    got = kv.get(user_id, DEFAULT_NAMESPACE, "n")
    assert got is not None
    assert json_equal(got.value, [10**16, 1.5e-07, 0.0, 10**300])
    # And that written-out text is what the size limit measures
    assert encode_value([1e300]) == "[1" + "0" * 300 + "]"


def test_overwrite_keeps_created_at_moves_updated_at_and_replaces_the_value(kv, clock, user_id):
    # Given an entry written at t0
    t0 = clock.now
    kv.put(user_id, DEFAULT_NAMESPACE, "k", {"v": 1})
    # When it is written again a minute later
    t1 = clock.advance(minutes=1)
    again = kv.put(user_id, DEFAULT_NAMESPACE, "k", [2])
    # Then it is one entry, created at t0, updated at t1, with the new value
    got = kv.get(user_id, DEFAULT_NAMESPACE, "k")
    assert got == again
    assert got is not None and (got.created_at, got.updated_at, got.value) == (t0, t1, [2])
    assert all_keys(kv, user_id) == ["k"]


def test_what_a_caller_changes_in_a_value_does_not_change_the_store(kv, user_id):
    value = {"list": [1, 2]}
    written = kv.put(user_id, DEFAULT_NAMESPACE, "k", value)
    value["list"].append(3)
    written.value["list"].append(4)
    first = kv.get(user_id, DEFAULT_NAMESPACE, "k")
    assert first is not None
    first.value["list"].append(5)
    second = kv.get(user_id, DEFAULT_NAMESPACE, "k")
    assert second is not None and second.value == {"list": [1, 2]}


def test_namespaces_and_users_are_separate(kv, user_id):
    other = str(uuid.uuid4())
    kv.put(user_id, "a", "k", 1)
    kv.put(user_id, "b", "k", 2)
    kv.put(other, "a", "k", 3)
    assert [kv.get(u, ns, "k").value for u, ns in ((user_id, "a"), (user_id, "b"), (other, "a"))] == [1, 2, 3]
    assert kv.get(other, "b", "k") is None


# -- expiry -----------------------------------------------------------------------------------------


def test_an_entry_expires_after_its_ttl_and_is_never_returned_again(kv, clock, user_id):
    # Given an entry with a one-minute time to live, and one without
    written = kv.put(user_id, DEFAULT_NAMESPACE, "short", "x", ttl_seconds=60)
    kv.put(user_id, DEFAULT_NAMESPACE, "forever", "y")
    assert written.expires_at == clock.now + timedelta(seconds=60)
    # When 59.999999 seconds pass, Then it is still there
    clock.advance(seconds=59, microseconds=999_999)
    assert kv.get(user_id, DEFAULT_NAMESPACE, "short") is not None
    assert all_keys(kv, user_id) == ["forever", "short"]
    # When its expiry is reached, Then neither get nor list returns it
    clock.advance(microseconds=1)
    assert kv.get(user_id, DEFAULT_NAMESPACE, "short") is None
    assert all_keys(kv, user_id) == ["forever"]
    # And a year later the entry without expiry is still there
    clock.advance(days=366)
    assert kv.get(user_id, DEFAULT_NAMESPACE, "forever") is not None


def test_every_put_sets_the_expiry_again(kv, clock, user_id):
    # Given an entry with a 10-second time to live, rewritten after 8 seconds with another 10
    kv.put(user_id, DEFAULT_NAMESPACE, "k", 1, ttl_seconds=10)
    clock.advance(seconds=8)
    again = kv.put(user_id, DEFAULT_NAMESPACE, "k", 2, ttl_seconds=10)
    assert again.expires_at == clock.now + timedelta(seconds=10)
    # When 8 more seconds pass (16 after the first put), Then it is alive
    clock.advance(seconds=8)
    assert kv.get(user_id, DEFAULT_NAMESPACE, "k") is not None
    # When it is rewritten without a ttl, Then it no longer expires
    cleared = kv.put(user_id, DEFAULT_NAMESPACE, "k", 3)
    assert cleared.expires_at is None
    clock.advance(days=400)
    got = kv.get(user_id, DEFAULT_NAMESPACE, "k")
    assert got is not None and got.value == 3


def test_a_put_over_an_expired_entry_starts_a_new_entry(kv, clock, user_id):
    # Given an entry that expired
    kv.put(user_id, DEFAULT_NAMESPACE, "k", "old", ttl_seconds=5)
    clock.advance(seconds=10)
    # When the key is written again
    fresh = kv.put(user_id, DEFAULT_NAMESPACE, "k", "new")
    # Then the entry is created now, not when the expired one was
    assert fresh.created_at == fresh.updated_at == clock.now
    assert fresh.value == "new"


# -- list -------------------------------------------------------------------------------------------


def test_list_pages_by_key_without_gaps_or_repeats(kv, clock, user_id):
    # Given 23 live keys in one namespace (written out of order), an expired key among them,
    # keys in another namespace and another user's keys in the same namespace
    other = str(uuid.uuid4())
    keys = [f"key-{i:02d}" for i in range(23)]
    for k in reversed(keys):
        kv.put(user_id, "ctx", k, {"k": k})
    kv.put(user_id, "ctx", "key-10x", "expires", ttl_seconds=1)
    kv.put(user_id, "other-ns", "key-05a", "no")
    kv.put(other, "ctx", "key-05b", "no")
    clock.advance(seconds=1)
    # When the namespace is read in pages of 5
    seen: list[str] = []
    pages = 0
    after = None
    while True:
        page = kv.list(user_id, "ctx", limit=5, after_key=after)
        pages += 1
        seen += [e.key for e in page.entries]
        assert all(e.value == {"k": e.key} for e in page.entries)
        if page.next_after_key is None:
            break
        assert page.next_after_key == page.entries[-1].key
        after = page.next_after_key
    # Then every live key comes once, in order, and nothing of the other namespace or user
    assert seen == keys
    assert pages == 5


def test_a_last_page_that_is_exactly_full_says_there_is_no_next_page(kv, user_id):
    for k in ("a", "b", "c", "d"):
        kv.put(user_id, DEFAULT_NAMESPACE, k, 1)
    first = kv.list(user_id, DEFAULT_NAMESPACE, limit=2)
    assert [e.key for e in first.entries] == ["a", "b"] and first.next_after_key == "b"
    last = kv.list(user_id, DEFAULT_NAMESPACE, limit=2, after_key="b")
    assert [e.key for e in last.entries] == ["c", "d"] and last.next_after_key is None
    # And after a key that does not exist, paging continues from where it would be
    between = kv.list(user_id, DEFAULT_NAMESPACE, limit=10, after_key="bb")
    assert [e.key for e in between.entries] == ["c", "d"]
    # And an empty namespace is one empty page
    empty = kv.list(user_id, "nothing-here", limit=10)
    assert (empty.entries, empty.next_after_key) == ((), None)


def test_unicode_keys_round_trip_and_list_in_code_point_order(kv, user_id):
    # Given keys in several scripts, with combining marks, emoji and upper and lower case
    keys = ["Zebra", "apple", "café", "cafe\u0301", "日本語", "🔑 key", "ß", "Ä", "z", "\u00a0nbsp", "x" * 256]
    for k in keys:
        kv.put(user_id, DEFAULT_NAMESPACE, k, k)
    # Then each is its own entry and reads back exactly
    for k in keys:
        got = kv.get(user_id, DEFAULT_NAMESPACE, k)
        assert got is not None and got.key == k and got.value == k
    # And they are listed in code point order (not a locale's), across pages too
    expected = sorted(keys)
    page1 = kv.list(user_id, DEFAULT_NAMESPACE, limit=6)
    page2 = kv.list(user_id, DEFAULT_NAMESPACE, limit=6, after_key=page1.next_after_key)
    assert [e.key for e in page1.entries + page2.entries] == expected
    assert page2.next_after_key is None


def test_list_with_a_prefix_pages_only_the_keys_that_start_with_it(kv, user_id):
    # Given keys around a prefix, one just past its range and unicode ones in it
    keys = ["a/", "a/b", "a/b/c", "a/é", "a/\U0010ffff", "a0", "a.", "b/a", "a"]
    for key in keys:
        kv.put(user_id, "store", key, 1)
    # When the namespace is listed with prefix "a/" in pages of two
    seen, after = [], None
    while True:
        page = kv.list(user_id, "store", limit=2, after_key=after, prefix="a/")
        seen += [e.key for e in page.entries]
        if page.next_after_key is None:
            break
        after = page.next_after_key
    # Then exactly the keys that start with it come back, in code point order, once each
    assert seen == sorted(k for k in keys if k.startswith("a/"))
    # And a prefix ending with the last code point, or matching nothing, is exact too
    assert [e.key for e in kv.list(user_id, "store", limit=10, prefix="a/\U0010ffff").entries] == ["a/\U0010ffff"]
    assert kv.list(user_id, "store", limit=10, prefix="zz").entries == ()


def test_touch_keeps_live_entries_with_a_ttl_alive_for_their_ttl_again(kv, clock, user_id):
    # Given an entry with a 60 s TTL, one without expiry and one that has expired
    kv.put(user_id, "store", "ttl", {"n": 1}, ttl_seconds=60)
    kv.put(user_id, "store", "forever", {"n": 2})
    kv.put(user_id, "store", "gone", {"n": 3}, ttl_seconds=5)
    clock.advance(seconds=50)
    # When they are touched 50 s later (and a key that was never written)
    touched = kv.touch(user_id, "store", ["ttl", "forever", "gone", "never", "ttl"])
    # Then only the live entry with a TTL moved: it expires 60 s from now, its value unchanged
    assert touched == ["ttl"]
    entry = kv.get(user_id, "store", "ttl")
    assert entry is not None and entry.value == {"n": 1}
    assert entry.updated_at == clock.now and entry.expires_at == clock.now + timedelta(seconds=60)
    forever = kv.get(user_id, "store", "forever")
    assert forever is not None and forever.expires_at is None and forever.updated_at < clock.now
    assert kv.get(user_id, "store", "gone") is None
    # And 59 s later it is still there, 61 s later it is not
    clock.advance(seconds=59)
    assert kv.get(user_id, "store", "ttl") is not None
    clock.advance(seconds=2)
    assert kv.get(user_id, "store", "ttl") is None
    assert kv.touch(user_id, "store", ["ttl"]) == []


@pytest.mark.parametrize("keys", [[], "k", ["ok", ""], ["x" * 257], ["bad\x07"], ["k"] * 1001], ids=repr)
def test_touch_refuses_bad_keys(kv, user_id, keys):
    with pytest.raises(InvalidKvEntry) as err:
        kv.touch(user_id, "store", keys)
    assert err.value.field == "keys"


# -- delete -----------------------------------------------------------------------------------------


def test_delete_removes_the_entry_once(kv, clock, user_id):
    kv.put(user_id, DEFAULT_NAMESPACE, "k", 1)
    kv.put(user_id, DEFAULT_NAMESPACE, "keep", 2)
    # When the entry is deleted twice, Then the first delete reports it and the second does not
    assert kv.delete(user_id, DEFAULT_NAMESPACE, "k") is True
    assert kv.delete(user_id, DEFAULT_NAMESPACE, "k") is False
    assert kv.get(user_id, DEFAULT_NAMESPACE, "k") is None
    assert all_keys(kv, user_id) == ["keep"]
    # And another user's delete of the same key touches nothing of this user's
    assert kv.delete(str(uuid.uuid4()), DEFAULT_NAMESPACE, "keep") is False
    assert all_keys(kv, user_id) == ["keep"]


def test_deleting_an_expired_entry_reports_nothing_live_was_deleted(kv, clock, user_id):
    kv.put(user_id, DEFAULT_NAMESPACE, "k", 1, ttl_seconds=1)
    clock.advance(seconds=2)
    assert kv.delete(user_id, DEFAULT_NAMESPACE, "k") is False
    # And the expired row is gone: a new put is a new entry
    assert kv.put(user_id, DEFAULT_NAMESPACE, "k", 2).created_at == clock.now


# -- limits -----------------------------------------------------------------------------------------

SECRET = "secret-Ω"  # in every refused input: an error message must never quote it

REFUSED_PUTS = [
    pytest.param({"namespace": ""}, "namespace", id="namespace-empty"),
    pytest.param({"namespace": "Secret"}, "namespace", id="namespace-upper-case"),
    pytest.param({"namespace": "-secret"}, "namespace", id="namespace-leading-dash"),
    pytest.param({"namespace": "_secret"}, "namespace", id="namespace-leading-underscore"),
    pytest.param({"namespace": "secret space"}, "namespace", id="namespace-space"),
    pytest.param({"namespace": "secret\n"}, "namespace", id="namespace-trailing-newline"),
    pytest.param({"namespace": "sécret"}, "namespace", id="namespace-non-ascii"),
    pytest.param({"namespace": "s" * 65}, "namespace", id="namespace-65-chars"),
    pytest.param({"namespace": None}, "namespace", id="namespace-none"),
    pytest.param({"key": ""}, "key", id="key-empty"),
    pytest.param({"key": SECRET + "k" * (257 - len(SECRET))}, "key", id="key-257-chars"),
    pytest.param({"key": SECRET + "\x00"}, "key", id="key-nul"),
    pytest.param({"key": SECRET + "\n"}, "key", id="key-newline"),
    pytest.param({"key": SECRET + "\t"}, "key", id="key-tab"),
    pytest.param({"key": SECRET + "\x7f"}, "key", id="key-del"),
    pytest.param({"key": SECRET + "\x85"}, "key", id="key-c1-control"),
    pytest.param({"key": SECRET + "\ud800"}, "key", id="key-lone-surrogate"),
    pytest.param({"key": 42}, "key", id="key-not-a-string"),
    pytest.param({"value": SECRET + "v" * (MAX_VALUE_BYTES - 1 - len(SECRET.encode()))}, "value", id="value-10241"),
    pytest.param({"value": [SECRET] * 100_000}, "value", id="value-far-over"),
    pytest.param({"value": [1e300] * 40}, "value", id="value-over-when-written-out"),
    pytest.param({"value": {SECRET: float("nan")}}, "value", id="value-nan"),
    pytest.param({"value": float("inf")}, "value", id="value-infinity"),
    pytest.param({"value": {1: SECRET}}, "value", id="value-non-string-key"),
    pytest.param({"value": {SECRET}}, "value", id="value-set"),
    pytest.param({"value": SECRET + "\x00"}, "value", id="value-nul"),
    pytest.param({"value": SECRET + "\udc00"}, "value", id="value-lone-surrogate"),
    pytest.param({"value": 10**5000}, "value", id="value-int-too-long"),
    pytest.param({"ttl_seconds": 0}, "ttl_seconds", id="ttl-zero"),
    pytest.param({"ttl_seconds": -1}, "ttl_seconds", id="ttl-negative"),
    pytest.param({"ttl_seconds": MAX_TTL_SECONDS + 1}, "ttl_seconds", id="ttl-over-a-year"),
    pytest.param({"ttl_seconds": 1.5}, "ttl_seconds", id="ttl-float"),
    pytest.param({"ttl_seconds": True}, "ttl_seconds", id="ttl-bool"),
]


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(("change", "field"), REFUSED_PUTS)
def test_every_limit_is_refused_with_an_error_naming_the_field_and_nothing_is_written(kv, user_id, change, field):
    args = {"namespace": "ctx", "key": "k", "value": {"ok": True}, "ttl_seconds": None} | change
    # When a put breaks one limit
    with pytest.raises(InvalidKvEntry) as err:
        kv.put(user_id, args["namespace"], args["key"], args["value"], ttl_seconds=args["ttl_seconds"])
    # Then the error names the field and is a ValueError, and its message quotes nothing sent
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert isinstance(err.value, ValueError)
    assert SECRET not in str(err.value) and "secret" not in str(err.value).lower()
    # And nothing was written
    assert all_keys(kv, user_id, "ctx") == []


def test_a_value_over_the_limit_is_a_value_too_large_error_with_its_size(kv, user_id):
    value = "v" * (MAX_VALUE_BYTES - 1)  # two quotes make it 10,241 bytes
    with pytest.raises(KvValueTooLarge) as err:
        kv.put(user_id, DEFAULT_NAMESPACE, "k", value)
    assert (err.value.size, err.value.limit, err.value.field) == (MAX_VALUE_BYTES + 1, MAX_VALUE_BYTES, "value")
    assert kv.get(user_id, DEFAULT_NAMESPACE, "k") is None


def test_a_value_nested_too_deep_is_refused_and_one_at_the_limit_is_kept(kv, user_id):
    with pytest.raises(InvalidKvEntry, match="nested more than 64 levels") as err:
        kv.put(user_id, DEFAULT_NAMESPACE, "deep", nested(65))
    assert err.value.field == "value"
    kv.put(user_id, DEFAULT_NAMESPACE, "deep", nested(64))
    got = kv.get(user_id, DEFAULT_NAMESPACE, "deep")
    assert got is not None and got.value == nested(64)


@pytest.mark.parametrize(
    ("namespace", "key", "value", "ttl"),
    [
        pytest.param("n" * 64, "k", 1, None, id="namespace-64-chars"),
        pytest.param("0.a_b-c", "k", 1, None, id="namespace-all-characters"),
        pytest.param(DEFAULT_NAMESPACE, "k" * 256, 1, None, id="key-256-chars"),
        pytest.param(DEFAULT_NAMESPACE, "🔑" * 256, 1, None, id="key-256-four-byte-chars"),
        pytest.param(DEFAULT_NAMESPACE, " ", 1, None, id="key-space"),
        pytest.param(DEFAULT_NAMESPACE, "k", "v" * (MAX_VALUE_BYTES - 2), None, id="value-10240"),
        pytest.param(DEFAULT_NAMESPACE, "k", [0] * ((MAX_VALUE_BYTES - 1) // 2), None, id="value-10239-of-commas"),
        pytest.param(DEFAULT_NAMESPACE, "k", "é" * ((MAX_VALUE_BYTES - 2) // 2), None, id="value-10240-two-byte"),
        pytest.param(DEFAULT_NAMESPACE, "k", 1, 1, id="ttl-1"),
        pytest.param(DEFAULT_NAMESPACE, "k", 1, MAX_TTL_SECONDS, id="ttl-365-days"),
    ],
)
def test_the_limits_themselves_are_accepted(kv, clock, user_id, namespace, key, value, ttl):
    written = kv.put(user_id, namespace, key, value, ttl_seconds=ttl)
    got = kv.get(user_id, namespace, key)
    assert got is not None and got == written and json_equal(got.value, value)
    assert got.expires_at == (clock.now + timedelta(seconds=ttl) if ttl else None)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(lambda kv, u: kv.list(u, DEFAULT_NAMESPACE, limit=0), "limit", id="list-limit-0"),
        pytest.param(lambda kv, u: kv.list(u, DEFAULT_NAMESPACE, limit=1001), "limit", id="list-limit-1001"),
        pytest.param(lambda kv, u: kv.list(u, DEFAULT_NAMESPACE, limit=True), "limit", id="list-limit-bool"),
        pytest.param(lambda kv, u: kv.list(u, DEFAULT_NAMESPACE, limit=5, after_key=""), "after_key", id="after-empty"),
        pytest.param(lambda kv, u: kv.list(u, "Bad", limit=5), "namespace", id="list-namespace"),
        pytest.param(lambda kv, u: kv.get(u, DEFAULT_NAMESPACE, ""), "key", id="get-key"),
        pytest.param(lambda kv, u: kv.get(u, "", "k"), "namespace", id="get-namespace"),
        pytest.param(lambda kv, u: kv.delete(u, DEFAULT_NAMESPACE, "a\nb"), "key", id="delete-key"),
        pytest.param(lambda kv, u: kv.purge(max_age_days=0), "max_age_days", id="purge-age-0"),
        pytest.param(lambda kv, u: kv.purge(max_age_days=36_501), "max_age_days", id="purge-age-too-large"),
        pytest.param(lambda kv, u: kv.purge(max_age_days=1, now=datetime(2031, 1, 1)), "now", id="purge-naive-now"),
    ],
)
def test_other_arguments_are_checked_too(kv, user_id, call, field):
    with pytest.raises(InvalidKvEntry) as err:
        call(kv, user_id)
    assert err.value.field == field


def test_a_user_id_that_is_not_a_uuid_is_refused(kv):
    with pytest.raises(InvalidUserId):
        kv.put("not-a-uuid", DEFAULT_NAMESPACE, "k", 1)
    with pytest.raises(InvalidUserId):
        kv.get("not-a-uuid", DEFAULT_NAMESPACE, "k")


def test_a_clock_without_a_timezone_is_refused(make_kv, user_id):
    naive = make_kv(lambda: datetime(2031, 1, 1))
    with pytest.raises(InvalidKvEntry) as err:
        naive.put(user_id, DEFAULT_NAMESPACE, "k", 1)
    assert err.value.field == "clock"


# -- purge ------------------------------------------------------------------------------------------


def test_purge_removes_expired_and_stale_entries_and_keeps_the_rest(make_kv):
    # Given, in a time of their own (the purge deletes across every user of the store):
    clock = Clock(PURGE_START)
    kv = make_kv(clock)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    kv.put(a, DEFAULT_NAMESPACE, "stale", 1)  # last written 40 days before the purge
    kv.put(b, "other", "stale", 1)
    kv.put(a, DEFAULT_NAMESPACE, "rewritten", 1)  # written 40 days before, rewritten 1 day before
    clock.advance(days=10)
    kv.put(a, DEFAULT_NAMESPACE, "at-the-age", 1)  # written exactly 30 days before the purge
    clock.advance(days=29)
    kv.put(a, DEFAULT_NAMESPACE, "rewritten", 2)
    kv.put(a, DEFAULT_NAMESPACE, "expired", 1, ttl_seconds=3600)  # expired 23 hours before
    kv.put(b, DEFAULT_NAMESPACE, "expires-at-the-purge", 1, ttl_seconds=86_400)  # exactly at the purge
    kv.put(a, DEFAULT_NAMESPACE, "fresh", 1)
    kv.put(b, DEFAULT_NAMESPACE, "fresh-with-ttl", 1, ttl_seconds=2 * 86_400)
    purge_at = clock.advance(days=1)
    # When the retention job runs with a 30-day age
    purged = kv.purge(max_age_days=30)
    # Then the expired, the stale and the just-stale entries are gone, for both users
    assert purged == 5
    assert all_keys(kv, a) == ["fresh", "rewritten"]
    assert all_keys(kv, b) == ["fresh-with-ttl"]
    assert all_keys(kv, b, "other") == []
    # And running it again at the same time removes nothing
    assert kv.purge(max_age_days=30, now=purge_at) == 0


def test_purge_at_a_given_time_uses_that_time_not_the_clock(make_kv):
    clock = Clock(PURGE_START - timedelta(days=400))
    kv = make_kv(clock)
    u = str(uuid.uuid4())
    kv.put(u, DEFAULT_NAMESPACE, "k", 1, ttl_seconds=60)
    # When the purge is asked for a time before the expiry, Then the entry is kept
    assert kv.purge(max_age_days=30, now=clock.now + timedelta(seconds=59)) == 0
    assert all_keys(kv, u) == ["k"]
    # When asked for a time after it (given in another timezone), Then it goes
    later = (clock.now + timedelta(seconds=61)).astimezone(ZoneInfo("Asia/Tokyo"))
    assert kv.purge(max_age_days=30, now=later) == 1
    assert all_keys(kv, u) == []


def test_a_namespace_purge_removes_only_that_namespaces_idle_entries(make_kv):
    # Given, in a time of their own, two users' entries in two namespaces, some idle for 2 days
    clock = Clock(PURGE_START + timedelta(days=500))
    kv = make_kv(clock)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    kv.put(a, "scratch", "idle", 1)
    kv.put(b, "scratch", "idle", 1)
    kv.put(a, DEFAULT_NAMESPACE, "idle", 1)
    clock.advance(days=2)
    kv.put(a, "scratch", "fresh", 1)
    # When the namespace's entries idle for a day or more are purged
    purged = kv.purge_namespace("scratch", max_age_days=1)
    # Then exactly those went, for both users; the other namespace is untouched
    assert purged == 2
    assert all_keys(kv, a, "scratch") == ["fresh"] and all_keys(kv, b, "scratch") == []
    assert all_keys(kv, a) == ["idle"]

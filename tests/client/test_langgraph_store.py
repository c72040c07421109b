"""UserMemoryStore against `user-memory serve`: the behaviours LangGraph's own stores are tested
for, ported from langgraph's libs/checkpoint/tests/test_store.py (InMemoryStore) and
libs/checkpoint-postgres/tests/test_store.py (PostgresStore). Every namespace starts with the
user's id here (the store's first label is the user); otherwise the cases are theirs."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from psycopg_pool import ConnectionPool
from user_memory_client import errors
from user_memory_client.langgraph_store import StoreLimitExceeded, UserMemoryStore, decode_key, encode_key

from tests.client.conftest import token_for

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

EXAMPLE = Path(__file__).resolve().parents[2] / "clients" / "python" / "examples" / "remember_across_threads.py"
TTL_SECONDS = 3
TTL_MINUTES = TTL_SECONDS / 60


@pytest.fixture
def u() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def make_store(base_url: str) -> Iterator[Callable[..., UserMemoryStore]]:
    made: list[UserMemoryStore] = []

    def make(*users: str, **kw: object) -> UserMemoryStore:
        store = UserMemoryStore(base_url, token_for, users=list(users), **kw)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store, u) -> UserMemoryStore:
    return make_store(u, ttl={"default_ttl": None, "refresh_on_read": True})


def _expire_now(pool: ConnectionPool, user: str, key: str) -> None:
    """Backdate an entry's expiry into the past without deleting it (the purge has not run)."""
    with pool.connection() as conn:
        conn.execute(
            "UPDATE user_memory_kv SET updated_at = now() - interval '2 minutes',"
            " expires_at = now() - interval '1 minute' WHERE user_id = %s AND namespace = 'langgraph' AND key = %s",
            (user, key),
        )


def _stored_expires_at(pool: ConnectionPool, user: str, key: str):
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT expires_at FROM user_memory_kv WHERE user_id = %s AND namespace = 'langgraph' AND key = %s",
            (user, key),
        ).fetchone()
    return row[0] if row else None


# -- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "key"),
    [((), "k"), (("a", "b"), "c/d"), (("100%", "a/b"), "%2F"), (("alice\n",), "\x00\x7f"), (("é", "日本"), "키")],
)
def test_namespaces_and_keys_round_trip_through_key_value_keys(labels, key):
    encoded = encode_key(labels, key)
    assert decode_key("u", encoded) == (("u", *labels), key)
    assert not any(ch in encoded for ch in "\n\x00\x7f")


def test_a_namespace_and_key_too_long_for_a_key_value_key_is_refused(store, u):
    with pytest.raises(InvalidNamespaceError):
        store.put((u, "x" * 200), "y" * 100, {"v": 1})


# -- LangGraph's PostgresStore tests ---------------------------------------------------------------


def test_batch_order(store, u):
    store.put((u, "test", "foo"), "key1", {"data": "value1"})
    store.put((u, "test", "bar"), "key2", {"data": "value2"})

    ops = [
        GetOp(namespace=(u, "test", "foo"), key="key1"),
        PutOp(namespace=(u, "test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=(u, "test"), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=(u, "test"), key="key3"),
    ]
    results = store.batch(ops)
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[1] is None
    assert isinstance(results[2], list) and len(results[2]) == 1
    assert isinstance(results[3], list) and len(results[3]) > 0
    assert results[4] is None

    ops_reordered = [
        SearchOp(namespace_prefix=(u, "test"), filter=None, limit=5, offset=0),
        GetOp(namespace=(u, "test", "bar"), key="key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(namespace=(u, "test"), key="key3", value={"data": "value3"}),
        GetOp(namespace=(u, "test", "foo"), key="key1"),
    ]
    results = store.batch(ops_reordered)
    assert len(results) == 5
    assert len(results[0]) >= 2
    assert results[1].value == {"data": "value2"} and results[1].key == "key2"
    assert len(results[2]) > 0
    assert results[3] is None
    assert results[4].value == {"data": "value1"} and results[4].key == "key1"


def test_batch_get_ops(store, u):
    store.put((u, "test"), "key1", {"data": "value1"})
    store.put((u, "test"), "key2", {"data": "value2"})
    results = store.batch(
        [GetOp(namespace=(u, "test"), key="key1"), GetOp(namespace=(u, "test"), key="key2"), GetOp((u, "test"), "key3")]
    )
    assert results[0].key == "key1" and results[1].key == "key2" and results[2] is None


def test_batch_put_ops(store, u):
    results = store.batch(
        [
            PutOp(namespace=(u, "test"), key="key1", value={"data": "value1"}),
            PutOp(namespace=(u, "test"), key="key2", value={"data": "value2"}),
            PutOp(namespace=(u, "test"), key="key3", value=None),
        ]
    )
    assert results == [None, None, None]
    assert store.get((u, "test"), "key1").value == {"data": "value1"}
    assert store.get((u, "test"), "key2").value == {"data": "value2"}
    assert store.get((u, "test"), "key3") is None


def test_batch_search_ops(store, u):
    for namespace, key, value in [
        ((u, "test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        ((u, "test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        ((u, "test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        store.put(namespace, key, value)
    results = store.batch(
        [
            SearchOp(namespace_prefix=(u, "test"), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(namespace_prefix=(u, "test"), filter=None, limit=2, offset=0),
            SearchOp(namespace_prefix=(u, "test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert len(results[0]) == 2 and all(i.value["tag"] == "a" for i in results[0])
    assert len(results[1]) == 2
    assert len(results[2]) == 1 and results[2][0].namespace == (u, "test", "foo")


def test_batch_list_namespaces_ops(store, u):
    test_data = [
        ((u, "test", "documents", "public"), "doc1", {"content": "public doc"}),
        ((u, "test", "documents", "private"), "doc2", {"content": "private doc"}),
        ((u, "test", "images", "public"), "img1", {"content": "public image"}),
        ((u, "prod", "documents", "public"), "doc3", {"content": "prod doc"}),
    ]
    for namespace, key, value in test_data:
        store.put(namespace, key, value)
    results = store.batch(
        [
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=3, limit=10, offset=0),
            ListNamespacesOp(match_conditions=[MatchCondition("suffix", ("public",))], max_depth=None, limit=10),
        ]
    )
    assert len(results[0]) == len(test_data)
    assert all(len(ns) <= 3 for ns in results[1]) and len(results[1]) == 3
    assert all(ns[-1] == "public" for ns in results[2]) and len(results[2]) == 3


def test_basic_store_ops(store, u):
    namespace = (u, "test", "documents")
    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert item.namespace == namespace and item.key == "doc1"
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}

    store.put(namespace, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(namespace, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at and updated.created_at == item.created_at

    assert store.get((u, "test", "other_documents"), "doc1") is None
    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None
    store.delete(namespace, "doc1")  # deleting what is not there is not an error


def test_list_namespaces(store, u):
    test_namespaces = [
        (u, "test", "documents", "public"),
        (u, "test", "documents", "private"),
        (u, "test", "images", "public"),
        (u, "test", "images", "private"),
        (u, "prod", "documents", "public"),
        (u, "prod", "documents", "private"),
    ]
    for namespace in test_namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces()) == len(test_namespaces)
    test_prefix = store.list_namespaces(prefix=[u, "test"])
    assert len(test_prefix) == 4 and all(ns[1] == "test" for ns in test_prefix)
    public = store.list_namespaces(suffix=["public"])
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)
    assert all(len(ns) <= 3 for ns in store.list_namespaces(max_depth=3))
    assert len(store.list_namespaces(limit=3)) == 3
    for namespace in test_namespaces:
        store.delete(namespace, "dummy")
    assert store.list_namespaces() == []


def test_search_namespace_segment_boundary(store, u):
    for namespace in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",), ("foobar", "baz"), ("foo2",)]:
        store.put((u, *namespace), "k", {"v": 1})

    def namespaces(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace[1:] for item in store.search((u, *prefix), limit=100)}

    assert namespaces(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert namespaces(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert namespaces(("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
    assert namespaces(("foo2",)) == {("foo2",)}
    assert namespaces(("fo",)) == set()


def test_search_empty_prefix_is_unconstrained(make_store, u):
    other = str(uuid.uuid4())
    store = make_store(u, other)
    for namespace in [(u, "a"), (u, "b", "c"), (other, "d", "e", "f")]:
        store.put(namespace, "k", {"v": 1})
    # The whole store: every user it covers; one user's prefix: that user's items only
    assert {i.namespace for i in store.search((), limit=100)} == {(u, "a"), (u, "b", "c"), (other, "d", "e", "f")}
    assert {i.namespace for i in store.search((u,), limit=100)} == {(u, "a"), (u, "b", "c")}


def test_search_namespace_like_metacharacters(store, u):
    for namespace in [("user_1",), ("user_1", "child"), ("userX1",), ("a%b",), ("axxb",), ("a/b",), ("a", "b")]:
        store.put((u, *namespace), "k", {"v": 1})

    def namespaces(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace[1:] for item in store.search((u, *prefix), limit=100)}

    assert namespaces(("user_1",)) == {("user_1",), ("user_1", "child")}
    assert namespaces(("a%b",)) == {("a%b",)}
    assert namespaces(("a/b",)) == {("a/b",)}
    assert namespaces(("a",)) == {("a", "b")}


def test_list_namespaces_segment_boundary(store, u):
    for namespace in [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("foobar", "baz"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
    ]:
        store.put((u, *namespace), "k", {"v": 1})
    assert set(store.list_namespaces(prefix=[u, "foo"], limit=100)) == {(u, "foo"), (u, "foo", "child")}
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {
        (u, "uid", "users", "alice"),
        (u, "uid", "a", "b", "alice"),
    }
    assert set(store.list_namespaces(prefix=[u, "uid", "*", "alice"], limit=100)) == {(u, "uid", "users", "alice")}
    assert set(store.list_namespaces(prefix=[u, "uid"], limit=100)) == {
        (u, "uid", "users", "alice"),
        (u, "uid", "users", "malice"),
        (u, "uid", "a", "b", "alice"),
    }


def test_search(store, u):
    test_data = [
        ((u, "test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
        ((u, "test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        ((u, "test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]
    for namespace, key, value in test_data:
        store.put(namespace, key, value)
    assert len(store.search([u, "test"])) == 3
    docs = store.search([u, "test", "docs"])
    assert len(docs) == 2 and all(i.namespace == (u, "test", "docs") for i in docs)
    alice = store.search([u, "test"], filter={"author": "Alice"})
    assert len(alice) == 2 and all(i.value["author"] == "Alice" for i in alice)
    assert len(store.search([u, "test"], limit=2)) == 2
    assert len(store.search([u, "test"], offset=2)) == 1
    # Newest first
    assert [i.key for i in store.search([u, "test"])] == ["img1", "doc2", "doc1"]


def test_search_filters_with_operators(store, u):
    # From LangGraph's vector-search filter tests, without the vectors
    for key, value in [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5, "meta": {"shade": "navy"}}),
    ]:
        store.put((u, "test"), key, value)
    keys = lambda **kw: sorted(i.key for i in store.search((u, "test"), **kw))  # noqa: E731
    assert keys(filter={"color": "red"}) == ["doc1", "doc2"]
    assert keys(filter={"score": {"$gt": 4.0}}) == ["doc1"]
    assert keys(filter={"score": {"$gte": 4.0}}) == ["doc1", "doc3"]
    assert keys(filter={"color": "red", "score": {"$lt": 4.0}}) == ["doc2"]
    assert keys(filter={"score": {"$lte": 3.5}, "color": {"$ne": "red"}}) == ["doc4"]
    assert keys(filter={"meta": {"shade": "navy"}}) == ["doc4"]
    assert keys(filter={"missing": {"$gt": 1}}) == []


def test_a_query_ranks_the_items_that_hold_its_words_first(store, u):
    # From LangGraph's test_non_ascii: each query finds its own item first
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, text in enumerate(texts, 1):
        store.put((u, "memories"), str(i), {"text": text})
    for i, text in enumerate(texts, 1):
        found = store.search((u, "memories"), query=text)
        assert found[0].key == str(i) and found[0].score == 1.0
        assert len(found) == 5 and all(f.score is not None and f.score < 1.0 for f in found[1:])


def test_namespace_labels_with_trailing_newline(store, u):
    store.put((u, "users", "alice"), "k", {"v": 1})
    store.put((u, "users", "alice\n"), "k", {"v": 2})
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {(u, "users", "alice")}
    assert set(store.list_namespaces(prefix=[u, "users", "alice"], limit=100)) == {(u, "users", "alice")}
    assert store.get((u, "users", "alice\n"), "k").value == {"v": 2}


def test_store_ttl(make_store, u):
    # The PostgresStore's case with a 3 s TTL: reads that refresh keep the item, one that does
    # not lets it expire
    store = make_store(u, ttl={"default_ttl": TTL_MINUTES, "refresh_on_read": True})
    ns = (u, "foo")
    store.put(ns, key="item1", value={"foo": "bar"})
    time.sleep(TTL_SECONDS - 1)
    assert store.get(ns, key="item1", refresh_ttl=True) is not None
    time.sleep(TTL_SECONDS - 1)
    assert len(store.search(ns, query="foo", refresh_ttl=True)) == 1
    time.sleep(TTL_SECONDS - 1)
    assert store.get(ns, key="item1", refresh_ttl=False) is not None
    time.sleep(TTL_SECONDS - 1)
    # Now (TTL_SECONDS - 1) * 2 since the last refresh: more than the TTL
    assert store.search(ns, query="bar", refresh_ttl=False) == []


def test_omit_expired_filters_read_paths(store, u, pool):
    store.put((u, "omit", "expired"), "e", {"data": "gone"}, ttl=TTL_MINUTES)
    store.put((u, "omit", "control"), "c", {"data": "keep"}, ttl=None)
    _expire_now(pool, u, encode_key(("omit", "expired"), "e"))
    assert _stored_expires_at(pool, u, encode_key(("omit", "expired"), "e")) is not None  # still there
    assert store.get((u, "omit", "expired"), "e") is None
    assert store.get((u, "omit", "control"), "c") is not None
    assert store.search((u, "omit", "expired")) == []
    assert [i.key for i in store.search((u, "omit", "control"))] == ["c"]
    namespaces = store.list_namespaces(prefix=(u, "omit"))
    assert (u, "omit", "expired") not in namespaces and (u, "omit", "control") in namespaces


def test_omit_expired_refresh_ttl_only_refreshes_live_rows(store, u, pool):
    ns = (u, "refresh")
    for key in ("expired", "live_get", "live_search"):
        store.put(ns, key, {"n": key}, ttl=TTL_MINUTES)
    _expire_now(pool, u, encode_key(ns[1:], "expired"))
    before = {k: _stored_expires_at(pool, u, encode_key(ns[1:], k)) for k in ("expired", "live_get", "live_search")}
    time.sleep(1.1)  # the server's clock moves on (whole seconds of TTL)
    assert store.get(ns, "expired", refresh_ttl=True) is None
    assert "expired" not in [i.key for i in store.search(ns, refresh_ttl=True)]
    assert _stored_expires_at(pool, u, encode_key(ns[1:], "expired")) == before["expired"]
    assert store.get(ns, "live_get", refresh_ttl=True) is not None
    assert _stored_expires_at(pool, u, encode_key(ns[1:], "live_get")) > before["live_get"]
    assert _stored_expires_at(pool, u, encode_key(ns[1:], "live_search")) > before["live_search"]


def test_omit_expired_search_pagination(store, u, pool):
    ns = (u, "page")
    for key in ("a", "b", "c"):
        store.put(ns, key, {"k": key}, ttl=TTL_MINUTES)
    store.put(ns, "expired", {"k": "x"}, ttl=TTL_MINUTES)
    _expire_now(pool, u, encode_key(ns[1:], "expired"))
    with pool.connection() as conn:
        for key, secs in {"a": 1, "b": 3, "c": 4}.items():
            conn.execute(
                "UPDATE user_memory_kv SET updated_at = now() - %s * interval '1 second'"
                " WHERE user_id = %s AND namespace = 'langgraph' AND key = %s",
                (secs, u, encode_key(ns[1:], key)),
            )
    assert [i.key for i in store.search(ns, limit=2, offset=0, refresh_ttl=False)] == ["a", "b"]
    assert [i.key for i in store.search(ns, limit=2, offset=2, refresh_ttl=False)] == ["c"]


# -- LangGraph's InMemoryStore tests ---------------------------------------------------------------


def test_list_namespaces_basic(store, u):
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]
    for i, ns in enumerate(namespaces):
        store.put(namespace=(u, *ns), key=f"id_{i}", value={"data": f"value_{i:02d}"})

    def listed(**kw: object) -> list[tuple[str, ...]]:
        return [ns[1:] for ns in store.list_namespaces(**kw)]  # type: ignore[arg-type]

    ab = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(listed(prefix=(u, "a", "b"))) == ab
    assert sorted(listed(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(listed(prefix=(u, "a"), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(listed(prefix=(u, "a", "b"), max_depth=4)) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert listed(prefix=(u, "a", "b"), limit=2) == ab[:2]
    assert listed(prefix=(u, "a", "b"), offset=2) == ab[2:]
    assert sorted(listed(prefix=(u, "a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(listed(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert listed(prefix=(u, "nonexistent")) == []
    assert listed(prefix=(u, "users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(store, u):
    for i, ns in enumerate(
        [
            ("users", "123"),
            ("users", "456"),
            ("users", "789", "settings"),
            ("admin", "users", "789"),
            ("guests", "123"),
            ("guests", "456", "preferences"),
        ]
    ):
        store.put(namespace=(u, *ns), key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(ns[1:] for ns in store.list_namespaces(prefix=(u, "users", "*"))) == [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert [ns[1:] for ns in store.list_namespaces(suffix=("*", "preferences"))] == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=(u, "*", "users"), suffix=("*", "settings")) == []


def test_list_namespaces_pagination(store, u):
    for i in range(20):
        store.put(namespace=(u, "namespace", f"sub_{i:02d}"), key=f"id_{i:02d}", value={"data": f"value_{i:02d}"})
    for offset in (0, 5, 15):
        page = store.list_namespaces(prefix=(u, "namespace"), limit=5, offset=offset)
        assert page == [(u, "namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


def test_list_namespaces_max_depth(store, u):
    for i, ns in enumerate(
        [("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"), ("h", "i", "j", "k")]
    ):
        store.put(namespace=(u, *ns), key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(max_depth=3)) == [(u, "a", "b"), (u, "a", "g"), (u, "h", "i")]


def test_list_namespaces_no_conditions_and_empty_store(make_store, u):
    store = make_store(u)
    assert store.list_namespaces() == []
    namespaces = [(u, "a", "b"), (u, "c", "d"), (u, "e", "f", "g")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces()) == namespaces


def test_cannot_put_invalid_namespaces(store, u):
    doc = {"foo": "bar"}
    for namespace in [(), (u, "the", "thing.about"), (u, "some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(namespace, "foo", doc))
    # Ops passed to batch directly are checked too (a label with a period never addresses two)
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((u, "a.b"), "k", doc)])
    store.put((u, "langgraph", "foo"), "bar", doc)
    assert store.get((u, "langgraph", "foo"), "bar").value == doc
    assert store.search((u, "langgraph", "foo"), query="bar")[0].value == doc
    store.delete((u, "langgraph", "foo"), "bar")
    assert store.get((u, "langgraph", "foo"), "bar") is None


# -- this store's own ------------------------------------------------------------------------------


def test_the_async_store_does_the_same(store, u):
    async def session() -> None:
        await store.aput((u, "prefs"), "theme", {"theme": "dark"}, ttl=10)
        item = await store.aget((u, "prefs"), "theme")
        assert item is not None and item.value == {"theme": "dark"}
        assert [i.key for i in await store.asearch((u,), filter={"theme": "dark"})] == ["theme"]
        assert await store.alist_namespaces(prefix=(u,)) == [(u, "prefs")]
        results = await store.abatch(
            [GetOp((u, "prefs"), "theme"), PutOp((u, "prefs"), "theme", None), GetOp((u, "prefs"), "theme")]
        )
        assert results[0].key == "theme" and results[1] is None and results[2] is None

    asyncio.run(session())


def test_users_are_kept_apart_by_their_tokens(make_store, u):
    other = str(uuid.uuid4())
    store = make_store(u, other)
    store.put((u, "memories"), "k", {"who": "u"})
    store.put((other, "memories"), "k", {"who": "other"})
    assert store.get((u, "memories"), "k").value == {"who": "u"}
    assert store.get((other, "memories"), "k").value == {"who": "other"}
    assert sorted(store.list_namespaces(suffix=("memories",))) == sorted([(u, "memories"), (other, "memories")])
    # A user id that is not one the API accepts is refused before anything is sent
    with pytest.raises(ValueError):
        store.put(("not-a-uuid", "memories"), "k", {"v": 1})


def test_a_store_without_users_needs_the_user_in_front(base_url, u):
    store = UserMemoryStore(base_url, token_for)
    store.put((u, "x"), "k", {"v": 1})
    assert store.list_namespaces(prefix=(u,)) == [(u, "x")]
    with pytest.raises(ValueError, match="start the namespace with the user's id"):
        store.list_namespaces()
    store.close()


def test_values_over_the_key_value_limit_are_refused_and_a_search_is_bounded(make_store, u):
    store = make_store(u, max_items=3)
    with pytest.raises(errors.TooLarge):
        store.put((u, "big"), "k", {"text": "x" * 20_000})
    for i in range(4):
        store.put((u, "many"), str(i), {"i": i})
    with pytest.raises(StoreLimitExceeded):
        store.search((u, "many"))


def test_the_example_graph_remembers_a_user_across_threads(base_url, u, capsys):
    # Given the example graph in clients/python/examples, run as its docstring says
    spec = importlib.util.spec_from_file_location("remember_across_threads", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(base_url, u, token_for(u))
    # Then the second thread knows what the user said in the first
    assert capsys.readouterr().out.splitlines() == ["I know: I prefer tea", "I know: I prefer tea"]
    # And a third thread of the same graph, and the user's key-value memory, hold it too
    with UserMemoryStore(base_url, token_for) as store:
        app = example.build(store)
        answer = app.invoke({"message": "hi"}, {"configurable": {"thread_id": "sunday"}}, context={"user_id": u})
        assert answer["answer"] == "I know: I prefer tea"
        other = str(uuid.uuid4())
        stranger = app.invoke({"message": "hi"}, {"configurable": {"thread_id": "x"}}, context={"user_id": other})
        assert stranger["answer"] == "I know nothing about you yet."


def test_the_example_without_its_arguments_prints_its_usage_not_a_traceback():
    # When the example is run as a newcomer first runs it: without arguments
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120)
    # Then it says how to call it and exits non-zero, with no traceback
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.startswith(f"usage: python {EXAMPLE} BASE_URL USER_ID TOKEN\n"), done.stderr
    assert "user-memory token <user id>" in done.stderr and "Traceback" not in done.stderr

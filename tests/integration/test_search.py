"""Search over memory items on real PostgreSQL: full text, vectors (pgvector), fused, embedding upkeep.

Vectors come through the real `openai` client and OpenAIEmbedder from a local endpoint
(tests/fake_embeddings.py) whose hashing embedder knows shared words, morphology and typos, not
meaning: the queries below are chosen for what it can do.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from user_memory.adapters.openai_embeddings import EmbeddingsUnavailable, OpenAIEmbedder
from user_memory.adapters.postgres import transaction
from user_memory.adapters.search import _ALL, PostgresSearch, vector_literal
from user_memory.domain.companion.items import document_items
from user_memory.domain.memory.document import empty_document, validate_document
from user_memory.errors import InvalidRequest

from tests.fake_embeddings import FakeEmbeddings, fake_embeddings_server, hash_embedding

pytestmark = pytest.mark.integration

MODEL = "text-embedding-3-small"


def companion(**overrides: Any) -> dict[str, Any]:
    """A valid companion document: a few to-dos, goals, an event and some leaves."""
    doc = empty_document("companion")
    doc["advanced_info"]["occupation"] = "pediatric nurse"
    doc["advanced_info"]["preferences"] = {"food": ["spicy ramen", "sourdough bread"], "music": ["jazz piano"]}
    doc["current_state"]["skills"] = ["woodworking", "conversational Portuguese"]
    doc["current_state"]["pain_points"] = ["night shifts wreck my sleep"]
    doc["todos"] = {
        "passport": {"id": "passport", "text": "Renew passport before the Lisbon trip", "due_date": "2025-07-01"},
        "dentist": {"id": "dentist", "text": "Book a dentist appointment", "tags": ["health"]},
        "taxes": {"id": "taxes", "text": "File the quarterly tax return", "status": "in_progress"},
    }
    doc["goals"] = {
        "marathon": {"id": "marathon", "title": "Run a half marathon", "category": "fitness"},
        "savings": {"id": "savings", "title": "Save an emergency fund of three months"},
    }
    doc["events"] = {
        "wedding": {"id": "wedding", "summary": "Cousin's wedding in Porto", "start": "2025-09-13"},
    }
    doc.update(overrides)
    return validate_document(doc, "companion")


def item_texts(doc: dict[str, Any]) -> set[str]:
    return {item.text for item in document_items(doc).values()}


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeEmbeddings, str]]:
    with fake_embeddings_server() as served:
        yield served


@pytest.fixture
def embedder(endpoint: tuple[FakeEmbeddings, str]) -> OpenAIEmbedder:
    _, base_url = endpoint
    client = openai.OpenAI(api_key="test-key", base_url=base_url, max_retries=0, timeout=5)
    return OpenAIEmbedder(client, MODEL)


@pytest.fixture
def fake(endpoint: tuple[FakeEmbeddings, str]) -> FakeEmbeddings:
    return endpoint[0]


@pytest.fixture
def search(pool, embedder) -> PostgresSearch:
    return PostgresSearch(pool, embedder)


def new_user(store, doc: dict[str, Any] | None = None) -> uuid.UUID:
    uid = uuid.uuid4()
    store.append(uid, doc if doc is not None else companion(), expected_version=0, source="test")
    return uid


def paths(result: Any) -> list[str]:
    return [hit.path for hit in (result.hits if hasattr(result, "hits") else result)]


def embedding_count(conn, uid: uuid.UUID) -> int:
    return conn.execute("SELECT count(*) FROM memory_embeddings WHERE user_id = %s", (uid,)).fetchone()[0]


# -- full text ------------------------------------------------------------------------------------


def test_full_text_finds_an_item_by_some_of_its_words_with_its_path_version_kind_and_value(store, pool):
    # Given a user's first version
    uid = new_user(store)
    # When a query names one word of a to-do and one word no item has (the words are ORed)
    result = PostgresSearch(pool).search(uid, "passport umbrella", mode="fts")
    # Then the to-do is found, with its pointer, the version that wrote it, its kind and its value
    assert result.mode == "fts"
    assert paths(result) == ["/todos/passport"]
    hit = result.hits[0]
    assert (hit.version, hit.kind, hit.matched_by) == (1, "todo", ("fts",))
    assert hit.value["text"] == "Renew passport before the Lisbon trip" and hit.value["due_date"] == "2025-07-01"
    assert hit.text.startswith("todo: Renew passport")


def test_full_text_ranks_the_item_with_more_of_the_words_first(store, pool):
    # Given a user with a leaf and a to-do that share one word
    uid = new_user(store, companion(current_state={"skills": ["dentist scheduling software"]}))
    # When both words of the to-do are asked for
    result = PostgresSearch(pool).search(uid, "dentist appointment", mode="fts")
    # Then the to-do (two words) comes before the leaf (one)
    assert paths(result) == ["/todos/dentist", "/current_state/skills/0"]


def test_without_an_embedder_auto_mode_is_full_text(store, pool):
    uid = new_user(store)
    result = PostgresSearch(pool).search(uid, "marathon")
    assert result.mode == "fts" and paths(result) == ["/goals/marathon"]


def test_a_user_never_sees_another_users_items(store, pool, search):
    # Given two users whose memories both mention a passport
    mine = new_user(store)
    theirs = new_user(
        store,
        companion(todos={"visa": {"id": "visa", "text": "Passport photos for the visa"}}, goals={}, events={}),
    )
    search.embed_pending(mine)
    search.embed_pending(theirs)
    # When the first user searches, in every mode, through the service's pool
    for mode in ("fts", "vector", "fused"):
        found = search.search(mine, "passport visa photos", k=20, mode=mode)
        # Then only the first user's items come back
        assert "/todos/visa" not in paths(found), mode
        assert all("visa" not in hit.text for hit in found.hits), mode
    assert paths(search.search(theirs, "passport", mode="fts")) == ["/todos/visa"]
    # And inside the first user's own transaction (row-level security), the other user's id finds nothing
    with transaction(pool, end_user=mine) as tx:
        as_user = PostgresSearch(tx, search.embedder)
        assert as_user.search(theirs, "passport visa photos", mode="fts").hits == []
        assert as_user.search(theirs, "passport visa photos", mode="fused").hits == []
        assert paths(as_user.search(mine, "passport", mode="fts")) == ["/todos/passport"]
        assert paths(as_user.search(mine, "pasport renewl", k=1, mode="vector")) == ["/todos/passport"]


# -- vectors and fusion ---------------------------------------------------------------------------


def test_vector_search_finds_a_misspelled_query_that_full_text_misses(store, search):
    # Given a user whose items are embedded
    uid = new_user(store)
    search.embed_pending(uid)
    # When the query misspells both words of a to-do
    query = "pasport renewl"
    # Then full text finds nothing, and the nearest vector is the to-do
    assert search.search(uid, query, mode="fts").hits == []
    result = search.search(uid, query, k=3, mode="vector")
    assert result.mode == "vector"
    assert paths(result)[0] == "/todos/passport"
    assert result.hits[0].matched_by == ("vector",)
    assert result.hits[0].score > result.hits[1].score


def test_vector_search_folds_a_morphological_variant(store, search):
    # Given a user whose items are embedded
    uid = new_user(store)
    search.embed_pending(uid)
    # When the query uses another form of a goal's words with a typo ("marathons", "runing")
    result = search.search(uid, "runing marathons", k=1, mode="vector")
    # Then the goal is nearest
    assert paths(result) == ["/goals/marathon"]


def test_fused_search_keeps_what_either_matcher_found_and_ranks_agreement_first(store, search):
    # Given a user whose items are embedded
    uid = new_user(store)
    search.embed_pending(uid)
    # When a query has a word full text matches (wedding) and misspellings only vectors match
    query = "wedding pasport renewl"
    assert paths(search.search(uid, query, mode="fts")) == ["/events/wedding"]
    result = search.search(uid, query, k=5)
    # Then auto mode fused both rankings: the wedding found by both, then the passport by vectors alone
    assert result.mode == "fused"
    assert paths(result)[:2] == ["/events/wedding", "/todos/passport"]
    wedding, passport = result.hits[:2]
    assert wedding.matched_by == ("fts", "vector") and passport.matched_by == ("vector",)
    assert wedding.score == round(1 / 61 + 1 / 61, 6) and passport.score == round(1 / 62, 6)
    assert (wedding.version, wedding.kind, wedding.value["start"]) == (1, "event", "2025-09-13")


# -- embedding upkeep ------------------------------------------------------------------------------


def test_the_first_embed_embeds_every_distinct_item_text_once(store, search, fake, conn):
    # Given a first version with two items of the same text (a leaf repeated in a list)
    doc = companion()
    doc["current_state"]["recent_wins"] = ["slept eight hours", "slept eight hours"]
    uid = new_user(store, doc)
    texts = item_texts(doc)
    assert len(texts) == len(document_items(doc)) - 1
    # When the pending items are embedded
    report = search.embed_pending(uid)
    # Then every distinct text was sent exactly once, in one request, and stored
    assert (report.inputs, report.calls, report.stored) == (len(texts), 1, len(texts))
    assert sorted(fake.inputs) == sorted(texts)
    assert fake.requests[0]["body"]["dimensions"] == 256 and fake.requests[0]["body"]["model"] == MODEL
    assert embedding_count(conn, uid) == len(texts)
    # And a second run has nothing to do
    again = search.embed_pending(uid)
    assert (again.inputs, again.calls) == (0, 0) and len(fake.requests) == 1


def test_many_pending_texts_are_sent_in_batches_of_128(store, search, fake, conn):
    # Given a first version with 300 skills (and the usual items)
    doc = companion()
    doc["current_state"]["skills"] = [f"skill number {i}" for i in range(300)]
    uid = new_user(store, doc)
    texts = item_texts(doc)
    # When the pending items are embedded
    report = search.embed_pending(uid)
    # Then they went out in ceil(n / 128) requests of at most 128 texts, each text once
    assert report.calls == -(-len(texts) // 128) == 3
    assert [len(r["inputs"]) for r in fake.requests] == [128, 128, len(texts) - 256]
    assert report.inputs == report.stored == len(texts) == embedding_count(conn, uid)
    assert sorted(fake.inputs) == sorted(texts)


def test_a_version_reembeds_only_the_items_whose_text_it_changed(store, search, fake, conn):
    # Given a user whose first version is embedded
    doc = companion()
    uid = new_user(store, doc)
    search.embed_pending(uid)
    sent = len(fake.inputs)
    # When version 2 rewrites one to-do's text and adds a goal
    v2 = copy.deepcopy(doc)
    v2["todos"]["dentist"]["text"] = "Book a dentist cleaning for June"
    v2["goals"]["piano"] = {"id": "piano", "title": "Learn three jazz standards on piano"}
    v2 = validate_document(v2, "companion")
    assert store.append(uid, v2, expected_version=1, source="test").version == 2
    report = search.embed_pending(uid)
    # Then exactly those two items were embedded
    assert report.inputs == 2 and report.calls == 1
    assert sorted(report.paths) == ["/goals/piano", "/todos/dentist"]
    assert sorted(fake.inputs[sent:]) == sorted(
        [document_items(v2)["/todos/dentist"].text, document_items(v2)["/goals/piano"].text]
    )
    # And the changed to-do is found at version 2, an untouched one still at version 1
    hits = {h.path: h for h in search.search(uid, "dentist cleaning passport", mode="fts").hits}
    assert hits["/todos/dentist"].version == 2 and hits["/todos/passport"].version == 1
    # When version 3 only changes a to-do's status (its text is the same)
    v3 = copy.deepcopy(v2)
    v3["todos"]["passport"]["status"] = "done"
    store.append(uid, v3, expected_version=2, source="test")
    report = search.embed_pending(uid)
    # Then nothing is embedded, though the item's row now carries version 3
    assert (report.inputs, report.calls) == (0, 0)
    assert search.search(uid, "passport", mode="fts").hits[0].version == 3
    assert search.search(uid, "passport", mode="fts").hits[0].value["status"] == "done"
    assert embedding_count(conn, uid) == len(item_texts(v3)) + 1  # the dentist's old text is an orphan


def test_an_item_removed_by_a_version_is_not_found_from_that_version_on(store, search, conn):
    # Given a user whose to-do is found, in every mode
    doc = companion()
    uid = new_user(store, doc)
    search.embed_pending(uid)
    for mode in ("fts", "vector", "fused"):
        assert "/todos/taxes" in paths(search.search(uid, "quarterly tax return", k=3, mode=mode)), mode
    # When version 2 removes it
    v2 = copy.deepcopy(doc)
    del v2["todos"]["taxes"]
    store.append(uid, v2, expected_version=1, source="test")
    # Then no mode finds it, though its vector is still stored (search joins through the items)
    for mode in ("fts", "vector", "fused"):
        assert "/todos/taxes" not in paths(search.search(uid, "quarterly tax return", k=20, mode=mode)), mode
    removed_text = document_items(doc)["/todos/taxes"].text
    assert (
        conn.execute(
            "SELECT count(*) FROM memory_embeddings WHERE user_id = %s AND text_md5 = md5(%s)", (uid, removed_text)
        ).fetchone()[0]
        == 1
    )
    # And the version history still has it
    assert "taxes" in store.at(uid, 1).document["todos"]


# -- across users (operators) ---------------------------------------------------------------------


def test_search_all_finds_items_across_users_through_the_hnsw_index(store, search, conn):
    # Given two users whose to-dos name the same sourdough starter (a word no other test uses), embedded
    starter = "starter" + uuid.uuid4().hex[:8]
    first = new_user(store, companion(todos={"bake": {"id": "bake", "text": f"Bake bread with {starter} sourdough"}}))
    second = new_user(store, companion(todos={"feed": {"id": "feed", "text": f"Feed the {starter} sourdough"}}))
    search.embed_pending(first)
    search.embed_pending(second)
    # When an operator searches across users
    found = search.search_all(f"feeding {starter}", k=2)
    # Then the nearest items are both users' to-dos, with their paths, the closer one first
    assert [(f["user_id"], f["path"], f["kind"], f["version"]) for f in found] == [
        (str(second), "/todos/feed", "todo", 1),
        (str(first), "/todos/bake", "todo", 1),
    ]
    assert found[0]["score"] > found[1]["score"]
    # And the query is served by the HNSW index
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            "EXPLAIN " + _ALL, {"v": vector_literal(hash_embedding(f"feeding {starter}")), "n": 10}
        ).fetchall()
    )
    assert "Index Scan using idx_memory_embeddings_hnsw" in plan


# -- bad input and endpoint failures --------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "k", "message"),
    [
        ("", 10, "must not be empty"),
        ("   ", 10, "must not be empty"),
        ("passport", 0, "k must be between 1 and 100"),
        ("passport", 101, "k must be between 1 and 100"),
        ("x" * 501, 10, "at most 500 characters"),
    ],
)
def test_bad_queries_are_invalid_requests(search, query, k, message):
    uid = uuid.uuid4()
    with pytest.raises(InvalidRequest, match=message):
        search.search(uid, query, k=k)
    with pytest.raises(InvalidRequest, match=message):
        search.search_all(query, k=k)


def test_the_longest_query_and_largest_k_are_accepted(store, search):
    uid = new_user(store)
    search.embed_pending(uid)
    result = search.search(uid, "passport " + "x" * 491, k=100)
    assert "/todos/passport" in paths(result)


@pytest.mark.parametrize("mode", ["vector", "fused"])
def test_vector_modes_without_an_embedder_are_invalid_requests(store, pool, mode):
    uid = new_user(store)
    with pytest.raises(InvalidRequest, match="needs an embeddings endpoint"):
        PostgresSearch(pool).search(uid, "passport", mode=mode)
    with pytest.raises(InvalidRequest, match="needs an embeddings endpoint"):
        PostgresSearch(pool).search_all("passport")
    assert PostgresSearch(pool).embed_pending(uid).inputs == 0


def test_an_endpoint_answering_another_dimension_count_is_refused_and_nothing_is_stored(store, search, fake, conn):
    # Given an endpoint that answers 128-dimensional vectors
    uid = new_user(store)
    fake.answer_dimensions = 128
    # When the items are embedded
    with pytest.raises(EmbeddingsUnavailable, match="128 dimensions"):
        search.embed_pending(uid)
    # Then nothing was stored, and a search needing a query vector fails the same way
    assert embedding_count(conn, uid) == 0
    with pytest.raises(EmbeddingsUnavailable):
        search.search(uid, "passport", mode="vector")


def test_the_endpoint_refuses_a_dimension_count_other_than_256(endpoint):
    _, base_url = endpoint
    client = openai.OpenAI(api_key="test-key", base_url=base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=["x"], dimensions=1536)
    assert len(client.embeddings.create(model=MODEL, input=["x"], dimensions=256).data[0].embedding) == 256


def test_an_endpoint_error_leaves_the_items_pending_for_the_next_run(store, search, fake, conn):
    # Given an endpoint that fails its next request with a server error
    doc = companion()
    uid = new_user(store, doc)
    fake.fail_next(1, status=500)
    # When the items are embedded
    with pytest.raises(EmbeddingsUnavailable, match="InternalServerError"):
        search.embed_pending(uid)
    # Then nothing was stored
    assert embedding_count(conn, uid) == 0
    # And the next run embeds them all
    report = search.embed_pending(uid)
    assert report.inputs == len(item_texts(doc)) and report.stored == len(item_texts(doc))
    assert embedding_count(conn, uid) == len(item_texts(doc))
    assert len(fake.requests) == 2


def test_a_429s_retry_after_holds_every_embedder_of_that_endpoint_and_model(endpoint):
    # Given two embedders of one endpoint and model (two lanes of a worker invocation, each with its
    # own client), waits recorded rather than slept, and an endpoint that answers the next request
    # 429 with Retry-After 20 s
    fake, base_url = endpoint
    waits: dict[str, list[float]] = {"first": [], "second": []}

    def embedder(name: str) -> OpenAIEmbedder:
        client = openai.OpenAI(api_key="test-key", base_url=base_url, max_retries=0, timeout=5)
        return OpenAIEmbedder(client, MODEL, max_retries=1, timeout=30, sleep=waits[name].append)

    first, second = embedder("first"), embedder("second")
    fake.fail_next(1, status=429, retry_after=20)
    # When the first embeds (429, then its retry after the wait it was asked for), then the second
    assert len(first.embed(["renew passport"])) == 1 and waits["first"] == [20.0]
    assert len(second.embed(["book dentist"])) == 1
    # Then the second waited out the same Retry-After before asking, rather than asking at once
    assert len(waits["second"]) == 1 and 0 < waits["second"][0] <= 20
    assert len(fake.requests) == 3


def test_a_failing_endpoint_leaves_auto_search_to_full_text_and_fails_an_explicit_vector_search(store, search, fake):
    # Given a user whose items are embedded, then an endpoint that fails
    uid = new_user(store)
    search.embed_pending(uid)
    fake.fail_next(10, status=500)
    # When auto mode searches
    result = search.search(uid, "wedding", k=3)
    # Then the words still answer (mode fts), and the failure is not the caller's
    assert result.mode == "fts"
    assert paths(result) == ["/events/wedding"]
    # And a search that asks for vectors fails with the endpoint's error
    with pytest.raises(EmbeddingsUnavailable):
        search.search(uid, "wedding", k=3, mode="fused")

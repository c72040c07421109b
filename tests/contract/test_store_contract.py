"""One contract for the memory store, run against every recorder: in-memory and PostgreSQL.

Versions, checkpoints, as_of, diff, revert, idempotency, conflicts, size limits, erase and
concurrent writers behave the same whichever recorder holds the rows.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.memory.patching import apply_patch, json_equal
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import MAX_CHANGED_PATHS, WriteStatus
from user_memory.errors import DocumentTooLarge, InvalidUserId, PatchError, UnknownVersion, VersionConflict

StoreFactory = Callable[..., MemoryStore]


@pytest.fixture(params=["memory", "postgres"])
def make_store(request) -> StoreFactory:
    """Stores over one shared recorder of the parametrized kind (several stores = several writers)."""
    if request.param == "memory":
        recorder = InMemoryRecorder(InMemoryActivity())
    else:
        recorder = PostgresRecorder(request.getfixturevalue("pool"))
    return lambda **kw: MemoryStore(recorder, **kw)


@pytest.fixture
def store(make_store: StoreFactory) -> MemoryStore:
    return make_store()


def doc_for(version: int) -> dict:
    """A document that changes a little at every version, lists and types included."""
    return {
        "summary": f"summary {version}",
        "counter": version,
        "flags": [version % 2 == 0, version % 3, 1.0 if version % 5 == 0 else 1],
        "parts": {f"p{i}": {"score": (version * i) % 7 / 7} for i in range(version % 6)},
        "log": [f"entry {i}" for i in range(version % 9)],
        "we~ird/key": version % 4,
    }


def test_unknown_user_head_is_version_zero(store, user_id):
    head = store.head(user_id)
    assert (head.version, head.document, head.created_at) == (0, {}, None)


def test_120_versions_rebuild_exactly_across_checkpoints(store, user_id):
    # Given 120 versions
    for v in range(1, 121):
        result = store.append(user_id, doc_for(v), expected_version=v - 1, source=f"test {v}")
        assert (result.version, result.written) == (v, True)
    # Then every version rebuilds exactly, checkpoint boundaries included
    for v in [1, 2, 48, 49, 50, 51, 99, 100, 101, 119, 120, *range(3, 120, 7)]:
        got = store.at(user_id, v)
        assert got.version == v
        assert json_equal(got.document, doc_for(v)), f"version {v}"
        assert got.source == f"test {v}"
    checkpoints = [h.version for h in store.history(user_id, limit=200) if h.is_checkpoint]
    assert checkpoints == [100, 50]  # every 50th version, and version 1 is not stored twice
    assert store.head(user_id).version == 120
    assert json_equal(store.head(user_id).document, doc_for(120))


def test_every_stored_patch_turns_the_previous_version_into_the_next(store, user_id):
    for v in range(1, 12):
        store.append(user_id, doc_for(v), expected_version=v - 1, source="t")
    history = store.history(user_id, limit=100)
    assert [h.version for h in history] == list(range(11, 0, -1))
    for entry in history:
        before = store.at(user_id, entry.version - 1).document
        assert json_equal(apply_patch(before, entry.patch), doc_for(entry.version))


def test_unknown_version_is_a_clear_error(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    with pytest.raises(UnknownVersion, match="no version 5") as info:
        store.at(user_id, 5)
    assert info.value.head == 1
    with pytest.raises(UnknownVersion):
        store.at(user_id, -1)


def test_version_zero_is_the_empty_document(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    assert store.at(user_id, 0).document == {}


def test_stale_expected_version_raises_version_conflict(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    with pytest.raises(VersionConflict) as info:
        store.append(user_id, {"a": 2}, expected_version=0, source="t")
    assert info.value.current == 1
    assert len(store.history(user_id)) == 1


def test_idempotency_key_returns_recorded_version_and_writes_nothing(store, user_id):
    first = store.append(user_id, {"a": 1}, expected_version=0, source="t", idempotency_key="daily:2026-11-21")
    store.append(user_id, {"a": 2}, expected_version=1, source="t")
    again = store.append(user_id, {"a": 3}, expected_version=0, source="t", idempotency_key="daily:2026-11-21")
    assert (again.version, again.written, again.status) == (first.version, False, WriteStatus.IDEMPOTENT)
    assert again.document == {"a": 1}
    assert store.head(user_id).version == 2


def test_unchanged_document_writes_nothing(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    result = store.append(user_id, {"a": 1}, expected_version=1, source="t")
    assert (result.written, result.status, result.version) == (False, WriteStatus.UNCHANGED, 1)
    # but a type change is a change
    assert store.append(user_id, {"a": 1.0}, expected_version=1, source="t").version == 2


def test_append_patch_applies_to_head(store, user_id):
    store.append(user_id, {"a": [1, 2]}, expected_version=0, source="t")
    result = store.append_patch(user_id, [{"op": "add", "path": "/a/-", "value": 3}], expected_version=1, source="p")
    assert result.document == {"a": [1, 2, 3]}
    assert store.head(user_id).document == {"a": [1, 2, 3]}


def test_append_patch_that_does_not_apply_writes_nothing(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    with pytest.raises(PatchError):
        store.append_patch(user_id, [{"op": "remove", "path": "/missing"}], expected_version=1, source="p")
    assert store.head(user_id).version == 1


def test_invalid_user_id_is_a_typed_error(store):
    with pytest.raises(InvalidUserId):
        store.head("not-a-uuid")


def test_as_of_returns_the_version_current_at_a_time(store, user_id):
    before = datetime.now(UTC) - timedelta(seconds=1)
    store.append(user_id, {"v": 1}, expected_version=0, source="t")
    middle = store.head(user_id).created_at
    store.append(user_id, {"v": 2}, expected_version=1, source="t")
    assert store.as_of(user_id, before).version == 0
    assert store.as_of(user_id, middle).document == {"v": 1}
    assert store.as_of(user_id, datetime.now(UTC) + timedelta(seconds=1)).document == {"v": 2}


def test_diff_between_two_versions(store, user_id):
    for v in range(1, 6):
        store.append(user_id, doc_for(v), expected_version=v - 1, source="t")
    patch = store.diff(user_id, 2, 5)
    assert json_equal(apply_patch(doc_for(2), patch), doc_for(5))
    assert json_equal(apply_patch(doc_for(5), store.diff(user_id, 5, 2)), doc_for(2))


def test_revert_writes_a_new_version_and_keeps_history(store, user_id):
    for v in range(1, 5):
        store.append(user_id, doc_for(v), expected_version=v - 1, source="t")
    result = store.revert(user_id, 2, source="revert to 2")
    assert result.version == 5
    assert json_equal(store.head(user_id).document, doc_for(2))
    assert json_equal(store.at(user_id, 4).document, doc_for(4))
    assert store.history(user_id, limit=1)[0].source == "revert to 2"


def test_history_pages_newest_first(store, user_id):
    for v in range(1, 8):
        store.append(user_id, {"v": v}, expected_version=v - 1, source=f"s{v}")
    page = store.history(user_id, limit=3, before_version=6)
    assert [h.version for h in page] == [5, 4, 3]
    assert page[0].patch == [{"op": "replace", "path": "/v", "value": 5}]


def test_checkpoints_follow_the_interval_and_rebuild_from_them(make_store, user_id):
    # Given a store that checkpoints every 3 versions
    store = make_store(checkpoint_interval=3)
    for v in range(1, 8):
        store.append(user_id, doc_for(v), expected_version=v - 1, source="t")
    # Then versions 3 and 6 are checkpoints, version 1 is only a patch, and all rebuild
    assert sorted(h.version for h in store.history(user_id) if h.is_checkpoint) == [3, 6]
    for v in range(1, 8):
        assert json_equal(store.at(user_id, v).document, doc_for(v))


def test_oversized_document_is_refused_and_nothing_is_written(make_store, user_id):
    small = make_store(max_document_bytes=1000)
    with pytest.raises(DocumentTooLarge, match="over the limit of 1,000 bytes"):
        small.append(user_id, {"a": "x" * 2000}, expected_version=0, source="t")
    assert small.head(user_id).version == 0


def test_a_patch_that_turns_the_document_into_a_non_object_is_refused(store, user_id):
    store.append(user_id, {"a": 1}, expected_version=0, source="t")
    with pytest.raises(Exception, match="JSON object"):
        store.append_patch(user_id, [{"op": "replace", "path": "", "value": [1]}], expected_version=1, source="p")
    assert store.head(user_id).document == {"a": 1}


def test_reads_never_alias_the_stored_document(store, user_id):
    # Given a written version / When a caller modifies what it read / Then the store is unchanged
    store.append(user_id, {"a": {"b": 1}}, expected_version=0, source="t")
    store.head(user_id).document["a"]["b"] = 99
    store.at(user_id, 1).document["a"]["b"] = 99
    assert store.head(user_id).document == {"a": {"b": 1}}
    assert store.at(user_id, 1).document == {"a": {"b": 1}}


@pytest.mark.parametrize("first_write", [True, False])
def test_two_writers_same_expected_version_exactly_one_wins(make_store, first_write):
    user_id = str(uuid.uuid4())
    stores = [make_store(), make_store()]
    expected = 0
    if not first_write:
        stores[0].append(user_id, {"base": True}, expected_version=0, source="t")
        expected = 1
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            outcomes.append(stores[i].append(user_id, {"writer": i}, expected_version=expected, source=f"w{i}"))
        except VersionConflict as err:
            outcomes.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wins = [o for o in outcomes if not isinstance(o, VersionConflict)]
    conflicts = [o for o in outcomes if isinstance(o, VersionConflict)]
    assert len(wins) == 1 and len(conflicts) == 1
    assert conflicts[0].current == expected + 1
    assert stores[0].head(user_id).version == expected + 1
    assert [h.version for h in stores[0].history(user_id)] == list(range(expected + 1, 0, -1))


def test_two_writers_same_idempotency_key_write_one_version(make_store):
    user_id = str(uuid.uuid4())
    stores = [make_store(), make_store()]
    barrier = threading.Barrier(2)
    results: list[object] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            results.append(stores[i].append(user_id, {"run": 1}, expected_version=0, source="t", idempotency_key="k"))
        except VersionConflict as err:
            results.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stores[0].head(user_id).version == 1
    assert len(stores[0].history(user_id)) == 1


def test_erase_removes_every_version_of_the_user_and_only_theirs(store, user_id):
    for v in range(1, 4):
        store.append(user_id, {"v": v}, expected_version=v - 1, source="t")
    other = str(uuid.uuid4())
    store.append(other, {"v": 1}, expected_version=0, source="t")
    removed = store.erase(user_id)
    assert removed["user_memory_snapshots"] == 3 and removed["user_memory_heads"] == 1
    assert store.head(user_id).version == 0 and store.history(user_id) == []
    assert store.head(other).version == 1


def test_the_empty_document_of_one_user_is_not_anothers(store):
    # Given a caller who edits what it read for a user with no memory
    alice, bob = str(uuid.uuid4()), str(uuid.uuid4())
    store.head(alice).document["summary"] = "alice's secret"
    store.at(alice, 0).document["x"] = 1
    # Then another user's empty memory is still empty
    assert store.head(bob).document == {} and store.at(bob, 0).document == {}


def test_a_redelivered_write_returns_the_stored_patch_intact(store, user_id):
    # Given a stored version whose patch adds an object and then edits inside it
    from user_memory.domain.ports import NewVersion

    uid = uuid.UUID(user_id)
    patch = [{"op": "add", "path": "/x", "value": {"y": 1}}, {"op": "remove", "path": "/x/y"}]
    written = store.recorder.insert(
        NewVersion(
            user_id=uid,
            expected_version=0,
            patch=patch,
            document={"x": {}},
            document_json='{"x":{}}',
            checkpoint=False,
            source="t",
            idempotency_key="k",
        )
    )
    assert written.status == "written"
    # When the same write is redelivered
    again = store.append(user_id, {"x": {}}, expected_version=0, source="t", idempotency_key="k")
    # Then the patch it reports is the one stored (the rebuild did not consume it), and it applies
    assert again.status is WriteStatus.IDEMPOTENT
    assert again.patch == patch and apply_patch({}, again.patch) == again.document == {"x": {}}


# -- read_span and versions: an export's walk over every version --------------------------------------


def test_read_span_returns_the_rows_of_a_range_oldest_first_with_their_checkpoints(make_store, user_id):
    # Given 8 versions with a checkpoint every 3
    store = make_store(checkpoint_interval=3)
    for v in range(1, 9):
        store.append(user_id, doc_for(v), expected_version=v - 1, source=f"s{v}")
    uid = uuid.UUID(user_id)
    # When the rows of versions 2 to 7 are read
    rows = store.recorder.read_span(uid, 2, 7)
    # Then they are exactly those rows, oldest first, each with its own patch and source
    assert [r.version for r in rows] == [2, 3, 4, 5, 6, 7]
    assert [r.source for r in rows] == [f"s{v}" for v in range(2, 8)]
    for r in rows:
        assert json_equal(apply_patch(doc_for(r.version - 1), r.patch), doc_for(r.version)), r.version
        assert r.created_at is not None
    # And the checkpoints (3 and 6) carry their whole document, the other rows none
    assert {r.version: r.checkpoint is not None for r in rows} == {
        2: False,
        3: True,
        4: False,
        5: False,
        6: True,
        7: False,
    }
    for r in rows:
        if r.checkpoint is not None:
            assert json_equal(r.checkpoint, doc_for(r.version))
    # And a span is clipped to what exists: past the head, and for another user, there is nothing
    assert [r.version for r in store.recorder.read_span(uid, 7, 100)] == [7, 8]
    assert [r.version for r in store.recorder.read_span(uid, 1, 1)] == [1]
    assert store.recorder.read_span(uid, 9, 20) == []
    assert store.recorder.read_span(uuid.uuid4(), 1, 8) == []


@pytest.mark.parametrize("page_size", [1, 2, 3, 4, 200])
def test_versions_yields_every_version_oldest_first_each_equal_to_at(make_store, user_id, page_size):
    # Given 10 versions with checkpoints at 3, 6 and 9 (pages that start and end on either side of them)
    store = make_store(checkpoint_interval=3)
    for v in range(1, 11):
        store.append(user_id, doc_for(v), expected_version=v - 1, source=f"s{v}")
    # When every version is walked
    walked = []
    for version in store.versions(user_id, page_size=page_size):
        expected = store.at(user_id, version.version)
        # Then each document is the one the store rebuilds for that version
        assert json_equal(version.document, expected.document), version.version
        assert json_equal(version.document, doc_for(version.version)), version.version
        assert (version.created_at, version.source) == (expected.created_at, expected.source)
        walked.append(version.version)
        version.document.clear()  # and what a caller does with one does not change the next
    assert walked == list(range(1, 11))
    assert json_equal(store.head(user_id).document, doc_for(10))


@pytest.mark.parametrize(("first", "last"), [(1, 10), (1, 1), (4, 7), (7, 10), (10, 10)])
def test_walk_yields_each_version_of_a_range_with_the_document_before_it(make_store, user_id, first, last):
    # Given 10 versions with checkpoints at 3, 6 and 9
    store = make_store(checkpoint_interval=3)
    for v in range(1, 11):
        store.append(user_id, doc_for(v), expected_version=v - 1, source=f"s{v}")
    # When a range of them is walked, Then each comes with the document before it and its own
    walked = list(store.walk(user_id, first, last))
    assert [v for v, _, _ in walked] == list(range(first, last + 1))
    for version, before, after in walked:
        assert json_equal(before, doc_for(version - 1) if version > 1 else {}), version
        assert json_equal(after, doc_for(version)), version


def test_versions_of_a_user_with_no_memory_is_empty_and_a_revert_is_walked_as_written(make_store, user_id):
    store = make_store(checkpoint_interval=3)
    assert list(store.versions(user_id)) == []
    for v in range(1, 5):
        store.append(user_id, doc_for(v), expected_version=v - 1, source="t")
    store.revert(user_id, 1, source="undo")
    documents = [v.document for v in store.versions(user_id, page_size=2)]
    assert len(documents) == 5
    assert json_equal(documents[4], doc_for(1)) and json_equal(documents[3], doc_for(4))


# -- provenance: what produced a version, stored with it -----------------------------------------------


def test_provenance_is_stored_with_its_version_and_comes_back_in_history(store, user_id):
    # Given a version written with provenance, one without, and a redelivery of the first's key
    provenance = {
        "mode": "edit",
        "model": "gpt-test",
        "edits": [{"op": "replace", "path": "/parts/a~1b/status", "reason": "said so: é"}],
        "refused": [{"op": "remove", "path": "/safety_notes", "reason": "r", "why": "no forget request"}],
        "activity_cut": 2,
    }
    store.append(user_id, {"a": 1}, expected_version=0, source="t", idempotency_key="daily:x", provenance=provenance)
    store.append(user_id, {"a": 2}, expected_version=1, source="t")
    again = store.append(
        user_id, {"a": 9}, expected_version=1, source="t", idempotency_key="daily:x", provenance={"mode": "other"}
    )
    # Then history returns each version's own provenance, exactly, and None where none was recorded
    newest, oldest = store.history(user_id)
    assert (oldest.version, oldest.provenance) == (1, provenance)
    assert (newest.version, newest.provenance) == (2, None)
    # And the redelivery wrote nothing, so the first provenance stands
    assert again.status is WriteStatus.IDEMPOTENT and store.history(user_id, limit=1, before_version=2)[
        0
    ].provenance == (provenance)


def test_provenance_that_is_not_an_object_is_refused_before_anything_is_written(store, user_id):
    with pytest.raises(ValueError, match="provenance must be a JSON object"):
        store.append(user_id, {"a": 1}, expected_version=0, source="t", provenance=["not", "an", "object"])  # type: ignore[arg-type]
    assert store.head(user_id).version == 0


# -- recent changes: who wrote each version and which pointers it changed -------------------------------


def test_recent_changes_name_each_versions_writer_and_changed_pointers_newest_first(store, user_id):
    # Given a summary's version, then two of a person's, one of which changes 300 pointers
    store.append(user_id, {"a": 1, "b": [1]}, expected_version=0, source="daily summary x", provenance={"mode": "edit"})
    store.append(user_id, {"a": 2, "b": [1, 2], "w/~": 1}, expected_version=1, source="api")
    many = {"a": 2, "b": [1, 2], "w/~": 1, **{f"k{i}": i for i in range(300)}}
    store.append(user_id, many, expected_version=2, source="agent:update_memory")
    store.append(
        user_id, {**many, "a": 3}, expected_version=3, source="daily:feedback", provenance={"mode": "feedback"}
    )
    # When the newest three are read
    changes = store.recent_changes(user_id, limit=3)
    # Then they come newest first, with their source, whether a summary wrote them, and their pointers
    assert [(c.version, c.source, c.summary) for c in changes] == [
        (4, "daily:feedback", False),
        (3, "agent:update_memory", False),
        (2, "api", False),
    ]
    assert changes[0].paths == ("/a",)
    assert len(changes[1].paths) == MAX_CHANGED_PATHS and all(p.startswith("/k") for p in changes[1].paths)
    assert sorted(changes[2].paths) == ["/a", "/b/1", "/w~1~0"]
    assert all(c.created_at is not None for c in changes)
    assert [c.summary for c in store.recent_changes(user_id, limit=10)][-1] is True
    assert store.recent_changes(uuid.uuid4(), limit=5) == []

"""One contract for activity, run against the in-memory and the PostgreSQL adapters:
idempotent ingestion per user, unsummarized reads, and keyset pages of users to summarize."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, Window

# Pages list every user with unsummarized activity before the window's end, so each test that
# pages uses its own early epoch, before anything other tests write.
EPOCH = datetime(1971, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "postgres"])
def world(request):
    """(activity adapter, store over the matching recorder)."""
    if request.param == "memory":
        activity = InMemoryActivity()
        return activity, MemoryStore(InMemoryRecorder(activity))
    pool = request.getfixturevalue("pool")
    return PostgresActivity(pool), MemoryStore(PostgresRecorder(pool))


def act(user: uuid.UUID, at: datetime, external_id: str, source: str = "test", kind: str = "session") -> Activity:
    return Activity(
        user_id=user, occurred_at=at, kind=kind, payload={"n": external_id}, source=source, external_id=external_id
    )


def test_ingestion_is_idempotent_per_user_source_and_external_id(world):
    activity, _ = world
    a, b = uuid.uuid4(), uuid.uuid4()
    day = datetime(2030, 1, 1, tzinfo=UTC)
    # Given user a's three activities
    assert activity.record([act(a, day, f"e{i}") for i in range(3)]) == 3
    # When they are sent again with one new one, and user b sends the same external id
    assert activity.record([act(a, day, f"e{i}") for i in range(4)]) == 1
    assert activity.record([act(b, day, "e0")]) == 1
    # Then a has 4 and b has 1: another user's identical id is not dropped
    assert len(activity.unsummarized(a, before=day + timedelta(days=1), limit=100)) == 4
    assert len(activity.unsummarized(b, before=day + timedelta(days=1), limit=100)) == 1


def test_unsummarized_reads_are_oldest_first_bounded_and_resumable(world):
    activity, _ = world
    u = uuid.uuid4()
    day = datetime(2030, 2, 1, tzinfo=UTC)
    activity.record([act(u, day + timedelta(hours=h), f"h{h}") for h in (5, 1, 23, 3)])
    activity.record([act(u, day + timedelta(days=1), "next-day")])
    got = activity.unsummarized(u, before=day + timedelta(days=1), limit=10)
    assert [a.external_id for a in got] == ["h5", "h1", "h23", "h3"]  # arrival order (id), the order summarized
    first = activity.unsummarized(u, before=day + timedelta(days=1), limit=2)
    rest = activity.unsummarized(u, before=day + timedelta(days=1), after_id=first[-1].id, limit=10)
    assert [a.external_id for a in first + rest] == ["h5", "h1", "h23", "h3"]


def test_a_version_marks_its_activity_so_it_is_not_read_again(world):
    activity, store = world
    u = uuid.uuid4()
    day = datetime(2030, 3, 1, tzinfo=UTC)
    activity.record([act(u, day, "x"), act(u, day, "y")])
    rows = activity.unsummarized(u, before=day + timedelta(days=1), limit=10)
    store.append(u, {"s": 1}, expected_version=0, source="t", activity_ids=[rows[0].id])
    left = activity.unsummarized(u, before=day + timedelta(days=1), limit=10)
    assert [a.external_id for a in left] == ["y"]
    assert store.mark_summarized(u, 1, [left[0].id]) == 1
    assert activity.unsummarized(u, before=day + timedelta(days=1), limit=10) == []


def test_users_to_summarize_page_by_keyset_without_gaps_or_repeats(world):
    activity, store = world
    end = EPOCH + timedelta(days=1)
    active = sorted(uuid.uuid4() for _ in range(23))
    later = [uuid.uuid4() for _ in range(3)]
    done = uuid.uuid4()
    activity.record([act(u, EPOCH + timedelta(minutes=i), f"{u}:{i}") for u in active for i in range(2)])
    activity.record([act(u, end + timedelta(hours=1), f"{u}:later") for u in later])  # after the window
    activity.record([act(done, EPOCH, "done")])
    ids = [a.id for a in activity.unsummarized(done, before=end, limit=5)]
    store.append(done, {"s": 1}, expected_version=0, source="t", activity_ids=ids)  # already summarized
    pages = list(activity.active_user_pages(Window(start=EPOCH, end=end), page_size=5))
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [u for p in pages for u in p] == active


def test_late_activity_is_found_by_the_next_days_fanout(world):
    activity, _ = world
    u = uuid.uuid4()
    day1 = EPOCH + timedelta(days=10)
    # Given activity that occurred on day 1 but arrived after day 1's run
    activity.record([act(u, day1 + timedelta(hours=20), "late")])
    # Then day 2's fan-out finds the user
    day2 = Window(start=day1 + timedelta(days=1), end=day1 + timedelta(days=2))
    found = [x for p in activity.active_user_pages(day2, page_size=1000) for x in p]
    assert u in found

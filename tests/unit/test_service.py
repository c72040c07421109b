"""MemoryService on in-memory ports: edits, If-Match and rebases, idempotency, revert, prune, feeds,
paging, activity, export and erasure, for the "user_state" and "tutor" schemas."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from user_memory.adapters.account import InMemoryAccount
from user_memory.adapters.kv import InMemoryKv
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.domain.account import AccountService
from user_memory.domain.kv import KvService
from user_memory.domain.memory.document import empty_document
from user_memory.domain.memory.patching import apply_patch, json_equal
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, WriteStatus
from user_memory.domain.ports import InsertOutcome, NewVersion
from user_memory.domain.service import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_REBASES,
    Edit,
    MemoryService,
    idempotency_key,
)
from user_memory.errors import (
    AccessDenied,
    DocumentTooLarge,
    IdempotencyKeyReused,
    InvalidActivity,
    InvalidDocument,
    InvalidPatch,
    InvalidRequest,
    PatchError,
    PreconditionRequired,
    ResetNotAllowed,
    UnknownSection,
    UnknownVersion,
    VersionConflict,
)

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


class InterleavingRecorder(InMemoryRecorder):
    """An in-memory recorder that lets another writer in just before an insert.

    Each hook in `before_insert` runs once, right before the next insert (the other writer's own
    inserts do not trigger hooks): the service has read the head, and its write is about to land.
    """

    def __init__(self, activity: InMemoryActivity) -> None:
        super().__init__(activity)
        self.before_insert: list[Callable[[], None]] = []
        self.attempts: list[int] = []  # the expected version of each insert the hooks saw
        self._interleaving = False

    def insert(self, new: NewVersion) -> InsertOutcome:
        if self.before_insert and not self._interleaving:
            self.attempts.append(new.expected_version)
            hook = self.before_insert.pop(0)
            self._interleaving = True
            try:
                hook()
            finally:
                self._interleaving = False
        return super().insert(new)


class World:
    """One user's MemoryService over in-memory ports, and a second store on the same rows."""

    def __init__(
        self,
        schema: str = "user_state",
        *,
        require_if_match: bool = False,
        max_document_bytes: int = 256 * 1024,
        end_user: bool = False,
    ) -> None:
        self.user = uuid.uuid4()
        self.activity = InMemoryActivity()
        self.recorder = InterleavingRecorder(self.activity)
        self.kv = InMemoryKv()
        self.account = InMemoryAccount(self.recorder, self.activity, self.kv, end_user=self.user if end_user else None)
        self.store = MemoryStore(self.recorder, checkpoint_interval=3, max_document_bytes=max_document_bytes)
        self.other = MemoryStore(self.recorder)  # another writer of the same rows
        self.svc = MemoryService(
            user_id=self.user,
            store=self.store,
            schema=schema,
            max_document_bytes=max_document_bytes,
            require_if_match=require_if_match,
        )
        self.kvs = KvService(self.user, self.kv)
        self.accounts = AccountService(
            user_id=self.user, store=self.store, activity=self.activity, account=self.account
        )

    def other_writes(self, change: dict[str, Any]) -> Callable[[], None]:
        """A hook: another writer merges `change` into the head (its own version)."""

        def write() -> None:
            head = self.other.head(self.user)
            self.other.append(self.user, {**head.document, **change}, expected_version=head.version, source="other")

        return write

    def versions(self) -> list[int]:
        return [h.version for h in self.store.history(self.user, limit=1000)][::-1]


def state_doc(**overrides: Any) -> dict[str, Any]:
    doc = {
        "summary": "Likes tea.",
        "parts": {
            "critic": {"name": "Critic", "status": "loud", "recency_score": 0.5, "influence_score": 0.5, "goals": []},
            "planner": {"name": "Planner", "status": "calm", "recency_score": 0.2, "influence_score": 0.1, "goals": []},
        },
        "triggers_and_goals": [{"trigger": "deadlines", "desired_outcome": "stay calm", "related_parts": ["critic"]}],
        "safety_notes": "",
    }
    doc.update(overrides)
    return doc


def tutor_doc() -> dict[str, Any]:
    return {
        "personal_info": {"name": "Ada", "language": "en", "learning_goals": ["algebra"]},
        "areas_to_improve": [
            {"topic": "fractions", "evidence": ["1/2 + 1/3 = 2/5"], "severity": 4},
            {"topic": "spelling", "evidence": [], "severity": 2},
        ],
        "knowledge_strengths": [{"topic": "linear equations", "evidence": [], "level": "advanced"}],
    }


def seeded(schema: str = "user_state", **kw: Any) -> World:
    """A world whose user has version 1 written through the service."""
    world = World(schema, **kw)
    world.svc.replace(state_doc() if schema == "user_state" else tutor_doc(), Edit(source="api: seed", if_match=0))
    return world


def act(user: uuid.UUID, external_id: str) -> Activity:
    return Activity(
        user_id=user,
        occurred_at=T0,
        kind="message",
        payload={"text": external_id},
        source="app",
        external_id=external_id,
    )


# -- writes: JSON Patch, merge patch, replace --------------------------------------------------------


def test_a_json_patch_is_applied_validated_and_stamped_with_its_source():
    world = World()
    # When a client adds a summary to an empty memory
    result = world.svc.apply_json_patch([{"op": "add", "path": "/summary", "value": "Likes tea."}], Edit())
    # Then version 1 is the whole validated document, stamped with the source
    assert (result.status, result.version) == (WriteStatus.WRITTEN, 1)
    expected = {**empty_document("user_state"), "summary": "Likes tea.", "last_updated_by": "api"}
    assert result.document == expected == world.store.head(world.user).document
    assert world.store.head(world.user).source == "api"


def test_a_json_patch_on_the_tutor_schema_edits_inside_a_section():
    world = seeded("tutor")
    patch = [
        {"op": "replace", "path": "/personal_info/name", "value": "Bea"},
        {"op": "remove", "path": "/areas_to_improve/0"},
    ]
    result = world.svc.apply_json_patch(patch, Edit(source="api: tutor app"))
    head = world.store.head(world.user).document
    assert result.version == 2
    assert head["personal_info"]["name"] == "Bea" and head["personal_info"]["language"] == "en"
    assert [a["topic"] for a in head["areas_to_improve"]] == ["spelling"]
    assert head["last_updated_by"] == "api: tutor app"


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ([{"op": "remove", "path": "/nope"}], PatchError),
        ([{"op": "replace", "path": "", "value": [1]}], InvalidDocument),
        ([{"op": "add", "path": "/unknown_section", "value": 1}], InvalidDocument),
        ([{"op": "add", "path": "/triggers_and_goals/0/related_parts/-", "value": "ghost"}], InvalidDocument),
    ],
    ids=["does-not-apply", "not-an-object", "unknown-field", "broken-reference"],
)
def test_a_json_patch_that_fails_writes_nothing(patch, error):
    world = seeded()
    inserts = world.recorder.inserts
    with pytest.raises(error):
        world.svc.apply_json_patch(patch, Edit())
    assert world.recorder.inserts == inserts and world.versions() == [1]


def test_a_merge_patch_merges_keeps_siblings_and_deletes_with_null():
    world = seeded()
    # When a merge patch names one member of one part, removes another part and replaces a list
    patch = {
        "parts": {"critic": {"status": "quiet"}, "planner": None},
        "triggers_and_goals": [{"trigger": "exams", "desired_outcome": "breathe"}],
        "not_there": None,
    }
    result = world.svc.apply_merge_patch(patch, Edit())
    # Then the named member changed and its siblings are kept, the null removed the part,
    # the list was replaced whole, and a null for an absent key is no error
    head = world.store.head(world.user).document
    assert result.version == 2
    assert head["parts"] == {"critic": {**state_doc()["parts"]["critic"], "status": "quiet"}}
    assert head["triggers_and_goals"] == [{"trigger": "exams", "desired_outcome": "breathe", "related_parts": []}]
    assert head["summary"] == "Likes tea."


def test_a_merge_patch_null_on_a_section_resets_it_to_the_schemas_default():
    world = seeded("tutor")
    world.svc.apply_merge_patch(
        {"personal_info": {"language": None, "timezone": "UTC"}, "areas_to_improve": None}, Edit()
    )
    head = world.store.head(world.user).document
    assert head["personal_info"] == {
        **empty_document("tutor")["personal_info"],
        "name": "Ada",
        "timezone": "UTC",
        "learning_goals": ["algebra"],
    }
    assert head["areas_to_improve"] == []
    assert head["knowledge_strengths"] == tutor_doc()["knowledge_strengths"]


@pytest.mark.parametrize("patch", [[{"summary": "x"}], "text", None])
def test_a_merge_patch_that_is_not_an_object_is_refused(patch):
    world = seeded()
    with pytest.raises(InvalidPatch, match="a merge patch for a memory document must be a JSON object"):
        world.svc.apply_merge_patch(patch, Edit())
    assert world.versions() == [1]


def test_replace_writes_the_whole_document_with_defaults_filled_in():
    world = seeded()
    result = world.svc.replace({"summary": "Only this."}, Edit())
    assert result.version == 2
    assert world.store.head(world.user).document == {
        **empty_document("user_state"),
        "summary": "Only this.",
        "last_updated_by": "api",
    }


@pytest.mark.parametrize(
    ("schema", "document"),
    [
        ("user_state", {"summary": 3}),
        ("user_state", {"unknown": 1}),
        ("user_state", ["not", "an", "object"]),
        ("tutor", {"areas_to_improve": [{"topic": "x", "severity": 9}]}),
        ("tutor", {"summary": "a user_state field"}),
    ],
)
def test_a_document_that_does_not_validate_leaves_no_version(schema, document):
    world = seeded(schema)
    inserts = world.recorder.inserts
    with pytest.raises(InvalidDocument):
        world.svc.replace(document, Edit())
    assert world.recorder.inserts == inserts and world.versions() == [1]


def test_a_document_over_the_size_limit_is_refused_and_nothing_is_written():
    world = seeded(max_document_bytes=2000)
    with pytest.raises(DocumentTooLarge, match="over the limit of 2,000 bytes") as info:
        world.svc.apply_merge_patch({"summary": "x" * 3000}, Edit())
    assert info.value.limit == 2000 and info.value.size > 3000
    assert world.versions() == [1]


def test_an_edit_that_changes_nothing_writes_nothing_and_stamps_nothing():
    world = seeded()
    result = world.svc.apply_merge_patch({"summary": "Likes tea."}, Edit(source="api: other client"))
    assert (result.status, result.version) == (WriteStatus.UNCHANGED, 1)
    assert world.store.head(world.user).document["last_updated_by"] == "api: seed"


def test_an_unknown_schema_is_refused_when_the_service_is_built():
    world = World()
    with pytest.raises(InvalidDocument, match="unknown document schema"):
        MemoryService(user_id=world.user, store=world.store, schema="nope")


# -- If-Match, rebases, idempotency ------------------------------------------------------------------


def test_a_stale_if_match_is_a_conflict_and_nothing_is_written():
    world = seeded()
    world.svc.apply_merge_patch({"summary": "v2"}, Edit())
    inserts = world.recorder.inserts
    # When a client edits version 1, which is no longer the head
    with pytest.raises(VersionConflict) as info:
        world.svc.apply_merge_patch({"safety_notes": "stale"}, Edit(if_match=1))
    # Then it is told the current version, and nothing is written
    assert (info.value.expected, info.value.current) == (1, 2)
    assert world.recorder.inserts == inserts and world.versions() == [1, 2]
    # And an edit of the head goes through
    assert world.svc.apply_merge_patch({"safety_notes": "fresh"}, Edit(if_match=2)).version == 3


@pytest.mark.parametrize(
    "edit",
    [
        lambda svc, e: svc.apply_json_patch([{"op": "replace", "path": "/summary", "value": "x"}], e),
        lambda svc, e: svc.apply_merge_patch({"summary": "x"}, e),
        lambda svc, e: svc.replace({"summary": "x"}, e),
        lambda svc, e: svc.revert(1, e),
        lambda svc, e: svc.prune("summary", e),
    ],
    ids=["json-patch", "merge-patch", "replace", "revert", "prune"],
)
def test_every_write_checks_if_match(edit):
    world = seeded()
    world.svc.apply_merge_patch({"summary": "v2"}, Edit())
    with pytest.raises(VersionConflict):
        edit(world.svc, Edit(if_match=1))
    assert world.versions() == [1, 2]


def test_a_write_between_the_read_and_the_append_is_rebased_without_if_match():
    world = seeded()
    # Given another writer that changes the safety notes just before the service's append lands
    world.recorder.before_insert.append(world.other_writes({"safety_notes": "other writer"}))
    # When the client edits the summary without If-Match
    result = world.svc.apply_merge_patch({"summary": "mine"}, Edit())
    # Then its edit was re-applied to the other writer's version: both changes are kept
    assert (result.status, result.version) == (WriteStatus.WRITTEN, 3)
    head = world.store.head(world.user)
    assert (head.document["summary"], head.document["safety_notes"]) == ("mine", "other writer")
    assert [h.source for h in world.store.history(world.user)] == ["api", "other", "api: seed"]
    assert world.recorder.attempts == [1]  # the first attempt was made for version 1


def test_a_write_between_the_read_and_the_append_is_a_conflict_with_if_match():
    world = seeded()
    world.recorder.before_insert.append(world.other_writes({"safety_notes": "other writer"}))
    with pytest.raises(VersionConflict) as info:
        world.svc.apply_merge_patch({"summary": "mine"}, Edit(if_match=1))
    assert (info.value.expected, info.value.current) == (1, 2)
    assert world.store.head(world.user).document["summary"] == "Likes tea."
    assert world.versions() == [1, 2]


def test_rebases_give_up_after_max_rebases_with_the_conflict():
    world = seeded()
    # Given another writer that gets in before every one of the service's appends
    world.recorder.before_insert.extend(world.other_writes({"safety_notes": f"n{i}"}) for i in range(MAX_REBASES + 2))
    # When the service edits without If-Match, Then it tries MAX_REBASES + 1 times and reports the conflict
    with pytest.raises(VersionConflict):
        world.svc.apply_merge_patch({"summary": "mine"}, Edit())
    assert world.recorder.attempts == list(range(1, MAX_REBASES + 2))
    assert world.store.head(world.user).document["summary"] == "Likes tea."


def test_a_repeated_idempotency_key_returns_the_first_version_and_writes_nothing():
    world = seeded()
    first = world.svc.apply_merge_patch({"summary": "first"}, Edit(idempotency_key="api:req-1"))
    world.svc.apply_merge_patch({"safety_notes": "later"}, Edit())
    inserts = world.recorder.inserts
    # When the same request is retried (even with an If-Match of its time)
    again = world.svc.apply_merge_patch({"summary": "first"}, Edit(idempotency_key="api:req-1"))
    stale = world.svc.apply_merge_patch({"summary": "first"}, Edit(idempotency_key="api:req-1", if_match=1))
    # Then the version the key wrote is returned, and nothing is written
    for repeat in (again, stale):
        assert (repeat.status, repeat.version) == (WriteStatus.IDEMPOTENT, first.version)
        assert json_equal(repeat.document, first.document)
    # And another request under that key (another body, another kind of edit) is refused
    for other in (
        lambda e: world.svc.apply_merge_patch({"summary": "second"}, e),
        lambda e: world.svc.replace({"summary": "first"}, e),
        lambda e: world.svc.apply_json_patch([{"op": "replace", "path": "/summary", "value": "third"}], e),
        lambda e: world.svc.revert(0, e),
        lambda e: world.svc.prune("summary", e),
    ):
        with pytest.raises(IdempotencyKeyReused, match="version 2"):
            other(Edit(idempotency_key="api:req-1"))
    assert world.recorder.inserts == inserts and world.versions() == [1, 2, 3]
    assert world.store.head(world.user).document["summary"] == "first"


def test_a_retry_whose_first_attempt_lost_a_race_is_written_once():
    world = seeded()
    world.recorder.before_insert.append(world.other_writes({"safety_notes": "other"}))
    first = world.svc.apply_merge_patch({"summary": "mine"}, Edit(idempotency_key="api:req-2"))
    again = world.svc.apply_merge_patch({"summary": "mine"}, Edit(idempotency_key="api:req-2"))
    assert (first.version, again.status, again.version) == (3, WriteStatus.IDEMPOTENT, 3)
    assert world.versions() == [1, 2, 3]


@pytest.mark.parametrize(
    "edit",
    [
        lambda svc, e: svc.apply_json_patch([{"op": "replace", "path": "/summary", "value": "x"}], e),
        lambda svc, e: svc.apply_merge_patch({"summary": "x"}, e),
        lambda svc, e: svc.replace({"summary": "x"}, e),
        lambda svc, e: svc.revert(0, e),
        lambda svc, e: svc.prune(None, e),
    ],
    ids=["json-patch", "merge-patch", "replace", "revert", "prune"],
)
def test_a_deployment_that_requires_if_match_refuses_writes_without_it(edit):
    world = seeded(require_if_match=True)
    with pytest.raises(PreconditionRequired, match="If-Match"):
        edit(world.svc, Edit())
    assert world.versions() == [1]
    # And with If-Match the same write goes through
    assert edit(world.svc, Edit(if_match=1)).version == 2


# -- revert and prune -------------------------------------------------------------------------------


def test_revert_makes_a_new_version_equal_to_the_old_document():
    world = seeded()
    world.svc.apply_merge_patch({"summary": "v2"}, Edit())
    world.svc.apply_merge_patch({"summary": "v3", "safety_notes": "careful"}, Edit(source="api: other"))
    # When the client reverts to version 1
    result = world.svc.revert(1, Edit(source="api: undo"))
    # Then version 4 holds version 1's document exactly (its author included), and history keeps 2 and 3
    assert (result.status, result.version) == (WriteStatus.WRITTEN, 4)
    assert world.store.head(world.user).document == world.store.at(world.user, 1).document
    assert world.store.head(world.user).source == "api: undo"
    assert world.store.at(world.user, 3).document["summary"] == "v3"
    assert world.versions() == [1, 2, 3, 4]


def test_revert_to_a_version_that_does_not_exist_is_unknown_version():
    world = seeded()
    with pytest.raises(UnknownVersion):
        world.svc.revert(7, Edit())
    assert world.versions() == [1]


def test_revert_to_the_head_writes_nothing():
    world = seeded()
    assert world.svc.revert(1, Edit()).status == WriteStatus.UNCHANGED


def test_prune_one_section_resets_it_and_keeps_the_others():
    world = seeded("tutor")
    result = world.svc.prune("areas_to_improve", Edit(source="api: prune"))
    head = world.store.head(world.user).document
    assert result.version == 2
    assert head["areas_to_improve"] == []
    assert head["personal_info"]["name"] == "Ada" and head["knowledge_strengths"] == tutor_doc()["knowledge_strengths"]
    assert head["last_updated_by"] == "api: prune"


def test_prune_an_item_by_pointer_removes_only_that_item():
    world = seeded("tutor")
    world.svc.prune("/areas_to_improve/0", Edit())
    assert [a["topic"] for a in world.store.head(world.user).document["areas_to_improve"]] == ["spelling"]


def test_prune_everything_leaves_the_empty_document():
    world = seeded()
    result = world.svc.prune(None, Edit())
    assert result.version == 2
    assert world.store.head(world.user).document == {**empty_document("user_state"), "last_updated_by": "api"}


def test_prune_of_a_section_the_schema_does_not_have_is_refused():
    world = seeded("tutor")
    with pytest.raises(UnknownSection):
        world.svc.prune("summary", Edit())
    assert world.versions() == [1]


# -- reads ---------------------------------------------------------------------------------------------


def many_versions(n: int) -> World:
    world = seeded()
    for v in range(2, n + 1):
        world.svc.apply_merge_patch({"summary": f"v{v}", "parts": {f"p{v}": {"name": f"P{v}", "status": "s"}}}, Edit())
    assert world.versions() == list(range(1, n + 1))
    return world


@pytest.mark.parametrize("since", [0, 1, 3, 5])
def test_changes_since_a_version_turn_that_version_into_the_head(since):
    world = many_versions(6)
    changes = world.svc.changes_since(since)
    assert (changes.since, changes.version) == (since, 6)
    old = world.store.at(world.user, since).document
    assert json_equal(apply_patch(old, changes.patch), world.store.head(world.user).document)


def test_changes_since_the_head_are_none():
    world = many_versions(4)
    assert world.svc.changes_since(4).patch == []
    assert World().svc.changes_since(0).patch == []


@pytest.mark.parametrize("since", [5, 99, -1])
def test_changes_since_a_version_that_does_not_exist_is_unknown_version(since):
    world = many_versions(4)
    with pytest.raises(UnknownVersion) as info:
        world.svc.changes_since(since)
    assert info.value.head == 4


@pytest.mark.parametrize(("n", "limit"), [(7, 3), (6, 3), (3, 3), (1, 1), (5, 50)])
def test_history_pages_cover_every_version_exactly_once(n, limit):
    world = many_versions(n)
    seen: list[int] = []
    cursors: list[int | None] = []
    before: int | None = None
    while True:
        page, before = world.svc.history(limit=limit, before=before)
        assert 1 <= len(page) <= limit
        seen.extend(h.version for h in page)
        cursors.append(before)
        if before is None:
            break
    # Then every version came once, newest first, and no page was empty
    assert seen == list(range(n, 0, -1))
    assert len(cursors) == -(-n // limit)


@pytest.mark.parametrize("limit", [0, -1])
def test_history_with_a_limit_below_one_is_an_invalid_request(limit):
    world = many_versions(3)
    with pytest.raises(InvalidRequest):
        world.svc.history(limit=limit)


def test_history_of_nobody_is_one_empty_page_and_a_bad_cursor_is_refused():
    world = World()
    assert world.svc.history(limit=10) == ([], None)
    with pytest.raises(InvalidRequest):
        world.svc.history(limit=10, before=0)


def test_read_the_head_a_version_or_a_time():
    world = many_versions(3)
    assert world.svc.read().version == 3
    assert world.svc.read(version=2).document["summary"] == "v2"
    assert world.svc.read(version=0).document == {}
    second = world.store.at(world.user, 2).created_at
    assert world.svc.read(as_of=second).version == 2
    assert world.svc.read(as_of=second - timedelta(days=1)).version == 0


def test_read_with_both_a_version_and_a_time_is_an_invalid_request():
    world = many_versions(2)
    with pytest.raises(InvalidRequest, match="not both"):
        world.svc.read(version=1, as_of=datetime.now(UTC))


def test_read_as_of_a_time_without_a_zone_is_an_invalid_request():
    world = many_versions(2)
    with pytest.raises(InvalidRequest, match="time zone"):
        world.svc.read(as_of=datetime.now(UTC).replace(tzinfo=None))


def test_diff_and_render():
    world = many_versions(3)
    assert json_equal(
        apply_patch(world.store.at(world.user, 1).document, world.svc.diff(1, 3)), world.svc.read().document
    )
    assert "v3" in world.svc.render(500)


# -- the agent's tool call ------------------------------------------------------------------------------


def test_a_tool_call_is_written_once_as_the_agent():
    world = seeded()
    call = {
        "id": "call_9",
        "type": "function",
        "function": {
            "name": "update_memory",
            "arguments": json.dumps({"section": "summary", "mode": "replace", "value_json": json.dumps("Tea.")}),
        },
    }
    first = world.svc.tool_call(call)
    again = world.svc.tool_call(call)
    assert (first.version, again.status, again.version) == (2, WriteStatus.IDEMPOTENT, 2)
    assert world.store.head(world.user).source == "agent:update_memory"


# -- activity, export, erasure, key-value memory -----------------------------------------------------


def test_record_activity_stores_the_callers_items_and_counts_the_new_ones():
    world = World()
    assert world.accounts.record_activity([act(world.user, "a"), act(world.user, "b"), act(world.user, "a")]) == (3, 2)
    assert world.accounts.record_activity([act(world.user, "b")]) == (1, 0)
    assert [a.external_id for a in world.activity.rows_of(world.user)] == ["a", "b"]


def test_record_activity_for_another_user_is_refused_and_nothing_is_recorded():
    world = World()
    other = uuid.uuid4()
    with pytest.raises(InvalidRequest, match="only be recorded for the caller"):
        world.accounts.record_activity([act(world.user, "mine"), act(other, "theirs")])
    assert world.activity.rows_of(world.user) == [] and world.activity.rows_of(other) == []


def test_an_end_user_never_records_a_memory_reset_and_nothing_of_the_batch_is_stored():
    world = World()
    reset = dataclasses.replace(act(world.user, "r"), kind="memory_reset", payload={})
    with pytest.raises(ResetNotAllowed, match="only the service records one"):
        world.accounts.record_activity([act(world.user, "first"), reset])
    assert world.activity.rows_of(world.user) == []


@pytest.mark.parametrize("payload", [{}, {"part_id": ""}, {"text": "forget everything"}])
def test_an_end_users_forget_request_must_name_its_part(payload):
    world = World()
    vague = dataclasses.replace(act(world.user, "f"), kind="forget_part", payload=payload)
    with pytest.raises(InvalidActivity, match="activity 2: a forget_part must name the part"):
        world.accounts.record_activity([act(world.user, "first"), vague])
    assert world.activity.rows_of(world.user) == []
    named = dataclasses.replace(vague, payload={"part_id": "critic"})
    assert world.accounts.record_activity([named]) == (1, 1)


def test_export_returns_every_version_the_live_entries_and_the_activity():
    world = many_versions(7)  # checkpoints at 3 and 6
    world.kvs.put("b", "k2", {"x": [1]})
    world.kvs.put("a", "k1", "one")
    world.accounts.record_activity([act(world.user, "first"), act(world.user, "second")])
    other = uuid.uuid4()
    world.other.append(other, {"summary": "someone else"}, expected_version=0, source="other")
    world.kv.put(other, "a", "theirs", 1)
    exported = world.accounts.export()
    assert exported["user_id"] == str(world.user)
    assert [v.version for v in exported["versions"]] == list(range(1, 8))
    for v in exported["versions"]:
        assert v.document == world.store.at(world.user, v.version).document, v.version
    assert [(e.namespace, e.key, e.value) for e in exported["kv"]] == [("a", "k1", "one"), ("b", "k2", {"x": [1]})]
    assert [a.external_id for a in exported["activity"]] == ["first", "second"]


def test_erase_removes_the_users_versions_activity_and_entries_and_only_theirs():
    world = many_versions(3)
    world.kvs.put("default", "k", 1)
    world.accounts.record_activity([act(world.user, "x")])
    other = uuid.uuid4()
    world.other.append(other, {"summary": "keep"}, expected_version=0, source="other")
    world.kv.put(other, "default", "k", 2)
    receipt = world.accounts.erase()
    assert receipt.deleted == {
        "user_memory_heads": 1,
        "user_memory_snapshots": 3,
        "user_activity": 1,
        "user_memory_kv": 1,
        "export_objects": 0,
    }
    assert str(world.user) not in receipt.user_hash and len(receipt.user_hash) == 64
    assert world.svc.read().version == 0 and world.kvs.get("default", "k") is None
    assert world.activity.rows_of(world.user) == []
    assert world.other.head(other).version == 1 and world.kv.get(other, "default", "k").value == 2


def test_an_end_users_account_erases_only_that_user():
    world = seeded(end_user=True)
    stranger = AccountService(user_id=uuid.uuid4(), store=world.store, activity=world.activity, account=world.account)
    with pytest.raises(AccessDenied):
        stranger.erase()
    receipt = world.accounts.erase()
    assert receipt.deleted["user_memory_snapshots"] == 1 and receipt.requested_by == "self"


def test_key_value_calls_are_the_users():
    world = World()
    world.kvs.put("prefs", "b", 2)
    world.kvs.put("prefs", "a", 1, ttl_seconds=60)
    assert [e.key for e in world.kvs.list("prefs").entries] == ["a", "b"]
    assert world.kv.get(world.user, "prefs", "a").value == 1
    assert world.kvs.delete("prefs", "a") is True and world.kvs.get("prefs", "a") is None


# -- the client's Idempotency-Key ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_key", "stored"),
    [
        (None, None),
        ("req-1", "api:key:req-1"),
        ("daily:2026-11-21", "api:key:daily:2026-11-21"),  # a run key of the service stays the client's
        ("tool:call-1", "api:key:tool:call-1"),  # never an agent tool call's key (api:tool:...)
        ("x" * MAX_IDEMPOTENCY_KEY_CHARS, "api:key:" + "x" * MAX_IDEMPOTENCY_KEY_CHARS),
        ("ключ é", "api:key:ключ é"),
    ],
)
def test_a_client_key_is_stored_in_the_end_users_namespace(client_key, stored):
    assert idempotency_key(client_key) == stored


@pytest.mark.parametrize("client_key", ["", "x" * (MAX_IDEMPOTENCY_KEY_CHARS + 1), "line\nbreak", "tab\tkey", "\x00"])
def test_a_client_key_that_is_empty_too_long_or_not_printable_is_refused(client_key):
    with pytest.raises(InvalidRequest, match="Idempotency-Key"):
        idempotency_key(client_key)

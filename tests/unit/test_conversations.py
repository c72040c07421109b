"""Conversation memories without I/O: the batch messages and their sizes, the messages' checks,
the memory schema, the rule-based summarizer, one batch's isolation, and the settings."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from user_memory.adapters.openai_conversations import response_format
from user_memory.config import ApiSettings, FanoutSettings, WorkerSettings
from user_memory.domain.conversations.batch import MemoryConfig, run_batch
from user_memory.domain.conversations.model import (
    MAX_BATCH_MESSAGE_BYTES,
    MAX_CONVERSATION_ID_CHARS,
    MAX_CONVERSATIONS_PER_MESSAGE,
    MAX_MEMORY_ITEMS,
    ConversationKey,
    ConversationMemory,
    ConversationMessage,
    ConversationState,
)
from user_memory.domain.conversations.summarizer import RuleBasedConversationSummarizer, message_chunks
from user_memory.domain.conversations.trigger import batch_bodies, run_trigger
from user_memory.domain.messages import GenerateMemoryBatch, RecordActivity, parse_message
from user_memory.errors import ConfigError, InvalidMessage, SummarizerError

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
_IDS = st.one_of(st.text(max_size=210), st.sampled_from(["a", "b", str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _IDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_IDS, inner, max_size=3),
    max_leaves=6,
) | st.fixed_dictionaries({"user_id": _IDS, "conversation_id": _IDS})


# -- batch messages --------------------------------------------------------------------------------------

U = uuid.UUID("7c9e6679-7425-40de-944b-e07fc1f90ae7")


def k(conversation_id: str, user: uuid.UUID = U) -> ConversationKey:
    return ConversationKey(user, conversation_id)


def item(conversation_id: Any, user: Any = str(U)) -> dict[str, Any]:
    return {"user_id": user, "conversation_id": conversation_id}


def named(body: str) -> list[ConversationKey]:
    return [ConversationKey(uuid.UUID(i["user_id"]), i["conversation_id"]) for i in json.loads(body)["conversations"]]


def test_batches_hold_at_most_the_setting_and_parse_as_the_worker_reads_them():
    # Given 25 conversations and 10 per message
    keys = [k(f"c{i}") for i in range(25)]
    # When they are put in messages
    bodies = batch_bodies(keys, per_message=10)
    # Then there are 3 messages of 10, 10 and 5, in order, each a GENERATE_MEMORY_BATCH the worker parses
    parsed = [parse_message(b) for b in bodies]
    assert all(isinstance(p, GenerateMemoryBatch) for p in parsed)
    split = [p.keys() for p in parsed]  # type: ignore[union-attr]
    assert split == [(keys[:10], []), (keys[10:20], []), (keys[20:], [])]
    assert json.loads(bodies[0]) == {
        "task_type": "GENERATE_MEMORY_BATCH",
        "conversations": [{"user_id": str(U), "conversation_id": f"c{i}"} for i in range(10)],
    }


def test_batches_never_pass_sqs_limit_whatever_the_ids_hold():
    # Given the largest ids a message may name, made of characters JSON escapes at 6 bytes each
    worst = [k("\u2028" * (MAX_CONVERSATION_ID_CHARS - len(str(i))) + str(i)) for i in range(300)]
    # When they are batched at the maximum per message
    bodies = batch_bodies(worst, per_message=MAX_CONVERSATIONS_PER_MESSAGE)
    # Then every body is within SQS's limit and every conversation is in exactly one of them
    assert all(len(b.encode()) <= MAX_BATCH_MESSAGE_BYTES for b in bodies)
    assert [c for b in bodies for c in named(b)] == worst
    # And a small limit splits by bytes before the count is reached
    small = batch_bodies([k("x" * 50)] * 10, per_message=10, max_bytes=300)
    assert len(small) > 1 and all(len(b.encode()) <= 300 for b in small)


def test_a_per_message_setting_above_the_message_limit_is_capped():
    bodies = batch_bodies([k(f"c{i}") for i in range(250)], per_message=1000)
    assert [len(named(b)) for b in bodies] == [100, 100, 50]


def test_a_re_sent_batch_carries_its_attempt():
    [body] = batch_bodies([k("a"), k("b")], per_message=10, attempt=2)
    parsed = parse_message(body)
    assert isinstance(parsed, GenerateMemoryBatch) and parsed.attempt == 2


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"task_type": "GENERATE_MEMORY_BATCH", "conversations": []}, "conversations"),
        ({"task_type": "GENERATE_MEMORY_BATCH", "conversations": [item("x")] * 101}, "conversations"),
        ({"task_type": "GENERATE_MEMORY_BATCH", "conversations": item("x")}, "conversations"),
        ({"task_type": "GENERATE_MEMORY_BATCH", "conversations": [item("a")], "extra": 1}, "extra"),
        ({"task_type": "generate_memory_batch", "conversations": [item("a")]}, "task_type GENERATE_MEMORY_BATCH"),
        ({"conversations": [item("a")]}, "type must be"),
        # The shape before migration 014: an id alone no longer names a conversation
        ({"task_type": "GENERATE_MEMORY_BATCH", "conversation_ids": ["a"]}, "no longer accepted"),
    ],
)
def test_malformed_batches_are_invalid_messages(body, fragment):
    with pytest.raises(InvalidMessage, match=fragment):
        parse_message(json.dumps(body))


def test_a_malformed_item_is_refused_alone_and_the_others_are_kept():
    # Given a batch whose items are good, repeated, and malformed in every way an item can be
    body = {
        "task_type": "GENERATE_MEMORY_BATCH",
        "conversations": [
            item("a"),
            item("x" * 201),
            item("a\tb"),
            item(7),
            item("b", user="not-a-uuid"),
            {"conversation_id": "c"},
            {**item("d"), "extra": 1},
            "just an id",
            item("b"),
            item("a"),
            item("a", user=str(uuid.UUID(int=2))),
        ],
    }
    # When the worker parses the message
    parsed = parse_message(json.dumps(body))
    assert isinstance(parsed, GenerateMemoryBatch)
    keys, refused = parsed.keys()
    # Then the well-formed ones are kept, once each, in order (another user's "a" is another conversation)
    assert keys == [k("a"), k("b"), k("a", uuid.UUID(int=2))]
    # And each malformed one is refused with its place and a reason naming the field, never its value
    assert [r.position for r in refused] == [1, 2, 3, 4, 5, 6, 7]
    reasons = [r.reason for r in refused]
    assert "conversation_id" in reasons[0] and "control characters" in reasons[1]
    assert "conversation_id" in reasons[2] and "user_id" in reasons[3] and "user_id" in reasons[4]
    assert "extra" in reasons[5] and "not-a-uuid" not in " ".join(reasons)
    # And what of its ids a log can carry: escaped, cut, only strings
    assert refused[1].conversation_id == "a\\tb" and refused[2].conversation_id is None
    assert len(refused[0].conversation_id or "") == 100 and refused[4].user_id is None


@given(st.lists(json_values, min_size=1, max_size=MAX_CONVERSATIONS_PER_MESSAGE))
@hypothesis_settings(max_examples=200, deadline=None)
def test_any_items_parse_into_kept_and_refused_and_nothing_else(items):
    # Given any JSON values as the items of a batch
    parsed = parse_message(json.dumps({"task_type": "GENERATE_MEMORY_BATCH", "conversations": items}))
    assert isinstance(parsed, GenerateMemoryBatch)
    # When they are checked, Then every item is either kept or refused, never raised
    keys, refused = parsed.keys()
    assert len(set(keys)) == len(keys) and len(refused) <= len(items)
    assert len(keys) + len(refused) <= len(items)
    assert all(r.reason and len(r.reason) <= 300 for r in refused)
    # And every kept one goes back into a message that names it alone
    if keys:
        assert [c for b in batch_bodies(keys, per_message=100) for c in named(b)] == keys


# -- messages in -------------------------------------------------------------------------------------------


def _activity(payload: dict[str, Any], kind: str = "message") -> str:
    return json.dumps(
        {
            "type": "record_activity",
            "activities": [
                {
                    "user_id": str(uuid.uuid4()),
                    "occurred_at": "2026-11-21T10:00:00Z",
                    "kind": kind,
                    "payload": payload,
                    "source": "chat",
                    "external_id": "msg-1",
                }
            ],
        }
    )


def test_a_message_with_a_conversation_id_is_a_conversation_message_and_others_stay_activity():
    parsed = parse_message(_activity({"conversation_id": "c1", "role": "user", "text": "hi"}))
    assert isinstance(parsed, RecordActivity)
    [item] = parsed.activities
    assert item.is_message
    message = item.to_message()
    assert (message.conversation_id, message.message_id, message.role, message.text) == ("c1", "msg-1", "user", "hi")
    # A message without a conversation id (the daily job's activity, as before) is not one
    plain = parse_message(_activity({"text": "hi"}))
    assert isinstance(plain, RecordActivity) and not plain.activities[0].is_message
    other_kind = parse_message(_activity({"conversation_id": "c1"}, kind="session"))
    assert isinstance(other_kind, RecordActivity) and not other_kind.activities[0].is_message


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"conversation_id": "c1", "role": "narrator", "text": "x"}, "role"),
        ({"conversation_id": "c1", "role": "user"}, "text"),
        ({"conversation_id": "", "role": "user", "text": "x"}, "conversation_id"),
        ({"conversation_id": "c1", "role": "user", "text": "x", "mood": "happy"}, "mood"),
    ],
)
def test_invalid_conversation_messages_name_the_field_never_the_text(payload, fragment):
    with pytest.raises(InvalidMessage, match=fragment) as info:
        parse_message(_activity(payload))
    assert "narrator" not in str(info.value) and "happy" not in str(info.value)


# -- the memory and the rule-based summarizer ----------------------------------------------------------------


def test_a_memory_is_normalized_within_its_limits():
    memory = ConversationMemory(
        discussed="  many   spaces ",
        learned_about_user=["a", "A", "", *[f"fact {i}" for i in range(30)]],
        decisions=["x" * 2000],
        open_loops=[],
        tone="calm",
    ).normalized()
    assert memory.discussed == "many spaces"
    assert len(memory.learned_about_user) == MAX_MEMORY_ITEMS and memory.learned_about_user[-1] == "fact 29"
    assert len(memory.decisions[0]) == 500 and memory.decisions[0].endswith("…")


def test_the_openai_response_format_is_strict_and_names_every_field():
    fmt = response_format()
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(ConversationMemory.model_fields) == set(schema["properties"])


def _messages(*lines: tuple[str, str], conversation: str = "c1") -> list[ConversationMessage]:
    return [
        ConversationMessage(
            conversation_id=conversation,
            seq=n + 1,
            message_id=f"m{n}",
            role=role,
            text=text,
            occurred_at=T0 + timedelta(minutes=n),
        )
        for n, (role, text) in enumerate(lines)
    ]


def test_the_rule_based_summarizer_keeps_what_the_user_said_about_themselves_decided_and_left_open():
    messages = _messages(
        ("user", "I'm a nurse and I work nights. Thanks for the tips!"),
        ("assistant", "Happy to help."),
        ("user", "I'll try sleeping at 9am. Can you remind me next week?"),
    )
    result = RuleBasedConversationSummarizer().summarize_conversation(None, messages)
    memory = result.memory
    assert result.model == "rules"
    assert memory.learned_about_user == ["I'm a nurse and I work nights."]
    assert memory.decisions == ["I'll try sleeping at 9am."]
    assert memory.open_loops == ["Can you remind me next week?"]
    assert memory.tone == "positive" and "3 messages" in memory.discussed
    # And new messages are folded into the memory so far
    later = RuleBasedConversationSummarizer().summarize_conversation(
        memory, _messages(("user", "My shift changed and I'm stressed."))
    )
    assert later.memory.learned_about_user[-1] == "My shift changed and I'm stressed."
    assert later.memory.decisions == memory.decisions and later.memory.tone == "frustrated"
    assert later.memory.discussed.startswith(memory.discussed)


def test_chunks_fit_the_prompt_budget_and_keep_the_order():
    messages = _messages(*[("user", "x" * 90)] * 10)
    chunks = list(message_chunks(messages, max_chars=400))
    assert [m.seq for c in chunks for m in c] == list(range(1, 11))
    assert all(sum(len(m.text) + 40 for m in c) <= 500 for c in chunks) and len(chunks) > 2


# -- one batch, each conversation isolated --------------------------------------------------------------------


class FakeStore:
    """An in-memory ConversationStore: user U's conversation id -> messages; memories saved here."""

    def __init__(self, conversations: dict[str, int]) -> None:
        self.conversations = conversations
        self.saved: dict[str, tuple[dict[str, Any], int]] = {}

    def state(self, key: ConversationKey) -> ConversationState | None:
        n = self.conversations.get(key.conversation_id) if key.user_id == U else None
        if n is None:
            return None
        through = self.saved.get(key.conversation_id, (None, None))[1]
        memory = self.saved.get(key.conversation_id, (None, None))[0]
        return ConversationState(
            conversation_id=key.conversation_id,
            user_id=key.user_id,
            messages=n,
            last_message_at=T0,
            memory_through=through,
            memory=memory,
        )

    def messages(self, key: ConversationKey, *, after_seq: int, through_seq: int, limit: int):
        lines = [("user", f"I'm message {i}.") for i in range(through_seq)]
        return _messages(*lines, conversation=key.conversation_id)[after_seq:through_seq][:limit]

    def save_memory(self, state: ConversationState, memory: dict[str, Any], last, *, model: str):
        self.saved[state.conversation_id] = (memory, last.seq)
        return "written"

    def record(self, messages: Sequence[Any]) -> int:
        return 0

    def pending_pages(self, quiet_before: datetime, *, page_size: int) -> Iterator[list[ConversationKey]]:
        keys = sorted(k(c) for c in self.conversations if c not in self.saved)
        for i in range(0, len(keys), page_size):
            yield keys[i : i + page_size]

    def memories_updated(self, user_id, start, end):
        return []


class Flaky(RuleBasedConversationSummarizer):
    def __init__(self, failing: set[str]) -> None:
        self.failing = failing

    def summarize_conversation(self, previous, messages, **kw):
        if messages[0].conversation_id in self.failing:
            raise ConnectionError("the endpoint is down")
        return super().summarize_conversation(previous, messages, **kw)


def test_one_conversations_failure_does_not_stop_the_others():
    store = FakeStore({"a": 2, "b": 3, "c": 1})
    batch = [k("a"), k("b"), k("c"), k("gone"), k("a", uuid.UUID(int=2))]
    run = run_batch(batch, store=store, summarizer=Flaky({"b"}), cfg=MemoryConfig())
    assert [o.status for o in run.outcomes] == ["written", "written", "missing", "missing"]
    assert run.failed_keys == [k("b")] and isinstance(run.failures[0].error, ConnectionError)
    assert set(store.saved) == {"a", "c"} and store.saved["a"][1] == 2
    # And a second run of the same batch writes only what is missing
    again = run_batch([k("a"), k("b"), k("c")], store=store, summarizer=Flaky(set()), cfg=MemoryConfig())
    assert [o.status for o in again.outcomes] == ["unchanged", "written", "unchanged"]


def test_output_that_never_validates_fails_the_conversation_after_its_attempts():
    from user_memory.errors import InvalidDocument

    class Garbled(RuleBasedConversationSummarizer):
        calls = 0

        def summarize_conversation(self, previous, messages, **kw):
            Garbled.calls += 1
            raise InvalidDocument("not a memory")

    run = run_batch([k("a")], store=FakeStore({"a": 1}), summarizer=Garbled(), cfg=MemoryConfig(attempts=2))
    assert isinstance(run.failures[0].error, SummarizerError) and Garbled.calls == 2


class Clock:
    def __init__(self, left: float) -> None:
        self.value = left

    def left(self) -> float:
        return self.value


def test_conversations_that_cannot_start_before_the_deadline_are_deferred():
    store = FakeStore({"a": 1, "b": 1, "c": 1})
    batch = [k("a"), k("b"), k("c")]
    run = run_batch(batch, store=store, summarizer=Flaky(set()), cfg=MemoryConfig(), deadline=Clock(20))
    assert [o.key for o in run.outcomes] == [k("a")] and run.deferred == [k("b"), k("c")]
    # And with no time at all, even the first is deferred, not failed
    none = run_batch([k("b")], store=store, summarizer=Flaky(set()), cfg=MemoryConfig(), deadline=Clock(1))
    assert none.deferred == [k("b")] and not none.failures


def test_a_long_conversation_out_of_time_writes_what_was_summarized_as_partial():
    store = FakeStore({"long": 400})
    cfg = MemoryConfig(max_prompt_chars=2_000)  # many chunks
    clock = Clock(60)

    class Slow(RuleBasedConversationSummarizer):
        def summarize_conversation(self, previous, messages, **kw):
            clock.value -= 30  # each call takes 30 of the 60 s left
            return super().summarize_conversation(previous, messages, **kw)

    [outcome] = run_batch([k("long")], store=store, summarizer=Slow(), cfg=cfg, deadline=clock).outcomes
    assert outcome.status == "partial" and 0 < store.saved["long"][1] < 400


class Sent:
    def __init__(self) -> None:
        self.bodies: list[str] = []

    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int:
        self.bodies += bodies
        return len(bodies)


def test_the_trigger_sends_every_pending_conversation_page_by_page():
    store = FakeStore({f"c{i:02d}": 1 for i in range(23)})
    sender = Sent()
    report = run_trigger(store, sender, threshold=timedelta(hours=2), per_message=5, page_size=10, now=T0)
    assert (report.conversations, report.messages, report.pages) == (23, 5, 3)  # pages of 10, 10, 3
    assert report.quiet_before == T0 - timedelta(hours=2) and report.threshold_minutes == 120
    assert sorted(c.conversation_id for b in sender.bodies for c in named(b)) == sorted(store.conversations)


# -- settings ------------------------------------------------------------------------------------------------------


def test_the_trigger_settings_default_to_two_hours_and_ten_per_message():
    for settings in (ApiSettings.from_env({}), FanoutSettings.from_env({"QUEUE_URL": "q"})):
        assert settings.inactivity_threshold_minutes == 120 and settings.conversations_per_message == 10
    assert (
        FanoutSettings.from_env({"QUEUE_URL": "q", "INACTIVITY_THRESHOLD_MINUTES": "30"}).inactivity_threshold_minutes
        == 30
    )


@pytest.mark.parametrize(
    "env",
    [
        {"INACTIVITY_THRESHOLD_MINUTES": "0"},
        {"INACTIVITY_THRESHOLD_MINUTES": "two hours"},
        {"INACTIVITY_THRESHOLD_MINUTES": "44641"},
        {"CONVERSATIONS_PER_MESSAGE": "0"},
        {"CONVERSATIONS_PER_MESSAGE": "101"},
    ],
)
def test_invalid_trigger_settings_name_the_variable(env):
    with pytest.raises(ConfigError, match=next(iter(env))):
        FanoutSettings.from_env({"QUEUE_URL": "q", **env})


def test_the_worker_s_conversation_settings():
    settings = WorkerSettings.from_env({})
    assert (settings.queue_url, settings.conversation_max_attempts, settings.conversation_retry_delay_seconds) == (
        None,
        5,
        60,
    )
    cfg = settings.memory_config()
    assert (cfg.attempts, cfg.call_budget) == (settings.summarizer_attempts, 50.0)
    with pytest.raises(ConfigError, match="CONVERSATION_RETRY_DELAY_SECONDS"):
        WorkerSettings.from_env({"CONVERSATION_RETRY_DELAY_SECONDS": "901"})  # SQS's own maximum is 900

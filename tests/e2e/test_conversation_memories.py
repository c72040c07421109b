"""Conversation memories end to end: real handlers and events, real PostgreSQL, moto's SQS, and
the real `openai` client against a local fake endpoint.

The database is shared with the rest of the session, so the trigger may also find other tests'
quiet conversations; each test checks its own conversations (ids with a uuid), never totals.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws
from user_memory.adapters.sqs import SqsSender
from user_memory.config import ApiSettings
from user_memory.domain.conversations.model import (
    MAX_BATCH_MESSAGE_BYTES,
    ConversationKey,
    ConversationMemory,
    NewMessage,
)
from user_memory.domain.conversations.summarizer import RuleBasedConversationSummarizer
from user_memory.http.app import MemoryApi, create_api
from user_memory.runtime import build_api
from user_memory_local.poller import FakeLambdaContext, sqs_record

from tests.api_client import ApiClient
from tests.conftest import EVENTS
from tests.e2e.helpers import (
    MAX_RECEIVES,
    MEMORY,
    OPERATOR,
    Stack,
    batch_body,
    batch_event,
    conversation,
    memory_reply,
    named,
    openai_stack,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]
TRIGGER_EVENT = json.loads((EVENTS / "fanout_conversation_trigger.json").read_text())  # the schedule's Input
# -- the trigger and the worker ------------------------------------------------------------------------------


def test_the_schedule_queues_quiet_conversations_and_the_worker_writes_their_memories(stack):
    # Given three conversations quiet for three hours and one whose last message was ten minutes ago
    quiet = [conversation(stack.conversations) for _ in range(3)]
    active = conversation(stack.conversations, quiet_for=timedelta(minutes=10))
    # When the fan-out runs on the conversation schedule's event (INACTIVITY_THRESHOLD_MINUTES: 120)
    result = stack.fanout(TRIGGER_EVENT)
    assert result["task_type"] == "TRIGGER_MEMORY_GENERATION" and result["threshold_minutes"] == 120
    assert result["conversations"] >= 3 and result["messages"] >= 1
    # Then the queue holds GENERATE_MEMORY_BATCH messages naming the quiet ones, never the active one
    bodies = stack.queued()
    keys = [c for b in bodies for c in named(b)]
    assert all(b["task_type"] == "GENERATE_MEMORY_BATCH" for b in bodies)
    assert set(quiet) <= set(keys) and active not in keys
    assert all(len(named(b)) <= stack.fanout_services.settings.conversations_per_message for b in bodies)
    # When the worker drains the queue
    report = stack.poller().drain()
    # Then each quiet conversation has its memory, covering its four messages; the active one none
    assert report.to_dlq == 0 and report.failed_attempts == 0
    for c in quiet:
        stored = stack.memory(c)
        assert stored is not None
        memory, seq, _ = stored
        assert seq == 4 and ConversationMemory.model_validate(memory)
        assert "I'll try it." in memory["decisions"] and any("physio" in loop for loop in memory["open_loops"])
    assert stack.memory(active) is None


@pytest.mark.parametrize(
    "event",
    [
        {"task_type": "TRIGGER_MEMORY_GENERATION", "threshold_minutes": 0},
        {"task_type": "TRIGGER_MEMORY_GENERATION", "conversation_ids": ["a"]},
    ],
)
def test_a_malformed_trigger_event_is_refused_logged_and_counted(stack, event, logs):
    with pytest.raises(Exception, match="invalid trigger event"):
        stack.fanout(event)
    [failed] = logs.named("fan-out failed")
    assert failed["error"] == "InvalidEvent"
    assert stack.queued() == []


def test_a_re_run_writes_nothing(stack):
    # Given quiet conversations whose memories were written
    quiet = [conversation(stack.conversations) for _ in range(2)]
    stack.fanout(TRIGGER_EVENT)
    stack.poller().drain()
    before = {c: stack.memory(c) for c in quiet}
    assert all(before.values())
    calls: list[str] = []

    class Counting(RuleBasedConversationSummarizer):
        def summarize_conversation(self, previous, messages, **kw):
            calls.append(messages[0].conversation_id)
            return super().summarize_conversation(previous, messages, **kw)

    stack.worker_services.conversation_summarizer = Counting()
    # When the trigger runs again, and another service sends the same batch again
    again = stack.fanout(TRIGGER_EVENT)
    assert not set(quiet) & {c for b in stack.queued() for c in named(b)}
    assert stack.worker(batch_event(quiet)) == {"batchItemFailures": []}
    stack.poller().drain()
    # Then nothing is summarized or written again
    assert not set(calls) & {k.conversation_id for k in quiet}
    assert {c: stack.memory(c) for c in quiet} == before
    assert again["conversations"] >= 0


def test_one_failing_conversation_does_not_stop_the_batch_and_is_retried_until_written(database_url, pool, logs):
    # Given a worker on the real openai client against a local endpoint, and a batch of three
    # conversations whose second one's call fails (HTTP 500, no client retry)
    with openai_stack(database_url, pool, openai_max_retries=0) as (stack, fake):
        ids = [conversation(stack.conversations) for _ in range(3)]
        fake.reply(memory_reply(tone="first"))
        fake.reply({"error": {"message": "boom"}}, status=500)
        fake.reply(memory_reply(tone="third"))
        fake.reply(memory_reply(tone="second, retried"))
        stack.sqs.send_message(
            QueueUrl=stack.queue_url,
            MessageBody=json.dumps(batch_body(ids)),
        )
        # When the queue is drained the way Lambda's event source would
        report = stack.poller().drain()
        # Then every conversation has its memory: the failed one through a re-sent message of its own
        assert report.to_dlq == 0 and report.failed_attempts == 0 and report.invocations == 2
        tones = [stack.memory(c)[0]["tone"] for c in ids]  # type: ignore[index]
        assert tones == ["first", "second, retried", "third"]
        # And the model was asked with strict structured output, once per conversation plus the retry
        assert len(fake.requests) == 4
        schema = fake.response_format(0)
        assert schema["type"] == "json_schema" and schema["json_schema"]["name"] == "conversation_memory"
        assert schema["json_schema"]["strict"] is True
        assert set(schema["json_schema"]["schema"]["required"]) == set(MEMORY)
        assert "I'm training for a half marathon" in fake.user_prompt(0)
    # And the failure was logged once with its conversation id, error type and reason, and re-sent
    [failed] = logs.named("conversation memory failed")
    assert (failed["user_id"], failed["conversation_id"], failed["error"], failed["attempt"]) == (
        str(ids[1].user_id),
        ids[1].conversation_id,
        "SummarizerUnavailable",
        0,
    )
    assert "HTTP 500" in failed["reason"]
    [resent] = logs.named("conversations re-sent")
    assert (resent["failed"], resent["attempt"], resent["messages"]) == (1, 1, 1)
    assert not logs.named("record failed")
    [first, second] = logs.named("batch done")
    assert first["conversations"] == {"written": 2, "failed": 1} and second["conversations"] == {"written": 1}


def test_when_re_sending_fails_the_record_fails_and_sqs_brings_it_back(stack, logs):
    # Given a batch whose second conversation fails, and a worker that cannot reach its queue to re-send it
    ids = [conversation(stack.conversations) for _ in range(2)]

    class FailsOnce(RuleBasedConversationSummarizer):
        failed = False

        def summarize_conversation(self, previous, messages, **kw):
            if messages[0].conversation_id == ids[1].conversation_id and not self.failed:
                self.failed = True
                raise RuntimeError("the model fell over")
            return super().summarize_conversation(previous, messages, **kw)

    stack.worker_services.conversation_summarizer = FailsOnce()
    stack.worker_services.sender = SqsSender(stack.queue_url + "-gone", stack.sqs)
    # When the worker runs the record
    result = stack.worker(batch_event(ids))
    # Then the record fails (so SQS retries it), the first conversation is written, and it says why
    assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    assert stack.memory(ids[0]) is not None and stack.memory(ids[1]) is None
    [failed] = logs.named("record failed")
    assert failed["error"] == "ConversationsFailed" and str(ids[1]) in failed["reason"]
    # When SQS delivers it again
    assert stack.worker(batch_event(ids)) == {"batchItemFailures": []}
    # Then the failed one is written and the done one is left alone
    assert stack.memory(ids[1]) is not None


def test_a_conversation_that_keeps_failing_reaches_the_dlq_and_is_never_dropped(database_url, pool, logs):
    with mock_aws():
        stack = Stack(database_url, pool, boto3.client("sqs", region_name="us-east-1"), conversation_max_attempts=2)
        good, bad = conversation(stack.conversations), conversation(stack.conversations)

        class Broken(RuleBasedConversationSummarizer):
            def summarize_conversation(self, previous, messages, **kw):
                if messages[0].conversation_id == bad.conversation_id:
                    raise RuntimeError("always")
                return super().summarize_conversation(previous, messages, **kw)

        stack.worker_services.conversation_summarizer = Broken()
        stack.sqs.send_message(
            QueueUrl=stack.queue_url,
            MessageBody=json.dumps(batch_body([good, bad])),
        )
        # When the queue is drained
        report = stack.poller().drain()
        # Then the good one is written; the bad one was re-sent once (attempt 1 of 2), then its
        # message failed on every receive and moved to the DLQ, naming it
        assert stack.memory(good) is not None and stack.memory(bad) is None
        assert report.to_dlq == 1 and report.failed_attempts == MAX_RECEIVES
        dlq = stack.sqs.receive_message(QueueUrl=stack.dlq_url, MaxNumberOfMessages=10)["Messages"]
        assert [json.loads(m["Body"]) for m in dlq] == [batch_body([bad], attempt=1)]
    failures = logs.named("conversation memory failed")
    assert {f["conversation_id"] for f in failures} == {bad.conversation_id} and len(failures) == 1 + MAX_RECEIVES
    assert all(f["error"] == "RuntimeError" and "unexpected error raised at" in f["reason"] for f in failures)


def test_conversations_not_started_before_the_deadline_are_re_sent_not_failed(stack, logs):
    # Given a batch of three and an invocation with 20 s left past the margin (one call's budget is 50 s)
    ids = [conversation(stack.conversations) for _ in range(3)]
    context = FakeLambdaContext(timeout_seconds=35)
    # When the worker runs it
    assert stack.worker(batch_event(ids), context) == {"batchItemFailures": []}
    # Then the first is written and the other two are queued again as they were (no attempt used)
    assert stack.memory(ids[0]) is not None and stack.memory(ids[1]) is None
    assert stack.queued() == [batch_body(ids[1:])]
    [resent] = logs.named("conversations re-sent")
    assert (resent["failed"], resent["deferred"], resent["attempt"]) == (0, 2, 0)
    # And the next invocation takes them
    stack.poller().drain()
    assert all(stack.memory(c) is not None for c in ids)


def test_the_worker_event_from_file_summarizes_the_conversations_it_names(stack):
    # Given the two conversations tests/events/worker_generate_memory_batch.json names (for sam local invoke)
    event = json.loads((EVENTS / "worker_generate_memory_batch.json").read_text())
    keys = named(json.loads(event["Records"][0]["body"]))
    for key in keys:
        if stack.conversations.state(key) is None:
            stack.conversations.record(
                [
                    NewMessage(
                        user_id=key.user_id,
                        conversation_id=key.conversation_id,
                        message_id="m1",
                        role="user",
                        text="I live in Porto.",
                        occurred_at=datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
                        source="chat",
                    )
                ]
            )
    # When the worker runs it, Then both have a memory and the record succeeds
    assert stack.worker(event) == {"batchItemFailures": []}
    assert all(stack.memory(k) is not None for k in keys)


def test_a_batch_that_names_unknown_or_repeated_conversations_writes_what_exists(stack, logs):
    real = conversation(stack.conversations)
    unknown = ConversationKey(uuid.uuid4(), "never-recorded")
    elsewhere = ConversationKey(uuid.uuid4(), real.conversation_id)  # real's id, another user: not real's
    assert stack.worker(batch_event([real, unknown, real, elsewhere])) == {"batchItemFailures": []}
    assert stack.memory(real) is not None and stack.memory(unknown) is None and stack.memory(elsewhere) is None
    refused = logs.named("batch item refused")
    assert [(r["user_id"], r["conversation_id"], r["error"]) for r in refused] == [
        (str(unknown.user_id), unknown.conversation_id, "UnknownConversation"),
        (str(elsewhere.user_id), elsewhere.conversation_id, "UnknownConversation"),
    ]
    assert stack.queued() == []


def test_one_malformed_item_fails_alone_and_the_batch_goes_on(stack, logs):
    # Given a batch of three real conversations with malformed items between them
    ids = [conversation(stack.conversations) for _ in range(3)]
    items = batch_body(ids)["conversations"]
    body = {
        "task_type": "GENERATE_MEMORY_BATCH",
        "conversations": [
            items[0],
            {"user_id": str(ids[1].user_id), "conversation_id": "a\nb"},  # a control character
            items[1],
            {"user_id": "not-a-uuid", "conversation_id": ids[2].conversation_id},
            "conv-bare-id",  # the old shape's item
            items[2],
        ],
    }
    # When the worker runs the record
    result = stack.worker({"Records": [sqs_record(message_id="m0", body=json.dumps(body))]})
    # Then the record succeeds and every real conversation has its memory
    assert result == {"batchItemFailures": []}
    assert all(stack.memory(k) is not None for k in ids)
    # And each malformed item was logged once with its place, error type and reason, and counted
    refused = logs.named("batch item refused")
    assert [(r["message_id"], r["item"], r["error"]) for r in refused] == [
        ("m0", 1, "InvalidMessage"),
        ("m0", 3, "InvalidMessage"),
        ("m0", 4, "InvalidMessage"),
    ]
    assert "control characters" in refused[0]["reason"] and refused[0]["conversation_id"] == "a\\nb"
    assert "user_id" in refused[1]["reason"] and "not-a-uuid" not in refused[1]["reason"]
    [done] = logs.named("batch done")
    assert done["conversations"] == {"written": 3, "refused": 3} and done["failed"] == 0
    # And nothing is re-sent (no retry can mend a malformed item), nor failed
    assert stack.queued() == [] and not logs.named("record failed") and not logs.named("conversations re-sent")


def test_malformed_batches_fail_alone(stack, logs):
    item = {"user_id": str(uuid.uuid4()), "conversation_id": "a"}
    bodies = [
        {"task_type": "GENERATE_MEMORY_BATCH", "conversations": []},
        {"task_type": "GENERATE_MEMORY_BATCH", "conversations": [item] * 101},
        {"task_type": "GENERATE_MEMORY_BATCH", "conversations": item},
        {"task_type": "GENERATE_MEMORY_NOW", "conversations": [item]},
        # The shape before migration 014: ids alone no longer name a conversation
        {"task_type": "GENERATE_MEMORY_BATCH", "conversation_ids": ["a"]},
    ]
    event = {"Records": [sqs_record(message_id=f"m{i}", body=json.dumps(b)) for i, b in enumerate(bodies)]}
    assert stack.worker(event) == {"batchItemFailures": [{"itemIdentifier": f"m{i}"} for i in range(5)]}
    failed = logs.named("record failed")
    assert {r["error"] for r in failed} == {"InvalidMessage"}
    assert "no longer accepted" in failed[-1]["reason"]


# -- messages in -----------------------------------------------------------------------------------------------


def test_messages_arrive_on_the_queue_like_activity_and_are_stored_once(stack, pool):
    user, cid = uuid.uuid4(), f"conv-{uuid.uuid4()}"
    at = "2026-11-21T09:30:00Z"
    body = {
        "type": "record_activity",
        "activities": [
            {
                "user_id": str(user),
                "occurred_at": at,
                "kind": "session",
                "payload": {},
                "source": "chat",
                "external_id": cid,
            },
            *(
                {
                    "user_id": str(user),
                    "occurred_at": at,
                    "kind": "message",
                    "payload": {"conversation_id": cid, "role": role, "text": text},
                    "source": "chat",
                    "external_id": f"msg-{n}",
                }
                for n, (role, text) in enumerate([("user", "hello"), ("assistant", "hi!")])
            ),
        ],
    }
    event = batch = {"Records": [sqs_record(message_id="m0", body=json.dumps(body))]}
    # When the message is delivered twice
    assert stack.worker(event) == stack.worker(batch) == {"batchItemFailures": []}
    # Then the conversation holds its two messages once, and the session is activity as before
    state = stack.conversations.state(ConversationKey(user, cid))
    assert state is not None and state.user_id == user and state.messages == 2
    with pool.connection() as conn:
        kinds = conn.execute("SELECT kind FROM user_activity WHERE user_id = %s", (user,)).fetchall()
    assert kinds == [("session",)]
    # And a conversation message without a valid role fails the record, naming the field
    bad = json.loads(json.dumps(body))
    bad["activities"][1]["payload"]["role"] = "narrator"
    result = stack.worker({"Records": [sqs_record(message_id="m1", body=json.dumps(bad))]})
    assert result == {"batchItemFailures": [{"itemIdentifier": "m1"}]}


# -- the operators' API route -----------------------------------------------------------------------------------


@pytest.fixture
def api_with_queue(pool, stack):
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": stack.queue_url})
    return create_api(build_api(settings, pool=pool, sqs_client=stack.sqs), settings)


def test_the_trigger_route_is_for_operators_only(api_with_queue, stack, logs):
    quiet = conversation(stack.conversations)
    alice = ApiClient(api_with_queue, uuid.uuid4())
    # Given end users with and without other scopes: 403, and nothing is queued
    for claims in (
        {"sub": alice.user_id},
        {"sub": alice.user_id, "scope": "openid profile user-memory/operator-ish"},
        {"sub": alice.user_id, "cognito:groups": "[admins]"},
    ):
        reply = alice.post("/tasks/trigger-memory-generation", claims=claims)
        assert reply.status == 403 and reply.json["type"].endswith("/forbidden"), reply.text
    assert ApiClient(api_with_queue, None).post("/tasks/trigger-memory-generation").status == 401
    assert stack.queued() == []
    # When an operator triggers it, with a threshold of its own
    operator = ApiClient(api_with_queue, uuid.uuid4(), scopes=f"openid {OPERATOR}")
    reply = operator.post("/tasks/trigger-memory-generation", query={"threshold_minutes": 60})
    # Then the answer counts what was queued, and the quiet conversation is on the queue
    assert reply.status == 200, reply.text
    body = reply.json
    assert body["threshold_minutes"] == 60 and body["conversations"] >= 1 and body["messages"] >= 1
    assert set(body) == {"threshold_minutes", "quiet_before", "conversations", "messages", "pages"}
    assert quiet in {c for b in stack.queued() for c in named(b)}
    actions = logs.named("operator action")
    assert [a["action"] for a in actions] == ["trigger memory generation"]
    # And a threshold out of range is refused
    assert operator.post("/tasks/trigger-memory-generation", query={"threshold_minutes": 0}).status == 400


def test_the_trigger_route_without_a_queue_is_a_404_not_enabled_problem(make_api_without_queue):
    operator = ApiClient(make_api_without_queue, uuid.uuid4(), scopes=OPERATOR)
    reply = operator.post("/tasks/trigger-memory-generation")
    # A capability the deployment lacks answers as the search across users without it does
    assert reply.status == 404 and reply.json["type"].endswith("/not-enabled")
    assert "QUEUE_URL" in reply.json["detail"]


def test_operator_routes_whose_capability_is_missing_answer_alike(pool):
    # Given an API composed without the services that run tasks or search across users
    settings = ApiSettings.from_env({})
    operator = ApiClient(MemoryApi(build_api(settings, pool=pool), settings), uuid.uuid4(), scopes=OPERATOR)
    # When an operator triggers memory generation or searches across users
    replies = [
        operator.post("/tasks/trigger-memory-generation"),
        operator.get("/admin/memory/search", query={"q": "x"}),
    ]
    # Then both answer the same problem: 404 not-enabled, naming what the deployment cannot do
    for reply in replies:
        assert reply.status == 404 and reply.json["type"].endswith("/not-enabled"), reply.text
        assert reply.json["detail"].startswith("this deployment cannot"), reply.text


@pytest.fixture
def make_api_without_queue(pool):
    settings = ApiSettings.from_env({})
    return create_api(build_api(settings, pool=pool), settings)


def test_an_end_users_messages_are_exported_with_their_memory_and_erased(api_with_queue, stack):
    alice = ApiClient(api_with_queue, uuid.uuid4())
    cid = f"conv-{uuid.uuid4()}"
    at = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    items = [
        {
            "occurred_at": at,
            "kind": "message",
            "payload": {"conversation_id": cid, "role": role, "text": text},
            "external_id": f"m{n}",
        }
        for n, (role, text) in enumerate([("user", "I prefer tea."), ("assistant", "Noted.")])
    ]
    # When alice posts her messages (twice) as activity
    assert alice.post("/me/activity", json_body={"items": items}).json == {"received": 2, "recorded": 2}
    assert alice.post("/me/activity", json_body={"items": items}).json == {"received": 2, "recorded": 0}
    bob = ApiClient(api_with_queue, uuid.uuid4())
    # And a malformed conversation message is a 422 naming the field, recording nothing
    bad = [{**items[0], "payload": {"conversation_id": cid, "role": "narrator", "text": "x"}, "external_id": "z"}]
    reply = alice.post("/me/activity", json_body={"items": bad})
    assert reply.status == 422 and "role" in reply.json["detail"]
    # And her conversation's memory is generated
    key = ConversationKey(uuid.UUID(alice.user_id), cid)
    assert stack.worker(batch_event([key])) == {"batchItemFailures": []}
    # Then her export holds the conversation, its messages and its memory
    [exported] = alice.get("/me/export").json["conversations"]
    assert exported["conversation_id"] == cid
    assert [(m["seq"], m["role"], m["text"]) for m in exported["messages"]] == [
        (1, "user", "I prefer tea."),
        (2, "assistant", "Noted."),
    ]
    assert exported["memory"]["last_message_seq"] == 2
    assert exported["memory"]["memory"]["learned_about_user"] == ["I prefer tea."]
    assert bob.get("/me/export").json["conversations"] == []
    # And erasing her removes them, counted
    removed = alice.delete("/me").json["removed"]
    assert (removed["conversations"], removed["conversation_messages"], removed["conversation_memories"]) == (1, 2, 1)
    assert alice.get("/me/export").json["conversations"] == []
    assert stack.memory(key) is None


def test_a_conversation_id_in_use_by_another_user_is_neither_revealed_nor_blocked(api_with_queue, stack):
    alice, bob = ApiClient(api_with_queue, uuid.uuid4()), ApiClient(api_with_queue, uuid.uuid4())
    at = (datetime.now(UTC) - timedelta(hours=3)).isoformat()

    def said(cid: str, text: str, n: int = 0) -> dict[str, Any]:
        payload = {"conversation_id": cid, "role": "user", "text": text}
        return {"occurred_at": at, "kind": "message", "payload": payload, "external_id": f"m{n}"}

    # Given bob writes first under the id alice's product will use for her conversation
    shared = f"conv-{uuid.uuid4()}"
    assert bob.post("/me/activity", json_body={"items": [said(shared, "I live in Oslo.")]}).json["recorded"] == 1
    # When alice records her messages under that id, with the same message id
    reply = alice.post("/me/activity", json_body={"items": [said(shared, "I prefer tea."), said(shared, "Hi.", 1)]})
    # Then she is not locked out: both are recorded, in her own conversation
    assert reply.status == 200 and reply.json == {"received": 2, "recorded": 2}, reply.text
    # And naming an id bob uses answers exactly what naming a new one does (nothing to probe)
    fresh = f"conv-{uuid.uuid4()}"
    probe = bob.post("/me/activity", json_body={"items": [said(shared, "x", 7), said(fresh, "x", 7)]})
    assert probe.status == 200 and probe.json == {"received": 2, "recorded": 2}
    # And each has a memory of its own conversation only
    keys = [ConversationKey(uuid.UUID(u.user_id), shared) for u in (alice, bob)]
    assert stack.worker(batch_event(keys)) == {"batchItemFailures": []}
    mine, theirs = (stack.memory(k) for k in keys)
    assert mine is not None and theirs is not None
    assert mine[0]["learned_about_user"] == ["I prefer tea."] and theirs[0]["learned_about_user"] == ["I live in Oslo."]
    # And each export holds only its own conversation of that id
    [hers] = alice.get("/me/export").json["conversations"]
    assert hers["conversation_id"] == shared and [m["text"] for m in hers["messages"]] == ["I prefer tea.", "Hi."]
    his = {
        c["conversation_id"]: [m["text"] for m in c["messages"]] for c in bob.get("/me/export").json["conversations"]
    }
    assert his == {shared: ["I live in Oslo.", "x"], fresh: ["x"]}
    # And erasing bob leaves alice's conversation whole
    assert bob.delete("/me").json["removed"]["conversations"] == 2
    assert [m["text"] for m in alice.get("/me/export").json["conversations"][0]["messages"]] == ["I prefer tea.", "Hi."]
    assert stack.memory(keys[0]) is not None and stack.memory(keys[1]) is None


# -- batch sizes -------------------------------------------------------------------------------------------------


def test_the_trigger_sizes_messages_within_the_setting_and_sqs_limit(stack):
    # Given more quiet conversations than fit one message, with long ids
    user = uuid.uuid4()
    ids = []
    for n in range(25):
        cid = f"{n:03d}-" + "ü" * 150 + str(uuid.uuid4())
        stack.conversations.record(
            [
                NewMessage(
                    user_id=user,
                    conversation_id=cid,
                    message_id="m",
                    role="user",
                    text="hi",
                    occurred_at=datetime(2002, 1, 1, tzinfo=UTC),
                    source="t",
                )
            ]
        )
        ids.append(cid)
    # When the trigger runs with 10 per message
    stack.fanout(TRIGGER_EVENT)
    keys = {ConversationKey(user, cid) for cid in ids}
    bodies = [b for b in stack.queued() if set(named(b)) & keys]
    # Then they come in messages of at most 10, each within SQS's limit, every conversation once
    assert all(len(named(b)) <= 10 for b in bodies)
    assert all(len(json.dumps(b).encode()) <= MAX_BATCH_MESSAGE_BYTES for b in bodies)
    found = [c for b in bodies for c in named(b) if c in keys]
    assert sorted(found) == sorted(keys)

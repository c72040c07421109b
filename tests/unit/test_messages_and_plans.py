"""Queue messages, fan-out plans, the rule-based summarizer, the fact floor, the SQS sender."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from user_memory.adapters.sqs import SqsSender
from user_memory.config import FanoutSettings, WorkerSettings
from user_memory.domain.fanout import plan_from_event as _plan
from user_memory.domain.fanout import refresh_bodies
from user_memory.domain.memory.document import validate_document
from user_memory.domain.messages import (
    MAX_ACTIVITY_PAYLOAD_BYTES,
    MAX_MESSAGE_BYTES,
    RecordActivity,
    RefreshUser,
    parse_message,
)
from user_memory.domain.model import Activity
from user_memory.domain.summary.facts import restore_facts
from user_memory.domain.summary.rules import RuleBasedSummarizer
from user_memory.errors import ConfigError, InvalidEvent, InvalidMessage, MessageTooLarge, SendFailed

from tests.conftest import EVENTS

U = uuid.UUID("0b7e6a2c-52a4-4c55-9d4e-3f0c1f6f0a01")
WINDOW = {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z"}


def plan_from_event(event):
    return _plan(event, window_hours=24)


def test_scheduled_event_ends_the_window_and_names_the_run():
    plan = plan_from_event(json.loads((EVENTS / "scheduled_event.json").read_text()))
    assert plan.window.end == datetime(2026, 11, 22, 0, 15, tzinfo=UTC)
    assert plan.window.start == datetime(2026, 11, 21, 0, 15, tzinfo=UTC)
    assert plan.run_key == "daily:2026-11-21"
    assert plan.user_ids is None


def test_manual_events_name_a_date_or_a_window_and_users():
    by_date = plan_from_event(json.loads((EVENTS / "fanout_manual_date.json").read_text()))
    assert (by_date.window.start, by_date.run_key) == (datetime(2026, 11, 21, tzinfo=UTC), "daily:2026-11-21")
    users = plan_from_event(json.loads((EVENTS / "fanout_manual_users.json").read_text()))
    assert users.run_key == "backfill:2026-11-21" and len(users.user_ids) == 2


@pytest.mark.parametrize(
    "event, message",
    [
        ({}, "exactly one of"),
        (
            {
                "date": "2026-11-21",
                "window": {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z"},
            },
            "exactly one of",
        ),
        ({"date": "yesterday"}, "manual fan-out request: date"),
        ({"window": {"start": "2026-11-22T00:00:00Z", "end": "2026-11-21T00:00:00Z"}}, "after its start"),
        ({"window": {"start": "2026-11-21T00:00:00", "end": "2026-11-22T00:00:00"}}, "needs a time zone"),
        ({"detail-type": "Scheduled Event"}, "scheduled event: time: Field required"),
        ({"detail-type": "Something Else", "time": "2026-11-22T00:15:00Z"}, "scheduled event: detail-type"),
        ({"dates": "2026-11-21"}, "dates: Extra inputs"),
        ({"date": "2026-11-21", "user_ids": ["not-a-uuid"]}, "user_ids.0"),
        ([], "must be a JSON object"),
        ("2026-11-21", "must be a JSON object"),
        (None, "got NoneType"),
        (42, "got int"),
    ],
)
def test_a_malformed_fanout_event_of_any_shape_gets_a_typed_error_naming_the_problem(event, message):
    # Given an event of the wrong shape / When it is planned / Then InvalidEvent names what is wrong
    with pytest.raises(InvalidEvent, match=message):
        plan_from_event(event)


def test_messages_parse_by_type():
    refresh = parse_message(
        json.dumps(
            {
                "type": "refresh_user",
                "user_ids": [str(U)],
                "run_key": "daily:x",
                "window": {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z"},
            }
        )
    )
    assert isinstance(refresh, RefreshUser) and refresh.user_ids == [U]
    activity = parse_message(
        json.dumps(
            {
                "type": "record_activity",
                "activities": [
                    {
                        "user_id": str(U),
                        "occurred_at": "2026-11-21T10:00:00+01:00",
                        "kind": "session",
                        "source": "chat",
                        "external_id": "1",
                    }
                ],
            }
        )
    )
    assert isinstance(activity, RecordActivity)


@pytest.mark.parametrize(
    "body, message",
    [
        ("not json", "invalid message"),
        ('{"type": "delete_everything"}', "type"),
        (
            '{"type": "refresh_user", "user_ids": [], "run_key": "k", '
            '"window": {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z"}}',
            "user_ids",
        ),
        (
            '{"type": "refresh_user", "user_ids": ["nope"], "run_key": "k", '
            '"window": {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z"}}',
            "user_ids",
        ),
        (
            '{"type": "record_activity", "activities": [{"user_id": "0b7e6a2c-52a4-4c55-9d4e-3f0c1f6f0a01"}]}',
            "occurred_at",
        ),
    ],
)
def test_malformed_messages_raise_invalid_message(body, message):
    with pytest.raises(InvalidMessage, match=message):
        parse_message(body)


def test_a_body_over_the_size_limit_is_refused_before_parsing():
    # Given a body one byte over SQS's maximum
    body = '{"type": "record_activity", "pad": "' + "x" * MAX_MESSAGE_BYTES + '"}'
    # Then it fails as MessageTooLarge, naming the size
    with pytest.raises(MessageTooLarge, match="over the limit of 262,144"):
        parse_message(body)


def test_an_activity_payload_over_its_limit_names_the_activity():
    # Given the second of two activities carries a payload over the limit
    small = {"user_id": str(U), "occurred_at": "2026-11-21T10:00:00Z", "kind": "k", "source": "s", "external_id": "1"}
    big = {**small, "external_id": "2", "payload": {"text": "x" * MAX_ACTIVITY_PAYLOAD_BYTES}}
    # Then the message is refused and the error points at activities.1.payload
    with pytest.raises(InvalidMessage, match=r"activities\.1\.payload: payload is [\d,]+ bytes"):
        parse_message(json.dumps({"type": "record_activity", "activities": [small, big]}))


@pytest.mark.parametrize(
    "kind, payload",
    [
        ("forget_part", {}),
        ("forget_part", {"part_id": ""}),
        ("forget_part", {"part_id": "   "}),
        ("forget_part", {"part_id": 7}),
        ("forget_request", {"text": "delete every part and the safety notes"}),
    ],
)
def test_a_forget_request_that_names_no_part_is_refused_at_the_queue(kind, payload):
    # Given a record_activity message whose second activity is a forget request naming no part
    ok = {
        "user_id": str(U),
        "occurred_at": "2026-11-21T10:00:00Z",
        "kind": "session",
        "source": "s",
        "external_id": "1",
    }
    vague = {**ok, "kind": kind, "payload": payload, "external_id": "2"}
    # Then the message is refused, naming the activity and the rule (never the text)
    with pytest.raises(InvalidMessage, match=r"activities\.1: .*must name the part to forget") as info:
        parse_message(json.dumps({"type": "record_activity", "activities": [ok, vague]}))
    assert "safety notes" not in str(info.value)


def test_the_queue_takes_a_reset_and_a_forget_request_that_names_its_part():
    base = {"user_id": str(U), "occurred_at": "2026-11-21T10:00:00Z", "source": "app"}
    message = parse_message(
        json.dumps(
            {
                "type": "record_activity",
                "activities": [
                    {**base, "kind": "memory_reset", "external_id": "1"},
                    {**base, "kind": "forget_request", "payload": {"part_id": "critic"}, "external_id": "2"},
                ],
            }
        )
    )
    assert isinstance(message, RecordActivity) and [a.kind for a in message.activities] == [
        "memory_reset",
        "forget_request",
    ]


def test_validation_errors_never_echo_the_input():
    # Given a message whose invalid field holds personal text
    body = json.dumps({"type": "refresh_user", "user_ids": ["my secret diary entry"], "run_key": "k", "window": WINDOW})
    # Then the error names the field but does not repeat the text
    with pytest.raises(InvalidMessage) as info:
        parse_message(body)
    assert "user_ids.0" in str(info.value) and "secret diary" not in str(info.value)


def test_refresh_bodies_group_users_per_message():
    plan = plan_from_event({"date": "2026-11-21"})
    users = [uuid.uuid4() for _ in range(5)]
    bodies = refresh_bodies(users, plan, users_per_message=2)
    assert [len(json.loads(b)["user_ids"]) for b in bodies] == [2, 2, 1]
    assert all(isinstance(parse_message(b), RefreshUser) for b in bodies)


class FlakySqs:
    """In-memory SQS that fails chosen entries a number of times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.received: list[str] = []
        self.calls = 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict]) -> dict:  # boto3's names
        self.calls += 1
        assert len(Entries) <= 10
        ok, failed = [], []
        for e in Entries:
            if e["Id"] == "0" and self.failures > 0:
                self.failures -= 1
                failed.append({"Id": e["Id"], "SenderFault": False, "Code": "InternalError"})
            else:
                self.received.append(e["MessageBody"])
                ok.append({"Id": e["Id"], "MessageId": e["Id"]})
        return {"Successful": ok, "Failed": failed}


def test_sender_batches_by_ten_and_retries_failed_entries():
    sqs = FlakySqs(failures=2)
    sender = SqsSender("q", sqs, sleep=lambda _s: None)
    assert sender.send([f"m{i}" for i in range(23)]) == 23
    assert sorted(sqs.received) == sorted(f"m{i}" for i in range(23))
    assert sqs.calls == 3 + 2


def test_sender_gives_up_after_bounded_attempts():
    with pytest.raises(SendFailed, match="1 message"):
        SqsSender("q", FlakySqs(failures=99), sleep=lambda _s: None).send(["a", "b"])


def _act(kind: str, **payload) -> Activity:
    return Activity(
        user_id=U,
        occurred_at=datetime(2026, 11, 21, 10, tzinfo=UTC),
        kind=kind,
        payload=payload,
        source="t",
        external_id=kind,
    )


def test_rule_based_summarizer_folds_structured_activity_deterministically():
    acts = [
        _act("part_named", part_id="planner", name="Planner"),
        _act("goal_set", part_id="planner", goal="keep a weekly plan"),
        _act("trigger_noted", trigger="deadlines", desired_outcome="rest", related_parts=["planner", "ghost"]),
        _act("safety_note", note="trouble sleeping"),
        _act("session", minutes=20),
    ]
    first = RuleBasedSummarizer().summarize({}, acts).document
    assert first == RuleBasedSummarizer().summarize({}, acts).document
    doc = validate_document(first)
    assert doc["parts"]["planner"]["goals"] == [{"goal": "keep a weekly plan"}]
    assert doc["triggers_and_goals"][0]["related_parts"] == ["planner"]
    assert "trouble sleeping" in doc["safety_notes"]
    assert "1 session" in doc["summary"]


def test_large_removals_are_restored_by_the_fact_floor_unless_asked():
    # Given memory with 6 parts and safety notes
    parts = {f"p{i}": {"name": f"P{i}", "status": "active", "goals": []} for i in range(6)}
    old = {"parts": parts, "safety_notes": "careful"}
    # When an update keeps 2 of the parts and clears the notes, and no activity asks for it
    floored = restore_facts(old, {"parts": {"p0": parts["p0"], "p1": parts["p1"]}, "safety_notes": ""}, [])
    # Then every part and the notes are back (not refused whole, as the share guardrail did), each recorded
    assert floored.document == old
    assert [r.path for r in floored.restored] == ["/parts/p2", "/parts/p3", "/parts/p4", "/parts/p5", "/safety_notes"]
    assert floored.restored[-1].why == "cleared without a forget request"
    # And with a memory reset in the activity, the update stands as it is
    wiped = {"parts": {}, "safety_notes": ""}
    assert restore_facts(old, wiped, [_act("memory_reset")]).document is wiped
    # And one forgotten part is allowed to go, the others still come back
    asked = restore_facts(old, {"parts": {}, "safety_notes": "careful"}, [_act("forget_part", part_id="p3")])
    assert sorted(asked.document["parts"]) == ["p0", "p1", "p2", "p4", "p5"]


def test_settings_pick_the_summarizer_and_refuse_an_unusable_openai_choice():
    assert WorkerSettings.from_env({}).summarizer_kind == "rules"
    assert WorkerSettings.from_env({"OPENAI_API_KEY": "k"}).summarizer_kind == "openai"
    assert WorkerSettings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}).summarizer_kind == "openai"
    assert WorkerSettings.from_env({"OPENAI_API_KEY": "k", "SUMMARIZER": "rules"}).summarizer_kind == "rules"
    with pytest.raises(ConfigError, match="needs OPENAI_API_KEY"):
        WorkerSettings.from_env({"SUMMARIZER": "openai"})
    with pytest.raises(ConfigError, match="CHECKPOINT_INTERVAL"):
        WorkerSettings.from_env({"CHECKPOINT_INTERVAL": "0"})


@pytest.mark.parametrize("value", ["0", "51", "ten"])
def test_an_llm_concurrency_outside_one_to_fifty_is_refused_at_start_by_name(value):
    assert WorkerSettings.from_env({}).llm_concurrency == 10
    assert WorkerSettings.from_env({"LLM_CONCURRENCY": "50"}).llm_concurrency == 50
    with pytest.raises(ConfigError, match="LLM_CONCURRENCY") as info:
        WorkerSettings.from_env({"LLM_CONCURRENCY": value})
    assert value not in str(info.value)  # named, never echoed


def test_a_rule_based_worker_for_a_schema_it_has_no_rules_for_is_refused_at_start():
    # Its summary would leave the document as it is and mark the activity summarized unread
    with pytest.raises(ConfigError, match="no rules for DOCUMENT_SCHEMA=tutor") as info:
        WorkerSettings.from_env({"DOCUMENT_SCHEMA": "tutor"})
    assert "\n" not in str(info.value)
    for schema in ("user_state", "companion"):
        assert WorkerSettings.from_env({"DOCUMENT_SCHEMA": schema}).summarizer_kind == "rules"


def test_settings_are_per_function():
    # The fan-out needs a queue; the worker does not (it re-sends failed conversations to one if given).
    with pytest.raises(ConfigError, match="QUEUE_URL: Field required"):
        FanoutSettings.from_env({})
    assert FanoutSettings.from_env({"QUEUE_URL": "q", "USERS_PER_MESSAGE": "7"}).users_per_message == 7
    assert WorkerSettings.from_env({}).queue_url is None  # optional: only conversation re-sends use it
    with pytest.raises(ConfigError, match="USERS_PER_MESSAGE"):
        FanoutSettings.from_env({"QUEUE_URL": "q", "USERS_PER_MESSAGE": "101"})


def test_the_worker_defaults_fit_its_timeout():
    s = WorkerSettings.from_env({"OPENAI_API_KEY": "k"})
    needed = s.openai_timeout_seconds * (s.openai_max_retries + 1) * s.summarizer_attempts + s.deadline_margin_ms / 1000
    assert needed <= s.lambda_timeout_seconds


@pytest.mark.parametrize(
    "env",
    [
        {"OPENAI_TIMEOUT_SECONDS": "60"},  # 60 x 2 x 2 + 15 > 120
        {"OPENAI_MAX_RETRIES": "4"},  # 25 x 5 x 2 + 15 > 120
        {"SUMMARIZER_ATTEMPTS": "3", "OPENAI_TIMEOUT_SECONDS": "40"},
        {"LAMBDA_TIMEOUT_SECONDS": "60"},
    ],
)
def test_settings_that_cannot_fit_the_function_timeout_are_refused_at_start(env):
    # Given an LLM time budget (timeout x tries x attempts + margin) over the function timeout
    # Then building the settings fails, naming the rule
    with pytest.raises(ConfigError, match="does not fit LAMBDA_TIMEOUT_SECONDS"):
        WorkerSettings.from_env({"OPENAI_API_KEY": "k", **env})


def test_a_schedule_more_often_than_daily_gets_a_run_key_per_window():
    # Given a 6-hour window schedule, Then two runs on the same day have different keys
    event = {"detail-type": "Scheduled Event", "time": "2026-11-21T06:15:00Z"}
    first = _plan(event, window_hours=6)
    second = _plan({**event, "time": "2026-11-21T12:15:00Z"}, window_hours=6)
    assert first.run_key != second.run_key and first.run_key.startswith("window:")
    assert _plan(event, window_hours=24).run_key == "daily:2026-11-20"


@pytest.mark.parametrize(
    "event", [{"date": "9999-12-31"}, {"detail-type": "Scheduled Event", "time": "0001-01-01T05:00:00Z"}]
)
def test_dates_at_the_edge_of_the_calendar_are_a_typed_error(event):
    with pytest.raises(InvalidEvent, match="between 1900-01-01 and 2999-12-31"):
        plan_from_event(event)

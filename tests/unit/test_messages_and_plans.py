"""Queue messages, fan-out plans, the rule-based summarizer, the guardrail, the SQS sender."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from user_memory.activity import Activity
from user_memory.document import validate_document
from user_memory.errors import GuardrailRefused, InvalidMessage
from user_memory.fanout import SendFailed, SqsSender, plan_from_event, refresh_bodies
from user_memory.messages import RecordActivity, RefreshUser, parse_message
from user_memory.pipeline import PipelineConfig, check_guardrail
from user_memory.summarizer.rules import RuleBasedSummarizer

from tests.conftest import EVENTS

U = uuid.UUID("0b7e6a2c-52a4-4c55-9d4e-3f0c1f6f0a01")


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
        ({"date": "yesterday"}, "neither"),
        ({"window": {"start": "2026-11-22T00:00:00Z", "end": "2026-11-21T00:00:00Z"}}, "after its start"),
        ({"window": {"start": "2026-11-21T00:00:00", "end": "2026-11-22T00:00:00"}}, "timezone"),
        ({"detail-type": "Scheduled Event"}, "neither"),
    ],
)
def test_bad_fanout_events_are_refused_clearly(event, message):
    with pytest.raises(InvalidMessage, match=message):
        plan_from_event(event)


def test_messages_parse_by_type():
    refresh = parse_message(
        json.dumps(
            {
                "type": "refresh_user",
                "user_id": str(U),
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

    def send_message_batch(self, QueueUrl: str, Entries: list[dict]) -> dict:  # noqa: N803 - boto3's names
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
    return Activity(U, datetime(2026, 11, 21, 10, tzinfo=UTC), kind, payload, "t", kind)


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


def test_guardrail_refuses_large_removals_unless_asked():
    cfg = PipelineConfig()
    old = {"parts": {f"p{i}": {} for i in range(6)}, "safety_notes": "careful"}
    with pytest.raises(GuardrailRefused, match="remove 4 of 6 parts"):
        check_guardrail(old, {"parts": {"p0": {}, "p1": {}}, "safety_notes": "careful"}, [], cfg)
    with pytest.raises(GuardrailRefused, match="safety notes"):
        check_guardrail(old, {**old, "safety_notes": ""}, [], cfg)
    check_guardrail(old, {"parts": {}, "safety_notes": ""}, [_act("memory_reset")], cfg)
    check_guardrail(old, {**old, "parts": {f"p{i}": {} for i in range(4)}}, [], cfg)


def test_settings_pick_the_summarizer_and_refuse_an_unusable_openai_choice():
    from user_memory.config import ConfigError, Settings

    assert Settings.from_env({}).summarizer_kind == "rules"
    assert Settings.from_env({"OPENAI_API_KEY": "k"}).summarizer_kind == "openai"
    assert Settings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}).summarizer_kind == "openai"
    assert Settings.from_env({"OPENAI_API_KEY": "k", "SUMMARIZER": "rules"}).summarizer_kind == "rules"
    with pytest.raises(ConfigError, match="needs OPENAI_API_KEY"):
        Settings.from_env({"SUMMARIZER": "openai"})
    with pytest.raises(ConfigError, match="CHECKPOINT_INTERVAL"):
        Settings.from_env({"CHECKPOINT_INTERVAL": "0"})

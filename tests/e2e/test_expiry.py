"""Expiry a deployment asks for (EXPIRE_EVENTS_AFTER_DAYS, EXPIRE_TODOS_AFTER_DAYS), through the
real handlers: the prompt leaves out what expired at once, and the retention function removes it
as a version of its own (source `retention`, the elements in its provenance), once a day."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from user_memory.config import RetentionSettings
from user_memory.runtime import build_retention
from user_memory_functions.retention.app import handler as retention_handler
from user_memory_local.poller import FakeLambdaContext

from tests.e2e.helpers import new_client, ok

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

EVENT = json.loads((Path(__file__).resolve().parents[1] / "events/retention_scheduled_event.json").read_text())
POLICY = {"EXPIRE_EVENTS_AFTER_DAYS": "7", "EXPIRE_TODOS_AFTER_DAYS": "3"}


def iso(days_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days_ago)).replace(microsecond=0).isoformat()


def test_expired_events_and_todos_leave_the_prompt_and_the_retention_job_records_their_removal(
    make_api: Any, pool: Any, database_url: str, aws_env: None
) -> None:
    # Given a companion deployment that expires events 7 days after they end, to-dos 3 days after done
    api = make_api("companion", **{k.lower(): v for k, v in POLICY.items()})
    user = new_client(api)
    ok(
        user.post(
            "/me/events", json_body={"id": "old", "summary": "Dentist long ago", "start": iso(10), "end": iso(9.9)}
        )
    )
    ok(user.post("/me/events", json_body={"id": "recent", "summary": "Concert last night", "start": iso(1)}))
    weekly_done = {"id": "weekly", "summary": "Ended weekly class", "start": iso(60),
                   "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=3"]}  # fmt: skip
    ok(user.post("/me/events", json_body=weekly_done))
    forever = {"id": "forever", "summary": "Weekly call", "start": iso(60), "recurrence": ["RRULE:FREQ=WEEKLY"]}
    ok(user.post("/me/events", json_body=forever))
    ok(user.post("/me/todos", json_body={"id": "done-old", "text": "Renew passport", "status": "done",
                                         "completed_at": iso(5)}))  # fmt: skip
    ok(user.post("/me/todos", json_body={"id": "done-new", "text": "Buy milk", "status": "done",
                                         "completed_at": iso(1)}))  # fmt: skip
    ok(user.post("/me/todos", json_body={"id": "open", "text": "Call mum"}))
    before = ok(user.get("/me/memory"))["version"]
    # When the prompt is rendered, before any retention run
    prompt = ok(user.get("/me/memory/prompt", query={"budget_tokens": 4000}))["text"]
    # Then what expired is not in it, and the rest is
    for gone in ("Dentist long ago", "Ended weekly class", "Renew passport"):
        assert gone not in prompt
    for kept in ("Concert last night", "Weekly call", "Call mum"):  # (done to-dos are never rendered)
        assert kept in prompt
    # When the retention function runs (twice: a rerun the same day writes nothing new)
    services = build_retention(RetentionSettings.from_env({**POLICY, "DOCUMENT_SCHEMA": "companion",
                                                          "DATABASE_URL": database_url}), pool=pool)  # fmt: skip
    first = retention_handler(EVENT, FakeLambdaContext(function_name="retention"), services=services)
    second = retention_handler(EVENT, FakeLambdaContext(function_name="retention"), services=services)
    # Then it removed exactly the expired elements as one version, source retention, named in provenance
    assert first["expired_elements"] >= 3 and second["expired_users"] == 0
    memory = ok(user.get("/me/memory"))
    assert memory["version"] == before + 1 and memory["source"] == "retention"
    document = memory["document"]
    assert sorted(document["events"]) == ["forever", "recent"]
    assert sorted(document["todos"]) == ["done-new", "open"]
    history = ok(user.get("/me/memory/history", query={"limit": 1}))["items"][0]
    assert history["source"] == "retention"
    with pool.connection() as conn:
        provenance = conn.execute(
            "SELECT provenance FROM user_memory_snapshots WHERE user_id = %s AND version = %s",
            (user.user_id, before + 1),
        ).fetchone()[0]
    assert sorted((e["collection"], e["id"]) for e in provenance["expired"]) == [
        ("events", "old"), ("events", "weekly"), ("todos", "done-old"),
    ]  # fmt: skip
    # And the index the companion queries read no longer finds them
    occurrences = ok(user.get("/me/events", query={"from": iso(30), "to": iso(-1)}))["items"]
    assert "old" not in json.dumps(occurrences) and "recent" in json.dumps(occurrences)


def test_without_an_expiry_nothing_is_removed_or_hidden(make_api: Any, pool: Any, database_url: str, aws_env: None):
    api = make_api("companion")
    user = new_client(api)
    ok(user.post("/me/events", json_body={"id": "old", "summary": "Dentist long ago", "start": iso(400)}))
    assert "Dentist long ago" in ok(user.get("/me/memory/prompt", query={"budget_tokens": 4000}))["text"]
    services = build_retention(
        RetentionSettings.from_env({"DOCUMENT_SCHEMA": "companion", "DATABASE_URL": database_url}), pool=pool
    )
    report = retention_handler(EVENT, FakeLambdaContext(function_name="retention"), services=services)
    assert report["expired_elements"] == 0
    assert "old" in ok(user.get("/me/memory"))["document"]["events"]

"""The daily summary of a companion memory through the real `openai` client (edit mode only)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.openai_summarizer import OpenAISummarizer
from user_memory.config import WorkerSettings
from user_memory.domain.memory.document import empty_document
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, RunStatus, Window
from user_memory.domain.summary.pipeline import refresh_user
from user_memory.errors import ConfigError

from tests.fake_openai import edit, edits_completion, fake_openai_server

USER = uuid.uuid4()
DAY = datetime(2026, 11, 21, tzinfo=UTC)


def companion_editor(url: str) -> OpenAISummarizer:
    settings = WorkerSettings(openai_base_url=url, document_schema="companion", openai_max_retries=0)
    return OpenAISummarizer.from_settings(settings)


def test_a_companion_day_is_summarized_as_edits_of_its_elements():
    # Given a companion memory with one to-do, and a day's activity (a conversation's memory)
    store = MemoryStore(InMemoryRecorder(activity := InMemoryActivity()))
    doc = empty_document("companion")
    doc["todos"]["t1"] = {"id": "t1", "text": "Renew passport"}
    store.append(USER, doc, expected_version=0, source="seed")
    activity.record(
        [
            Activity(
                user_id=USER,
                occurred_at=DAY.replace(hour=10),
                kind="conversation_memory",
                payload={"conversation_id": "c1", "memory": {"decisions": ["book the dentist for Friday"]}},
                source="conversations",
                external_id="c1:4",
            )
        ]
    )
    # When the model answers with edits in the companion's terms
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/todos/t2", {"id": "t2", "text": "Book the dentist", "due_date": "2026-11-27"},
                     reason="conversation c1 decided it"),
                edit("replace", "/current_state/mood", "decisive", reason="conversation c1"),
            )
        )  # fmt: skip
        out = refresh_user(
            USER,
            Window.day(DAY.date()),
            "daily:2026-11-21",
            store=store,
            activity=activity,
            summarizer=companion_editor(url),
            cfg=WorkerSettings(document_schema="companion").pipeline(),
        )
        request = fake.requests[0]["body"]
    # Then the version holds the new to-do and the mood, the old to-do untouched
    assert (out.status, out.edits_applied) == (RunStatus.WRITTEN, 2)
    head = store.head(USER).document
    assert head["todos"]["t2"]["due_date"] == "2026-11-27" and head["todos"]["t1"]["text"] == "Renew passport"
    assert head["current_state"]["mood"] == "decisive"
    # And the model was given the companion's instructions and the document as stored
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "AI companion" in system and "/todos/<id>" in system
    memory = json.loads(user.split("<memory>\n", 1)[1].split("\n</memory>", 1)[0])
    assert memory["todos"]["t1"]["text"] == "Renew passport"
    assert "book the dentist for Friday" in user


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"DOCUMENT_SCHEMA": "companion", "SUMMARY_MODE": "document"}, "SUMMARY_MODE=document"),
        ({"DOCUMENT_SCHEMA": "tutor"}, "no instructions for DOCUMENT_SCHEMA=tutor"),
    ],
)
def test_an_openai_summary_the_schema_has_no_instructions_for_is_refused_at_start(env, fragment):
    # Given an OpenAI endpoint and a schema/mode pair the summarizer cannot serve
    with pytest.raises(ConfigError, match=fragment):
        WorkerSettings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9", **env})

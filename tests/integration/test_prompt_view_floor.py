"""The fact floor with the prompt's view (the day's parts in full, an outline of the rest), in both
summary modes, through the real `openai` client against a local OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.adapters.openai_summarizer import OpenAISummarizer
from user_memory.config import WorkerSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity, RunStatus, Window
from user_memory.domain.summary.pipeline import refresh_user

from tests.fake_openai import completion, edit, edits_completion, fake_openai_server

DAY = Window.day(datetime(2026, 11, 21, tzinfo=UTC).date())
RUN = "daily:2026-11-21"


def part(name: str, *goals: str) -> dict:
    return {
        "name": name,
        "status": "active",
        "recency_score": 0.5,
        "influence_score": 0.3,
        "goals": [{"goal": g} for g in goals],
    }


MEMORY = {
    "summary": "Works with Critic, Planner and Worrier.",
    "parts": {
        "critic": part("Critic", "be kinder"),
        "planner": part("Planner", "plan the week"),
        "worrier": part("Worrier", "sleep before midnight"),
    },
    "triggers_and_goals": [
        {"trigger": "deadlines", "desired_outcome": "rest", "related_parts": ["planner"]},
        {"trigger": "late-night scrolling", "desired_outcome": "sleep", "related_parts": ["worrier"]},
    ],
    "safety_notes": "never mention calories",
}


class Day:
    """One user with MEMORY and a day's activity, summarized through the real client."""

    def __init__(self, *acts: tuple[str, dict]) -> None:
        self.user = uuid.uuid4()
        self.activity = InMemoryActivity()
        self.store = MemoryStore(InMemoryRecorder(self.activity))
        self.store.append(self.user, MEMORY, expected_version=0, source="seed")
        self.activity.record(
            [
                Activity(
                    user_id=self.user,
                    occurred_at=DAY.start + timedelta(hours=9, minutes=i),
                    kind=kind,
                    payload=payload,
                    source="chat",
                    external_id=str(i),
                )
                for i, (kind, payload) in enumerate(acts)
            ]
        )

    def run(self, url: str, mode: str):  # type: ignore[no-untyped-def]
        settings = WorkerSettings.from_env(
            {}, openai_base_url=url, openai_api_key="test-key", summary_mode=mode, summarizer_attempts=2
        )
        out = refresh_user(
            self.user,
            DAY,
            RUN,
            store=self.store,
            activity=self.activity,
            summarizer=OpenAISummarizer.from_settings(settings),
            cfg=settings.pipeline(),
        )
        head = self.store.head(self.user)
        provenance = self.store.history(self.user, limit=1)[0].provenance
        return out, head.document, provenance


def shown(fake, i: int = 0) -> dict:  # type: ignore[no-untyped-def]
    """The memory block the model was shown, as JSON."""
    return json.loads(fake.user_prompt(i).split("<memory>\n", 1)[1].split("\n</memory>", 1)[0])


def test_document_mode_an_answer_of_the_shown_part_alone_keeps_every_outlined_fact_without_a_flag():
    # Given a day setting a goal on the planner
    day = Day(("goal_set", {"part_id": "planner", "goal": "rest on Sundays"}))
    with fake_openai_server() as (fake, url):
        # When the model answers the document it was shown, updated (the planner only)
        answer = {
            "summary": MEMORY["summary"],
            "parts": [{"id": "planner", **part("Planner", "plan the week", "rest on Sundays")}],
            "triggers_and_goals": [],
            "safety_notes": MEMORY["safety_notes"],
        }
        fake.reply(completion(json.dumps(answer)))
        out, doc, provenance = day.run(url, "document")
    # Then the model saw only the planner in full
    assert [p["id"] for p in shown(fake)["parts"]] == ["planner"]
    # And the written version keeps every other part and trigger as it was, with nothing restored
    assert out.status is RunStatus.WRITTEN and len(fake.requests) == 1
    assert doc["parts"]["critic"] == {**MEMORY["parts"]["critic"], "recency_score": 0.45}  # the daily decay
    assert doc["parts"]["worrier"]["goals"] == [{"goal": "sleep before midnight"}]
    assert doc["parts"]["planner"]["goals"] == [{"goal": "plan the week"}, {"goal": "rest on Sundays"}]
    assert doc["triggers_and_goals"] == MEMORY["triggers_and_goals"]
    assert provenance["restored"] == [] and provenance["filled"] == []


def test_document_mode_a_shown_part_the_answer_leaves_out_is_restored_and_flagged():
    day = Day(("goal_set", {"part_id": "planner", "goal": "rest on Sundays"}))
    with fake_openai_server() as (fake, url):
        # When the answer drops the planner it was shown (no forget request asks for it)
        answer = {"summary": "s", "parts": [], "triggers_and_goals": [], "safety_notes": MEMORY["safety_notes"]}
        fake.reply(completion(json.dumps(answer)))
        fake.reply(completion(json.dumps(answer)))
        out, doc, provenance = day.run(url, "document")
    # Then the planner is back with its goals, and the version says so
    assert doc["parts"]["planner"]["goals"][0] == {"goal": "plan the week"}
    assert {"goal": "rest on Sundays"} in doc["parts"]["planner"]["goals"]
    assert any(r["path"].startswith("/parts/planner") for r in provenance["restored"])
    assert set(doc["parts"]) == {"critic", "planner", "worrier"}


def test_edit_mode_an_outlined_part_is_edited_by_its_id():
    # Given a day naming the planner only
    day = Day(("session", {"minutes": 5}), ("goal_set", {"part_id": "planner", "goal": "rest on Sundays"}))
    with fake_openai_server() as (fake, url):
        # When the model edits the worrier, which it saw only in the outline
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner/goals/-", {"goal": "rest on Sundays"}, reason="goal_set"),
                edit("replace", "/parts/worrier/status", "quiet", reason="no worry today"),
            )
        )
        out, doc, provenance = day.run(url, "edit")
    assert "worrier: Worrier" in fake.user_prompt()
    # Then the edits applied to the whole document
    assert (out.status, out.edits_applied, out.edits_refused) == (RunStatus.WRITTEN, 2, 0)
    assert doc["parts"]["worrier"] == {**MEMORY["parts"]["worrier"], "status": "quiet", "recency_score": 0.45}
    assert doc["parts"]["critic"]["goals"] == [{"goal": "be kinder"}]


def test_edit_mode_removing_an_outlined_part_without_a_request_is_refused_and_flagged():
    day = Day(("goal_set", {"part_id": "planner", "goal": "rest on Sundays"}))
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner/goals/-", {"goal": "rest on Sundays"}, reason="goal_set"),
                edit("remove", "/parts/critic", reason="has not come up"),
            )
        )
        out, doc, provenance = day.run(url, "edit")
    assert (out.edits_applied, out.edits_refused) == (1, 1)
    assert doc["parts"]["critic"]["goals"] == [{"goal": "be kinder"}]
    assert [r["path"] for r in provenance["refused"]] == ["/parts/critic"]

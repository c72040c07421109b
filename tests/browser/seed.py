"""Users for the console's tests, written the ways production writes them: nightly-run versions
with provenance through the store (the service's rights), everything else through the HTTP API
as the user (companion elements, key-value entries, conversation messages), and a conversation
memory through the conversation store."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool
from user_memory.adapters.conversations import PostgresConversations
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.conversations.model import ConversationKey
from user_memory.domain.memory.document import empty_document
from user_memory.domain.memory.repository import MemoryStore

HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">'
HOSTILE_SCRIPT = "<script>window.__pwned=2</script>"
MODEL = "gpt-4o-mini-2024-07-18"


def call(base: str, method: str, path: str, token: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    all_headers = {"Authorization": f"Bearer {token}", **headers}
    if body is not None:
        all_headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(base + path, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        text = err.read().decode()
        return err.code, json.loads(text) if text else None


def ok(answer: tuple[int, Any]) -> Any:
    status, body = answer
    assert status == 200, body
    return body


def nightly_provenance(
    edits: list[tuple[str, str, str]], refused: list[tuple[str, str, str, str]], tokens: int
) -> dict:
    return {
        "mode": "edit",
        "model": MODEL,
        "edits": [{"op": op, "path": path, "reason": reason} for op, path, reason in edits],
        "refused": [{"op": op, "path": path, "reason": reason, "why": why} for op, path, reason, why in refused],
        "restored": [],
        "filled": [],
        "unreflected": [],
        "kept_human_edits": [],
        "ignored_requests": [],
        "recency_set": 0,
        "activities": 7,
        "activity_cut": 0,
        "activity_duplicates": 0,
        "calls": 1,
        "prompt_tokens": tokens - 200,
        "completion_tokens": 200,
        "cost_usd": round(((tokens - 200) * 0.15 + 200 * 0.60) / 1e6, 8),  # gpt-4o-mini's list prices
    }


def nightly_runs(pool: ConnectionPool, user: str) -> None:
    """Three nightly-run versions with provenance (the worker's way: the store, the service's rights)."""
    store = MemoryStore(PostgresRecorder(pool))
    doc = empty_document("companion")
    doc["basic_info"]["name"] = "Ada"
    doc["current_state"]["mood"] = "curious"
    store.append(
        user,
        doc,
        expected_version=0,
        source=f"daily summary 2026-11-20, 7 activities, model {MODEL}",
        provenance=nightly_provenance(
            [
                ("replace", "/basic_info/name", "she introduced herself as Ada"),
                ("replace", "/current_state/mood", "asked many questions"),
            ],
            [],
            1800,
        ),
    )
    doc = copy.deepcopy(doc)
    doc["current_state"]["skills"] = ["Python", "SQL"]
    doc["current_state"]["focus_areas"] = ["learning Rust"]
    store.append(
        user,
        doc,
        expected_version=1,
        source=f"daily summary 2026-11-21, 7 activities, model {MODEL}",
        provenance=nightly_provenance(
            [
                ("add", "/current_state/skills", "mentioned shipping Python and SQL at work"),
                ("add", "/current_state/focus_areas", "started the Rust book"),
            ],
            [("remove", "/basic_info/name", "the name seemed stale", "removes a protected fact without a request")],
            2400,
        ),
    )
    doc = copy.deepcopy(doc)
    doc["current_state"]["mood"] = "tired but motivated"
    store.append(
        user,
        doc,
        expected_version=2,
        source=f"daily summary 2026-11-22, 7 activities, model {MODEL}",
        provenance=nightly_provenance(
            [("replace", "/current_state/mood", "said the week was long but the Rust chapter clicked")], [], 2100
        ),
    )


def companion(base: str, token: str, today: datetime) -> None:
    """A goal with progress, an overdue and a due to-do, a weekly recurring and a one-off event."""
    monday = (today - timedelta(days=today.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    ok(
        call(
            base,
            "POST",
            "/me/goals",
            token,
            {
                "id": "rust",
                "title": "Read the Rust book",
                "target_date": (today + timedelta(days=30)).date().isoformat(),
                "progress": [{"at": (today - timedelta(days=2)).isoformat(), "percent": 40, "note": "chapter 8"}],
            },
        )
    )
    ok(
        call(
            base,
            "POST",
            "/me/todos",
            token,
            {"id": "taxes", "text": "File the tax return", "due_date": (today - timedelta(days=3)).isoformat()},
        )
    )
    ok(call(base, "POST", "/me/todos", token, {"id": "call-mum", "text": "Call mum", "due_date": today.isoformat()}))
    ok(
        call(
            base,
            "POST",
            "/me/events",
            token,
            {
                "id": "standup",
                "summary": "Team stand-up",
                "start": (monday + timedelta(hours=9)).isoformat(),
                "end": (monday + timedelta(hours=9, minutes=15)).isoformat(),
                "recurrence": ["RRULE:FREQ=DAILY;COUNT=60"],
            },
        )
    )
    ok(
        call(
            base,
            "POST",
            "/me/events",
            token,
            {
                "id": "dentist",
                "summary": "Dentist",
                "start": (monday + timedelta(days=2, hours=14)).isoformat(),
            },
        )
    )


def kv(base: str, token: str) -> None:
    ok(call(base, "PUT", "/me/kv/preferences/theme", token, {"value": "dark"}))
    ok(call(base, "PUT", "/me/kv/preferences/hostile", token, {"value": HOSTILE_SCRIPT}))
    ok(call(base, "PUT", "/me/kv/session/cart", token, {"value": {"items": 2}, "ttl_seconds": 3600}))


def conversation(base: str, token: str, pool: ConnectionPool, user: str) -> None:
    """A conversation of two messages, and its memory (as the worker writes it)."""
    at = datetime.now(UTC) - timedelta(hours=3)
    items = [
        {
            "occurred_at": (at + timedelta(minutes=n)).isoformat(),
            "kind": "message",
            "source": "chat",
            "external_id": f"m{n}",
            "payload": {"conversation_id": "trip-planning", "role": role, "text": text},
        }
        for n, (role, text) in enumerate([("user", "Planning a trip to Lisbon"), ("assistant", "Lovely; when?")])
    ]
    ok(call(base, "POST", "/me/activity", token, {"items": items}))
    store = PostgresConversations(pool)
    key = ConversationKey(user_id=uuid.UUID(user), conversation_id="trip-planning")
    state = store.state(key)
    assert state is not None
    last = store.messages(key, after_seq=0, through_seq=state.messages, limit=10)[-1]
    memory = {
        "discussed": ["a trip to Lisbon", HOSTILE_SCRIPT],
        "learned_about_user": ["likes city breaks"],
        "decisions": [],
        "open_loops": ["dates not chosen"],
        "tone": "warm",
    }
    assert store.save_memory(state, memory, last, model=MODEL) == "written"


def api_edit(base: str, token: str, version: int, name: str) -> int:
    status, body = call(
        base,
        "PATCH",
        "/me/memory",
        token,
        {"basic_info": {"name": name}},
        **{"Content-Type": "application/merge-patch+json", "If-Match": f'"{version}"'},
    )
    assert status == 200, body
    return int(body["version"])

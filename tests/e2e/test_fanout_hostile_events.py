"""Hostile fan-out events through the real handler: an event either plans a run whose every queued
message the worker takes, or is refused as InvalidEvent, logged and counted; never another error
(EventBridge would retry it into the schedule's DLQ with a reason nobody can act on)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from user_memory.domain.messages import parse_message
from user_memory.errors import InvalidEvent

from tests.conftest import EVENTS

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

SAMPLES = [json.loads((EVENTS / name).read_text()) for name in ("scheduled_event.json", "fanout_manual_date.json")]
USERS = json.loads((EVENTS / "fanout_manual_users.json").read_text())

texts = st.text(max_size=30) | st.sampled_from(["", "\x00", "0001-01-01", "9999-12-31", "9999-12-31T23:59:59Z"])
instants = st.sampled_from(
    [
        "2026-11-21T00:00:00Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "2026-11-21T00:00:00",
        "1899-12-31T00:00:00Z",
    ]
) | st.datetimes().map(lambda d: d.isoformat())
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(texts, c, max_size=3),
    max_leaves=8,
)
windows = st.fixed_dictionaries({"start": instants, "end": instants}) | json_values
hostile_fields = {
    "time": instants | json_values,
    "date": st.dates().map(str) | texts | json_values,
    "window": windows,
    "run_key": texts | st.text(min_size=150, max_size=400) | json_values,
    "user_ids": st.lists(st.uuids().map(str), max_size=250) | st.lists(texts, max_size=3) | json_values,
}


@st.composite
def events(draw: Any) -> Any:
    base = dict(draw(st.sampled_from([*SAMPLES, USERS])))
    for name in draw(st.lists(st.sampled_from(sorted(hostile_fields)), max_size=3, unique=True)):
        if draw(st.booleans()):
            base[name] = draw(hostile_fields[name])
        else:
            base.pop(name, None)
    return draw(st.just(base) | json_values) if draw(st.integers(0, 9)) == 0 else base


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fanout_event=events())
def test_a_fanout_event_plans_messages_the_worker_takes_or_is_refused_as_invalid(stack, logs, fanout_event):
    logs.records.clear()  # one example's records only
    try:
        bodies = stack.fanned_out(fanout_event)
    except InvalidEvent:
        [line] = logs.named("fan-out failed")
        assert line["error"] == "InvalidEvent" and line["reason"]
        event("refused")
        return
    event("planned")
    for body in bodies:
        parse_message(json.dumps(body))  # raises InvalidMessage if the worker would refuse it

"""The rule for times (domain/companion/times.py: aware, an offset of whole minutes within 15:59,
1900-2999 in UTC) holds for every field that takes one: each pydantic model of the service that is
not a response (request bodies, queue messages, fan-out events, windows) and each parameter of a
route, found by walking the package, so a model added later is held to it too."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Annotated, Any

import pytest
import user_memory
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from user_memory.http.models import _Out

# Routes and models are read from the package itself: anything that can be imported.
MODULES = [importlib.import_module(m.name) for m in pkgutil.walk_packages(user_memory.__path__, "user_memory.")]


def _schema_types(schema: Any) -> set[str]:
    """Every core schema type inside `schema` (a datetime behind validators and unions included)."""
    if isinstance(schema, dict):
        found = {schema["type"]} if isinstance(schema.get("type"), str) else set()
        return found.union(*(_schema_types(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_schema_types(v) for v in schema))
    return set()


def _takes(annotation: Any) -> str | None:
    """'datetime' or 'date' when a value of `annotation` is one (or a list or union of them); None
    otherwise, and for a model (its own fields are checked as its own)."""
    try:
        types = _schema_types(TypeAdapter(annotation).core_schema)
    except Exception:  # not a type pydantic validates alone (a Request, a context object)
        return None
    if types & {"model", "model-fields", "definitions", "definition-ref"}:
        return None
    return "datetime" if "datetime" in types else "date" if "date" in types else None


def _model_fields() -> list[tuple[str, Any]]:
    found = []
    for module in MODULES:
        for model in vars(module).values():
            if not (inspect.isclass(model) and issubclass(model, BaseModel) and model.__module__ == module.__name__):
                continue
            if issubclass(model, _Out):  # answers: built by the service from what it stored
                continue
            for name, info in model.model_fields.items():
                annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                found.append((f"{model.__module__}.{model.__qualname__}.{name}", annotation))
    return found


def _route_parameters() -> list[tuple[str, Any]]:
    found = []
    for module in MODULES:
        router = getattr(module, "router", None)
        if not module.__name__.startswith("user_memory.http.") or router is None:
            continue
        for function in router._routes.values():  # every route the module registers
            for name, annotation in typing.get_type_hints(function, include_extras=True).items():
                if name != "return":
                    found.append((f"{module.__name__}.{function.__name__}({name})", annotation))
    return found


TAKING = [(where, annotation, kind) for where, annotation in _model_fields() + _route_parameters()
          if (kind := _takes(annotation)) is not None]  # fmt: skip
TIMES = [pytest.param(a, id=w) for w, a, kind in TAKING if kind == "datetime"]
DATES = [pytest.param(a, id=w) for w, a, kind in TAKING if kind == "date"]


def test_the_walk_finds_the_fields_known_to_take_times():
    # A guard on the walk itself: these must be among what the properties below check.
    where = {w for w, _, _ in TAKING}
    assert {
        "user_memory.http.models.ActivityItem.occurred_at",
        "user_memory.http.models.RatingIn.rated_at",
        "user_memory.domain.messages.ActivityIn.occurred_at",
        "user_memory.domain.model.Window.start",
        "user_memory.domain.fanout.ScheduledEvent.time",
        "user_memory.domain.fanout.ManualRequest.date",
        "user_memory.http.routes.memory.get_memory(as_of)",
        "user_memory.http.routes.companion.events_in_range(range_from)",
        "user_memory.http.routes.companion.get_digest(day)",
        "user_memory.http.routes.companion.todos_due(on)",
    } <= where, sorted(where)


def _storable(value: datetime) -> bool:
    """The rule, written out: aware, whole minutes of offset within 15:59, 1900-2999 in UTC."""
    offset = value.utcoffset()
    if offset is None or offset % timedelta(minutes=1) or abs(offset) > timedelta(hours=15, minutes=59):
        return False
    return datetime(1900, 1, 1) <= value.replace(tzinfo=None) - offset < datetime(3000, 1, 1)


offsets = st.one_of(
    st.none(),
    st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m))),
    st.integers(-86_399, 86_399).map(lambda s: timezone(timedelta(seconds=s))),
)
any_time = st.builds(
    lambda naive, zone: naive.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
    | st.datetimes(min_value=datetime(1899, 12, 30), max_value=datetime(3000, 1, 2)),
    offsets,
)
any_date = st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)) | st.dates(
    min_value=date(1899, 12, 25), max_value=date(3000, 1, 5)
)


def _accepts(annotation: Any, value: Any) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("annotation", TIMES)
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(value=any_time)
def test_every_time_a_model_or_route_takes_follows_the_rule(annotation, value):
    # Given a field or parameter that takes a time, and any time Python can hold, in any form
    # Then it is taken exactly when the rule allows it, as a value and as the text a client sends
    assert _accepts(annotation, value) == _storable(value), value
    assert _accepts(annotation, value.isoformat()) == _storable(value), value.isoformat()


@pytest.mark.parametrize("annotation", DATES)
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(value=any_date)
def test_every_date_a_model_or_route_takes_lies_in_the_years_of_the_rule(annotation, value):
    assert _accepts(annotation, value.isoformat()) == (1900 <= value.year <= 2999), value


def test_a_date_at_the_end_of_the_range_makes_a_window_a_typed_error_not_an_overflow():
    from user_memory.domain.fanout import plan_from_event
    from user_memory.errors import InvalidEvent

    for day in ("2999-12-31", "3000-01-01", "0001-01-01", "1899-12-31"):
        with pytest.raises(InvalidEvent):
            plan_from_event({"date": day}, window_hours=24)
    assert plan_from_event({"date": "1900-01-01"}, window_hours=24).window.start == datetime(1900, 1, 1, tzinfo=UTC)

"""The 30-day simulation, small: its accounting must be honest in both directions.

Users start with an existing ~10 KB memory. A model that behaves loses nothing and the fact floor
stays silent. With the floor switched off (the pipeline's test-only switch), a model that silently
drops parts in document mode, or never writes a fact in edit mode, is caught as facts lost without
a flag: the checker can fail. With the floor on, the same misbehaviour is restored or filled,
recorded in provenance, and counted as flagged and not lost. In edit mode a proposed removal
nobody asked for is refused, recorded in provenance, and loses nothing. Each mode runs on its own
database (the fan-out lists every user with unsummarized activity, so the suite's other users
must not be there).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import replace

import psycopg
import pytest
from psycopg import sql
from user_memory.adapters.migrations import migrate

from tests import owners
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from sim.generator import Generator, present
from sim.model import Rates
from sim.report import render
from sim.run import ModeResult, edit_mode_available, run_mode
from sim.tokens import load_tokenizer
from user_memory.domain.memory.document import encode, validate_document

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]
USERS, DAYS, SEED = 5, 3, 7


@pytest.fixture
def new_database(database_url) -> Iterator:
    """Makes empty, migrated databases on the suite's server; drops them afterwards."""
    admin = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")
    made: list[str] = []

    def make() -> str:
        name = f"user_memory_sim_{os.getpid()}_{len(made)}"
        with psycopg.connect(admin, autocommit=True) as conn:
            owners.drop_database(conn, name)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        made.append(name)
        dsn = psycopg.conninfo.make_conninfo(database_url, dbname=name)
        migrate(dsn)
        return dsn

    yield make
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in made:
            owners.drop_database(conn, name)


def simulate(dsn: str, mode: str, rates: Rates, days: int = DAYS, floor: bool = True) -> ModeResult:
    return run_mode(dsn, mode, seed=SEED, users=USERS, days=days, rates=rates, tokenizer=load_tokenizer(), floor=floor)


def modes() -> list[str]:
    return ["document", "edit"] if edit_mode_available() else ["document"]


def test_generator_is_deterministic_and_knows_its_facts():
    a, b = Generator(SEED, USERS), Generator(SEED, USERS)
    days_a = [a.day(d) for d in range(DAYS)]
    days_b = [b.day(d) for d in range(DAYS)]
    assert [[(x.user_id, x.kind, x.payload) for x in d] for d in days_a] == [
        [(x.user_id, x.kind, x.payload) for x in d] for d in days_b
    ]
    assert all(u.mentions for u in a.users)  # day 0 names a part for everyone
    user = a.users[0]
    pid, name = next(iter(user.parts.items()))
    doc = {"parts": {pid: {"name": name, "goals": [{"goal": g} for g in user.goals[pid]]}}}
    assert present(("part", pid, name), doc)
    assert not present(("part", pid, name + "!"), doc)
    # Every user starts with an existing memory of about 10 KB whose facts are expected facts
    for u in a.users:
        assert u.initial is not None and 7_000 < len(encode(validate_document(u.initial)).encode()) < 12_000
        seeded = {f for f, mentions in u.mentions.items() if mentions[0] == (-1, "seed")}
        assert len(seeded) > 60 and all(present(f, u.initial) for f in seeded)


def test_a_model_that_behaves_loses_nothing_in_either_mode(new_database):
    results = {mode: simulate(new_database(), mode, Rates.none()) for mode in modes()}
    for mode, r in results.items():
        assert r.expected > 0, mode
        assert r.present == r.expected, (mode, r.lost_examples)
        assert (r.lost_flagged, r.lost_unflagged) == (0, 0), mode
        assert r.deliveries_failed == 0, (mode, r.failure_reasons)
        assert r.versions == r.user_days > 0, mode
        assert r.prompt_tokens > 0 and r.completion_tokens > 0, mode
        assert r.memory_bytes_start > 7_000, mode
        # And the fact floor stays silent: nothing restored, filled or asked again
        assert (r.restorations, r.fills, r.unreflected, r.retries) == (0, 0, 0, 0), mode
    shown: dict[str, ModeResult | str] = {"edit": "the summarizer has no edit mode yet", **results}
    table = render({m: shown[m] for m in ("document", "edit")}, command="test", seed=SEED, users=USERS, days=DAYS)
    assert "document mode" in table and "edit mode" in table  # a column for each, run or not
    assert "lost, WITHOUT a flag" in table
    if "edit" in results:
        assert "edit completion tokens, % of document mode" in table


def test_with_the_floor_off_a_silent_drop_in_document_mode_is_caught_as_lost_without_a_flag(new_database):
    # Given a model that drops a part every day, and the pipeline's fact floor switched off
    rates = replace(Rates.none(), drop_part=1.0)
    r = simulate(new_database(), "document", rates, days=4, floor=False)
    # Then the checker, which reads only the heads and the provenance, reports the loss unflagged
    assert r.misbehaved["drop_part"] > 0
    assert r.lost_unflagged > 0
    assert r.dropped_later > 0  # they were in memory, then the model left them out
    assert r.present + r.lost_flagged + r.lost_unflagged == r.expected
    assert (r.restorations, r.present_restored) == (0, 0)
    table = render({"document": r, "edit": "not run here"}, command="test", seed=SEED, users=USERS, days=4)
    assert "document MISSED" in table and "fact floor is OFF" in table


def test_the_fact_floor_restores_what_document_mode_drops_and_flags_it(new_database):
    # Given a model that drops, moves, deletes and empties every day, with the floor on
    rates = replace(Rates.none(), drop_part=1.0, rename_part=1.0, invent_deletion=1.0, omit_section=1.0)
    r = simulate(new_database(), "document", rates, days=4)
    # Then nothing is lost: what was dropped is back, recorded in provenance, and counted as flagged
    assert r.misbehaved["drop_part"] > 0 and r.misbehaved["invent_deletion"] > 0
    assert r.lost_unflagged == 0 and r.present == r.expected, r.lost_examples
    assert r.restorations > 0 and r.present_restored > 0
    table = render({"document": r, "edit": "not run here"}, command="test", seed=SEED, users=USERS, days=4)
    assert "document met" in table


@pytest.mark.skipif(not edit_mode_available(), reason="the summarizer has no edit mode yet")
def test_with_the_floor_off_a_fact_the_model_never_writes_is_caught_in_edit_mode_too(new_database):
    rates = replace(Rates.none(), forget_fact=1.0)
    r = simulate(new_database(), "edit", rates, floor=False)
    assert r.misbehaved["forget_fact"] > 0
    assert r.lost_unflagged > 0 and r.never_in_memory == r.lost_unflagged
    assert r.lost_left_out == r.lost_unflagged  # every one of them traced to a left-out mention


@pytest.mark.parametrize("mode", ["document", "edit"])
def test_a_fact_the_model_never_writes_is_asked_for_again_then_filled_and_flagged(new_database, mode):
    if mode == "edit" and not edit_mode_available():
        pytest.skip("the summarizer has no edit mode yet")
    # Given a model that leaves one new fact out of every answer, its retries too
    rates = replace(Rates.none(), forget_fact=1.0, retry_factor=1.0)
    r = simulate(new_database(), mode, rates)
    # Then each such answer was sent back once with the missing lines named, and what the retry
    # still left out was folded in by the service: in memory, recorded, nothing lost
    assert r.misbehaved["forget_fact"] > 0 and r.fact_retries > 0
    assert r.fills > 0 and r.present_filled > 0
    assert r.lost_unflagged == 0 and r.present == r.expected, r.lost_examples


@pytest.mark.skipif(not edit_mode_available(), reason="the summarizer has no edit mode yet")
def test_edit_mode_refuses_unrequested_removals_and_records_them(new_database):
    rates = replace(Rates.none(), remove_part=1.0, clear_safety=1.0)
    r = simulate(new_database(), "edit", rates, days=4)
    assert r.misbehaved["remove_part"] > 0
    assert r.provenance and r.versions_refused > 0 and r.refused_edits >= r.misbehaved["remove_part"]
    assert r.lost_unflagged == 0 and r.present == r.expected, r.lost_examples


@pytest.mark.skipif(not edit_mode_available(), reason="the summarizer has no edit mode yet")
def test_edit_mode_sends_a_bad_path_back_and_the_retry_lands(new_database):
    rates = replace(Rates.none(), bad_path=1.0, retry_factor=0.0)
    r = simulate(new_database(), "edit", rates)
    assert r.misbehaved["bad_path"] > 0
    assert r.retries >= r.misbehaved["bad_path"]
    assert r.lost_unflagged == 0 and r.present == r.expected, r.lost_examples

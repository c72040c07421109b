"""`user-memory plan`: a deployment sized for N users a day, printed as the guide shows it."""

from __future__ import annotations

import json

import pytest
from user_memory.domain.plan import plan, sizing_table

from tests.e2e.helpers import assert_one_error_line, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("cli_env")]


def test_plan_prints_the_sizing_table_a_column_for_each_scale(capsys):
    # When the plan is asked for two scales
    result = run(capsys, "plan", "--users-per-day", "10000", "--users-per-day", "1000000")
    # Then it prints the table of both plans, and nothing on stderr
    assert result.code == 0 and result.err == ""
    assert result.out == sizing_table([plan(10_000), plan(1_000_000)]) + "\n"
    assert "| worker invocations at once (`WorkerMaximumConcurrency`) | 2 | 51 |" in result.out.splitlines()


def test_plan_takes_the_measured_llm_seconds_and_concurrency(capsys):
    # When the LLM is measured twice as slow, with 5 calls at once
    result = run(capsys, "plan", "--users-per-day", "1000000", "--llm-seconds", "4", "--llm-concurrency", "5", "--json")
    # Then the plan has 5 users an invocation and about three times the invocations at once (twice the
    # mean call, half the lanes, but the slowest of 5 lanes is 2.0 mean calls where 10's is 2.6)
    (sized,) = json.loads(result.out)
    assert result.code == 0
    assert (sized["batch_size"], sized["users_per_message"], sized["llm_seconds"]) == (5, 1, 4.0)
    assert sized["worker_concurrency"] == plan(1_000_000, llm_seconds=4, llm_concurrency=5).worker_concurrency == 160
    assert sized["parameters"]["WorkerMaximumConcurrency"] == 160
    assert sized["total_monthly_cost"] == pytest.approx(sum(sized["monthly_cost"].values()), abs=0.1)


def test_plan_prices_the_nightly_run_through_the_batch_api_with_the_same_parameters(capsys):
    # When a million users a day are planned online and through the Batch API
    online = run(capsys, "plan", "--users-per-day", "1000000", "--json")
    batch = run(capsys, "plan", "--users-per-day", "1000000", "--summary-delivery", "batch", "--json")
    assert online.code == batch.code == 0
    ((online_plan,), (batch_plan,)) = json.loads(online.out), json.loads(batch.out)
    # Then the parameters differ only in SummaryDelivery, and the month costs less
    assert batch_plan["parameters"] == {**online_plan["parameters"], "SummaryDelivery": "batch"}
    assert batch_plan["total_monthly_cost"] < online_plan["total_monthly_cost"]
    assert batch_plan["total_monthly_cost"] == round(plan(1_000_000, summary_delivery="batch").total_monthly_cost, 2)
    assert "LLM tokens (gpt-4o-mini, edit mode, Batch API)" in batch_plan["monthly_cost"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "the following arguments are required: --users-per-day"),
        (["--users-per-day", "0"], "--users-per-day: the users a day must be at least 1, got 0"),
        (["--users-per-day", "lots"], "--users-per-day: the users a day must be a whole number, got 'lots'"),
        (
            ["--users-per-day", "10", "--llm-seconds", "0"],
            "--llm-seconds: the seconds an LLM call takes must be above 0",
        ),
        (["--users-per-day", "10", "--llm-seconds", "nan"], "must be above 0 and at most 105, got nan"),
        (
            ["--users-per-day", "10", "--window-hours", "25"],
            "--window-hours: the window must be above 0 and at most 24",
        ),
        (["--users-per-day", "10", "--headroom", "0.5"], "--headroom: the headroom must be at least 1"),
        (["--users-per-day", "10", "--llm-concurrency", "51"], "the LLM concurrency must be at most 50, got 51"),
        (["--users-per-day", "10", "--summary-delivery", "nightly"], "--summary-delivery: invalid choice: 'nightly'"),
    ],
)
def test_bad_plan_arguments_are_one_error_line(capsys, argv, fragment):
    result = run(capsys, "plan", *argv)
    assert_one_error_line(result, fragment)
    assert result.code == 2 and result.out == ""


def test_a_scale_no_parameters_can_serve_in_the_window_is_one_error_line(capsys):
    # Given a billion users a day in a one-hour window
    result = run(capsys, "plan", "--users-per-day", "1000000000", "--window-hours", "1")
    # Then no table is printed, and the one line says what was needed and what the most is
    assert_one_error_line(result, "concurrent worker invocations to finish within 1 h", "the most is 1,000")
    assert result.code == 1 and result.out == ""

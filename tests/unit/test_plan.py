"""Sizing (domain/plan.py): the arithmetic from users a day to the deployment's parameters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.domain import costs
from user_memory.domain.cost import DEFAULT_PRICES
from user_memory.domain.fanout import Backlog
from user_memory.domain.plan import (
    BACKLOG_MARGIN_SECONDS,
    BEFORE_PROMPT_VIEW,
    MAX_BATCH_SIZE,
    MAX_LLM_CONCURRENCY,
    MAX_WORKER_CONCURRENCY,
    MIN_QUEUE_AGE_ALARM_SECONDS,
    MIN_WORKER_CONCURRENCY,
    QUEUE_RETENTION_SECONDS,
    Plan,
    backlog_limit,
    invocation_seconds,
    llm_cost_per_user_day,
    max_connections,
    monthly_cost,
    plan,
    sizing_table,
    tail_factor,
    users_per_second,
)
from user_memory.errors import FanoutRefused, InvalidArgument, PlanDoesNotFit

users_a_day = st.integers(min_value=1, max_value=50_000_000)
llm_seconds = st.floats(min_value=0.05, max_value=105, allow_nan=False)
llm_concurrency = st.integers(min_value=1, max_value=MAX_LLM_CONCURRENCY)
window_hours = st.floats(min_value=0.25, max_value=24, allow_nan=False)
headroom = st.floats(min_value=1, max_value=10, allow_nan=False)
WORKER_SECONDS_PER_USER = (
    costs.WORKER_MS_PER_USER + costs.WORKER_ROUND_TRIPS_PER_USER * costs.PROXY_ROUND_TRIP_MS
) / 1000


def per_wave(lanes: int, llm_seconds: float = 2.0) -> float:
    """One wave of `lanes` users at `llm_seconds` the mean call: as long as its slowest lane."""
    return costs.LLM_CALLS_PER_USER_DAY * llm_seconds * tail_factor(lanes) + WORKER_SECONDS_PER_USER


def _drawn_slowest_over_mean(lanes: int, samples: int, seed: int) -> float:
    """The slowest of `lanes` log-normal calls (p50 1.5 s, p99 8 s) over their mean, by drawing."""
    import random
    from statistics import NormalDist

    sigma = math.log(8.0 / 1.5) / NormalDist().inv_cdf(0.99)
    rng = random.Random(seed)
    slowest = sum(max(rng.lognormvariate(0.0, sigma) for _ in range(lanes)) for _ in range(samples)) / samples
    return slowest / math.exp(sigma * sigma / 2)


@pytest.mark.parametrize("lanes", [2, 5, 10, 50])
def test_the_tail_factor_is_the_expected_slowest_of_the_lanes_calls_over_the_mean(lanes):
    # Given the spread the plan assumes (log-normal, p50 1.5 s, p99 8 s), drawn 20,000 times
    drawn = _drawn_slowest_over_mean(lanes, 20_000, seed=lanes)
    # Then the plan's tail factor is the drawn slowest over the mean (within the draw's error)
    assert tail_factor(lanes) == pytest.approx(drawn, rel=0.03)
    # And one lane is just the mean call
    assert tail_factor(1) == 1.0


def test_ten_lanes_plan_the_slowest_of_ten_calls_not_the_mean_call():
    # Given the simulation's spread: a mean call of 1.94 s (p50 1.5 s, p99 8 s)
    # When one invocation runs 10 users in 10 lanes
    seconds = invocation_seconds(10, 10, 1.94, calls=1.0)
    # Then it takes its slowest call, about 5.0 s (bench/sim_scale.py), not the mean's 1.94 s
    assert 4.8 <= seconds - WORKER_SECONDS_PER_USER <= 5.2


@given(
    users=st.integers(min_value=1, max_value=1000),
    at_once=llm_concurrency,
    seconds=llm_seconds,
    calls=st.floats(min_value=0.5, max_value=3, allow_nan=False),
)
def test_an_invocation_is_never_planned_below_its_slowest_lane(users, at_once, seconds, calls):
    # Given any invocation of `users` users in `at_once` lanes
    planned = invocation_seconds(users, at_once, seconds, calls=calls)
    waves = math.ceil(users / at_once)
    lanes = min(users, at_once)
    # Then each wave is planned at least as long as its expected slowest lane's calls
    assert planned >= waves * calls * seconds * tail_factor(lanes) * (1 - 1e-9)
    # And never below the mean call: more lanes never make a wave shorter than one lane's
    assert planned >= waves * calls * seconds * (1 - 1e-9)
    if lanes > 1:
        assert planned / waves >= invocation_seconds(1, 1, seconds, calls=calls) * (1 - 1e-9)


@given(lanes=st.integers(min_value=1, max_value=MAX_LLM_CONCURRENCY - 1))
def test_one_more_lane_never_shortens_a_wave(lanes):
    # Given a wave of `lanes` calls at once and one of `lanes` + 1
    # Then the wider wave's slowest lane is at least as slow
    assert tail_factor(lanes + 1) >= tail_factor(lanes)


def test_an_invocation_takes_one_slowest_lane_per_wave_of_concurrent_calls():
    # Given 10 LLM calls at once and 2 s the mean call
    # Then 10 users take one wave as long as its slowest of 10 lanes, 11 to 20 two
    assert invocation_seconds(10, 10, 2.0) == pytest.approx(per_wave(10))
    assert invocation_seconds(11, 10, 2.0) == pytest.approx(2 * per_wave(10))
    assert invocation_seconds(20, 10, 2.0) == pytest.approx(2 * per_wave(10))
    # And one user alone waits only its own call, the mean
    assert invocation_seconds(1, 10, 2.0) == pytest.approx(per_wave(1))
    assert invocation_seconds(1, 10, 2.0) < invocation_seconds(10, 10, 2.0)
    # And one call at a time is the serial worker: ten users, ten mean calls
    assert invocation_seconds(10, 1, 2.0) == pytest.approx(10 * per_wave(1))


def test_the_worker_drains_concurrency_times_llm_calls_at_once_per_latency():
    # Given 20 invocations of 10 messages of one user, 10 LLM calls at once, 2 s a call
    rate = users_per_second(
        worker_concurrency=20, batch_size=10, users_per_message=1, llm_concurrency=10, llm_seconds=2
    )
    # Then the worker drains 20 x 10 users per slowest-of-10 lanes
    assert rate == pytest.approx(20 * 10 / per_wave(10))
    # And 3 messages an invocation (the old default) use only 3 of the 10 calls
    rate3 = users_per_second(
        worker_concurrency=20, batch_size=3, users_per_message=1, llm_concurrency=10, llm_seconds=2
    )
    assert rate3 == pytest.approx(20 * 3 / per_wave(3))


def test_a_million_users_a_day_finish_inside_the_night_with_twice_the_capacity_they_need():
    # Given the default figures (2 s an LLM call, 10 calls at once, a 6-hour window, 2x headroom)
    sized = plan(1_000_000)
    # Then an invocation is 10 users, one wave as long as its slowest lane, and 51 of them run at once
    assert (sized.batch_size, sized.users_per_message) == (10, 1)
    assert sized.worker_concurrency == math.ceil(1_000_000 * 2 / (6 * 3600 * 10 / per_wave(10))) == 51
    # And the night's run drains in at most half the window
    assert sized.drain_seconds * 2 <= 6 * 3600
    assert sized.drain_seconds == pytest.approx(1_000_000 / sized.users_per_second)
    # And the queue-age alarm fires when the run takes twice its plan, within the window
    assert sized.queue_age_alarm_seconds == math.ceil(sized.drain_seconds * 2 / 60) * 60 <= 6 * 3600
    # And Aurora may grow to twice the hot data's ACUs, the API's throttle to twice its peak
    assert sized.max_capacity == math.ceil(1_000_000 * costs.HOT_BYTES_PER_ACTIVE_USER / costs.CACHE_BYTES_PER_ACU * 2)
    assert sized.api_rate_limit >= 1_000_000 * 20 / 86400 * 3 * 2
    # And every user in flight has a connection the proxy may open
    assert sized.connections_at_peak >= 51 * 10
    assert sized.connections_at_peak <= sized.proxy_connections == max_connections(sized.max_capacity) * 90 // 100


def test_a_small_deployment_keeps_lambdas_minimum_and_an_hour_before_the_age_alarm():
    sized = plan(100)
    assert sized.worker_concurrency == MIN_WORKER_CONCURRENCY
    assert sized.queue_age_alarm_seconds == MIN_QUEUE_AGE_ALARM_SECONDS
    assert sized.api_rate_limit == 50 and sized.max_capacity == 2


def test_the_backlog_the_fanout_accepts_is_the_retention_less_a_day_at_the_planned_rate():
    sized = plan(100_000)
    assert sized.queue_retention_seconds == QUEUE_RETENTION_SECONDS == 14 * 86400
    assert sized.backlog_limit_seconds == backlog_limit(QUEUE_RETENTION_SECONDS) == 13 * 86400
    assert sized.backlog_limit_users == int(13 * 86400 * sized.users_per_second)
    assert backlog_limit(BACKLOG_MARGIN_SECONDS // 2) == 0


def test_a_plan_that_cannot_finish_in_its_window_says_so():
    # Given more users than 1000 invocations can summarize in an hour
    # Then no plan is made, and the error says what was needed and what to change
    with pytest.raises(PlanDoesNotFit, match=r"need [\d,]+ concurrent worker invocations .* the most is 1,000"):
        plan(100_000_000, window_hours=1)


def test_a_scale_past_one_aurora_writer_says_so():
    # Given ten million users a day, whose hot data alone is ~280 ACUs of cache
    # Then the plan says one Serverless v2 writer cannot hold it, rather than propose a capacity it cannot have
    with pytest.raises(PlanDoesNotFit, match=r"need [\d,]+ ACUs of Aurora .* at most 256"):
        plan(10_000_000)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"users_per_day": 0}, "users_per_day"),
        ({"users_per_day": 10, "llm_seconds": 0}, "llm_seconds"),
        ({"users_per_day": 10, "llm_seconds": float("nan")}, "llm_seconds"),
        ({"users_per_day": 10, "llm_concurrency": 0}, "llm_concurrency"),
        ({"users_per_day": 10, "window_hours": 24.5}, "window_hours"),
        ({"users_per_day": 10, "window_hours": 0}, "window_hours"),
        ({"users_per_day": 10, "headroom": 0.5}, "headroom"),
        ({"users_per_day": 10, "summary_delivery": "nightly"}, "summary_delivery"),
    ],
)
def test_an_input_out_of_bounds_is_named(kwargs, argument):
    with pytest.raises(InvalidArgument) as raised:
        plan(**kwargs)
    assert raised.value.argument == argument


def _plan_or_none(users: int, **kw: float) -> Plan | None:
    try:
        return plan(users, **kw)  # type: ignore[arg-type]
    except PlanDoesNotFit:
        return None


@settings(max_examples=300, deadline=None)
@given(users=users_a_day, seconds=llm_seconds, at_once=llm_concurrency, window=window_hours, room=headroom)
def test_a_plan_finishes_inside_its_window_with_its_headroom_or_is_refused(users, seconds, at_once, window, room):
    # Given any users a day and LLM figures
    try:
        sized = plan(users, llm_seconds=seconds, llm_concurrency=at_once, window_hours=window, headroom=room)
    except PlanDoesNotFit as refused:
        # Then a plan refused is one the template's most cannot serve, and says which: more
        # invocations than 1000, more connections than the proxy may open, or a throttle over 10,000
        message = str(refused)
        per_message = math.ceil(at_once / MAX_BATCH_SIZE)
        users_at_once = at_once // per_message * per_message
        per_invocation = users_at_once / invocation_seconds(users_at_once, at_once, seconds)
        needed = math.ceil(users * room / (window * 3600 * per_invocation))
        if "concurrent worker invocations" in message:
            assert needed > MAX_WORKER_CONCURRENCY
        elif "database connections" in message:
            connections = int(message.split(" database connections")[0].replace(",", ""))
            assert connections > 1_800 and connections >= max(MIN_WORKER_CONCURRENCY, needed) * users_at_once
        elif "ACUs of Aurora" in message:
            assert users * costs.HOT_BYTES_PER_ACTIVE_USER / costs.CACHE_BYTES_PER_ACU * room > 255
        else:
            assert "requests a second" in message and users * 20 / 86400 * 3 * room > 9_990
        return
    # Then it drains inside the window, with the headroom asked for, and never past a day
    assert sized.drain_seconds * room <= window * 3600 * (1 + 1e-9) <= 86400 * (1 + 1e-9)
    # And within the template's bounds, one LLM wave an invocation
    assert MIN_WORKER_CONCURRENCY <= sized.worker_concurrency <= MAX_WORKER_CONCURRENCY
    assert sized.batch_size <= MAX_BATCH_SIZE and sized.batch_size * sized.users_per_message <= at_once
    assert sized.connections_at_peak <= sized.proxy_connections
    assert sized.queue_age_alarm_seconds >= MIN_QUEUE_AGE_ALARM_SECONDS
    assert sized.total_monthly_cost > 0


@settings(max_examples=200, deadline=None)
@given(
    users=users_a_day, more=st.integers(min_value=1, max_value=5_000_000), seconds=llm_seconds, at_once=llm_concurrency
)
def test_more_users_never_get_less_of_anything(users, more, seconds, at_once):
    # Given two plans with the same figures, one for more users
    small = _plan_or_none(users, llm_seconds=seconds, llm_concurrency=at_once)
    large = _plan_or_none(users + more, llm_seconds=seconds, llm_concurrency=at_once)
    if large is None:
        return  # more users may not fit where fewer did; never the other way round (below)
    assert small is not None, "fewer users than a plan that fits must fit"
    # Then the larger one has at least the concurrency, capacity, throttle, connections and cost
    assert large.worker_concurrency >= small.worker_concurrency
    assert large.max_capacity >= small.max_capacity
    assert large.api_rate_limit >= small.api_rate_limit
    assert large.connections_at_peak >= small.connections_at_peak
    assert large.total_monthly_cost >= small.total_monthly_cost
    assert large.users_per_second >= small.users_per_second


def test_the_table_has_a_column_a_plan_and_names_the_parameters():
    table = sizing_table([plan(10_000), plan(1_000_000)]).splitlines()
    assert table[0] == "| plan | 10,000 users/day | 1,000,000 users/day |"
    assert all(line.count("|") == 4 for line in table)
    for parameter in ("WorkerMaximumConcurrency", "WorkerBatchSize", "QueueAgeAlarmSeconds", "MaxCapacity"):
        assert any(f"`{parameter}`" in line for line in table), parameter


# -- the fan-out's side of it: a backlog the queue could not drain in time ---------------------------


def test_a_backlog_is_weighed_in_users_at_the_planned_rate():
    backlog = Backlog(waiting_messages=1000, users_per_message=2, users_per_second=10.0, limit_seconds=300)
    assert backlog.seconds(0) == 200
    assert backlog.seconds(1000) == 300
    refused = backlog.refuse("daily:2026-11-21", queued=900, more=200)
    assert isinstance(refused, FanoutRefused)
    assert (refused.run_key, refused.waiting_messages, refused.users_queued) == ("daily:2026-11-21", 1000, 900)
    assert "900 users queued, the rest refused" in str(refused)


# -- the bill ------------------------------------------------------------------------------------


def _llm_line(sized: Plan) -> float:
    (line,) = [value for name, value in sized.monthly_cost.items() if name.startswith("LLM tokens")]
    return line


def test_the_llm_is_priced_at_the_workers_own_default_prices():
    # Given the worker's price settings' defaults (LLM_PRICE_*), one source for both
    # Then the cost model's LLM prices are those, the cached input's too
    assert DEFAULT_PRICES.input_per_1m == costs.LLM_INPUT_PER_MILLION_TOKENS
    assert DEFAULT_PRICES.cached_input_per_1m == costs.LLM_CACHED_INPUT_PER_MILLION_TOKENS
    assert DEFAULT_PRICES.output_per_1m == costs.LLM_OUTPUT_PER_MILLION_TOKENS


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.integers(min_value=0, max_value=200_000),
    completion=st.integers(min_value=0, max_value=20_000),
    share=st.floats(min_value=0, max_value=1, allow_nan=False),
)
def test_a_user_days_tokens_cost_what_the_worker_would_record_and_half_of_it_through_the_batch_api(
    prompt, completion, share
):
    # Given a user-day's tokens, a share of the prompt served from the cache
    cached = round(prompt * share)
    online = llm_cost_per_user_day(prompt, completion, cached_share=cached / prompt if prompt else 0.0)
    # Then online it costs what the worker records in a version's provenance at the default prices
    assert online == pytest.approx(DEFAULT_PRICES.cost(prompt, completion, cached), abs=1e-7)
    # And through the Batch API half the uncached price (cache hits are not assumed there)
    batch = llm_cost_per_user_day(prompt, completion, cached_share=share, batch=True)
    assert batch == pytest.approx(DEFAULT_PRICES.cost(prompt, completion) * (1 - costs.LLM_BATCH_DISCOUNT), abs=1e-7)


def test_the_batch_api_changes_the_bill_not_the_plan():
    # Given a million users a day online and through the Batch API
    online = plan(1_000_000)
    batch = plan(1_000_000, summary_delivery="batch")
    # Then the parameters are the same (whatever a batch does not answer runs online, in the window)
    assert {**online.parameters(), "SummaryDelivery": "batch"} == batch.parameters()
    assert (batch.worker_concurrency, batch.drain_seconds) == (online.worker_concurrency, online.drain_seconds)
    # And each user-day's first call is at the batch price, its retries online at the full price
    user_days = 1_000_000 * costs.DAYS_PER_MONTH
    prompt, completion = costs.LLM_PROMPT_TOKENS_PER_USER_DAY, costs.LLM_COMPLETION_TOKENS_PER_USER_DAY
    first = 1 / costs.LLM_CALLS_PER_USER_DAY
    expected = user_days * (
        first * llm_cost_per_user_day(prompt, completion, batch=True)
        + (1 - first) * llm_cost_per_user_day(prompt, completion)
    )
    assert _llm_line(batch) == pytest.approx(expected)
    assert _llm_line(online) / 2 < _llm_line(batch) < _llm_line(online)
    # And the worker no longer waits on the model for the first call: a tenth of the online line or less
    worker = "Lambda: worker (waits on the LLM) and fan-out"
    assert batch.monthly_cost[worker] * 10 < online.monthly_cost[worker]
    assert batch.total_monthly_cost < online.total_monthly_cost


def test_the_month_counts_data_transfer_log_storage_and_every_metric():
    # Given a plan, priced as now and as the model counted it before issue 22
    sized = plan(100_000)
    now, before = sized.monthly_cost, monthly_cost(sized, BEFORE_PROMPT_VIEW)
    # Then now it has the lines it left out then, each worth something
    added = set(now) - set(before)
    assert added == {"Data transfer out (LLM requests, API answers)", "Log storage (30 days) and secret reads"}
    assert all(now[name] > 0 for name in added)
    # And it pays for every metric name the functions emit, not the 26 counted then
    fixed = "Alarms, custom metrics, secrets"
    assert now[fixed] - before[fixed] == pytest.approx(
        (costs.CUSTOM_METRICS - costs.BEFORE_CUSTOM_METRICS) * costs.CLOUDWATCH_METRIC_PER_MONTH
    )
    # And the whole memory in every prompt cost more than twice the view's tokens
    assert before["LLM tokens (gpt-4o-mini, edit mode)"] > 2 * now["LLM tokens (gpt-4o-mini, edit mode)"]


@settings(max_examples=100, deadline=None)
@given(users=st.integers(min_value=1, max_value=4_000_000), more=st.integers(min_value=1, max_value=500_000))
def test_through_the_batch_api_more_users_never_cost_less_and_never_more_than_online(users, more):
    small = _plan_or_none(users, summary_delivery="batch")  # type: ignore[arg-type]
    large = _plan_or_none(users + more, summary_delivery="batch")  # type: ignore[arg-type]
    if large is None or small is None:
        return
    assert large.total_monthly_cost >= small.total_monthly_cost
    assert large.total_monthly_cost <= plan(users + more).total_monthly_cost

"""What tokens cost at the configured prices."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from user_memory.config import WorkerSettings
from user_memory.domain.cost import DEFAULT_PRICES, Prices

tokens = st.integers(min_value=-10, max_value=10**9)
prices = st.builds(
    Prices,
    input_per_1m=st.floats(0, 100),
    cached_input_per_1m=st.floats(0, 100),
    output_per_1m=st.floats(0, 100),
)


@given(prices, tokens, tokens, tokens)
def test_a_cost_is_never_negative(p, prompt, completion, cached):
    assert p.cost(prompt, completion, cached) >= 0


@given(prices, tokens, tokens, tokens, st.integers(0, 10**6))
def test_more_prompt_or_completion_tokens_never_cost_less(p, prompt, completion, cached, more):
    base = p.cost(prompt, completion, cached)
    assert p.cost(prompt + more, completion, cached) >= base
    assert p.cost(prompt, completion + more, cached) >= base


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9))
def test_cached_tokens_cost_the_cached_rate_and_never_more_than_were_sent(prompt, completion, cached):
    p = DEFAULT_PRICES  # cached input is cheaper than input
    assert p.cost(prompt, completion, cached) <= p.cost(prompt, completion, 0)
    assert p.cost(prompt, completion, cached) == p.cost(prompt, completion, min(cached, prompt))


def test_the_default_model_s_list_prices():
    # gpt-4o-mini: $0.15 per 1M input, $0.075 cached, $0.60 output
    assert Prices().cost(1_000_000, 0) == 0.15
    assert Prices().cost(1_000_000, 1_000_000, 1_000_000) == pytest.approx(0.675)


@pytest.mark.parametrize("bad", [-0.01, math.nan])
def test_a_negative_or_missing_price_is_refused(bad):
    with pytest.raises(ValueError, match="input_per_1m"):
        Prices(input_per_1m=bad)


def test_the_worker_settings_carry_the_prices_into_the_pipeline():
    cfg = WorkerSettings.from_env({"LLM_PRICE_INPUT_PER_1M": "2.5", "LLM_PRICE_OUTPUT_PER_1M": "10"}).pipeline()
    assert cfg.prices == Prices(input_per_1m=2.5, cached_input_per_1m=0.075, output_per_1m=10.0)

"""What the model's tokens cost, at the prices a deployment configures (LLM_PRICE_* settings).

A version's provenance records its tokens and their cost at the prices of the run that wrote it
(`cost_usd`), so a price change later does not rewrite what a past night cost. Cached prompt
tokens (served from the endpoint's prefix cache) are part of the prompt tokens and priced at the
cached rate instead of the input rate.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MILLION = 1_000_000
# A hundred-millionth of a dollar: well below one gpt-4o-mini call (about $0.0003).
COST_DECIMALS = 8
# The smallest per-user daily token budget (MAX_TOKENS_PER_USER_DAY) that always lets one prompt
# through: a full activity block (6,000 tokens by default) beside a long-time user's document
# and the instructions.
MIN_TOKENS_PER_USER_DAY = 10_000


@dataclass(frozen=True, kw_only=True)
class Prices:
    """USD per 1M tokens: prompt tokens, prompt tokens served from the cache, completion tokens."""

    input_per_1m: float = 0.15
    cached_input_per_1m: float = 0.075
    output_per_1m: float = 0.60

    def __post_init__(self) -> None:
        for name in ("input_per_1m", "cached_input_per_1m", "output_per_1m"):
            value = getattr(self, name)
            if not value >= 0:  # also refuses NaN
                raise ValueError(f"{name} must be a price of at least 0, got {value!r}")

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one call's (or a run's) tokens; `cached_tokens` is the part of `prompt_tokens` the
        cache served (clamped to it: an endpoint cannot serve more than was sent)."""
        prompt = max(prompt_tokens, 0)
        cached = min(max(cached_tokens, 0), prompt)
        usd = (
            (prompt - cached) * self.input_per_1m
            + cached * self.cached_input_per_1m
            + max(completion_tokens, 0) * self.output_per_1m
        ) / PER_MILLION
        return round(usd, COST_DECIMALS)


# The default model's (gpt-4o-mini) list prices, standard tier; config.py's defaults are these.
DEFAULT_PRICES = Prices()

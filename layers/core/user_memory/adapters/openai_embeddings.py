"""Embeddings from OpenAI or any OpenAI-compatible endpoint, through the `openai` client.

256 dimensions (the memory_embeddings column): text-embedding-3 models shorten their vectors on
request (`dimensions`); an endpoint that answers another size is refused with a clear error
rather than stored.

Each request ends by its wall-clock deadline (openai_calls): EMBEDDING_TIMEOUT_SECONDS per try,
and never after the invocation's own deadline (the scope the API and the worker open), however
slowly the endpoint answers. Retries (429, 5xx, timeouts) are ours, inside the same bounds, and
a 429's Retry-After holds every embedder of that endpoint and model in the process (the worker's
lanes, the API's requests), as it holds the summarizers' calls (openai_calls.RetryAfterGate).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import openai

from user_memory.adapters import openai_calls as calls
from user_memory.adapters.search import DIMENSIONS
from user_memory.errors import EmbeddingsUnavailable

if TYPE_CHECKING:
    from user_memory.config import EmbeddingSettings

__all__ = ["EmbeddingsUnavailable", "OpenAIEmbedder"]


class OpenAIEmbedder:
    """`embed(texts)`: one request per call (and its retries), vectors in the order of the texts.

    Args:
        client: an `openai` client; `openai_calls.openai_client` bounds its calls by wall clock.
        timeout: seconds of wall clock per try.
        max_retries: retries of a request that timed out, was rate limited or failed with 5xx.
        gate: the Retry-After gate (default: the one shared by the endpoint and model).
    """

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        send_dimensions: bool = True,
        timeout: float = 10.0,
        max_retries: int = 0,
        sleep: Any = time.sleep,
        gate: calls.RetryAfterGate | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.send_dimensions = send_dimensions
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep
        self.calls = 0
        self.inputs = 0
        # A client without a URL (a test's stand-in) gets a gate of its own.
        base_url = getattr(client, "base_url", None)
        self.gate = gate or (calls.endpoint_gate(base_url, model) if base_url is not None else calls.RetryAfterGate())

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, *, api_key: str | None = None) -> OpenAIEmbedder:
        client = calls.openai_client(
            api_key=api_key or settings.embedding_api_key,
            base_url=settings.embedding_base_url,
            timeout=settings.embedding_timeout_seconds,
        )
        return cls(client, str(settings.embedding_model), timeout=settings.embedding_timeout_seconds, max_retries=1)

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        self.calls += 1
        self.inputs += len(texts)
        extra: dict[str, Any] = {"dimensions": DIMENSIONS} if self.send_dimensions else {}

        def create(per_try: float) -> Any:
            return self.client.with_options(timeout=per_try, max_retries=0).embeddings.create(
                model=self.model, input=texts, encoding_format="float", **extra
            )

        try:
            answer = calls.call_within(
                create,
                timeout=self.timeout,
                max_retries=self.max_retries,
                budget=self.timeout * (self.max_retries + 1),
                failure=_unavailable,
                sleep=self.sleep,
                gate=self.gate,
            )
        except openai.OpenAIError as err:  # what call_within does not retry or name (a malformed answer)
            raise EmbeddingsUnavailable(f"embeddings endpoint failed: {type(err).__name__}") from err
        data = sorted(answer.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EmbeddingsUnavailable(f"embeddings endpoint answered {len(data)} vectors for {len(texts)} texts")
        vectors = [list(d.embedding) for d in data]
        if any(len(v) != DIMENSIONS for v in vectors):
            raise EmbeddingsUnavailable(
                f"embeddings endpoint answered {len(vectors[0])} dimensions; the index stores {DIMENSIONS}"
            )
        return vectors


def _unavailable(err: Exception, per_try: float) -> EmbeddingsUnavailable:
    if isinstance(err, openai.APITimeoutError):
        why = f"no answer within {per_try:.1f} s"
        return EmbeddingsUnavailable(f"embeddings endpoint failed: {type(err).__name__} ({why})")
    return EmbeddingsUnavailable(f"embeddings endpoint failed: {type(err).__name__}")

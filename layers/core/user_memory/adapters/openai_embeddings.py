"""Embeddings from OpenAI or any OpenAI-compatible endpoint, through the `openai` client.

256 dimensions (the memory_embeddings column): text-embedding-3 models shorten their vectors on
request (`dimensions`); an endpoint that answers another size is refused with a clear error
rather than stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import openai

from user_memory.adapters.search import DIMENSIONS
from user_memory.errors import EmbeddingsUnavailable

if TYPE_CHECKING:
    from user_memory.config import EmbeddingSettings

__all__ = ["EmbeddingsUnavailable", "OpenAIEmbedder"]


class OpenAIEmbedder:
    """`embed(texts)`: one request per call, vectors in the order of the texts."""

    def __init__(self, client: openai.OpenAI, model: str, *, send_dimensions: bool = True) -> None:
        self.client = client
        self.model = model
        self.send_dimensions = send_dimensions
        self.calls = 0
        self.inputs = 0

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, *, api_key: str | None = None) -> OpenAIEmbedder:
        client = openai.OpenAI(
            api_key=api_key or settings.embedding_api_key or "not-needed-for-local-endpoints",
            base_url=settings.embedding_base_url,
            timeout=settings.embedding_timeout_seconds,
            max_retries=1,
        )
        return cls(client, str(settings.embedding_model))

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        self.calls += 1
        self.inputs += len(texts)
        try:
            if self.send_dimensions:
                answer = self.client.embeddings.create(
                    model=self.model, input=texts, encoding_format="float", dimensions=DIMENSIONS
                )
            else:
                answer = self.client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.OpenAIError as err:
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

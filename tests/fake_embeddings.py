"""A local OpenAI-compatible embeddings endpoint (`POST /v1/embeddings`) for the real `openai` client.

The vectors come from `hash_embedding`, a deterministic *hashing embedder*: lower-cased words
(a tiny suffix stripper folds "renewal", "renewing", "renewed" and "renews" into "renew") plus
the character trigrams of each word ("#pas", ... padded), feature-hashed with a sign into 256
dimensions and L2-normalised. It is a stand-in for a real embedding model, not one: it captures
shared words, morphology and typos (shared trigrams), never meaning. "Buy a present" and "get a
gift" share nothing, so it does not bring them together; a real model would. Tests and the
search benchmark use it because it is fast, needs no network and no model weights, and gives
the same vector for the same text on every machine.

`fake_embeddings_server()` yields `(FakeEmbeddings, base_url)`. The endpoint honours
`dimensions` (anything but 256 is a 400, as a model that cannot shorten its vectors would
answer), answers float lists or base64 (`encoding_format`), records every request
(`FakeEmbeddings.requests`: path, body, inputs), can be told to fail the next requests
(`fail_next(n, status, retry_after)`: a 429 may carry Retry-After), and to answer vectors of
another size (`answer_dimensions`, to test that a client refuses them).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tests.fake_http import JsonHandler, serving

DIMENSIONS = 256
_WORD = re.compile(r"[a-z0-9]+")
# Suffixes stripped (longest first) when at least three letters remain: a crude stemmer, enough
# to fold the usual English inflections and -al/-ment nouns onto their verb.
_SUFFIXES = ("ment", "ing", "es", "ed", "al", "s")
# Words too common to say anything about an item (a real model weighs them down itself).
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        "a an and are as at be by for from has have i in is it its me my of on or our so that the their them this "
        "to was were what when where which who will with you your",
    )
)
WORD_WEIGHT = 1.0
TRIGRAM_WEIGHT = 0.35


def stem(word: str) -> str:
    """The word without one common suffix ("renewal" -> "renew", "boxes" -> "box", "class" kept)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                continue
            return word[: -len(suffix)]
    return word


def features(text: str) -> dict[str, float]:
    """The weighted features of a text: stemmed words and the padded trigrams of each word."""
    weights: dict[str, float] = {}
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        key = "w:" + stem(word)
        weights[key] = weights.get(key, 0.0) + WORD_WEIGHT
        padded = f"#{word}#"
        for i in range(len(padded) - 2):
            key = "t:" + padded[i : i + 3]
            weights[key] = weights.get(key, 0.0) + TRIGRAM_WEIGHT
    return weights


@lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dims: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
    return digest % dims, (1.0 if (digest >> 63) & 1 else -1.0)


def hash_embedding(text: str, dims: int = DIMENSIONS) -> list[float]:
    """A unit vector of `dims` floats for `text` (signed feature hashing of `features`)."""
    vector = [0.0] * dims
    for feature, weight in features(text).items():
        index, sign = _bucket(feature, dims)
        vector[index] += sign * weight
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:  # no words at all: a fixed unit vector (cosine needs a non-zero vector)
        vector[_bucket("empty", dims)[0]] = 1.0
        return vector
    return [x / norm for x in vector]


class HashingEmbedder:
    """The in-process embedder the search adapter accepts (`.model`, `.embed(texts)`), counting its work."""

    def __init__(self, model: str = "hashing-256", dims: int = DIMENSIONS) -> None:
        self.model = model
        self.dims = dims
        self.calls = 0
        self.inputs = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.inputs += len(texts)
        return [hash_embedding(t, self.dims) for t in texts]


@dataclass
class FakeEmbeddings:
    """The endpoint's state: recorded requests, scripted failures and the vector size it answers."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, float | None]] = field(default_factory=list)
    answer_dimensions: int | None = None  # None: the size asked for (256)
    headers: dict[str, str] = field(default_factory=dict)  # the answer being sent's extra headers

    def fail_next(self, n: int = 1, status: int = 500, retry_after: float | None = None) -> None:
        """The next `n` requests are answered with `status` (an OpenAI-style error body), with a
        Retry-After header of `retry_after` seconds when given."""
        self.failures.extend([(status, retry_after)] * n)

    @property
    def inputs(self) -> list[str]:
        """Every input text of every request, in order."""
        return [text for request in self.requests for text in request["inputs"]]


def _inputs(body: dict[str, Any]) -> list[str] | None:
    raw = body.get("input")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        return list(raw)
    return None  # token arrays are not supported here


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _answer(fake: FakeEmbeddings, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if path.rstrip("/") != "/v1/embeddings":
        return 404, _error(f"no route {path}")
    inputs = _inputs(body)
    fake.requests.append({"path": path, "body": body, "inputs": inputs or []})
    if fake.failures:
        status, retry_after = fake.failures.pop(0)
        fake.headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        return status, _error(f"scripted failure {status}", "server_error")
    if inputs is None or not inputs:
        return 400, _error("input must be a string or a non-empty list of strings")
    dims = body.get("dimensions", DIMENSIONS)
    if dims != DIMENSIONS:
        return 400, _error(f"this model answers {DIMENSIONS} dimensions, not {dims}")
    size = fake.answer_dimensions or DIMENSIONS
    data = []
    for index, text in enumerate(inputs):
        vector = hash_embedding(text, size)
        if body.get("encoding_format") == "base64":
            encoded: Any = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode()
        else:
            encoded = vector
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(len(_WORD.findall(t.lower())) for t in inputs)
    return 200, {
        "object": "list",
        "data": data,
        "model": body.get("model", "hashing-256"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@contextmanager
def fake_embeddings_server() -> Iterator[tuple[FakeEmbeddings, str]]:
    """A running endpoint on 127.0.0.1 (a free port) and its base URL (`.../v1`)."""
    fake = FakeEmbeddings()
    lock = threading.Lock()

    class Handler(JsonHandler):
        def do_POST(self) -> None:  # http.server's name
            try:
                body = self.read_json()
            except json.JSONDecodeError:
                body = None
            with lock:
                fake.headers = {}
                if isinstance(body, dict):
                    status, answer = _answer(fake, self.path, body)
                else:
                    status, answer = 400, _error("the body must be a JSON object")
                headers = fake.headers
            self.send_json(status, json.dumps(answer).encode(), headers)

    with serving(Handler) as url:
        yield fake, url

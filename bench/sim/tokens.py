"""Token counting for the scripted model's `usage`: a real tokenizer when one is installed.

`bpe-openai` (PyPI) wraps GitHub's `bpe-openai` Rust crate, whose wheels bundle the cl100k and
o200k vocabularies, so it counts offline (tiktoken itself downloads its vocabulary files at run
time, and this machine has no internet). `make sim` installs it; without it the counts are
estimates at 4 characters per token, and the report says so.

Chat prompts are counted the way OpenAI's cookbook counts them for gpt-4o-family models: 3 tokens
per message, plus its role and content, plus 3 to prime the reply; structured outputs add the
response schema, counted here as its compact JSON text.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any

ENCODING = "o200k_base"  # gpt-4o and gpt-4o-mini


@dataclass(frozen=True)
class Tokenizer:
    name: str
    exact: bool
    _encode: Any = None

    def count(self, text: str) -> int:
        if self._encode is None:
            return (len(text) + 3) // 4
        return len(self._encode(text))

    def chat_prompt(self, body: dict[str, Any]) -> int:
        n = 3
        for m in body.get("messages", []):
            n += 3 + self.count(str(m.get("role", ""))) + self.count(str(m.get("content") or ""))
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            n += self.count(json.dumps(fmt.get("json_schema", {}), separators=(",", ":")))
        return n

    def stable_prefix(self, body: dict[str, Any]) -> int:
        """Tokens of the prompt's part that is the same for every user and day: the response schema
        and the system message (the user message starts with the day's window)."""
        n = 3
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            n += self.count(json.dumps(fmt.get("json_schema", {}), separators=(",", ":")))
        for m in body.get("messages", []):
            if m.get("role") != "system":
                break
            n += 3 + self.count(str(m.get("role", ""))) + self.count(str(m.get("content") or ""))
        return n


def load_tokenizer(estimate: bool = False) -> Tokenizer:
    """The o200k_base tokenizer from bpe-openai, else a chars/4 estimate (or always, with `estimate`)."""
    if not estimate:
        try:
            with warnings.catch_warnings():  # it reads its bundled vocabularies with importlib.resources.open_binary
                warnings.simplefilter("ignore", DeprecationWarning)
                import bpe_openai

                enc = bpe_openai.get_encoding(ENCODING)
                enc.encode("warm-up")
        except ImportError:
            pass
        else:
            from importlib.metadata import version

            return Tokenizer(f"{ENCODING} (bpe-openai {version('bpe-openai')}, real tokenizer)", True, enc.encode)
    return Tokenizer("estimate: 4 characters per token (no tokenizer installed)", False)

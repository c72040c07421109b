"""The summarizer port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from user_memory.activity import Activity


@dataclass(frozen=True)
class SummaryResult:
    """The proposed next document (not yet validated) and what producing it cost."""

    document: dict[str, Any]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Summarizer(Protocol):
    """Turns the current memory document and a window's activity into the next document."""

    name: str

    def summarize(
        self, document: dict[str, Any], activities: list[Activity], *, feedback: str | None = None
    ) -> SummaryResult:
        """Propose the next document; `feedback` describes why the previous proposal was invalid."""
        ...

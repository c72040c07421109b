"""OpenAI (or any OpenAI-compatible endpoint) summarizer with structured outputs.

Strict structured outputs allow no free-form dict keys and require every field, so the model
sees `parts` as a list of objects with an `id`; we map to and from the stored shape
(`parts` keyed by id) here.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from user_memory.domain.model import Activity
from user_memory.domain.ports import SummaryResult
from user_memory.errors import InvalidDocument, SummarizerUnavailable, describe_validation_error

if TYPE_CHECKING:
    from user_memory.config import WorkerSettings

# One activity's line in the prompt is cut beyond this, with a marker saying how much was cut;
# how many lines go into one prompt is the pipeline's chunking (MAX_PROMPT_ACTIVITY_CHARS).
MAX_ACTIVITY_LINE_CHARS = 4_000


class _LLMGoal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str


class _LLMPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    status: str
    recency_score: float
    influence_score: float
    goals: list[_LLMGoal]


class _LLMTrigger(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trigger: str
    desired_outcome: str
    related_parts: list[str]


class LLMUserState(BaseModel):
    """The user-state document as the model sees it (parts as a list)."""

    model_config = ConfigDict(extra="forbid")
    summary: str
    parts: list[_LLMPart]
    triggers_and_goals: list[_LLMTrigger]
    safety_notes: str


def _strict(node: Any) -> Any:
    """Make a pydantic JSON schema acceptable to strict mode: closed objects, all fields required."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items() if k not in ("title", "default")}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out
    if isinstance(node, list):
        return [_strict(x) for x in node]
    return node


@cache
def response_schema() -> dict[str, Any]:
    return _strict(LLMUserState.model_json_schema())


@cache
def _prompt(name: str) -> str:
    return resources.files("user_memory.adapters").joinpath("prompts", name).read_text()


def to_llm_shape(document: dict[str, Any]) -> dict[str, Any]:
    """Stored document -> the list-of-parts shape the model reads and writes."""
    return {
        "summary": document.get("summary", ""),
        "parts": [{"id": pid, **{"goals": [], **part}} for pid, part in document.get("parts", {}).items()],
        "triggers_and_goals": document.get("triggers_and_goals", []),
        "safety_notes": document.get("safety_notes", ""),
    }


def from_llm_shape(data: dict[str, Any], previous: dict[str, Any], model: str) -> dict[str, Any]:
    """The model's output -> stored shape; duplicate part ids are an error."""
    parsed = LLMUserState.model_validate(data)
    parts: dict[str, Any] = {}
    for part in parsed.parts:
        if part.id in parts:
            raise InvalidDocument(f"parts: id {part.id!r} appears twice")
        parts[part.id] = part.model_dump(exclude={"id"})
    return {
        "version": previous.get("version", 1),
        "last_updated_by": model,
        "summary": parsed.summary,
        "parts": parts,
        "triggers_and_goals": [t.model_dump() for t in parsed.triggers_and_goals],
        "safety_notes": parsed.safety_notes,
    }


def _activity_line(a: Activity) -> str:
    line = json.dumps({"at": a.occurred_at.isoformat(), "kind": a.kind, **a.payload}, ensure_ascii=False)
    if len(line) > MAX_ACTIVITY_LINE_CHARS:
        cut = len(line) - MAX_ACTIVITY_LINE_CHARS
        line = f"{line[:MAX_ACTIVITY_LINE_CHARS]} [truncated: {cut:,} more characters]"
    return line


class OpenAISummarizer:
    """Summaries from an OpenAI-compatible chat completions endpoint with structured outputs."""

    name = "openai"

    def __init__(self, client: Any, *, model: str = "gpt-4o-mini", temperature: float = 0.2) -> None:
        self.client = client
        self.model = model
        self.temperature = temperature

    @classmethod
    def from_settings(cls, settings: WorkerSettings, *, api_key: str | None = None) -> OpenAISummarizer:
        client = openai.OpenAI(
            api_key=api_key or settings.openai_api_key or "not-needed-for-local-endpoints",
            base_url=settings.openai_base_url,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
        )
        return cls(client, model=settings.openai_model, temperature=settings.openai_temperature)

    def messages(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        feedback: str | None = None,
        window: tuple[datetime, datetime] | None = None,
    ) -> list[dict[str, str]]:
        span = (
            f"{window[0].isoformat()} to {window[1].isoformat()}"
            if window
            else (
                f"{activities[0].occurred_at.isoformat()} to {activities[-1].occurred_at.isoformat()}"
                if activities
                else "none"
            )
        )
        user = _prompt("user.txt").format(
            window=span,
            document=json.dumps(to_llm_shape(document), ensure_ascii=False, separators=(",", ":")),
            count=len(activities),
            activity="\n".join(_activity_line(a) for a in activities),
            feedback=f"\nYour previous answer was invalid: {feedback}\n" if feedback else "",
        )
        return [{"role": "system", "content": _prompt("system.txt")}, {"role": "user", "content": user}]

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        client = self.client.with_options(timeout=timeout) if timeout is not None else self.client
        try:
            response = client.chat.completions.create(
                model=self.model,
                temperature=self.temperature,
                messages=self.messages(document, activities, feedback),
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "user_memory", "strict": True, "schema": response_schema()},
                },
            )
        except openai.APITimeoutError as err:
            raise SummarizerUnavailable(
                f"the LLM endpoint timed out after {timeout or 'the client timeout'} s"
            ) from err
        except openai.APIConnectionError as err:
            raise SummarizerUnavailable("cannot reach the LLM endpoint") from err
        except openai.APIStatusError as err:
            raise SummarizerUnavailable(f"the LLM endpoint answered HTTP {err.status_code}") from err
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        if not response.choices:
            raise InvalidDocument("the model returned no choices")
        message = response.choices[0].message
        if getattr(message, "refusal", None):
            raise InvalidDocument("the model refused to answer")
        try:
            data = json.loads(message.content or "")
        except json.JSONDecodeError as err:
            raise InvalidDocument(f"the model's output is not JSON ({err.msg} at {err.pos})") from err
        try:
            next_document = from_llm_shape(data, document, self.model)
        except ValidationError as err:
            raise InvalidDocument(
                f"the model's output does not match the schema: {describe_validation_error(err)}"
            ) from err
        return SummaryResult(
            document=next_document,
            model=self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

"""OpenAI (or any OpenAI-compatible endpoint) summarizer with structured outputs.

Strict structured outputs allow no free-form dict keys and require every field, so the model
sees `parts` as a list of objects with an `id`; we map to and from the stored shape
(`parts` keyed by id) here.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from user_memory.domain.model import Activity
from user_memory.domain.pipeline import activity_line
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
    line = activity_line(a)
    if len(line) > MAX_ACTIVITY_LINE_CHARS:
        cut = len(line) - MAX_ACTIVITY_LINE_CHARS
        line = f"{line[:MAX_ACTIVITY_LINE_CHARS]} [truncated: {cut:,} more characters]"
    return line


class OpenAISummarizer:
    """Summaries from an OpenAI-compatible chat completions endpoint with structured outputs."""

    name = "openai"

    def __init__(
        self,
        client: Any,
        *,
        model: str = "gpt-4o-mini",
        temperature: float = 0.2,
        timeout: float = 25.0,
        max_retries: int = 1,
        sleep: Any = time.sleep,
    ) -> None:
        self.client = client
        self.model = model
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep

    @classmethod
    def from_settings(cls, settings: WorkerSettings, *, api_key: str | None = None) -> OpenAISummarizer:
        client = openai.OpenAI(
            api_key=api_key or settings.openai_api_key or "not-needed-for-local-endpoints",
            base_url=settings.openai_base_url,
            timeout=settings.openai_timeout_seconds,
            # Retries are ours (below): the client's own would wait out any Retry-After, however
            # long, past the time the invocation has.
            max_retries=0,
        )
        return cls(
            client,
            model=settings.openai_model,
            temperature=settings.openai_temperature,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
        )

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
        response = self._complete(self.messages(document, activities, feedback), timeout)
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

    def _complete(self, messages: list[dict[str, str]], timeout: float | None) -> Any:
        """One chat completion with at most max_retries retries (429, 5xx, timeouts, connection
        errors), every try and every wait inside `timeout` seconds in all."""
        ends = None if timeout is None else time.monotonic() + timeout
        for attempt in range(self.max_retries + 1):
            left = None if ends is None else ends - time.monotonic()
            per_try = self.timeout if left is None else min(self.timeout, left)
            try:
                return self.client.with_options(timeout=per_try, max_retries=0).chat.completions.create(
                    model=self.model,
                    temperature=self.temperature,
                    messages=messages,
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": "user_memory", "strict": True, "schema": response_schema()},
                    },
                )
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as err:
                failure = _unavailable(err, per_try)
                wait = _retry_after(err, attempt)
                last_try = attempt == self.max_retries
                if last_try or (ends is not None and time.monotonic() + wait >= ends):
                    raise failure from err
                self.sleep(wait)
            except openai.APIStatusError as err:
                raise _unavailable(err, per_try) from err
        raise SummarizerUnavailable("no try of the LLM call was made")  # pragma: no cover - max_retries >= 0


def _unavailable(err: Exception, per_try: float) -> SummarizerUnavailable:
    if isinstance(err, openai.APITimeoutError):
        return SummarizerUnavailable(f"the LLM endpoint timed out after {per_try:.1f} s")
    if isinstance(err, openai.APIConnectionError):
        return SummarizerUnavailable("cannot reach the LLM endpoint")
    status = getattr(err, "status_code", "?")
    return SummarizerUnavailable(f"the LLM endpoint answered HTTP {status}")


def _retry_after(err: Exception, attempt: int) -> float:
    """The server's Retry-After (capped at 20 s), else exponential backoff from 0.5 s."""
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return min(20.0, max(0.0, float(value) * scale))
            except ValueError:
                break
    return min(8.0, 0.5 * 2**attempt)

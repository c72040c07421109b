"""OpenAI (or any OpenAI-compatible endpoint) summarizer with structured outputs.

Two modes (SUMMARY_MODE):

- edit (default): the model answers with a list of edits to the current document (strict
  structured output `memory_edits`: op, path, value as JSON text, one-line reason); the pipeline
  checks, applies and validates them (domain/summary/edits.py). The completion is the size of the change,
  not of the document, and a part the model did not mention cannot be dropped by omission.
- document: the model answers with the whole updated document (`user_memory`).

Strict structured outputs allow no free-form dict keys and require every field, so the model
sees `parts` as a list of objects with an `id`; we map to and from the stored shape
(`parts` keyed by id) here. Edit paths address a part by its id (/parts/<id>), which is the
stored shape's own path.

The prompt: the response schema and the system message (instructions and the mode's rules, the
same bytes for every user and day, so an endpoint that caches prompt prefixes reuses them) come
first; then the user message with the document's view once (domain/summary/view.py: the summary,
the safety notes and the parts and triggers the activity names, as compact JSON between a line
`<memory>` and a line `</memory>`; the other parts' ids and names and the triggers' count between
`<outline>` and `</outline>`), and the activity between `<activity>` and `</activity>`, one
compact line per activity (`prompt_line`), identical lines once, at most
`max_prompt_activity_tokens` of them (the oldest left out, and the prompt says how many). A
retry's feedback comes last, so the rest is a prefix of the first try. In document mode the
answer is the shown document updated, merged back into the whole (view.merge_answer).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from user_memory.adapters import openai_calls as calls
from user_memory.domain.model import DEFAULT_MAX_PROMPT_ACTIVITY_TOKENS, Activity
from user_memory.domain.ports import SummaryResult
from user_memory.domain.summary.edits import parse_edits
from user_memory.domain.summary.pipeline import (
    PromptActivity,
    SummaryMode,
    prompt_activity,
    tokens_for_chars,
)
from user_memory.domain.summary.view import PromptView, merge_answer, prompt_view
from user_memory.errors import InvalidDocument, join_problems

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


class _LLMEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: Literal["add", "replace", "remove"]
    path: str
    value_json: str
    reason: str


class LLMEdits(BaseModel):
    """The edit-mode answer: edits to the document, applied in order."""

    model_config = ConfigDict(extra="forbid")
    edits: list[_LLMEdit]


# The json_schema name each mode's response_format carries.
RESPONSE_NAMES: dict[str, str] = {"edit": "memory_edits", "document": "user_memory"}
_SYSTEM_PROMPTS = {"edit": "system_edit.txt", "document": "system.txt"}
# Edit mode's instructions per schema (the edits themselves are checked against any schema).
_EDIT_PROMPTS = {"user_state": "system_edit.txt", "companion": "system_edit_companion.txt"}
_TASKS = {
    "edit": "Return the edits that bring the document up to date (an empty list when nothing should change).",
    "document": "Return the complete updated document.",
}


@cache
def response_schema() -> dict[str, Any]:
    """The whole-document answer's schema (document mode)."""
    return calls.strict_schema(LLMUserState.model_json_schema())


@cache
def edits_schema() -> dict[str, Any]:
    """The edit-mode answer's schema."""
    return calls.strict_schema(LLMEdits.model_json_schema())


def response_format(mode: SummaryMode) -> dict[str, Any]:
    """The chat completion's response_format for a mode (strict structured output)."""
    schema = edits_schema() if mode == "edit" else response_schema()
    return {"type": "json_schema", "json_schema": {"name": RESPONSE_NAMES[mode], "strict": True, "schema": schema}}


@cache
def _prompt(name: str) -> str:
    return resources.files("user_memory.adapters").joinpath("prompts", name).read_text()


def to_llm_shape(document: dict[str, Any]) -> dict[str, Any]:
    """Stored document -> the list-of-parts shape the model reads and writes."""
    return {
        "summary": document.get("summary", ""),
        "parts": [
            {"id": pid, **part, "goals": part.get("goals", [])} for pid, part in document.get("parts", {}).items()
        ],
        "triggers_and_goals": document.get("triggers_and_goals", []),
        "safety_notes": document.get("safety_notes", ""),
    }


def from_llm_shape(data: dict[str, Any], previous: dict[str, Any], model: str) -> dict[str, Any]:
    """The model's output -> stored shape; duplicate part ids are an error (each one named)."""
    parsed = LLMUserState.model_validate(data)
    parts: dict[str, Any] = {}
    twice: list[str] = []
    for part in parsed.parts:
        if part.id in parts:
            twice.append(f"parts: id {part.id!r} appears twice")
        parts[part.id] = part.model_dump(exclude={"id"})
    if twice:
        raise InvalidDocument(join_problems(list(dict.fromkeys(twice))))
    return {
        "version": previous.get("version", 1),
        "last_updated_by": model,
        "summary": parsed.summary,
        "parts": parts,
        "triggers_and_goals": [t.model_dump() for t in parsed.triggers_and_goals],
        "safety_notes": parsed.safety_notes,
    }


# Compact JSON for the prompt's activity lines: the spaces after "," and ":" are a token each.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def prompt_time(t: datetime) -> str:
    """A time as the prompt writes it: 2026-11-04T13:10Z for a whole minute in UTC, else ISO 8601."""
    if t.utcoffset() == timedelta(0) and not t.second and not t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%MZ")
    return t.isoformat()


def prompt_line(a: Activity) -> str:
    """An activity's line in the prompt: the pipeline's activity_line written compactly, cut
    beyond MAX_ACTIVITY_LINE_CHARS with a marker."""
    extra = {k: v for k, v in a.payload.items() if k not in ("at", "kind")}
    # the same object as the pipeline's activity_line, written compactly
    line = _COMPACT.encode({"at": prompt_time(a.occurred_at), "kind": a.kind, **extra})
    if len(line) > MAX_ACTIVITY_LINE_CHARS:
        cut = len(line) - MAX_ACTIVITY_LINE_CHARS
        line = f"{line[:MAX_ACTIVITY_LINE_CHARS]} [truncated: {cut:,} more characters]"
    return line


class Prepared(NamedTuple):
    """What a request was built from that reading its answer needs: the activity block's merges
    and cuts, and the view of the document the prompt showed (a partial answer merges back)."""

    lines: PromptActivity
    view: PromptView


class OpenAISummarizer(calls.ChatCaller):
    """Summaries from an OpenAI-compatible chat completions endpoint with structured outputs.

    Keyword arguments beyond the mode, the prompt's activity budget and the schema are the call's
    (`ChatCaller`: model, temperature, timeout, max_retries, sleep)."""

    leaves_input_unchanged = True  # it reads the document into the prompt (ports.Summarizer)
    answers_json_values = True  # the parsed answer and the head (ports.Summarizer)

    def __init__(
        self,
        client: Any,
        *,
        mode: SummaryMode = "edit",
        max_prompt_activity_tokens: int = DEFAULT_MAX_PROMPT_ACTIVITY_TOKENS,
        schema: str = "user_state",
        **call: Any,
    ) -> None:
        if mode not in RESPONSE_NAMES:
            raise ValueError(f"mode must be one of {', '.join(RESPONSE_NAMES)}, got {mode!r}")
        if schema not in _EDIT_PROMPTS or (mode == "document" and schema != "user_state"):
            raise ValueError(
                f"the OpenAI summarizer knows the schemas {', '.join(_EDIT_PROMPTS)} in edit mode and user_state in "
                f"document mode, not {schema!r} in {mode} mode"
            )
        super().__init__(client, **call)
        self.schema = schema
        self.mode: SummaryMode = mode
        self.max_prompt_activity_tokens = max_prompt_activity_tokens

    @classmethod
    def from_settings(cls, settings: WorkerSettings, *, api_key: str | None = None) -> OpenAISummarizer:
        return cls(
            calls.chat_client(settings, api_key=api_key),
            mode=settings.summary_mode,
            max_prompt_activity_tokens=settings.max_prompt_activity_tokens,
            schema=settings.document_schema,
            **cls.settings_of(settings),
        )

    def messages(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        feedback: str | None = None,
        window: tuple[datetime, datetime] | None = None,
    ) -> list[dict[str, str]]:
        """The chat messages for one call (see prompt)."""
        return self.prompt(document, activities, feedback, window)[0]

    def prompt(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        feedback: str | None = None,
        window: tuple[datetime, datetime] | None = None,
    ) -> tuple[list[dict[str, str]], PromptActivity]:
        """The chat messages for one call, and what the activity block merged and left out."""
        messages, lines, _ = self._prompt_and_view(document, activities, feedback, window)
        return messages, lines

    def _prompt_and_view(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        feedback: str | None = None,
        window: tuple[datetime, datetime] | None = None,
    ) -> tuple[list[dict[str, str]], PromptActivity, PromptView]:
        """The chat messages, what the activity block merged and left out, and the document's view.

        The system message is the mode's fixed instructions; the user message carries the view of
        the document once (domain/summary/view.py: what the activity touches in full, an outline of
        the rest), the activity once, then the feedback of a retry.
        """
        span = (
            f"{prompt_time(window[0])} to {prompt_time(window[1])}"
            if window
            else (
                f"{prompt_time(activities[0].occurred_at)} to {prompt_time(activities[-1].occurred_at)}"
                if activities
                else "none"
            )
        )
        lines = prompt_activity(activities, self.max_prompt_activity_tokens, render=prompt_line)
        view = prompt_view(document, activities, self.schema)
        answer = "edits" if self.mode == "edit" else "answer"
        outline = view.outline()
        user = _prompt("user.txt").format(
            window=span,
            document=json.dumps(
                to_llm_shape(view.document) if self.schema == "user_state" else view.document,
                ensure_ascii=False,
                separators=(",", ":"),
            ),
            outline=f"<outline>\n{outline}\n</outline>\n" if outline else "",
            count=len(lines.lines),
            merged=f"; {lines.duplicates} repeated lines merged" if lines.duplicates else "",
            activity="\n".join(lines.lines),
            cut=f"{lines.cut} older activities were left out to fit the prompt's budget.\n" if lines.cut else "",
            feedback=f"\nYour previous {answer} could not be used: {feedback}\n" if feedback else "",
            task=_TASKS[self.mode],
        )
        system = _prompt(_SYSTEM_PROMPTS[self.mode] if self.mode == "document" else _EDIT_PROMPTS[self.schema])
        return [{"role": "system", "content": system}, {"role": "user", "content": user}], lines, view

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        body, prepared = self.request(document, activities, feedback)
        response = self.complete(body["messages"], body["response_format"], timeout)
        return self.read_answer(response, body["messages"], prepared, document)

    def request(
        self, document: dict[str, Any], activities: list[Activity], feedback: str | None = None
    ) -> tuple[dict[str, Any], Prepared]:
        """One call's chat completion body (model, temperature, messages, response_format), and
        what its activity block merged and left out with the document's view: the online call and
        a batch's line alike."""
        messages, lines, view = self._prompt_and_view(document, activities, feedback)
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": messages,
            "response_format": response_format(self.mode),
        }
        return body, Prepared(lines, view)

    def read_answer(
        self, response: Any, messages: list[dict[str, str]], prepared: Prepared, document: dict[str, Any]
    ) -> SummaryResult:
        """The checked answer of a chat completion (online, or a batch's output line): its
        tokens, and the edits or document it holds (InvalidDocument, with its cost, when unusable)."""
        lines, view = prepared
        prompt_tokens, completion_tokens, cached = calls.usage_tokens(response)
        if not prompt_tokens:  # an endpoint that reports no usage: the estimate
            prompt_tokens = tokens_for_chars(sum(len(m["content"]) for m in messages))

        def result(**what: Any) -> SummaryResult:
            return SummaryResult(
                model=self.model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cached_prompt_tokens=cached,
                activity_cut=lines.cut,
                activity_duplicates=lines.duplicates,
                **what,
            )

        with calls.paid_answer(prompt_tokens, completion_tokens):  # the pipeline asks again
            data = calls.answer_json(response)
            if self.mode == "edit":
                items = data.get("edits") if isinstance(data, dict) and set(data) == {"edits"} else None
                if not isinstance(items, list):
                    LLMEdits.model_validate(data)  # the answer's shape is wrong as a whole: that error
                # Each item on its own, so the edits that do match are still checked (parse_edits).
                return result(edits=parse_edits(items or [], shape=_LLMEdit))
            return result(document=merge_answer(document, view, from_llm_shape(data, document, self.model)))

"""`user-memory chat`: a conversational agent with a memory, to try the memory tools by hand.

Each turn, `ChatAgent` reads the user's CURRENT memory (one session), renders it into the
system prompt within a token budget, and asks the configured OpenAI-compatible endpoint for
an answer with the `update_memory` / `forget_memory` tools. Every tool call the model makes is
written through `MemoryService.tool_call` (one session per call: a new version with source
`agent:<tool>`), its result goes back to the model, and the loop ends when the model answers
without tool calls (at most MAX_TOOL_ROUNDS rounds of tool calls per turn).

Configuration comes from the environment like the worker's: OPENAI_API_KEY and/or
OPENAI_BASE_URL (one of them is required), OPENAI_MODEL, OPENAI_TEMPERATURE (unset: the
model's default), OPENAI_TIMEOUT_SECONDS, OPENAI_MAX_RETRIES; DOCUMENT_SCHEMA for the memory.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from pydantic import Field, model_validator
from user_memory.config import ApiSettings
from user_memory.domain.memory.agent import tool_definitions
from user_memory.domain.memory.render import render_memory
from user_memory.domain.service import Sessions
from user_memory.errors import (
    InvalidDocument,
    InvalidToolCall,
    InvalidUpdate,
    PatchError,
    UnknownSection,
    VersionConflict,
)

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_TOOL_ROUNDS",
    "ChatAgent",
    "ChatSettings",
    "describe_model_error",
    "openai_client",
    "run_chat",
]

DEFAULT_BUDGET = 800
MAX_TOOL_ROUNDS = 5
QUIT = "/quit"

# What a tool call can get wrong: told to the model (it can try again), never raised.
TOOL_ERRORS = (InvalidToolCall, UnknownSection, InvalidUpdate, InvalidDocument, PatchError, VersionConflict)

INSTRUCTIONS = """\
You are a helpful assistant who remembers this user across conversations.

What you remember about the user (memory version {version}):
{memory}

Use the update_memory tool when the user tells you something worth keeping, or when you notice something \
lasting about them (for example a mistake they keep making, or something they have mastered). Use forget_memory \
when they ask you to forget something or it is no longer true. Keep the memory short and factual, never store \
secrets, and do not mention these tools unless asked."""


class ChatSettings(ApiSettings):
    """The API's settings (database, schema) and the model endpoint's, from the environment."""

    openai_api_key: str | None = Field(default=None, repr=False)
    openai_base_url: str | None = None
    openai_model: str = Field(default="gpt-4o-mini", min_length=1)
    openai_temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    openai_timeout_seconds: float = Field(default=60.0, gt=0)
    openai_max_retries: int = Field(default=2, ge=0, le=10)

    @model_validator(mode="after")
    def _has_endpoint(self) -> ChatSettings:
        if not (self.openai_api_key or self.openai_base_url):
            raise ValueError(
                "chat needs a model: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (a compatible endpoint)"
            )
        return self


def openai_client(settings: ChatSettings) -> Any:
    """The `openai` client for the configured endpoint, each call bounded by wall clock
    (user_memory.adapters.openai_calls); the agent retries (OPENAI_MAX_RETRIES) itself."""
    from user_memory.adapters.openai_calls import openai_client as bounded_client

    return bounded_client(
        api_key=settings.openai_api_key, base_url=settings.openai_base_url, timeout=settings.openai_timeout_seconds
    )


def describe_model_error(err: BaseException) -> str | None:
    """One line for a failed model call (never the request or the answer), or None when `err`
    is not the `openai` client's."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return "the model endpoint timed out"
    if isinstance(err, openai.APIConnectionError):
        return "cannot reach the model endpoint (check OPENAI_BASE_URL)"
    if isinstance(err, openai.APIStatusError):
        hint = " (check OPENAI_API_KEY)" if err.status_code in (401, 403) else ""
        return f"the model endpoint answered HTTP {err.status_code}{hint}"
    if isinstance(err, openai.OpenAIError):
        return f"the model call failed ({type(err).__name__})"
    return None


def _as_raised(err: Exception, _per_try: float) -> Exception:
    """The chat reports the openai client's own errors (describe_model_error)."""
    return err


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


class ChatAgent:
    """A conversation with one user, whose memory it reads every turn and edits with tools.

    `messages` holds the conversation in chat-completions form; its first message is the
    system prompt of the latest turn. A turn that fails leaves `messages` as it was.
    """

    def __init__(
        self,
        *,
        client: Any,
        model: str,
        services: Sessions,
        user_id: uuid.UUID,
        schema: str,
        budget: int = DEFAULT_BUDGET,
        temperature: float | None = None,
        max_tool_rounds: int = MAX_TOOL_ROUNDS,
        instructions: str = INSTRUCTIONS,
        timeout: float = 60.0,
        max_retries: int = 0,
        include_sensitive: bool = False,
    ) -> None:
        if budget < 0:
            raise ValueError("budget must be a non-negative number of tokens")
        self.client = client
        self.model = model
        self.services = services
        self.user_id = user_id
        self.schema = schema
        self.budget = budget
        self.temperature = temperature
        self.max_tool_rounds = max_tool_rounds
        self.instructions = instructions
        self.timeout = timeout  # seconds of wall clock per try of a model call
        self.max_retries = max_retries
        self.include_sensitive = include_sensitive  # PROMPT_INCLUDE_SENSITIVE
        self.tools = tool_definitions(schema)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": ""}]
        # Tool calls are idempotent per id; endpoints do not all make ids unique across
        # conversations, so each is qualified with this conversation's id.
        self.conversation_id = uuid.uuid4().hex

    def system_prompt(self) -> str:
        """The instructions with the memory as it is now (read in its own session)."""
        with self.services.session(self.user_id) as service:
            head = service.read()
            memory = render_memory(
                service.prompt_view(head.document),
                self.budget,
                schema=service.schema,
                include_sensitive=self.include_sensitive,
            )
        return self.instructions.format(version=head.version, memory=memory or "(nothing yet)")

    def turn(self, text: str) -> str:
        """The model's answer to `text`, after running every memory tool call it makes."""
        start = len(self.messages)
        try:
            self.messages[0] = {"role": "system", "content": self.system_prompt()}
            self.messages.append({"role": "user", "content": text})
            for round_ in range(self.max_tool_rounds + 1):
                last = round_ == self.max_tool_rounds  # no more tool calls: the model must answer
                message = self._complete(tool_choice="none" if last else "auto")
                calls = list(_field(message, "tool_calls") or [])
                if not calls or last:
                    reply = _field(message, "content") or ""
                    self.messages.append({"role": "assistant", "content": reply})
                    return str(reply)
                self.messages.append(
                    {
                        "role": "assistant",
                        "content": _field(message, "content"),
                        "tool_calls": [_wire(c) for c in calls],
                    }
                )
                for call in calls:
                    result = self.run_tool_call(call)
                    self.messages.append(
                        {"role": "tool", "tool_call_id": _field(call, "id"), "content": json.dumps(result)}
                    )
            raise AssertionError("unreachable")  # pragma: no cover - the last round returns
        except BaseException:
            del self.messages[start:]
            raise

    def run_tool_call(self, call: Any) -> dict[str, Any]:
        """One tool call written in its own session: {"version", "status"}, or {"error"} for
        what the model got wrong (storage failures are raised)."""
        function = _field(call, "function")
        if function is None:
            return {"error": "only function tool calls are supported"}
        qualified = {
            "id": f"chat:{self.conversation_id}:{_field(call, 'id')}",
            "type": "function",
            "function": {"name": _field(function, "name"), "arguments": _field(function, "arguments")},
        }
        try:
            with self.services.session(self.user_id) as service:
                result = service.tool_call(qualified)
        except TOOL_ERRORS as err:
            return {"error": (str(err).strip().splitlines() or [type(err).__name__])[0][:500]}
        return {"version": result.version, "status": result.status.value}

    def _complete(self, *, tool_choice: str) -> Any:
        from user_memory.adapters.openai_calls import call_within

        extra: dict[str, Any] = {} if self.temperature is None else {"temperature": self.temperature}

        def create(per_try: float) -> Any:
            return self.client.with_options(timeout=per_try, max_retries=0).chat.completions.create(
                model=self.model, messages=self.messages, tools=self.tools, tool_choice=tool_choice, **extra
            )

        response = call_within(
            create, timeout=self.timeout, max_retries=self.max_retries, budget=None, failure=_as_raised
        )
        if not response.choices:
            raise RuntimeError("the model endpoint answered without a choice")
        return response.choices[0].message


def _wire(call: Any) -> dict[str, Any]:
    """A tool call as the assistant message that made it carries it back to the model."""
    function = _field(call, "function")
    return {
        "id": _field(call, "id"),
        "type": "function",
        "function": {"name": _field(function, "name"), "arguments": _field(function, "arguments")},
    }


def run_chat(agent: ChatAgent, lines: Iterable[str], *, out: TextIO, err: TextIO, prompt: bool = False) -> int:
    """Answer each line until the end of input or /quit; a failed turn is one `error:` line on
    `err` and the conversation goes on. Returns 1 when a turn failed, else 0."""
    failed = False
    remaining = iter(lines)
    if prompt:
        print(f"Chatting as user {agent.user_id}; {QUIT} or Ctrl-D to end.", file=err)
    while True:
        if prompt:
            print("> ", end="", file=err, flush=True)
        line = next(remaining, None)
        if line is None or line.strip() == QUIT:
            return 1 if failed else 0
        text = line.strip()
        if not text:
            continue
        try:
            reply = agent.turn(text)
        except Exception as exc:  # one line per failed turn; the chat goes on
            message = describe_model_error(exc) or (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
            print(f"error: {message}", file=err, flush=True)
            failed = True
            continue
        print(reply, file=out, flush=True)


def stdin_lines() -> Iterable[str]:
    """Lines of stdin, read one at a time (an iterator: `run_chat` takes one per turn)."""
    return iter(sys.stdin.readline, "")


def main(user_id: uuid.UUID, *, budget: int, database_url: Callable[[], str]) -> int:
    """The `chat` command: configuration first (no model configured is one error before
    anything starts), then the database (`database_url()` gives the DSN), then the conversation
    on stdin and stdout."""
    from user_memory.domain.memory.document import get_schema
    from user_memory.runtime import build_api

    settings = ChatSettings.from_env()
    get_schema(settings.document_schema)
    client = openai_client(settings)
    services = build_api(settings.model_copy(update={"database_url": database_url()}))
    try:
        agent = ChatAgent(
            client=client,
            model=settings.openai_model,
            services=services,
            user_id=user_id,
            schema=settings.document_schema,
            budget=budget,
            temperature=settings.openai_temperature,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
            include_sensitive=settings.prompt_include_sensitive,
        )
        return run_chat(agent, stdin_lines(), out=sys.stdout, err=sys.stderr, prompt=sys.stdin.isatty())
    finally:
        services.close()

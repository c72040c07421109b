"""`user-memory mcp`: one user's memory as an MCP server over stdio, for agents and IDEs.

The user is fixed when the server starts, from the `sub` of a verified development token
(`user-memory token USER_ID`); nothing a client sends can change it. Every tool call is one
database transaction as that end user (row-level security applies), through the same
`MemoryService` the HTTP API uses:

- `read_memory(budget_tokens)`: the memory rendered for a prompt (`render_memory`) within
  `budget_tokens` tokens (as `GET /me/memory/prompt`), and its version;
- `search_memory(query, k)`: the best-matching items of the memory;
- `update_memory(section, mode, value_json)` and `forget_memory(target)`: the agent tools of
  `user_memory.domain.memory.agent`, written as a new version with source `agent:<tool>`, idempotent
  per MCP request.

Domain errors (a bad section, an update that does not fit, a conflict) and arguments a tool
does not take (the SDK would drop them silently) come back as MCP tool errors with a one-line
message; the server keeps serving. Tools are registered from
`MCP_TOOLS`: a tool is a method on `MemoryTools` plus one entry there (read_memory, search_memory,
update_memory, forget_memory).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import Field
from user_memory.domain.memory.agent import FORGET_TOOL, UPDATE_TOOL, tool_definitions
from user_memory.domain.memory.document import section_names
from user_memory.domain.memory.render import DEFAULT_RENDER_BUDGET, MAX_RENDER_BUDGET, render_memory
from user_memory.domain.service import Sessions
from user_memory.errors import InvalidArgument, Unauthenticated, UserMemoryError

from user_memory_local.command import cli_command
from user_memory_local.tokens import TOKEN_ENV, token_secret, verify_token

__all__ = [
    "MCP_TOOLS",
    "MemoryTools",
    "McpTool",
    "StrictTool",
    "authenticate",
    "build_server",
    "run",
    "serve",
    "stdout_to_stderr",
]

SERVER_NAME = "user-memory"


def _one_line(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [""])[0].strip()[:500]
    return text or type(err).__name__


class MemoryTools:
    """The tools' implementations for one user; each call is one session (one transaction).

    Sync on purpose: the MCP server runs sync tools on a worker thread, so database calls
    never block its event loop.
    """

    def __init__(self, services: Sessions, user_id: uuid.UUID, *, schema: str, include_sensitive: bool = False) -> None:
        self.services = services
        self.user_id = user_id
        self.schema = schema
        self.include_sensitive = include_sensitive  # PROMPT_INCLUDE_SENSITIVE
        # Tool calls are idempotent per id (key api:tool:<id>), and JSON-RPC request ids restart
        # at 0 with every connection: the id is this server's run plus the request's id.
        self.run_id = uuid.uuid4().hex

    def call_id(self, ctx: Context | None) -> str:
        """A tool call id unique to one MCP request (of this server run)."""
        try:
            request_id = ctx.request_id if ctx is not None else None
        except (AttributeError, LookupError, ValueError):  # outside a request: no id to reuse
            request_id = None
        return f"mcp:{self.run_id}:{request_id if request_id not in (None, '') else uuid.uuid4().hex}"

    def read_memory(
        self,
        budget_tokens: Annotated[
            int,
            Field(
                ge=1,
                le=MAX_RENDER_BUDGET,
                description="the most tokens the memory may take (about 4 characters each)",
            ),
        ] = DEFAULT_RENDER_BUDGET,
    ) -> dict[str, Any]:
        """What you remember about this user, as labeled lines cut to a token budget, and its version."""
        with self._errors(), self.services.session(self.user_id) as service:
            head = service.read()
            memory = render_memory(
                service.prompt_view(head.document),
                budget_tokens,
                schema=service.schema,
                include_sensitive=self.include_sensitive,
            )
        return {"version": head.version, "memory": memory}

    def update_memory(
        self,
        section: Annotated[str, Field(description="the section to update")],
        mode: Annotated[
            Literal["merge", "replace", "append"],
            Field(
                description=(
                    "merge: an object merged into the section (nested objects merge, null deletes a key, lists are "
                    "replaced, unnamed keys are kept); replace: the new section whole; append: for a list section "
                    "an item or a list of items to add at the end, for an object section an object of lists to extend"
                )
            ),
        ],
        value_json: Annotated[
            str, Field(description='the value as JSON text, for example {"timezone": "Europe/Paris"}')
        ],
        ctx: Context,
    ) -> dict[str, Any]:
        """Update one section of the memory (see the tool description for the sections)."""
        arguments = {"section": section, "mode": mode, "value_json": value_json}
        return self._tool_call(UPDATE_TOOL, arguments, ctx)

    def forget_memory(
        self,
        target: Annotated[
            str,
            Field(
                description=(
                    'a section name or a JSON Pointer into one: "/<section>/<index>" for an item of a list section, '
                    '"/<section>/<key>" for a member of an object section'
                )
            ),
        ],
        ctx: Context,
    ) -> dict[str, Any]:
        """Forget a whole section (it becomes empty) or one member or list item inside it."""
        return self._tool_call(FORGET_TOOL, {"target": target}, ctx)

    def search_memory(
        self,
        query: Annotated[str, Field(min_length=1, max_length=500, description="what to look for, in plain words")],
        k: Annotated[int, Field(ge=1, le=50, description="how many items")] = 5,
    ) -> dict[str, Any]:
        """Find the items of the memory (facts, goals, to-dos, events, ...) that best match a query, each with its
        JSON Pointer (usable with forget_memory) and the version that last changed it."""
        with self._errors({"q": "query"}), self.services.session(self.user_id) as service:
            result = service.search(query, k)
        return {
            "mode": result.mode,
            "items": [{"path": h.path, "version": h.version, "text": h.text, "score": h.score} for h in result.hits],
        }

    def _tool_call(self, name: str, arguments: dict[str, Any], ctx: Context | None) -> dict[str, Any]:
        call = {
            "id": self.call_id(ctx),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
        }
        with self._errors(), self.services.session(self.user_id) as service:
            result = service.tool_call(call)
        return {"version": result.version, "status": result.status.value}

    @contextmanager
    def _errors(self, names: Mapping[str, str] | None = None) -> Iterator[None]:
        """Domain errors (InvalidToolCall, UnknownSection, InvalidUpdate, InvalidDocument,
        PatchError, VersionConflict, ...) and storage errors become tool errors: one line for
        the model, no traceback, the server keeps serving; an argument is called as the tool calls
        it (`names`: the API's name to the tool's). Anything else is a crash the SDK reports as such."""
        try:
            yield
        except InvalidArgument as err:
            raise ToolError(err.named(names or {})[:500]) from None
        except UserMemoryError as err:
            raise ToolError(_one_line(err)) from None


@dataclass(frozen=True, kw_only=True)
class McpTool:
    """One tool the server offers: its name, the `MemoryTools` method, and its description
    (from the schema, or the method's docstring when None)."""

    name: str
    method: Callable[[MemoryTools], Callable[..., Any]]
    describe: Callable[[str], str] | None = None
    read_only: bool = False


def _update_description(schema: str) -> str:
    return str(tool_definitions(schema)[0]["function"]["description"])


def _forget_description(schema: str) -> str:
    return f"{tool_definitions(schema)[1]['function']['description']} Sections: {', '.join(section_names(schema))}."


# The tools the server registers, in this order. A new tool is a MemoryTools method and one
# McpTool entry here.
MCP_TOOLS: list[McpTool] = [
    McpTool(name="read_memory", method=lambda tools: tools.read_memory, read_only=True),
    McpTool(name="search_memory", method=lambda tools: tools.search_memory, read_only=True),
    McpTool(name=UPDATE_TOOL, method=lambda tools: tools.update_memory, describe=_update_description),
    McpTool(name=FORGET_TOOL, method=lambda tools: tools.forget_memory, describe=_forget_description),
]


class StrictTool(Tool):
    """A tool that refuses arguments it does not take, with one line naming them and what it takes
    (the SDK's argument model would drop them silently: a misspelt `budget` read as the default).
    Its input schema says so too (`additionalProperties: false`)."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        known = {field.alias or name for name, field in self.fn_metadata.arg_model.model_fields.items()}
        unknown = sorted(str(name) for name in arguments if name not in known)
        if unknown:
            names = ", ".join(repr(name[:64]) for name in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            takes = ", ".join(sorted(known)) or "no arguments"
            raise ToolError(f"{self.name} does not take {names}; it takes: {takes}")
        return await super().run(arguments, context, convert_result=convert_result)


def build_server(
    services: Sessions,
    user_id: uuid.UUID,
    *,
    schema: str,
    tools: list[McpTool] | None = None,
    include_sensitive: bool = False,
) -> MCPServer:
    """An MCP server offering `tools` (default MCP_TOOLS) on `user_id`'s memory; `include_sensitive`
    lets read_memory render the schema's sensitive fields (PROMPT_INCLUDE_SENSITIVE)."""
    from mcp.types import ToolAnnotations

    implementation = MemoryTools(services, user_id, schema=schema, include_sensitive=include_sensitive)
    strict: list[Tool] = []
    for tool in MCP_TOOLS if tools is None else tools:
        made = StrictTool.from_function(
            tool.method(implementation),
            name=tool.name,
            description=tool.describe(schema) if tool.describe else None,
            annotations=ToolAnnotations(read_only_hint=tool.read_only, destructive_hint=not tool.read_only),
        )
        made.parameters["additionalProperties"] = False
        strict.append(made)
    return MCPServer(
        SERVER_NAME,
        instructions=(
            "The memory of one user of this product: read it before you personalize an answer, update it when "
            "the user tells you something worth keeping, forget what they ask you to forget."
        ),
        log_level="WARNING",
        tools=strict,
    )


def authenticate(token: str | None) -> uuid.UUID:
    """The user of --token, else of $USER_MEMORY_TOKEN, verified with the development secret.

    Raises Unauthenticated with a one-line reason (never the token).
    """
    from user_memory_local.embedded import user_memory_home

    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None:
        hint = f"`{cli_command()} token USER_ID`"
        raise Unauthenticated(f"no token: pass --token or set {TOKEN_ENV} (get one with {hint})")
    try:
        claims = verify_token(token, secret=token_secret(user_memory_home()))
    except Unauthenticated as err:
        raise Unauthenticated(f"invalid token: {err}") from None
    return uuid.UUID(claims["sub"])


def run(user_id: uuid.UUID, *, database_url: Callable[[], str]) -> None:
    """Check the configuration, connect (`database_url()` gives the DSN: the CLI's selection,
    DATABASE_URL or the embedded server), then serve `user_id`'s memory over stdio."""
    from user_memory.config import ApiSettings
    from user_memory.domain.memory.document import get_schema
    from user_memory.runtime import build_api

    settings = ApiSettings.from_env()  # a bad setting fails before anything starts
    get_schema(settings.document_schema)
    with stdout_to_stderr():
        dsn = database_url()
    services = build_api(settings.model_copy(update={"database_url": dsn}))
    try:
        serve(
            services,
            user_id,
            schema=settings.document_schema,
            include_sensitive=settings.prompt_include_sensitive,
        )
    finally:
        services.close()


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr for the block: stdout is the MCP channel, and what
    starts before serving (an embedded PostgreSQL and its children) must neither write to it
    nor hold it open."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def serve(services: Sessions, user_id: uuid.UUID, *, schema: str, include_sensitive: bool = False) -> None:
    """Serve MCP over stdio until the client closes stdin."""
    build_server(services, user_id, schema=schema, include_sensitive=include_sensitive).run("stdio")

"""What the TypeScript client's tests (clients/typescript) compare against: the server's own tool
definitions (`tool_definitions` for every document schema, and the MCP server's read and search
tools). `python -m tests.client.typescript_support definitions` prints them as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from user_memory.domain.memory.agent import tool_definitions
from user_memory.domain.memory.document import section_names

SCHEMAS = ("user_state", "tutor", "companion")
MCP_READS = ("read_memory", "search_memory")


def definitions() -> dict[str, Any]:
    """Per schema its sections and the chat-completions tools; the MCP server's read tools."""
    from user_memory_local.mcp_server import build_server

    server = build_server(None, uuid.uuid4(), schema="user_state")  # type: ignore[arg-type]  # listing only
    tools = {t.name: t for t in asyncio.run(server.list_tools())}
    return {
        "schemas": {
            schema: {
                "sections": section_names(schema),
                "tools": {d["function"]["name"]: d["function"] for d in tool_definitions(schema)},
            }
            for schema in SCHEMAS
        },
        "mcp": {
            name: {"description": tools[name].description, "input_schema": tools[name].input_schema}
            for name in MCP_READS
        },
    }


if __name__ == "__main__":
    if sys.argv[1:] != ["definitions"]:
        sys.exit("usage: python -m tests.client.typescript_support definitions")
    print(json.dumps(definitions(), indent=1))

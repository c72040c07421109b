"""What PostgreSQL's text and jsonb can store: one check for every door that takes JSON from
outside (the API's bodies, the queue's messages), so hostile input is refused where it comes in,
never failing later as a database error that is retried and dead-lettered."""

from __future__ import annotations

import math
from typing import Any

# Deeper JSON than this is refused at the door: the service's diff, merge and validation recurse
# once per level (a few hundred levels answered 500), and no document, patch, key-value entry or
# activity of this service nests anywhere near it.
MAX_JSON_DEPTH = 100


def unstorable(value: Any, where: str = "the body") -> str | None:
    """Why parsed JSON cannot be stored (too deep, or holding what jsonb cannot store), or None."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"{where} is nested more than {MAX_JSON_DEPTH} levels deep"
            if isinstance(node, dict):
                for key in node:
                    if reason := _unstorable_text(key, where):
                        return reason
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
        elif isinstance(node, str):
            if reason := _unstorable_text(node, where):
                return reason
        elif isinstance(node, float) and not math.isfinite(node):
            return f"numbers in {where} must be finite (at most about 1.8e308)"
    return None


def _unstorable_text(text: str, where: str) -> str | None:
    if "\x00" in text:
        return f"strings in {where} may not contain U+0000 (\\u0000)"
    try:
        text.encode()
    except UnicodeEncodeError:
        return f"strings in {where} must be Unicode text (a lone surrogate such as \\ud800 is not)"
    return None

"""Reading the docs' pages as the tests that check them do (tests/infrastructure/test_docs.py) and
the ones that run their examples (tests/e2e/test_api_doc.py): fenced code blocks, shell commands."""

from __future__ import annotations

import re
from pathlib import Path


def code_blocks(path: Path, language: str) -> list[str]:
    """The fenced blocks of `language`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def shell_commands(script: str) -> list[str]:
    """The script's commands, one a line (comments kept): a line ending in a backslash, or ending
    inside a quoted string, goes on on the next one."""
    commands, current, quote = [], "", ""
    for line in script.splitlines():
        for i, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (i == 0 or line[i - 1].isspace()):
                break  # a comment: its apostrophes are not quotes
        current += (" " if current else "") + line.strip().removesuffix("\\").strip()
        if not quote and not line.rstrip().endswith("\\"):
            commands.append(current)
            current = ""
    return commands + ([current] if current else [])

"""What a migration does that the previous release's code may not survive (a contraction), found
in its SQL text: a DROP or REVOKE of something the migration did not create itself, a RENAME, a
column's type changed or made NOT NULL. Migrations are expand-only for one release (docs/operations.md):
the previous release's functions keep running on the new schema during a deploy.

A statement may be kept anyway when a comment right before it says why the previous release does
not use what it removes: `-- contract-ok: <why>`. Function bodies are not read (what they do at run
time is the function's), DO blocks are (they run with the migration). Dynamic SQL (EXECUTE) is not seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_IDENT = r'(?:"[^"]+"|[a-z_][a-z0-9_$]*)'
_NAME = rf"{_IDENT}(?:\.{_IDENT})?"
_KINDS = (
    r"table|view|materialized\s+view|function|procedure|type|schema|sequence|trigger|policy|domain|index|"
    r"extension|rule|aggregate"
)
_CREATED = re.compile(
    rf"\bcreate\s+(?:or\s+replace\s+)?(?:unique\s+)?(?:temp(?:orary)?\s+)?(?:{_KINDS})\s+"
    rf"(?:concurrently\s+)?(?:if\s+not\s+exists\s+)?({_NAME})"
)
_ADDED = re.compile(rf"\badd\s+(?:column\s+|constraint\s+)?(?:if\s+not\s+exists\s+)?({_NAME})")
_DROPPED = re.compile(rf"\bdrop\s+(?:{_KINDS}|column|constraint)\s+(?:concurrently\s+)?(?:if\s+exists\s+)?({_NAME})")
_REVOKED = re.compile(rf"\brevoke\b.*?\bon\s+(?:(?:table|function|procedure|sequence|schema|type|domain)\s+)?({_NAME})")
_OTHERS = {
    "rename": re.compile(r"\brename\b"),
    "a column's type changed": re.compile(rf"\balter\s+column\s+{_IDENT}\s+(?:set\s+data\s+)?type\b"),
    "a column made NOT NULL": re.compile(rf"\balter\s+column\s+{_IDENT}\s+set\s+not\s+null\b"),
}
_EXCUSED = re.compile(r"contract-ok:\s*\S")


@dataclass
class Statement:
    code: str  # lowercased, strings emptied, function bodies left out, whitespace collapsed
    comments: list[str] = field(default_factory=list)


def statements(text: str) -> list[Statement]:
    """The statements of a migration at its top level, with the statements of its DO blocks."""
    found: list[Statement] = []
    code: list[str] = []
    comments: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            comments.append(text[i + 2 : end])
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = len(text) if end < 0 else end + 2
            comments.append(text[i + 2 : end - 2])
            i = end
        elif text[i] == "'":
            end = i + 1
            while end < len(text) and not (text[end] == "'" and not text.startswith("''", end)):
                end += 2 if text.startswith("''", end) else 1
            code.append("''")
            i = end + 1
        elif text[i] == '"':
            end = text.find('"', i + 1)
            end = len(text) if end < 0 else end
            code.append(text[i : end + 1])
            i = end + 1
        elif (tag := re.match(r"\$([a-z_][a-z0-9_]*)?\$", text[i:], re.IGNORECASE)) is not None:
            end = text.find(tag.group(0), i + len(tag.group(0)))
            end = len(text) if end < 0 else end
            body = text[i + len(tag.group(0)) : end]
            if re.match(r"\s*do\s*$", "".join(code), re.IGNORECASE):
                found.extend(statements(body))  # a DO block runs its statements now
            code.append("$$")
            i = end + len(tag.group(0))
        elif text[i] == ";":
            found.append(_statement(code, comments))
            code, comments = [], []
            i += 1
        else:
            code.append(text[i])
            i += 1
    if "".join(code).strip():
        found.append(_statement(code, comments))
    return [s for s in found if s.code]


def _statement(code: list[str], comments: list[str]) -> Statement:
    return Statement(" ".join("".join(code).lower().split()), comments)


def _bare(name: str) -> str:
    """A name without quotes and without the public schema (the one the migrations use)."""
    name = name.replace('"', "").lower()
    return name.removeprefix("public.")


def contractions(text: str) -> list[str]:
    """Each contraction of a migration's text: what it is and the statement's start."""
    parsed = statements(text)
    created = {_bare(m) for s in parsed for pattern in (_CREATED, _ADDED) for m in pattern.findall(s.code)}
    found = []
    for statement in parsed:
        if any(_EXCUSED.search(comment) for comment in statement.comments):
            continue
        what = [f"drop of {_bare(n)}" for n in _DROPPED.findall(statement.code) if _bare(n) not in created]
        what += [f"revoke on {_bare(n)}" for n in _REVOKED.findall(statement.code) if _bare(n) not in created]
        what += [name for name, pattern in _OTHERS.items() if pattern.search(statement.code)]
        found += [f"{w}: {statement.code[:120]}" for w in what]
    return found

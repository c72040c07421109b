"""Undoing one run's version of one user's memory (no I/O).

A run (a run key: `daily:<date>`, `ondemand:<time>`) wrote at most one version per user. Undoing
it for a user takes three documents: `before` (the version under the run's), `run` (the run's
version) and `head`. When the run's version is the head, the undo is a revert to `before`.
When versions were written after it, the run's change is applied in reverse on top of the head,
but only where no later version changed anything: the run's changed paths and the later changes'
paths are compared, and any overlap (the same path, or one inside the other) is a conflict that
leaves the user untouched.

Paths are JSON Pointers at the finest level both sides share: objects are compared member by
member, lists element by element while their length is the same; any other difference (a list
that grew or shrank, a value of another type) is one path for the whole value. So a later edit
of another part, of another field of the same part, or of another element of an equal-length
list is independent of the run's change; an edit of a list the run resized is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonpointer import resolve_pointer

from user_memory.domain.memory.patching import copy_json, escape_token, json_equal, parse_pointer

REVERT_SOURCE_PREFIX = "run-revert:"

Tokens = tuple[str, ...]


def revert_source(run_key: str) -> str:
    """The source (and the per-user run key) of the version that undoes `run_key`."""
    return f"{REVERT_SOURCE_PREFIX}{run_key}"


def pointer(tokens: Tokens) -> str:
    return "".join(f"/{escape_token(t)}" for t in tokens)


def changed_paths(old: Any, new: Any) -> list[str]:
    """The JSON Pointers where `new` differs from `old`, at the finest level both share."""
    out: list[Tokens] = []
    _diff(old, new, (), out)
    return [pointer(t) for t in out]


def _diff(old: Any, new: Any, at: Tokens, out: list[Tokens]) -> None:
    if json_equal(old, new):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            if key in old and key in new:
                _diff(old[key], new[key], (*at, key), out)
            else:
                out.append((*at, key))
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, (*at, str(i)), out)
        return
    out.append(at)


def overlaps(a: str, b: str) -> bool:
    """Whether two pointers name the same value or one lies inside the other."""
    ta, tb = parse_pointer(a), parse_pointer(b)
    n = min(len(ta), len(tb))
    return ta[:n] == tb[:n]


@dataclass(frozen=True)
class Undo:
    """What undoing a run's version does to one user: `document` is the next version (None: a
    conflict, nothing to write), `kind` says how it was found (revert, inverse, conflict),
    `paths` are the run's changed paths, `conflicts` those a later version also changed."""

    kind: str
    document: dict[str, Any] | None
    paths: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def plan_undo(before: dict[str, Any], run: dict[str, Any], head: dict[str, Any], *, head_is_run: bool) -> Undo:
    """How to undo the change `before` -> `run` when the user's latest document is `head`."""
    paths = changed_paths(before, run)
    if head_is_run:
        return Undo("revert", copy_json(before), paths)
    later = changed_paths(run, head)
    conflicts = [p for p in paths if any(overlaps(p, q) for q in later)]
    if conflicts:
        return Undo("conflict", None, paths, conflicts)
    return Undo("inverse", inverse(before, paths, head), paths)


def inverse(before: dict[str, Any], paths: list[str], head: dict[str, Any]) -> dict[str, Any]:
    """`head` with each of `paths` set back to its value in `before` (removed where `before` has none).

    Only for paths no later change touched: each path's parent is then in `head` as it was in
    the run's document, and a list's index is within it (lists are only entered at equal length).
    """
    document = copy_json(head)
    for p in paths:
        tokens = parse_pointer(p)
        if not tokens:
            return copy_json(before)
        parent = document
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        value = resolve_pointer(before, p, _MISSING)
        if isinstance(parent, list):
            parent[int(last)] = copy_json(value)
        elif value is not _MISSING:
            parent[last] = copy_json(value)
        else:
            parent.pop(last, None)
    return document


_MISSING = object()  # resolve_pointer's answer where `before` has no value

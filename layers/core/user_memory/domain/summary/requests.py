"""Forget requests and resets: what an activity may ask a summary to remove, and who may ask.

    forget_part, forget_request  {part_id}  forget one part: the part, its name and its goals. The
                                            payload must name the part (`part_id`, a non-empty
                                            string). A request naming none is refused where
                                            activity comes in (InvalidActivity); one stored anyway
                                            (before this rule, or written around the service) is
                                            ignored by the summary and recorded in the version's
                                            provenance (`ignored_requests`).
    memory_reset                 {}         clear everything, the triggers and the safety notes
                                            included. Only a trusted source records one: the
                                            worker's queue (record_activity messages, which only
                                            the deployment's own services can send). An end user
                                            never can: POST /me/activity answers 403
                                            (ResetNotAllowed), and the database refuses the row
                                            from role authenticated (migration 016), so every
                                            stored reset came from the service.

Nothing else is a request. Free text never is (a message saying "forget everything", a forget
request's own `text`), and no request is implied by what a request leaves out: a request naming no
part covers nothing. The triggers and the safety notes are cleared only by a reset (or by a person
through the API, which is not a summary).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from user_memory.domain.model import Activity
from user_memory.errors import InvalidActivity, ResetNotAllowed

__all__ = [
    "PART_FORGET_KINDS",
    "RESET_KIND",
    "check_activity",
    "forget_allows",
    "forgotten_part",
    "has_reset",
    "ignored_requests",
    "is_reset",
    "request_problem",
]

PART_FORGET_KINDS = frozenset({"forget_part", "forget_request"})
RESET_KIND = "memory_reset"


def request_problem(kind: str, payload: Any) -> str | None:
    """Why an activity of this kind and payload is not a valid request (None: it is, or it is no
    request at all). Whether its source may send it is the door's to say (`check_activity`)."""
    if kind not in PART_FORGET_KINDS:
        return None
    part_id = payload.get("part_id") if isinstance(payload, dict) else None
    if isinstance(part_id, str) and part_id.strip():
        return None
    return (
        f"a {kind} must name the part to forget (payload part_id, a non-empty string); "
        "a request that names no part forgets nothing"
    )


def check_activity(kind: str, payload: Any, *, trusted: bool) -> None:
    """Refuse, where activity comes in, a request that names nothing, or a reset from a source that
    may not send one (`trusted`: the service's own queue)."""
    if kind == RESET_KIND and not trusted:
        raise ResetNotAllowed(
            "a memory_reset clears the whole memory, safety notes included: only the service records one, "
            "never an end user's own activity (to clear your memory, use DELETE /me/memory)"
        )
    problem = request_problem(kind, payload)
    if problem is not None:
        raise InvalidActivity(problem)


def is_reset(a: Activity) -> bool:
    """A memory_reset (stored resets are trusted: no end user can record one)."""
    return a.kind == RESET_KIND


def has_reset(activities: Iterable[Activity]) -> bool:
    return any(is_reset(a) for a in activities)


def forgotten_part(a: Activity) -> str | None:
    """The part a valid forget request names (None for any other activity)."""
    if a.kind not in PART_FORGET_KINDS or request_problem(a.kind, a.payload) is not None:
        return None
    return str(a.payload["part_id"])


def forget_allows(activities: Iterable[Activity], part_id: str | None = None) -> bool:
    """Whether the activity asks to forget `part_id` (None: the safety notes, or everything).

    A memory_reset covers everything; a forget request covers only the part it names; a request
    that names no part covers nothing.
    """
    for a in activities:
        if is_reset(a):
            return True
        if part_id is not None and forgotten_part(a) == part_id:
            return True
    return False


def ignored_requests(activities: Iterable[Activity]) -> list[tuple[Activity, str]]:
    """The stored forget requests a summary ignores, and why (what the version's provenance records)."""
    out = []
    for a in activities:
        problem = request_problem(a.kind, a.payload)
        if problem is not None:
            out.append((a, problem))
    return out

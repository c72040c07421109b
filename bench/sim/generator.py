"""Seeded synthetic activity for N users over D days, and the facts each user should have.

Per user and day the generator emits the activity kinds the product uses: part_named (a new
part, or an existing one named again), goal_set, trigger_noted, safety_note, forget_part, and
chatter that carries no fact (session, message, insight_interaction). Alongside it keeps each
user's expected facts:

    ("part", part_id, name)   the part exists under its id with that name
    ("goal", part_id, goal)   the part has that goal
    ("trigger", text)         a triggers_and_goals entry with that trigger
    ("safety", note)          the note is in the safety notes

A forget_part removes the part's facts legitimately (the part and its goals); nothing else ever
removes an expected fact. The same seed gives the same users, activity and facts.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from user_memory.domain.model import Activity

Fact = tuple[str, ...]

PARTS = [
    ("critic", "Critic"),
    ("planner", "Planner"),
    ("pleaser", "Pleaser"),
    ("protector", "Protector"),
    ("procrastinator", "Procrastinator"),
    ("worrier", "Worrier"),
    ("rebel", "Rebel"),
    ("caretaker", "Caretaker"),
    ("achiever", "Achiever"),
    ("skeptic", "Skeptic"),
    ("dreamer", "Dreamer"),
    ("firefighter", "Firefighter"),
    ("judge", "Judge"),
    ("child", "Inner child"),
    ("manager", "Manager"),
    ("loner", "Loner"),
]
ADJECTIVES = ["Harsh", "Anxious", "Quiet", "Loyal", "Tired", "Young", "Stubborn", "Hopeful", "Busy", "Careful", "Loud"]
GOALS = [
    "start with ten minutes",
    "notice the voice earlier",
    "ask for help before the deadline",
    "take a walk after lunch",
    "say no to one extra task a week",
    "write down three wins each evening",
    "keep a weekly plan on paper",
    "rest before it gets too late",
    "call a friend on Sundays",
    "check the calendar every morning",
    "stop working at seven",
    "breathe before answering emails",
    "finish one draft without editing",
    "share a worry instead of hiding it",
    "sleep eight hours on weeknights",
    "celebrate small progress",
]
TRIGGERS = [
    "vague deadlines",
    "criticism in meetings",
    "late-night scrolling",
    "family dinners",
    "unanswered messages",
    "Monday stand-ups",
    "crowded trains",
    "being compared to colleagues",
    "unexpected bills",
    "long weekends alone",
    "a messy kitchen",
    "performance reviews",
    "phone calls from the bank",
    "group chats going quiet",
]
CONTEXTS = ["at work", "at home", "with the manager", "on weekends", "in the evening", "before trips"]
OUTCOMES = [
    "ask for a concrete date",
    "pause and breathe for a minute",
    "write one sentence and stop",
    "name the feeling out loud",
    "step outside for five minutes",
    "reply the next morning",
    "make a short list",
]
SAFETY = [
    "mentions panic attacks at night; suggest grounding, never breath holding",
    "asked not to discuss weight or food",
    "has a history of self-harm; follow the safety protocol if it comes up",
    "prefers no breathing exercises because of asthma",
    "recently bereaved; avoid pushing on family topics",
    "takes medication that causes drowsiness; no advice on dosage",
    "asked to be reminded of the crisis line when distressed",
]
INSIGHTS = ["avoidance-loop", "all-or-nothing", "self-compassion", "values-check", "energy-map"]

START = date(2026, 11, 1)


@dataclass
class GenConfig:
    """Per-user-day probabilities of each kind of activity."""

    active: float = 0.75  # a user has activity on this day
    new_part: float = 0.35
    mention_part: float = 0.25  # an existing part named again (the same name)
    goal: float = 0.45
    repeat_goal: float = 0.08  # an existing goal set again
    trigger: float = 0.22
    safety: float = 0.04
    forget: float = 0.025
    max_parts: int = 9


@dataclass
class UserState:
    """What the generator knows about one user: the truth the memory should hold."""

    user_id: uuid.UUID
    index: int
    parts: dict[str, str] = field(default_factory=dict)  # id -> name
    goals: dict[str, list[str]] = field(default_factory=dict)
    triggers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    forgotten: set[str] = field(default_factory=set)
    # fact -> the (day, external_id) of every activity that carried it
    mentions: dict[Fact, list[tuple[int, str]]] = field(default_factory=dict)
    forgotten_facts: int = 0

    def facts(self) -> set[Fact]:
        out: set[Fact] = {("part", pid, name) for pid, name in self.parts.items()}
        out |= {("goal", pid, g) for pid, goals in self.goals.items() for g in goals}
        out |= {("trigger", t) for t in self.triggers}
        out |= {("safety", n) for n in self.notes}
        return out


def user_ids(seed: int, users: int) -> list[uuid.UUID]:
    rng = random.Random(f"users:{seed}")
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(users)]


class Generator:
    """Day by day activity for every user; `day(d)` must be called for d = 0, 1, 2, ... in order."""

    def __init__(self, seed: int, users: int, cfg: GenConfig | None = None, start: date = START) -> None:
        self.seed = seed
        self.cfg = cfg or GenConfig()
        self.start = start
        self.users = [UserState(user_id=u, index=i) for i, u in enumerate(user_ids(seed, users))]
        self._next_day = 0

    def date_of(self, day: int) -> date:
        return self.start + timedelta(days=day)

    def day(self, day: int) -> list[Activity]:
        """Every user's activity on day `day` (oldest first per user), updating the expected facts."""
        if day != self._next_day:
            raise ValueError(f"days are generated in order: expected {self._next_day}, got {day}")
        self._next_day += 1
        out: list[Activity] = []
        for user in self.users:
            out += self._user_day(user, day)
        return out

    def _user_day(self, user: UserState, day: int) -> list[Activity]:
        rng = random.Random(f"{self.seed}:{user.index}:{day}")
        cfg = self.cfg
        if day > 0 and rng.random() >= cfg.active:
            return []
        chatter: list[tuple[str, dict[str, Any], Fact | None]] = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(["session", "message", "message", "insight_interaction"])
            if kind == "session":
                chatter.append((kind, {"minutes": rng.randint(3, 55)}, None))
            elif kind == "message":
                chatter.append((kind, {"chars": rng.randint(8, 600)}, None))
            else:
                payload = {"insight": rng.choice(INSIGHTS), "action": rng.choice(["saved", "dismissed"])}
                chatter.append((kind, payload, None))
        # fact-carrying activity, in an order that keeps goals after their part
        steps: list[tuple[str, dict[str, Any], Fact | None]] = []
        if (day == 0 or rng.random() < cfg.new_part) and len(user.parts) < cfg.max_parts:
            free = [p for p in PARTS if p[0] not in user.parts and p[0] not in user.forgotten]
            if free:
                pid, base = rng.choice(free)
                name = f"{rng.choice(ADJECTIVES)} {base.lower()}" if rng.random() < 0.6 else base
                user.parts[pid] = name
                user.goals[pid] = []
                steps.append(("part_named", {"part_id": pid, "name": name}, ("part", pid, name)))
        if user.parts and rng.random() < cfg.mention_part:
            pid = rng.choice(sorted(user.parts))
            steps.append(("part_named", {"part_id": pid, "name": user.parts[pid]}, ("part", pid, user.parts[pid])))
        if user.parts and rng.random() < cfg.goal:
            pid = rng.choice(sorted(user.parts))
            options = [g for g in GOALS if g not in user.goals[pid]]
            if options:
                goal = rng.choice(options)
                user.goals[pid].append(goal)
                steps.append(("goal_set", {"part_id": pid, "goal": goal}, ("goal", pid, goal)))
        if rng.random() < cfg.repeat_goal:
            known = [(pid, g) for pid, goals in sorted(user.goals.items()) for g in goals]
            if known:
                pid, goal = rng.choice(known)
                steps.append(("goal_set", {"part_id": pid, "goal": goal}, ("goal", pid, goal)))
        if rng.random() < cfg.trigger:
            text = f"{rng.choice(TRIGGERS)} {rng.choice(CONTEXTS)}"
            if text not in user.triggers:
                user.triggers.append(text)
                related = [rng.choice(sorted(user.parts))] if user.parts and rng.random() < 0.7 else []
                payload = {"trigger": text, "desired_outcome": rng.choice(OUTCOMES), "related_parts": related}
                steps.append(("trigger_noted", payload, ("trigger", text)))
        if rng.random() < cfg.safety:
            options = [n for n in SAFETY if n not in user.notes]
            if options:
                note = rng.choice(options)
                user.notes.append(note)
                steps.append(("safety_note", {"note": note}, ("safety", note)))
        if day > 2 and len(user.parts) >= 2 and rng.random() < cfg.forget:
            pid = rng.choice(sorted(user.parts))
            gone = [("part", pid, user.parts.pop(pid))] + [("goal", pid, g) for g in user.goals.pop(pid)]
            for fact in gone:
                user.mentions.pop(fact, None)
            user.forgotten_facts += len(gone)
            user.forgotten.add(pid)
            steps.append(("forget_part", {"part_id": pid}, None))
        # chatter goes anywhere; the fact-carrying steps keep their order
        ordered = list(steps)
        for item in chatter:
            ordered.insert(rng.randint(0, len(ordered)), item)
        begin = datetime.combine(self.date_of(day), datetime.min.time(), tzinfo=UTC) + timedelta(hours=7)
        minutes = sorted(rng.sample(range(0, 14 * 60), len(ordered)))
        out = []
        for i, (m, (kind, payload, fact)) in enumerate(zip(minutes, ordered, strict=True)):
            external_id = f"sim:{day}:{i}"
            if fact is not None and (fact[0] != "goal" or fact[1] in user.parts) and fact in user.facts():
                user.mentions.setdefault(fact, []).append((day, external_id))
            out.append(
                Activity(
                    user_id=user.user_id,
                    occurred_at=begin + timedelta(minutes=m),
                    kind=kind,
                    payload=payload,
                    source="sim",
                    external_id=external_id,
                )
            )
        return out


def present(fact: Fact, document: dict[str, Any]) -> bool:
    """Whether a stored (parts keyed by id) memory document holds the fact."""
    kind = fact[0]
    parts = document.get("parts") or {}
    if kind == "part":
        part = parts.get(fact[1])
        return isinstance(part, dict) and part.get("name") == fact[2]
    if kind == "goal":
        part = parts.get(fact[1])
        return isinstance(part, dict) and any(g.get("goal") == fact[2] for g in part.get("goals") or [])
    if kind == "trigger":
        return any(t.get("trigger") == fact[1] for t in document.get("triggers_and_goals") or [])
    if kind == "safety":
        return fact[1] in (document.get("safety_notes") or "")
    raise ValueError(f"unknown fact kind {kind!r}")

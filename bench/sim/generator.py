"""Seeded synthetic activity for N users over D days, and the facts each user should have.

Every user starts on day 0 with an existing memory of about 10 KB (compact JSON; about 2,400
o200k tokens in the model's shape), as a long-time user of the product has: 13-16 parts with 3-6
goals each, 30-36 triggers, 2-3 safety notes and a summary that names every part
(`initial_memory`, written as version 1 before day 0). Its facts are expected facts too.

Per user and day the generator emits the activity kinds the product uses: part_named (a new
part, or an existing one named again), goal_set, trigger_noted, safety_note, forget_part, and
chatter that carries no fact (session, message, insight_interaction). Alongside it keeps each
user's expected facts:

    ("part", part_id, name)   the part exists under its id with that name
    ("goal", part_id, goal)   the part has that goal
    ("trigger", text)         a triggers_and_goals entry with that trigger
    ("safety", note)          the note is in the safety notes

A forget_part removes the part's facts legitimately (the part and its goals); nothing else ever
removes an expected fact. The same seed gives the same users, activity, memories and facts.
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
    ("perfectionist", "Perfectionist"),
    ("avoider", "Avoider"),
    ("controller", "Controller"),
    ("comedian", "Comedian"),
    ("observer", "Observer"),
    ("nurturer", "Nurturer"),
    ("guardian", "Guardian"),
    ("taskmaster", "Taskmaster"),
    ("peacemaker", "Peacemaker"),
    ("explorer", "Explorer"),
    ("historian", "Historian"),
    ("scorekeeper", "Scorekeeper"),
    ("saboteur", "Saboteur"),
    ("cheerleader", "Cheerleader"),
    ("hermit", "Hermit"),
    ("negotiator", "Negotiator"),
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
    "name the feeling before acting on it",
    "keep one evening a week free of plans",
    "send the draft when it is good enough",
    "ask what the deadline really is",
    "leave the phone in another room at night",
    "check in with the body twice a day",
    "thank the part for trying to help",
    "book the dentist appointment this month",
    "say one kind sentence to myself after a mistake",
    "plan the hardest task for the morning",
    "take the stairs when anxious",
    "write a worry list and close it",
    "answer messages in two batches a day",
    "go to bed before midnight on weekdays",
    "cook a real dinner twice a week",
    "notice when the critic borrows a parent's voice",
    "pause for three breaths before saying yes",
    "keep the desk clear at the end of the day",
    "spend ten minutes outside every morning",
    "let a small mistake stay unfixed",
    "practise asking for feedback in one-on-ones",
    "stop comparing salaries with friends",
    "read fiction for twenty minutes before sleep",
    "limit news to once a day",
    "write the first sentence before checking email",
    "call the sister once a week",
    "keep a list of what went well at work",
    "split big tasks into steps of an hour",
    "say no to weekend work unless it is urgent",
    "go for a run on Tuesdays and Fridays",
    "share the plan with the partner on Sundays",
    "notice the urge to please before agreeing",
    "take a real lunch break away from the screen",
    "put the budget review in the calendar",
    "ask one question in every team meeting",
    "forgive the late reply instead of chasing it",
    "end work calls on time",
    "keep promises to myself as seriously as to others",
    "write down the trigger when it happens",
    "rest without earning it first",
    "check the facts before the worst case",
    "let the inner child choose one weekend activity",
    "meditate for five minutes after waking",
    "unfollow accounts that feed comparison",
    "visit the grandparents once a month",
    "tidy for fifteen minutes, not the whole flat",
    "turn off notifications during focus time",
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
    "a friend cancelling plans",
    "emails marked urgent",
    "visits to the parents",
    "feedback on a draft",
    "waiting for test results",
    "a cluttered inbox",
    "noisy neighbours",
    "being interrupted",
    "social media posts of old classmates",
    "a long to-do list",
]
CONTEXTS = [
    "at work",
    "at home",
    "with the manager",
    "on weekends",
    "in the evening",
    "before trips",
    "on Sunday nights",
    "after a bad night's sleep",
    "with the partner",
    "in the morning",
]
OUTCOMES = [
    "ask for a concrete date",
    "pause and breathe for a minute",
    "write one sentence and stop",
    "name the feeling out loud",
    "step outside for five minutes",
    "reply the next morning",
    "make a short list",
    "ask for help instead of pushing through",
    "write down what is actually known",
    "text a friend before spiralling",
    "take a ten-minute walk before deciding",
    "remind the critic that good enough is fine",
    "choose one task and close the rest",
    "let the feeling pass without answering it",
    "put it in the calendar for tomorrow",
]
SAFETY = [
    "mentions panic attacks at night; suggest grounding, never breath holding",
    "asked not to discuss weight or food",
    "has a history of self-harm; follow the safety protocol if it comes up",
    "prefers no breathing exercises because of asthma",
    "recently bereaved; avoid pushing on family topics",
    "takes medication that causes drowsiness; no advice on dosage",
    "asked to be reminded of the crisis line when distressed",
    "works night shifts; do not suggest early-morning routines",
    "lives with chronic pain; avoid suggesting exercise without asking",
    "has an eating disorder history; never mention calories",
    "is in a custody dispute; do not give legal advice",
    "discloses alcohol use when stressed; suggest the counselling service, do not moralise",
]
STATUSES = ["active", "active", "dormant", "integrating", "protective", "quiet"]
BACKGROUND = [
    "Has used the app for about eight months, mostly in short evening sessions.",
    "Came to the app after a burnout last winter and checks in most weekdays.",
    "Uses the app on the commute; prefers short, concrete suggestions over long reflections.",
    "Started during a job change; likes to review the week on Sunday evenings.",
    "Writes long messages when stressed and short ones on good days.",
    "Responds well to gentle humour; dislikes being told what to feel.",
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
    max_parts: int = 20
    initial_memory: bool = True  # users start with an existing ~10 KB memory (version 1)


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
    initial: dict[str, Any] | None = None  # the memory the user starts with (stored form), if any

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
        if self.cfg.initial_memory:
            for user in self.users:
                initial_memory(user, random.Random(f"memory:{seed}:{user.index}"))

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
                name = part_name(rng, base)
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


def part_name(rng: random.Random, base: str) -> str:
    return f"{rng.choice(ADJECTIVES)} {base.lower()}" if rng.random() < 0.6 else base


def initial_memory(user: UserState, rng: random.Random) -> dict[str, Any]:
    """Give `user` the memory a long-time user has (see the module's docstring): its facts become
    expected facts (mentioned on day -1, by no activity), and `user.initial` the stored document."""
    chosen = rng.sample(PARTS, rng.randint(13, 16))
    parts: dict[str, Any] = {}
    for pid, base in chosen:
        name = part_name(rng, base)
        goals = rng.sample(GOALS, rng.randint(3, 6))
        user.parts[pid], user.goals[pid] = name, list(goals)
        parts[pid] = {
            "name": name,
            "status": rng.choice(STATUSES),
            "recency_score": round(rng.uniform(0.05, 1.0), 3),
            "influence_score": round(rng.uniform(0.1, 0.9), 2),
            "goals": [{"goal": g} for g in goals],
        }
    triggers = []
    for _ in range(rng.randint(30, 36)):
        text = f"{rng.choice(TRIGGERS)} {rng.choice(CONTEXTS)}"
        if text in user.triggers:
            continue
        user.triggers.append(text)
        related = rng.sample(sorted(parts), rng.choice([0, 1, 1, 2]))
        triggers.append({"trigger": text, "desired_outcome": rng.choice(OUTCOMES), "related_parts": related})
    user.notes = rng.sample(SAFETY, rng.randint(2, 3))
    for fact in user.facts():
        user.mentions[fact] = [(-1, "seed")]
    names = [parts[pid]["name"] for pid in sorted(parts, key=lambda k: -parts[k]["recency_score"])]
    summary = (
        f"{' '.join(rng.sample(BACKGROUND, 2))} Works with {len(parts)} parts: {', '.join(names)}. "
        f"Most present lately: {', '.join(names[:3])}. "
        f"{len(triggers)} triggers tracked, the most frequent {triggers[0]['trigger']} and {triggers[1]['trigger']}. "
        "Safety notes on file: read them first."
    )
    user.initial = {
        "version": 1,
        "last_updated_by": "import",
        "summary": summary,
        "parts": parts,
        "triggers_and_goals": triggers,
        "safety_notes": "\n".join(user.notes),
    }
    return user.initial


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

"""A scripted OpenAI-compatible model with a bad day, served locally for the real `openai` client.

For each chat completion request it reads the current memory and the new activity from the user
message (between `<memory>`/`</memory>` and `<activity>`/`</activity>` lines; the older prompt,
"Current memory document:" / "New activity (...):", is read too), computes the correct update,
then misbehaves with seeded probabilities per call.

The correct update follows the system prompts' rules, as a model that behaves would: every
structured activity written; recency_score never edited (the service keeps it), influence_score
raised by 0.1 for a part that got a goal; the summary kept unless the day makes it wrong (it names
a part that is gone) or incomplete (a part, or safety notes, it does not mention), and then
rewritten keeping its background sentences. A retry (a call carrying feedback) recomputes the
correct update. The misbehaviours:

document mode (the whole document back)
    omit_section     empties the triggers or the safety notes, or leaves the triggers key out
    drop_part        leaves out a part the activity did not mention
    rename_part      gives a part the activity did not mention another id
    invent_deletion  deletes a trigger or a goal nobody asked to delete
    forget_fact      does not add one fact of today's activity
edit mode (`response_format.json_schema.name == "memory_edits"`: edits back)
    remove_part      proposes removing a part nobody asked to forget
    clear_safety     proposes clearing the safety notes
    bad_path         sends one of today's edits to a path that does not exist (an empty answer has none)
    forget_fact      does not add one fact of today's activity

A call that carries feedback on a previous answer (a retry) misbehaves at `retry_factor` times
the rates, so the retry is right most of the time. The random draws are keyed by the request's
content and how often that content was seen, so a run is reproducible whatever the timing.
`usage` is counted with `tokens.Tokenizer` (a real tokenizer when installed).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tests.fake_http import JsonHandler, serving

from .tokens import Tokenizer

EDIT_SCHEMA_NAME = "memory_edits"
CHATTER = ("session", "message", "insight_interaction")
MODEL = "sim-scripted-1"


@dataclass
class Rates:
    """Probability per call of each misbehaviour (independent draws; several may happen at once)."""

    omit_section: float = 0.03
    drop_part: float = 0.03
    rename_part: float = 0.02
    invent_deletion: float = 0.03
    remove_part: float = 0.03
    clear_safety: float = 0.03
    bad_path: float = 0.06
    forget_fact: float = 0.03
    retry_factor: float = 0.2

    DOCUMENT = ("omit_section", "drop_part", "rename_part", "invent_deletion", "forget_fact")
    EDIT = ("remove_part", "clear_safety", "bad_path", "forget_fact")

    @classmethod
    def none(cls) -> Rates:
        return cls(**{k: 0.0 for k in (*cls.DOCUMENT, *cls.EDIT)})

    def describe(self, mode: str) -> str:
        kinds = self.DOCUMENT if mode == "document" else self.EDIT
        return ", ".join(f"{k} {getattr(self, k):.0%}" for k in kinds) + f"; retries x{self.retry_factor:g}"


@dataclass
class State:
    """The memory in the model's working form: parts keyed by id, in order."""

    summary: str
    parts: dict[str, dict[str, Any]]
    triggers: list[dict[str, Any]]
    safety_notes: str
    parts_as_list: bool = True
    # the prompt's outline: parts not shown (id -> name), and the shown triggers' indexes in the
    # whole list (None: the whole document was shown)
    outlined: dict[str, str] = field(default_factory=dict)
    trigger_index: list[int] | None = None

    @classmethod
    def parse(cls, data: dict[str, Any]) -> State:
        raw = data.get("parts") or []
        as_list = isinstance(raw, list)
        items = [(str(p.get("id")), p) for p in raw] if as_list else list(raw.items())
        parts = {
            pid: {
                "name": str(p.get("name", pid)),
                "status": str(p.get("status", "active")),
                "recency_score": float(p.get("recency_score", 0.0)),
                "influence_score": float(p.get("influence_score", 0.0)),
                "goals": [{"goal": str(g.get("goal"))} for g in p.get("goals") or []],
            }
            for pid, p in items
        }
        triggers = [
            {
                "trigger": str(t.get("trigger")),
                "desired_outcome": str(t.get("desired_outcome", "")),
                "related_parts": [str(x) for x in t.get("related_parts") or []],
            }
            for t in data.get("triggers_and_goals") or []
        ]
        outline = data.get("_outline") or {}
        return cls(
            str(data.get("summary", "")),
            parts,
            triggers,
            str(data.get("safety_notes", "")),
            as_list,
            dict(outline.get("parts") or {}),
            outline.get("triggers"),
        )

    def copy(self) -> State:
        s = State.parse(self.llm_shape())
        s.outlined, s.trigger_index = dict(self.outlined), self.trigger_index
        return s

    def trigger_at(self, shown: int) -> int:
        """The whole list's index of the trigger shown at `shown`."""
        if self.trigger_index is None or shown >= len(self.trigger_index):
            return shown
        return self.trigger_index[shown]

    def names(self) -> list[str]:
        """Every part's name: the shown ones, then the outlined ones."""
        return [p["name"] for p in self.parts.values()] + list(self.outlined.values())

    def llm_shape(self) -> dict[str, Any]:
        parts: Any = (
            [{"id": pid, **p} for pid, p in self.parts.items()] if self.parts_as_list else dict(self.parts.items())
        )
        return {
            "summary": self.summary,
            "parts": parts,
            "triggers_and_goals": self.triggers,
            "safety_notes": self.safety_notes,
        }


def _edit(op: str, path: str, value: Any, reason: str, fact: bool = False) -> dict[str, Any]:
    edit = {"op": op, "path": path, "value_json": "" if op == "remove" else json.dumps(value), "reason": reason}
    if fact:
        edit["_fact"] = True  # carries a fact of today's activity (stripped before sending)
    return edit


def apply_activity(
    before: State, activity: list[dict[str, Any]], *, skip: int | None = None
) -> tuple[State, list[dict[str, Any]]]:
    """The correct update (minus the activity at index `skip`): the next state and the edits that make it.

    Recency is left as it is (the service sets it); a new part is written with recency 1.0."""
    s = before.copy()
    edits: list[dict[str, Any]] = []
    goal_touched: list[str] = []
    for i, a in enumerate(activity):
        if i == skip:
            continue
        kind = a.get("kind")
        at = str(a.get("at", ""))[11:16]
        if kind == "part_named" and a.get("part_id"):
            pid, name = str(a["part_id"]), str(a.get("name") or a["part_id"])
            if pid not in s.parts:
                s.parts[pid] = {
                    "name": name,
                    "status": "active",
                    "recency_score": 1.0,
                    "influence_score": 0.1,
                    "goals": [],
                }
                edits.append(_edit("add", f"/parts/{pid}", s.parts[pid], f"new part named at {at}", fact=True))
            elif s.parts[pid]["name"] != name:
                s.parts[pid]["name"] = name
                edits.append(_edit("replace", f"/parts/{pid}/name", name, f"part renamed at {at}", fact=True))
        elif kind == "goal_set" and a.get("part_id") and a.get("goal"):
            pid, goal = str(a["part_id"]), str(a["goal"])
            if pid not in s.parts:  # a goal for a part the memory lacks: the part comes back, named by its id
                name = pid.replace("_", " ").capitalize()
                s.parts[pid] = {
                    "name": name,
                    "status": "active",
                    "recency_score": 1.0,
                    "influence_score": 0.1,
                    "goals": [],
                }
                edits.append(_edit("add", f"/parts/{pid}", s.parts[pid], f"goal for an unknown part at {at}"))
            if {"goal": goal} not in s.parts[pid]["goals"]:
                s.parts[pid]["goals"].append({"goal": goal})
                edits.append(_edit("add", f"/parts/{pid}/goals/-", {"goal": goal}, f"goal set at {at}", fact=True))
            goal_touched.append(pid)
        elif kind == "trigger_noted" and a.get("trigger"):
            text = str(a["trigger"])
            if not any(t["trigger"] == text for t in s.triggers):
                entry = {
                    "trigger": text,
                    "desired_outcome": str(a.get("desired_outcome", "")),
                    "related_parts": [str(x) for x in a.get("related_parts") or [] if str(x) in s.parts],
                }
                s.triggers.append(entry)
                edits.append(_edit("add", "/triggers_and_goals/-", entry, f"trigger noted at {at}", fact=True))
        elif kind == "safety_note" and a.get("note"):
            note = str(a["note"])
            if note not in s.safety_notes:
                s.safety_notes = f"{s.safety_notes}\n{note}".strip()
                edits.append(_edit("replace", "/safety_notes", s.safety_notes, f"safety note at {at}", fact=True))
        elif kind == "forget_part" and str(a.get("part_id")) in s.parts:
            pid = str(a["part_id"])
            del s.parts[pid]
            edits.append(_edit("remove", f"/parts/{pid}", None, f"the user asked to forget this part at {at}"))
            for idx, t in enumerate(s.triggers):
                if pid in t["related_parts"]:
                    t["related_parts"] = [x for x in t["related_parts"] if x != pid]
                    edits.append(
                        _edit(
                            "replace",
                            f"/triggers_and_goals/{s.trigger_at(idx)}/related_parts",
                            t["related_parts"],
                            "part forgotten",
                        )
                    )
    for pid in dict.fromkeys(goal_touched):
        if pid in s.parts:
            s.parts[pid]["influence_score"] = round(min(1.0, s.parts[pid]["influence_score"] + 0.1), 2)
            edits.append(_edit("replace", f"/parts/{pid}/influence_score", s.parts[pid]["influence_score"], "new goal"))
    if not summary_ok(s, before):
        s.summary = summary_text(s)
        edits.append(_edit("replace", "/summary", s.summary, "the summary no longer matches the parts"))
    return s, edits


def summary_ok(s: State, before: State) -> bool:
    """Whether the summary is still right: it names every part, names no part that is gone, and
    mentions the safety notes when there are any (the prompts' "wrong or incomplete")."""
    text = s.summary
    if any(name not in text for name in s.names()):
        return False
    gone = set(before.names()) - set(s.names())
    if any(name in text for name in gone):
        return False
    return not s.safety_notes or "Safety notes on file" in text


def summary_text(s: State) -> str:
    """A short, factual, agent-readable summary: the background sentences of the current one kept,
    then the parts, the most present, two triggers and the safety notes."""
    background = s.summary.split("Works with ")[0].strip() if "Works with " in s.summary else ""
    names = s.names()
    recent = sorted(s.parts, key=lambda k: -s.parts[k]["recency_score"])[:3]
    text = f"{background} " if background else ""
    text += f"Works with {len(names)} parts: {', '.join(names)}." if names else "No parts known yet."
    if recent:
        text += f" Most present lately: {', '.join(s.parts[k]['name'] for k in recent)}."
    if len(s.triggers) >= 2:
        text += f" Often triggered by {s.triggers[0]['trigger']} and {s.triggers[1]['trigger']}."
    if s.safety_notes:
        text += " Safety notes on file: read them first."
    return text


# -- the prompt ------------------------------------------------------------------------------------

_MEMORY = re.compile(r"^<memory>\n(.*?)\n</memory>$", re.S | re.M)
_ACTIVITY = re.compile(r"^<activity>\n(.*?)\n?</activity>$", re.S | re.M)
_OLD_MEMORY = re.compile(r"Current memory document:\n(.*?)\n\nNew activity", re.S)
# "Your previous edits could not be used: ..." (and the older "Your previous answer was invalid: ...")
_FEEDBACK = re.compile(r"^Your previous \w+ (could not be used|was invalid)", re.M)
# The pipeline's feedback when an answer left structured activity out (facts.unreflected_feedback)
_MISSING_FACTS = "does not hold what"
_OUTLINE = re.compile(r"^<outline>\n(.*?)\n</outline>$", re.S | re.M)
_OLD_ACTIVITY = re.compile(r"New activity \([^)]*\):\n(.*?)(?:\n\n|\n?$)", re.S)


def read_prompt(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """(memory in the LLM shape, activity lines as dicts, the feedback the request carries: "" for
    none, "facts" for activity the previous answer left out, "invalid" for any other)."""
    messages = body.get("messages") or []
    user = next((m for m in messages if m.get("role") == "user" and "memory" in str(m.get("content"))), None)
    if user is None:
        raise ValueError("no user message with a memory document")
    text = str(user["content"])
    m = _MEMORY.search(text) or _OLD_MEMORY.search(text)
    if m is None:
        raise ValueError("no memory block in the prompt")
    memory = json.loads(m.group(1).strip() or "{}")
    o = _OUTLINE.search(text)
    if o is not None:
        memory["_outline"] = read_outline(o.group(1))
    m = _ACTIVITY.search(text) or _OLD_ACTIVITY.search(text)
    lines = m.group(1).splitlines() if m else []
    activity = []
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a cut line: the model reads what it can
        if isinstance(item, dict):
            activity.append(item)
    later = messages[messages.index(user) + 1 :]
    if not (any(m.get("role") in ("assistant", "user") for m in later) or _FEEDBACK.search(text)):
        return memory, activity, ""
    return memory, activity, "facts" if _MISSING_FACTS in text else "invalid"


def read_outline(text: str) -> dict[str, Any]:
    """The outline's parts (id -> name) and the shown triggers' indexes."""
    parts: dict[str, str] = {}
    triggers: list[int] = []
    for line in text.splitlines():
        if line.startswith("parts not shown (id: name): "):
            rest = line[len("parts not shown (id: name): ") :]
            if rest != "none":
                for item in rest.split("; "):
                    pid, _, name = item.partition(": ")
                    parts[pid] = name
        elif line.startswith("triggers_and_goals: "):
            shown = line.rsplit(": ", 1)[1]
            triggers = [] if shown == "none" else [int(x) for x in shown.split(", ")]
    return {"parts": parts, "triggers": triggers}


# -- the model -------------------------------------------------------------------------------------


@dataclass
class Call:
    """One call as the model saw it."""

    mode: str
    retry: bool
    prompt_tokens: int
    completion_tokens: int
    misbehaved: list[str] = field(default_factory=list)
    day: str = ""  # the date of the newest activity line
    by_edit: Counter[str] = field(default_factory=Counter)  # edit mode: completion tokens per kind of edit
    feedback: str = ""  # a retry's: "facts" (activity left out) or "invalid"
    prefix_tokens: int = 0  # the prompt's stable prefix: the system message and the response schema
    cached_tokens: int = 0  # of the prompt, what an endpoint's prefix cache serves (see cached_of)


class ScriptedModel:
    """Computes the correct answer, then misbehaves as `rates` say. Thread-safe."""

    def __init__(self, seed: int, rates: Rates, tokenizer: Tokenizer) -> None:
        self.seed = seed
        self.rates = rates
        self.tokenizer = tokenizer
        self.calls: list[Call] = []
        self.errors: list[str] = []  # requests the model could not read (answered 400)
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        fmt = (body.get("response_format") or {}).get("json_schema") or {}
        mode = "edit" if fmt.get("name") == EDIT_SCHEMA_NAME else "document"
        memory, activity, feedback = read_prompt(body)
        retry = bool(feedback)
        key = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()
        with self._lock:
            self._seen[key] += 1
            rng = random.Random(f"{self.seed}:{mode}:{key}:{self._seen[key]}")
        factor = self.rates.retry_factor if retry else 1.0
        kinds = Rates.DOCUMENT if mode == "document" else Rates.EDIT
        wanted = [k for k in kinds if rng.random() < getattr(self.rates, k) * factor]
        before = State.parse(memory)
        if mode == "document":
            content, done = self._document(before, activity, wanted, rng)
        else:
            content, done = self._edits(before, activity, wanted, rng)
        call = Call(mode, retry, self.tokenizer.chat_prompt(body), self.tokenizer.count(content), done)
        call.prefix_tokens = self.tokenizer.stable_prefix(body)
        call.cached_tokens = cached_of(call.prefix_tokens, call.prompt_tokens)
        call.day = str(activity[-1].get("at", ""))[:10] if activity else ""
        call.feedback = feedback
        if mode == "edit":
            for e in json.loads(content)["edits"]:
                call.by_edit[edit_kind(e)] += self.tokenizer.count(json.dumps(e, ensure_ascii=False))
            call.by_edit["JSON framing"] = call.completion_tokens - sum(call.by_edit.values())
        with self._lock:
            self.calls.append(call)
        return completion(
            content, call.prompt_tokens, call.completion_tokens, str(body.get("model") or MODEL), call.cached_tokens
        )

    @staticmethod
    def _forgettable(activity: list[dict[str, Any]], before: State, rng: random.Random) -> int | None:
        """An activity whose fact is new to the memory (the one a forgetful model leaves out)."""
        new = []
        for i, a in enumerate(activity):
            k = a.get("kind")
            p = before.parts.get(str(a.get("part_id")))
            if (
                (k == "part_named" and (p is None or p["name"] != a.get("name")))
                or (k == "goal_set" and (p is None or {"goal": a.get("goal")} not in p["goals"]))
                or (k == "trigger_noted" and not any(t["trigger"] == a.get("trigger") for t in before.triggers))
                or (k == "safety_note" and str(a.get("note")) not in before.safety_notes)
            ):
                new.append(i)
        return rng.choice(new) if new else None

    def _document(
        self, before: State, activity: list[dict[str, Any]], wanted: list[str], rng: random.Random
    ) -> tuple[str, list[str]]:
        done: list[str] = []
        skip = self._forgettable(activity, before, rng) if "forget_fact" in wanted else None
        if skip is not None:
            done.append("forget_fact:" + json.dumps(activity_fact(activity[skip])))
        after, _ = apply_activity(before, activity, skip=skip)
        mentioned = {str(a.get("part_id")) for a in activity if a.get("part_id")}
        quiet = [pid for pid in after.parts if pid not in mentioned and pid in before.parts]
        if "drop_part" in wanted and quiet:
            pid = rng.choice(quiet)
            quiet.remove(pid)
            self._drop(after, pid)
            done.append("drop_part")
        if "rename_part" in wanted and quiet:
            pid = rng.choice(quiet)
            new_id = re.sub(r"[^a-z0-9]+", "_", after.parts[pid]["name"].lower()).strip("_")
            if new_id == pid or new_id in after.parts:
                new_id = f"{pid}_part"
            quiet.remove(pid)
            after.parts = {(new_id if k == pid else k): v for k, v in after.parts.items()}
            for t in after.triggers:
                t["related_parts"] = [new_id if x == pid else x for x in t["related_parts"]]
            done.append("rename_part")
        if "invent_deletion" in wanted:
            goals = [(pid, i) for pid in quiet for i in range(len(after.parts[pid]["goals"]))]
            if after.triggers and (not goals or rng.random() < 0.5):
                after.triggers.pop(rng.randrange(len(after.triggers)))
                done.append("invent_deletion")
            elif goals:
                pid, i = rng.choice(goals)
                after.parts[pid]["goals"].pop(i)
                done.append("invent_deletion")
        out = after.llm_shape()
        if "omit_section" in wanted:
            options = ["missing_triggers_key"]
            if after.triggers:
                options.append("empty_triggers")
            if after.safety_notes:
                options.append("empty_safety_notes")
            choice = rng.choice(options)
            if choice == "missing_triggers_key":
                del out["triggers_and_goals"]
            elif choice == "empty_triggers":
                out["triggers_and_goals"] = []
            else:
                out["safety_notes"] = ""
            done.append(f"omit_section:{choice}")
        return json.dumps(out, ensure_ascii=False), done

    @staticmethod
    def _drop(s: State, pid: str) -> None:
        del s.parts[pid]
        for t in s.triggers:
            t["related_parts"] = [x for x in t["related_parts"] if x != pid]

    def _edits(
        self, before: State, activity: list[dict[str, Any]], wanted: list[str], rng: random.Random
    ) -> tuple[str, list[str]]:
        done: list[str] = []
        skip = self._forgettable(activity, before, rng) if "forget_fact" in wanted else None
        if skip is not None:
            done.append("forget_fact:" + json.dumps(activity_fact(activity[skip])))
        _, edits = apply_activity(before, activity, skip=skip)
        mentioned = {str(a.get("part_id")) for a in activity if a.get("part_id")}
        quiet = [pid for pid in [*before.parts, *before.outlined] if pid not in mentioned]
        if "remove_part" in wanted and quiet:
            pid = rng.choice(quiet)
            edits.append(_edit("remove", f"/parts/{pid}", None, "this part has not come up lately"))
            done.append("remove_part")
        if "clear_safety" in wanted and before.safety_notes:
            edits.append(_edit("replace", "/safety_notes", "", "the notes look outdated"))
            done.append("clear_safety")
        if "bad_path" in wanted and edits:  # an empty answer (nothing to change) has no path to get wrong
            carrying = [e for e in edits if e.get("_fact")] or edits
            e = rng.choice(carrying)
            path = e["path"]
            if path.startswith("/parts/") and path.count("/") == 2:  # a whole part: any new id would be valid
                e["path"] = rng.choice(["/part" + path[6:], "/parts/-"])
            elif path.startswith("/parts/"):
                pid = path.split("/")[2]
                e["path"] = rng.choice([path.replace(f"/parts/{pid}", f"/parts/{pid}s", 1), "/part" + path[6:]])
            elif path.startswith("/triggers_and_goals"):
                e["path"] = rng.choice(["/triggers/-", "/triggers_and_goals/99"])
            elif path == "/safety_notes":
                e["path"] = "/safety_note"
            else:
                e["path"] = path + "s"
            done.append("bad_path")
        for e in edits:
            e.pop("_fact", None)
        return json.dumps({"edits": edits}, ensure_ascii=False), done

    def tally(self, mode: str) -> dict[str, Any]:
        calls = [c for c in self.calls if c.mode == mode]
        return {
            "calls": len(calls),
            "retries": sum(c.retry for c in calls),
            "fact_retries": sum(c.feedback == "facts" for c in calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "prefix_tokens": sum(c.prefix_tokens for c in calls),
            "cached_tokens": sum(c.cached_tokens for c in calls),
            "misbehaved": Counter(k.split(":")[0] for c in calls for k in c.misbehaved),
            # (date, fact) of each activity the model left out: which unflagged losses it explains
            "left_out": {
                (c.day, tuple(json.loads(k.split(":", 1)[1])))
                for c in calls
                for k in c.misbehaved
                if k.startswith("forget_fact:")
            },
            "completion_by_day": sum((Counter({c.day: c.completion_tokens}) for c in calls), Counter()),
            "by_edit": sum((c.by_edit for c in calls), Counter()),
        }


def activity_fact(a: dict[str, Any]) -> list[str]:
    """The fact an activity line carries, as generator.Fact (a list, for JSON)."""
    kind = a.get("kind")
    if kind == "part_named":
        return ["part", str(a.get("part_id")), str(a.get("name"))]
    if kind == "goal_set":
        return ["goal", str(a.get("part_id")), str(a.get("goal"))]
    if kind == "trigger_noted":
        return ["trigger", str(a.get("trigger"))]
    return ["safety", str(a.get("note"))]


def edit_kind(edit: dict[str, Any]) -> str:
    """What an edit is for, to say where edit mode's completion tokens go."""
    path = str(edit.get("path", ""))
    if path == "/summary":
        return "summary"
    if path.endswith(("/recency_score", "/influence_score")):
        return "scores"
    if edit.get("op") == "remove" or path.endswith("/related_parts"):
        return "removals"
    return "facts (parts, goals, triggers, notes)"


# OpenAI's prompt caching: prompts of at least 1,024 tokens, served from the cache in steps of 128
# tokens of their longest prefix seen before (https://platform.openai.com/docs/guides/prompt-caching).
CACHE_MIN_TOKENS = 1_024
CACHE_STEP_TOKENS = 128


def cached_of(prefix_tokens: int, prompt_tokens: int) -> int:
    """What a warm prefix cache serves of a prompt whose stable prefix is `prefix_tokens` long."""
    if prompt_tokens < CACHE_MIN_TOKENS:
        return 0
    served = prefix_tokens // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS
    return served if served >= CACHE_MIN_TOKENS else 0


def completion(
    content: str, prompt_tokens: int, completion_tokens: int, model: str = MODEL, cached_tokens: int = 0
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-sim",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content, "refusal": None}}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def serve(model: ScriptedModel) -> AbstractContextManager[str]:
    """Serve `model` on 127.0.0.1 (a free port) for the duration; yields the base URL (…/v1)."""

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

        def do_POST(self) -> None:  # http.server's name
            status = 200
            try:
                request = self.read_json()
                if self.path.endswith("/chat/completions"):
                    payload = model.answer(request)
                else:
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
            except Exception as err:  # a request the model cannot read is a 400, as OpenAI's are
                model.errors.append(f"{type(err).__name__}: {err}")
                status, payload = 400, {"error": {"message": f"{type(err).__name__}: {err}"}}
            self.send_json(status, json.dumps(payload).encode())

    return serving(Handler)

"""A deterministic, offline summarizer: folds structured activity into the document.

Understood activity kinds (payload fields):
    part_named    {part_id, name, status?}         add or refresh a part
    goal_set      {part_id, goal}                  add a goal to a part
    trigger_noted {trigger, desired_outcome, related_parts?}
    safety_note   {note}                           append to the safety notes
    forget_part   {part_id}                        remove a part (an explicit request)
    session, message, insight_interaction, ...     counted in the summary
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from user_memory.domain.document import empty_document
from user_memory.domain.model import Activity
from user_memory.domain.patching import copy_json
from user_memory.domain.ports import SummaryResult

RECENCY_DECAY = 0.9


class RuleBasedSummarizer:
    """Deterministic summaries with no network; used when no LLM is configured."""

    name = "rules"

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        doc = copy_json(document) if document else empty_document()
        parts: dict[str, Any] = doc.setdefault("parts", {})
        triggers: list[dict[str, Any]] = doc.setdefault("triggers_and_goals", [])
        touched: set[str] = set()
        for part in parts.values():
            part["recency_score"] = round(float(part.get("recency_score", 0.0)) * RECENCY_DECAY, 3)
        for a in activities:
            p = a.payload
            if a.kind == "part_named" and p.get("part_id"):
                part = parts.setdefault(
                    str(p["part_id"]),
                    {
                        "name": str(p.get("name") or p["part_id"]),
                        "status": "active",
                        "recency_score": 1.0,
                        "influence_score": 0.1,
                        "goals": [],
                    },
                )
                part["name"] = str(p.get("name") or part["name"])
                part["status"] = str(p.get("status") or part["status"])
                touched.add(str(p["part_id"]))
            elif a.kind == "goal_set" and str(p.get("part_id")) in parts and p.get("goal"):
                part = parts[str(p["part_id"])]
                if {"goal": str(p["goal"])} not in part["goals"]:
                    part["goals"].append({"goal": str(p["goal"])})
                part["influence_score"] = round(min(1.0, float(part["influence_score"]) + 0.1), 3)
                touched.add(str(p["part_id"]))
            elif a.kind == "trigger_noted" and p.get("trigger"):
                related = [str(x) for x in p.get("related_parts", []) if str(x) in parts]
                entry = {
                    "trigger": str(p["trigger"]),
                    "desired_outcome": str(p.get("desired_outcome", "")),
                    "related_parts": related,
                }
                if entry not in triggers:
                    triggers.append(entry)
            elif a.kind == "safety_note" and p.get("note"):
                note = str(p["note"])
                notes = doc.get("safety_notes", "")
                if note not in notes:
                    doc["safety_notes"] = f"{notes}\n{note}".strip()
            elif a.kind == "forget_part" and str(p.get("part_id")) in parts:
                forgotten = str(p["part_id"])
                del parts[forgotten]
                for t in triggers:
                    t["related_parts"] = [x for x in t["related_parts"] if x != forgotten]
        for part_id in touched:
            parts[part_id]["recency_score"] = 1.0
        counts = Counter(a.kind for a in activities)
        day = activities[-1].occurred_at.date().isoformat() if activities else "no activity"
        described = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        active = sorted(parts, key=lambda k: -parts[k]["recency_score"])[:3]
        doc["summary"] = (
            f"Last active {day} ({described}). {len(parts)} known parts"
            + (f"; most recent: {', '.join(parts[k]['name'] for k in active)}" if active else "")
            + f"; {len(triggers)} triggers tracked."
        )
        doc["last_updated_by"] = "rules"
        return SummaryResult(document=doc, model="rules (no LLM configured)")

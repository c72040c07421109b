"""What finding and keeping a person's edits costs a nightly run, at the companion's bounds.

    .venv/bin/python bench/bench_people_edits.py [--elements 2000] [--activities 500] [--repeat 5]

A companion memory whose first version a person wrote through the API with `--elements` to-dos
(the collection as one value: the version is compared with the schema's starting document), on
the in-memory recorder. Printed, best of `--repeat`: the time to find the person's fields
(pipeline.people_edits: the pointers, then the comparison), and the time to keep them against an
answer that changed every one of them with `--activities` activities of free text before the edit
(facts.keep_human_edits: every field a conflict the person wins).
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime, timedelta

from user_memory.adapters.memory import InMemoryActivity, InMemoryRecorder
from user_memory.config import WorkerSettings
from user_memory.domain.memory.document import empty_document, validate_document
from user_memory.domain.memory.patching import copy_json
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import Activity
from user_memory.domain.summary.facts import keep_human_edits
from user_memory.domain.summary.pipeline import people_edits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=2000)
    parser.add_argument("--activities", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    user = uuid.uuid4()
    store = MemoryStore(InMemoryRecorder(InMemoryActivity()), max_document_bytes=10**8)
    cfg = WorkerSettings(document_schema="companion").pipeline()
    doc = empty_document("companion")
    doc["todos"] = {f"t{i}": {"id": f"t{i}", "text": f"to-do number {i}"} for i in range(args.elements)}
    store.append(user, validate_document(doc, "companion", max_bytes=10**8), expected_version=0, source="api")
    head = store.head(user)
    answer = copy_json(head.document)
    for todo in answer["todos"].values():
        todo["status"] = "done"
    before = datetime.now(UTC) - timedelta(minutes=5)
    acts = [
        Activity(
            user_id=user, occurred_at=before, kind="message", payload={"text": "x"}, source="b", external_id=str(i)
        )
        for i in range(args.activities)
    ]
    find = keep = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        human = people_edits(store, user, head, cfg)
        find = min(find, time.perf_counter() - started)
        started = time.perf_counter()
        result = keep_human_edits(head.document, answer, acts, human, "companion")
        keep = min(keep, time.perf_counter() - started)
    print("| elements | activities | fields found | find (ms) | keep (ms) | kept | conflicts |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.elements:,} | {args.activities:,} | {len(human):,} | {find * 1000:.0f} | {keep * 1000:.0f} "
        f"| {len(result.kept):,} | {len(result.conflicts):,} |"
    )


if __name__ == "__main__":
    main()

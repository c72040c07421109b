"""Every user's nightly run leaves a trace, and a stored document that no longer validates is
reported, not retried into the DLQ: the real worker handler on real SQS events, real PostgreSQL,
the real `openai` client against the local fake endpoint.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from user_memory.adapters.postgres import PostgresActivity
from user_memory.config import WorkerSettings
from user_memory.domain.memory.document import validate_document
from user_memory.domain.model import Activity
from user_memory.observability import metrics
from user_memory.runtime import build_worker
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext

from tests.e2e.helpers import emitted_metrics, refresh_body, seed_users, sqs_event, worker_services
from tests.fake_openai import edit, edits_completion, fake_openai_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]

# Content no log line may carry
NOTES = "never mention the accident"
SUMMARY = "Grows tomatoes on the balcony"


def record_session(pool, user: uuid.UUID, day: datetime) -> None:
    PostgresActivity(pool).record(
        [
            Activity(
                user_id=user,
                occurred_at=day + timedelta(hours=3),
                kind="session",
                payload={"minutes": 20},
                source="trace",
                external_id=f"{user}:session",
            )
        ]
    )


def test_each_users_run_leaves_one_info_line_with_its_outcome_and_counts_never_content(database_url, pool, store, logs):
    # Given three users in one message: one whose day names a part and a goal (the model adds them),
    # one whose model answer only clears the safety notes (refused: nothing changes), one with no activity
    day = datetime(2031, 3, 1, tzinfo=UTC)
    [written] = seed_users(pool, 1, day, f"trace-{uuid.uuid4()}")
    refused, idle = uuid.uuid4(), uuid.uuid4()
    seed = validate_document({"summary": SUMMARY, "safety_notes": NOTES})  # in stored form: the schema's defaults
    for user in (refused, idle):
        store.append(user, seed, expected_version=0, source="seed")
    record_session(pool, refused, day)
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
                edit("add", "/parts/planner/goals/-", {"goal": "plan"}, "goal_set"),
            )
        )
        fake.reply(edits_completion(edit("replace", "/safety_notes", "", "stale")))
        # The answers are scripted in the users' order: one lane, so the calls come in that order
        services = worker_services(database_url, pool, openai_base_url=url, openai_api_key="k", llm_concurrency=1)
        # When the worker runs the message
        result = worker_handler(
            sqs_event(refresh_body([written, refused, idle], day, "daily:2031-03-01")),
            FakeLambdaContext(),
            services=services,
        )
    assert result == {"batchItemFailures": []}
    # Then each user has exactly one INFO line naming the user, the run, the outcome and its counts
    lines = {line["user_id"]: line for line in logs.named("user refreshed")}
    assert set(lines) == {str(written), str(refused), str(idle)} and len(logs.named("user refreshed")) == 3
    assert {line["levelno"] for line in lines.values()} == {logging.INFO}
    assert all(line["run_key"] == "daily:2031-03-01" and line["message_id"] == "m0" for line in lines.values())

    def fields(user: uuid.UUID) -> tuple:
        line = lines[str(user)]
        keys = ("outcome", "skipped", "version", "edits_applied", "edits_refused", "facts_restored", "facts_filled")
        return tuple(line[k] for k in keys)

    assert fields(written) == ("written", None, 1, 2, 0, 0, 0)
    # The run whose every edit was refused is visible for its user: unchanged, one edit refused
    assert fields(refused) == ("unchanged", None, 1, 0, 1, 0, 0)
    assert fields(idle) == ("skipped", "no_activity", 1, 0, 0, 0, 0)
    assert store.head(refused).document["safety_notes"] == NOTES
    # And no line carries the memory's content
    for record in logs.records:
        text = str(record.__dict__)
        assert NOTES not in text and SUMMARY not in text


def test_a_stored_document_that_no_longer_validates_is_reported_and_skipped_never_failed(
    database_url, pool, store, conn, logs, capsys, monkeypatch
):
    # Given a user with a valid memory and a day of activity, whose stored document is then changed
    # by direct SQL as the owner into one the schema refuses (a field it does not know, as a schema
    # change leaves behind)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2031, 3, 2, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"invalid-{uuid.uuid4()}")
    store.append(user, validate_document({"safety_notes": NOTES}), expected_version=0, source="seed")
    conn.execute(
        "UPDATE user_memory_heads SET document = document || '{\"mood\": 3}'::jsonb WHERE user_id = %s", (user,)
    )
    services = build_worker(WorkerSettings.from_env({}, database_url=database_url, summarizer="rules"), pool=pool)
    event = sqs_event(refresh_body([user], day, "daily:2031-03-02"))
    for night in (1, 2):
        metrics.clear_metrics()
        capsys.readouterr()
        logs.records.clear()
        # When the worker runs the user's message (night 1, and its redelivery on night 2)
        result = worker_handler(event, FakeLambdaContext(), services=services)
        # Then the message is not failed (it would otherwise go round to the DLQ, every night)
        assert result == {"batchItemFailures": []}, night
        assert not logs.named("record failed") and not logs.named("user refresh failed")
        # And the user is reported: a warning with the user and the version, a metric, a skipped run
        [report] = logs.named("stored document invalid")
        assert (report["user_id"], report["version"], report["schema"]) == (str(user), 1, "user_state")
        [line] = logs.named("user refreshed")
        assert (line["outcome"], line["skipped"], line["version"]) == ("skipped", "invalid_stored_document", 1)
        assert emitted_metrics(capsys)["InvalidStoredDocument"] in (1.0, [1.0])
        # And nothing was written or marked: the memory stays as it was, the activity waits
        assert store.head(user).version == 1
        waiting = conn.execute(
            "SELECT count(*) FROM user_activity WHERE user_id = %s AND summarized_version IS NULL", (user,)
        ).fetchone()[0]
        assert waiting == 3
    # When a valid version replaces the document (as the user's PUT would) and the next night runs
    store.append(user, validate_document({"safety_notes": NOTES}), expected_version=1, source="api")
    logs.records.clear()
    result = worker_handler(
        sqs_event(refresh_body([user], day, "daily:2031-03-03")), FakeLambdaContext(), services=services
    )
    # Then the waiting activity is summarized into a version
    assert result == {"batchItemFailures": []}
    [line] = logs.named("user refreshed")
    assert (line["outcome"], line["version"]) == ("written", 3)
    assert "planner" in store.head(user).document["parts"] and not logs.named("stored document invalid")

"""A user's daily token budget and the run's cost, through the real worker handler on real
PostgreSQL: a day past the budget is deferred and counted, never cut; the batch line prices tokens."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore
from user_memory.observability import metrics
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.poller import FakeLambdaContext

from tests.browser.seed import nightly_provenance
from tests.e2e.helpers import emitted_metrics, refresh_body, seed_users, sqs_event, worker_services
from tests.fake_openai import edit, edits_completion, fake_openai_server

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

DAY = datetime(2031, 1, 5, tzinfo=UTC)
RUN = "daily:2031-01-05"


def unsummarized(pool, user: uuid.UUID) -> int:  # type: ignore[no-untyped-def]
    return len(PostgresActivity(pool).unsummarized(user, before=datetime(2100, 1, 1, tzinfo=UTC), limit=100))


def test_a_day_past_the_users_token_budget_is_deferred_logged_and_counted(
    database_url, pool, logs, capsys, monkeypatch
):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    # Given a user who already spent 9,990 tokens today (an earlier run's version) and a day of activity
    [user] = seed_users(pool, 1, DAY, f"budget-{uuid.uuid4()}")
    store = MemoryStore(PostgresRecorder(pool))
    store.append(
        user,
        {"summary": "earlier today"},
        expected_version=0,
        source="summary (manual)",
        provenance=nightly_provenance([], [], 9_990),
    )
    services = worker_services(database_url, pool, max_tokens_per_user_day=10_000)
    metrics.clear_metrics()
    capsys.readouterr()
    # When the nightly run reaches them
    result = worker_handler(sqs_event(refresh_body([user], DAY, RUN)), FakeLambdaContext(), services=services)
    # Then the record succeeds, nothing is written and the activity waits for the next run
    assert result == {"batchItemFailures": []}
    assert store.head(user).version == 1 and unsummarized(pool, user) == 3
    # And a line names the user and the figures (never content), and a metric counts it
    [line] = logs.named("token budget reached")
    assert (line["user_id"], line["budget"], line["tokens_today"], line["deferred"]) == (str(user), 10_000, 9_990, 3)
    [refreshed] = logs.named("user refreshed")
    assert (refreshed["outcome"], refreshed["skipped"]) == ("skipped", "over_budget")
    assert logs.named("batch done")[0]["users_over_budget"] == 1
    emf = emitted_metrics(capsys)
    assert emf["TokenBudgetDeferred"] in (1.0, [1.0])
    # And with room in the budget (the next day's, here a larger one) the same activity is summarized
    roomy = worker_services(database_url, pool, max_tokens_per_user_day=100_000)
    worker_handler(sqs_event(refresh_body([user], DAY, RUN)), FakeLambdaContext(), services=roomy)
    metrics.clear_metrics()
    assert store.head(user).version == 2 and unsummarized(pool, user) == 0


def test_the_batch_line_and_the_version_price_the_runs_tokens(database_url, pool, logs):
    # Given a user with a day of activity, and a model that reports 1,000 prompt tokens (400 cached) and 100 out
    [user] = seed_users(pool, 1, DAY, f"cost-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.reply(
            edits_completion(
                edit("add", "/parts/planner", {"name": "Planner", "status": "active", "recency_score": 1.0,
                                              "influence_score": 0.1, "goals": [{"goal": "plan"}]}),
                prompt_tokens=1_000,
                completion_tokens=100,
                cached_tokens=400,
            )
        )  # fmt: skip
        services = worker_services(
            database_url,
            pool,
            openai_base_url=url,
            openai_api_key="k",
            llm_price_input_per_1m=2.0,
            llm_price_cached_input_per_1m=1.0,
            llm_price_output_per_1m=8.0,
        )
        worker_handler(sqs_event(refresh_body([user], DAY, RUN)), FakeLambdaContext(), services=services)
        metrics.clear_metrics()
    # Then the version records the cost at the configured prices: (600 x 2 + 400 x 1 + 100 x 8) / 1M
    [entry] = MemoryStore(PostgresRecorder(pool)).history(user, limit=1)
    assert entry.provenance["cost_usd"] == 0.0024
    # And the user's line and the batch line carry it
    assert logs.named("user refreshed")[0]["cost_usd"] == 0.0024
    assert logs.named("batch done")[0]["cost_usd"] == 0.0024
    assert json.dumps(logs.named("batch done")[0]).count("plan") == 0  # never content

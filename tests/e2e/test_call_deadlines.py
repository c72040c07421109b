"""Every outbound call ends by its wall-clock deadline, through the real handlers and the real
`openai` client: the model and embeddings endpoints trickle their answer one byte at a time
(tests/fake_openai.py), so every read gets a byte long before its per-read timeout and only a
wall-clock deadline can end the call.

The deadline is the invocation's time left minus DEADLINE_MARGIN_MS (an invocation given a few
seconds, as one late in its batch would have), or the call's configured timeout when that is
shorter. Each test shows the handler answering before the invocation's end (Lambda would
otherwise kill it, and the whole batch with it), the failure logged and counted, and the
endpoint hung up on rather than left trickling.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.observability import metrics
from user_memory.runtime import build_api
from user_memory_functions.api.app import handler as api_handler
from user_memory_functions.worker.app import handler as worker_handler
from user_memory_local.apigw import http_event
from user_memory_local.poller import FakeLambdaContext

from tests.e2e.helpers import (
    batch_event,
    conversation,
    emitted_metrics,
    memory_reply,
    named,
    openai_stack,
    refresh_body,
    seed_users,
    sqs_event,
    worker_services,
)
from tests.fake_openai import completion, edits_completion, fake_openai_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.usefixtures("aws_env"),
]

TRICKLE = 0.2  # seconds between the endpoint's bytes: far below every per-read timeout here
# Seconds the invocation has when the handler starts: every call must end within 5.5 s, so the
# worker still starts one (it starts none with less than MIN_CALL_SECONDS left).
INVOCATION = 6.5
MARGIN_MS = 1000
EMBEDDING_MODEL = "text-embedding-3-small"


def hung_up(fake: Any, wait: float = 3.0) -> bool:
    """Whether the trickling endpoint saw the client hang up (it stops and records the bytes it sent)."""
    ends = time.monotonic() + wait
    while not fake.trickled and time.monotonic() < ends:
        time.sleep(0.05)
    return bool(fake.trickled)


def run_record(services: Any, user: uuid.UUID, day: datetime, run_key: str, **context: Any) -> tuple[Any, float]:
    """The worker's answer to one refresh_user record of `user`'s day, and the seconds it took."""
    started = time.monotonic()
    event = sqs_event(refresh_body([user], day, run_key))
    result = worker_handler(event, FakeLambdaContext(**context), services=services)
    return result, time.monotonic() - started


def test_a_trickling_model_fails_the_users_run_before_the_invocations_deadline(
    database_url, pool, logs, capsys, monkeypatch
):
    # Given a worker whose model endpoint trickles its answer, with a 25 s timeout per read and per try
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    day = datetime(2031, 2, 1, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"trickle-llm-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.reply(edits_completion(), trickle=TRICKLE)
        services = worker_services(
            database_url,
            pool,
            openai_base_url=url,
            openai_api_key="k",
            openai_timeout_seconds=25,
            deadline_margin_ms=MARGIN_MS,
        )
        metrics.clear_metrics()
        capsys.readouterr()
        # When an invocation with 6.5 s left runs the user's record
        result, elapsed = run_record(services, user, day, "daily:2031-02-01", timeout_seconds=INVOCATION)
        # Then the handler answers before the invocation's end: the call was cut at the deadline
        assert elapsed < INVOCATION, elapsed
        assert hung_up(fake) and fake.trickled[0] < 100
    # And the record failed alone, logged with why and counted, and comes back for a retry
    assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    [line] = logs.named("record failed")
    assert line["error"] == "SummarizerUnavailable" and "timed out" in line["reason"]
    emf = emitted_metrics(capsys)
    assert emf["RecordsFailed"] in (1.0, [1.0]) and emf["UsersFailed"] in (1.0, [1.0])
    assert len(fake.requests) == 1  # no retry started past the deadline


def test_the_configured_timeout_bounds_a_call_by_wall_clock_when_the_invocation_has_time(database_url, pool, logs):
    # Given a worker whose model endpoint trickles, OPENAI_TIMEOUT_SECONDS=1 and no client retry,
    # in an invocation with its full 120 s
    day = datetime(2031, 2, 2, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"trickle-timeout-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.reply(edits_completion(), trickle=TRICKLE)
        fake.reply(edits_completion(), trickle=TRICKLE)
        services = worker_services(
            database_url, pool, openai_base_url=url, openai_api_key="k", openai_timeout_seconds=1, openai_max_retries=0
        )
        # When the worker runs the user's record
        result, elapsed = run_record(services, user, day, "daily:2031-02-02")
    # Then the one call ended after its 1 s (plus slack), not when the endpoint finished
    assert elapsed < 2.5, elapsed
    assert result == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    [line] = logs.named("record failed")
    assert line["error"] == "SummarizerUnavailable" and "timed out after 1.0 s" in line["reason"]


def test_a_trickling_model_fails_a_conversation_before_the_deadline_and_it_is_re_sent(database_url, pool, logs):
    # Given a worker whose model endpoint trickles, and a batch of one quiet conversation
    with openai_stack(database_url, pool, openai_timeout_seconds=25, deadline_margin_ms=MARGIN_MS) as (stack, fake):
        key = conversation(stack.conversations)
        fake.reply(memory_reply(), trickle=TRICKLE)
        # When an invocation with 6.5 s left runs the record
        started = time.monotonic()
        result = stack.worker(batch_event([key]), FakeLambdaContext(timeout_seconds=INVOCATION))
        elapsed = time.monotonic() - started
        assert elapsed < INVOCATION, elapsed
        assert hung_up(fake)
        queued = stack.queued()
    # Then the conversation failed alone, logged and counted, and was re-sent for a retry
    assert result == {"batchItemFailures": []}
    [failed] = logs.named("conversation memory failed")
    assert (failed["conversation_id"], failed["error"]) == (key.conversation_id, "SummarizerUnavailable")
    assert "timed out" in failed["reason"]
    assert [named(b) for b in queued] == [[key]] and queued[0]["attempt"] == 1
    assert stack.memory(key) is None


def test_a_trickling_embeddings_endpoint_after_the_nightly_summary_leaves_the_run_written(
    database_url, pool, conn, logs
):
    # Given a worker (rule-based summaries) whose embeddings endpoint trickles, EMBEDDING_TIMEOUT_SECONDS=1
    # with one retry, in an invocation with its full 120 s
    day = datetime(2031, 2, 3, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"trickle-embed-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.reply({"data": []}, trickle=TRICKLE)
        fake.reply({"data": []}, trickle=TRICKLE)
        services = worker_services(
            database_url,
            pool,
            summarizer="rules",
            embedding_model=EMBEDDING_MODEL,
            embedding_base_url=url,
            embedding_api_key="k",
            embedding_timeout_seconds=1,
        )
        # When the worker runs the user's record
        result, elapsed = run_record(services, user, day, "daily:2031-02-03")
        assert hung_up(fake)
    # Then both tries ended by wall clock (2 s in all, plus slack), and the summary is written all the same
    assert elapsed < 3.5, elapsed
    assert [r["path"] for r in fake.requests] == ["/v1/embeddings", "/v1/embeddings"]
    assert result == {"batchItemFailures": []}
    assert services.store.head(user).version == 1
    # And the embeddings' failure is logged with the user and the error (the texts wait for the next write)
    [failed] = logs.named("embedding failed")
    assert (failed["user_id"], failed["error"]) == (str(user), "EmbeddingsUnavailable")
    assert "no answer within" in failed["reason"]
    pending = conn.execute("SELECT count(*) FROM memory_embeddings WHERE user_id = %s", (user,)).fetchone()[0]
    assert pending == 0


def test_a_trickling_embeddings_endpoint_after_an_api_write_answers_before_the_deadline(pool, logs):
    # Given the API (a 10 s EMBEDDING_TIMEOUT_SECONDS) whose embeddings endpoint trickles
    with fake_openai_server() as (fake, url):
        fake.reply({"data": []}, trickle=TRICKLE)
        settings = ApiSettings.from_env(
            {
                "DOCUMENT_SCHEMA": "companion",
                "EMBEDDING_MODEL": EMBEDDING_MODEL,
                "EMBEDDING_BASE_URL": url,
                "EMBEDDING_API_KEY": "k",
                "DEADLINE_MARGIN_MS": str(MARGIN_MS),
            }
        )
        api = create_api(build_api(settings, pool=pool), settings)
        user = str(uuid.uuid4())
        event = http_event(
            "POST",
            "/me/todos",
            headers={"Content-Type": "application/json"},
            body=json.dumps({"id": "t1", "text": "Renew the passport"}),
            claims={"sub": user, "iss": "https://issuer.test", "aud": "user-memory"},
        )
        # When a write arrives in an invocation with 6.5 s left
        started = time.monotonic()
        result = api_handler(event, FakeLambdaContext(function_name="api", timeout_seconds=INVOCATION), api=api)
        elapsed = time.monotonic() - started
        assert hung_up(fake)
    # Then the write is answered before the invocation's end: the embedding was cut at the deadline
    assert elapsed < INVOCATION, elapsed
    assert result["statusCode"] == 200, result
    assert json.loads(result["body"])["version"] == 1
    # And the embedding's failure is logged with the user and the error, never the request's
    [failed] = logs.named("embedding failed")
    assert (failed["user_id"], failed["error"]) == (user, "EmbeddingsUnavailable")
    # (the time left after the write, less the margin: 5.5 s at most, less on a loaded machine)
    bound = re.search(r"no answer within (\d+\.\d) s", failed["reason"])
    assert bound is not None and 0 < float(bound.group(1)) <= INVOCATION - MARGIN_MS / 1000, failed["reason"]


def test_an_answer_that_arrives_in_time_is_not_cut(database_url, pool):
    # Given a model endpoint that answers at once, in an invocation with 6.5 s left
    day = datetime(2031, 2, 4, tzinfo=UTC)
    [user] = seed_users(pool, 1, day, f"in-time-{uuid.uuid4()}")
    with fake_openai_server() as (fake, url):
        fake.default = completion(json.dumps({"edits": []}))
        services = worker_services(
            database_url, pool, openai_base_url=url, openai_api_key="k", deadline_margin_ms=MARGIN_MS
        )
        # When the worker runs the user's record
        result = worker_handler(
            sqs_event(refresh_body([user], day, "daily:2031-02-04")),
            FakeLambdaContext(timeout_seconds=INVOCATION),
            services=services,
        )
    # Then the run completes: the deadline bounds calls, it does not shorten the ones that answer
    assert result == {"batchItemFailures": []}
    assert services.store.head(user).version == 1

"""The nightly run through the Batch API (SUMMARY_DELIVERY=batch), end to end: the real worker
handler on real SQS events (moto), the embedded PostgreSQL, the real `openai` client against a
local stand-in of the Files, Batches and chat completions endpoints (tests/fake_openai_batch.py).

The stand-in answers a request the same way online and in a batch, so a batch night must write
exactly what an online night writes, through the same checks."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore

from tests.e2e.helpers import Stack, refresh_body, seed_users, sqs_event
from tests.fake_openai import completion, edit, edits_completion
from tests.fake_openai_batch import FakeBatchAPI, fake_batch_server

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("aws_env")]

DAY = datetime(2031, 3, 2, tzinfo=UTC)


def planner(body: dict[str, Any]) -> dict[str, Any]:
    """The model: names the day's part and its goal."""
    return edits_completion(
        edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
        edit("add", "/parts/planner/goals/-", {"goal": "plan"}, "goal_set"),
        prompt_tokens=700,
        completion_tokens=60,
    )


def forgetful(body: dict[str, Any]) -> dict[str, Any]:
    """The model: leaves the goal out of its first answer, and adds it when told it is missing
    (the fact floor's second attempt)."""
    if "could not be used" in body["messages"][-1]["content"]:
        return planner(body)
    return edits_completion(
        edit("add", "/parts/planner", {"name": "Planner", "status": "active"}, "part_named"),
        prompt_tokens=650,
        completion_tokens=40,
    )


@contextmanager
def endpoint(respond: Any) -> Iterator[tuple[FakeBatchAPI, str, Any]]:
    with mock_aws(), fake_batch_server(respond) as (fake, url):
        yield fake, url, boto3.client("sqs", region_name="us-east-1")


def stack_for(database_url: str, pool: Any, sqs: Any, url: str, delivery: str = "batch") -> Stack:
    return Stack(
        database_url,
        pool,
        sqs,
        summarizer="openai",
        openai_base_url=url,
        openai_api_key="k",
        summary_delivery=delivery,
        batch_poll_seconds=0,
    )


def users_with_memory(pool: Any, n: int, tag: str) -> list[uuid.UUID]:
    """`n` users, each with a memory of their own (version 1) and a day of activity."""
    users = seed_users(pool, n, DAY, tag)
    store = MemoryStore(PostgresRecorder(pool))
    for i, user in enumerate(users):
        store.append(user, {"summary": f"person number {i}", "parts": {}}, expected_version=0, source="seed")
    return users


def deliver(stack: Stack, *bodies: str) -> dict[str, Any]:
    return stack.worker(sqs_event(*bodies))


def drain(stack: Stack) -> int:
    """Let the worker take what is on its queue (the collect messages), as Lambda's poller would."""
    poller = stack.poller()
    taken = 0
    while n := poller.poll_once():
        taken += n
        assert taken < 20, "the queue does not drain"
    return taken


def heads(pool: Any, users: list[uuid.UUID]) -> list[tuple[int, dict[str, Any], dict[str, Any], str | None]]:
    """(version, document, provenance, source) of each user's head."""
    out = []
    with pool.connection() as conn:
        for user in users:
            row = conn.execute(
                "SELECT s.version, s.provenance, s.source_description FROM user_memory_snapshots s"
                " JOIN user_memory_heads h ON h.user_id = s.user_id AND h.version = s.version WHERE s.user_id = %s",
                (user,),
            ).fetchone()
            out.append((row[0], MemoryStore(PostgresRecorder(pool)).head(user).document, row[1], row[2]))
    return out


def claims(pool: Any, run_key: str) -> int:
    with pool.connection() as conn:
        return int(
            conn.execute("SELECT count(*) FROM summary_batch_requests WHERE run_key = %s", (run_key,)).fetchone()[0]
        )


def only_batch(fake: FakeBatchAPI) -> str:
    [batch_id] = fake.batches
    return batch_id


def test_a_batch_night_writes_the_versions_an_online_night_writes(database_url, pool, logs):
    # Given two sets of users with the same memories and the same day, and a model that leaves a
    # goal out of its first answer (so the fact floor sends it back once)
    with endpoint(forgetful) as (fake, url, sqs):
        online_users = users_with_memory(pool, 3, f"online-{uuid.uuid4()}")
        batch_users = users_with_memory(pool, 3, f"batch-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        # When one set's night runs online
        online = stack_for(database_url, pool, sqs, url, delivery="online")
        assert deliver(online, refresh_body(online_users, DAY, run_key)) == {"batchItemFailures": []}
        online_calls = len(fake.chat)
        # And the other's through the batch: submitted, looked at while it runs, then collected
        batch = stack_for(database_url, pool, sqs, url)
        assert deliver(batch, refresh_body(batch_users, DAY, run_key)) == {"batchItemFailures": []}
        batch_id = only_batch(fake)
        assert heads(pool, batch_users)[0][0] == 1 and claims(pool, run_key) == 3  # nothing written yet
        fake.run(batch_id)
        assert batch.poller().poll_once() == 1  # the collect message: the batch runs, so it comes back
        assert heads(pool, batch_users)[0][0] == 1 and fake.calls("GET", rf"/v1/batches/{batch_id}") == 1
        fake.end(batch_id)
        drain(batch)
    # Then every batch user has the version its online twin has: the same document, provenance and source
    assert [h[1:] for h in heads(pool, batch_users)] == [h[1:] for h in heads(pool, online_users)]
    assert {h[0] for h in heads(pool, batch_users)} == {2}
    document, provenance = heads(pool, batch_users)[0][1:3]
    assert document["parts"]["planner"]["goals"] == [{"goal": "plan"}] and provenance["calls"] == 2
    # And the batch carried the users' first requests, exactly the online summarizer's bodies;
    # only the fact floor's second attempts went online
    lines = fake.input_lines(batch_id)
    assert sorted(line["custom_id"] for line in lines) == sorted(map(str, batch_users))
    assert lines[0]["body"]["response_format"]["json_schema"]["name"] == "memory_edits"
    assert online_calls == 6 and len(fake.chat) - online_calls == 3
    assert all("could not be used" in body["messages"][-1]["content"] for body in fake.chat[online_calls:])
    # And the claims are gone once collected, and the collection is logged
    assert claims(pool, run_key) == 0
    [collected] = logs.named("batch collected")
    assert (collected["users"], collected["answered"], collected["failed"]) == (3, 3, 0)


def test_a_redelivered_submit_message_submits_nothing_new(database_url, pool):
    # Given a night's message whose batch was submitted
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 2, f"redelivered-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        stack = stack_for(database_url, pool, sqs, url)
        body = refresh_body(users, DAY, run_key)
        deliver(stack, body)
        # When SQS delivers the same message again, before and after the batch is collected
        deliver(stack, body)
        fake.end(only_batch(fake))
        drain(stack)
        deliver(stack, body)
        drain(stack)
    # Then one file was uploaded and one batch created, and each user has one version of the run
    assert fake.calls("POST", "/v1/files") == 1 and fake.calls("POST", "/v1/batches") == 1
    assert [h[0] for h in heads(pool, users)] == [2, 2] and fake.chat == []
    with pool.connection() as conn:
        written = conn.execute(
            "SELECT count(*) FROM user_memory_snapshots WHERE idempotency_key = %s", (run_key,)
        ).fetchone()[0]
    assert written == 2


def test_duplicate_deliveries_at_once_claim_each_user_once(database_url, pool):
    # Given the same message in one event twice (two receives of one message)
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 2, f"twice-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        stack = stack_for(database_url, pool, sqs, url)
        body = refresh_body(users, DAY, run_key)
        # When the worker takes both
        assert deliver(stack, body, body) == {"batchItemFailures": []}
    # Then one batch holds the users, once each
    assert fake.calls("POST", "/v1/batches") == 1
    assert sorted(line["custom_id"] for line in fake.input_lines(only_batch(fake))) == sorted(map(str, users))


@pytest.mark.parametrize("status", ["expired", "failed", "cancelled"])
def test_a_batch_that_ended_without_answers_falls_back_online_for_every_user(database_url, pool, status):
    # Given a submitted batch that ends without answering anyone
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 3, f"{status}-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body(users, DAY, f"daily:{uuid.uuid4()}"))
        # When it ends so and is collected
        fake.end(only_batch(fake), status)
        drain(stack)
    # Then every user was summarized online, with the same checks
    assert len(fake.chat) == 3
    assert all(h[0] == 2 and h[1]["parts"]["planner"]["goals"] == [{"goal": "plan"}] for h in heads(pool, users))


def test_an_expired_batch_uses_what_it_answered_and_falls_back_online_for_the_rest(database_url, pool):
    # Given a batch of three users that expires having answered one
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 3, f"partly-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body(users, DAY, f"daily:{uuid.uuid4()}"))
        fake.end(only_batch(fake), "expired", answered={str(users[0])})
        drain(stack)
    # Then the two it did not answer went online, and everyone has the day's version
    assert len(fake.chat) == 2
    assert not any("person number 0" in body["messages"][-1]["content"] for body in fake.chat)
    assert [h[0] for h in heads(pool, users)] == [2, 2, 2]


def test_a_failed_item_falls_back_online_for_that_user_only(database_url, pool, capsys, monkeypatch):
    # Given a completed batch in which one user's request failed (HTTP 500)
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 3, f"item-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body(users, DAY, f"daily:{uuid.uuid4()}"))
        fake.end(only_batch(fake), failing={str(users[1]): 500})
        drain(stack)
    # Then only that user's request went online, and everyone has the day's version
    [online] = fake.chat
    assert "person number 1" in online["messages"][-1]["content"]
    assert [h[0] for h in heads(pool, users)] == [2, 2, 2]


def test_a_head_a_person_moved_while_the_batch_ran_is_rebased_onto(database_url, pool):
    # Given a submitted batch, and a person who rewrites the summary while it runs
    with endpoint(planner) as (fake, url, sqs):
        [user] = users_with_memory(pool, 1, f"moved-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body([user], DAY, f"daily:{uuid.uuid4()}"))
        store = MemoryStore(PostgresRecorder(pool))
        mine = {**store.head(user).document, "summary": "written by the person"}
        store.append(user, mine, expected_version=1, source="api")
        # When the batch completes and is collected
        fake.end(only_batch(fake))
        drain(stack)
    # Then the batch's answer was used (no online call) and replayed on the person's version:
    # their summary kept, the day's part and goal added
    assert fake.chat == []
    [(version, document, provenance, _)] = heads(pool, [user])
    assert version == 3 and document["summary"] == "written by the person"
    assert document["parts"]["planner"]["goals"] == [{"goal": "plan"}]
    assert provenance["mode"] == "edit" and len(provenance["edits"]) == 2


def test_a_collect_message_for_a_batch_already_collected_does_nothing(database_url, pool, logs):
    # Given a collected batch
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 1, f"again-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body(users, DAY, run_key))
        batch_id = only_batch(fake)
        fake.end(batch_id)
        drain(stack)
        gets = fake.calls("GET", rf"/v1/batches/{batch_id}")
        # When its collect message comes again
        collect = {"type": "collect_batch", "batch_id": batch_id, "run_key": run_key, "polls": 0}
        collect["window"] = json.loads(refresh_body(users, DAY, run_key))["window"]
        assert deliver(stack, json.dumps(collect)) == {"batchItemFailures": []}
    # Then the endpoint is not asked again and nothing is written
    assert fake.calls("GET", rf"/v1/batches/{batch_id}") == gets and [h[0] for h in heads(pool, users)] == [2]
    assert logs.named("batch already collected")


def test_a_batch_that_cannot_be_created_leaves_its_users_to_the_online_path_at_once(database_url, pool, logs):
    # Given an endpoint that refuses to create batches
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 2, f"refused-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        stack = stack_for(database_url, pool, sqs, url)
        fake.refuse_batches = 400
        # When the night's message comes
        assert deliver(stack, refresh_body(users, DAY, run_key)) == {"batchItemFailures": []}
    # Then the failure is logged, the users are summarized online in the same invocation, and no claim is left
    [failed] = logs.named("batch submit failed")
    assert failed["error"] == "BatchUnavailable" and "HTTP 400" in failed["reason"]
    assert len(fake.chat) == 2 and [h[0] for h in heads(pool, users)] == [2, 2]
    assert claims(pool, run_key) == 0 and fake.batches == {}


def test_a_batch_still_running_past_the_give_up_time_is_summarized_online(database_url, pool):
    # Given a submitted batch that the endpoint keeps in progress for more than a day
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 2, f"overdue-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body(users, DAY, f"daily:{uuid.uuid4()}"))
        batch_id = only_batch(fake)
        fake.run(batch_id)
        fake.batches[batch_id]["created_at"] -= 27 * 3600
        # When its collect message looks at it
        drain(stack)
    # Then the batch is cancelled and its users are summarized online, once each
    assert fake.calls("POST", rf"/v1/batches/{batch_id}/cancel") == 1
    assert fake.batches[batch_id]["status"] == "cancelling"
    assert len(fake.chat) == 2 and [h[0] for h in heads(pool, users)] == [2, 2]


def test_a_batch_answer_that_is_not_of_the_schema_goes_back_online_with_the_error(database_url, pool):
    # Given a model whose first answer is not JSON, and which answers well when told why
    def unreadable_first(body: dict[str, Any]) -> dict[str, Any]:
        if "could not be used" in body["messages"][-1]["content"]:
            return planner(body)
        return completion("this is not the edits' JSON", prompt_tokens=500, completion_tokens=10)

    with endpoint(unreadable_first) as (fake, url, sqs):
        [user] = users_with_memory(pool, 1, f"unreadable-{uuid.uuid4()}")
        stack = stack_for(database_url, pool, sqs, url)
        deliver(stack, refresh_body([user], DAY, f"daily:{uuid.uuid4()}"))
        fake.end(only_batch(fake))
        drain(stack)
    # Then the batch's answer was checked like an online one: refused, and asked again online with the error
    [retry] = fake.chat
    assert "could not be used" in retry["messages"][-1]["content"]
    [(version, document, provenance, _)] = heads(pool, [user])
    assert version == 2 and document["parts"]["planner"]["goals"] == [{"goal": "plan"}]
    assert provenance["calls"] == 2 and provenance["prompt_tokens"] == 1200


class RunsOutAfterCalls:
    """A Lambda context whose time runs out (below the deadline margin) once the endpoint has
    served `calls` online calls: the invocation's deadline, reached at a known point."""

    function_name = "worker"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:worker"
    aws_request_id = "runs-out"

    def __init__(self, fake: FakeBatchAPI, calls: int) -> None:
        self.fake, self.calls = fake, calls

    def get_remaining_time_in_millis(self) -> int:
        return 900_000 if len(self.fake.chat) < self.calls else 1_000


def test_an_expired_batch_too_large_for_one_invocation_is_collected_over_several(database_url, pool, logs):
    # Given a batch of four users that expires unanswered, and a worker running one user at a time
    with endpoint(planner) as (fake, url, sqs):
        users = users_with_memory(pool, 4, f"bounded-{uuid.uuid4()}")
        run_key = f"daily:{uuid.uuid4()}"
        stack = stack_for(database_url, pool, sqs, url)
        stack.worker_services = stack.build_worker(
            summarizer="openai",
            openai_base_url=url,
            openai_api_key="k",
            summary_delivery="batch",
            batch_poll_seconds=0,
            llm_concurrency=1,
        )
        deliver(stack, refresh_body(users, DAY, run_key))
        batch_id = only_batch(fake)
        fake.end(batch_id, "expired")
        [collect] = stack.queued()
        stack.sqs.purge_queue(QueueUrl=stack.queue_url)
        # When its collect message runs in an invocation whose time runs out after two users' calls
        result = stack.worker(sqs_event(json.dumps(collect)), RunsOutAfterCalls(fake, 2))
        # Then the record succeeds: two users are written, and the other two go on in a fresh
        # collect message for the same batch
        assert result == {"batchItemFailures": []}
        assert sorted(h[0] for h in heads(pool, users)) == [1, 1, 2, 2]
        [again] = stack.queued()
        assert (again["type"], again["batch_id"], again["run_key"]) == ("collect_batch", batch_id, run_key)
        assert logs.named("batch collection continues")
        # And when the next invocation takes it
        drain(stack)
    # Then every user has exactly one version of the night, no user was asked for twice, no claim is left
    assert [h[0] for h in heads(pool, users)] == [2, 2, 2, 2] and len(fake.chat) == 4
    assert claims(pool, run_key) == 0

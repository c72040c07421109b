"""Asynchronous exports through the API's handler: POST starts a job, GET polls it and answers a
pre-signed URL once done; the JSON Lines import back. Locally a folder (no queue: the job runs in
the request); deployed, S3 (moto) and the worker queue (the worker's handler runs the job)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest
from user_memory.adapters.exports import PostgresExports
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.jobs.export import run_import
from user_memory.runtime import build_api

from tests.api_client import ApiClient
from tests.e2e.helpers import OPERATOR, Stack, assert_problem, merge, new_client, ok

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]


def seed(client: ApiClient) -> None:
    ok(merge(client, {"personal_info": {"name": "Ann"}}))
    ok(merge(client, {"personal_info": {"language": "fr"}}))
    ok(client.put("/me/kv/notes/k", json_body={"value": {"x": 1}}))


def test_an_export_to_a_folder_is_done_in_the_request_and_imports_back(make_api, pool, tmp_path):
    # Given a deployment whose exports go to a folder (the local kit), and a user with history
    api = make_api("tutor", export_dir=str(tmp_path))
    alice = new_client(api)
    seed(alice)
    # When the user starts an export
    job = ok(alice.post("/me/export"))
    # Then, with no queue, it is done in the request, with a URL to its lines
    assert job["status"] == "done" and job["user_id"] == alice.user_id and job["lines"] == 5
    polled = ok(alice.get(f"/me/exports/{job['id']}"))
    assert polled == job
    path = Path(urlparse(job["url"]).path)
    lines = path.read_bytes().splitlines(keepends=True)
    assert [json.loads(line)["kind"] for line in lines] == ["header", "version", "version", "kv", "end"]
    # And another user cannot see it, nor a made-up id
    bob = new_client(api)
    assert_problem(bob.get(f"/me/exports/{job['id']}"), 404, "not-found")
    assert_problem(bob.get(f"/me/exports/{uuid.uuid4()}"), 404, "not-found")
    assert_problem(bob.get("/me/exports/not-an-id"), 404, "not-found")
    # And its lines import back under another id, every version equal
    importer = uuid.uuid4()
    run_import(PostgresExports(pool), importer, lines)
    store = MemoryStore(PostgresRecorder(pool))
    for v in (1, 2):
        assert json.dumps(store.at(importer, v).document) == json.dumps(store.at(alice.user_id, v).document)


def test_without_an_export_store_the_routes_are_not_enabled(alice, api):
    assert_problem(alice.post("/me/export"), 404, "not-enabled")
    assert_problem(alice.get(f"/me/exports/{uuid.uuid4()}"), 404, "not-enabled")


@pytest.fixture
def s3(sqs: Any) -> Any:  # `sqs` holds moto's mock for the test
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="exports")
    return client


def test_with_a_queue_the_worker_writes_the_export_to_s3_and_erasure_deletes_it(pool, database_url, sqs, s3):
    # Given the API and the worker with a queue and an export bucket (moto)
    stack = Stack(database_url, pool, sqs, export_bucket="exports")
    settings = ApiSettings.from_env(
        {"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": stack.queue_url, "EXPORT_BUCKET": "exports"}
    )
    api = create_api(build_api(settings, pool=pool, sqs_client=sqs), settings)
    alice = new_client(api)
    seed(alice)
    # When the user starts an export
    job = ok(alice.post("/me/export"))
    # Then it is pending, queued for the worker as an export_user message naming only the job
    assert job["status"] == "pending" and job["url"] is None
    bodies = stack.queued()
    assert bodies == [{"type": "export_user", "export_id": job["id"]}]
    # When the worker's handler takes the message
    stack.poller().drain()
    # Then the job is done, its URL a pre-signed GET of its object
    done = ok(alice.get(f"/me/exports/{job['id']}"))
    assert done["status"] == "done" and done["lines"] == 5
    url = urlparse(done["url"])
    assert "exports" in (url.netloc + url.path) and "Signature" in url.query
    key = f"exports/{job['id']}.jsonl"
    body = s3.get_object(Bucket="exports", Key=key)["Body"].read()
    assert body.count(b"\n") == 5 and "Ann" in body.decode()
    # And an operator starts and reads exports of any user the same way
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    started = ok(operator.post(f"/admin/users/{alice.user_id}/export"))
    assert started["status"] == "pending" and ok(operator.get(f"/admin/exports/{started['id']}"))["id"] == started["id"]
    assert_problem(alice.post(f"/admin/users/{alice.user_id}/export"), 403, "forbidden")
    stack.poller().drain()
    # When the user is erased
    erased = ok(alice.delete("/me"))
    # Then both export objects are gone, counted in the receipt with their jobs
    assert erased["receipt"]["deleted"]["export_objects"] == 2
    assert erased["receipt"]["deleted"]["user_memory_exports"] == 2
    assert s3.list_objects_v2(Bucket="exports").get("KeyCount", 0) == 0
    assert_problem(alice.get(f"/me/exports/{job['id']}"), 404, "not-found")


def test_a_large_export_goes_to_s3_in_parts_and_a_failed_one_leaves_no_object(s3, monkeypatch):
    from user_memory.adapters import exports as adapter

    # Given parts of 5 MiB (S3's minimum but the last)
    monkeypatch.setattr(adapter, "PART_BYTES", 5 * 1024 * 1024)
    objects = adapter.S3ExportObjects("exports", s3)
    lines = [json.dumps({"kind": "version", "n": n, "pad": "x" * 1000}).encode() + b"\n" for n in range(12_000)]
    # When an export of ~12 MB (three parts) is written
    size = objects.write("exports/big.jsonl", iter(lines))
    # Then it is one object of every line, in order
    assert size == sum(map(len, lines))
    assert s3.get_object(Bucket="exports", Key="exports/big.jsonl")["Body"].read() == b"".join(lines)

    # And when the lines fail half way, the upload is aborted: no object, no parts left
    def failing() -> Any:
        yield from lines[:7_000]
        raise RuntimeError("the database went away")

    with pytest.raises(RuntimeError, match="went away"):
        objects.write("exports/broken.jsonl", failing())
    assert "Contents" not in s3.list_objects_v2(Bucket="exports", Prefix="exports/broken")
    assert s3.list_multipart_uploads(Bucket="exports").get("Uploads", []) == []

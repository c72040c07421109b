"""Imports through the API's handler (operators): POST /admin/imports answers an import id and where
to upload the export file, POST .../start imports it (in the request without a queue; the worker's
handler with one), GET answers its state. Locally a folder; deployed, S3 and SQS (moto)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.http.app import create_api
from user_memory.runtime import build_api

from tests.api_client import ApiClient
from tests.e2e.helpers import OPERATOR, Stack, assert_problem, merge, new_client, ok

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]


def exported(client: ApiClient) -> Path:
    """A user with two versions and a key-value entry, exported to the folder (the local kit)."""
    ok(merge(client, {"personal_info": {"name": "Ann"}}))
    ok(merge(client, {"personal_info": {"language": "fr"}}))
    ok(client.put("/me/kv/notes/k", json_body={"value": {"x": 1}}))
    return Path(urlparse(ok(client.post("/me/export"))["url"]).path)


def same_history(pool: Any, a: Any, b: Any, versions: int) -> bool:
    store = MemoryStore(PostgresRecorder(pool))
    return all(
        json.dumps(store.at(a, v).document) == json.dumps(store.at(b, v).document) for v in range(1, versions + 1)
    )


def test_an_operator_imports_an_uploaded_export_into_an_empty_memory_in_the_request(make_api, pool, tmp_path):
    # Given a deployment whose exports go to a folder (no queue), and a user's export there
    api = make_api("tutor", export_dir=str(tmp_path))
    alice = new_client(api)
    source = exported(alice)
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    target = uuid.uuid4()
    # When an operator creates an import into an empty memory
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(target)}))
    # Then it waits for its file, at a path inside the exports folder
    assert job["status"] == "awaiting_upload" and job["user_id"] == str(target)
    upload = Path(job["upload_url"])
    assert tmp_path.resolve() in upload.parents and str(target) not in str(upload)
    # When the file is put there and the import started
    shutil.copy(source, upload)
    done = ok(operator.post(f"/admin/imports/{job['id']}/start"))
    # Then, with no queue, it is done in the request: every version, the entry, and no upload left
    assert (done["status"], done["versions"], done["kv"], done["upload_url"]) == ("done", 2, 1, None)
    assert same_history(pool, target, alice.user_id, 2) and not upload.exists()
    assert ok(operator.get(f"/admin/imports/{job['id']}")) == done
    # And started again it is answered as it is, not run twice
    assert ok(operator.post(f"/admin/imports/{job['id']}/start")) == done
    # And an import into that memory, now not empty, is refused when created
    assert_problem(operator.post("/admin/imports", json_body={"user_id": str(target)}), 409, "import-target-not-empty")
    # And end users may not import, nor read an import; a made-up id is not found
    assert_problem(alice.post("/admin/imports", json_body={"user_id": str(uuid.uuid4())}), 403, "forbidden")
    assert_problem(alice.get(f"/admin/imports/{job['id']}"), 403, "forbidden")
    assert_problem(operator.get(f"/admin/imports/{uuid.uuid4()}"), 404, "not-found")
    assert_problem(operator.post("/admin/imports/not-an-id/start"), 404, "not-found")
    assert_problem(operator.post("/admin/imports", json_body={"user_id": "nobody"}), 422)


def test_a_file_that_is_not_an_export_fails_typed_writes_nothing_and_can_be_started_again(make_api, pool, tmp_path):
    api = make_api("tutor", export_dir=str(tmp_path))
    source = exported(new_client(api))
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    target = uuid.uuid4()
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(target)}))
    upload = Path(job["upload_url"])
    # Given an upload cut short: its end line missing
    lines = source.read_bytes().splitlines(keepends=True)
    upload.write_bytes(b"".join(lines[:-1]))
    # When the import is started
    failed = ok(operator.post(f"/admin/imports/{job['id']}/start"))
    # Then it failed as InvalidExport, nothing written, and the file may be uploaded again
    assert failed["status"] == "failed" and failed["error_type"] == "InvalidExport"
    assert failed["upload_url"] == str(upload)
    assert MemoryStore(PostgresRecorder(pool)).head(target).version == 0
    # When the whole file is uploaded and the import started again
    upload.write_bytes(b"".join(lines))
    done = ok(operator.post(f"/admin/imports/{job['id']}/start"))
    # Then it is done
    assert (done["status"], done["versions"], done["error_type"]) == ("done", 2, None)


def test_a_memory_written_after_the_import_was_created_fails_it_as_not_empty(make_api, pool, tmp_path):
    api = make_api("tutor", export_dir=str(tmp_path))
    source = exported(new_client(api))
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    target = ApiClient(api, uuid.uuid4())
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(target.user_id)}))
    shutil.copy(source, job["upload_url"])
    # Given the target wrote its own memory meanwhile
    ok(merge(target, {"personal_info": {"name": "Bo"}}))
    # When the import is started
    failed = ok(operator.post(f"/admin/imports/{job['id']}/start"))
    # Then it failed as ImportTargetNotEmpty and the memory is the target's own
    assert (failed["status"], failed["error_type"]) == ("failed", "ImportTargetNotEmpty")
    assert MemoryStore(PostgresRecorder(pool)).head(target.user_id).version == 1


def test_without_an_export_store_the_import_routes_are_not_enabled(api):
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    assert_problem(operator.post("/admin/imports", json_body={"user_id": str(uuid.uuid4())}), 404, "not-enabled")
    assert_problem(operator.get(f"/admin/imports/{uuid.uuid4()}"), 404, "not-enabled")


@pytest.fixture
def s3(sqs: Any) -> Any:  # `sqs` holds moto's mock for the test
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="exports")
    return client


def test_with_a_queue_the_worker_imports_from_s3_and_erasure_reaches_the_import(pool, database_url, sqs, s3):
    # Given the API and the worker with a queue and an export bucket (moto), and a user's export in it
    stack = Stack(database_url, pool, sqs, export_bucket="exports")
    settings = ApiSettings.from_env(
        {"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": stack.queue_url, "EXPORT_BUCKET": "exports"}
    )
    api = create_api(build_api(settings, pool=pool, sqs_client=sqs), settings)
    alice = new_client(api)
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    ok(alice.put("/me/kv/notes/k", json_body={"value": {"x": 1}}))
    export = ok(alice.post("/me/export"))
    stack.poller().drain()
    body = s3.get_object(Bucket="exports", Key=f"exports/{export['id']}.jsonl")["Body"].read()
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    target = uuid.uuid4()
    # When an operator creates an import
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(target)}))
    # Then its upload URL is a pre-signed PUT of the job's object, naming no user
    url = urlparse(job["upload_url"])
    key = f"imports/{job['id']}.jsonl"
    assert url.path.endswith(key) and "Signature" in url.query and str(target) not in job["upload_url"]
    assert int(parse_qs(url.query)["Expires"][0]) > 0
    # When the file is uploaded there and the import started
    s3.put_object(Bucket="exports", Key=key, Body=body)
    queued = ok(operator.post(f"/admin/imports/{job['id']}/start"))
    # Then it is queued for the worker as an import_user message naming only the job, once
    assert queued["status"] == "queued"
    assert ok(operator.post(f"/admin/imports/{job['id']}/start"))["status"] == "queued"
    assert stack.queued() == [{"type": "import_user", "import_id": job["id"]}]
    # When the worker's handler takes it
    stack.poller().drain()
    # Then the import is done, the memory rebuilt, and the upload deleted
    done = ok(operator.get(f"/admin/imports/{job['id']}"))
    assert (done["status"], done["versions"], done["kv"]) == ("done", 1, 1)
    assert same_history(pool, target, alice.user_id, 1)
    assert s3.list_objects_v2(Bucket="exports", Prefix="imports/").get("KeyCount", 0) == 0
    # When the imported user is erased
    erased = ok(operator.delete(f"/admin/users/{target}"))
    # Then the receipt counts the import job, and it is gone
    assert erased["receipt"]["deleted"]["user_memory_imports"] == 1
    assert_problem(operator.get(f"/admin/imports/{job['id']}"), 404, "not-found")


def test_erasing_the_target_deletes_an_upload_never_imported_and_counts_the_job(make_api, tmp_path):
    # Given an import created and its file uploaded, never started
    api = make_api("tutor", export_dir=str(tmp_path))
    source = exported(new_client(api))
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    target = uuid.uuid4()
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(target)}))
    shutil.copy(source, job["upload_url"])
    # When the target user is erased
    erased = ok(operator.delete(f"/admin/users/{target}"))
    # Then the upload (the user's content) is gone, counted with the job's row
    assert not Path(job["upload_url"]).exists()
    assert (erased["receipt"]["deleted"]["export_objects"], erased["receipt"]["deleted"]["user_memory_imports"]) == (
        1,
        1,
    )
    assert_problem(operator.get(f"/admin/imports/{job['id']}"), 404, "not-found")


def test_an_import_whose_message_cannot_be_queued_fails_and_is_queued_by_a_new_start(
    pool, database_url, sqs, s3, tmp_path
):
    # Given an API whose worker queue is gone (moto: a queue URL that names no queue)
    stack = Stack(database_url, pool, sqs, export_bucket="exports")
    gone = stack.queue_url + "-gone"
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": gone, "EXPORT_BUCKET": "exports"})
    api = create_api(build_api(settings, pool=pool, sqs_client=sqs), settings)
    operator = new_client(api, scopes=f"openid {OPERATOR}")
    job = ok(operator.post("/admin/imports", json_body={"user_id": str(uuid.uuid4())}))
    # When it is started
    reply = operator.post(f"/admin/imports/{job['id']}/start")
    # Then the request fails, and the job is failed (not left queued with no message)
    assert reply.status >= 500
    failed = ok(operator.get(f"/admin/imports/{job['id']}"))
    assert failed["status"] == "failed" and failed["error_type"] and failed["upload_url"]
    # And once the queue is back, a new start queues it
    settings = ApiSettings.from_env(
        {"DOCUMENT_SCHEMA": "tutor", "QUEUE_URL": stack.queue_url, "EXPORT_BUCKET": "exports"}
    )
    operator = new_client(
        create_api(build_api(settings, pool=pool, sqs_client=sqs), settings), scopes=f"openid {OPERATOR}"
    )
    assert ok(operator.post(f"/admin/imports/{job['id']}/start"))["status"] == "queued"
    assert stack.queued() == [{"type": "import_user", "import_id": job["id"]}]

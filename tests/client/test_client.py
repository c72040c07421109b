"""The sync and async clients against `user-memory serve`: the routes the API tests cover, typed
answers, typed errors, If-Match and rebases, Idempotency-Key, paging, tokens from a callable."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from user_memory_client import AsyncClient, Client, Retries, errors, models

from tests.client.conftest import token_for

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

ROOT = Path(__file__).resolve().parents[2]
PART = {"name": "Inner critic", "status": "active", "goals": [{"goal": "notice it"}]}


def _python_example(path: Path) -> str:
    text = path.read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize(
    "readme", [ROOT / "clients" / "python" / "README.md", ROOT / "docs" / "client.md", ROOT / "README.md"]
)
def test_the_readme_example_reads_edits_and_searches_a_memory(base_url, token, readme):
    # Given the README's example, as written there (at most ten lines)
    example = _python_example(readme)
    assert len(example.strip().splitlines()) <= 10
    printed: list[tuple[object, ...]] = []
    # When it runs against the API
    names = {"API": base_url, "get_token": lambda: token, "TOKEN": token, "print": lambda *a: printed.append(a)}
    exec(example, names)
    # Then it wrote version 1 on version 0 and found the summary it wrote
    with Client(base_url, token) as client:
        assert client.memory.get().document["summary"] == "Learns algebra in the evenings"
        assert [i.version for i in client.memory.iter_history()] == [1]
    assert printed == [("/summary", "summary: Learns algebra in the evenings")]


def test_the_guide_says_where_the_errors_are_imported_from_and_its_example_runs(base_url, token):
    # Given the client guide's section on errors
    section = (ROOT / "docs" / "client.md").read_text().split("## Errors\n", 1)[1].split("\n## ", 1)[0]
    # Then it names the module the classes are imported from, and shows the import
    assert "`user_memory_client.errors`" in section
    example = _python_example_of(section)
    assert example.startswith("from user_memory_client.errors import ")
    # And its example runs as written against the API
    printed: list[tuple[object, ...]] = []
    with Client(base_url, token) as client:
        exec(example, {"client": client, "print": lambda *a: printed.append(a)})
    assert printed and printed[0][0] == 404
    # And every class it names beside `user_memory_client` is importable from there
    import user_memory_client

    named = section.split("also importable from `user_memory_client` itself", 1)[0].rsplit("the common ones", 1)[1]
    for name in [n for n in named.split("`")[1::2] if n.isidentifier()]:
        assert getattr(user_memory_client, name) is getattr(errors, name), name


def _python_example_of(text: str) -> str:
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_every_memory_route_answers_its_typed_model(base_url, user, token):
    client = Client(base_url, token)
    # Given three versions: a merge patch, a JSON Patch, a whole document
    first = client.memory.patch({"summary": "one"}, if_match=0)
    second = client.memory.patch([{"op": "add", "path": "/parts/critic", "value": PART}], if_match=first.version)
    third = client.memory.replace({**second.document, "summary": "three"}, if_match='"2"')
    assert (first.status, first.version, second.version, third.version) == ("written", 1, 2, 3)
    assert isinstance(third, models.Written) and third.user_id == user
    # When each read route is called
    head = client.memory.get()
    past = client.memory.get(version=1)
    at = client.memory.get(as_of=datetime.now(UTC) + timedelta(seconds=5))
    diff = client.memory.diff(1, 2)
    changes = client.memory.changes(since=1)
    prompt = client.memory.prompt(budget_tokens=200)
    # Then each answers its model
    assert head.version == 3 and head.document["summary"] == "three"
    assert past.version == 1 and past.document["summary"] == "one"
    assert at.version == 3
    assert (diff.from_version, diff.to_version) == (1, 2)
    assert diff.patch[0]["path"] == "/parts/critic"
    assert changes.since == 1 and changes.version == 3
    assert prompt.version == 3 and "three" in prompt.text
    # And revert and prune make new versions, history keeping everything
    reverted = client.memory.revert(1)
    assert reverted.version == 4 and reverted.document["summary"] == "one"
    pruned = client.memory.prune("summary", if_match=4)
    assert pruned.version == 5 and pruned.document["summary"] == ""
    # And the history iterator walks every version, newest first, one page at a time
    assert [i.version for i in client.memory.iter_history(page_size=2)] == [5, 4, 3, 2, 1]
    page = client.memory.history(limit=2)
    assert [i.version for i in page.items] == [5, 4] and page.next_before == 4
    client.close()


def test_a_stale_if_match_raises_precondition_failed_naming_the_head(base_url, token):
    client = Client(base_url, token)
    client.memory.patch({"summary": "one"})
    client.memory.patch({"summary": "two"})
    with pytest.raises(errors.PreconditionFailed) as err:
        client.memory.patch({"summary": "stale"}, if_match=1)
    assert err.value.status == 412 and err.value.current_version == 2
    assert client.memory.get().document["summary"] == "two"


def test_a_conflict_is_rebased_by_the_callers_function_onto_the_head(base_url, token):
    # Given a writer that read version 1 while another wrote version 2
    client = Client(base_url, token)
    client.memory.patch({"summary": "Likes tea"})
    read = client.memory.get()
    client.memory.patch({"safety_notes": "none"})
    heads: list[int] = []

    def rebase(head: models.Memory) -> object:
        heads.append(head.version)
        return {"summary": head.document["summary"] + " and chess"}

    # When it edits with If-Match on what it read, with a rebase function
    written = client.memory.patch({"summary": "Likes chess"}, if_match=read.version, rebase=rebase)
    # Then the rebase saw the head and its edit was written on it, nothing lost
    assert heads == [2]
    assert written.version == 3
    assert written.document["summary"] == "Likes tea and chess" and written.document["safety_notes"] == "none"


def test_a_rebase_that_gives_up_raises_the_conflict(base_url, token):
    client = Client(base_url, token)
    client.memory.patch({"summary": "a"})
    client.memory.patch({"summary": "b"})
    with pytest.raises(errors.PreconditionFailed):
        client.memory.patch({"summary": "c"}, if_match=1, rebase=lambda head: None)
    assert client.memory.get().version == 2


def test_the_same_idempotency_key_writes_once(base_url, token):
    client = Client(base_url, token)
    first = client.memory.patch({"summary": "once"}, idempotency_key="order-17")
    again = client.memory.patch({"summary": "once"}, idempotency_key="order-17")
    assert (first.status, again.status) == ("written", "idempotent")
    assert again.version == first.version == client.memory.get().version == 1


def test_key_value_routes_with_prefix_paging_and_touch(base_url, token):
    client = Client(base_url, token)
    # Given entries under two prefixes, one with a TTL
    for key in ["a/1", "a/2", "a/3", "b/1"]:
        client.kv.put("notes", key, {"k": key})
    ttl = client.kv.put("notes", "a/ttl", [1, 2], ttl_seconds=600)
    assert ttl.expires_at is not None
    # When they are read, listed by prefix page by page, and touched
    got = client.kv.get("notes", "a/1")
    listed = [e.key for e in client.kv.iter("notes", prefix="a/", page_size=2)]
    page = client.kv.list("notes", limit=2)
    touched = client.kv.touch("notes", ["a/ttl", "a/1", "missing"])
    # Then each answers its model
    assert isinstance(got, models.KvEntry) and got.value == {"k": "a/1"}
    assert listed == ["a/1", "a/2", "a/3", "a/ttl"]
    assert [e.key for e in page.items] == ["a/1", "a/2"] and page.next_after == "a/2"
    assert touched.keys == ["a/ttl"]
    after = client.kv.get("notes", "a/ttl")
    assert after.expires_at is not None and after.expires_at >= ttl.expires_at
    # And a key with characters a path must escape round-trips
    odd = "notes/été 1?#%"
    client.kv.put("default", odd, "x")
    assert client.kv.get("default", odd).key == odd
    # And a delete removes the entry; a second is NotFound
    assert client.kv.delete("notes", "b/1").deleted is True
    with pytest.raises(errors.NotFound):
        client.kv.delete("notes", "b/1")
    with pytest.raises(errors.NotFound):
        client.kv.get("notes", "b/1")


@pytest.mark.parametrize(
    ("call", "error", "status"),
    [
        (lambda c: c.memory.get(version=99), errors.UnknownVersion, 404),
        (lambda c: c.memory.patch({"no_such_field": 1}), errors.InvalidDocument, 422),
        (lambda c: c.memory.patch([{"op": "remove", "path": "/summary/x"}]), errors.PatchConflict, 409),
        (lambda c: c.kv.put("Not A Namespace", "k", 1), errors.InvalidInput, 422),
        (lambda c: c.kv.put("default", "k", "x" * 20_000), errors.TooLarge, 413),
        (lambda c: c.memory.diff(0, 5), errors.UnknownVersion, 404),
        (lambda c: c.kv.touch("default", []), errors.InvalidInput, 422),
        (lambda c: c.kv.list("default", prefix=""), errors.BadRequest, 400),
        (
            lambda c: c.activity.record(
                [{"occurred_at": datetime.now(UTC), "kind": "memory_reset", "external_id": "r1"}]
            ),
            errors.Forbidden,
            403,
        ),
    ],
    ids=[
        "unknown-version",
        "invalid-document",
        "patch-conflict",
        "invalid-input",
        "too-large",
        "diff",
        "touch-nothing",
        "empty-prefix",
        "reset",
    ],
)
def test_problems_become_typed_errors(base_url, token, call, error, status):
    client = Client(base_url, token, retries=Retries(attempts=1))
    with pytest.raises(error) as err:
        call(client)
    assert err.value.status == status and err.value.detail and err.value.type.startswith("https://")
    assert isinstance(err.value, errors.ApiError)


def test_a_bad_token_is_unauthenticated_and_a_callable_token_is_asked_again_after_a_401(base_url, user):
    # Given a static token that has expired
    expired = token_for(user, ttl_seconds=60, now=datetime.now(UTC).timestamp() - 3600)
    with pytest.raises(errors.Unauthenticated):
        Client(base_url, expired).memory.get()
    # When the token comes from a callable that refreshes after the first (expired) one
    issued: list[str] = []

    def token() -> str:
        issued.append(expired if not issued else token_for(user))
        return issued[-1]

    # Then the call succeeds on the fresh token, asked for once more
    assert Client(base_url, token).memory.get().user_id == user
    assert len(issued) == 2


def test_activity_export_and_erase(base_url, user, token):
    client = Client(base_url, token)
    item = models.ActivityItem(
        occurred_at=datetime.now(UTC), kind="message", payload={"text": "hello"}, external_id="m1"
    )
    assert client.activity.record([item, item]).recorded == 1
    client.kv.put("default", "k", 1)
    exported = client.account.export()
    assert exported.user_id == user and [a.external_id for a in exported.activity] == ["m1"]
    assert [e.key for e in exported.kv] == ["k"]
    erased = client.account.erase()
    assert erased.removed["user_activity"] == 1 and erased.removed["user_memory_kv"] == 1


def test_the_async_client_does_the_same(base_url, user):
    async def token() -> str:  # a coroutine function is a token source too
        return token_for(user)

    async def session() -> None:
        async with AsyncClient(base_url, token) as client:
            memory = await client.memory.get()
            first = await client.memory.patch({"summary": "tea"}, if_match=memory.version)
            await client.memory.patch({"safety_notes": "none"})

            async def rebase(head: models.Memory) -> object:
                return [{"op": "replace", "path": "/summary", "value": head.document["summary"] + ", chess"}]

            rebased = await client.memory.patch({"summary": "chess"}, if_match=first.version, rebase=rebase)
            assert rebased.version == 3 and rebased.document["summary"] == "tea, chess"
            assert [i.version async for i in client.memory.iter_history(page_size=1)] == [3, 2, 1]
            assert (await client.memory.search("chess")).items[0].path == "/summary"
            for key in ("x/1", "x/2", "y/1"):
                await client.kv.put("async", key, key)
            assert [e.key async for e in client.kv.iter("async", prefix="x/", page_size=1)] == ["x/1", "x/2"]
            with pytest.raises(errors.PreconditionFailed):
                await client.memory.revert(1, if_match=1)
            with pytest.raises(errors.NotFound):
                await client.kv.get("async", "nope")

    asyncio.run(session())


def test_an_erasure_answers_its_receipt_and_operators_list_it_sync_and_async(base_url, user, token, new_user):
    # Given a user with a version, erased through the client
    client = Client(base_url, token)
    client.memory.patch({"summary": "tea"})
    erased = client.account.erase()
    # Then the answer carries the receipt, requested by the user itself
    assert erased.receipt is not None and erased.receipt.requested_by == "self"
    assert erased.receipt.deleted["user_memory_snapshots"] == 1
    # And an operator lists it by the user's id, with both clients
    operator = token_for(new_user(), scopes=["user-memory/operator"])
    listed = Client(base_url, operator).admin.erasures(user_id=user)
    assert [r.id for r in listed.receipts] == [erased.receipt.id] and listed.next is None

    async def session() -> models.ErasureReceipts:
        async with AsyncClient(base_url, operator) as admin:
            return await admin.admin.erasures(user_id=user, limit=1)

    assert asyncio.run(session()).receipts == listed.receipts
    # And a user's token lists nothing
    with pytest.raises(errors.Forbidden):
        client.admin.erasures()


def test_an_export_job_is_started_and_polled_sync_and_async(base_url, user, token, new_user):
    # Given a user with a version
    client = Client(base_url, token)
    client.memory.patch({"summary": "tea"})
    # When it starts an export and polls it
    job = client.account.start_export()
    polled = client.account.export_job(job.id)
    # Then (no queue under serve) it is done, its url a file of JSON Lines
    assert polled.status == "done" and polled.url is not None and polled.url.startswith("file://")
    assert polled.lines == 3  # header, the version, end
    # And an operator does the same for that user, with the async client
    operator = token_for(new_user(), scopes=["user-memory/operator"])

    async def session() -> models.ExportJob:
        async with AsyncClient(base_url, operator) as admin:
            started = await admin.admin.start_export(user)
            return await admin.admin.export_job(started.id)

    assert asyncio.run(session()).user_id == user
    # And another user's id is not found for the caller
    with pytest.raises(errors.NotFound):
        Client(base_url, token_for(new_user())).account.export_job(job.id)


def test_an_operator_imports_an_export_through_the_client_sync_and_async(base_url, user, token, new_user):
    # Given a user's export, done under serve (a file in the exports folder)
    client = Client(base_url, token)
    client.memory.patch({"summary": "tea"})
    export = client.account.export_job(client.account.start_export().id)
    assert export.url is not None
    operator = token_for(new_user(), scopes=["user-memory/operator"])
    admin = Client(base_url, operator).admin
    target = new_user()
    # When an operator creates an import, puts the file at its upload path and starts it
    job = admin.create_import(target)
    assert job.status == "awaiting_upload" and job.upload_url is not None
    Path(job.upload_url).write_bytes(Path(export.url.removeprefix("file://")).read_bytes())
    done = admin.start_import(job.id)
    # Then (no queue under serve) it is done in the request, and the async client reads it the same
    assert (done.status, done.versions, done.kv) == ("done", 1, 0)

    async def poll() -> models.ImportJob:
        async with AsyncClient(base_url, operator) as a:
            return await a.admin.import_job(job.id)

    assert asyncio.run(poll()) == done
    # And an import into that memory, now not empty, raises the typed error
    with pytest.raises(errors.ImportTargetNotEmpty):
        admin.create_import(target)

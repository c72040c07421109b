"""Retries on a bad day, through a proxy that misbehaves on cue in front of `user-memory serve`:
the same Idempotency-Key on every try of a write, 429/503/dropped/stalled answers retried with
backoff, Retry-After honoured, a total deadline that ends even an answer trickled byte by byte,
and nothing retried that a retry cannot mend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory_client import AsyncClient, Client, Retries, errors

from tests.client.flaky import Faults, flaky_proxy

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

QUICK = Retries(attempts=5, deadline=20, timeout=5, backoff=0.01, max_backoff=0.05)


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
def proxy(base_url: str, faults: Faults) -> Iterator[str]:
    with flaky_proxy(base_url, faults) as url:
        yield url


def test_a_write_whose_answer_is_lost_is_retried_with_the_same_key_and_written_once(proxy, faults, token, caplog):
    # Given a write whose first answer is lost after the API wrote it, then a 503 and a 429
    faults.plan = ["lost", "503", "429"]
    client = Client(proxy, token, retries=QUICK)
    # When the client patches
    written = client.memory.patch({"summary": "once"})
    # Then it tried four times with one Idempotency-Key, and the API wrote one version
    patches = [s for s in faults.seen if s.method == "PATCH"]
    assert len(patches) == 4
    keys = {s.headers["idempotency-key"] for s in patches}
    assert len(keys) == 1 and next(iter(keys)).startswith("client:")
    assert (written.status, written.version) == ("idempotent", 1)
    assert [i.version for i in client.memory.iter_history()] == [1]
    # And each retry was logged with the error's type, never a value of the request
    retried = [r.getMessage() for r in caplog.records if r.name == "user_memory_client"]
    assert [m.split(" after ")[1].split(" (")[0] for m in retried] == ["TransportError", "Unavailable", "RateLimited"]
    assert all(m.startswith("retrying PATCH /me/memory") for m in retried)


def test_every_write_carries_a_new_idempotency_key(proxy, faults, token):
    client = Client(proxy, token, retries=QUICK)
    client.memory.patch({"summary": "a"})
    client.kv.put("default", "k", 1)
    client.kv.delete("default", "k")
    client.memory.get()
    keys = [s.headers.get("idempotency-key") for s in faults.seen]
    assert keys[3] is None and len(set(keys[:3])) == 3 and all(keys[:3])


def test_retry_after_is_waited_for(proxy, faults, token):
    faults.plan, faults.retry_after = ["429"], "1"
    client = Client(proxy, token, retries=QUICK)
    started = time.monotonic()
    assert client.memory.get().version == 0
    assert time.monotonic() - started >= 1.0
    assert len(faults.seen) == 2


def test_a_stalled_try_times_out_and_the_next_one_answers(proxy, faults, token):
    faults.plan, faults.stall_seconds = ["stall", "drop"], 3.0
    client = Client(proxy, token, retries=Retries(attempts=3, deadline=20, timeout=0.5, backoff=0.01))
    assert client.kv.put("default", "k", {"v": 1}).value == {"v": 1}
    assert len(faults.seen) == 3


def test_the_attempts_run_out_on_a_503_that_stays(proxy, faults, token):
    faults.plan = ["503"] * 10
    client = Client(proxy, token, retries=Retries(attempts=3, deadline=20, backoff=0.01))
    with pytest.raises(errors.Unavailable) as err:
        client.memory.get()
    assert err.value.status == 503 and len(faults.seen) == 3


def test_a_client_error_is_never_retried(proxy, faults, token):
    client = Client(proxy, token, retries=QUICK)
    with pytest.raises(errors.NotFound):
        client.kv.get("default", "missing")
    assert len(faults.seen) == 1


def test_the_deadline_ends_an_answer_trickled_byte_by_byte(proxy, faults, token):
    # Given a server that answers one byte every 50 ms, each read well within the try's timeout
    faults.plan = ["trickle"] * 10
    client = Client(proxy, token, retries=Retries(attempts=10, deadline=1.5, timeout=1.0, backoff=0.01))
    started = time.monotonic()
    # Then the call ends at its deadline, not when the server stops
    with pytest.raises(errors.DeadlineExceeded):
        client.memory.get()
    assert time.monotonic() - started < 4


def test_the_async_client_retries_and_keeps_its_deadline(proxy, faults, token):
    async def session() -> None:
        async with AsyncClient(proxy, token, retries=QUICK) as client:
            faults.plan = ["lost", "429"]
            written = await client.memory.patch({"summary": "once"})
            assert (written.status, written.version) == ("idempotent", 1)
            faults.plan = ["trickle"] * 10
        slow = AsyncClient(proxy, token, retries=Retries(attempts=10, deadline=1.5, timeout=1.0, backoff=0.01))
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            await slow.memory.get()
        assert time.monotonic() - started < 4
        await slow.aclose()

    asyncio.run(session())
    patches = [s for s in faults.seen if s.method == "PATCH"]
    assert len(patches) == 3 and len({s.headers["idempotency-key"] for s in patches}) == 1


@settings(max_examples=100, deadline=None)
@given(
    base_url=st.one_of(
        st.sampled_from(["127.0.0.1:8080", "localhost:8080", "memory.example.com", "ftp://memory.example.com", ""]),
        st.text(max_size=60).filter(lambda u: not u.lower().startswith(("http://", "https://"))),
    )
)
def test_a_base_url_without_http_or_https_fails_at_once(base_url):
    # Given a base URL without a scheme (or another scheme), and a transport that counts requests
    sent: list[httpx.Request] = []
    http = httpx.Client(transport=httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200)))
    # When a client is made with it, Then it is refused at once, naming what it takes
    for make in (lambda: Client(base_url, "t", http=http), lambda: AsyncClient(base_url, "t")):
        with pytest.raises(errors.InvalidBaseUrl, match="must start with http:// or https://"):
            make()
    # And nothing was sent (no retries until the deadline)
    assert sent == []


def test_an_http_base_url_is_taken(token):
    for base_url in ("http://127.0.0.1:8080", "https://memory.example.com/prod/", "HTTP://localhost"):
        Client(base_url, token).close()

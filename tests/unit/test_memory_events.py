"""Memory-changed events' rules without I/O: PutEvents batching keeps each user's order, the
signature is the Standard Webhooks one (the specification's example, a receiver's verifier), the backoff grows and
gives up on time, and an endpoint's URL is https."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from user_memory.domain.events import (
    MemoryEvent,
    RetryPolicy,
    check_url,
    new_secret,
    put_batches,
    signature,
)
from user_memory.errors import InvalidArgument

from tests.webhook_receiver import WebhookVerificationError, verify

USERS = [uuid.UUID(int=i) for i in range(1, 6)]
WHEN = datetime(2026, 11, 28, tzinfo=UTC)


def events_of(owners: list[int]) -> list[MemoryEvent]:
    counts: dict[int, int] = {}
    out = []
    for i, owner in enumerate(owners, start=1):
        counts[owner] = counts.get(owner, 0) + 1
        out.append(MemoryEvent(i, USERS[owner], counts[owner], "api", None, ("summary",), WHEN))
    return out


@given(owners=st.lists(st.integers(0, 4), max_size=60), size=st.integers(1, 10))
def test_put_batches_send_each_event_once_each_user_once_a_call_in_version_order(owners, size):
    # Given events of a few users in outbox order
    events = events_of(owners)
    # When they are cut into PutEvents calls
    batches = list(put_batches(events, size))
    # Then every event is in exactly one call, no call is over the size or names a user twice
    assert sorted(e.id for b in batches for e in b) == [e.id for e in events]
    assert all(0 < len(b) <= size and len({e.user_id for e in b}) == len(b) for b in batches)
    # And each user's versions go in order across the calls
    sent = [e for b in batches for e in b]
    for user in USERS:
        assert [e.version for e in sent if e.user_id == user] == sorted(e.version for e in sent if e.user_id == user)


# Standard Webhooks' own example (its specification's "Signature scheme"; the reference package
# signs it the same), and one with a non-ASCII body signed by that package (standardwebhooks 1.1.0).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KNOWN_ANSWERS = [
    (
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        '{"test": 2432232314}',
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    ),
    ("evt_42", 1764288000, "memory \u2713 changed", "v1,7jm7NVsZOPdorrqR62zg5QD0BIQmYQnfkEX4FHpaxnk="),
]


@pytest.mark.parametrize(("message_id", "timestamp", "body", "expected"), KNOWN_ANSWERS)
def test_the_signature_is_the_standard_webhooks_one(message_id, timestamp, body, expected):
    assert signature(SPEC_SECRET, message_id, timestamp, body) == expected


@given(text=st.text(max_size=200), message_id=st.from_regex(r"evt_[0-9]{1,12}", fullmatch=True))
def test_the_signature_verifies_as_a_receiver_checks_it(text, message_id):
    # Given a new secret and a request signed with it now
    secret = new_secret()
    now = datetime.now(UTC).replace(microsecond=0)
    stamp = int(now.timestamp())
    body = json.dumps({"text": text})
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature(secret, message_id, stamp, body),
    }
    # Then a receiver's verifier accepts it, and refuses it under another secret or 6 minutes later
    assert verify(secret, body, headers, now) == {"text": text}
    with pytest.raises(WebhookVerificationError, match="no matching signature"):
        verify(new_secret(), body, headers, now)
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        verify(secret, body, headers, now + timedelta(minutes=6))


def test_the_backoff_doubles_up_to_its_cap_and_gives_up_after_its_window():
    policy = RetryPolicy(base=timedelta(seconds=30), cap=timedelta(hours=1), disable_after=timedelta(hours=24))
    delays = [(policy.next_attempt(n, WHEN) - WHEN).total_seconds() for n in range(1, 10)]
    assert delays == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert not policy.gives_up(WHEN, WHEN + timedelta(hours=23, minutes=59))
    assert policy.gives_up(WHEN, WHEN + timedelta(hours=24))


@pytest.mark.parametrize("url", ["https://hooks.example/x", "http://localhost:8080/x", "http://127.0.0.1:9/h"])
def test_an_https_url_or_http_to_this_machine_is_taken(url):
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url", ["http://hooks.example/x", "ftp://x", "https://u:p@hooks.example", "https://", "x" * 2001, "http://[::1"]
)
def test_any_other_url_is_refused_by_name(url):
    with pytest.raises(InvalidArgument, match="^url "):
        check_url(url)

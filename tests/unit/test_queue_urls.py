"""Which queue a queue URL names (`user-memory trigger-conversations --queue-url`): its region, or its endpoint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from user_memory.adapters.sqs import QueueAddress, parse_queue_url
from user_memory.errors import ConfigError


@pytest.mark.parametrize(
    ("url", "region", "endpoint"),
    [
        ("https://sqs.us-east-1.amazonaws.com/123456789012/user-memory-worker", "us-east-1", None),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo", "eu-west-1", None),
        ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", "cn-north-1", None),
        ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/q", "us-gov-west-1", None),
        ("https://ap-southeast-2.queue.amazonaws.com/123456789012/legacy_name", "ap-southeast-2", None),
        ("http://localhost:4566/000000000000/local", None, "http://localhost:4566"),
        ("  https://sqs.us-east-1.amazonaws.com/123456789012/q  ", "us-east-1", None),
    ],
)
def test_a_queue_url_names_its_region_or_its_own_endpoint(url, region, endpoint):
    assert parse_queue_url(url) == QueueAddress(url=url.strip(), region=region, endpoint_url=endpoint)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("not-a-url", "expected https://sqs.<region>.amazonaws.com/<account id>/<queue name>"),
        ("", "expected"),
        ("ftp://sqs.us-east-1.amazonaws.com/123456789012/q", "expected"),
        ("https://sqs.us-east-1.amazonaws.com/q", "the path is /<12-digit account id>/<queue name>"),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/q?x=1", "expected"),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/" + "q" * 81, "the path is"),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/a/b", "the path is"),
        ("http://sqs.us-east-1.amazonaws.com/123456789012/q", "an AWS queue URL is https"),
        ("https://sqs.atlantis.amazonaws.com/123456789012/q", "unknown AWS host"),
    ],
)
def test_what_is_not_a_queue_url_is_one_config_error(url, why):
    with pytest.raises(ConfigError) as raised:
        parse_queue_url(url)
    message = str(raised.value)
    assert why in message and len(message.splitlines()) == 1


@given(st.text(max_size=300))
def test_any_text_is_a_queue_address_or_a_config_error_never_anything_else(text):
    try:
        address = parse_queue_url(text)
    except ConfigError as err:
        assert len(str(err).splitlines()) == 1 and "amazonaws.com/<account id>/<queue name>" in str(err)
    else:
        assert address.region is not None or address.endpoint_url is not None

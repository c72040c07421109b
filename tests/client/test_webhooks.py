"""The client's webhook operations (operators) against `user-memory serve`, Secrets Manager on moto."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moto import mock_aws
from user_memory_client import AsyncClient, Client, errors

from tests.client.conftest import token_for

OPERATOR = "user-memory/operator"


@pytest.fixture
def secrets_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


@pytest.fixture
def operator_token() -> str:
    return token_for(str(uuid.uuid4()), scopes=[OPERATOR])


def test_an_operator_registers_lists_disables_enables_and_deletes_an_endpoint(
    base_url, operator_token, secrets_manager
):
    with Client(base_url, operator_token) as client:
        # Given a registered endpoint
        created = client.webhooks.register("https://hooks.example/crm", description="crm")
        assert created.secret.startswith("whsec_") and created.webhook.enabled
        hook = created.webhook.id
        # Then it is listed, and disabling and enabling answer its state
        assert hook in [w.id for w in client.webhooks.list().webhooks]
        assert client.webhooks.disable(hook).enabled is False
        assert client.webhooks.get(hook).disabled_reason == "disabled by an operator"
        assert client.webhooks.enable(hook).enabled is True
        # When it is deleted, it is gone
        assert client.webhooks.delete(hook).deleted is True
        with pytest.raises(errors.NotFound):
            client.webhooks.get(hook)


def test_the_async_client_lists_endpoints_and_an_end_user_is_forbidden(base_url, operator_token, user, token):
    import asyncio

    async def run() -> None:
        async with AsyncClient(base_url, operator_token) as client:
            listed = await client.webhooks.list()
            assert isinstance(listed.webhooks, list)
        async with AsyncClient(base_url, token) as client:
            with pytest.raises(errors.Forbidden):
                await client.webhooks.list()

    asyncio.run(run())

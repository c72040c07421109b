"""The client's tests run against `user-memory serve`'s server (ApiServer: the Lambda handler behind
real HTTP, development tokens) on the session's embedded PostgreSQL, one server per module."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator

import pytest
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer
from user_memory_local.tokens import issue_token

SECRET = "client-test-secret-of-at-least-32-bytes"


@pytest.fixture(scope="module")
def server(
    request: pytest.FixtureRequest, pool: ConnectionPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """The API as `user-memory serve` runs it: default settings (the user_state schema), or the
    schema a module names in DOCUMENT_SCHEMA; exports go to a folder, as serve's do."""
    schema = getattr(request.module, "DOCUMENT_SCHEMA", None)
    env = {"EXPORT_DIR": str(tmp_path_factory.mktemp("exports"))}
    settings = ApiSettings.from_env({**env, "DOCUMENT_SCHEMA": schema} if schema else env)
    api = create_api(build_api(settings, pool=pool), settings)
    with ApiServer(api, secret=SECRET, port=0, log=io.StringIO()) as running:
        yield running


@pytest.fixture
def base_url(server: ApiServer) -> str:
    return server.url


def token_for(user: str, **kw: object) -> str:
    return issue_token(user, secret=SECRET, **kw)  # type: ignore[arg-type]


@pytest.fixture
def new_user() -> Callable[[], str]:
    return lambda: str(uuid.uuid4())


@pytest.fixture
def user() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def token(user: str) -> str:
    return token_for(user)

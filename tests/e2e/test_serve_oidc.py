"""`user-memory serve` with an OpenID Connect issuer: its tokens are verified the way API Gateway's
JWT authorizer does (the issuer's keys through discovery, issuer, audience, expiry), beside the
development tokens; with SUBJECT_IDS=derived, an issuer's subject that is not a UUID is the same
derived user as behind API Gateway (the same handler maps the claims)."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.http.auth import derived_user_id
from user_memory.runtime import build_api
from user_memory_local.oidc import OidcVerifier
from user_memory_local.serve import ApiServer
from user_memory_local.tokens import issue_token

from tests.browser.oidc_issuer import OidcIssuer

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

SECRET = "serve-oidc-test-secret-of-at-least-32-bytes"


@pytest.fixture(scope="module")
def issuer() -> Iterator[OidcIssuer]:
    running = OidcIssuer("console-test").start()
    yield running
    running.close()


@pytest.fixture(scope="module")
def server(pool: ConnectionPool, issuer: OidcIssuer) -> Iterator[ApiServer]:
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor"})
    api = create_api(build_api(settings, pool=pool), settings)
    verifier = OidcVerifier(issuer.url, ["console-test"])
    with ApiServer(api, secret=SECRET, port=0, log=io.StringIO(), oidc=verifier) as running:
        yield running


@pytest.fixture(scope="module")
def derived_server(pool: ConnectionPool, issuer: OidcIssuer) -> Iterator[ApiServer]:
    settings = ApiSettings.from_env({"DOCUMENT_SCHEMA": "tutor", "SUBJECT_IDS": "derived"})
    api = create_api(build_api(settings, pool=pool), settings)
    verifier = OidcVerifier(issuer.url, ["console-test"])
    with ApiServer(api, secret=SECRET, port=0, log=io.StringIO(), oidc=verifier) as running:
        yield running


def status_of(server: ApiServer, token: str) -> tuple[int, str]:
    request = urllib.request.Request(server.url + "/me/memory", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())["user_id"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()).get("detail", "")


def test_the_issuers_tokens_are_accepted_beside_development_tokens(server: ApiServer, issuer: OidcIssuer):
    user = str(uuid.uuid4())
    assert status_of(server, issuer.mint(user)) == (200, user)
    assert status_of(server, issue_token(user, secret=SECRET)) == (200, user)


def test_a_token_for_another_audience_another_key_or_expired_is_refused(server: ApiServer, issuer: OidcIssuer):
    user = str(uuid.uuid4())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token, why in [
        (issuer.mint(user, audience="someone-else"), "audience"),
        (issuer.mint(user, key=other_key), "InvalidSignatureError"),
        (issuer.mint(user, ttl=-120), "expired"),
    ]:
        status, detail = status_of(server, token)
        assert status == 401 and why in detail, detail


def test_an_issuers_subject_that_is_not_a_uuid_is_its_derived_user_when_configured(
    server: ApiServer, derived_server: ApiServer, issuer: OidcIssuer
):
    # Given an Auth0-style subject at the issuer
    sub = f"auth0|{uuid.uuid4().hex[:24]}"
    # Then by default its tokens are refused, as behind API Gateway
    status, detail = status_of(server, issuer.mint(sub))
    assert status == 401 and "not a user id" in detail
    # And with SUBJECT_IDS=derived every token of it is one user, the id the API derives
    user = str(derived_user_id(issuer.url, sub))
    assert status_of(derived_server, issuer.mint(sub)) == (200, user)
    assert status_of(derived_server, issuer.mint(sub)) == (200, user)
    # And development tokens (a UUID sub) still name their own user
    mine = str(uuid.uuid4())
    assert status_of(derived_server, issue_token(mine, secret=SECRET)) == (200, mine)

"""Issuers whose `sub` is not a UUID (Auth0's `auth0|...`, Okta, Entra ID, Google): with
SUBJECT_IDS=derived each such subject is the user `uuid5(SUBJECT_NAMESPACE, iss + "\\n" + sub)`
in every route and in the database's row-level security; by default (`uuid`) it is a 401 as
before. Driven with API Gateway HTTP API v2 events through the Lambda's own handler."""

from __future__ import annotations

import contextlib
import re
import unicodedata
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import transaction
from user_memory.http.app import MemoryApi
from user_memory.http.auth import SUBJECT_NAMESPACE, derived_user_id

from tests.api_client import ApiClient, Reply
from tests.e2e.helpers import OPERATOR, ApiFactory, assert_problem, merge, ok

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

ROOT = Path(__file__).resolve().parents[2]
AUTH0 = "https://acme.us.auth0.com/"
OKTA = "https://acme.okta.com/oauth2/default"
NOT_A_UUID = "the token's subject (sub) is not a user id (a UUID)"


@pytest.fixture
def derived(make_api: ApiFactory) -> MemoryApi:
    return make_api("tutor", subject_ids="derived")


def as_subject(api: MemoryApi, sub: str, iss: str = AUTH0, **claims: str) -> ApiClient:
    """A client whose every request carries these claims (as API Gateway passes a verified token's)."""

    class Subject(ApiClient):
        def request(self, method: str, path: str, **kw: Any) -> Reply:
            kw.setdefault("claims", {"sub": sub, "iss": iss, "aud": "user-memory", **claims})
            return super().request(method, path, **kw)

    return Subject(api, None)


def auth0_sub() -> str:
    return f"auth0|{uuid.uuid4().hex[:24]}"


def test_an_auth0_subject_is_one_user_across_requests(derived: MemoryApi):
    # Given a token from Auth0, whose sub is not a UUID
    sub = auth0_sub()
    ada = as_subject(derived, sub)
    # When it writes its memory, then reads it in another request
    written = ok(merge(ada, {"personal_info": {"name": "Ada"}}))
    read = ok(ada.get("/me/memory"))
    # Then both are the same user: the id derived from the issuer and the subject
    user = str(derived_user_id(AUTH0, sub))
    assert written["user_id"] == read["user_id"] == user
    assert read["version"] == 1 and read["document"]["personal_info"]["name"] == "Ada"
    # And the path that names that user is the caller's own
    assert ok(ada.get(f"/users/{user}/memory"))["version"] == 1


def test_two_auth0_subjects_cannot_see_each_other(derived: MemoryApi):
    # Given two Auth0 users, the first with a memory
    ada, bob = as_subject(derived, auth0_sub()), as_subject(derived, auth0_sub())
    ada_id = ok(merge(ada, {"personal_info": {"name": "Ada"}}))["user_id"]
    # Then the second reads an empty memory of its own, and the first's path is refused
    bobs = ok(bob.get("/me/memory"))
    assert bobs["user_id"] != ada_id and bobs["version"] == 0 and bobs["document"] == {}
    assert_problem(bob.get(f"/users/{ada_id}/memory"), 403)
    # And an operator (an Auth0 subject with the operator scope) finds the first by its derived id
    operator = as_subject(derived, auth0_sub(), scope=f"openid {OPERATOR}")
    assert ok(operator.get(f"/admin/users/{ada_id}/memory"))["document"]["personal_info"]["name"] == "Ada"


def test_the_same_subject_at_two_issuers_is_two_users(derived: MemoryApi, pool: ConnectionPool):
    # Given one sub at Auth0 with a memory, and the same sub at Okta
    sub = auth0_sub()
    at_auth0, at_okta = as_subject(derived, sub, AUTH0), as_subject(derived, sub, OKTA)
    first = ok(merge(at_auth0, {"personal_info": {"name": "Ada"}}))["user_id"]
    # When the Okta token reads
    second = ok(at_okta.get("/me/memory"))
    # Then it is another user, with nothing of the first's
    assert second["user_id"] == str(derived_user_id(OKTA, sub)) != first
    assert second["version"] == 0
    # And the database itself refuses the first's rows to the second's claims (row-level security)
    with transaction(pool, end_user=uuid.UUID(second["user_id"])) as tx, tx.connection() as conn:
        seen = conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE user_id = %s", (first,)).fetchone()
    assert seen == (0,)
    with transaction(pool, end_user=uuid.UUID(first)) as tx, tx.connection() as conn:
        own = conn.execute("SELECT count(*) FROM user_memory_snapshots WHERE user_id = %s", (first,)).fetchone()
    assert own == (1,)


def test_a_uuid_subject_keeps_its_id_when_subjects_are_derived(derived: MemoryApi):
    # Given a token whose sub is a UUID (Cognito's), on a deployment that derives the others
    sub = str(uuid.uuid4())
    # Then the user id is the sub itself, so switching to `derived` changes no existing user
    assert ok(as_subject(derived, sub).get("/me/memory"))["user_id"] == sub
    assert ok(as_subject(derived, sub.upper(), OKTA).get("/me/memory"))["user_id"] == sub


def test_by_default_a_subject_that_is_not_a_uuid_is_refused(api: MemoryApi):
    # Given the default deployment (SUBJECT_IDS=uuid) and an Auth0 token
    reply = as_subject(api, auth0_sub()).get("/me/memory")
    # Then it is a 401 naming why, as before
    assert NOT_A_UUID in assert_problem(reply, 401)["detail"]


@pytest.mark.parametrize(
    ("sub", "why"),
    [
        ("auth0|" + "a" * 250, "longer than 255 characters"),
        ("auth0|abc\ndef", "control characters"),
        ("auth0|abc\x00", "control characters"),
        ("auth0|\ud800", "control characters"),  # an unpaired surrogate: JSON's "\ud800"
        ("1234567812345678123456781234567\t", "control characters"),  # int() would read it as hex
    ],
)
@pytest.mark.parametrize("mode", ["uuid", "derived"])
def test_a_long_or_unprintable_subject_is_refused_in_both_modes(make_api: ApiFactory, mode: str, sub: str, why: str):
    api = make_api("tutor", subject_ids=mode)
    assert why in assert_problem(as_subject(api, sub).get("/me/memory"), 401)["detail"]


def test_only_a_uuids_spelling_is_taken_as_one(make_api: ApiFactory):
    # Given a sub that uuid.UUID() would read as 01234567-8123-... (its int() parse takes "_" and " ")
    sub = "1234567812345678123456781234567_"
    # Then it is not a UUID: refused by default, its own derived user otherwise
    assert NOT_A_UUID in assert_problem(as_subject(make_api("tutor"), sub).get("/me/memory"), 401)["detail"]
    derived = make_api("tutor", subject_ids="derived")
    assert ok(as_subject(derived, sub).get("/me/memory"))["user_id"] == str(derived_user_id(AUTH0, sub))


def test_a_derived_subject_needs_an_issuer(derived: MemoryApi):
    reply = as_subject(derived, auth0_sub(), iss="").get("/me/memory")
    assert "issuer (iss)" in assert_problem(reply, 401)["detail"]


def test_the_documented_formula_is_the_codes(derived: MemoryApi):
    # Given the deploy guide's namespace and its worked example
    guide = (ROOT / "docs/deploy.md").read_text()
    section = guide[guide.index("### Auth0 or any OIDC issuer instead") :]
    namespace = re.search(r"uuid5\(([0-9a-f-]{36}), iss", section)
    example = re.search(r"\\\n  '([^']+)' '([^']+)'\n# ([0-9a-f-]{36})", section)
    assert namespace and example, "the guide's formula or example moved"
    # Then they are the code's: the namespace, and the id the API gives that subject
    assert uuid.UUID(namespace.group(1)) == SUBJECT_NAMESPACE
    issuer, sub, user = example.groups()
    assert ok(as_subject(derived, sub, issuer).get("/me/memory"))["user_id"] == user


# -- property: any sub is a clean 401 or one stable user ----------------------------------------------

PROPERTIES = settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)

subjects = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=300),  # surrogates and control characters too
    st.text(max_size=20).map(lambda s: "auth0|" + s),
    st.uuids().map(str),
    st.uuids().map(lambda u: "{" + u.hex.upper() + "}"),
    st.integers(0, 10**22).map(str),
    st.text("0123456789abcdef-_ {}", min_size=30, max_size=40),
)


@PROPERTIES
@given(sub=subjects, mode=st.sampled_from(["uuid", "derived"]))
def test_any_subject_is_a_clean_401_or_one_stable_user(make_api: ApiFactory, sub: str, mode: str):
    api = make_api("tutor", subject_ids=mode)
    # When a token with this sub reads twice
    first, again = (as_subject(api, sub).get("/me/memory") for _ in range(2))
    # Then it is never a 500, and both answers agree
    assert first.status in (200, 401) and again.status == first.status, first.text
    printable = 0 < len(sub) <= 255 and not any(unicodedata.category(c) in ("Cc", "Cs") for c in sub)
    if not printable:  # too long, empty or with control characters: refused in both modes
        assert first.status == 401
        return
    if mode == "derived":  # every other subject is a user
        assert first.status == 200, first.text
    if first.status == 401:
        assert NOT_A_UUID in first.json["detail"]
        return
    # And the user is the sub when it is a UUID, else (derived) the same derived id each time
    user = first.json["user_id"]
    assert again.json["user_id"] == user
    allowed = {str(derived_user_id(AUTH0, sub))} if mode == "derived" else set()
    with contextlib.suppress(ValueError):
        allowed.add(str(uuid.UUID(sub)))
    assert user in allowed

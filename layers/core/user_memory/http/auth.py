"""Who is calling: the verified token's claims, as API Gateway's JWT authorizer passes them.

The API never verifies signatures itself in Lambda: the HTTP API's JWT authorizer does (issuer
and audience are template parameters), and only requests it accepted reach the function. Locally
`user-memory serve` verifies development tokens and passes the claims the same way.

The user id is the token's `sub` when it is a UUID (Cognito, Supabase, Keycloak). Most hosted
issuers (Auth0 `auth0|65a1...`, Okta, Entra ID, Google's numeric ids) issue other subjects: with
SUBJECT_IDS=derived such a subject gets the user id `uuid5(SUBJECT_NAMESPACE, iss + "\n" + sub)`,
the same for every token of that subject, and different for the same subject at another issuer.
A UUID `sub` keeps its value in both modes, so switching to `derived` changes no existing user's id.
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from user_memory.errors import Unauthenticated

# Where identity providers put groups: Cognito, and the common custom claim.
GROUP_CLAIMS = ("cognito:groups", "groups")

# The namespace of derived user ids (uuid5(NAMESPACE_URL, "urn:user-memory:subject-ids")). Fixed
# for good: another value would give every user of a `derived` deployment a new id.
SUBJECT_NAMESPACE = uuid.UUID("2920914b-9547-5218-a26b-e0f1e6dfc1e7")
# OpenID Connect Core: a `sub` "MUST NOT exceed 255 ASCII characters"; the issuer's bound is
# ours, generous for a URL. Both bound what a token can make the API hash.
MAX_SUBJECT_CHARS = 255
MAX_ISSUER_CHARS = 2048

SubjectIds = Literal["uuid", "derived"]

# What uuid.UUID takes that is a UUID's spelling (hex, hyphens, braces, urn:uuid:), without the
# whitespace and underscores its int() parse lets through ("..._1 ", which would alias a UUID).
_UUID_SPELLING = re.compile(r"(?:urn:)?(?:uuid:)?\{?[0-9A-Fa-f-]{32,36}\}?")


@dataclass(frozen=True, kw_only=True)
class Caller:
    """The authenticated caller: the user it is (from the token's `sub`), the `sub` itself, and
    whether it is an operator."""

    user_id: uuid.UUID
    subject: str
    operator: bool


def _words(value: Any) -> set[str]:
    """A claim that holds several values, in any of the forms API Gateway passes them on."""
    if value is None:
        return set()
    if isinstance(value, list | tuple):
        return {str(v) for v in value}
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            # HTTP APIs pass array claims as "[a b]" (not JSON).
            return {w.strip(",\"'") for w in text[1:-1].split() if w.strip(",\"'")}
        if isinstance(parsed, list):
            return {str(v) for v in parsed}
    # OAuth scopes are space-separated (RFC 6749 3.3), and a scope token may itself hold a comma:
    # "openid,user-memory/operator" is one token, not the operator scope.
    return set(text.split())


def derived_user_id(issuer: str, subject: str) -> uuid.UUID:
    """The user id SUBJECT_IDS=derived gives a subject that is not a UUID, at its issuer."""
    return uuid.uuid5(SUBJECT_NAMESPACE, issuer + "\n" + subject)


def _unprintable(text: str) -> bool:
    """Control characters, or unpaired surrogates (JSON's \\ud800 escapes; no UTF-8 for them)."""
    return any(unicodedata.category(c) in ("Cc", "Cs") for c in text)


def _claim(claims: Mapping[str, Any], name: str, what: str, limit: int) -> str:
    """A claim that must be a non-empty string of at most `limit` printable characters."""
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise Unauthenticated(f"the token has no {what} ({name})")
    if len(value) > limit:
        raise Unauthenticated(f"the token's {what} ({name}) is longer than {limit} characters")
    if _unprintable(value):
        raise Unauthenticated(f"the token's {what} ({name}) holds control characters")
    return value


def user_id_of(claims: Mapping[str, Any], subject_ids: SubjectIds = "uuid") -> uuid.UUID:
    """The user verified claims name: `sub` when it is a UUID, else (`derived`) its derived id."""
    subject = _claim(claims, "sub", "subject", MAX_SUBJECT_CHARS)
    if _UUID_SPELLING.fullmatch(subject):
        try:
            return uuid.UUID(subject)
        except ValueError:
            pass
    if subject_ids != "derived":
        raise Unauthenticated("the token's subject (sub) is not a user id (a UUID)")
    return derived_user_id(_claim(claims, "iss", "issuer", MAX_ISSUER_CHARS), subject)


def caller_from_claims(
    claims: Mapping[str, Any] | None, *, operator_scope: str, subject_ids: SubjectIds = "uuid"
) -> Caller:
    """The caller for verified claims; Unauthenticated without a `sub` that names a user."""
    if not claims:
        raise Unauthenticated("no credentials: send Authorization: Bearer <token>")
    user_id = user_id_of(claims, subject_ids)
    subject = str(claims["sub"])
    granted = _words(claims.get("scope")) | _words(claims.get("scp"))
    for name in GROUP_CLAIMS:
        granted |= _words(claims.get(name))
    return Caller(user_id=user_id, subject=subject, operator=operator_scope in granted)

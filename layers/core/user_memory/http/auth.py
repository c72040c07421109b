"""Who is calling: the verified token's claims, as API Gateway's JWT authorizer passes them.

The API never verifies signatures itself in Lambda: the HTTP API's JWT authorizer does (issuer
and audience are template parameters), and only requests it accepted reach the function. Locally
`user-memory serve` verifies development tokens and passes the claims the same way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from user_memory.errors import Unauthenticated

# Where identity providers put groups: Cognito, and the common custom claim.
GROUP_CLAIMS = ("cognito:groups", "groups")


@dataclass(frozen=True, kw_only=True)
class Caller:
    """The authenticated caller: the user it is (the token's `sub`), and whether it is an operator."""

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


def caller_from_claims(claims: Mapping[str, Any] | None, *, operator_scope: str) -> Caller:
    """The caller for verified claims; Unauthenticated without a `sub` that is a user id."""
    if not claims:
        raise Unauthenticated("no credentials: send Authorization: Bearer <token>")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated("the token has no subject (sub)")
    try:
        user_id = uuid.UUID(subject)
    except ValueError:
        raise Unauthenticated("the token's subject (sub) is not a user id (a UUID)") from None
    granted = _words(claims.get("scope")) | _words(claims.get("scp"))
    for name in GROUP_CLAIMS:
        granted |= _words(claims.get(name))
    return Caller(user_id=user_id, subject=subject, operator=operator_scope in granted)

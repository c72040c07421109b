"""Development tokens: HS256 JWTs for the local `serve` and `mcp` commands.

A token names one end user (`sub`, a UUID) and optionally scopes (`scope`, space-separated, as
OAuth does). They are signed with a secret that never leaves the machine:
$USER_MEMORY_TOKEN_SECRET, else `<home>/dev-token-secret`, created once (mode 0600). Not for
production: deployed APIs verify the identity provider's tokens instead.

Errors never quote the token (it is a credential): `verify_token` raises Unauthenticated with
a one-line reason only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
from user_memory.domain.model import parse_user_id
from user_memory.errors import ConfigError, InvalidUserId, Unauthenticated

__all__ = [
    "ALGORITHM",
    "DEFAULT_TTL_SECONDS",
    "DEV_AUDIENCE",
    "DEV_ISSUER",
    "SECRET_ENV",
    "SECRET_FILE",
    "TOKEN_ENV",
    "issue_token",
    "token_scopes",
    "token_secret",
    "verify_token",
]

DEV_ISSUER = "user-memory-local"
DEV_AUDIENCE = "user-memory"
ALGORITHM = "HS256"
DEFAULT_TTL_SECONDS = 12 * 3600
SECRET_ENV = "USER_MEMORY_TOKEN_SECRET"
SECRET_FILE = "dev-token-secret"
TOKEN_ENV = "USER_MEMORY_TOKEN"  # where `user-memory mcp` finds its token without --token

CLOCK_SKEW_SECONDS = 60  # a token issued this far "in the future" is still accepted
_REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud"]  # `sub` is checked by us, for a clearer reason


def token_secret(home: Path) -> str:
    """$USER_MEMORY_TOKEN_SECRET when set, else the secret in `<home>/dev-token-secret`, created
    on first use (`secrets.token_urlsafe(32)`, mode 0600; concurrent first uses agree on one)."""
    configured = os.environ.get(SECRET_ENV, "").strip()
    if configured:
        return configured
    path = Path(home) / SECRET_FILE
    try:
        existing = _read_secret(path)
        if existing is not None:
            return existing
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # atomic, and never replaces a secret another process wrote first
        finally:
            tmp.unlink(missing_ok=True)
        secret = _read_secret(path)
    except OSError as err:
        raise ConfigError(
            f"cannot read or create the development token secret {path} ({err.strerror or err}); set {SECRET_ENV}"
        ) from err
    if secret is None:
        raise ConfigError(f"the development token secret {path} is empty; delete it or set {SECRET_ENV}")
    return secret


def _read_secret(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


def _epoch(now: datetime | float | None) -> int:
    if now is None:
        return int(time.time())
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError("now needs a time zone")
        return int(now.timestamp())
    return int(now)


def issue_token(
    user_id: object,
    *,
    secret: str,
    scopes: Sequence[str] = (),
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    now: datetime | float | None = None,
) -> str:
    """A signed development token for `user_id` (a UUID; InvalidUserId otherwise), valid for
    `ttl_seconds` from `now`, with the `scope` claim when scopes are given."""
    if not secret:
        raise ConfigError("the token secret is empty")
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds < 1:
        raise ValueError("ttl_seconds must be a whole number of seconds, at least 1")
    if isinstance(scopes, str):  # a bare string would be split into characters
        raise TypeError("scopes must be a sequence of scope names, not a string")
    for scope in scopes:
        if not scope or any(c.isspace() for c in scope):
            raise ValueError("a scope must be non-empty and contain no whitespace")
    issued = _epoch(now)
    claims: dict[str, Any] = {
        "sub": str(parse_user_id(user_id)),
        "iss": DEV_ISSUER,
        "aud": DEV_AUDIENCE,
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    if scopes:
        claims["scope"] = " ".join(scopes)
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(token: str, *, secret: str, now: datetime | float | None = None) -> dict[str, Any]:
    """The claims of a valid development token; Unauthenticated with a one-line reason otherwise
    (no token, malformed, bad signature, expired, wrong issuer or audience, no or invalid sub).

    The returned claims' `sub` is a UUID in its canonical text form.
    """
    if not isinstance(token, str) or not token.strip():
        raise Unauthenticated("no token")
    if not secret:
        raise ConfigError("the token secret is empty")
    try:
        claims = jwt.decode(
            token.strip(),
            secret,
            algorithms=[ALGORITHM],
            audience=DEV_AUDIENCE,
            issuer=DEV_ISSUER,
            # Times are checked below, against `now`; PyJWT's own checks only know the clock.
            options={
                "require": _REQUIRED_CLAIMS,
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
                "verify_sub": False,
                "verify_jti": False,
            },
        )
    except jwt.MissingRequiredClaimError as err:
        raise Unauthenticated(f"the token has no {err.claim!r} claim") from None
    except jwt.InvalidSignatureError:
        raise Unauthenticated("the token's signature does not verify (signed with another secret?)") from None
    except jwt.InvalidAlgorithmError:
        raise Unauthenticated(f"the token is not signed with {ALGORITHM}") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated(f"the token is not for this service (audience is not {DEV_AUDIENCE!r})") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated(f"the token was not issued by {DEV_ISSUER!r}") from None
    except jwt.DecodeError:
        raise Unauthenticated("the token is malformed (not a signed JWT)") from None
    except jwt.InvalidTokenError as err:  # any other claim PyJWT refuses: named by type, never quoted
        raise Unauthenticated(f"the token is invalid ({type(err).__name__})") from None
    at = _epoch(now)
    exp = _number(claims.get("exp"), "expiry (exp)")
    iat = _number(claims.get("iat"), "issue time (iat)")
    nbf = _number(claims.get("nbf", iat), "start time (nbf)")
    if exp <= at:
        raise Unauthenticated("the token has expired")
    if max(iat, nbf) > at + CLOCK_SKEW_SECONDS:
        raise Unauthenticated("the token is not valid yet (issued in the future)")
    sub = claims.get("sub")
    if sub is None or sub == "":
        raise Unauthenticated("the token has no subject (sub)")
    if not isinstance(sub, str):
        raise Unauthenticated("the token's subject (sub) is not a user id (a UUID)")
    try:
        claims["sub"] = str(parse_user_id(sub))
    except InvalidUserId:
        raise Unauthenticated("the token's subject (sub) is not a user id (a UUID)") from None
    return claims


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unauthenticated(f"the token's {name} is not a number")
    return value


def token_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes of verified claims (`scope`, space-separated; a list is accepted too)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return frozenset(scope.split())
    if isinstance(scope, list):
        return frozenset(s for s in scope if isinstance(s, str))
    return frozenset()

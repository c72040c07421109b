"""Tokens of an OpenID Connect issuer for `user-memory serve`: what API Gateway's JWT authorizer
checks, done locally, so the console's sign-in (authorization code + PKCE) can be tried against a
real issuer on this machine (the test suite runs a small one).

The issuer's keys are found through its discovery document (`/.well-known/openid-configuration`,
`jwks_uri`) and cached by PyJWT's key client; every fetch has a deadline. Like the authorizer, a
token must be signed by one of those keys (RS256 or ES256), name the issuer, be unexpired, and
carry one of the audiences in `aud` (or, as Cognito's access tokens do, in `client_id`).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import jwt
from user_memory.errors import ConfigError, Unauthenticated

FETCH_TIMEOUT_SECONDS = 5
MAX_DISCOVERY_BYTES = 256 * 1024
ALGORITHMS = ["RS256", "ES256"]


class OidcVerifier:
    """Verifies an issuer's access tokens; `issuer` exactly as its tokens' `iss` says."""

    def __init__(self, issuer: str, audiences: list[str]) -> None:
        if not issuer.startswith(("https://", "http://")):
            raise ConfigError("the OIDC issuer must be an http(s) URL")
        if not audiences:
            raise ConfigError("the OIDC issuer needs at least one audience (--oidc-audience)")
        self.issuer = issuer.rstrip("/")
        self.audiences = audiences
        self._keys: jwt.PyJWKClient | None = None

    def issued(self, token: str) -> bool:
        """Whether the token says this issuer made it (unverified: which verifier to use)."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            return False
        return isinstance(claims.get("iss"), str) and claims["iss"].rstrip("/") == self.issuer

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims; Unauthenticated with a one-line reason (never the token)."""
        try:
            key = self._key_client().get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "sub"], "verify_aud": False},
                leeway=60,
            )
        except jwt.PyJWKClientError as err:
            raise Unauthenticated(f"the issuer's keys do not verify the token ({type(err).__name__})") from None
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired") from None
        except jwt.InvalidTokenError as err:
            raise Unauthenticated(f"the token is invalid ({type(err).__name__})") from None
        audience = claims.get("aud")
        given = set(audience if isinstance(audience, list) else [audience]) | {claims.get("client_id")}
        if not given & set(self.audiences):
            raise Unauthenticated("the token is not for this API (audience)")
        return claims

    def _key_client(self) -> jwt.PyJWKClient:
        if self._keys is None:
            discovery = fetch_json(self.issuer + "/.well-known/openid-configuration")
            jwks_uri = discovery.get("jwks_uri") if isinstance(discovery, dict) else None
            if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                raise Unauthenticated("the issuer's discovery document names no jwks_uri")
            self._keys = jwt.PyJWKClient(jwks_uri, cache_keys=True, timeout=FETCH_TIMEOUT_SECONDS)
        return self._keys


def fetch_json(url: str) -> Any:
    """A small JSON document over HTTP(S), within FETCH_TIMEOUT_SECONDS; Unauthenticated otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:  # noqa: S310 - http(s) only
            return json.loads(response.read(MAX_DISCOVERY_BYTES + 1)[:MAX_DISCOVERY_BYTES])
    except (OSError, ValueError) as err:
        raise Unauthenticated(f"the issuer's discovery document cannot be read ({type(err).__name__})") from None

"""A small OpenID Connect issuer for the console's sign-in tests: discovery, authorize, token (with
the PKCE check), JWKS. RS256 access tokens for one public client; the person signing in is
whoever the test names (`subject`), approved with one button on the issuer's own page.

Strict where the console could go wrong: the token endpoint refuses a code twice, a wrong
client, a redirect URI other than the one authorized, and a code_verifier whose S256 is not
the challenge (`refusals` records why, for the tests to read).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

KEY_ID = "console-test-key"


class OidcIssuer:
    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.subject = ""  # who signs in next
        self.scope = "openid"
        self.refusals: list[str] = []
        self.tokens_issued = 0
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._codes: dict[str, dict[str, str]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OidcIssuer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        return {"keys": [{**jwk, "kid": KEY_ID, "use": "sig", "alg": "RS256"}]}

    def authorize(self, query: dict[str, str]) -> str:
        """A code for the current subject, remembered with the request's PKCE challenge."""
        code = secrets.token_urlsafe(24)
        self._codes[code] = {
            "client_id": query.get("client_id", ""),
            "redirect_uri": query.get("redirect_uri", ""),
            "challenge": query.get("code_challenge", ""),
            "method": query.get("code_challenge_method", ""),
            "subject": self.subject,
        }
        return code

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = self._codes.pop(form.get("code", ""), None)
        if form.get("grant_type") != "authorization_code" or grant is None:
            return self._refuse("invalid_grant", "unknown or used code")
        if form.get("client_id") != self.client_id or grant["client_id"] != self.client_id:
            return self._refuse("invalid_client", "wrong client")
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return self._refuse("invalid_grant", "redirect_uri differs from the authorization's")
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if grant["method"] != "S256" or not verifier or digest != grant["challenge"]:
            return self._refuse("invalid_grant", "PKCE verification failed")
        self.tokens_issued += 1
        return 200, {"access_token": self.mint(grant["subject"]), "token_type": "Bearer", "expires_in": 600}

    def mint(self, subject: str, *, audience: str | None = None, key: Any = None, ttl: int = 600) -> str:
        """An access token as the token endpoint issues it (another audience or key: for refusals)."""
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": subject,
            "aud": audience or self.client_id,
            "client_id": audience or self.client_id,
            "scope": self.scope,
            "iat": now,
            "exp": now + ttl,
        }
        return jwt.encode(claims, key or self._key, algorithm="RS256", headers={"kid": KEY_ID})

    def _refuse(self, error: str, why: str) -> tuple[int, dict[str, Any]]:
        self.refusals.append(why)
        return 400, {"error": error, "error_description": why}


def _handler(issuer: OidcIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Access-Control-Allow-Origin", "*")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value).encode(), "application/json")

        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/.well-known/openid-configuration":
                self._json(200, issuer.discovery())
            elif url.path == "/jwks":
                self._json(200, issuer.jwks())
            elif url.path == "/authorize":
                # The issuer's own sign-in page: one button that approves (a form GET to /approve).
                fields = "".join(
                    f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in query.items()
                )
                page = (
                    "<!doctype html><html lang=en><title>Test issuer</title><h1>Test issuer</h1>"
                    f'<form action="/approve" method="get">{fields}<button type="submit">Approve</button></form>'
                )
                self._send(200, page.encode(), "text/html; charset=utf-8")
            elif url.path == "/approve":
                code = issuer.authorize(query)
                answer = urllib.parse.urlencode({"code": code, "state": query.get("state", "")})
                back = f"{query.get('redirect_uri', '')}?{answer}"
                self._send(302, b"", "text/plain", {"Location": back})
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            if urllib.parse.urlsplit(self.path).path != "/token":
                self._json(404, {"error": "not_found"})
                return
            status, body = issuer.token(form)
            self._json(status, body)

    return Handler

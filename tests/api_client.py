"""Drive the API handler with real API Gateway HTTP API v2 events, as a client would."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from user_memory.http.app import MemoryApi
from user_memory_functions.api.app import handler
from user_memory_local.apigw import http_event
from user_memory_local.poller import FakeLambdaContext


@dataclass
class Reply:
    """An HTTP answer: from the handler here, or over HTTP (tests/e2e/test_serve.py)."""

    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def content_type(self) -> str:
        return self.header("Content-Type") or ""

    def header(self, name: str) -> str | None:
        """The header's value, its name in any case."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


class ApiClient:
    """Requests as one user (the token's claims), answered by the real handler."""

    def __init__(self, api: MemoryApi, user_id: object | None, *, scopes: str | None = None) -> None:
        self.api = api
        self.user_id = str(user_id) if user_id is not None else None
        self.scopes = scopes

    def as_user(self, user_id: object, *, scopes: str | None = None) -> ApiClient:
        return ApiClient(self.api, user_id, scopes=scopes)

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        body: str | bytes | None = None,
        query: Mapping[str, Any] | str | None = None,
        headers: Mapping[str, str] | None = None,
        claims: Mapping[str, Any] | None = None,
    ) -> Reply:
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body)
            headers.setdefault("Content-Type", "application/json")
        if claims is None and self.user_id is not None:
            claims = {"sub": self.user_id, "iss": "https://issuer.test", "aud": "user-memory"}
            if self.scopes:
                claims["scope"] = self.scopes
        event = http_event(method, path, query=query, headers=headers, body=body, claims=claims)
        result = handler(event, FakeLambdaContext(function_name="api"), api=self.api)
        return Reply(
            status=result["statusCode"],
            headers={k: v for k, v in (result.get("headers") or {}).items()},
            text=result.get("body") or "",
        )

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def put(self, path: str, **kw: Any) -> Reply:
        return self.request("PUT", path, **kw)

    def post(self, path: str, **kw: Any) -> Reply:
        return self.request("POST", path, **kw)

    def patch(self, path: str, **kw: Any) -> Reply:
        return self.request("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any) -> Reply:
        return self.request("DELETE", path, **kw)

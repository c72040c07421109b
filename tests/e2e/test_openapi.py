"""The committed OpenAPI document: what the routes generate, served without a token, valid OpenAPI 3."""

from __future__ import annotations

import difflib
import json
import re

import pytest
import schemathesis
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.http.openapi import openapi_text, render_openapi
from user_memory.runtime import ApiServices
from user_memory_local import openapi as regenerate

from tests.api_client import ApiClient

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

REGENERATE = "make openapi  (or: .venv/bin/python -m user_memory_local.openapi)"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture(scope="module")
def api():
    # The document needs no database: the routes and models only.
    settings = ApiSettings.from_env({})
    return create_api(ApiServices(settings=settings, pool=None), settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(openapi_text())


def test_the_committed_document_is_what_the_routes_generate(api):
    committed, generated = openapi_text(), render_openapi(api)
    if committed != generated:
        diff = "".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    generated.splitlines(keepends=True),
                    "openapi.json (committed)",
                    "openapi.json (generated)",
                    n=2,
                )
            )[:60]
        )
        pytest.fail(f"layers/core/user_memory/http/openapi.json is stale; regenerate it with\n  {REGENERATE}\n{diff}")
    assert regenerate.render() == generated  # the regeneration command renders the same bytes
    assert regenerate.main(["--check"]) == 0


def test_the_document_does_not_depend_on_the_deployments_settings():
    settings = ApiSettings.from_env(
        {"DOCUMENT_SCHEMA": "tutor", "REQUIRE_IF_MATCH": "true", "OPERATOR_SCOPE": "ops", "MAX_DOCUMENT_BYTES": "4096"}
    )
    api = create_api(ApiServices(settings=settings, pool=None), settings)  # type: ignore[arg-type]
    assert render_openapi(api) == openapi_text()


def test_get_openapi_json_serves_it_without_a_token(api):
    for claims in (None, {}):
        reply = ApiClient(api, None).get("/openapi.json", claims=claims)
        assert reply.status == 200
        assert reply.content_type == "application/json"
        assert reply.text == openapi_text()


def test_it_is_valid_openapi_3_that_schemathesis_loads(document):
    assert re.fullmatch(r"3\.\d+\.\d+", document["openapi"])
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()  # against the OpenAPI 3.x meta-schema
    operations = [result.ok() for result in schema.get_all_operations()]
    documented = {(m.upper(), path) for path, item in document["paths"].items() for m in item if m in METHODS}
    assert {(op.method.upper(), op.path) for op in operations} == documented


def test_every_operation_needs_the_bearer_token_and_documents_its_errors(document):
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"] == {
        "bearerFormat": "JWT",
        "scheme": "bearer",
        "type": "http",
    }
    assert "/openapi.json" not in document["paths"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            assert "security" not in operation, (method, path)  # the document-wide bearer token applies
            responses = operation["responses"]
            for status in ("400", "401", "403", "404", "422", "500", "503"):
                assert status in responses, (method, path, status)
                content = responses[status]["content"]
                # The service's problems; for some statuses also API Gateway's own {"message": ...}.
                assert set(content) <= {"application/problem+json", "application/json"}, (method, path, status)
                assert content["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}
            success = responses.get("200") or responses["202"]  # 202: work queued (a refresh)
            assert "application/json" in success["content"], (method, path)


def test_patch_documents_both_media_types(document):
    body = document["paths"]["/me/memory"]["patch"]["requestBody"]
    assert set(body["content"]) == {"application/json-patch+json", "application/merge-patch+json"}
    assert document["components"]["schemas"]["PatchOperation"]["properties"]["op"]["enum"] == [
        "add",
        "remove",
        "replace",
        "move",
        "copy",
        "test",
    ]


def test_swagger_ui_serves_the_committed_document_without_a_token(api, document):
    # Given no token at all
    anonymous = ApiClient(api, None)
    # When Swagger UI is asked for
    page = anonymous.get("/swagger")
    # Then it is Powertools' Swagger UI page, self-contained (its assets inlined, nothing from a CDN)
    assert page.status == 200 and page.content_type == "text/html; charset=utf-8"
    assert "SwaggerUIBundle" in page.text and "<script src=" not in page.text
    # And the document it shows is the committed one, the same /openapi.json serves
    assert openapi_text().replace("</", "<\\/") in page.text
    # And ?format=json answers the document itself
    as_json = anonymous.get("/swagger", query={"format": "json"})
    assert as_json.status == 200 and as_json.json == document


def test_swagger_ui_is_compressed_for_clients_that_accept_gzip(api):
    import base64
    import gzip

    from user_memory_functions.api.app import handler
    from user_memory_local.apigw import http_event
    from user_memory_local.poller import FakeLambdaContext

    event = http_event("GET", "/swagger", headers={"Accept-Encoding": "gzip"})
    result = handler(event, FakeLambdaContext(function_name="api"), api=api)
    assert result["statusCode"] == 200 and result["isBase64Encoded"] is True
    assert result["headers"]["Content-Encoding"] == "gzip"
    page = gzip.decompress(base64.b64decode(result["body"])).decode()
    assert "SwaggerUIBundle" in page
    assert len(result["body"]) < 1_000_000  # within Lambda's 6 MB response, and far below it

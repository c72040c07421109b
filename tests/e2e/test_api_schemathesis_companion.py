"""Property-based tests of the companion and search routes, generated from the committed OpenAPI
document (schemathesis, Python API), on a deployment with DOCUMENT_SCHEMA=companion.

The same setup and checks as test_api_schemathesis.py (real HTTP to `ApiServer`, the Lambda
handler behind it, real PostgreSQL in a database of its own, a development token; answers must not
be 5xx and must conform to the document: status codes, content types, headers, response schemas),
but here the goals, to-dos, events, ratings, digest and search routes do their work instead of
answering not-enabled, the memory routes edit companion documents, and embeddings are configured
(a local OpenAI-compatible endpoint), so every write also embeds its new texts and search fuses
full text with vectors. Bounded and derandomized: the file runs the same way every time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from psycopg_pool import ConnectionPool
from user_memory.config import ApiSettings
from user_memory.http.app import create_api
from user_memory.http.openapi import openapi_text
from user_memory.runtime import build_api
from user_memory_local.serve import ApiServer

from tests.e2e.helpers import SERVER_SECRET
from tests.e2e.openapi_cases import CHECKS, committed_schema, examples, service_log_at
from tests.fake_embeddings import fake_embeddings_server

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

MAX_EXAMPLES = 25

# The companion layer's operations, search (the user's and the operators'), and the memory and
# account routes whose documents are companion documents here.
COMPANION_PATHS = (
    r"^/me/(goals|todos|events)(/\{element_id\}(/complete)?)?$"
    r"|^/me/(todos/due|events/import|ratings|digest|memory/search)$"
    r"|^/admin/memory/search$"
    r"|^/me/(memory|export)$"
    r"|^/me$"
)

schema = committed_schema().include(path_regex=COMPANION_PATHS)

EXAMPLES = examples(MAX_EXAMPLES)


def test_the_selection_holds_every_companion_and_search_operation():
    # Given the committed document; When its operations are filtered as above
    selected = {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}
    document = json.loads(openapi_text())
    tagged = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "companion" in operation.get("tags", [])
    }
    # Then every companion-tagged operation is in, with both searches and the memory routes
    assert len(tagged) == 21, sorted(tagged)  # 5 per collection, due, goals, events, import, ratings, digest
    assert tagged <= selected
    assert {("GET", "/me/memory/search"), ("GET", "/admin/memory/search"), ("PATCH", "/me/memory")} <= selected
    assert ("DELETE", "/me") in selected and ("GET", "/me/kv/{namespace}") not in selected


@pytest.fixture(scope="module", autouse=True)
def quiet_service_log() -> Iterator[None]:
    """Thousands of refused requests: the service's INFO lines would drown the report."""
    with service_log_at(logging.ERROR):  # failed embeddings are warnings; generated texts may be refused
        yield


@pytest.fixture(scope="module")
def server(own_pool: ConnectionPool) -> Iterator[ApiServer]:
    with fake_embeddings_server() as (_, base_url):
        settings_ = ApiSettings.from_env(
            {
                "DOCUMENT_SCHEMA": "companion",
                "EMBEDDING_MODEL": "text-embedding-3-small",
                "EMBEDDING_BASE_URL": base_url,
                "EMBEDDING_API_KEY": "test-key",
            }
        )
        api = create_api(build_api(settings_, pool=own_pool), settings_)
        with ApiServer(api, secret=SERVER_SECRET) as running:
            yield running


@schema.parametrize()
@EXAMPLES
def test_every_companion_operation_as_an_end_user(case, server, user_token):
    case.call_and_validate(base_url=server.url, headers={"Authorization": f"Bearer {user_token}"}, checks=CHECKS)


@schema.parametrize()
@examples(10)
def test_every_companion_operation_as_an_operator(case, server, operator_token):
    case.call_and_validate(base_url=server.url, headers={"Authorization": f"Bearer {operator_token}"}, checks=CHECKS)


@schema.parametrize()
@examples(3)
def test_every_companion_operation_without_a_token_is_a_documented_401(case, server):
    response = case.call_and_validate(base_url=server.url, checks=CHECKS)
    # A framing header the generator invented (Transfer-Encoding: 0) is refused with a 400 as the
    # request is read, before any token is looked at (API Gateway refuses it at its edge too).
    framing = {name.lower() for name in (case.headers or {})} & {"transfer-encoding", "content-length"}
    assert response.status_code == (400 if framing else 401)

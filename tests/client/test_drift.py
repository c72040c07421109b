"""The client against the API's own description: every operation it calls and every model it
parses is checked against the served /openapi.json, so neither can drift from the API unseen.
And the client stands alone: it installs and imports without the server's dependencies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from user_memory_client import models
from user_memory_client._operations import OPERATIONS

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
_IGNORED = {"title", "description", "default", "examples"}
_CONSTRAINTS = {"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern"}


@pytest.fixture(scope="module")
def spec(server) -> dict[str, Any]:
    with urllib.request.urlopen(server.url + "/openapi.json", timeout=30) as answer:
        return json.loads(answer.read())


def _ref(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _shape(schema: Any) -> Any:
    """A property's JSON type, without titles, descriptions, defaults and bounds (answers only
    need the type; the API enforces the bounds)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return {"$ref": _ref(schema)}
        if "anyOf" in schema:
            return {"anyOf": sorted((_shape(s) for s in schema["anyOf"]), key=json.dumps)}
        return {k: _shape(v) for k, v in schema.items() if k not in _IGNORED | _CONSTRAINTS}
    if isinstance(schema, list):
        return [_shape(s) for s in schema]
    return schema


def _operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    paths = spec["paths"]
    assert path in paths, f"{path} is not in the API"
    assert method.lower() in paths[path], f"{method} {path} is not in the API"
    return paths[path][method.lower()]


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_operation_the_client_calls_is_the_apis(spec, name):
    op = OPERATIONS[name]
    declared = _operation(spec, op.method, op.path)
    params = declared.get("parameters", [])
    # Query parameters: the client's are the operation's, and it can send every required one
    query = {p["name"] for p in params if p["in"] == "query"}
    assert set(op.query) == query, name
    # Path parameters: the same names
    in_path = {p["name"] for p in params if p["in"] == "path"}
    assert {part[1:-1] for part in op.path.split("/") if part.startswith("{")} == in_path
    # Headers: the edit headers the operation declares (If-Match, Idempotency-Key) are sent
    headers = {p["name"].lower() for p in params if p["in"] == "header"}
    assert {h.lower() for h in op.headers} == headers, name
    # Bodies: the same media types, and the JSON object's fields are the request schema's
    content = declared.get("requestBody", {}).get("content", {})
    assert set(op.bodies) == set(content), name
    if op.body_fields:
        schema = next(iter(content.values()))["schema"]
        body = spec["components"]["schemas"][_ref(schema)] if _ref(schema) else schema
        assert set(op.body_fields) == set(body["properties"]), name
    # The answer: the schema the client's model mirrors
    success = declared["responses"].get("200") or declared["responses"]["202"]  # 202: work queued (a refresh)
    answer = success["content"]["application/json"]["schema"]
    assert _ref(answer) == op.answer.__schema__, name


@pytest.mark.parametrize("model", models.schema_models(), ids=lambda m: m.__name__)
def test_every_model_matches_its_schema(spec, model: type[BaseModel]):
    schema = spec["components"]["schemas"][model.__schema__]  # type: ignore[attr-defined]
    mine = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    # The same fields, the same required ones, the same JSON types
    assert set(mine["properties"]) == set(schema["properties"])
    assert set(mine.get("required", [])) == set(schema.get("required", []))
    for name, prop in schema["properties"].items():
        assert _shape(mine["properties"][name]) == _shape(prop), f"{model.__name__}.{name}"


def test_the_dev_environment_installs_what_the_client_needs():
    # The root project's dev extra carries the client's dependencies, pinned alike, so its tests run
    # on `pip install -e '.[dev]'` as well as after `make`.
    root = tomllib.loads((CLIENT.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    needed = set(client["dependencies"]) - {"pydantic>=2.7,<3"}  # the server pins pydantic itself
    assert needed | set(client["optional-dependencies"]["langgraph"]) <= set(root["dev"])


def test_every_schema_an_operation_answers_has_a_model(spec):
    answered = {op.answer.__schema__ for op in OPERATIONS.values()}
    mirrored = {m.__schema__ for m in models.schema_models()}  # type: ignore[attr-defined]
    assert answered <= mirrored


def test_the_client_imports_nothing_of_the_server_and_depends_on_httpx_and_pydantic_only():
    # Given the client's declared dependencies
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert names == {"httpx", "pydantic"}
    # When it is imported alone, in a fresh interpreter
    script = (
        "import sys\n"
        "import user_memory_client, user_memory_client.aio, user_memory_client.client\n"
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(CLIENT)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    loaded = set(run.stdout.split())
    # Then only the standard library, httpx's and pydantic's own packages and the client were loaded
    allowed = {
        "user_memory_client",
        "httpx",
        "httpcore",
        "h11",
        "anyio",
        "sniffio",
        "idna",
        "certifi",
        "pydantic",
        "pydantic_core",
        "typing_extensions",
        "annotated_types",
        "typing_inspection",
        # httpx's optional extras, imported when installed (its command line, compression)
        "click",
        "rich",
        "pygments",
        "zstandard",
        "brotli",
        "h2",
        "socksio",
        # the interpreter's own
        "__main__",
        "_distutils_hack",
        "sitecustomize",
        "usercustomize",
    }
    extra = {
        m
        for m in loaded - set(sys.stdlib_module_names) - allowed
        if not m.startswith(("__editable__", "_sysconfigdata"))
    }
    assert not extra, f"the client imported {sorted(extra)}"
    server = {"user_memory", "user_memory_local", "psycopg", "boto3", "aws_lambda_powertools", "openai", "httpx2"}
    assert not loaded & server

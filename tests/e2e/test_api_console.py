"""What the console reads beside the memory routes, driven with API Gateway events against real
PostgreSQL: the plots' figures, key-value namespaces, conversations, the document check, the
operators' reads of the same, and the console's files (public, under a strict CSP)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.config import ApiSettings
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.overview import MAX_SIZE_POINTS
from user_memory.http.app import create_api
from user_memory.http.routes import console as console_routes
from user_memory.runtime import build_api

from tests.api_client import ApiClient
from tests.browser.seed import nightly_provenance

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

OPERATOR = "user-memory/operator"


@pytest.fixture(scope="module")
def api(pool: ConnectionPool):
    settings = ApiSettings.from_env(
        {
            "DOCUMENT_SCHEMA": "companion",
            "CONSOLE_OIDC_ISSUER": "https://issuer.example/pool",
            "CONSOLE_CLIENT_ID": "c1",
        }
    )
    return create_api(build_api(settings, pool=pool), settings)


@pytest.fixture
def me(api, user_id: str) -> ApiClient:
    return ApiClient(api, user_id)


def _versions(pool: ConnectionPool, user: str, count: int, *, provenance: dict[str, Any] | None = None) -> None:
    store = MemoryStore(PostgresRecorder(pool))
    head = store.head(user).version
    for n in range(count):
        store.append(
            user, {"summary": "x" * (head + n + 1)}, expected_version=head + n, source="s", provenance=provenance
        )


def test_stats_count_edits_refusals_and_tokens_per_day(me: ApiClient, pool: ConnectionPool, user_id: str):
    # Given two nightly runs today (3 edits applied, 1 refused, 4,200 tokens) and an API edit
    run = nightly_provenance([("add", "/a", "r"), ("add", "/b", "r")], [("remove", "/c", "r", "why")], 2000)
    _versions(pool, user_id, 1, provenance=run)
    _versions(pool, user_id, 1, provenance=nightly_provenance([("add", "/d", "r")], [], 2200))
    _versions(pool, user_id, 1)
    # When the figures are read
    reply = me.get("/me/memory/stats", query={"days": 7})
    # Then one day holds them all, and the size of each version is its compact JSON's
    assert reply.status == 200, reply.text
    body = reply.json
    today = datetime.now(UTC).date().isoformat()
    assert body["per_day"] == [
        {
            "day": today,
            "versions": 3,
            "edits_applied": 3,
            "edits_refused": 1,
            "tokens": 4200,
            # And the tokens split, with their cost at the runs' prices: 1,800 + 2,000 in, 400 out
            "prompt_tokens": 3800,
            "completion_tokens": 400,
            "cached_prompt_tokens": 0,
            "cost_usd": 0.00081,
        }
    ]
    assert [(p["version"], p["bytes"]) for p in body["sizes"]] == [(1, 15), (2, 16), (3, 17)]


def test_an_operator_reads_a_runs_totals_over_every_users_versions(api, pool: ConnectionPool):
    # Given a run that wrote versions for two users, and another run
    store = MemoryStore(PostgresRecorder(pool))
    users = [str(uuid.uuid4()) for _ in range(3)]
    run_key = f"daily:{uuid.uuid4().hex[:8]}"
    for user, key, tokens in ((users[0], run_key, 2000), (users[1], run_key, 2400), (users[2], "other", 9000)):
        provenance = nightly_provenance([("add", "/a", "r")], [("remove", "/c", "r", "why")], tokens)
        store.append(user, {"summary": "s"}, expected_version=0, source="s", idempotency_key=key, provenance=provenance)
    # When an operator reads the run's report
    reply = ApiClient(api, uuid.uuid4(), scopes=OPERATOR).get(f"/admin/runs/{run_key}")
    # Then it totals that run's versions: users, activities, calls, tokens and their cost
    assert reply.status == 200, reply.text
    body = reply.json
    assert (body["run_key"], body["versions"], body["users"]) == (run_key, 2, 2)
    assert (body["activities"], body["calls"], body["edits_refused"]) == (14, 2, 2)
    assert (body["prompt_tokens"], body["completion_tokens"], body["tokens"]) == (4000, 400, 4400)
    assert body["cost_usd"] == 0.00084  # (4,000 x 0.15 + 400 x 0.60) / 1M
    # And an unknown run is all zeros; an end user may not read reports
    assert ApiClient(api, uuid.uuid4(), scopes=OPERATOR).get("/admin/runs/daily:1999-01-01").json["versions"] == 0
    assert ApiClient(api, users[0]).get(f"/admin/runs/{run_key}").status == 403


def test_the_size_plot_is_bounded_to_the_newest_versions(me: ApiClient, pool: ConnectionPool, user_id: str):
    _versions(pool, user_id, MAX_SIZE_POINTS + 30)
    sizes = me.get("/me/memory/stats").json["sizes"]
    assert len(sizes) == MAX_SIZE_POINTS
    assert sizes[0]["version"] == 31 and sizes[-1]["version"] == MAX_SIZE_POINTS + 30
    assert sizes[-1]["bytes"] == len(json.dumps({"summary": "x" * (MAX_SIZE_POINTS + 30)}, separators=(",", ":")))


def test_stats_of_a_user_without_versions_are_empty(me: ApiClient):
    assert me.get("/me/memory/stats").json["sizes"] == []
    assert me.get("/me/memory/stats", query={"days": 367}).status == 400


def test_key_value_namespaces_count_live_entries(me: ApiClient):
    for key in ("a", "b"):
        assert me.put(f"/me/kv/prefs/{key}", json_body={"value": 1}).status == 200
    assert me.put("/me/kv/cache/x", json_body={"value": 1, "ttl_seconds": 60}).status == 200
    items = me.get("/me/kv").json["items"]
    assert [(n["namespace"], n["entries"]) for n in items] == [("cache", 1), ("prefs", 2)]
    assert items[0]["next_expiry"] is not None and items[1]["next_expiry"] is None


def test_conversations_page_with_a_cursor(me: ApiClient):
    # Given three conversations, each with one message at its own time
    start = datetime(2026, 11, 1, tzinfo=UTC)
    items = [
        {
            "occurred_at": (start + timedelta(hours=n)).isoformat(),
            "kind": "message",
            "source": "chat",
            "external_id": f"m{n}",
            "payload": {"conversation_id": f"c{n}", "role": "user", "text": "hi"},
        }
        for n in range(3)
    ]
    assert me.post("/me/activity", json_body={"items": items}).status == 200
    # When they are read two at a time
    first = me.get("/me/conversations", query={"limit": 2}).json
    second = me.get("/me/conversations", query={"limit": 2, "after": first["next_after"]}).json
    # Then newest first, every one once, and no cursor after the last page
    assert [c["conversation_id"] for c in first["items"]] == ["c2", "c1"]
    assert [c["conversation_id"] for c in second["items"]] == ["c0"] and second["next_after"] is None
    assert first["items"][0]["memory"] is None and first["items"][0]["messages"] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cursor=st.one_of(
        st.text(min_size=1, max_size=80),
        st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode() or "x"),
    )
)
def test_a_cursor_the_api_did_not_give_is_a_clear_400(me: ApiClient, cursor: str):
    reply = me.get("/me/conversations", query={"after": cursor})
    assert reply.status in (200, 400, 422), reply.text
    if reply.status != 200:
        assert reply.content_type == "application/problem+json"


def test_the_document_check_names_each_problem_by_pointer(me: ApiClient):
    bad = {"basic_info": {"email": "not an email"}, "goals": {"g": {"id": "other", "title": "t"}}, "extra": 1}
    body = me.post("/me/memory/validate", json_body=bad).json
    paths = {p["path"] for p in body["problems"]}
    assert body["valid"] is False and "/basic_info/email" in paths and "/extra" in paths
    assert "not an email" not in json.dumps(body)  # never the values
    assert me.post("/me/memory/validate", json_body={"basic_info": {"name": "Ann"}}).json == {
        "valid": True,
        "problems": [],
    }
    assert me.get("/me/memory").json["version"] == 0  # nothing written


def test_operators_read_any_users_views_and_others_are_refused(api, me: ApiClient, user_id: str, pool: ConnectionPool):
    _versions(pool, user_id, 2)
    assert me.put("/me/kv/prefs/a", json_body={"value": 1}).status == 200
    operator = ApiClient(api, uuid.uuid4(), scopes=OPERATOR)
    stranger = ApiClient(api, uuid.uuid4())
    paths = [
        f"/admin/users/{user_id}/memory/stats",
        f"/admin/users/{user_id}/kv",
        f"/admin/users/{user_id}/kv/prefs",
        f"/admin/users/{user_id}/conversations",
        f"/admin/users/{user_id}/goals",
        f"/admin/users/{user_id}/todos/due",
        f"/admin/users/{user_id}/events",
    ]
    for path in paths:
        assert operator.get(path).status == 200, path
        assert stranger.get(path).status == 403, path
    assert operator.get(f"/admin/users/{user_id}/memory/search", query={"q": "x"}).status == 200
    assert operator.get(f"/admin/users/{user_id}/kv").json["items"][0]["namespace"] == "prefs"


def test_the_console_is_public_under_a_strict_policy(api):
    anonymous = ApiClient(api, None)
    page = anonymous.get("/console")
    policy = page.headers["Content-Security-Policy"]
    assert page.status == 200 and page.content_type.startswith("text/html")
    assert "script-src 'self'" in policy and "https://issuer.example" in policy and "unsafe" not in policy
    config = anonymous.get("/console/config.json").json
    assert config == {
        "issuer": "https://issuer.example/pool",
        "client_id": "c1",
        "scopes": "openid",
        "operator_scope": OPERATOR,
        "schema": "companion",
    }
    assert anonymous.get("/console/nothing.js").status == 404
    assert anonymous.get("/console/openapi.json").status == 404  # only the console's own files
    assert anonymous.get("/me/memory/stats").status == 401


def _shipped_files() -> set[str]:
    return {f.name for f in files("user_memory.http").joinpath("console").iterdir() if f.is_file()}


def test_a_console_file_name_longer_than_the_filesystem_takes_is_a_404(api):
    # Given no token, and a name no filesystem holds (300 characters)
    anonymous = ApiClient(api, None)
    # When it is asked for under /console/
    reply = anonymous.get("/console/" + "a" * 300 + ".js")
    # Then it is a plain 404 problem, not a 500 that would trip the 5xx alarm
    assert reply.status == 404 and reply.content_type == "application/problem+json", reply.text


def test_unknown_console_names_never_grow_the_asset_cache(api):
    # Given every shipped file of the console read once
    anonymous = ApiClient(api, None)
    shipped = _shipped_files()
    for name in shipped:
        assert anonymous.get(f"/console/{name}").status == 200, name
    # When a hundred names that are not shipped are asked for
    for n in range(100):
        assert anonymous.get(f"/console/missing-{n}.js").status == 404
    # Then the module's caches hold the shipped files (and their list), nothing per unknown name
    caches = [f for f in vars(console_routes).values() if getattr(f, "__module__", "") == console_routes.__name__]
    cached = sum(f.cache_info().currsize for f in caches if hasattr(f, "cache_info"))
    assert cached <= len(shipped) + 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stem=st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
    | st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=200, max_size=400),
    suffix=st.sampled_from(["", ".js", ".css", ".html", ".svg", ".txt", ".json"]),
)
def test_any_name_under_console_is_a_shipped_file_or_a_404_never_a_5xx(api, stem: str, suffix: str):
    # Given any name (short, or longer than a file name may be), percent-encoded as a client sends it
    name = stem + suffix
    assume(name)
    path = "/console/" + quote(name, safe="")
    # When it is asked for without a token
    reply = ApiClient(api, None).get(path)
    # Then only a shipped file's name is a 200, everything else a 404
    expected = 200 if name in _shipped_files() else 404
    assert reply.status == expected, (name, reply.status, reply.text[:200])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.sampled_from(["/", "/console/", "/console", "/swagger", "/openapi.json", "/me/", "/users/", "/admin/"]),
    segments=st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=300), max_size=4),
    method=st.sampled_from(["GET", "HEAD", "POST", "OPTIONS", "DELETE"]),
    query=st.sampled_from(["", "format=json", "format=oauth2-redirect", "a=%ZZ", "x=" + "y" * 3000]),
)
def test_no_anonymous_request_is_a_5xx(api, prefix: str, segments: list[str], method: str, query: str):
    # Given no token, and any path, method and query under the public and the private prefixes
    path = prefix + "/".join(quote(s, safe="") for s in segments)
    # When it is asked
    reply = ApiClient(api, None).request(method, path, query=query)
    # Then it is answered below 500 (a 5xx would trip the alarm for a request that did nothing)
    assert reply.status < 500, (method, path[:200], reply.status, reply.text[:200])


def test_swagger_ui_runs_under_a_policy_that_allows_only_its_own_inline_code(api):
    # Given no token
    reply = ApiClient(api, None).get("/swagger")
    policy = dict(p.strip().split(" ", 1) for p in reply.headers["Content-Security-Policy"].split(";"))
    # Then the page may not be framed, nor run anything but its own inline script and style
    assert policy["frame-ancestors"] == "'none'" and policy["default-src"] == "'none'"
    assert "unsafe" not in reply.headers["Content-Security-Policy"]

    def digests(tag: str) -> set[str]:
        blocks = re.findall(f"<{tag}>(.*?)</{tag}>", reply.text, flags=re.DOTALL)
        return {f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks}

    assert set(policy["script-src"].split()) == digests("script") and len(digests("script")) == 2
    assert set(policy["style-src"].split()) == digests("style")
    assert policy["connect-src"] == "'self'"
    # And the token a reader authorizes with is not kept in localStorage
    assert "persistAuthorization: false" in reply.text
    assert reply.header("X-Content-Type-Options") == "nosniff"


def test_reverts_and_prunes_say_so_in_the_history(me: ApiClient):
    # Given two edits, then a revert to the first and a prune of one section
    assert (
        me.request(
            "PATCH",
            "/me/memory",
            json_body={"basic_info": {"name": "Ann"}},
            headers={"Content-Type": "application/merge-patch+json"},
        ).status
        == 200
    )
    assert (
        me.request(
            "PATCH",
            "/me/memory",
            json_body={"basic_info": {"name": "Bo"}},
            headers={"Content-Type": "application/merge-patch+json"},
        ).status
        == 200
    )
    assert me.post("/me/memory/revert", json_body={"version": 1}).status == 200
    assert me.request("DELETE", "/me/memory", query={"section": "basic_info"}).status == 200
    # Then the history names what each write did, and the document's stamp stays the API's
    sources = [item["source"] for item in me.get("/me/memory/history").json["items"]]
    assert sources == ["api: prune basic_info", "api: revert to 1", "api", "api"]
    assert me.get("/me/memory").json["document"]["last_updated_by"] == "api"


def test_the_console_command_prints_a_url_signed_in_as_the_user(capsys, monkeypatch):
    from user_memory_local import cli
    from user_memory_local.tokens import verify_token

    # Given this machine's token secret
    monkeypatch.setenv("USER_MEMORY_TOKEN_SECRET", "console-cli-secret-of-at-least-32-bytes")
    user = str(uuid.uuid4())
    # When `user-memory console USER --operator --url ...` runs
    assert cli.main(["console", user, "--operator", "--url", "http://127.0.0.1:9999"]) == 0
    url = capsys.readouterr().out.strip()
    # Then it prints the console's URL with a development token in the fragment, as an operator
    base, _, fragment = url.partition("#token=")
    assert base == "http://127.0.0.1:9999/console"
    claims = verify_token(fragment, secret="console-cli-secret-of-at-least-32-bytes")
    assert claims["sub"] == user and OPERATOR in claims["scope"].split()
    # And a bad user id is one line, no URL
    assert cli.main(["console", "not-a-user"]) != 0
    assert capsys.readouterr().out == ""

"""Every route of the memory API, driven with API Gateway HTTP API v2 events against real PostgreSQL.

The handler is the Lambda's own (`user_memory_functions.api.app.handler`), composed with a pool
from the fixtures; the events carry the JWT authorizer's claims the way API Gateway passes them.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from user_memory.http.app import MemoryApi

from tests.api_client import ApiClient, Reply
from tests.e2e.helpers import (
    JSON_PATCH,
    MERGE_PATCH,
    OPERATOR,
    activity,
    assert_problem,
    etag,
    head_version,
    json_patch,
    merge,
    new_client,
    ok,
    removed,
    version_count,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

# A valid first edit, a valid second edit and an edit the schema refuses, per schema.
EDITS: dict[str, dict[str, Any]] = {
    "tutor": {
        "first": {"personal_info": {"name": "Ann", "language": "fr"}},
        "second": {"personal_info": {"preferred_name": "Annie"}},
        "invalid": {"areas_to_improve": [{"topic": "fractions", "severity": 9}]},
        "op": {"op": "replace", "path": "/personal_info/timezone", "value": "Europe/Paris"},
        "section": "personal_info",
        "empty": {"name": "", "preferred_name": "", "language": "", "timezone": "", "age_group": ""},
    },
    "user_state": {
        "first": {"summary": "Likes chess", "safety_notes": "none"},
        "second": {"summary": "Likes chess and go"},
        "invalid": {"parts": {"p1": {"status": "ok"}}},  # a part needs a name
        "op": {"op": "replace", "path": "/safety_notes", "value": "avoid loud noises"},
        "section": "summary",
        "empty": "",
    },
}


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(params=["tutor", "user_state"])
def schema(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def operator(api: MemoryApi) -> ApiClient:
    return new_client(api, scopes=f"openid {OPERATOR}")


@pytest.fixture
def with_history(alice: ApiClient) -> ApiClient:
    """Alice with three versions: a name, a preferred name, a learning goal."""
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    ok(merge(alice, {"personal_info": {"preferred_name": "Annie"}}))
    ok(json_patch(alice, [{"op": "add", "path": "/personal_info/learning_goals/-", "value": "algebra"}]))
    return alice


# -- reading ---------------------------------------------------------------------------------------


def test_a_new_user_reads_version_zero_the_empty_document(alice):
    reply = alice.get("/me/memory")
    body = ok(reply)
    assert body == {"user_id": alice.user_id, "version": 0, "document": {}, "created_at": None, "source": None}
    assert etag(reply) == '"0"'


def test_get_memory_head_version_and_as_of_with_etags(with_history):
    alice = with_history
    head = alice.get("/me/memory")
    assert ok(head)["version"] == 3
    assert etag(head) == '"3"'
    assert ok(head)["document"]["personal_info"]["learning_goals"] == ["algebra"]

    past = alice.get("/me/memory", query={"version": 1})
    assert ok(past)["version"] == 1
    assert etag(past) == '"1"'
    assert ok(past)["document"]["personal_info"]["preferred_name"] == ""
    assert ok(alice.get("/me/memory", query={"version": 0}))["document"] == {}

    items = ok(alice.get("/me/memory/history"))["items"]
    created = {i["version"]: i["created_at"] for i in items}
    at_two = ok(alice.get("/me/memory", query={"as_of": created[2]}))
    assert at_two["version"] == 2
    before_all = datetime.fromisoformat(created[1]) - timedelta(days=1)
    assert ok(alice.get("/me/memory", query={"as_of": before_all.isoformat()}))["version"] == 0
    later = datetime.fromisoformat(created[3]) + timedelta(days=1)
    assert ok(alice.get("/me/memory", query={"as_of": later.isoformat()}))["version"] == 3


def test_get_memory_refuses_unknown_versions_naive_times_and_both_at_once(with_history):
    alice = with_history
    body = assert_problem(alice.get("/me/memory", query={"version": 9}), 404, "unknown-version")
    assert "versions 0..3" in body["detail"]
    assert_problem(alice.get("/me/memory", query={"as_of": "2026-01-01T00:00:00"}), 400, "bad-request")
    assert_problem(alice.get("/me/memory", query={"version": 1, "as_of": "2026-01-01T00:00:00Z"}), 400)
    assert_problem(alice.get("/me/memory", query={"version": -1}), 400, "bad-request")
    assert_problem(alice.get("/me/memory", query={"version": "x"}), 400, "bad-request")


def test_history_pages_newest_first_with_a_cursor(with_history):
    alice = with_history
    first = ok(alice.get("/me/memory/history", query={"limit": 2}))
    assert [i["version"] for i in first["items"]] == [3, 2]
    assert first["next_before"] == 2
    assert first["items"][0]["operations"] == 1 and first["items"][0]["source"] == "api"
    assert first["items"][0]["change_bytes"] > 0
    second = ok(alice.get("/me/memory/history", query={"limit": 2, "before": first["next_before"]}))
    assert [i["version"] for i in second["items"]] == [1]
    assert second["next_before"] is None
    assert_problem(alice.get("/me/memory/history", query={"limit": 0}), 400, "bad-request")
    assert_problem(alice.get("/me/memory/history", query={"limit": 501}), 400, "bad-request")
    assert_problem(alice.get("/me/memory/history", query={"before": 0}), 400, "bad-request")


def test_diff_is_one_patch_between_two_versions(with_history):
    alice = with_history
    body = ok(alice.get("/me/memory/diff", query={"from": 2, "to": 3}))
    assert body == {
        "user_id": alice.user_id,
        "from": 2,
        "to": 3,
        "patch": [{"op": "add", "path": "/personal_info/learning_goals/0", "value": "algebra"}],
    }
    back = ok(alice.get("/me/memory/diff", query={"from": 3, "to": 2}))["patch"]
    assert back == [{"op": "remove", "path": "/personal_info/learning_goals/0"}]
    assert ok(alice.get("/me/memory/diff", query={"from": 3, "to": 3}))["patch"] == []
    assert_problem(alice.get("/me/memory/diff", query={"from": 1, "to": 7}), 404, "unknown-version")
    assert_problem(alice.get("/me/memory/diff", query={"from": 1}), 400, "bad-request")


def test_changes_since_zero_middle_head_and_beyond(with_history):
    alice = with_history
    from_zero = alice.get("/me/memory/changes", query={"since": 0})
    assert ok(from_zero)["since"] == 0 and ok(from_zero)["version"] == 3
    assert etag(from_zero) == '"3"'
    middle = ok(alice.get("/me/memory/changes", query={"since": 2}))
    assert middle["patch"] == [{"op": "add", "path": "/personal_info/learning_goals/0", "value": "algebra"}]
    at_head = ok(alice.get("/me/memory/changes", query={"since": 3}))
    assert at_head == {"user_id": alice.user_id, "since": 3, "version": 3, "patch": []}
    body = assert_problem(alice.get("/me/memory/changes", query={"since": 4}), 404, "unknown-version")
    assert "4" in body["detail"]
    assert_problem(alice.get("/me/memory/changes"), 400, "bad-request")


def test_changes_since_zero_rebuilds_the_head_from_the_empty_document(with_history):
    import jsonpatch

    alice = with_history
    patch = ok(alice.get("/me/memory/changes", query={"since": 0}))["patch"]
    assert jsonpatch.apply_patch({}, patch) == ok(alice.get("/me/memory"))["document"]


def test_prompt_renders_the_head_within_a_budget(with_history):
    reply = with_history.get("/me/memory/prompt", query={"budget_tokens": 200})
    body = ok(reply)
    assert body["version"] == 3 and etag(reply) == '"3"'
    assert "Ann" in body["text"]
    assert_problem(with_history.get("/me/memory/prompt", query={"budget_tokens": 0}), 400, "bad-request")


# -- writing ---------------------------------------------------------------------------------------


def test_merge_patch_then_json_patch_with_if_match(make_api, schema):
    alice = new_client(make_api(schema))
    edits = EDITS[schema]
    first = merge(alice, edits["first"])
    body = ok(first)
    assert body["status"] == "written" and body["version"] == 1 and etag(first) == '"1"'
    assert body["document"]["last_updated_by"] == "api"
    assert body["patch"]

    second = merge(alice, edits["second"], **{"If-Match": '"1"'})
    assert ok(second)["version"] == 2

    ops = [edits["op"]]
    third = json_patch(alice, ops, **{"If-Match": 'W/"2"'})
    assert ok(third)["version"] == 3

    same = merge(alice, {}, **{"If-Match": "3"})
    assert ok(same)["status"] == "unchanged" and ok(same)["version"] == 3
    assert head_version(alice) == 3


def test_a_stale_if_match_is_412_with_the_current_version(alice):
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    ok(merge(alice, {"personal_info": {"name": "Bea"}}))
    body = assert_problem(merge(alice, {"personal_info": {"name": "Cy"}}, **{"If-Match": '"1"'}), 412, "stale-version")
    assert body["current_version"] == 2
    body = assert_problem(json_patch(alice, [], **{"If-Match": '"5"'}), 412, "stale-version")
    assert body["current_version"] == 2
    assert ok(alice.get("/me/memory"))["document"]["personal_info"]["name"] == "Bea"


def test_without_if_match_an_edit_is_rebased_onto_the_head(alice):
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    # Another client writes in between; this client still holds version 1.
    ok(merge(alice, {"personal_info": {"language": "fr"}}))
    body = ok(json_patch(alice, [{"op": "replace", "path": "/personal_info/timezone", "value": "Europe/Paris"}]))
    assert body["version"] == 3
    info = body["document"]["personal_info"]
    assert (info["name"], info["language"], info["timezone"]) == ("Ann", "fr", "Europe/Paris")


def test_a_malformed_if_match_is_400(alice):
    assert_problem(merge(alice, {}, **{"If-Match": "seven"}), 400, "bad-request")


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json", 415),
        ("text/plain", 415),
        ("", 415),
        ("application/merge-patch+json; charset=utf-8", 200),
        ("Application/JSON-Patch+JSON", 200),
    ],
)
def test_patch_takes_json_patch_or_merge_patch_only(alice, content_type, status):
    body = "{}" if "merge" in content_type.lower() else "[]"
    reply = alice.patch("/me/memory", body=body, headers={"Content-Type": content_type} if content_type else {})
    if status == 415:
        assert_problem(reply, 415, "unsupported-media-type")
    else:
        ok(reply)


@pytest.mark.parametrize("body", ["{not json", "", "   ", "[1,", "NaN", '{"a": Infinity}'])
def test_patch_with_malformed_json_is_400_invalid_json(alice, body):
    assert_problem(alice.patch("/me/memory", body=body, headers=MERGE_PATCH), 400, "invalid-json")
    assert_problem(alice.patch("/me/memory", body=body, headers=JSON_PATCH), 400, "invalid-json")
    assert head_version(alice) == 0


@pytest.mark.parametrize(
    "ops",
    [
        {"op": "add", "path": "/x", "value": 1},
        [1],
        [{"op": "frobnicate", "path": "/x"}],
        [{"op": "add", "path": 5, "value": 1}],
        [{"op": "add", "path": "/personal_info/name"}],
        [{"op": "move", "path": "/a"}],
    ],
    ids=["not-an-array", "not-an-object", "unknown-op", "path-not-a-string", "no-value", "no-from"],
)
def test_a_malformed_json_patch_is_400_invalid_patch(alice, ops):
    assert_problem(json_patch(alice, ops), 400, "invalid-patch")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pointer=st.one_of(
        # not "" and no leading "/"; without NUL and lone surrogates, which no stored text may hold
        # (422 at the door, before the patch is read: test_u0000_in_a_body_string_is_422_and_writes_nothing)
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40
        ).filter(lambda p: not p.startswith("/")),
        st.from_regex(r"\A/[a-z_]{0,10}~([2-9a-z]|\Z)", fullmatch=True),  # a "~" escape that is not ~0 or ~1
    ),
    member=st.sampled_from(["path", "from"]),
)
def test_a_pointer_that_is_not_one_is_400_invalid_patch_and_writes_nothing(alice, pointer, member):
    # Given a memory at version 1
    if head_version(alice) == 0:
        ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    # When a patch names a JSON Pointer that RFC 6901 does not allow, as its path or its from
    op = {"op": "copy", "path": "/personal_info/nickname", "from": "/personal_info/name"}
    op[member] = pointer
    # Then it is a malformed patch (400, naming the operation), not one that fails to apply (409)
    problem = assert_problem(json_patch(alice, [op]), 400, "invalid-patch")
    assert problem["detail"].startswith(f"operation 0: {member}: JSON Pointer")
    assert head_version(alice) == 1


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/personal_info/name", "value": "Someone else"}],
        [{"op": "remove", "path": "/personal_info/nickname"}],
        [{"op": "replace", "path": "/nothing/here", "value": 1}],
    ],
    ids=["test-fails", "remove-missing", "replace-missing"],
)
def test_a_json_patch_that_does_not_apply_is_409(alice, ops):
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    assert_problem(json_patch(alice, ops), 409, "patch-does-not-apply")
    assert head_version(alice) == 1


def test_a_result_the_schema_refuses_is_422_and_writes_nothing(make_api, schema):
    alice = new_client(make_api(schema))
    ok(merge(alice, EDITS[schema]["first"]))
    assert_problem(merge(alice, EDITS[schema]["invalid"]), 422, "invalid-document")
    assert_problem(merge(alice, {"no_such_section": 1}), 422, "invalid-document")
    assert_problem(merge(alice, [1, 2]), 400, "invalid-patch")  # a merge patch must be an object
    assert_problem(json_patch(alice, [{"op": "replace", "path": "", "value": []}]), 422, "invalid-document")
    assert_problem(alice.put("/me/memory", json_body=EDITS[schema]["invalid"]), 422, "invalid-document")
    assert head_version(alice) == 1


def test_too_large_bodies_and_documents_are_413(make_api):
    alice = new_client(make_api("tutor", max_document_bytes="2048"))
    # The body itself is over twice the document limit.
    big = {"personal_info": {"name": "x" * 5000}}
    assert_problem(merge(alice, big), 413, "too-large")
    assert_problem(json_patch(alice, [{"op": "add", "path": "/personal_info/name", "value": "x" * 5000}]), 413)
    # The body fits, the resulting document does not.
    body = assert_problem(merge(alice, {"personal_info": {"name": "x" * 3000}}), 413, "too-large")
    assert "2,048" in body["detail"]
    assert_problem(alice.put("/me/memory", json_body={"personal_info": {"name": "x" * 3000}}), 413, "too-large")
    assert head_version(alice) == 0


def test_put_replaces_the_whole_document(make_api, schema):
    alice = new_client(make_api(schema))
    ok(merge(alice, EDITS[schema]["first"]))
    reply = alice.put("/me/memory", json_body=EDITS[schema]["second"], headers={"If-Match": '"1"'})
    body = ok(reply)
    assert body["status"] == "written" and body["version"] == 2 and etag(reply) == '"2"'
    section, value = next(iter(EDITS[schema]["second"].items()))
    if isinstance(value, dict):
        for k, v in value.items():
            assert body["document"][section][k] == v
        # The first edit's fields are gone: a PUT is not a merge.
        first_fields = EDITS[schema]["first"][section]
        assert all(body["document"][section][k] in ("", []) for k in first_fields if k not in value)
    else:
        assert body["document"][section] == value
    assert_problem(alice.put("/me/memory", json_body={}, headers={"If-Match": '"1"'}), 412, "stale-version")
    assert_problem(alice.put("/me/memory", body="{nope", headers={"Content-Type": "application/json"}), 400)
    assert_problem(alice.put("/me/memory", json_body=[1]), 422, "invalid-input")


def test_revert_writes_an_old_document_as_a_new_version(with_history):
    alice = with_history
    v1 = ok(alice.get("/me/memory", query={"version": 1}))["document"]
    reply = alice.post("/me/memory/revert", json_body={"version": 1}, headers={"If-Match": '"3"'})
    body = ok(reply)
    assert body["version"] == 4 and body["status"] == "written" and etag(reply) == '"4"'
    assert body["document"] == v1
    assert version_count(alice) == 4
    assert ok(alice.post("/me/memory/revert", json_body={"version": 1}))["status"] == "unchanged"
    assert_problem(alice.post("/me/memory/revert", json_body={"version": 99}), 404, "unknown-version")
    assert_problem(alice.post("/me/memory/revert", json_body={"version": -1}), 422, "invalid-input")
    assert_problem(alice.post("/me/memory/revert", json_body={"version": 1, "extra": 1}), 422, "invalid-input")
    assert_problem(alice.post("/me/memory/revert", json_body={"version": 2}, headers={"If-Match": '"1"'}), 412)


def test_delete_prunes_one_section_or_all_and_refuses_unknown_sections(make_api, schema):
    alice = new_client(make_api(schema))
    edits = EDITS[schema]
    ok(merge(alice, edits["first"]))
    ok(merge(alice, edits["second"]))
    section = edits["section"]

    one = ok(alice.delete("/me/memory", query={"section": section}, headers={"If-Match": '"2"'}))
    assert one["version"] == 3
    if isinstance(edits["empty"], dict):
        assert {k: one["document"][section][k] for k in edits["empty"]} == edits["empty"]
    else:
        assert one["document"][section] == edits["empty"]

    body = assert_problem(alice.delete("/me/memory", query={"section": "nope"}), 422, "invalid-document")
    assert "nope" in body["detail"]

    ok(merge(alice, edits["first"]))
    everything = ok(alice.delete("/me/memory"))
    assert everything["version"] == 5
    from user_memory.domain.memory.document import empty_document

    expected = {**empty_document(schema), "last_updated_by": "api"}
    assert everything["document"] == expected
    # History keeps what was there.
    assert ok(alice.get("/me/memory", query={"version": 2}))["document"] != everything["document"]
    assert_problem(alice.delete("/me/memory", query={"section": ""}), 400, "bad-request")


def test_idempotency_key_repeats_answer_the_first_write_and_write_nothing(alice):
    key = {"Idempotency-Key": "edit-1"}
    first = merge(alice, {"personal_info": {"name": "Ann"}}, **key)
    assert ok(first)["status"] == "written" and ok(first)["version"] == 1
    assert "Idempotent-Replayed" not in first.headers

    again = merge(alice, {"personal_info": {"name": "Ann"}}, **key)
    assert ok(again)["status"] == "idempotent" and ok(again)["version"] == 1
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert etag(again) == '"1"'

    ok(merge(alice, {"personal_info": {"name": "Bea"}}))  # another write moves the head on
    late = merge(alice, {"personal_info": {"name": "Ann"}}, **key, **{"If-Match": '"0"'})  # the same request, later
    assert ok(late)["status"] == "idempotent" and ok(late)["version"] == 1
    assert late.headers.get("Idempotent-Replayed") == "true"

    # Another request under that key (another body, another route) is refused: see test_api_review.py.
    assert_problem(alice.put("/me/memory", json_body={}, headers=key), 422, "invalid-input")

    assert head_version(alice) == 2 and version_count(alice) == 2
    assert ok(alice.get("/me/memory"))["document"]["personal_info"]["name"] == "Bea"
    assert_problem(merge(alice, {}, **{"Idempotency-Key": "x" * 201}), 400, "bad-request")


def test_a_deployment_that_requires_if_match_answers_428_without_it(make_api):
    alice = new_client(make_api("tutor", require_if_match="true"))
    for reply in (
        merge(alice, {"personal_info": {"name": "Ann"}}),
        json_patch(alice, []),
        alice.put("/me/memory", json_body={}),
        alice.post("/me/memory/revert", json_body={"version": 0}),
        alice.delete("/me/memory"),
        alice.delete("/me/memory", query={"section": "personal_info"}),
    ):
        assert_problem(reply, 428, "if-match-required")
    assert ok(merge(alice, {"personal_info": {"name": "Ann"}}, **{"If-Match": '"0"'}))["version"] == 1
    assert ok(alice.delete("/me/memory", headers={"If-Match": '"1"'}))["version"] == 2
    assert ok(alice.get("/me/memory"))["version"] == 2  # reads need nothing


BODY_ROUTES = [
    ("PUT", "/me/memory", {"personal_info": {"name": "Ann"}}),
    ("POST", "/me/memory/revert", {"version": 0}),
    ("POST", "/me/activity", {"items": [{"occurred_at": "2026-11-23T10:00:00Z", "kind": "k", "external_id": "x"}]}),
    ("PUT", "/me/kv/default/k", {"value": 1}),
]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "multipart/form-data", "application/x-www-form-urlencoded", "application/merge-patch+json"],
)
def test_post_and_put_take_application_json_only(alice, content_type):
    for method, path, body in BODY_ROUTES:
        reply = alice.request(method, path, body=json.dumps(body), headers={"Content-Type": content_type})
        assert_problem(reply, 415, "unsupported-media-type")
    for method, path, body in BODY_ROUTES:
        utf8 = {"Content-Type": "application/json; charset=utf-8"}
        reply = alice.request(method, path, body=json.dumps(body), headers=utf8)
        assert reply.status == 200, (method, path, reply.text)


def test_u0000_in_a_body_string_is_422_and_writes_nothing(alice):
    nul = "a\u0000b"
    assert_problem(merge(alice, {"personal_info": {"name": nul}}), 422, "invalid-input")
    add = [{"op": "add", "path": "/personal_info/name", "value": nul}]
    assert_problem(json_patch(alice, add), 422, "invalid-input")
    assert_problem(alice.put("/me/memory", json_body={"personal_info": {nul: "x"}}), 422, "invalid-input")
    assert_problem(alice.post("/me/activity", json_body={"items": [activity("n", kind=nul)]}), 422, "invalid-input")
    assert_problem(alice.post("/me/activity", json_body={"items": [activity("n", payload={"t": nul})]}), 422)
    assert_problem(alice.put("/me/kv/default/k", json_body={"value": nul}), 422, "invalid-input")
    assert_problem(ApiClient(alice.api, None).put("/me/memory", json_body={"a": nul}), 401, "unauthenticated")
    assert head_version(alice) == 0 and ok(alice.get("/me/export"))["activity"] == []
    # A backslash followed by "u0000" is ordinary text.
    text = "C:\\u0000"
    assert ok(merge(alice, {"personal_info": {"name": text}}))["document"]["personal_info"]["name"] == text


def test_version_cursors_beyond_postgresql_integers_are_400_not_500(with_history):
    alice = with_history
    assert_problem(alice.get("/me/memory/history", query={"before": 2**31}), 400, "bad-request")
    assert ok(alice.get("/me/memory/history", query={"before": 2**31 - 1}))["items"][0]["version"] == 3
    for query in ({"version": 2**40}, {"since": 2**40}):
        path = "/me/memory" if "version" in query else "/me/memory/changes"
        assert_problem(alice.get(path, query=query), 404, "unknown-version")
    assert_problem(alice.get("/me/memory/diff", query={"from": 2**40, "to": 1}), 404, "unknown-version")
    assert_problem(alice.post("/me/memory/revert", json_body={"version": 2**40}), 404, "unknown-version")


# -- account -----------------------------------------------------------------------------------------


def test_activity_is_recorded_once_per_source_and_external_id(alice):
    body = ok(alice.post("/me/activity", json_body={"items": [activity("a1"), activity("a2", source="app")]}))
    assert body == {"received": 2, "recorded": 2}
    again = ok(alice.post("/me/activity", json_body={"items": [activity("a1"), activity("a3")]}))
    assert again == {"received": 2, "recorded": 1}
    rows = ok(alice.get("/me/export"))["activity"]
    assert sorted((r["source"], r["external_id"]) for r in rows) == [("api", "a1"), ("api", "a3"), ("app", "a2")]


@pytest.mark.parametrize(
    "batch",
    [
        {"items": [activity("n1", occurred_at="2026-11-23T10:00:00")]},
        {"items": []},
        {"items": [{"kind": "lesson", "external_id": "x"}]},
        {"items": [activity("u1", user_id=str(uuid.uuid4()))]},
        {"items": [activity("", kind="lesson")]},
        [activity("list")],
    ],
    ids=["naive-time", "empty", "no-time", "user-id-in-body", "empty-external-id", "not-an-object"],
)
def test_invalid_activity_is_422_and_records_nothing(alice, batch):
    assert_problem(alice.post("/me/activity", json_body=batch), 422, "invalid-input")
    assert ok(alice.get("/me/export"))["activity"] == []


def test_export_holds_every_version_kv_entry_and_activity(with_history):
    alice = with_history
    ok(alice.put("/me/kv/default/k1", json_body={"value": {"a": 1}}))
    ok(alice.post("/me/activity", json_body={"items": [activity("e1")]}))
    body = ok(alice.get("/me/export"))
    assert body["user_id"] == alice.user_id
    assert [v["version"] for v in body["versions"]] == [1, 2, 3]
    assert body["versions"][-1]["document"] == ok(alice.get("/me/memory"))["document"]
    assert [(e["namespace"], e["key"], e["value"]) for e in body["kv"]] == [("default", "k1", {"a": 1})]
    assert [a["external_id"] for a in body["activity"]] == ["e1"]


def test_delete_me_erases_everything_and_reports_the_counts(with_history):
    alice = with_history
    ok(alice.put("/me/kv/default/k1", json_body={"value": 1}))
    ok(alice.put("/me/kv/notes/k2", json_body={"value": 2}))
    ok(alice.post("/me/activity", json_body={"items": [activity("e1"), activity("e2")]}))
    body = ok(alice.delete("/me"))
    assert body["user_id"] == alice.user_id
    assert body["removed"] == removed(heads=1, snapshots=3, activity=2, kv=2, items=3)

    assert ok(alice.get("/me/memory"))["version"] == 0
    assert ok(alice.get("/me/memory/history"))["items"] == []
    export = ok(alice.get("/me/export"))
    assert (export["versions"], export["kv"], export["activity"]) == ([], [], [])
    assert ok(alice.get("/me/kv/default"))["items"] == []
    assert_problem(alice.get("/me/memory", query={"version": 1}), 404, "unknown-version")
    again = ok(alice.delete("/me"))
    assert not any(again["removed"].values())


# -- key-value memory ---------------------------------------------------------------------------------


def test_kv_put_get_list_delete(alice):
    put = ok(alice.put("/me/kv/default/topic", json_body={"value": {"current": "fractions"}}))
    assert (put["namespace"], put["key"], put["value"], put["expires_at"]) == (
        "default",
        "topic",
        {"current": "fractions"},
        None,
    )
    assert ok(alice.get("/me/kv/default/topic"))["value"] == {"current": "fractions"}
    replaced = ok(alice.put("/me/kv/default/topic", json_body={"value": [1, "two", None]}))
    assert replaced["value"] == [1, "two", None] and replaced["created_at"] == put["created_at"]

    for key in ("b", "a", "c"):
        ok(alice.put(f"/me/kv/chat.session-1/{key}", json_body={"value": key}))
    page = ok(alice.get("/me/kv/chat.session-1", query={"limit": 2}))
    assert [i["key"] for i in page["items"]] == ["a", "b"] and page["next_after"] == "b"
    rest = ok(alice.get("/me/kv/chat.session-1", query={"limit": 2, "after": page["next_after"]}))
    assert [i["key"] for i in rest["items"]] == ["c"] and rest["next_after"] is None
    assert ok(alice.get("/me/kv/empty"))["items"] == []

    deleted = ok(alice.delete("/me/kv/default/topic"))
    assert deleted == {"namespace": "default", "key": "topic", "deleted": True}
    assert_problem(alice.get("/me/kv/default/topic"), 404, "not-found")
    assert_problem(alice.delete("/me/kv/default/topic"), 404, "not-found")


def test_kv_ttl_sets_the_expiry_and_limits_are_checked(alice):
    body = ok(alice.put("/me/kv/default/soon", json_body={"value": 1, "ttl_seconds": 60}))
    expires = datetime.fromisoformat(body["expires_at"])
    assert expires - datetime.fromisoformat(body["updated_at"]) == timedelta(seconds=60)
    assert ok(alice.put("/me/kv/default/soon", json_body={"value": 1}))["expires_at"] is None
    assert_problem(alice.put("/me/kv/default/k", json_body={"value": 1, "ttl_seconds": 0}), 422, "invalid-input")
    assert_problem(alice.put("/me/kv/default/k", json_body={"value": 1, "ttl_seconds": 10**9}), 422, "invalid-input")
    assert_problem(alice.put("/me/kv/default/k", json_body={"ttl_seconds": 5}), 422, "invalid-input")
    assert_problem(alice.put("/me/kv/default/k", json_body={"value": 1, "extra": 1}), 422, "invalid-input")


def test_the_documented_maximum_ttl_is_accepted(alice):
    body = ok(alice.put("/me/kv/default/year", json_body={"value": 1, "ttl_seconds": 31_536_000}))
    assert datetime.fromisoformat(body["expires_at"]) - datetime.fromisoformat(body["updated_at"]) == timedelta(
        days=365
    )


def test_a_kv_value_over_10_kb_is_413(alice):
    body = assert_problem(alice.put("/me/kv/default/big", json_body={"value": "x" * 11_000}), 413, "too-large")
    assert "10,240" in body["detail"]
    assert_problem(alice.get("/me/kv/default/big"), 404)
    ok(alice.put("/me/kv/default/big", json_body={"value": "x" * 10_000}))


@pytest.mark.parametrize("namespace", ["Upper", "-dash", "a" * 65, "sp%20ace", "%C3%A9"])
def test_a_bad_namespace_is_422_invalid_input(alice, namespace):
    # Pinned: the service's InvalidKvEntry is a 422 (the path parses; the value breaks a documented rule).
    assert_problem(alice.put(f"/me/kv/{namespace}/k", json_body={"value": 1}), 422, "invalid-input")
    assert_problem(alice.get(f"/me/kv/{namespace}/k"), 422, "invalid-input")
    assert_problem(alice.get(f"/me/kv/{namespace}"), 422, "invalid-input")


@pytest.mark.parametrize(
    "key",
    ["with spaces", "a/b/c", "notes/2026 11 23", "été", "学习 🧮", "100%", "a+b", "?#&=", "x" * 256],
)
def test_kv_keys_are_percent_encoded_in_the_path(alice, key):
    from urllib.parse import quote

    encoded = quote(key, safe="")
    put = ok(alice.put(f"/me/kv/default/{encoded}", json_body={"value": key}))
    assert put["key"] == key
    assert ok(alice.get(f"/me/kv/default/{encoded}"))["value"] == key
    assert [i["key"] for i in ok(alice.get("/me/kv/default"))["items"]] == [key]
    assert ok(alice.delete(f"/me/kv/default/{encoded}"))["key"] == key
    assert ok(alice.get("/me/kv/default"))["items"] == []


def test_a_kv_key_over_256_characters_is_422(alice):
    assert_problem(alice.put(f"/me/kv/default/{'x' * 257}", json_body={"value": 1}), 422, "invalid-input")


# -- who may call what ----------------------------------------------------------------------------------

# Every route under /me: (method, path after /me, query, body, headers).
ME_ROUTES: list[tuple[str, str, dict[str, Any] | None, Any, dict[str, str]]] = [
    ("GET", "/memory", None, None, {}),
    ("GET", "/memory", {"version": 1}, None, {}),
    ("GET", "/memory/history", None, None, {}),
    ("GET", "/memory/diff", {"from": 0, "to": 1}, None, {}),
    ("GET", "/memory/changes", {"since": 0}, None, {}),
    ("GET", "/memory/prompt", None, None, {}),
    ("PATCH", "/memory", None, [{"op": "replace", "path": "/personal_info/name", "value": "Eve"}], JSON_PATCH),
    ("PATCH", "/memory", None, {"personal_info": {"name": "Eve"}}, MERGE_PATCH),
    ("PUT", "/memory", None, {"personal_info": {"name": "Eve"}}, {}),
    ("POST", "/memory/revert", None, {"version": 0}, {}),
    ("DELETE", "/memory", {"section": "personal_info"}, None, {}),
    ("DELETE", "/memory", None, None, {}),
    ("GET", "/export", None, None, {}),
    ("POST", "/activity", None, {"items": [activity("planted")]}, {}),
    ("GET", "/kv/default", None, None, {}),
    ("GET", "/kv/default/k1", None, None, {}),
    ("PUT", "/kv/default/k1", None, {"value": "planted"}, {}),
    ("DELETE", "/kv/default/k1", None, None, {}),
    ("DELETE", "", None, None, {}),
]
ADMIN_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/memory", None),
    ("GET", "/memory", {"version": 1}),
    ("GET", "/memory/history", {"limit": 1}),
    ("GET", "/memory/diff", {"from": 0, "to": 1}),
    ("GET", "/memory/changes", {"since": 1}),
    ("GET", "/export", None),
    ("DELETE", "", None),
]


def send(client: ApiClient, method: str, path: str, query: Any, body: Any, headers: dict[str, str], **kw: Any) -> Reply:
    if body is None:
        return client.request(method, path, query=query, headers=headers, **kw)
    if headers.get("Content-Type", "").endswith("patch+json"):
        return client.request(method, path, query=query, body=json.dumps(body), headers=headers, **kw)
    return client.request(method, path, query=query, json_body=body, headers=headers, **kw)


def seed(client: ApiClient) -> dict[str, Any]:
    """Two versions, a kv entry and an activity row; returns the user's export."""
    ok(merge(client, {"personal_info": {"name": "Bob"}}))
    ok(merge(client, {"personal_info": {"language": "de"}}))
    ok(client.put("/me/kv/default/k1", json_body={"value": "bob's"}))
    ok(client.post("/me/activity", json_body={"items": [activity("bob-1")]}))
    return ok(client.get("/me/export"))


ROUTE_IDS = [f"{m} /me{p}" + (f"?{q}" if q else "") for m, p, q, _, _ in ME_ROUTES]


@pytest.mark.parametrize(("method", "path", "query", "body", "headers"), ME_ROUTES, ids=ROUTE_IDS)
def test_every_me_route_needs_claims_with_a_uuid_sub(api, method, path, query, body, headers):
    anonymous = ApiClient(api, None)
    assert_problem(send(anonymous, method, "/me" + path, query, body, headers), 401, "unauthenticated")
    body_ = assert_problem(
        send(anonymous, method, "/me" + path, query, body, headers, claims={"sub": "alice@example.com"}),
        401,
        "unauthenticated",
    )
    assert "UUID" in body_["detail"]
    assert_problem(send(anonymous, method, "/me" + path, query, body, headers, claims={"scope": OPERATOR}), 401)


@pytest.mark.parametrize(("method", "path", "query", "body", "headers"), ME_ROUTES, ids=ROUTE_IDS)
def test_a_path_naming_another_user_is_403_and_leaves_their_data_alone(api, method, path, query, body, headers):
    alice, bob = new_client(api), new_client(api)
    before = seed(bob)
    reply = send(alice, method, f"/users/{bob.user_id}{path}", query, body, headers)
    assert_problem(reply, 403, "forbidden")
    assert_problem(send(alice, method, f"/users/{bob.user_id.upper()}{path}", query, body, headers), 403)
    assert_problem(send(ApiClient(api, None), method, f"/users/{bob.user_id}{path}", query, body, headers), 401)
    assert ok(bob.get("/me/export")) == before


@pytest.mark.parametrize(("method", "path", "query", "body", "headers"), ME_ROUTES, ids=ROUTE_IDS)
def test_a_path_naming_the_caller_is_the_same_as_me(api, method, path, query, body, headers):
    bob = new_client(api)
    seed(bob)
    via_users = send(bob, method, f"/users/{bob.user_id}{path}", query, body, headers)
    assert via_users.status < 300, via_users.text


@pytest.mark.parametrize(("method", "path", "query", "body", "headers"), ME_ROUTES, ids=ROUTE_IDS)
def test_requests_on_me_only_ever_touch_the_callers_own_data(api, method, path, query, body, headers):
    alice, bob = new_client(api), new_client(api)
    seed(alice)
    before = seed(bob)
    reply = send(alice, method, "/me" + path, query, body, headers)
    assert reply.status < 300, reply.text
    assert bob.user_id not in reply.text
    assert ok(bob.get("/me/export")) == before


def test_a_users_path_with_nothing_after_or_an_unknown_rest(api):
    alice, bob = new_client(api), new_client(api)
    assert_problem(alice.get(f"/users/{bob.user_id}/nothing"), 403, "forbidden")
    assert_problem(alice.get(f"/users/{alice.user_id}/nothing"), 404, "not-found")
    # /users/{own id} is /me, which only DELETE takes
    reply = alice.get(f"/users/{alice.user_id}")
    assert_problem(reply, 405, "method-not-allowed")
    assert reply.headers["Allow"] == "DELETE"


@pytest.mark.parametrize(("method", "path", "query"), ADMIN_ROUTES, ids=[f"{m} {p} {q}" for m, p, q in ADMIN_ROUTES])
def test_admin_routes_need_the_operator_scope(api, method, path, query):
    alice, bob = new_client(api), new_client(api)
    before = seed(bob)
    for claims in (
        {"sub": alice.user_id},
        {"sub": alice.user_id, "scope": "openid profile"},
        {"sub": alice.user_id, "scope": "user-memory/operator-ish"},
        {"sub": alice.user_id, "cognito:groups": "[admins operators]"},
    ):
        reply = alice.request(method, f"/admin/users/{bob.user_id}{path}", query=query, claims=claims)
        assert_problem(reply, 403, "forbidden")
    assert_problem(ApiClient(api, None).request(method, f"/admin/users/{bob.user_id}{path}", query=query), 401)
    assert ok(bob.get("/me/export")) == before


@pytest.mark.parametrize(
    "grant",
    [
        {"scope": f"openid {OPERATOR}"},
        {"scp": OPERATOR},
        {"cognito:groups": f"[admins {OPERATOR}]"},
        {"cognito:groups": [OPERATOR]},
        {"groups": f'["{OPERATOR}"]'},
    ],
    ids=["scope", "scp", "cognito-groups-as-apigw-passes-them", "cognito-groups-list", "groups-json"],
)
def test_operators_read_and_erase_another_user_and_are_logged(api, service_log, grant):
    operator_id, bob = str(uuid.uuid4()), new_client(api)
    before = seed(bob)
    op = ApiClient(api, operator_id)
    claims = {"sub": operator_id, **grant}

    def call(method: str, path: str, query: Any = None) -> Reply:
        return op.request(method, f"/admin/users/{bob.user_id}{path}", query=query, claims=claims)

    memory = call("GET", "/memory")
    assert ok(memory)["version"] == 2 and ok(memory)["user_id"] == bob.user_id and etag(memory) == '"2"'
    assert ok(memory)["document"]["personal_info"]["name"] == "Bob"
    assert ok(call("GET", "/memory", {"version": 1}))["version"] == 1
    assert [i["version"] for i in ok(call("GET", "/memory/history", {"limit": 1}))["items"]] == [2]
    assert ok(call("GET", "/memory/diff", {"from": 1, "to": 2}))["patch"] == [
        {"op": "replace", "path": "/personal_info/language", "value": "de"}
    ]
    assert ok(call("GET", "/memory/changes", {"since": 1}))["version"] == 2
    assert_problem(call("GET", "/memory/changes", {"since": 3}), 404, "unknown-version")
    assert ok(call("GET", "/export")) == before
    assert_problem(call("GET", "/memory", {"version": 1, "as_of": "2026-01-01T00:00:00Z"}), 400)

    # The operator's own data is untouched by all that; it has none.
    assert ok(op.get("/me/memory", claims=claims))["version"] == 0

    erased = ok(call("DELETE", ""))
    assert erased["user_id"] == bob.user_id
    assert erased["removed"] == removed(heads=1, snapshots=2, activity=1, kv=1, items=2)
    assert ok(bob.get("/me/memory"))["version"] == 0

    actions = [r for r in service_log.records if r.getMessage() == "operator action"]
    assert [r.action for r in actions] == [  # type: ignore[attr-defined]
        "read memory",
        "read memory",
        "read history",
        "read diff",
        "read changes",
        "read changes",
        "export",
        "read memory",
        "erase",
    ]
    assert {r.operator for r in actions} == {operator_id}  # type: ignore[attr-defined]
    assert {r.user_id for r in actions} == {bob.user_id}  # type: ignore[attr-defined]


def test_admin_routes_refuse_a_user_id_that_is_not_a_uuid(operator):
    assert_problem(operator.get("/admin/users/not-a-uuid/memory"), 422, "invalid-input")


def test_unknown_paths_are_404_problems(alice):
    for method, path in [("GET", "/nothing"), ("POST", "/me/memory/nothing"), ("GET", "/me/nothing")]:
        body = assert_problem(alice.request(method, path), 404, "not-found")
        assert body["detail"] == "no such route"
    # The root is no longer one of them: it sends a browser to the console
    root = alice.request("GET", "/")
    assert root.status == 302 and root.headers["Location"] == "console"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/me/memory", "DELETE, GET, PATCH, PUT"),
        ("GET", "/me", "DELETE"),
        ("PUT", "/me/memory/history", "GET"),
        ("GET", "/me/memory/revert", "POST"),
        ("POST", "/me/kv/default/k1", "DELETE, GET, PUT"),
        ("GET", "/me/activity", "POST"),
        ("GET", "/me/todos", "POST"),  # the companion's routes are known paths on every schema
        ("PUT", "/me/memory/search", "GET"),
        ("GET", "/tasks/trigger-memory-generation", "POST"),
        ("DELETE", "/openapi.json", "GET"),
        ("POST", "/swagger", "GET"),
    ],
)
def test_a_known_path_with_a_method_it_does_not_take_is_405_with_allow(alice, method, path, allowed):
    # Given a path the API serves, When it is asked with a method none of its routes takes
    reply = alice.request(method, path)
    # Then the answer is a 405 problem naming the method, and Allow lists the methods the path takes
    body = assert_problem(reply, 405, "method-not-allowed")
    assert reply.headers["Allow"] == allowed
    assert body["detail"] == f"{method} is not allowed here; this resource takes {allowed}"


def test_a_merge_patch_that_is_not_an_object_is_400_invalid_patch_and_writes_nothing(alice):
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    for body in ([{"personal_info": {"name": "Eve"}}], "text", 7, None):
        problem = assert_problem(merge(alice, body), 400, "invalid-patch")
        assert problem["detail"] == "a merge patch for a memory document must be a JSON object"
    assert version_count(alice) == 1


def test_the_openapi_document_is_public(api):
    reply = ApiClient(api, None).get("/openapi.json")
    assert reply.status == 200 and reply.json["openapi"].startswith("3.")


def test_history_shows_what_produced_a_daily_summary_version(alice, store):
    # Given a version the daily summary wrote with its provenance (an edit's reason, a refused edit)
    provenance = {
        "mode": "edit",
        "edits": [{"op": "add", "path": "/personal_info/language", "reason": "said they study in French"}],
        "refused": [{"op": "remove", "path": "/areas_to_improve/0", "reason": "resolved", "why": "not asked"}],
    }
    store.append(
        alice.user_id,
        {"personal_info": {"language": "fr"}},
        expected_version=0,
        source="daily summary",
        provenance=provenance,
    )
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    # When the user reads the history
    items = ok(alice.get("/me/memory/history"))["items"]
    # Then the summary's version carries its provenance, and the API's own edit none
    assert [i["version"] for i in items] == [2, 1]
    assert items[1]["provenance"] == provenance
    assert items[0]["provenance"] is None


# -- storage: an end user's versions are patches, checkpoints at the interval ----------------------


def test_an_end_users_edits_are_stored_as_patches_with_checkpoints_at_the_interval(make_api):
    # Given a deployment that checkpoints every 3 versions
    alice = new_client(make_api("tutor", checkpoint_interval="3"))
    # When the end user edits its memory 7 times through the API, merge and JSON patches
    for n in range(4):
        ok(merge(alice, {"personal_info": {"name": f"Ann {n}"}}))
    for goal in ("algebra", "reading", "fractions"):
        ok(json_patch(alice, [{"op": "add", "path": "/personal_info/learning_goals/-", "value": goal}]))
    # Then only versions 3 and 6 carry the whole document, every other one only its patch
    items = ok(alice.get("/me/memory/history", query={"limit": 10}))["items"]
    assert {i["version"]: i["checkpoint"] for i in items} == {v: v in (3, 6) for v in range(1, 8)}
    # And every version still reads back as it was written
    assert ok(alice.get("/me/memory", query={"version": 5}))["document"]["personal_info"]["learning_goals"] == [
        "algebra"
    ]
    assert ok(alice.get("/me/memory"))["document"]["personal_info"]["learning_goals"] == [
        "algebra",
        "reading",
        "fractions",
    ]

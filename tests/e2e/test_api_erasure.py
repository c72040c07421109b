"""Erasure with a receipt through the API's handler: DELETE /me and the operators' erase answer the
receipt stored with the deletes; operators list receipts (GET /admin/erasures), by user too."""

from __future__ import annotations

import json

import pytest
from user_memory.http.app import MemoryApi

from tests.api_client import ApiClient
from tests.e2e.helpers import OPERATOR, assert_problem, merge, new_client, ok, removed

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:No application metrics to publish")]


@pytest.fixture
def operator(api: MemoryApi) -> ApiClient:
    return new_client(api, scopes=f"openid {OPERATOR}")


def test_an_erasure_answers_a_receipt_operators_find_by_user(api, alice, operator):
    # Given a user with two versions and an entry
    ok(merge(alice, {"personal_info": {"name": "Ann"}}))
    ok(merge(alice, {"personal_info": {"language": "fr"}}))
    ok(alice.put("/me/kv/default/k", json_body={"value": "private words"}))
    # When the user erases itself
    body = ok(alice.delete("/me"))
    # Then the answer carries the receipt: counts per relation, the requester, the hashed user
    receipt = body["receipt"]
    assert receipt["deleted"] == body["removed"] == removed(heads=1, snapshots=2, activity=0, kv=1, items=2)
    assert receipt["requested_by"] == "self"
    assert alice.user_id not in json.dumps(receipt) and len(receipt["user_hash"]) == 64
    # And an operator finds exactly that receipt by the user's id, with no content in it
    listed = ok(operator.get("/admin/erasures", query={"user_id": alice.user_id}))
    assert listed == {"receipts": [receipt], "next": None}
    assert "private words" not in json.dumps(listed) and "Ann" not in json.dumps(listed)


def test_an_operators_erasure_names_the_operator_and_pages_are_newest_first(api, operator):
    # Given three users erased by an operator
    users = [new_client(api) for _ in range(3)]
    receipts = []
    for user in users:
        ok(merge(user, {"personal_info": {"name": "X"}}))
        receipts.append(ok(operator.delete(f"/admin/users/{user.user_id}"))["receipt"])
    assert {r["requested_by"] for r in receipts} == {f"operator:{operator.user_id}"}
    # When the operator pages through every receipt, two at a time
    seen, cursor = [], None
    while True:
        page = ok(operator.get("/admin/erasures", query={"limit": 2, **({"after": cursor} if cursor else {})}))
        seen += [r["id"] for r in page["receipts"]]
        cursor = page["next"]
        if cursor is None:
            break
    # Then the three are there, newest first, each once
    mine = [r["id"] for r in reversed(receipts)]
    assert [i for i in seen if i in mine] == mine and len(seen) == len(set(seen))


def test_receipts_are_for_operators_only_and_a_bad_cursor_is_a_problem(alice, operator):
    assert_problem(alice.get("/admin/erasures"), 403, "forbidden")
    assert_problem(operator.get("/admin/erasures", query={"after": "yesterday"}), 422, "invalid-input")
    assert_problem(operator.get("/admin/erasures", query={"user_id": "not-a-uuid"}), 422, "invalid-input")

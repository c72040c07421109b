"""The API's routes grouped by resource: one Router per resource module, each included under its
prefix (Powertools' include_router), the operators' views of one user under one prefix."""

from __future__ import annotations

from typing import Any

from user_memory.http.app import ROUTERS


def _paths(router: Any, prefix: str | None) -> set[str]:
    """The router's paths as included: a rule of "/" is the prefix itself (Powertools' include_router)."""
    return {prefix if prefix and rule == "/" else (prefix or "") + rule for rule, *_ in router._routes}


def test_the_operators_views_of_a_user_are_one_router_under_one_prefix():
    # Given the routers the API includes, with their prefixes
    # When the routes under /admin/users/<user_id> are traced to the router that declares them
    owners = {
        (router, prefix)
        for router, prefix in ROUTERS
        for path in _paths(router, prefix)
        if path.startswith("/admin/users/")
    }
    # Then one router declares them all, included under that prefix
    assert [prefix for _, prefix in owners] == ["/admin/users/<user_id>"]


def test_every_resource_router_is_included_under_its_prefix_and_declares_no_other():
    # Given the routers the API includes
    for router, prefix in ROUTERS:
        rules = [rule for rule, *_ in router._routes]
        if prefix is None:  # the console's pages and the OpenAPI document: the site's own paths
            assert not any(rule.startswith(("/me", "/admin", "/tasks")) for rule in rules), rules
            continue
        # Then its routes are relative to the prefix: none spells the prefix out again
        assert rules and not any(rule.startswith(prefix + "/") or rule == prefix for rule in rules), (prefix, rules)
    # And no two routers share a module (one Router per resource)
    routers = [router for router, _ in ROUTERS]
    assert len({id(r) for r in routers}) == len(routers)

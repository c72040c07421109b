"""Reading CloudFormation/SAM templates in tests: short-form tags, references, cfn-lint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml  # cfn-lint depends on PyYAML

ROOT = Path(__file__).resolve().parents[2]


class _CfnLoader(yaml.SafeLoader):
    """Keeps short-form intrinsics as one-key mappings: `!Ref X` -> {"Ref": "X"}."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    return {suffix: loader.construct_mapping(node, deep=True)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


def load(relative: str) -> dict[str, Any]:
    return yaml.load((ROOT / relative).read_text(), Loader=_CfnLoader)  # a SafeLoader subclass


def cfn_lint(relative: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    cfn_lint_bin = Path(sys.executable).parent / "cfn-lint"
    return subprocess.run([str(cfn_lint_bin), str(ROOT / relative)], capture_output=True, text=True, env=env)


_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")


def references(node: Any) -> Iterator[str]:
    """Every logical name a node refers to: Ref, GetAtt and the ${Name} / ${Name.Attr} of Sub."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("Ref", "Fn::Ref") and isinstance(value, str):
                yield value
            elif key in ("GetAtt", "Fn::GetAtt"):
                yield (value if isinstance(value, str) else value[0]).split(".")[0]
            elif key in ("Sub", "Fn::Sub"):
                text, variables = (value, {}) if isinstance(value, str) else (value[0], value[1])
                for name in _SUB_VARIABLE.findall(text):
                    if name.split(".")[0] not in variables:
                        yield name.split(".")[0]
                yield from references(variables)
                continue
            yield from references(value)
    elif isinstance(node, list):
        for item in node:
            yield from references(item)


def resources_of_type(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template["Resources"].items() if res["Type"] == type_}


def refused_by_rules(template: dict[str, Any], overrides: dict[str, str]) -> list[str]:
    """The names of the template's rules whose assertions fail for these parameter values (the
    parameters' defaults for the others), as CloudFormation checks them before any change."""
    values = {name: str(p.get("Default", "")) for name, p in template["Parameters"].items()} | overrides
    refused = []
    for name, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not evaluate(template, rule["RuleCondition"], values):
            continue
        if not all(evaluate(template, a["Assert"], values) for a in rule["Assertions"]):
            refused.append(name)
    return refused


_NO_VALUE = object()


def evaluate(template: dict[str, Any], node: Any, parameters: dict[str, str]) -> Any:
    """`node` as CloudFormation resolves it for these parameter values (the others at their
    defaults): Ref to a parameter, If, Condition, And, Or, Not, Equals, and the rule functions
    Contains and EachMemberEquals; AWS::NoValue left out of lists. Refs to resources stay as they are."""
    values = {name: p.get("Default", "") for name, p in template["Parameters"].items()} | parameters

    def condition(name: str) -> bool:
        return bool(walk(template["Conditions"][name]))

    def walk(n: Any) -> Any:
        if isinstance(n, list):
            return [v for v in (walk(i) for i in n) if v is not _NO_VALUE]
        if not isinstance(n, dict) or len(n) != 1:
            return {k: walk(v) for k, v in n.items()} if isinstance(n, dict) else n
        ((key, arg),) = n.items()
        key = key.removeprefix("Fn::")
        if key == "Ref":
            return _NO_VALUE if arg == "AWS::NoValue" else values.get(arg, n)
        if key == "Condition":
            return condition(arg)
        if key == "If":
            return walk(arg[1] if condition(arg[0]) else arg[2])
        if key == "Equals":
            return walk(arg[0]) == walk(arg[1])
        if key == "Not":
            return not walk(arg[0])
        if key == "And":
            return all(walk(a) for a in arg)
        if key == "Or":
            return any(walk(a) for a in arg)
        if key == "Contains":  # rule functions (a Rules section's assertions)
            return walk(arg[1]) in walk(arg[0])
        if key == "EachMemberEquals":
            return all(member == walk(arg[1]) for member in walk(arg[0]))
        return {key: walk(arg)}

    return walk(node)

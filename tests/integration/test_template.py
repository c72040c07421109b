"""template.yaml: cfn-lint offline, plus what cfn-lint does not check."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # cfn-lint depends on PyYAML

ROOT = Path(__file__).resolve().parents[2]


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    return {suffix: loader.construct_mapping(node, deep=True)}


_CfnLoader.add_multi_constructor("!", _tag)


@pytest.fixture(scope="module")
def template() -> dict:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)


def test_cfn_lint_passes_offline():
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run([str(cfn_lint), str(ROOT / "template.yaml")], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_visibility_timeout_is_at_least_six_times_the_worker_timeout(template):
    r = template["Resources"]
    assert r["WorkerQueue"]["Properties"]["VisibilityTimeout"] >= 6 * r["WorkerFunction"]["Properties"]["Timeout"]


def test_worker_queue_has_a_dlq_after_at_least_three_receives(template):
    q = template["Resources"]["WorkerQueue"]["Properties"]["RedrivePolicy"]
    assert q["deadLetterTargetArn"] == {"GetAtt": "WorkerDeadLetterQueue.Arn"}
    assert template["Parameters"]["MaxReceiveCount"]["MinValue"] >= 3


def test_worker_reports_batch_item_failures_with_bounded_concurrency(template):
    props = template["Resources"]["WorkerFunction"]["Properties"]["Events"]["Queue"]["Properties"]
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "WorkerMaximumConcurrency"}


def test_openai_timeout_stays_below_the_worker_timeout(template):
    worker_timeout = template["Resources"]["WorkerFunction"]["Properties"]["Timeout"]
    assert template["Parameters"]["OpenAITimeoutSeconds"]["MaxValue"] < worker_timeout


def test_functions_are_arm64_python312_with_the_core_layer(template):
    g = template["Globals"]["Function"]
    assert g["Runtime"] == "python3.12" and g["Architectures"] == ["arm64"]
    assert template["Resources"]["CoreLayer"]["Properties"]["ContentUri"] == "layers/core"
    assert (ROOT / "layers/core/requirements.txt").exists()


def _functions(template):
    for name, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            yield name, res["Properties"]


def test_every_handler_resolves_to_a_function_in_its_code_uri(template):
    for name, props in _functions(template):
        module, func = props["Handler"].rsplit(".", 1)
        source = ROOT / props["CodeUri"] / f"{module}.py"
        assert source.exists(), f"{name}: {source} missing"
        tree = ast.parse(source.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), f"{name}: no {func}()"


def test_every_env_var_the_handlers_need_is_set(template):
    from user_memory.config import Settings

    globals_env = set(template["Globals"]["Function"]["Environment"]["Variables"])
    for name, props in _functions(template):
        env = globals_env | set(props.get("Environment", {}).get("Variables", {}))
        known = {f.upper() for f in Settings.model_fields} | {
            "POWERTOOLS_SERVICE_NAME",
            "POWERTOOLS_METRICS_NAMESPACE",
            "POWERTOOLS_LOG_LEVEL",
        }
        assert env <= known, f"{name} sets variables nothing reads: {env - known}"
        assert "DATABASE_SECRET_NAME" in env
        source = (ROOT / props["CodeUri"] / "app.py").read_text()
        if "QUEUE_URL" in source or "queue_url" in source:
            assert "QUEUE_URL" in env, name
    # nothing reads os.environ directly outside config
    for path in (ROOT / "layers/core/user_memory").rglob("*.py"):
        if path.name not in ("config.py", "demo.py", "embedded.py", "cli.py"):
            assert not re.search(r"os\.environ", path.read_text()), path

"""docs/deploy.md stays true to the templates and to bench/cost_model.py."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from tests.infrastructure.cfn import ROOT, load, resources_of_type

pytestmark = pytest.mark.infrastructure

GUIDE = ROOT / "docs/deploy.md"
TEMPLATES = ("template.yaml", "infra/database.yaml", "infra/cognito.yaml")


@pytest.fixture(scope="module")
def guide() -> str:
    return GUIDE.read_text()


def _section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of any level."""
    start = text.index(heading + "\n") + len(heading) + 1
    following = re.search(r"^#{1,6} ", text[start:], flags=re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def _table(section: str) -> list[list[str]]:
    """The rows of the first Markdown table in a section (header and separator left out)."""
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _between(text: str, marker: str) -> str:
    return text.split(f"<!-- {marker}:start -->\n", 1)[1].split(f"<!-- {marker}:end -->", 1)[0].strip()


def _shown(default: object) -> str:
    """A default as the guide writes it."""
    if default is None:
        return "required"
    return '`""`' if default == "" else f"`{default}`"


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_guide_lists_every_parameter_of_each_template_with_its_default(guide, template):
    # Given the template's parameters and the guide's table for that template
    parameters = load(template)["Parameters"]
    rows = _table(_section(guide, f"### Parameters: `{template}`"))
    listed = {row[0].strip("`"): row[1] for row in rows}
    # Then the table names exactly those parameters, once each
    assert len(rows) == len(listed), "a parameter is listed twice"
    assert set(listed) == set(parameters), {
        "missing": set(parameters) - set(listed),
        "stale": set(listed) - set(parameters),
    }
    # And with the defaults the template declares, and a meaning
    for name, definition in parameters.items():
        assert listed[name] == _shown(definition.get("Default")), name
    assert all(len(row) == 3 and len(row[2]) > 10 for row in rows)


def test_the_outputs_the_guide_passes_exist_and_are_all_passed_by_its_deploy_command(guide):
    # Given the guide's table of outputs passed between stacks, and its application deploy command
    rows = _table(_section(guide, "## Outputs passed between stacks"))
    stacks = {"database": load("infra/database.yaml"), "identity": load("infra/cognito.yaml")}
    app = load("template.yaml")
    command = _section(guide, "## 4. The application stack").split("```", 2)[1]
    for stack, output, parameter in rows:
        output, parameter = output.strip("`"), parameter.strip("`")
        # Then each output exists in its stack and is an application parameter
        assert output in stacks[stack]["Outputs"], (stack, output)
        assert parameter in app["Parameters"], parameter
        # And the deploy command passes it, from that stack
        assert re.search(rf'{parameter}="\$\(out "\$\w+" {output}\)"', command), parameter
    # And every database-stack output named after an application parameter is in the table
    shared = set(stacks["database"]["Outputs"]) & set(app["Parameters"])
    assert shared <= {output.strip("`") for stack, output, _ in rows if stack == "database"}


def test_the_capabilities_the_guide_names_are_the_ones_the_templates_need(guide):
    # Given the IAM resources of each stack
    database_roles = resources_of_type(load("infra/database.yaml"), "AWS::IAM::Role")
    cognito = load("infra/cognito.yaml")
    # Then the database stack creates unnamed roles (CAPABILITY_IAM, not NAMED_IAM), the identity stack none
    assert database_roles and all("RoleName" not in r["Properties"] for r in database_roles.values())
    assert not [r for r in cognito["Resources"].values() if r["Type"].startswith("AWS::IAM::")]
    # And the guide deploys each with exactly that
    database_step = _section(guide, "## 1. The database stack")
    assert "--capabilities CAPABILITY_IAM" in database_step
    assert "--capabilities" not in _section(guide, "### Cognito (`infra/cognito.yaml`)").split("```", 2)[1]
    assert "--capabilities CAPABILITY_IAM" in _section(guide, "## 4. The application stack")


def _cost_model():
    spec = importlib.util.spec_from_file_location("cost_model", ROOT / "bench/cost_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_cost_tables_are_the_cost_models_output(guide):
    # Given the cost model's tables
    model = _cost_model()
    # Then the guide shows exactly them
    assert _between(guide, "cost-table") == model.table()
    assert _between(guide, "cost-levers") == model.levers()
    # And it states the region and the date of the prices it uses
    assert "us-east-1" in model.PRICES_AS_OF and "2025" in model.PRICES_AS_OF
    assert "AWS us-east-1 and OpenAI, as published in 2025" in guide


# The command the guide's sizing table comes from (docs/deploy.md, "Sizing").
SIZING_COMMAND = ["plan", "--users-per-day", "10000", "--users-per-day", "100000", "--users-per-day", "1000000"]


def test_the_sizing_table_is_the_plan_commands_output(guide, capsys):
    # Given the guide's sizing table and the command it names
    from user_memory_local import cli

    assert "user-memory " + " ".join(SIZING_COMMAND) in guide
    # When the command runs
    capsys.readouterr()
    assert cli.main(SIZING_COMMAND) == 0
    printed = capsys.readouterr().out
    # Then the guide shows exactly its output: a plan for each row's scale
    assert _between(guide, "sizing-table") == printed.strip()


def test_the_cost_models_llm_figures_are_the_simulations():
    # Given the simulation's committed result (edit mode, the default SummaryMode)
    text = (ROOT / "bench/results/sim_30_days.txt").read_text()
    model = _cost_model()

    def edit_mode(label: str) -> str:
        line = next(line for line in text.splitlines() if line.startswith(label))
        return line.split()[-1]

    # Then the model's tokens per user-day are the ones measured there
    assert (
        float(edit_mode("completion tokens per user-day").replace(",", "")) == model.LLM_COMPLETION_TOKENS_PER_USER_DAY
    )
    assert float(edit_mode("prompt tokens per user-day").replace(",", "")) == model.LLM_PROMPT_TOKENS_PER_USER_DAY
    # And so are its calls per user-day, the cached share and the stable prefix's, in both modes
    calls = next(line for line in text.splitlines() if line.startswith("LLM calls"))
    edit_calls = int(calls.split("   ")[-1].split("(")[0].strip().replace(",", ""))
    summarized = next(line for line in text.splitlines() if line.startswith("user-days summarized"))
    user_days = int(summarized.split()[-1].replace(",", ""))
    assert edit_calls / user_days == model.c.LLM_CALLS_PER_USER_DAY

    def edit_share(label: str) -> float:
        line = next(line for line in text.splitlines() if line.strip().startswith(label))
        return float(line.split("%")[-2].split()[-1]) / 100

    assert edit_share("served by a warm prefix cache") == pytest.approx(model.c.LLM_CACHED_PROMPT_SHARE)
    assert edit_share("stable prefix") == pytest.approx(model.c.LLM_STABLE_PREFIX_SHARE)

    def document_mode(label: str) -> float:
        line = next(line for line in text.splitlines() if line.startswith(label))
        return float(line.split()[-2].replace(",", ""))

    assert document_mode("prompt tokens per user-day") == model.c.LLM_PROMPT_TOKENS_PER_USER_DAY_DOCUMENT_MODE
    assert document_mode("completion tokens per user-day") == model.c.LLM_COMPLETION_TOKENS_PER_USER_DAY_DOCUMENT_MODE


def test_the_benchmarks_bill_is_the_cost_models_before_and_after():
    # Given the cost model's month before the prompt's view and after it, online and batched
    table = _cost_model().before_after()
    # Then docs/benchmarks.md shows exactly it
    assert table in (ROOT / "docs/benchmarks.md").read_text()
    # And it starts from the month as counted before issue 22, and ends near a third of it
    first, *_, last = table.splitlines()[2:]
    assert first.split("|")[2].strip() == "25,276"
    assert last.split("|")[3].strip() in {"33%", "34%", "35%", "36%"}


def test_the_cost_models_template_figures_are_the_templates():
    # Given the template the model prices
    template = load("template.yaml")
    model = _cost_model()
    # Then its memory size and alarm count are the template's (the batch size is the plan's, checked
    # against the template's default in tests/infrastructure/test_template.py)
    assert template["Globals"]["Function"]["MemorySize"] == model.FUNCTION_MEMORY_MB
    assert len(resources_of_type(template, "AWS::CloudWatch::Alarm")) == model.ALARMS
    assert float(load("infra/database.yaml")["Parameters"]["MinCapacity"]["Default"]) == model.MIN_CAPACITY_ACUS


def test_the_readme_points_to_the_guide():
    assert "docs/deploy.md" in (ROOT / "README.md").read_text()


# A DSN secret rewritten by hand in a guide: the secret, the DSN's user and its query string.
_DSN_REWRITE = re.compile(
    r"put-secret-value --secret-id <(\w+)> --secret-string 'postgresql://([^:]+):[^@]*@[^?']*\?([^']*)'"
)
RUNBOOKS = ("infra/README.md", "docs/deploy.md", "docs/operations.md")


def test_a_dsn_the_guides_rewrite_goes_to_the_secret_of_its_user_with_the_stacks_tls():
    # Given the database stack's DSN secrets, by the output that names each and the user in it
    stack = load("infra/database.yaml")
    master = stack["Parameters"]["MasterUsername"]["Default"]
    secret_of_user, queries = {}, set()
    for output, definition in stack["Outputs"].items():
        resource = stack["Resources"].get(definition["Value"].get("Ref", ""), {})
        if resource.get("Type") == "AWS::SecretsManager::Secret" and "SecretString" in resource["Properties"]:
            text = resource["Properties"]["SecretString"]["Sub"][0].replace("${MasterUsername}", master)
            secret_of_user[text.removeprefix("postgresql://").split(":", 1)[0]] = output
            queries.add(text.split("?", 1)[1])
    assert secret_of_user[master] == "OwnerDatabaseSecretArn" and len(queries) == 1
    # When the runbooks rewrite a DSN secret by hand
    rewrites = [(path, m.groups()) for path in RUNBOOKS for m in _DSN_REWRITE.finditer((ROOT / path).read_text())]
    assert any(path == "infra/README.md" for path, _ in rewrites)
    for path, (secret, user, query) in rewrites:
        # Then each writes the DSN of a user to that user's own secret (the master user's to the
        # owner's DSN secret), with the stack's own TLS settings
        assert secret == secret_of_user[user], (path, user, secret)
        assert query in queries, (path, query)


def _commands(block: str) -> list[str]:
    """The shell commands of a code block, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split(" #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def test_the_restore_runbook_rebuilds_the_clusters_network_and_scaling_and_frees_the_proxy_first(guide):
    # Given the runbook's commands and the database stack
    # (up to the next section: the block's comments start with "#" too)
    section = guide.split("## Restoring the database to a point in time\n", 1)[1].split("\n## ", 1)[0]
    commands = _commands(section.split("```sh\n", 1)[1].split("```", 1)[0])
    stack = load("infra/database.yaml")
    resources, outputs = stack["Resources"], stack["Outputs"]
    cluster = resources["DatabaseCluster"]["Properties"]

    def step(verb: str) -> int:
        (index,) = [i for i, c in enumerate(commands) if f"aws rds {verb} " in c]
        return index

    # Then every stack output it reads exists
    for name in re.findall(r'\$\(out "\$DB_STACK" (\w+)\)', section):
        assert name in outputs, name
    # And the restored cluster gets the stack's subnet group and security group (not the
    # account's defaults) and the old cluster's Serverless v2 range
    restore = commands[step("restore-db-cluster-to-point-in-time")]
    assert '--db-subnet-group-name "$(out "$DB_STACK" DatabaseSubnetGroupName)"' in restore
    assert outputs["DatabaseSubnetGroupName"]["Value"] == {"Ref": "DatabaseSubnetGroup"}
    assert cluster["DBSubnetGroupName"] == {"Ref": "DatabaseSubnetGroup"}
    assert '--vpc-security-group-ids "$(out "$DB_STACK" DatabaseSecurityGroupId)"' in restore
    assert [outputs["DatabaseSecurityGroupId"]["Value"]] == cluster["VpcSecurityGroupIds"]
    assert (
        '--serverless-v2-scaling-configuration "$SCALING"' in restore and "ServerlessV2ScalingConfiguration" in section
    )
    # And its writer is a db.serverless instance, made after the cluster
    writer = step("create-db-instance")
    assert (
        writer > step("restore-db-cluster-to-point-in-time") and "--db-instance-class db.serverless" in commands[writer]
    )
    # And the old cluster leaves the proxy's target group before the restored one joins it (a
    # target group holds exactly one cluster), in the stack's target group
    assert step("deregister-db-proxy-targets") < step("register-db-proxy-targets")
    group = resources["DatabaseProxyTargetGroup"]["Properties"]["TargetGroupName"]
    for verb in ("deregister-db-proxy-targets", "register-db-proxy-targets"):
        assert f"--target-group-name {group}" in commands[step(verb)], verb
    assert outputs["ProxyName"]["Value"] == {"Ref": "DatabaseProxy"}
    assert outputs["DatabaseClusterIdentifier"]["Value"] == {"Ref": "DatabaseCluster"}
    # And the logins get their current passwords back afterwards
    assert "create-logins" in commands[-1]


def _metric_names() -> set[str]:
    """Every metric name layers/core can emit: literal names, the `name` a metric call is given
    (a conditional of literals), the f-string families expanded over what they loop on (RunStatus,
    a tuple of literals), and the worker's run counters as they are declared (jobs/tally.py)."""
    import ast

    from user_memory.domain.model import RunStatus
    from user_memory.jobs.tally import metric_names

    names: set[str] = metric_names()
    for path in (ROOT / "layers/core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        loops = {id(node.body[0]): node for node in ast.walk(tree) if isinstance(node, ast.For) and node.body}
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            target = [getattr(t, "id", "") for t in node.targets] if isinstance(node, ast.Assign) else []
            if target == ["name"] and isinstance(node.value, ast.IfExp):  # type: ignore[attr-defined]
                branches = (node.value.body, node.value.orelse)  # type: ignore[attr-defined]
                if all(isinstance(b, ast.Constant) and isinstance(b.value, str) for b in branches):
                    names |= {b.value for b in branches}  # type: ignore[attr-defined]
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_metric"):
                continue
            name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(name, ast.Constant):
                names.add(name.value)
            elif isinstance(name, ast.JoinedStr):
                prefix = name.values[0].value  # type: ignore[attr-defined]
                loop, statement = None, parents.get(id(node))
                while statement is not None and loop is None:
                    loop = loops.get(id(statement)) or (statement if isinstance(statement, ast.For) else None)
                    statement = parents.get(id(statement))
                assert loop is not None, (path, prefix)
                if isinstance(loop.iter, ast.Tuple):
                    names |= {prefix + e.value for e in loop.iter.elts if isinstance(e, ast.Constant)}
                else:
                    names |= {prefix + status.value for status in RunStatus}
    return names


def test_the_cost_model_pays_for_every_metric_name_the_functions_emit():
    # Given every metric name the code can emit (one dimension: service)
    names = _metric_names()
    # Then the model counts each at the custom metric's price
    assert len(names) == _cost_model().c.CUSTOM_METRICS, sorted(names)

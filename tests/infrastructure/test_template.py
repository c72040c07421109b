"""template.yaml (the application stack): cfn-lint offline, plus what cfn-lint does not check."""

from __future__ import annotations

import ast
import re

import pytest

from tests.infrastructure.cfn import ROOT, cfn_lint, load, references, resources_of_type

pytestmark = pytest.mark.infrastructure

# The environment contract: the only variables the template may set, per scope. The code reads
# exactly these names (user_memory.config: each setting is its field name upper-cased).
GLOBAL_ENV = {
    "DATABASE_URL",
    "DATABASE_SECRET_NAME",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}
FUNCTION_ENV = {
    "FanoutFunction": {"QUEUE_URL", "USERS_PER_MESSAGE", "FANOUT_PAGE_SIZE", "WINDOW_HOURS"},
    "WorkerFunction": {
        "CHECKPOINT_INTERVAL",
        "LAMBDA_TIMEOUT_SECONDS",
        "OPENAI_API_KEY_SECRET_NAME",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "OPENAI_TIMEOUT_SECONDS",
        "OPENAI_MAX_RETRIES",
        "SUMMARIZER_ATTEMPTS",
        "MAX_ACTIVITIES_PER_RUN",
        "DOCUMENT_SCHEMA",
    },
}
# The worker refuses to start unless its worst summarizer run plus this margin fits its timeout.
DEADLINE_MARGIN_SECONDS = 15
VALID_LOG_RETENTION_DAYS = {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557}
VALID_LOG_RETENTION_DAYS |= {2922, 3288, 3653}


@pytest.fixture(scope="module")
def template() -> dict:
    return load("template.yaml")


def _functions(template: dict) -> dict[str, dict]:
    return {name: res["Properties"] for name, res in resources_of_type(template, "AWS::Serverless::Function").items()}


def _default(template: dict, parameter: str) -> int:
    return int(template["Parameters"][parameter]["Default"])


def test_cfn_lint_passes_offline():
    # Given the application template
    # When cfn-lint checks it (offline, SAM transform included)
    result = cfn_lint("template.yaml")
    # Then it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_daily_schedule_is_an_eventbridge_rule_with_retries_and_a_dead_letter_queue(template):
    # Given the fan-out function's events
    events = template["Resources"]["FanoutFunction"]["Properties"]["Events"]
    # When the daily event is read
    (daily,) = [e for e in events.values() if e["Type"] in ("Schedule", "ScheduleV2")]
    props = daily["Properties"]
    # Then it is an EventBridge rule (Schedule, not the Scheduler's ScheduleV2) driven by the parameters
    assert daily["Type"] == "Schedule"
    assert props["Schedule"] == {"Ref": "ScheduleExpression"}
    assert props["State"] == {"Ref": "ScheduleState"}
    # And it retries, bounded in attempts and event age
    assert set(props["RetryPolicy"]) == {"MaximumRetryAttempts", "MaximumEventAgeInSeconds"}
    assert 0 < props["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    assert 60 <= props["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    # And undeliverable events go to a dedicated, encrypted queue that EventBridge may write to
    assert props["DeadLetterConfig"] == {"Arn": {"GetAtt": "ScheduleDeadLetterQueue.Arn"}}
    dlq = template["Resources"]["ScheduleDeadLetterQueue"]
    assert dlq["Type"] == "AWS::SQS::Queue" and dlq["Properties"]["SqsManagedSseEnabled"] is True
    policies = resources_of_type(template, "AWS::SQS::QueuePolicy").values()
    statements = [
        s
        for p in policies
        if p["Properties"]["Queues"] == [{"Ref": "ScheduleDeadLetterQueue"}]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert any(
        s["Principal"] == {"Service": "events.amazonaws.com"} and s["Action"] == "sqs:SendMessage" for s in statements
    )


def test_every_parameter_reaches_a_resource(template):
    # Given every parameter of the template
    parameters = set(template["Parameters"])
    # When the resources (and the globals they inherit) are searched for Ref, GetAtt and Sub usages
    used = set(references(template["Resources"])) | set(references(template["Globals"]))
    # Then none is declared for nothing
    assert parameters - used == set()


def test_the_template_sets_exactly_the_environment_contract(template):
    # Given the environment of the globals and of each function
    globals_env = set(template["Globals"]["Function"]["Environment"]["Variables"])
    functions = _functions(template)
    # Then the globals set the shared variables, and each function its own ones, nothing else
    assert globals_env == GLOBAL_ENV
    assert set(functions) == set(FUNCTION_ENV)
    for name, props in functions.items():
        own = set(props.get("Environment", {}).get("Variables", {}))
        assert own == FUNCTION_ENV[name], name


def test_every_contract_variable_is_a_setting_the_code_reads():
    # Given the settings module, whose fields are read from their upper-cased names
    source = (ROOT / "layers/core/user_memory/config.py").read_text()
    fields = {m.upper() for m in re.findall(r"^\s+([a-z_][a-z0-9_]*)\s*:", source, flags=re.MULTILINE)}
    # Then every application variable of the contract is one of its fields (Powertools reads its own)
    contract = GLOBAL_ENV.union(*FUNCTION_ENV.values())
    assert {v for v in contract if not v.startswith("POWERTOOLS_")} - fields == set()


def test_the_powertools_names_are_the_ones_the_alarms_watch(template):
    # Given the Powertools variables
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    # Then the service and metrics namespace are the ones RecordsFailedAlarm filters on
    alarm = template["Resources"]["RecordsFailedAlarm"]["Properties"]
    assert env["POWERTOOLS_SERVICE_NAME"] == "user-memory"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "UserMemory" == alarm["Namespace"]
    assert alarm["Dimensions"] == [{"Name": "service", "Value": env["POWERTOOLS_SERVICE_NAME"]}]
    assert env["POWERTOOLS_LOG_LEVEL"] == {"Ref": "LogLevel"}


def test_a_local_invoke_needs_no_secret_and_the_dsn_parameter_is_hidden(template):
    # Given the database parameters
    params = template["Parameters"]
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    # Then DATABASE_URL comes from a hidden parameter that is empty by default
    assert env["DATABASE_URL"] == {"Ref": "DatabaseUrl"}
    assert params["DatabaseUrl"]["Default"] == "" and params["DatabaseUrl"]["NoEcho"] is True
    # And the secret is optional: its read permission is attached only when it is set
    assert env["DATABASE_SECRET_NAME"] == {"Ref": "DatabaseSecretArn"}
    assert params["DatabaseSecretArn"]["Default"] == ""
    for name, props in _functions(template).items():
        secret_policies = [p for p in props["Policies"] if "DatabaseSecretArn" in set(references(p))]
        assert secret_policies, name
        for policy in secret_policies:
            assert "If" in policy and policy["If"][0] == "HasDatabaseSecret", name
    assert template["Conditions"]["HasDatabaseSecret"] == {"Not": [{"Equals": [{"Ref": "DatabaseSecretArn"}, ""]}]}


def test_visibility_timeout_is_at_least_six_times_the_worker_timeout(template):
    # Given the worker queue and the worker
    r = template["Resources"]
    timeout = r["WorkerFunction"]["Properties"]["Timeout"]
    # Then a message stays invisible for at least six worker timeouts
    assert r["WorkerQueue"]["Properties"]["VisibilityTimeout"] >= 6 * timeout
    # And the worker is told its own timeout
    assert r["WorkerFunction"]["Properties"]["Environment"]["Variables"]["LAMBDA_TIMEOUT_SECONDS"] == str(timeout)


def test_messages_reach_the_dlq_only_after_at_least_five_receives(template):
    # Given the worker queue's redrive policy
    q = template["Resources"]["WorkerQueue"]["Properties"]["RedrivePolicy"]
    assert q["deadLetterTargetArn"] == {"GetAtt": "WorkerDeadLetterQueue.Arn"}
    assert q["maxReceiveCount"] == {"Ref": "MaxReceiveCount"}
    # Then deferrals and batch timeouts, which count as receives, cannot exhaust it early
    assert _default(template, "MaxReceiveCount") >= 5
    assert template["Parameters"]["MaxReceiveCount"]["MinValue"] >= 5


def test_worker_reports_batch_item_failures_with_bounded_concurrency(template):
    props = template["Resources"]["WorkerFunction"]["Properties"]["Events"]["Queue"]["Properties"]
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "WorkerMaximumConcurrency"}


def test_the_worker_time_budget_holds_for_the_defaults(template):
    # Given the worker's timeout and the default LLM settings
    worker_timeout = template["Resources"]["WorkerFunction"]["Properties"]["Timeout"]
    timeout = _default(template, "OpenAITimeoutSeconds")
    retries = _default(template, "OpenAIMaxRetries")
    attempts = _default(template, "SummarizerAttempts")
    # When the worst summarizer run is added up
    worst = timeout * (retries + 1) * attempts + DEADLINE_MARGIN_SECONDS
    # Then it fits the worker's timeout, so the worker starts with the defaults
    assert worst <= worker_timeout, f"{timeout} x {retries + 1} x {attempts} + {DEADLINE_MARGIN_SECONDS} = {worst}"
    # And no single request may take the worker's whole timeout
    assert template["Parameters"]["OpenAITimeoutSeconds"]["MaxValue"] + DEADLINE_MARGIN_SECONDS <= worker_timeout


def _alarm(template: dict, namespace: str, metric: str, dimension: dict) -> dict:
    matches = [
        res["Properties"]
        for res in resources_of_type(template, "AWS::CloudWatch::Alarm").values()
        if res["Properties"]["Namespace"] == namespace
        and res["Properties"]["MetricName"] == metric
        and dimension in res["Properties"].get("Dimensions", [])
    ]
    assert len(matches) == 1, f"expected one alarm on {namespace}/{metric} {dimension}, found {len(matches)}"
    return matches[0]


def test_alarms_fire_on_what_fails(template):
    # Given the template's alarms
    # Then one watches each way the daily job can fail
    records = _alarm(template, "UserMemory", "RecordsFailed", {"Name": "service", "Value": "user-memory"})
    assert records["Statistic"] == "Sum"
    _alarm(template, "AWS/Lambda", "Errors", {"Name": "FunctionName", "Value": {"Ref": "FanoutFunction"}})
    _alarm(template, "AWS/Lambda", "Errors", {"Name": "FunctionName", "Value": {"Ref": "WorkerFunction"}})
    for dlq in ("WorkerDeadLetterQueue", "ScheduleDeadLetterQueue"):
        depth = {"Name": "QueueName", "Value": {"GetAtt": f"{dlq}.QueueName"}}
        _alarm(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible", depth)
    age = {"Name": "QueueName", "Value": {"GetAtt": "WorkerQueue.QueueName"}}
    assert _alarm(template, "AWS/SQS", "ApproximateAgeOfOldestMessage", age)["Threshold"] == {
        "Ref": "QueueAgeAlarmSeconds"
    }
    # And every alarm notifies the topic only when one is given, and stays quiet without data
    for name, res in resources_of_type(template, "AWS::CloudWatch::Alarm").items():
        props = res["Properties"]
        assert props["TreatMissingData"] == "notBreaching", name
        assert props["AlarmActions"] == {
            "If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }, name


def test_every_function_logs_to_its_own_log_group_with_retention(template):
    # Given the functions and the log groups
    log_groups = resources_of_type(template, "AWS::Logs::LogGroup")
    seen = set()
    for name, props in _functions(template).items():
        # When a function's logging config is followed
        group_name = props["LoggingConfig"]["LogGroup"]["Ref"]
        group = log_groups[group_name]["Properties"]
        # Then the group exists before the function (LoggingConfig makes the function depend on it),
        # is the function's own /aws/lambda/<function name> group and keeps logs for LogRetentionDays
        assert group["LogGroupName"] == {"Sub": "/aws/lambda/" + props["FunctionName"]["Sub"]}, name
        assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        seen.add(group_name)
    assert seen == set(log_groups)
    retention = template["Parameters"]["LogRetentionDays"]
    assert set(retention["AllowedValues"]) <= VALID_LOG_RETENTION_DAYS
    assert retention["Default"] in retention["AllowedValues"]


def test_functions_are_arm64_python312_with_the_core_layer(template):
    g = template["Globals"]["Function"]
    assert g["Runtime"] == "python3.12" and g["Architectures"] == ["arm64"]
    assert g["Layers"] == [{"Ref": "CoreLayer"}]
    layer = template["Resources"]["CoreLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/core"
    assert layer["Metadata"] == {"BuildMethod": "python3.12", "BuildArchitecture": "arm64"}
    assert (ROOT / "layers/core/requirements.txt").exists()


def test_every_handler_resolves_to_a_function_in_its_code_uri(template):
    for name, props in _functions(template).items():
        module, func = props["Handler"].rsplit(".", 1)
        source = ROOT / props["CodeUri"] / f"{module}.py"
        assert source.exists(), f"{name}: {source} missing"
        tree = ast.parse(source.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), f"{name}: no {func}()"


def test_only_the_settings_module_reads_the_environment():
    # Given the library in the layer and the handlers
    sources = [*(ROOT / "layers/core/user_memory").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    # Then nothing but config.py reads os.environ, so the contract above is the whole interface
    readers = [p for p in sources if p.name != "config.py" and re.search(r"os\.environ|os\.getenv", p.read_text())]
    assert readers == []

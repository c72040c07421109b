"""template.yaml (the application stack): cfn-lint offline, plus what cfn-lint does not check."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest
from user_memory.config import (
    ApiSettings,
    DatabaseSettings,
    EventsSettings,
    FanoutSettings,
    MigrateSettings,
    RetentionSettings,
    WorkerSettings,
)

from tests.infrastructure.cfn import ROOT, cfn_lint, evaluate, load, references, resources_of_type

pytestmark = pytest.mark.infrastructure

# The environment contract: the only variables the template may set, per scope. The code reads
# exactly these names (user_memory.config: each setting is its field name upper-cased).
GLOBAL_ENV = {
    "DATABASE_URL",
    "DATABASE_LOGIN_SECRET_NAME",
    "DATABASE_ENDPOINT",
    "DATABASE_SECRET_NAME",
    "DATABASE_ROLE",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "XRAY_SDK_TRACING",
    "SSL_CERT_FILE",
}
# Variables a library reads, not the code's settings: Powertools' own, and OpenSSL's (under libpq).
LIBRARY_ENV = {"SSL_CERT_FILE"}
FUNCTION_ENV = {
    "FanoutFunction": {
        "QUEUE_URL",
        "USERS_PER_MESSAGE",
        "FANOUT_PAGE_SIZE",
        "WINDOW_HOURS",
        "INACTIVITY_THRESHOLD_MINUTES",
        "CONVERSATIONS_PER_MESSAGE",
        "WORKER_MAXIMUM_CONCURRENCY",  # the worker's throughput and the queue's retention: the backlog check
        "WORKER_BATCH_SIZE",
        "LLM_CONCURRENCY",
        "LLM_SECONDS_PER_CALL",
        "QUEUE_RETENTION_SECONDS",
    },
    "WorkerFunction": {
        "CHECKPOINT_INTERVAL",
        "LAMBDA_TIMEOUT_SECONDS",
        "OPENAI_API_KEY_SECRET_NAME",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "OPENAI_TIMEOUT_SECONDS",
        "OPENAI_MAX_RETRIES",
        "SUMMARIZER_ATTEMPTS",
        "SUMMARY_MODE",
        "LLM_CONCURRENCY",
        "SUMMARY_DELIVERY",
        "MAX_ACTIVITIES_PER_RUN",
        "DOCUMENT_SCHEMA",
        "MAX_DOCUMENT_BYTES",
        "QUEUE_URL",
        "REFRESH_AFTER_CONVERSATION_SECONDS",
        "EMBEDDING_MODEL",
        "EMBEDDING_BASE_URL",
        "EMBEDDING_API_KEY_SECRET_NAME",
        "EXPORT_BUCKET",  # export_user messages write there
    },
    "ApiFunction": {
        "DATABASE_LOGIN_SECRET_NAME",  # its own login's, not the service's
        "DATABASE_SECRET_NAME",
        "OPERATOR_SCOPE",
        "SUBJECT_IDS",
        "REQUIRE_IF_MATCH",
        "PROMPT_INCLUDE_SENSITIVE",
        "DOCUMENT_SCHEMA",
        "CHECKPOINT_INTERVAL",
        "MAX_DOCUMENT_BYTES",
        "QUEUE_URL",
        "REFRESH_MIN_INTERVAL_SECONDS",
        "INACTIVITY_THRESHOLD_MINUTES",
        "CONVERSATIONS_PER_MESSAGE",
        "EMBEDDING_MODEL",
        "EMBEDDING_BASE_URL",
        "EMBEDDING_API_KEY_SECRET_NAME",
        "EXPORT_BUCKET",  # pre-signed URLs to exports; an erase deletes a user's objects
        "EXPIRE_EVENTS_AFTER_DAYS",  # the prompt leaves out what expired
        "EXPIRE_TODOS_AFTER_DAYS",
        "CONSOLE_OIDC_ISSUER",  # the console's sign-in (/console)
        "CONSOLE_CLIENT_ID",
        "CONSOLE_SCOPES",
        "CONSOLE_CONNECT_ORIGINS",
        "WEBHOOK_SECRET_PREFIX",  # the webhooks' signing secrets, under the stack's prefix
    },
    "RetentionFunction": {
        "KV_MAX_AGE_DAYS",
        "KV_NAMESPACE_MAX_AGE_DAYS",
        "EXPIRE_EVENTS_AFTER_DAYS",  # expiry, written as versions with the writers' settings
        "EXPIRE_TODOS_AFTER_DAYS",
        "DOCUMENT_SCHEMA",
        "CHECKPOINT_INTERVAL",
        "MAX_DOCUMENT_BYTES",
    },
    "EventsFunction": {"EVENT_BUS_NAME"},
    "MigrateFunction": {
        "DATABASE_LOGIN_SECRET_NAME",  # the owner's, not the service's
        "DATABASE_SECRET_NAME",
        "API_LOGIN_SECRET_NAME",
        "SERVICE_LOGIN_SECRET_NAME",
    },
}
# The settings class each function reads its environment into (user_memory.config).
FUNCTION_SETTINGS: dict[str, type[DatabaseSettings]] = {
    "FanoutFunction": FanoutSettings,
    "WorkerFunction": WorkerSettings,
    "ApiFunction": ApiSettings,
    "RetentionFunction": RetentionSettings,
    "EventsFunction": EventsSettings,
    "MigrateFunction": MigrateSettings,
}
# The DSN secret each function may read (infra/database.yaml's outputs of the same names).
OWN_DSN_SECRET = {
    "FanoutFunction": "DatabaseSecretArn",
    "WorkerFunction": "DatabaseSecretArn",
    "RetentionFunction": "DatabaseSecretArn",
    "EventsFunction": "DatabaseSecretArn",
    "ApiFunction": "ApiDatabaseSecretArn",
    "MigrateFunction": "OwnerDatabaseSecretArn",
}
DSN_SECRETS = set(OWN_DSN_SECRET.values())
# The login secret each function connects with when DatabaseEndpoint is set (the DSN built at run time).
OWN_LOGIN_SECRET = {
    "FanoutFunction": "ServiceLoginSecretArn",
    "WorkerFunction": "ServiceLoginSecretArn",
    "RetentionFunction": "ServiceLoginSecretArn",
    "EventsFunction": "ServiceLoginSecretArn",
    "ApiFunction": "ApiLoginSecretArn",
    "MigrateFunction": "OwnerLoginSecretArn",
}
# What the migrate function also reads: the logins' credentials it creates the logins with.
CREATED_LOGINS = {"ApiLoginSecretArn", "ServiceLoginSecretArn"}
# A deployment through the database stack (docs/deploy.md's command), each parameter its own ARN.
DEPLOYED = {
    name: f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}"
    for name in (*DSN_SECRETS, *OWN_LOGIN_SECRET.values())
} | {"DatabaseEndpoint": "postgresql://proxy.example:5432/user_memory?sslmode=require"}
# Lambda's limit on a function name (<stack name>-<suffix>).
LAMBDA_FUNCTION_NAME_LIMIT = 64
# The API's routes: the public ones (its description, Swagger UI over it, the console's page and
# files), and the ones behind the JWT authorizer.
PUBLIC_ROUTES = {
    ("GET", "/openapi.json"),
    ("GET", "/swagger"),
    ("GET", "/console"),
    ("GET", "/console/{file}"),
    ("GET", "/"),  # a redirect to the console
    ("GET", "/favicon.ico"),  # an empty answer
}
AUTHORIZED_ROUTES = {
    ("ANY", "/me"),
    ("ANY", "/me/{proxy+}"),
    ("ANY", "/users/{proxy+}"),
    ("ANY", "/admin/{proxy+}"),
    ("ANY", "/tasks/trigger-memory-generation"),
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


@pytest.mark.parametrize(
    ("function", "expression"),
    [("FanoutFunction", "ScheduleExpression"), ("RetentionFunction", "RetentionScheduleExpression")],
)
def test_the_daily_schedule_is_an_eventbridge_rule_with_retries_and_a_dead_letter_queue(template, function, expression):
    # Given the function's events
    events = template["Resources"][function]["Properties"]["Events"]
    # When the daily event is read (the one driven by the daily expression)
    ((event_name, daily),) = [
        (n, e)
        for n, e in events.items()
        if e["Type"] in ("Schedule", "ScheduleV2") and e["Properties"]["Schedule"] == {"Ref": expression}
    ]
    props = daily["Properties"]
    # Then it is an EventBridge rule (Schedule, not the Scheduler's ScheduleV2) driven by the parameters
    assert daily["Type"] == "Schedule"
    assert props["Schedule"] == {"Ref": expression}
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
    # (only from this rule, the one SAM generates as <function><event>)
    rule_arn = {"GetAtt": f"{function}{event_name}.Arn"}
    assert any(
        s["Principal"] == {"Service": "events.amazonaws.com"}
        and s["Action"] == "sqs:SendMessage"
        and rule_arn in s["Condition"]["ArnEquals"]["aws:SourceArn"]
        for s in statements
    )
    # And an invocation that still fails after Lambda's asynchronous retries lands on the same queue
    invoke = template["Resources"][function]["Properties"]["EventInvokeConfig"]
    assert 0 < invoke["MaximumRetryAttempts"] <= 2
    assert invoke["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS",
        "Destination": {"GetAtt": "ScheduleDeadLetterQueue.Arn"},
    }


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
    assert {v for v in contract if not v.startswith("POWERTOOLS_")} - LIBRARY_ENV - fields == set()


def _words(name: str) -> str:
    """A parameter's or a setting's name without case and separators: OpenAIModel ~ openai_model."""
    return name.replace("_", "").lower()


@pytest.mark.parametrize("function", sorted(FUNCTION_SETTINGS))
def test_each_function_reads_its_settings_from_the_parameters_of_the_same_name(template, function):
    # Given the function's settings class and its environment (the globals' and its own)
    settings = FUNCTION_SETTINGS[function]
    fields = {name.upper() for name in settings.model_fields}
    env = {
        **template["Globals"]["Function"]["Environment"]["Variables"],
        **_functions(template)[function].get("Environment", {}).get("Variables", {}),
    }
    # Then every variable set (Powertools' aside) is a field of that class, so none is ignored
    assert {name for name in env if not name.startswith("POWERTOOLS_")} - LIBRARY_ENV - fields == set()
    # And every field that has a parameter of its name is set, from that parameter
    parameters = {_words(p): p for p in template["Parameters"]}
    wired = {name: parameters[_words(name)] for name in settings.model_fields if _words(name) in parameters}
    assert wired, function
    for name, parameter in wired.items():
        value = env.get(name.upper())
        # (or a condition's choice whose other branch is that parameter: the fan-out's users per
        # message in batch mode)
        chosen = value.get("If", [None])[1:] if isinstance(value, dict) else []
        assert value == {"Ref": parameter} or {"Ref": parameter} in chosen, (
            f"{function}: {name.upper()} should be !Ref {parameter}"
        )


def test_the_api_settings_that_tune_writes_are_the_workers_too(template):
    # Given the settings both writers of memory documents read
    api = template["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"]
    worker = template["Resources"]["WorkerFunction"]["Properties"]["Environment"]["Variables"]
    # Then the API and the worker store documents under the same schema, size limit and checkpoints
    for name in ("DOCUMENT_SCHEMA", "MAX_DOCUMENT_BYTES", "CHECKPOINT_INTERVAL"):
        assert api[name] == worker[name], name
    # And the parameters' defaults are the settings' own defaults
    params = template["Parameters"]
    assert _default(template, "MaxDocumentBytes") == ApiSettings.model_fields["max_document_bytes"].default
    assert params["OperatorScope"]["Default"] == ApiSettings.model_fields["operator_scope"].default
    assert params["RequireIfMatch"]["Default"] == str(ApiSettings.model_fields["require_if_match"].default).lower()
    assert set(params["RequireIfMatch"]["AllowedValues"]) == {"true", "false"}
    assert _default(template, "KvMaxAgeDays") == RetentionSettings.model_fields["kv_max_age_days"].default


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
    # And every secret is optional: with none set, no function is told of one or may read one
    for name in (*DSN_SECRETS, *OWN_LOGIN_SECRET.values(), "DatabaseEndpoint"):
        assert params[name]["Default"] == "", name
    for name, props in _functions(template).items():
        resolved = evaluate(template, {**env, **props.get("Environment", {}).get("Variables", {})}, {})
        assert not any(resolved[v] for v in ("DATABASE_LOGIN_SECRET_NAME", "DATABASE_SECRET_NAME")), name
        assert _readable_secrets(template, props, {}) == set(), name


def _readable_secrets(template: dict, props: dict, parameters: dict[str, str]) -> set[str]:
    """The secret parameters a function's policies let it read, for these parameter values."""
    arns = {value: name for name, value in DEPLOYED.items()}
    policies = evaluate(template, props["Policies"], parameters)
    granted = [p["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"] for p in policies if isinstance(p, dict)
               and "AWSSecretsManagerGetSecretValuePolicy" in p]  # fmt: skip
    return {arns[arn] for arn in granted}


@pytest.mark.parametrize("endpoint", [True, False], ids=["logins-at-run-time", "dsn-secrets"])
def test_each_function_connects_with_and_may_read_only_its_own_credentials(template, endpoint):
    # Given a deployment through the database stack: with DatabaseEndpoint (each function's DSN
    # built at run time from its login's secret), or without (the DSN secrets of earlier releases)
    parameters = DEPLOYED if endpoint else {k: v for k, v in DEPLOYED.items() if k != "DatabaseEndpoint"}
    globals_env = template["Globals"]["Function"]["Environment"]["Variables"]
    for name, props in _functions(template).items():
        env = evaluate(template, {**globals_env, **props.get("Environment", {}).get("Variables", {})}, parameters)
        readable = _readable_secrets(template, props, parameters)
        extra = CREATED_LOGINS if name == "MigrateFunction" else set()
        if endpoint:
            # Then each connects as its own login, read at run time, and may read that secret only
            own = OWN_LOGIN_SECRET[name]
            assert env["DATABASE_LOGIN_SECRET_NAME"] == DEPLOYED[own], name
            assert env["DATABASE_ENDPOINT"] == DEPLOYED["DatabaseEndpoint"], name
            assert env["DATABASE_SECRET_NAME"] == "", name
        else:
            # Then each connects with its own DSN secret and may read it only
            own = OWN_DSN_SECRET[name]
            assert env["DATABASE_SECRET_NAME"] == DEPLOYED[own] and env["DATABASE_LOGIN_SECRET_NAME"] == "", name
        assert readable == {own} | extra, name
    # And the worker's, fan-out's and retention's connections take service_role after login (the
    # API's only inside an operator's transaction)
    assert globals_env["DATABASE_ROLE"] == {"Ref": "DatabaseRole"}
    assert template["Parameters"]["DatabaseRole"]["Default"] == "service_role"


@pytest.mark.parametrize(
    ("logins", "accepted"),
    [({"ApiLoginSecretArn", "ServiceLoginSecretArn"}, True), ({"ApiLoginSecretArn"}, False), (set(), False)],
)
def test_connecting_as_logins_needs_both_login_secrets(template, logins, accepted):
    # Given a stack with DatabaseEndpoint and some of the login secrets
    rule = template["Rules"]["LoginsNeedTheirSecrets"]
    parameters = {"DatabaseEndpoint": DEPLOYED["DatabaseEndpoint"]} | {name: DEPLOYED[name] for name in logins}
    # Then the rule applies, and accepts it only with both (else a function would have no credentials)
    assert evaluate(template, rule["RuleCondition"], parameters) is True
    (assertion,) = rule["Assertions"]
    assert evaluate(template, assertion["Assert"], parameters) is accepted


def test_the_endpoint_parameter_carries_no_credentials(template):
    # Given the DatabaseEndpoint parameter (not hidden: it names a host)
    pattern = re.compile(template["Parameters"]["DatabaseEndpoint"]["AllowedPattern"])
    # Then it takes the database stack's output and refuses a URL with a user or a password
    assert pattern.fullmatch("postgresql://x.proxy-abc.us-east-1.rds.amazonaws.com:5432/user_memory?sslmode=require")
    assert pattern.fullmatch("")
    assert not pattern.fullmatch("postgresql://user_memory_api_login:secret@proxy.example:5432/user_memory")
    assert not pattern.fullmatch("postgresql://user_memory_api_login@proxy.example:5432/user_memory")


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


def _worker_mapping(template: dict) -> dict:
    # The logical id SAM gave the worker's SQS event's mapping (<function><event>): a deployed
    # stack updates that mapping in place, where a new one of the same queue and function would be
    # refused by Lambda (ResourceConflictException).
    (name,) = resources_of_type(template, "AWS::Lambda::EventSourceMapping")
    assert name == "WorkerFunctionQueue"
    return template["Resources"][name]["Properties"]


def test_worker_reports_batch_item_failures_with_bounded_concurrency(template):
    # Given the worker queue's trigger
    props = _worker_mapping(template)
    # Then it feeds the worker from its queue, in batches of the parameter's size
    assert props["FunctionName"] == {"Ref": "WorkerFunction"}
    assert props["EventSourceArn"] == {"GetAtt": "WorkerQueue.Arn"}
    assert props["BatchSize"] == {"Ref": "WorkerBatchSize"}
    # And the worker reports single failed records, with a bounded number of invocations at once
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "WorkerMaximumConcurrency"}


# The managed policy SAM attaches to the role of a function with an SQS event
# (samtranslator/model/eventsources/pull.py, SQS.get_policy_arn): ReceiveMessage, DeleteMessage
# and GetQueueAttributes on every queue ("Resource": "*").
SQS_MANAGED_POLICY = "AWSLambdaSQSQueueExecutionRole"
# What Lambda's poller needs on the queue it reads (the SQS developer guide's prerequisites for a
# Lambda trigger), no more.
SQS_POLLER_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}


def _statements(props: dict) -> list[dict]:
    """The inline statements of a function's Policies (policy templates and conditions aside)."""
    return [s for policy in props["Policies"] if isinstance(policy, dict) for s in policy.get("Statement", [])]


def test_the_worker_may_read_and_delete_messages_of_its_own_queue_only(template):
    # Given every function and its policies
    for name, props in _functions(template).items():
        # Then none has an SQS event, for which SAM would attach the managed policy that reads and
        # deletes messages of every queue, and none names that policy itself
        events = props.get("Events", {}).values()
        assert [e for e in events if e["Type"] == "SQS"] == [], name
        assert SQS_MANAGED_POLICY not in str(props["Policies"]), name
        receivers = [s for s in _statements(props) if "sqs:ReceiveMessage" in s["Action"]]
        if name != "WorkerFunction":
            assert receivers == [], name
    # And the worker's role may receive, delete and read the attributes of the worker queue's
    # messages, which its trigger polls, and of no other queue
    worker = _statements(_functions(template)["WorkerFunction"])
    (statement,) = [s for s in worker if "sqs:ReceiveMessage" in s["Action"]]
    assert statement["Effect"] == "Allow"
    assert set(statement["Action"]) == SQS_POLLER_ACTIONS
    assert statement["Resource"] == {"GetAtt": "WorkerQueue.Arn"} == _worker_mapping(template)["EventSourceArn"]


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
    _alarm(template, "AWS/Lambda", "Errors", {"Name": "FunctionName", "Value": {"Ref": "RetentionFunction"}})
    _alarm(template, "AWS/Lambda", "Errors", {"Name": "FunctionName", "Value": {"Ref": "ApiFunction"}})
    server_errors = _alarm(template, "AWS/ApiGateway", "5xx", {"Name": "ApiId", "Value": {"Ref": "HttpApi"}})
    assert (server_errors["Statistic"], server_errors["Threshold"]) == ("Sum", 0)
    for dlq in ("WorkerDeadLetterQueue", "ScheduleDeadLetterQueue"):
        depth = {"Name": "QueueName", "Value": {"GetAtt": f"{dlq}.QueueName"}}
        _alarm(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible", depth)
    age = {"Name": "QueueName", "Value": {"GetAtt": "WorkerQueue.QueueName"}}
    assert _alarm(template, "AWS/SQS", "ApproximateAgeOfOldestMessage", age)["Threshold"] == {
        "Ref": "QueueAgeAlarmSeconds"
    }
    refused = _alarm(template, "UserMemory", "FanoutRefused", {"Name": "service", "Value": "user-memory"})
    assert (refused["Statistic"], refused["Threshold"], refused["ComparisonOperator"]) == (
        "Sum",
        0,
        "GreaterThanThreshold",
    )
    # And every alarm notifies the topic only when one is given, and stays quiet without data
    for name, res in resources_of_type(template, "AWS::CloudWatch::Alarm").items():
        props = res["Properties"]
        assert props["TreatMissingData"] == "notBreaching", name
        assert props["AlarmActions"] == {
            "If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }, name


def test_a_stored_document_that_no_longer_validates_raises_an_alarm(template):
    # Given the metric the worker counts for a user it skips (worker.report_invalid_document)
    alarm = _alarm(template, "UserMemory", "InvalidStoredDocument", {"Name": "service", "Value": "user-memory"})
    # Then any one such user in five minutes raises the alarm
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == ("Sum", 0, "GreaterThanThreshold")


def test_every_function_has_an_alarm_on_its_errors(template):
    # Given the Lambda Errors alarms
    watched = [
        dimension["Value"]
        for res in resources_of_type(template, "AWS::CloudWatch::Alarm").values()
        if (res["Properties"]["Namespace"], res["Properties"]["MetricName"]) == ("AWS/Lambda", "Errors")
        for dimension in res["Properties"]["Dimensions"]
        if dimension["Name"] == "FunctionName"
    ]
    # Then each function is watched by exactly one, firing on the first error
    assert sorted(watched, key=str) == sorted(({"Ref": name} for name in _functions(template)), key=str)


def test_every_function_logs_to_its_own_log_group_with_retention(template):
    # Given the functions and the log groups (API Gateway's access log aside, checked below)
    log_groups = resources_of_type(template, "AWS::Logs::LogGroup")
    access_log = _http_api(template)["AccessLogSettings"]["DestinationArn"]["GetAtt"].split(".")[0]
    log_groups.pop(access_log)
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


def _http_api(template: dict) -> dict:
    (api,) = resources_of_type(template, "AWS::Serverless::HttpApi").values()
    return api["Properties"]


def _routes(template: dict) -> dict[tuple[str, str], tuple[str, dict]]:
    """(method, path) -> (function, event properties) of every HttpApi event of every function."""
    routes = {}
    for name, props in _functions(template).items():
        for event in props.get("Events", {}).values():
            if event["Type"] == "HttpApi":
                p = event["Properties"]
                routes[(p["Method"].upper(), p["Path"])] = (name, p)
    return routes


def test_the_http_api_checks_jwts_of_the_configured_issuer_and_audience_by_default(template):
    # Given the HTTP API's authorization
    auth = _http_api(template)["Auth"]
    params = template["Parameters"]
    # When the default authorizer is looked up
    authorizer = auth["Authorizers"][auth["DefaultAuthorizer"]]
    # Then it is a JWT authorizer reading the bearer token, for the issuer and audiences given at deploy time
    assert authorizer["IdentitySource"] == "$request.header.Authorization"
    assert authorizer["JwtConfiguration"] == {"issuer": {"Ref": "JwtIssuer"}, "audience": {"Ref": "JwtAudience"}}
    # And neither has a default: a stack cannot be deployed with an API that trusts nobody in particular
    assert "Default" not in params["JwtIssuer"] and "Default" not in params["JwtAudience"]
    assert params["JwtAudience"]["Type"] == "CommaDelimitedList"
    assert re.fullmatch(
        params["JwtIssuer"]["AllowedPattern"], "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Ab"
    )
    assert not re.fullmatch(params["JwtIssuer"]["AllowedPattern"], "http://issuer.example.com")


def test_only_the_openapi_document_and_swagger_ui_are_reachable_without_a_token(template):
    # Given every route of every function
    routes = _routes(template)
    api = _http_api(template)
    # Then the API serves exactly the documented routes, all on the one HTTP API, all to the API function
    assert set(routes) == PUBLIC_ROUTES | AUTHORIZED_ROUTES
    assert {function for function, _ in routes.values()} == {"ApiFunction"}
    assert all(p["ApiId"] == {"Ref": "HttpApi"} for _, p in routes.values())
    # And only GET /openapi.json, GET /swagger, the console's files, the root and the favicon opt out of the default
    # authorizer; no other route names one of its own
    public = {route for route, (_, p) in routes.items() if p.get("Auth", {}).get("Authorizer") == "NONE"}
    assert public == PUBLIC_ROUTES
    for route in AUTHORIZED_ROUTES:
        assert routes[route][1].get("Auth", {}).get("Authorizer", api["Auth"]["DefaultAuthorizer"]) == "JwtAuthorizer"


def test_the_api_stage_throttles_from_the_parameters(template):
    # Given the HTTP API's default route settings
    settings = _http_api(template)["DefaultRouteSettings"]
    params = template["Parameters"]
    # Then every route is throttled by the parameters (API Gateway answers 429 above them)
    assert settings == {
        "ThrottlingBurstLimit": {"Ref": "ApiThrottlingBurstLimit"},
        "ThrottlingRateLimit": {"Ref": "ApiThrottlingRateLimit"},
    }
    # And the limits are positive numbers by default and cannot be set to zero
    for name in ("ApiThrottlingBurstLimit", "ApiThrottlingRateLimit"):
        assert params[name]["Type"] == "Number" and params[name]["MinValue"] >= 1, name
        assert _default(template, name) >= params[name]["MinValue"], name


def test_the_api_access_log_is_kept_and_names_routes_never_paths(template):
    # Given the stage's access log settings
    settings = _http_api(template)["AccessLogSettings"]
    group = template["Resources"][settings["DestinationArn"]["GetAtt"].split(".")[0]]
    # Then requests are logged to a log group of the stack, kept LogRetentionDays
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    # And each line is JSON with the route, status and the authorizer's verdict, but not the path
    # (it holds user ids and key-value keys) nor the query string
    line = settings["Format"]
    fields = {k: "x" for k in re.findall(r'"(\w+)":', line)}
    assert {"requestId", "routeKey", "status", "authorizerError", "integrationError"} <= set(fields)
    assert "$context.path" not in line and "$context.rawPath" not in line and "querystring" not in line.lower()


def test_the_api_answers_within_api_gateways_integration_timeout(template):
    # Given the API function's timeout
    timeout = template["Resources"]["ApiFunction"]["Properties"]["Timeout"]
    # Then it ends before API Gateway's 30 s integration limit gives up on it
    assert 1 <= timeout < 30


def test_the_retention_function_purges_by_the_max_age_parameter(template):
    # Given the retention function
    props = template["Resources"]["RetentionFunction"]["Properties"]
    params = template["Parameters"]
    # Then it is told the maximum age from the parameter, bounded like the setting
    assert props["Environment"]["Variables"]["KV_MAX_AGE_DAYS"] == {"Ref": "KvMaxAgeDays"}
    for parameter, name in [
        ("KvMaxAgeDays", "kv_max_age_days"),
        ("ExpireEventsAfterDays", "expire_events_after_days"),
        ("ExpireTodosAfterDays", "expire_todos_after_days"),
    ]:
        field = RetentionSettings.model_fields[name]
        bounds = {type(m).__name__: m for m in field.metadata}
        assert params[parameter]["MinValue"] == bounds["Ge"].ge, parameter
        assert params[parameter]["MaxValue"] == bounds["Le"].le, parameter
        assert params[parameter]["Default"] == field.default, parameter
    # And the schedule fires after the fan-out's, daily by default
    assert params["RetentionScheduleExpression"]["Default"] == "cron(45 0 * * ? *)"


def test_function_names_fit_lambdas_limit_for_the_stack_names_the_description_allows(template):
    # Given the longest stack name the description allows
    allowed = int(re.search(r"stack name\s+must stay within (\d+) characters", template["Description"])[1])
    # When each function's name is <stack name><suffix>
    suffixes = {}
    for name, props in _functions(template).items():
        text = props["FunctionName"]["Sub"]
        assert text.startswith("${AWS::StackName}"), name
        suffixes[name] = text.removeprefix("${AWS::StackName}")
    # Then the longest one still fits Lambda's limit, and the allowance is not needlessly short
    assert allowed + max(len(s) for s in suffixes.values()) == LAMBDA_FUNCTION_NAME_LIMIT, suffixes
    # And the description names every suffix
    assert all(s.lstrip("-") in template["Description"] for s in suffixes.values()), suffixes


def test_every_function_is_a_package_installed_under_user_memory_functions(template):
    # Given the packages pyproject.toml installs
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for name, props in _functions(template).items():
        folder = ROOT / props["CodeUri"]
        # Then each function's folder is a package, importable locally as user_memory_functions.<folder>
        assert (folder / "__init__.py").exists(), name
        assert f"user_memory_functions.{folder.name}" in packages, name


def test_the_outputs_name_the_api_url_functions_and_log_groups(template):
    # Given the stack's outputs
    outputs = template["Outputs"]
    # Then the API's URL is its execute-api endpoint
    assert outputs["ApiUrl"]["Value"] == {"Sub": "https://${HttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/"}
    # And every function and every log group is named
    values = [o["Value"] for o in outputs.values()]
    for name in [*_functions(template), *resources_of_type(template, "AWS::Logs::LogGroup")]:
        assert {"Ref": name} in values, name


def test_the_summary_mode_parameter_offers_exactly_the_settings_modes_with_the_same_default(template):
    # Given the worker's SUMMARY_MODE setting (a Literal) and the template's SummaryMode parameter
    from typing import get_args

    field = WorkerSettings.model_fields["summary_mode"]
    parameter = template["Parameters"]["SummaryMode"]
    # Then the parameter allows exactly the setting's values, and defaults to the setting's default
    assert set(parameter["AllowedValues"]) == set(get_args(field.annotation))
    assert parameter["Default"] == field.default == "edit"


def test_the_summary_delivery_parameter_offers_exactly_the_settings_deliveries_online_by_default(template):
    # Given the worker's SUMMARY_DELIVERY setting (a Literal) and the template's SummaryDelivery parameter
    from typing import get_args

    field = WorkerSettings.model_fields["summary_delivery"]
    parameter = template["Parameters"]["SummaryDelivery"]
    # Then the parameter allows exactly the setting's values, defaults to online, and reaches the worker
    assert set(parameter["AllowedValues"]) == set(get_args(field.annotation))
    assert parameter["Default"] == field.default == "online"
    variables = template["Resources"]["WorkerFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["SUMMARY_DELIVERY"] == {"Ref": "SummaryDelivery"}


def test_the_conversation_memory_schedule_is_optional_and_runs_the_trigger_on_the_fanout(template):
    # Given the fan-out's schedules
    events = template["Resources"]["FanoutFunction"]["Properties"]["Events"]
    schedules = {n: e for n, e in events.items() if e["Type"] in ("Schedule", "ScheduleV2")}
    # Then besides the daily run there is exactly one more: the conversation-memory trigger
    assert set(schedules) == {"Daily", "ConversationMemories"}
    props = schedules["ConversationMemories"]["Properties"]
    params = template["Parameters"]
    # And it is off unless the stack enables it, on its own expression
    assert props["State"] == {"Ref": "ConversationScheduleState"}
    assert params["ConversationScheduleState"]["Default"] == "DISABLED"
    assert set(params["ConversationScheduleState"]["AllowedValues"]) == {"ENABLED", "DISABLED"}
    assert props["Schedule"] == {"Ref": "ConversationScheduleExpression"}
    # And it sends the event the fan-out runs the trigger on
    import json

    from user_memory.jobs.conversations import is_trigger_event

    assert is_trigger_event(json.loads(props["Input"]))
    # And it retries briefly, then dead-letters like the daily run, from a rule the queue policy allows
    assert props["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    assert props["DeadLetterConfig"] == {"Arn": {"GetAtt": "ScheduleDeadLetterQueue.Arn"}}
    (policy,) = resources_of_type(template, "AWS::SQS::QueuePolicy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert {"GetAtt": "FanoutFunctionConversationMemories.Arn"} in statement["Condition"]["ArnEquals"]["aws:SourceArn"]


def test_the_trigger_settings_have_parameters_with_the_settings_defaults_and_bounds(template):
    from user_memory.config import ConversationTriggerSettings

    params = template["Parameters"]
    for parameter, name in (
        ("InactivityThresholdMinutes", "inactivity_threshold_minutes"),
        ("ConversationsPerMessage", "conversations_per_message"),
    ):
        field = ConversationTriggerSettings.model_fields[name]
        bounds = {type(m).__name__: m for m in field.metadata}
        assert _default(template, parameter) == field.default, parameter
        assert params[parameter]["MinValue"] == bounds["Ge"].ge, parameter
        assert params[parameter]["MaxValue"] == bounds["Le"].le, parameter
    assert _default(template, "InactivityThresholdMinutes") == 120


def test_the_api_and_the_worker_may_send_to_the_worker_queue_and_nothing_else(template):
    # Given the functions that send: the fan-out, the worker (re-sends) and the API (the trigger route)
    for name in ("FanoutFunction", "WorkerFunction", "ApiFunction"):
        props = template["Resources"][name]["Properties"]
        # Then each is told the worker queue and may send to it only
        assert props["Environment"]["Variables"]["QUEUE_URL"] == {"Ref": "WorkerQueue"}, name
        sends = [p for p in props["Policies"] if isinstance(p, dict) and "SQSSendMessagePolicy" in p]
        assert sends == [{"SQSSendMessagePolicy": {"QueueName": {"GetAtt": "WorkerQueue.QueueName"}}}], name


def test_the_functions_verify_the_proxys_certificate_against_the_runtimes_roots(template):
    # Given the functions' environment
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    # Then OpenSSL under libpq (psycopg's binary wheel, whose built-in root location is a folder of
    # its own build) is pointed at the runtime's system bundle, which sslrootcert=system then loads
    assert env["SSL_CERT_FILE"] == "/etc/pki/tls/certs/ca-bundle.crt"
    assert template["Globals"]["Function"]["Runtime"] == "python3.12"  # Amazon Linux 2023, that bundle's path


# -- sized for 100,000 users a day (user_memory.domain.plan) ---------------------------------------


def test_the_worker_queue_and_its_dlq_keep_messages_as_long_as_sqs_allows(template):
    # Given the worker queue and its dead-letter queue
    from user_memory.domain.plan import QUEUE_RETENTION_SECONDS

    r = template["Resources"]
    queue = r["WorkerQueue"]["Properties"]["MessageRetentionPeriod"]
    dlq = r["WorkerDeadLetterQueue"]["Properties"]["MessageRetentionPeriod"]
    # Then both keep a message 14 days (SQS's most), the DLQ at least as long as the queue
    assert queue == QUEUE_RETENTION_SECONDS == 14 * 86400
    assert dlq >= queue
    # And the fan-out weighs its backlog against that same retention
    env = r["FanoutFunction"]["Properties"]["Environment"]["Variables"]
    assert env["QUEUE_RETENTION_SECONDS"] == str(queue)
    assert FanoutSettings.model_fields["queue_retention_seconds"].default == queue


def test_the_fanout_plans_with_the_workers_own_parameters(template):
    # Given the fan-out's environment
    env = template["Resources"]["FanoutFunction"]["Properties"]["Environment"]["Variables"]
    # Then the throughput it weighs the backlog with comes from the parameters the worker runs with
    assert env["WORKER_MAXIMUM_CONCURRENCY"] == {"Ref": "WorkerMaximumConcurrency"}
    assert _worker_mapping(template)["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "WorkerMaximumConcurrency"}
    assert env["WORKER_BATCH_SIZE"] == {"Ref": "WorkerBatchSize"} == _worker_mapping(template)["BatchSize"]
    assert env["LLM_CONCURRENCY"] == {"Ref": "WorkerLlmConcurrency"}
    assert env["LLM_SECONDS_PER_CALL"] == {"Ref": "LlmSecondsPerCall"}
    # And its settings' defaults are the parameters' defaults
    fields = FanoutSettings.model_fields
    for parameter, name in (
        ("WorkerMaximumConcurrency", "worker_maximum_concurrency"),
        ("WorkerBatchSize", "worker_batch_size"),
        ("WorkerLlmConcurrency", "llm_concurrency"),
        ("LlmSecondsPerCall", "llm_seconds_per_call"),
        ("UsersPerMessage", "users_per_message"),
    ):
        assert float(template["Parameters"][parameter]["Default"]) == fields[name].default, parameter


def test_the_fanout_may_read_the_worker_queues_attributes_and_nothing_more(template):
    # Given the fan-out's inline statements
    statements = _statements(_functions(template)["FanoutFunction"])
    # Then one lets it read the worker queue's attributes (its backlog), and none does more
    assert statements == [
        {
            "Sid": "ReadTheWorkerQueuesBacklog",
            "Effect": "Allow",
            "Action": ["sqs:GetQueueAttributes"],
            "Resource": {"GetAtt": "WorkerQueue.Arn"},
        }
    ]


def test_the_plans_bounds_are_the_templates(template):
    from user_memory.domain import plan as sizing

    params = template["Parameters"]
    assert params["WorkerMaximumConcurrency"]["MinValue"] == sizing.MIN_WORKER_CONCURRENCY
    assert params["WorkerMaximumConcurrency"]["MaxValue"] == sizing.MAX_WORKER_CONCURRENCY
    assert params["WorkerBatchSize"]["MaxValue"] == sizing.MAX_BATCH_SIZE
    assert params["UsersPerMessage"]["MaxValue"] == sizing.MAX_USERS_PER_MESSAGE
    assert params["WorkerLlmConcurrency"]["MaxValue"] == sizing.MAX_LLM_CONCURRENCY
    assert params["LlmSecondsPerCall"]["MaxValue"] == sizing.MAX_LLM_SECONDS
    assert params["ApiThrottlingRateLimit"]["MaxValue"] == sizing.MAX_API_RATE_LIMIT
    assert params["ApiThrottlingBurstLimit"]["MaxValue"] == sizing.MAX_API_BURST_LIMIT
    r = template["Resources"]
    assert r["WorkerFunction"]["Properties"]["Timeout"] == sizing.WORKER_TIMEOUT_SECONDS
    assert r["WorkerQueue"]["Properties"]["VisibilityTimeout"] == sizing.VISIBILITY_TIMEOUT_SECONDS
    database = load("infra/database.yaml")["Parameters"]
    assert database["MaxCapacity"]["MaxValue"] == sizing.MAX_CAPACITY_ACUS


def test_the_defaults_serve_100000_users_a_day(template):
    # Given the plan for 100,000 users a day with the default LLM figures
    from user_memory.domain import costs
    from user_memory.domain.plan import plan

    sized = plan(100_000)
    database = load("infra/database.yaml")["Parameters"]
    # Then the worker's shape is the plan's, with at least its concurrency
    assert _default(template, "WorkerMaximumConcurrency") >= sized.worker_concurrency
    assert _default(template, "WorkerBatchSize") == sized.batch_size
    assert _default(template, "UsersPerMessage") == sized.users_per_message
    assert _default(template, "WorkerLlmConcurrency") == sized.llm_concurrency
    assert float(template["Parameters"]["LlmSecondsPerCall"]["Default"]) == costs.LLM_SECONDS_PER_CALL
    # And the run that falls behind alarms inside the plan's window, the same night
    assert _default(template, "QueueAgeAlarmSeconds") == sized.queue_age_alarm_seconds <= sized.window_hours * 3600
    # And the API, Aurora and the proxy take at least the plan's load
    assert _default(template, "ApiThrottlingRateLimit") >= sized.api_rate_limit
    assert _default(template, "ApiThrottlingBurstLimit") >= sized.api_burst_limit
    assert float(database["MinCapacity"]["Default"]) == sized.min_capacity
    assert float(database["MaxCapacity"]["Default"]) >= sized.max_capacity
    proxy = load("infra/database.yaml")["Resources"]["DatabaseProxyTargetGroup"]["Properties"]
    assert proxy["ConnectionPoolConfigurationInfo"]["MaxConnectionsPercent"] == costs.PROXY_MAX_CONNECTIONS_PERCENT


@pytest.mark.parametrize(("delivery", "users"), [("online", "1"), ("batch", 100)])
def test_in_batch_mode_the_fanout_fills_each_message_so_a_batch_holds_many_users(template, delivery, users):
    # Given the fan-out's environment as deployed with SummaryDelivery online or batch
    props = template["Resources"]["FanoutFunction"]["Properties"]
    env = evaluate(template, props["Environment"]["Variables"], {"SummaryDelivery": delivery})
    # Then online keeps UsersPerMessage, and batch queues the most a message takes (one batch a
    # message: a million users a night is ten thousand batches, not a million)
    assert str(env["USERS_PER_MESSAGE"]) == str(users)
    assert template["Parameters"]["UsersPerMessage"]["MaxValue"] == 100


def test_the_events_relay_runs_alone_with_least_privilege_and_is_alarmed(template):
    # Given the events function
    relay = template["Resources"]["EventsFunction"]["Properties"]
    # Then one run at a time (a sink gets each user's events in order), every minute by default
    assert relay["ReservedConcurrentExecutions"] == 1
    assert relay["Events"]["Relay"]["Properties"]["Schedule"] == {"Ref": "EventsScheduleExpression"}
    assert template["Parameters"]["EventsScheduleExpression"]["Default"] == "rate(1 minute)"
    # And it may put events on the stack's bus only, and read only the webhooks' secrets
    policies = [p for p in relay["Policies"] if "If" not in p]
    assert {"EventBridgePutEventsPolicy": {"EventBusName": {"Ref": "EventBus"}}} in policies
    statements = [s for p in policies for s in p.get("Statement", [])]
    assert [(s["Action"], s["Resource"]["Sub"].split(":secret:")[1]) for s in statements] == [
        ("secretsmanager:GetSecretValue", "${AWS::StackName}/webhooks/*")
    ]
    # And the API creates and deletes those secrets, under the prefix it is given, and reads none
    api = template["Resources"]["ApiFunction"]["Properties"]
    assert api["Environment"]["Variables"]["WEBHOOK_SECRET_PREFIX"] == {"Sub": "${AWS::StackName}/webhooks/"}
    api_statements = [s for p in api["Policies"] if "If" not in p for s in p.get("Statement", [])]
    assert [sorted(s["Action"]) for s in api_statements] == [
        ["secretsmanager:CreateSecret", "secretsmanager:DeleteSecret"]
    ]
    # And its failures, a refused bus entry and a disabled endpoint raise alarms
    _alarm(template, "AWS/Lambda", "Errors", {"Name": "FunctionName", "Value": {"Ref": "EventsFunction"}})
    for metric in ("EventsNotRelayed", "WebhookEndpointsDisabled"):
        _alarm(template, "UserMemory", metric, {"Name": "service", "Value": "user-memory"})

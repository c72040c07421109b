"""template.yaml's migrate function and the Migrations custom resource: what cfn-lint does not check."""

from __future__ import annotations

import pytest
from user_memory.config import MigrateSettings

from tests.infrastructure.cfn import ROOT, evaluate, load, resources_of_type

pytestmark = pytest.mark.infrastructure

# CloudFormation's bound on a custom resource's ServiceTimeout (seconds), and Lambda's on a function.
CUSTOM_RESOURCE_TIMEOUT_LIMIT = 3600
LAMBDA_TIMEOUT_LIMIT = 900


@pytest.fixture(scope="module")
def template() -> dict:
    return load("template.yaml")


def test_the_migrations_resource_runs_the_migrate_function_on_each_new_version(template):
    # Given the custom resource
    resource = template["Resources"]["Migrations"]
    props = resource["Properties"]
    # Then it is answered by the migrate function (a stable ARN: CloudFormation refuses a changed token)
    assert resource["Type"] == "Custom::Migrations"
    assert props["ServiceToken"] == {"GetAtt": "MigrateFunction.Arn"}
    # And it changes, so CloudFormation sends an Update, whenever the function's code changes (a
    # release's migrations are in that code): SAM publishes a version per code
    assert props["Release"] == {"Ref": "MigrateFunction.Version"}
    assert template["Resources"]["MigrateFunction"]["Properties"]["AutoPublishAlias"]
    # And it can be switched off by the parameter
    assert props["Run"] == {"Ref": "MigrateOnDeploy"}
    assert set(template["Parameters"]["MigrateOnDeploy"]["AllowedValues"]) == {"true", "false"}


def test_the_migrate_function_answers_before_cloudformation_gives_up(template):
    # Given the function's timeout, the margin it keeps for answering and the resource's timeout
    timeout = template["Resources"]["MigrateFunction"]["Properties"]["Timeout"]
    margin = MigrateSettings.model_fields["deadline_margin_ms"].default / 1000
    service_timeout = template["Resources"]["Migrations"]["Properties"]["ServiceTimeout"]
    # Then statements get most of the invocation, the answer has its margin, and CloudFormation
    # waits longer than one invocation (not the default hour) within its own limit
    assert timeout <= LAMBDA_TIMEOUT_LIMIT and margin < timeout / 4
    assert timeout < service_timeout <= CUSTOM_RESOURCE_TIMEOUT_LIMIT


def test_every_other_function_changes_only_after_the_migrations(template):
    # Given the functions that serve traffic or run jobs
    functions = resources_of_type(template, "AWS::Serverless::Function")
    # Then each depends on the Migrations resource: new code arrives after the schema it expects,
    # and a failed migration rolls back before any of them changed
    for name, resource in functions.items():
        if name != "MigrateFunction":
            assert resource.get("DependsOn") == "Migrations", name


OWNER_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:owner"
ENDPOINT = "postgresql://proxy.example:5432/user_memory?sslmode=require"


@pytest.mark.parametrize(
    ("parameters", "accepted"),
    [
        ({"OwnerLoginSecretArn": OWNER_ARN, "DatabaseEndpoint": ENDPOINT}, True),
        ({"OwnerDatabaseSecretArn": OWNER_ARN}, True),
        ({"DatabaseUrl": "postgresql://localhost/user_memory"}, True),
        ({}, False),
        # the owner's DSN secret is not read once functions connect as logins
        ({"OwnerDatabaseSecretArn": OWNER_ARN, "DatabaseEndpoint": ENDPOINT}, False),
        # nor the owner's login secret without the endpoint to build a DSN on
        ({"OwnerLoginSecretArn": OWNER_ARN}, False),
    ],
)
def test_migrations_on_deploy_need_the_owners_credentials(template, parameters, accepted):
    # Given the rule for MigrateOnDeploy=true
    rule = template["Rules"]["MigrationsNeedTheOwnersDsn"]
    assert rule["RuleCondition"] == {"Equals": [{"Ref": "MigrateOnDeploy"}, "true"]}
    (assertion,) = rule["Assertions"]
    # Then a stack is accepted exactly when the migrate function would have the owner's credentials
    assert evaluate(template, assertion["Assert"], parameters) is accepted
    assert "OwnerLoginSecretArn" in assertion["AssertDescription"]


def test_the_migrate_function_reads_the_owners_and_the_logins_secrets_and_nothing_else(template):
    # Given the migrate function
    props = template["Resources"]["MigrateFunction"]["Properties"]
    env = props["Environment"]["Variables"]
    # Then it connects as the owner (its login's secret with DatabaseEndpoint, else its DSN secret)
    # and reads the two logins' credentials
    assert env == {
        "DATABASE_LOGIN_SECRET_NAME": {"If": ["OwnerConnectsAsLogin", {"Ref": "OwnerLoginSecretArn"}, ""]},
        "DATABASE_SECRET_NAME": {"If": ["HasOwnerDatabaseSecret", {"Ref": "OwnerDatabaseSecretArn"}, ""]},
        "API_LOGIN_SECRET_NAME": {"Ref": "ApiLoginSecretArn"},
        "SERVICE_LOGIN_SECRET_NAME": {"Ref": "ServiceLoginSecretArn"},
    }
    # And its only permissions are reading those secrets, each when used
    readable = []
    for policy in props["Policies"]:
        condition, granted, otherwise = policy["If"]
        assert otherwise == {"Ref": "AWS::NoValue"}
        secret = granted["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"]["Ref"]
        assert condition in (f"Has{secret.removesuffix('Arn')}", "OwnerConnectsAsLogin")
        readable.append(secret)
    assert sorted(readable) == [
        "ApiLoginSecretArn",
        "OwnerDatabaseSecretArn",
        "OwnerLoginSecretArn",
        "ServiceLoginSecretArn",
    ]


def test_the_migrate_functions_code_carries_the_repositorys_migrations():
    # Given the function's source folder
    folder = ROOT / load("template.yaml")["Resources"]["MigrateFunction"]["Properties"]["CodeUri"]
    link = folder / "migrations"
    # Then its migrations folder is a link to the repository's (sam build copies it whole; infra/check_build.py
    # checks the built copy byte for byte), not a copy that could drift
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "migrations").resolve()


def test_the_invocation_cloudformation_makes_is_never_retried_and_never_starts_too_late(template):
    # Given the custom resource's service token and the asynchronous invocation settings
    resources = template["Resources"]
    token = resources["Migrations"]["Properties"]["ServiceToken"]
    (name, config), *others = (
        (name, res["Properties"]) for name, res in resources.items() if res["Type"] == "AWS::Lambda::EventInvokeConfig"
    )
    # Then the settings apply to what the token invokes: the function's unqualified ARN is its $LATEST
    # (SAM's EventInvokeConfig property would configure the AutoPublishAlias instead, which nobody invokes)
    assert others == []
    assert token == {"GetAtt": "MigrateFunction.Arn"}
    assert (config["FunctionName"], config["Qualifier"]) == ({"Ref": "MigrateFunction"}, "$LATEST")
    assert "EventInvokeConfig" not in resources["MigrateFunction"]["Properties"]
    # And a failed run is not retried (a retry could migrate after the stack has rolled back)
    assert config["MaximumRetryAttempts"] == 0
    # And an event that waited in Lambda's queue starts early enough to answer before CloudFormation gives up
    timeout = resources["MigrateFunction"]["Properties"]["Timeout"]
    assert config["MaximumEventAgeInSeconds"] >= 60  # Lambda's lower bound
    assert config["MaximumEventAgeInSeconds"] + timeout < resources["Migrations"]["Properties"]["ServiceTimeout"]
    # And it is in place before the resource first invokes the function
    assert resources["Migrations"]["DependsOn"] == name

"""infra/cognito.yaml (the optional identity provider): cfn-lint offline, and that its tokens are
ones the application stack's API accepts without making every user an operator."""

from __future__ import annotations

import re

import pytest
from user_memory.config import ApiSettings

from tests.infrastructure.cfn import cfn_lint, load

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def pool() -> dict:
    return load("infra/cognito.yaml")


@pytest.fixture(scope="module")
def app() -> dict:
    return load("template.yaml")


def test_cfn_lint_passes_offline():
    # Given the identity stack
    # When cfn-lint checks it
    result = cfn_lint("infra/cognito.yaml")
    # Then it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_outputs_are_the_application_stacks_jwt_parameters(pool, app):
    # Given the outputs named after application parameters
    outputs = pool["Outputs"]
    assert {"JwtIssuer", "JwtAudience", "OperatorScope"} <= set(app["Parameters"]) & set(outputs)
    # Then the issuer is the user pool's, in a form the application's JwtIssuer accepts
    issuer = outputs["JwtIssuer"]["Value"]["Sub"]
    assert issuer == "https://cognito-idp.${AWS::Region}.${AWS::URLSuffix}/${UserPool}"
    example = issuer.replace("${AWS::Region}", "eu-west-1").replace("${AWS::URLSuffix}", "amazonaws.com")
    assert re.fullmatch(
        app["Parameters"]["JwtIssuer"]["AllowedPattern"], example.replace("${UserPool}", "eu-west-1_Ab")
    )
    # And the audience is the app client (Cognito access tokens carry client_id, which API Gateway checks)
    assert outputs["JwtAudience"]["Value"] == {"Ref": "AppClient"}
    # And the operator scope is the operators' group, by default the name the API looks for
    assert outputs["OperatorScope"]["Value"] == {"Ref": "OperatorGroupName"}
    default = pool["Parameters"]["OperatorGroupName"]["Default"]
    assert (
        default == app["Parameters"]["OperatorScope"]["Default"] == ApiSettings.model_fields["operator_scope"].default
    )
    assert pool["Resources"]["OperatorGroup"]["Properties"]["GroupName"] == {"Ref": "OperatorGroupName"}


def test_the_app_client_cannot_make_every_user_an_operator(pool):
    # Given the one app client
    client = pool["Resources"]["AppClient"]["Properties"]
    # Then it is public (no secret to leak from a browser) and uses the code flow only (PKCE; no implicit
    # flow, no client credentials, whose tokens carry no user)
    assert client["GenerateSecret"] is False
    assert client["AllowedOAuthFlows"] == ["code"]
    # And it grants no scope beyond sign-in: Cognito grants a client's scopes to everyone signing in
    # through it, so the operator's right must come from the group, never from a scope here
    assert set(client["AllowedOAuthScopes"]) <= {"openid", "email", "profile"}
    assert "ResourceServer" not in str(pool["Resources"])


def test_password_sign_in_from_scripts_is_opt_in(pool):
    # Given the app client's sign-in flows
    flows = pool["Resources"]["AppClient"]["Properties"]["ExplicitAuthFlows"]["If"]
    # Then USER_PASSWORD_AUTH is allowed only when the parameter says so (SRP and refresh always)
    assert flows[0] == "PasswordAuth"
    assert "ALLOW_USER_PASSWORD_AUTH" in flows[1] and "ALLOW_USER_PASSWORD_AUTH" not in flows[2]
    assert pool["Parameters"]["AllowPasswordAuth"]["Default"] == "false"
    assert pool["Conditions"]["PasswordAuth"] == {"Equals": [{"Ref": "AllowPasswordAuth"}, "true"]}


def test_callbacks_are_https_or_localhost_by_default(pool):
    # Given the default redirect URLs
    for name in ("CallbackUrls", "LogoutUrls"):
        for url in pool["Parameters"][name]["Default"].split(","):
            # Then each is https, or plain http on localhost for development
            assert url.startswith("https://") or url.startswith("http://localhost"), (name, url)


def test_the_users_outlive_the_stack(pool):
    # Given the user pool
    resource = pool["Resources"]["UserPool"]
    # Then deleting or replacing the stack's resource keeps the users (they are the deployment's data)
    assert resource["DeletionPolicy"] == "Retain" and resource["UpdateReplacePolicy"] == "Retain"
    assert resource["Properties"]["UsernameAttributes"] == ["email"]

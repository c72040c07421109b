"""infra/database.yaml (the database stack): cfn-lint offline, the network path, and its outputs."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.infrastructure.cfn import cfn_lint, load, references, refused_by_rules, resources_of_type

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def stack() -> dict:
    return load("infra/database.yaml")


@pytest.fixture(scope="module")
def app() -> dict:
    return load("template.yaml")


# How every DSN to the proxy asks for TLS: the proxy's certificate (ACM's, chained to Amazon's
# public roots) and its host name checked against the system's roots (libpq 16+).
PROXY_TLS = "sslmode=verify-full&sslrootcert=system"


def _props(stack: dict, name: str) -> dict:
    return stack["Resources"][name]["Properties"]


def test_cfn_lint_passes_offline():
    # Given the database stack, deployable on its own
    # When cfn-lint checks it
    result = cfn_lint("infra/database.yaml")
    # Then it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_private_subnets_in_two_availability_zones(stack):
    # Given the subnets the database, the proxy and the functions use
    groups = resources_of_type(stack, "AWS::RDS::DBSubnetGroup")
    (group,) = groups.values()
    subnets = [ref["Ref"] for ref in group["Properties"]["SubnetIds"]]
    # Then there are two, in different zones, neither handing out public addresses
    assert len(subnets) == 2
    zones = [_props(stack, s)["AvailabilityZone"] for s in subnets]
    assert sorted(z["Select"][0] for z in zones) == [0, 1]
    assert all(z["Select"][1] == {"GetAZs": ""} for z in zones)
    assert all(_props(stack, s)["MapPublicIpOnLaunch"] is False for s in subnets)
    assert _props(stack, "DatabaseProxy")["VpcSubnetIds"] == group["Properties"]["SubnetIds"]


def _ingress(stack: dict, group: str) -> list[dict]:
    rules = list(_props(stack, group).get("SecurityGroupIngress", []))
    for res in resources_of_type(stack, "AWS::EC2::SecurityGroupIngress").values():
        if res["Properties"]["GroupId"] == {"Ref": group}:
            rules.append(res["Properties"])
    return rules


def test_security_groups_chain_functions_to_proxy_to_database_on_5432(stack):
    # Given the three security groups
    proxy_in = _ingress(stack, "ProxySecurityGroup")
    database_in = _ingress(stack, "DatabaseSecurityGroup")
    # Then the proxy accepts PostgreSQL only from the functions' group
    assert [(r["FromPort"], r["ToPort"], r["SourceSecurityGroupId"]) for r in proxy_in] == [
        (5432, 5432, {"Ref": "LambdaSecurityGroup"})
    ]
    # And the database accepts PostgreSQL only from the proxy's group
    assert [(r["FromPort"], r["ToPort"], r["SourceSecurityGroupId"]) for r in database_in] == [
        (5432, 5432, {"Ref": "ProxySecurityGroup"})
    ]
    # And the cluster and the proxy sit in those groups
    assert _props(stack, "DatabaseCluster")["VpcSecurityGroupIds"] == [{"Ref": "DatabaseSecurityGroup"}]
    assert _props(stack, "DatabaseProxy")["VpcSecurityGroupIds"] == [{"Ref": "ProxySecurityGroup"}]


def test_aurora_serverless_v2_postgresql_16_encrypted_and_protected(stack):
    # Given the cluster
    cluster = _props(stack, "DatabaseCluster")
    params = stack["Parameters"]
    # Then it is Aurora PostgreSQL 16, Serverless v2 scaled by the parameters
    assert cluster["Engine"] == "aurora-postgresql"
    assert cluster["EngineVersion"] == {"Ref": "EngineVersion"}
    assert re.fullmatch(r"16\.\d+", params["EngineVersion"]["Default"])
    assert cluster["ServerlessV2ScalingConfiguration"] == {
        "MinCapacity": {"Ref": "MinCapacity"},
        "MaxCapacity": {"Ref": "MaxCapacity"},
    }
    (writer,) = resources_of_type(stack, "AWS::RDS::DBInstance").values()
    assert writer["Properties"]["DBInstanceClass"] == "db.serverless"
    assert writer["Properties"]["PubliclyAccessible"] is False
    # And its storage is encrypted, deletion protection follows the parameter, deletion keeps a snapshot
    assert cluster["StorageEncrypted"] is True
    assert cluster["DeletionProtection"] == {"If": ["ProtectDatabase", True, False]}
    assert stack["Resources"]["DatabaseCluster"]["DeletionPolicy"] == "Snapshot"
    # And the master password is generated in Secrets Manager, never a parameter
    assert "MasterSecret" in set(references(cluster["MasterUserPassword"]))


def test_the_proxy_requires_tls_and_authenticates_the_owner_and_each_functions_login(stack):
    # Given the RDS Proxy
    proxy = _props(stack, "DatabaseProxy")
    # Then it is a PostgreSQL proxy that refuses plain-text connections
    assert proxy["EngineFamily"] == "POSTGRESQL" and proxy["RequireTLS"] is True
    # And clients authenticate with the credentials of the owner's and the two logins' secrets
    secrets = [auth["SecretArn"] for auth in proxy["Auth"]]
    assert all(auth["AuthScheme"] == "SECRETS" for auth in proxy["Auth"])
    assert secrets == [{"Ref": "MasterSecret"}, {"Ref": "ApiLoginSecret"}, {"Ref": "ServiceLoginSecret"}]
    # which it can read, and nothing else
    role = _props(stack, proxy["RoleArn"]["GetAtt"].split(".")[0])
    statements = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert statements == [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secrets}]
    # And its target is the cluster
    (target,) = resources_of_type(stack, "AWS::RDS::DBProxyTargetGroup").values()
    assert target["Properties"]["DBClusterIdentifiers"] == [{"Ref": "DatabaseCluster"}]


@pytest.mark.parametrize(
    ("dsn", "user", "password_secret"),
    [
        ("DatabaseDsnSecret", r"\$\{MasterUsername\}", "MasterSecret"),
        ("ServiceDsnSecret", "user_memory_service_login", "ServiceLoginSecret"),
        ("ApiDsnSecret", "user_memory_api_login", "ApiLoginSecret"),
    ],
)
def test_each_dsn_secret_is_a_postgresql_url_to_the_proxy(stack, dsn, user, password_secret):
    # Given a DSN secret: the owner's (migrations, create-login) or a function's login
    text, variables = _props(stack, dsn)["SecretString"]["Sub"]
    # Then it is postgresql://user:password@proxy:5432/db, the proxy's certificate and name verified
    # against the system's roots
    assert re.fullmatch(
        rf"postgresql://{user}:"
        rf"\{{\{{resolve:secretsmanager:\$\{{{password_secret}\}}:SecretString:password\}}\}}"
        r"@\$\{Endpoint\}:5432/\$\{DatabaseName\}\?" + re.escape(PROXY_TLS),
        text,
    ), text
    assert variables == {"Endpoint": {"GetAtt": "DatabaseProxy.Endpoint"}}
    # And the password is alphanumeric, so the URL needs no escaping
    generated = _props(stack, password_secret)["GenerateSecretString"]
    assert generated["ExcludePunctuation"] is True and generated["GenerateStringKey"] == "password"
    # And a login's user name is the one its secret carries (create-login makes that role)
    if password_secret != "MasterSecret":
        assert f'"username": "{user}"' in generated["SecretStringTemplate"]


def test_the_outputs_feed_the_application_parameters(stack, app):
    # Given the stack's outputs
    outputs = stack["Outputs"]
    # Then the ones named after application parameters are those parameters' values: each
    # function's stack parameter is its own login's DSN, never the owner's
    names = {"DatabaseSecretArn", "ApiDatabaseSecretArn", "VpcSubnetIds", "VpcSecurityGroupIds"}
    names |= {"OwnerDatabaseSecretArn", "ApiLoginSecretArn", "ServiceLoginSecretArn"}  # the migrate function's
    assert names <= set(outputs) & set(app["Parameters"])
    assert outputs["DatabaseSecretArn"]["Value"] == {"Ref": "ServiceDsnSecret"}
    assert outputs["ApiDatabaseSecretArn"]["Value"] == {"Ref": "ApiDsnSecret"}
    assert outputs["OwnerDatabaseSecretArn"]["Value"] == {"Ref": "DatabaseDsnSecret"}
    assert outputs["ApiLoginSecretArn"]["Value"] == {"Ref": "ApiLoginSecret"}
    assert outputs["ServiceLoginSecretArn"]["Value"] == {"Ref": "ServiceLoginSecret"}
    assert outputs["VpcSubnetIds"]["Value"] == {"Join": [",", [{"Ref": "PrivateSubnetA"}, {"Ref": "PrivateSubnetB"}]]}
    assert outputs["VpcSecurityGroupIds"]["Value"] == {"Ref": "LambdaSecurityGroup"}
    assert app["Parameters"]["VpcSubnetIds"]["Type"] == "CommaDelimitedList"


def test_the_endpoint_output_is_the_proxy_without_credentials_and_fits_the_application_parameter(stack, app):
    # Given the DatabaseEndpoint output (each function adds its login's secret at run time)
    text = stack["Outputs"]["DatabaseEndpoint"]["Value"]["Sub"]
    # Then it is the proxy's address and database, TLS required, with no user or password
    assert text == "postgresql://${DatabaseProxy.Endpoint}:5432/${DatabaseName}?sslmode=verify-full&sslrootcert=system"
    # And, filled in, the application's parameter accepts it
    example = text.replace("${DatabaseProxy.Endpoint}", "p.proxy-abc.us-east-1.rds.amazonaws.com").replace(
        "${DatabaseName}", "user_memory"
    )
    assert re.fullmatch(app["Parameters"]["DatabaseEndpoint"]["AllowedPattern"], example)
    # And the owner's login secret the migrate function reads is the master secret (JSON credentials)
    assert stack["Outputs"]["MasterSecretArn"]["Value"] == {"Ref": "MasterSecret"}


def test_the_functions_have_a_way_out_a_nat_gateway_or_vpc_endpoints(stack):
    # Given the optional egress resources
    resources = stack["Resources"]
    # Then a NAT gateway (for the LLM on the internet) routes the private subnets when enabled
    route = resources["PrivateDefaultRoute"]
    assert route["Condition"] == "CreateNatGateway"
    assert route["Properties"]["RouteTableId"] == {"Ref": "PrivateRouteTable"}
    assert route["Properties"]["NatGatewayId"] == {"Ref": "NatGateway"}
    # And interface endpoints for the AWS APIs the functions call exist when enabled
    endpoints = resources_of_type(stack, "AWS::EC2::VPCEndpoint")
    services = {e["Properties"]["ServiceName"]["Sub"].rsplit(".", 1)[1]: e for e in endpoints.values()}
    assert set(services) == {"secretsmanager", "sqs", "logs", "monitoring", "s3"}
    for endpoint in endpoints.values():
        assert endpoint["Condition"] == "CreateVpcEndpoints"
    # (the interface ones answer at the services' own names)
    for name in ("secretsmanager", "sqs", "logs", "monitoring"):
        assert services[name]["Properties"]["PrivateDnsEnabled"] is True, name
    # And S3, where the migrate function answers CloudFormation's pre-signed URL, through a gateway
    # endpoint on the private subnets' routes
    s3 = services["s3"]["Properties"]
    assert s3["VpcEndpointType"] == "Gateway" and s3["RouteTableIds"] == [{"Ref": "PrivateRouteTable"}]
    assert stack["Conditions"]["CreateVpcEndpoints"] == {"Equals": [{"Ref": "EnableVpcEndpoints"}, "true"]}
    assert _props(stack, "Vpc")["EnableDnsHostnames"] is True


# The rule a group declares to have no outbound rule at all: an ICMP type/code pair that matches
# no packet, to one address. A group that declares no egress rule gets EC2's default allow-all.
NO_TRAFFIC = {"IpProtocol": "icmp", "FromPort": 252, "ToPort": 86, "CidrIp": "255.255.255.255/32"}


def _egress(stack: dict, group: str) -> list[dict]:
    """What a group may send: its inline egress rules and the SecurityGroupEgress resources on it,
    without the no-traffic placeholder."""
    rules = list(_props(stack, group).get("SecurityGroupEgress", []))
    for res in resources_of_type(stack, "AWS::EC2::SecurityGroupEgress").values():
        if res["Properties"]["GroupId"] == {"Ref": group}:
            rules.append(res["Properties"])
    return [r for r in rules if {k: r.get(k) for k in NO_TRAFFIC} != NO_TRAFFIC]


def test_no_security_group_keeps_the_default_allow_all_egress(stack):
    # Given every security group of the stack
    for name, group in resources_of_type(stack, "AWS::EC2::SecurityGroup").items():
        # Then each declares its egress, so EC2 adds no rule that allows all outbound traffic
        assert group["Properties"].get("SecurityGroupEgress"), name


def test_the_proxy_may_reach_the_cluster_on_5432_and_nothing_else(stack):
    # Given what the proxy's group may send (declaring an egress rule of its own, it has no default)
    assert _props(stack, "ProxySecurityGroup").get("SecurityGroupEgress")
    rules = _egress(stack, "ProxySecurityGroup")
    # Then it is PostgreSQL to the cluster's group, only
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"], r.get("DestinationSecurityGroupId")) for r in rules] == [
        ("tcp", 5432, 5432, {"Ref": "DatabaseSecurityGroup"})
    ]
    assert not any("CidrIp" in r or "CidrIpv6" in r for r in rules)
    # And the cluster and the endpoints send nothing of their own
    assert _egress(stack, "DatabaseSecurityGroup") == []
    assert _egress(stack, "EndpointSecurityGroup") == []


def test_every_secret_outlives_the_stack(stack):
    # Given the stack's secrets: the master user's, the logins' and the DSNs composed from them
    secrets = resources_of_type(stack, "AWS::SecretsManager::Secret")
    assert {"MasterSecret", "ApiLoginSecret", "ServiceLoginSecret"} <= set(secrets)
    for name, secret in secrets.items():
        # Then deleting the stack, or replacing the secret, leaves it (the final snapshot still has
        # these users and passwords)
        assert secret.get("DeletionPolicy") == "Retain", name
        assert secret.get("UpdateReplacePolicy") == "Retain", name


@pytest.mark.parametrize(
    ("nat", "endpoints", "refused"),
    [("true", "false", False), ("false", "true", False), ("true", "true", False), ("false", "false", True)],
)
def test_a_stack_whose_functions_have_no_way_out_is_refused_before_any_change(stack, nat, endpoints, refused):
    # Given the stack's parameters: a NAT gateway, the VPC endpoints, both or neither
    overrides = {"EnableNatGateway": nat, "EnableVpcEndpoints": endpoints}
    # When CloudFormation checks the template's rules
    failed = refused_by_rules(stack, overrides)
    # Then only neither is refused, by the rule that names the way out
    assert failed == (["FunctionsNeedAWayOut"] if refused else [])
    # And the defaults pass
    assert refused_by_rules(stack, {}) == []


def test_the_functions_driver_knows_the_system_roots_and_refuses_them_without_verify_full():
    # Given the libpq psycopg's binary wheel brings (the layer's)
    # Then it has sslrootcert=system (libpq 16 or later)
    assert psycopg.pq.version() >= 160000, psycopg.pq.version()
    # And it refuses the system roots with a mode that would not check the name, before connecting
    with pytest.raises(psycopg.OperationalError, match='weak sslmode "require"'):
        psycopg.connect("host=127.0.0.1 port=9 dbname=x user=x sslmode=require sslrootcert=system")


@pytest.mark.parametrize("dsn", ["DatabaseDsnSecret", "ServiceDsnSecret", "ApiDsnSecret"])
def test_each_dsn_parses_as_libpq_reads_it(stack, dsn):
    # Given a DSN secret as CloudFormation writes it (an endpoint and a generated password filled in)
    text, _ = _props(stack, dsn)["SecretString"]["Sub"]
    written = re.sub(r"\{\{resolve:[^}]*\}\}", "Abc123", text).replace("${Endpoint}", "p.proxy-x.rds.amazonaws.com")
    written = written.replace("${MasterUsername}", "memory_owner").replace("${DatabaseName}", "user_memory")
    # When libpq parses it
    options = psycopg.conninfo.conninfo_to_dict(written)
    # Then it verifies the proxy's certificate and name against the system's roots
    assert (options["sslmode"], options["sslrootcert"]) == ("verify-full", "system")

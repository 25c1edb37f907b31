"""The cloud boundary: one error type carrying AWS's code, one retry policy and endpoint on every
client, the install's tags from one helper, the account calls, and no boto3 outside ``cloud``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.conf import settings

import cloud
from cloud import account, errors, session, tags
from cloud import ec2 as cloud_ec2

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
SKIPPED_DIRS = {".venv", "tests", "bench", "node_modules", "var", ".git", "__pycache__"}


# --- errors ---------------------------------------------------------------------------------


def test_an_aws_error_carries_its_code_message_and_operation(aws):
    cli = session.client("ec2", REGION)
    with pytest.raises(cloud.CloudError) as caught:
        errors.call(cli, "describe_instances", InstanceIds=["i-0123456789abcdef0"])
    exc = caught.value
    assert exc.code == "InvalidInstanceID.NotFound"
    assert exc.operation == "ec2.describe_instances"
    assert "i-0123456789abcdef0" in exc.message
    assert exc.status == 400
    assert str(exc) == f"ec2.describe_instances failed: InvalidInstanceID.NotFound: {exc.message}"


def test_paginated_calls_raise_the_same_error(aws):
    cli = session.client("ec2", REGION)
    with pytest.raises(cloud.CloudError) as caught:
        list(errors.pages(cli, "describe_instances", "Reservations", InstanceIds=["i-0123456789abcdef0"]))
    assert caught.value.code == "InvalidInstanceID.NotFound"


def test_terminating_an_unknown_instance_is_fine_but_describing_it_by_id_is_not(aws):
    assert cloud_ec2.terminate(REGION, ["i-0123456789abcdef0"], only_managed=False) == []


def test_missing_credentials_are_a_cloud_error_too(aws, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr("boto3.DEFAULT_SESSION", None)  # it keeps the credentials it found
    with pytest.raises(cloud.CloudError) as caught:
        cloud_ec2.describe(REGION, ["i-0123456789abcdef0"])
    assert caught.value.code == "NoCredentialsError"
    assert str(caught.value) == "ec2.describe_instances failed: Unable to locate credentials"


def test_srifty_s_own_refusals_are_cloud_errors_with_a_code():
    exc = cloud_ec2._refused("not Srifty-managed: i-1")
    assert (exc.code, exc.operation) == ("Refused", "ec2.terminate_instances")
    assert str(exc) == "ec2.terminate_instances refused: not Srifty-managed: i-1"


# --- one client factory, one retry policy ----------------------------------------------------


@pytest.mark.parametrize("service", ["ec2", "pricing", "sts", "ssm", "service-quotas"])
def test_every_client_has_the_retry_policy_and_the_configured_endpoint(aws, service):
    cli = session.client(service, REGION)
    assert cli.meta.config.retries == {"total_max_attempts": 9, "mode": "adaptive"}  # 8 retries
    assert cli.meta.config.connect_timeout == 10 and cli.meta.config.read_timeout == 60
    assert cli.meta.endpoint_url == aws
    assert cli.meta.region_name == REGION


def test_without_an_endpoint_clients_go_to_aws(settings, monkeypatch):
    settings.AWS_ENDPOINT_URL = ""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert session.client("ec2", "eu-west-1").meta.endpoint_url == "https://ec2.eu-west-1.amazonaws.com"


def test_the_django_project_configures_cloud_from_its_settings(settings):
    settings.AWS_ENDPOINT_URL = "http://127.0.0.1:1"
    settings.INSTALL_ID = "abc123"
    assert cloud.current() == cloud.CloudSettings(endpoint_url="http://127.0.0.1:1", install_id="abc123")


def test_without_django_settings_come_from_the_environment(monkeypatch):
    from catalog.apps import cloud_settings

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    monkeypatch.setenv("SRIFTY_INSTALL_ID", "from-env")
    cloud.configure(None)
    try:
        assert cloud.current() == cloud.CloudSettings("http://127.0.0.1:2", "from-env")
        cloud.configure(lambda: cloud.CloudSettings(None, "fixed"))
        assert cloud.current().install_id == "fixed"
    finally:
        cloud.configure(cloud_settings)


# --- tags ---------------------------------------------------------------------------------------


def test_resource_tags_name_the_install_and_always_win_over_the_callers():
    got = tags.resource_tags({"srifty:job-id": 7, "srifty:managed": "false", "srifty:install-id": "theirs"})
    assert got == {"srifty:job-id": "7", "srifty:managed": "true", "srifty:install-id": settings.INSTALL_ID}
    with_token = tags.resource_tags({}, client_token="tok-1")
    assert with_token["srifty:client-token"] == "tok-1"
    specs = tags.tag_specifications({"a": "b"}, ["instance", "volume"])
    assert specs == [
        {"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "b"}]},
        {"ResourceType": "volume", "Tags": [{"Key": "a", "Value": "b"}]},
    ]
    assert tags.as_dict({"Tags": [{"Key": "a", "Value": "b"}]}) == {"a": "b"}
    assert (cloud.MANAGED_TAG, cloud.INSTALL_TAG) == ("srifty:managed", "srifty:install-id")


def test_no_install_id_no_tags(settings):
    settings.INSTALL_ID = ""
    with pytest.raises(cloud.CloudError) as caught:
        tags.resource_tags({})
    assert caught.value.code == "NoInstallId"


def test_launched_instances_carry_the_install_tags(aws):
    (instance_id,) = cloud_ec2.launch(
        cloud_ec2.LaunchSpec(region=REGION, instance_type="t3.micro", max_minutes=5, tags={"x": "y"})
    )
    (state,) = cloud_ec2.find_managed(REGION, {"x": "y"})
    assert state.id == instance_id
    assert state.tags == {"x": "y", "srifty:managed": "true", "srifty:install-id": settings.INSTALL_ID}


# --- account: STS, SSM, service quotas ---------------------------------------------------------


def test_caller_identity(aws):
    me = account.caller_identity(REGION)
    assert me.account.isdigit() and me.arn.startswith("arn:aws:")


def test_ssm_parameters(aws):
    session.client("ssm", REGION).put_parameter(Name="/srifty/test", Value="ami-123", Type="String")
    assert account.ssm_parameter(REGION, "/srifty/test") == "ami-123"
    assert account.ssm_parameter(REGION, "/srifty/missing") is None


def test_service_quotas(aws):
    value = account.service_quota(REGION, "ec2", account.EC2_QUOTAS[("on-demand", "P")])
    assert value is None or value >= 0


# --- the boundary -------------------------------------------------------------------------------


def _project_files():
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if SKIPPED_DIRS.intersection(rel.parts[:-1]):
            continue
        yield rel, path


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_cloud_imports_boto3_or_botocore():
    offenders = sorted(
        str(rel)
        for rel, path in _project_files()
        if rel.parts[0] != "cloud" and {"boto3", "botocore"} & _imported_roots(path)
    )
    assert offenders == []
    assert any(rel.parts[0] == "cloud" and "boto3" in _imported_roots(p) for rel, p in _project_files())


def test_cloud_is_a_plain_package():
    for rel, path in _project_files():
        if rel.parts[0] == "cloud":
            roots = _imported_roots(path)
            assert not roots & {"django", "rest_framework", "catalog", "profiler", "planner", "launcher"}, rel

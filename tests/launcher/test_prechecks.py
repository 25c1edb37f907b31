"""Launch pre-checks on moto (issue 22 item 9): credentials, vCPU quotas per class and market,
offerings in the region and zone, subnets; each failure names its fix. And the API endpoint
the launch dialog calls before the confirmation."""

from __future__ import annotations

import pytest
from botocore.awsrequest import AWSResponse
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from launcher import prechecks
from planner.app.models import PlanRecord
from tests.launcher.fake_aws import LaunchAws
from tests.launcher.test_task_launch import group, option

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake(aws, aws_hooks, catalog) -> LaunchAws:
    made = LaunchAws(aws)
    aws_hooks.extend(made.handlers())
    return made


def by_name(checks, name):
    return [c for c in checks if c.name == name]


def test_everything_in_order_passes_and_says_what_it_saw(fake):
    fake.quotas.update({"L-417A185B": 384})
    checks = prechecks.run(option())
    assert [c.status for c in checks] == ["ok"] * len(checks)
    assert [c.name for c in checks] == ["credentials", "quota", "offering", "subnet"]
    assert "AWS account 123456789012" in checks[0].message
    assert by_name(checks, "quota")[0].message == "on-demand P vCPUs: 192 needed + 0 running ≤ quota 384"
    assert "free addresses" in by_name(checks, "subnet")[0].message


def test_refused_credentials_stop_the_checks_with_the_fix(fake, aws_hooks):
    def refuse(**kwargs):
        parsed = {"Error": {"Code": "InvalidClientTokenId", "Message": "The security token is invalid."}}
        return AWSResponse("https://sts.example/", 403, {}, None), parsed

    aws_hooks.append(("before-call.sts.GetCallerIdentity", refuse))
    [check] = prechecks.run(option())
    assert (check.name, check.status) == ("credentials", "error")
    assert "InvalidClientTokenId" in check.message and "AWS_ACCESS_KEY_ID" in check.fix


def test_a_quota_too_small_for_the_option_and_what_runs_already_is_an_error(fake):
    fake.quotas.update({"L-417A185B": 199, "L-3819A6DF": 64})  # on-demand P, spot G
    fake.moto.run_instances(
        ImageId="ami-12c6146b", InstanceType="p3.2xlarge", MinCount=1, MaxCount=1
    )  # 8 vCPUs
    checks = prechecks.run(option(group(count=2), group("g5.xlarge", count=2, market="spot", gpus=1)))
    quota = {c.message.split(":")[0]: c for c in by_name(checks, "quota")}
    p = quota["on-demand P vCPUs"]
    assert p.status == "error" and "needs 192, 8 run already, the quota is 199" in p.message
    assert "--quota-code L-417A185B --desired-value 200" in p.fix
    assert quota["spot G vCPUs"].status == "ok"  # 2 x 4 vCPUs


def test_a_quota_aws_does_not_state_is_a_warning_not_an_error(fake):
    [quota] = by_name(prechecks.run(option()), "quota")
    assert quota.status == "warning" and "L-417A185B" in quota.message


def test_a_type_not_offered_in_the_region_or_zone_is_an_error_with_the_fix(fake):
    checks = prechecks.run(option(group("x9.fake", zone="use1-az1"), group("g5.xlarge", zone="use1-az9")))
    offering = by_name(checks, "offering")
    assert [c.status for c in offering] == ["error", "error"]
    assert offering[0].message == "EC2 does not offer x9.fake in us-east-1" and "Re-plan" in offering[0].fix
    assert offering[1].message == "EC2 does not offer g5.xlarge in zone use1-az9"


def test_a_zone_without_a_subnet_is_an_error_with_the_command_that_fixes_it(fake, settings):
    subnet = by_name(prechecks.run(option(group(zone="use1-az9"))), "subnet")[0]
    assert subnet.status == "error" and subnet.message == "no default subnet is in zone use1-az9"
    assert "aws ec2 create-default-subnet --availability-zone-id use1-az9" in subnet.fix
    other = fake.moto.describe_subnets(Filters=[{"Name": "availability-zone-id", "Values": ["use1-az2"]}])
    settings.JOB_SUBNET_IDS = [other["Subnets"][0]["SubnetId"]]
    subnet = by_name(prechecks.run(option(group(zone="use1-az1"))), "subnet")[0]
    assert subnet.message == "none of JOB_SUBNET_IDS is in zone use1-az1" and "JOB_SUBNET_IDS" in subnet.fix


def test_the_precheck_endpoint_answers_the_dialog(fake, user):
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    client = APIClient()
    client.force_authenticate(type(user).objects.get(pk=user.pk))
    plan = PlanRecord.objects.create(
        owner=user, request={}, status="solved", result={"plans": [option(group("x9.fake"))]}
    )
    resp = client.post("/api/v1/jobs/precheck/", {"plan": plan.pk, "rank": 1}, format="json")
    assert resp.status_code == 200
    body = resp.json()
    assert body["ok"] is False and body["region"] == "us-east-1"
    assert [(c["name"], c["status"]) for c in body["checks"]] == [
        ("credentials", "ok"),
        ("offering", "error"),
        ("subnet", "ok"),
    ]
    assert client.post("/api/v1/jobs/precheck/", {"plan": plan.pk, "rank": 7}, format="json").json() == {
        "rank": ["the plan has no option 7"]
    }
    viewer = APIClient()
    viewer.force_authenticate(type(user).objects.create_user("bob", password="x"))
    assert (
        viewer.post("/api/v1/jobs/precheck/", {"plan": plan.pk, "rank": 1}, format="json").status_code == 403
    )

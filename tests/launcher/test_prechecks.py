"""Launch pre-checks on moto (issue 22 item 9): credentials, vCPU quotas per class and market,
offerings in the region and zone, subnets; each failure names its fix. And the API endpoint
the launch dialog calls before the confirmation, and the one path every launch takes (issue 38
item 2): the preview and the launch ask again, ``manage.py launch`` too, and a refusal creates
nothing."""

from __future__ import annotations

import pytest
from botocore.awsrequest import AWSResponse
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from launcher import prechecks
from launcher.models import Job
from planner.app.models import PlanRecord
from tests.launcher.fake_aws import LaunchAws
from tests.launcher.test_task_launch import group, option

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake(aws, aws_hooks, catalog, settings) -> LaunchAws:
    settings.AWS_PRECHECKS = True
    made = LaunchAws(aws)
    aws_hooks.extend(made.handlers())
    return made


def refuse_credentials(aws_hooks) -> None:
    """STS answers as it does for keys it does not know (the caller's chain found some)."""

    def refuse(**kwargs):
        parsed = {"Error": {"Code": "InvalidClientTokenId", "Message": "The security token is invalid."}}
        return AWSResponse("https://sts.example/", 403, {}, None), parsed

    aws_hooks.append(("before-call.sts.GetCallerIdentity", refuse))


@pytest.fixture
def launcher_client(user) -> APIClient:
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    client = APIClient()
    client.force_authenticate(type(user).objects.get(pk=user.pk))
    return client


def launch_body(plan: PlanRecord) -> dict:
    return {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "100", "max_hours": 2}


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
    refuse_credentials(aws_hooks)
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


def test_an_option_becomes_one_typed_node_group_per_run_instances_with_an_address_per_efa_interface(
    catalog,
):
    groups = prechecks.launch_groups(option(group(count=2), group("g5.xlarge", count=1, market="spot")))
    assert [(g.instance_type, g.count, g.region, g.zone, g.market) for g in groups] == [
        ("p4d.24xlarge", 2, "us-east-1", "use1-az1", "on-demand"),
        ("g5.xlarge", 1, "us-east-1", "use1-az1", "spot"),
    ]
    assert groups[0].addresses_per_node == 4 and groups[1].addresses_per_node == 1  # p4d: 4 EFA cards


def test_a_preview_aws_would_refuse_is_a_400_with_every_check_and_its_fix_and_no_confirmation(
    fake, aws_hooks, user, launcher_client
):
    refuse_credentials(aws_hooks)
    plan = PlanRecord.objects.create(owner=user, request={}, status="solved", result={"plans": [option()]})
    resp = launcher_client.post("/api/v1/jobs/preview/", launch_body(plan), format="json")
    assert resp.status_code == 400
    [check] = resp.json()["prechecks"]
    assert (check["name"], check["status"]) == ("credentials", "error")
    assert "InvalidClientTokenId" in check["message"] and "AWS_ACCESS_KEY_ID" in check["fix"]
    assert "confirmation" not in resp.json() and not Job.objects.exists()


def test_the_launch_asks_again_on_submit_and_a_refusal_creates_no_job(fake, user, launcher_client):
    fake.quotas.update({"L-417A185B": 384})
    plan = PlanRecord.objects.create(owner=user, request={}, status="solved", result={"plans": [option()]})
    shown = launcher_client.post("/api/v1/jobs/preview/", launch_body(plan), format="json")
    assert shown.status_code == 200, shown.json()
    assert [c["name"] for c in shown.json()["prechecks"]] == ["credentials", "quota", "offering", "subnet"]
    fake.quotas.update({"L-417A185B": 96})  # someone else's instances took the quota meanwhile
    body = {**launch_body(plan), **shown.json()["requested"], "confirmation": shown.json()["confirmation"]}
    resp = launcher_client.post("/api/v1/jobs/", body, format="json")
    assert resp.status_code == 400
    quota = next(c for c in resp.json()["prechecks"] if c["name"] == "quota")
    assert quota["status"] == "error" and "--desired-value 192" in quota["fix"]
    assert not Job.objects.exists()


def test_manage_py_launch_stops_before_creating_a_job_when_a_check_fails(fake, aws_hooks, user, tmp_path):
    refuse_credentials(aws_hooks)
    superuser = type(user).objects.create_superuser("root", password="x")
    plan = PlanRecord.objects.create(
        owner=superuser, request={}, status="solved", result={"plans": [option()]}
    )
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nrun: python train.py\n")
    with pytest.raises(CommandError, match=r"1 pre-check\(s\) failed; nothing launched"):
        call_command("launch", "--plan", str(plan.pk), "--task", str(task), "--yes", "--user", "root")
    assert not Job.objects.exists()


def test_the_shared_checks_import_no_django_and_ask_aws_only_through_cloud():
    import ast
    from pathlib import Path

    import fleet.prechecks

    tree = ast.parse(Path(fleet.prechecks.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in imported} <= {
        "__future__",
        "math",
        "collections",
        "dataclasses",
        "cloud",
    }


def test_typed_node_groups_are_checked_region_by_region_with_the_credentials_asked_once(fake):
    from fleet.prechecks import LaunchGroup, run

    checks = run(
        [
            LaunchGroup("g5.xlarge", 1, "us-west-2", market="spot"),
            LaunchGroup("g5.xlarge", 2, "us-east-1", zone="use1-az1"),
        ]
    )
    names = ["credentials", "quota", "offering", "subnet", "quota", "offering", "subnet"]
    assert [c.name for c in checks] == names
    assert [c.status for c in checks if c.name == "offering"] == ["ok", "ok"]
    assert "in us-east-1" in checks[2].message and "in us-west-2" in checks[5].message

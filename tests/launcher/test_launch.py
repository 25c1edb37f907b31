"""Launching a plan option against moto's real EC2 server: the exact instances, templates,
tags, user-data, no duplicates on a retried task, and a clean teardown.

moto does not implement placement-group calls (nor honour ``Placement.GroupName``), so those
two wrapper functions are replaced by recorders here; ``tests/profiler/test_ec2.py`` covers
them with botocore's Stubber.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from cloud import ec2, session
from launcher import jobs, launch, options
from launcher.models import Job, JobEvent, JobStatus
from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db
REGION = "us-east-1"


def group(
    instance_type="g5.xlarge",
    market="spot",
    count=2,
    batch=32,
    price=0.5,
    gpus=1,
    zone="us-east-1a",
    batches=None,
):
    return {
        "instance_type": instance_type,
        "market": market,
        "zone": zone,
        "count": count,
        "gpus_per_node": gpus,
        "gpu_model": "A10G",
        "price_per_hour": price,
        "batch_per_node": batches or [batch] * count,
        "interruption_bucket": 1,
    }


def option(rank=1, groups=None):
    groups = groups or [group()]
    hourly = sum(g["count"] * g["price_per_hour"] for g in groups)
    return {
        "rank": rank,
        "region": REGION,
        "groups": groups,
        "global_batch": sum(sum(g["batch_per_node"]) for g in groups),
        "nodes": sum(g["count"] for g in groups),
        "gpus": sum(g["count"] * g["gpus_per_node"] for g in groups),
        "hourly_usd": hourly,
        "total_usd": hourly * 2,
        "time_h": 2.0,
        "time_p90_h": 2.4,
        "base_time_h": 2.0,
        "throughput_sps": 100.0,
        "effective_throughput_sps": 100.0,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "bottleneck": "compute",
        "deadline_miss_risk": None,
        "expected_interruptions": 0.1,
        "why": "cheapest",
    }


@pytest.fixture
def launcher(user):
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    return type(user).objects.get(pk=user.pk)


@pytest.fixture
def placement_groups(monkeypatch):
    calls: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        ec2, "create_placement_group", lambda region, name: calls.append(("create", region, name))
    )
    monkeypatch.setattr(
        ec2, "delete_placement_group", lambda region, name: calls.append(("delete", region, name))
    )
    return calls


@pytest.fixture
def cloud(aws, settings, placement_groups):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    settings.SITE_URL = "https://srifty.example.com"
    return session.client("ec2", REGION)


def make_job(owner, opt=None, command="train.py --epochs 3", spend="100", hours=10.0) -> Job:
    opt = opt or option()
    plan = PlanRecord.objects.create(
        owner=owner, request={"total_samples": 64_000}, status="solved", result={"plans": [opt]}
    )
    return jobs.create_job(owner, plan, opt["rank"], command, Decimal(spend), hours, confirm=True)


def instances(cli, job_id) -> list[dict]:
    resp = cli.describe_instances(
        Filters=[
            {"Name": "tag:srifty:job-id", "Values": [str(job_id)]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return sorted((i for r in resp["Reservations"] for i in r["Instances"]), key=lambda i: i["InstanceId"])


def user_data(cli, instance_id) -> str:
    attr = cli.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"]).decode()


def test_a_mixed_plan_launches_one_template_per_group_with_its_own_batch_and_market(
    cloud, launcher, placement_groups, django_capture_on_commit_callbacks
):
    opt = option(
        groups=[group(count=2, batch=48), group("g5.2xlarge", "on-demand", count=1, batch=64, price=1.2)]
    )
    with django_capture_on_commit_callbacks(execute=True):
        job = make_job(launcher, opt)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and len(job.instance_ids) == 3
    assert job.events.get(kind="launched").message.startswith("launched 3 instances: ")  # not a stale 0
    assert placement_groups == [("create", REGION, f"srifty-job-{job.pk}")]
    assert job.placement_group == f"srifty-job-{job.pk}"
    found = instances(cloud, job.pk)
    by_type = {t: [i for i in found if i["InstanceType"] == t] for t in ("g5.xlarge", "g5.2xlarge")}
    assert len(by_type["g5.xlarge"]) == 2 and len(by_type["g5.2xlarge"]) == 1
    assert all(i.get("InstanceLifecycle") == "spot" for i in by_type["g5.xlarge"])
    assert "InstanceLifecycle" not in by_type["g5.2xlarge"][0]
    assert {i["Placement"]["AvailabilityZone"] for i in found} == {"us-east-1a"}
    for inst in found:
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags["srifty:job-id"] == str(job.pk) and tags["srifty:managed"] == "true"
        assert tags["srifty:client-token"].startswith(job.launch_token)
        assert job.node_ips[inst["InstanceId"]] == inst["PrivateIpAddress"]  # recorded for the rendezvous
    script = user_data(cloud, by_type["g5.xlarge"][0]["InstanceId"])
    lines = script.splitlines()
    assert lines[1].startswith("shutdown -h +") and 595 <= int(lines[1].split("+")[1].split()[0]) <= 600
    assert "torchrun --nnodes" in script and "train.py --epochs 3" in script  # the command as a task's run
    assert f"export SRIFTY_JOB_ID={job.pk}" in script and "/rendezvous/?instance_id=" in script
    # The batch and the node's identity come from the rendezvous answer (taskfile.node_env).
    ranks = {iid: launch.rendezvous(job, iid)[1]["env"] for iid in job.instance_ids}
    assert [ranks[i["InstanceId"]]["SRIFTY_PER_NODE_BATCH"] for i in by_type["g5.xlarge"]] == ["48", "48"]
    assert ranks[by_type["g5.2xlarge"][0]["InstanceId"]]["SRIFTY_BATCH_PER_NODE"] == "64"
    assert {e["NNODES"] for e in ranks.values()} == {"3"}
    templates = cloud.describe_launch_templates()["LaunchTemplates"]
    assert sorted(t["LaunchTemplateName"] for t in templates) == [
        f"srifty-job-{job.pk}-g0",
        f"srifty-job-{job.pk}-g1",
    ]
    data = cloud.describe_launch_template_versions(LaunchTemplateId=job.launch_template_ids[0])[
        "LaunchTemplateVersions"
    ][-1]["LaunchTemplateData"]
    assert data["Placement"]["GroupName"] == f"srifty-job-{job.pk}"
    assert job.events.filter(kind="launched").exists()


def test_a_group_with_uneven_batches_is_split_so_each_node_gets_its_batch(cloud, launcher):
    opt = option(groups=[group(count=3, batches=[40, 40, 48])])
    launches = options.node_launches(opt)
    assert [(n.count, n.batch_per_node) for n in launches] == [(2, 40), (1, 48)]
    job = make_job(launcher, opt)
    assert launch.launch_job(job) == "launched 3 instances"
    job.refresh_from_db()
    batches = [launch.rendezvous(job, i)[1]["env"]["SRIFTY_BATCH_PER_NODE"] for i in job.instance_ids]
    assert batches == ["40", "40", "48"]  # in rank order


def lapse_claim(job) -> None:
    """The launch claim of ``job`` is older than JOB_LAUNCH_CLAIM_S: its launcher died."""
    JobEvent.objects.filter(job=job, kind=launch.LAUNCH_CLAIM).update(
        at=timezone.now() - timedelta(seconds=601)
    )


def test_two_callers_at_once_launch_the_job_once(cloud, launcher, monkeypatch):
    """``create_job`` queued the launch task and ``manage.py launch`` launches too: the second
    caller arrives while the first is creating its launch template, and does nothing."""
    job = make_job(launcher)
    real = ec2.create_launch_template
    calls: list[str] = []
    second: list[str] = []

    def meanwhile(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 1:
            second.append(launch.launch_job(Job.objects.get(pk=job.pk)))
        return real(*args, **kwargs)

    monkeypatch.setattr(ec2, "create_launch_template", meanwhile)
    assert launch.launch_job(job) == "launched 2 instances"
    (said,) = second
    assert said.startswith(f"job {job.pk} is being launched (since ") and "not launching it twice" in said
    assert (
        len(instances(cloud, job.pk)) == 2 and len(cloud.describe_launch_templates()["LaunchTemplates"]) == 1
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert JobEvent.objects.filter(job=job, kind=launch.LAUNCH_CLAIM).count() == 1


def test_a_retried_launch_task_does_not_launch_twice(cloud, launcher):
    job = make_job(launcher)
    assert launch.launch_job(job) == "launched 2 instances"
    first = Job.objects.get(pk=job.pk).instance_ids
    # The worker died after run_instances but before the job row said so; the task runs again
    # once its claim has lapsed.
    Job.objects.filter(pk=job.pk).update(status=JobStatus.LAUNCHING, instance_ids=[], node_ips={})
    assert "not launching it twice" in launch.launch_job(job)
    lapse_claim(job)
    assert launch.launch_job(job) == "launched 2 instances"
    assert Job.objects.get(pk=job.pk).instance_ids == first
    assert len(instances(cloud, job.pk)) == 2
    # And a re-delivered task after the launch is a no-op.
    assert "not launching it again" in launch.launch_job(job)
    assert len(instances(cloud, job.pk)) == 2


def test_a_retried_launch_writes_the_same_token_into_the_user_data(cloud, launcher):
    job = make_job(launcher)
    launch.launch_job(job)
    token = jobs.derived_token(Job.objects.get(pk=job.pk))
    Job.objects.filter(pk=job.pk).update(status=JobStatus.LAUNCHING)
    lapse_claim(job)
    launch.launch_job(job)
    job.refresh_from_db()
    assert job.token_matches(token)  # the nodes of the first attempt still authenticate
    assert f"SRIFTY_TOKEN={token}" in user_data(cloud, job.instance_ids[0])


def test_a_launch_error_fails_the_job_and_terminates_what_started(
    cloud, launcher, monkeypatch, django_capture_on_commit_callbacks
):
    opt = option(groups=[group(count=1), group("g5.2xlarge", "on-demand", count=1, price=1.2)])
    job = make_job(launcher, opt)
    real = ec2.launch_from_template
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise ec2.CloudError("InsufficientInstanceCapacity", "none left", "ec2.run_instances")
        return real(*args, **kwargs)

    monkeypatch.setattr(ec2, "launch_from_template", flaky)
    with django_capture_on_commit_callbacks(execute=True):
        assert launch.launch_job(job) == "failed to launch"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "InsufficientInstanceCapacity" in job.status_reason
    assert instances(cloud, job.pk) == []  # the first group's node was terminated


def test_a_job_stopped_while_it_launches_launches_no_further_group(cloud, launcher, monkeypatch):
    opt = option(groups=[group(count=1), group("g5.2xlarge", "on-demand", count=1, price=1.2)])
    job = make_job(launcher, opt)
    real = ec2.launch_from_template

    def launch_then_stop(*args, **kwargs):
        ids = real(*args, **kwargs)
        jobs.stop_job(job, "stopped by alice")  # the user clicks stop during the first group's launch
        return ids

    monkeypatch.setattr(ec2, "launch_from_template", launch_then_stop)
    assert "took down what it started" in launch.launch_job(job)
    assert instances(cloud, job.pk) == [] and len(Job.objects.get(pk=job.pk).instance_ids) == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED


def test_a_job_stopped_while_it_launches_leaves_no_template_placement_group_or_security_group(
    cloud, launcher, placement_groups, monkeypatch
):
    """The stop task ran when the user clicked stop, before this launch made its groups: the
    launch itself removes its launch template, placement group and security group."""
    job = make_job(launcher)
    real = ec2.launch_from_template

    def launch_then_stop(*args, **kwargs):
        ids = real(*args, **kwargs)
        jobs.stop_job(job, "stopped by alice")
        return ids

    monkeypatch.setattr(ec2, "launch_from_template", launch_then_stop)
    assert "took down what it started" in launch.launch_job(job)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and instances(cloud, job.pk) == []
    assert cloud.describe_launch_templates()["LaunchTemplates"] == []
    assert placement_groups[-1] == ("delete", REGION, f"srifty-job-{job.pk}")
    groups = cloud.describe_security_groups(Filters=[{"Name": "tag:srifty:job-id", "Values": [str(job.pk)]}])
    assert groups["SecurityGroups"] == []


def test_stopping_terminates_every_tagged_instance_and_deletes_templates(
    cloud, launcher, placement_groups, django_capture_on_commit_callbacks
):
    job = make_job(launcher)
    launch.launch_job(job)
    job.refresh_from_db()
    # An instance the job row never heard of (a partial launch) still carries the job tag.
    stray = ec2.launch(
        ec2.LaunchSpec(
            region=REGION, instance_type="g5.xlarge", max_minutes=5, tags={"srifty:job-id": str(job.pk)}
        )
    )
    with django_capture_on_commit_callbacks(execute=True):
        jobs.stop_job(job, "stopped by alice")
    assert instances(cloud, job.pk) == []
    assert cloud.describe_launch_templates()["LaunchTemplates"] == []
    assert ("delete", REGION, f"srifty-job-{job.pk}") in placement_groups
    terminated = job.events.get(kind="terminated").data["instance_ids"]
    assert set(stray) <= set(terminated) and set(job.instance_ids) <= set(terminated)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and not job.token_matches(jobs.derived_token(job))


def test_preview_shows_the_exact_instances_price_and_cap(launcher):
    opt = option(groups=[group(count=2, price=0.5), group("g5.2xlarge", "on-demand", count=1, price=1.2)])
    shown = options.preview(opt, Decimal("100"), 10.0)
    assert shown["hourly_usd"] == "2.2" and shown["max_spend_usd"] == "22.00" and shown["cap_hours"] == 10.0
    assert [(i["instance_type"], i["count"], i["market"], i["zone"]) for i in shown["instances"]] == [
        ("g5.xlarge", 2, "spot", "us-east-1a"),
        ("g5.2xlarge", 1, "on-demand", "us-east-1a"),
    ]
    capped = options.preview(opt, Decimal("11"), 10.0)
    assert capped["max_spend_usd"] == "11.00" and capped["cap_hours"] == pytest.approx(5.0)


def test_the_rendezvous_waits_while_a_replacement_has_not_taken_its_rank_yet(cloud, launcher):
    """``launch_replacement`` records the new node at once; until ``put_in_slots`` gives it the
    lost node's rank the job lists 3 nodes for 2 ranks: every node is told to ask again (the
    new one got a ValueError, a 500, and the others an nnodes of 3)."""
    from launcher import interruptions

    job = make_job(launcher)
    launch.launch_job(job)
    job.refresh_from_db()
    first, lost = job.instance_ids
    (new,) = launch.launch_replacement(job, "g5.xlarge", 1)
    job.refresh_from_db()
    assert len(job.instance_ids) == 3
    for asking in (new, first):
        assert launch.rendezvous(job, asking) == (
            202,
            {"detail": "a replacement is taking its rank; ask again"},
        )
    job = interruptions.put_in_slots(job, {lost: new})
    code, answer = launch.rendezvous(job, new)
    assert code == 200 and answer["node_rank"] == 1 and answer["nnodes"] == 2

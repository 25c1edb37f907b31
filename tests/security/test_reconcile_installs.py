"""Two Srifty installs in one AWS account (moto's real EC2 server): each reconciler, each job
teardown and each terminate call touches its own install's instances only.

Before install ids, the reconciler judged every ``srifty:managed`` instance by ``srifty:job-id``
in its *own* database, so install A terminated install B's training clusters ("job 7 does not
exist" here, or A's job 7 is finished while B's job 7 trains)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from planner.app import launch, reconcile
from planner.app.models import Job, JobStatus, PlanRecord
from profiler import ec2

pytestmark = pytest.mark.django_db
REGION = "us-east-1"


@pytest.fixture
def cloud(aws, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.RECONCILE_REGIONS = [REGION]
    return ec2.client("ec2", REGION)


def job(owner, **fields) -> Job:
    plan = PlanRecord.objects.create(owner=owner, request={}, status="solved", result={"plans": []})
    defaults = {"plan_rank": 1, "option": {"groups": []}, "region": REGION, "train_command": "train.py",
                "status": JobStatus.RUNNING, "hourly_usd": Decimal("1"), "max_spend_usd": Decimal("10"),
                "max_hours": 10, "predicted_iter_s": 0.5, "predicted_iter_p90_s": 0.6,
                "started_at": timezone.now()}  # fmt: skip
    return Job.objects.create(owner=owner, plan=plan, **{**defaults, **fields})


def vm_of(settings, install: str, tags: dict) -> str:
    settings.INSTALL_ID = install
    (instance_id,) = ec2.launch(ec2.LaunchSpec(region=REGION, instance_type="g5.xlarge", max_minutes=60, tags=tags))
    return instance_id


def live_ids(cli) -> set[str]:
    resp = cli.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return {i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]}


def test_every_instance_carries_its_install_id(cloud, settings):
    instance_id = vm_of(settings, "install-a", {"srifty:job-id": "1"})
    (state,) = ec2.describe(REGION, [instance_id])
    assert state.tags[ec2.INSTALL_TAG] == "install-a" and state.tags[ec2.MANAGED_TAG] == "true"


def test_each_reconciler_terminates_only_its_own_installs_orphans(cloud, settings, user):
    finished = job(user, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    # Install B trains its own job with the same id as A's finished one, and one A never heard of.
    b_same_id = vm_of(settings, "install-b", {"srifty:job-id": str(finished.pk)})
    b_unknown = vm_of(settings, "install-b", {"srifty:job-id": "99999"})
    b_run = vm_of(settings, "install-b", {"srifty:run-id": "88888"})
    a_done = vm_of(settings, "install-a", {"srifty:job-id": str(finished.pk)})
    a_orphan = vm_of(settings, "install-a", {"srifty:job-id": "99999"})

    settings.INSTALL_ID = "install-a"
    report = reconcile.reconcile([REGION])
    assert {a.instance_id for a in report.terminated} == {a_done, a_orphan}
    assert report.other_installs == 3 and report.scanned == 2
    assert {b_same_id, b_unknown, b_run} <= live_ids(cloud)
    assert not {a_done, a_orphan} & live_ids(cloud)
    assert "3 of other installs left alone" in report.lines()[-1]

    # B's own reconciler, on its database (here the same one: job 99999 is missing there too).
    settings.INSTALL_ID = "install-b"
    report_b = reconcile.reconcile([REGION])
    assert {a.instance_id for a in report_b.terminated} == {b_same_id, b_unknown, b_run}


def test_an_instance_without_an_install_id_is_kept_and_reported(cloud, settings):
    settings.INSTALL_ID = "install-a"
    legacy = cloud.run_instances(
        ImageId=ec2.default_image(REGION), MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": ec2.MANAGED_TAG, "Value": "true"},
                                                                 {"Key": "srifty:job-id", "Value": "424242"}]}],
    )["Instances"][0]["InstanceId"]  # fmt: skip
    report = reconcile.reconcile([REGION])
    (kept,) = report.kept
    assert kept.instance_id == legacy and ec2.INSTALL_TAG in kept.reason
    assert legacy in live_ids(cloud) and not report.terminated


def test_terminate_refuses_another_installs_instance(cloud, settings):
    theirs = vm_of(settings, "install-b", {"srifty:job-id": "7"})
    settings.INSTALL_ID = "install-a"
    with pytest.raises(ec2.AwsError, match="another Srifty install"):
        ec2.terminate(REGION, [theirs])
    assert theirs in live_ids(cloud)


def test_tearing_down_a_job_leaves_another_installs_job_of_the_same_id_running(cloud, settings, user):
    ours = job(user)
    theirs = vm_of(settings, "install-b", {"srifty:job-id": str(ours.pk)})
    mine = vm_of(settings, "install-a", {"srifty:job-id": str(ours.pk)})
    assert launch.job_instances(ours) == [mine]
    launch.teardown(ours)
    assert theirs in live_ids(cloud) and mine not in live_ids(cloud)

"""The reconciler against moto's real EC2 server: orphans go, live work stays, and another
install's instances in the same AWS account are never touched.

Before install ids, the reconciler judged every ``srifty:managed`` instance by ``srifty:job-id``
in its *own* database, so install A terminated install B's training clusters ("job 7 does not
exist" here, or A's job 7 is finished while B's job 7 trains)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from cloud import ec2, session
from fleet import reconcile
from launcher import launch
from launcher.models import Job, JobStatus
from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db
REGION = "us-east-1"


@pytest.fixture
def placement_groups(monkeypatch) -> set[str]:
    """This install's placement groups in REGION: moto has none, so the two wrappers the
    reconciler uses keep them in a set (tests/profiler/test_ec2.py stubs the real calls)."""
    made: set[str] = set()
    monkeypatch.setattr(ec2, "managed_placement_groups", lambda region: sorted(made))
    monkeypatch.setattr(ec2, "delete_placement_group", lambda region, name: made.discard(name))
    return made


@pytest.fixture
def cloud(aws, settings, placement_groups):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.RECONCILE_REGIONS = [REGION]
    return session.client("ec2", REGION)


def job(owner, **fields) -> Job:
    plan = PlanRecord.objects.create(owner=owner, request={}, status="solved", result={"plans": []})
    defaults = {
        "plan_rank": 1,
        "option": {"groups": []},
        "region": REGION,
        "train_command": "train.py",
        "status": JobStatus.RUNNING,
        "hourly_usd": Decimal("1"),
        "max_spend_usd": Decimal("10"),
        "max_hours": 10,
        "predicted_iter_s": 0.5,
        "predicted_iter_p90_s": 0.6,
        "started_at": timezone.now(),
    }
    return Job.objects.create(owner=owner, plan=plan, **{**defaults, **fields})


def vm(tags: dict, region=REGION) -> str:
    (instance_id,) = ec2.launch(
        ec2.LaunchSpec(region=region, instance_type="g5.xlarge", max_minutes=60, tags=tags)
    )
    return instance_id


def live_ids(cli) -> set[str]:
    resp = cli.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return {i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]}


def test_orphans_are_terminated_and_live_work_is_left_alone(cloud, user, make_run):
    live_job, done_job = job(user), job(user, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    capped = job(user, started_at=timezone.now() - timedelta(hours=11))  # 10 h cap + grace passed
    live_run = make_run(provider="ec2", region=REGION)
    done_run = make_run(provider="ec2", region=REGION, status="failed")
    late_run = make_run(provider="ec2", region=REGION, deadline_at=timezone.now() - timedelta(hours=1))
    keep = {
        vm({"srifty:job-id": str(live_job.pk)}),
        vm({"srifty:run-id": str(live_run.pk)}),
        vm({"Name": "managed, but nobody's"}),
    }
    cli_foreign = cloud.run_instances(ImageId=ec2.default_image(REGION), MinCount=1, MaxCount=1)["Instances"][
        0
    ]
    keep.add(cli_foreign["InstanceId"])  # not Srifty's at all
    doomed = {
        vm({"srifty:job-id": "999999"}): "job 999999 does not exist",
        vm({"srifty:job-id": str(done_job.pk)}): f"job {done_job.pk} is succeeded",
        vm({"srifty:job-id": str(capped.pk)}): f"job {capped.pk} is past its cap",
        vm({"srifty:run-id": str(done_run.pk)}): f"run {done_run.pk} is failed",
        vm({"srifty:run-id": str(late_run.pk)}): f"run {late_run.pk} is past its deadline",
        vm({"srifty:job-id": "not-a-number"}): "job not-a-number does not exist",
    }

    report = reconcile.reconcile()
    assert report.regions == [REGION] and not report.errors
    assert {a.instance_id: a.reason for a in report.terminated}.keys() == doomed.keys()
    for action in report.terminated:
        assert action.reason.startswith(doomed[action.instance_id])
    assert live_ids(cloud) == keep
    capped.refresh_from_db()
    assert capped.status == JobStatus.STOPPED and "reconciler" in capped.status_reason
    assert report.stopped_jobs == [capped.pk]
    assert Job.objects.get(pk=live_job.pk).status == JobStatus.RUNNING


def test_a_dry_run_reports_but_terminates_nothing(cloud, user):
    orphan = vm({"srifty:job-id": "424242"})
    report = reconcile.reconcile(dry_run=True)
    assert [a.instance_id for a in report.terminated] == [orphan] and report.dry_run
    assert orphan in live_ids(cloud)
    assert any(line.startswith(f"would terminate {orphan}") for line in report.lines())


def test_regions_come_from_recent_and_live_jobs_runs_and_settings(cloud, user, make_run, settings):
    job(user, region="eu-west-1")
    job(user, region="ap-south-1", status=JobStatus.STOPPED, created_at=timezone.now() - timedelta(days=30))
    make_run(provider="ec2", region="us-west-2")
    make_run(provider="local", region="sa-east-1")
    settings.RECONCILE_REGIONS = ["ca-central-1"]
    assert reconcile.regions_to_scan() == ["ca-central-1", "eu-west-1", "us-west-2"]


def test_the_command_prints_what_it_did_and_scans_the_regions_given(cloud, user):
    orphan = vm({"srifty:job-id": "31337"})
    out = StringIO()
    call_command("reconcile_instances", "--region", REGION, stdout=out)
    assert f"terminated {orphan} ({REGION}, job 31337): job 31337 does not exist" in out.getvalue()
    assert orphan not in live_ids(cloud)
    out = StringIO()
    call_command("reconcile_instances", "--region", REGION, "--dry-run", "--json", stdout=out)
    assert json.loads(out.getvalue())["terminated"] == []


def test_a_region_that_cannot_be_scanned_is_an_error_and_the_others_still_run(cloud, monkeypatch):
    real = ec2.find_managed

    def find(region, tag_filters=None, **kwargs):
        if region == "eu-west-1":
            raise ec2.CloudError("UnauthorizedOperation", "no", "ec2.describe_instances")
        return real(region, tag_filters, **kwargs)

    monkeypatch.setattr(ec2, "find_managed", find)
    orphan = vm({"srifty:run-id": "77777"})
    with pytest.raises(CommandError):
        call_command("reconcile_instances", "--region", "eu-west-1", "--region", REGION, stdout=StringIO())
    assert orphan not in live_ids(cloud)


def test_the_periodic_task_requeues_itself(cloud):
    from django_tasks import default_task_backend

    from launcher.tasks import reconcile_task

    result = reconcile_task.call([REGION], True, True)
    assert result["dry_run"] is True and result["regions"] == [REGION]
    (queued,) = default_task_backend.results
    assert queued.task.name == "reconcile_task" and queued.task.run_after is not None


# --- two installs, one AWS account ---------------------------------------------------------


def vm_of(settings, install: str, tags: dict) -> str:
    settings.INSTALL_ID = install
    return vm(tags)


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
        ImageId=ec2.default_image(REGION),
        MinCount=1,
        MaxCount=1,
        InstanceType="g5.xlarge",
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": ec2.MANAGED_TAG, "Value": "true"},
                    {"Key": "srifty:job-id", "Value": "424242"},
                ],
            }
        ],
    )["Instances"][0]["InstanceId"]
    report = reconcile.reconcile([REGION])
    (kept,) = report.kept
    assert kept.instance_id == legacy and ec2.INSTALL_TAG in kept.reason
    assert legacy in live_ids(cloud) and not report.terminated


def test_terminate_refuses_another_installs_instance(cloud, settings):
    theirs = vm_of(settings, "install-b", {"srifty:job-id": "7"})
    settings.INSTALL_ID = "install-a"
    with pytest.raises(ec2.CloudError, match="another Srifty install"):
        ec2.terminate(REGION, [theirs])
    assert theirs in live_ids(cloud)


def test_tearing_down_a_job_leaves_another_installs_job_of_the_same_id_running(cloud, settings, user):
    ours = job(user)
    theirs = vm_of(settings, "install-b", {"srifty:job-id": str(ours.pk)})
    mine = vm_of(settings, "install-a", {"srifty:job-id": str(ours.pk)})
    assert launch.job_instances(ours) == [mine]
    launch.teardown(ours)
    assert theirs in live_ids(cloud) and mine not in live_ids(cloud)


def test_security_groups_of_ended_or_gone_jobs_are_swept_and_live_ones_kept(cloud, user):
    ended, running = job(user, status=JobStatus.STOPPED), job(user)
    made = {
        key: ec2.create_cluster_security_group(REGION, f"srifty-job-{key}", {"srifty:job-id": str(pk)})
        for key, pk in (("ended", ended.pk), ("running", running.pk), ("gone", 99_999))
    }
    dry = reconcile.reconcile(dry_run=True)
    assert sorted(dry.security_groups) == sorted([made["ended"], made["gone"]])
    assert f"would delete security group {made['ended']} (its job has ended)" in dry.lines()
    report = reconcile.reconcile()
    assert sorted(report.security_groups) == sorted([made["ended"], made["gone"]])
    left = {g["GroupId"] for g in cloud.describe_security_groups()["SecurityGroups"]}
    assert made["running"] in left and not {made["ended"], made["gone"]} & left


def test_placement_groups_of_ended_or_gone_jobs_are_swept_and_live_ones_kept(cloud, user, placement_groups):
    """A launch stopped half-way or a server that died before its stop task left the groups:
    those of finished or unknown jobs go, a running job's and one not named for a job stay."""
    ended, running = job(user, status=JobStatus.STOPPED), job(user)
    names = {
        key: f"srifty-job-{pk}"
        for key, pk in (("ended", ended.pk), ("running", running.pk), ("gone", 99_999))
    }
    placement_groups.update([*names.values(), "someone-elses"])
    dry = reconcile.reconcile(dry_run=True)
    assert sorted(dry.placement_groups) == sorted([names["ended"], names["gone"]])
    assert f"would delete placement group {names['ended']} (its job has ended)" in dry.lines()
    assert len(placement_groups) == 4
    report = reconcile.reconcile()
    assert sorted(report.placement_groups) == sorted([names["ended"], names["gone"]])
    assert placement_groups == {names["running"], "someone-elses"} and report.errors == []


def test_a_region_whose_placement_groups_cannot_be_listed_still_gets_the_other_sweeps(
    cloud, user, monkeypatch
):
    orphan = vm({"srifty:job-id": "99999"})

    def unreadable(region):
        raise ec2.CloudError("UnauthorizedOperation", "not allowed", "ec2.describe_placement_groups")

    monkeypatch.setattr(ec2, "managed_placement_groups", unreadable)
    report = reconcile.reconcile()
    assert orphan in [a.instance_id for a in report.terminated]
    assert report.errors == [
        f"{REGION}: placement groups: ec2.describe_placement_groups failed: UnauthorizedOperation: not allowed"
    ]


def test_without_aws_credentials_it_logs_a_skip_not_a_scan_of_nothing(no_aws_credentials, caplog):
    """boto3's whole credential chain comes up empty (no environment keys, no profile files, no
    instance role): the reconciler says it skipped, not "0 managed instance(s) ... 0 terminated"."""
    with caplog.at_level("INFO", logger="fleet.reconcile"):
        report = reconcile.reconcile(regions=[REGION, "eu-west-1"])
    assert report.skipped == "no AWS credentials" and report.errors == [] and report.scanned == 0
    assert report.lines() == ["skipped: no AWS credentials"]
    logged = [r.getMessage() for r in caplog.records if r.name == "fleet.reconcile"]
    assert logged == ["reconcile: skipped: no AWS credentials"]
    out = StringIO()
    call_command("reconcile_instances", "--region", REGION, stdout=out)  # exit 0: nothing to do
    assert out.getvalue().strip() == "skipped: no AWS credentials"

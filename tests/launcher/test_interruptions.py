"""Spot interruptions of a running job against hand-worked cases (EC2 is moto's server; moto
never interrupts spot instances, so the notice comes from the node watcher's API call).

The job: 2 x g5.xlarge spot at $0.50/h ($1/h), 1,000 iterations of 28.8 s predicted (8 h of
work), a 10 h deadline, the plan's restart overhead 0.1 h (6 min)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from catalog.models import InstanceType, OnDemandPrice, PriceSource, Region
from cloud import ec2
from launcher import interruptions, jobs, launch, monitor
from launcher.models import Job, JobEvent, JobInterruption, JobReport, JobStatus
from planner.app.models import PlanRecord
from tests.support.jobs import g5_launch_option

pytestmark = pytest.mark.django_db
REGION = "us-east-1"
MIN = timedelta(minutes=1)


def option():
    """The launcher's g5 option at 28.8 s per iteration: 8 h of work (p90 8.5 h), $8."""
    return {
        **g5_launch_option(iter_s=28.8),
        "iter_time_p90_s": 30.0,
        "time_h": 8.0,
        "time_p90_h": 8.5,
        "throughput_sps": 4.44,
        "total_usd": 8.0,
    }


@pytest.fixture
def plan(owner):
    return PlanRecord.objects.create(
        owner=owner,
        request={
            "total_samples": 128_000,
            "objective": "cost",
            "deadline_hours": 10,
            "restart_overhead_h": 0.1,
        },
        status="solved",
        result={"plans": [option()]},
    )


def running(owner, plan, started_h_ago: float) -> tuple[Job, datetime]:
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("100"), 24, confirm=True)
    said = launch.launch_job(job)  # (a transactional test's commit has run the launch task already)
    assert said.startswith("launched") or said.endswith("is running; not launching it again")
    t0 = timezone.now() - timedelta(hours=started_h_ago)
    Job.objects.filter(pk=job.pk).update(started_at=t0)
    job = Job.objects.get(pk=job.pk)
    assert job.total_iterations == 1000 and job.status == JobStatus.RUNNING
    return job, t0


def report_at(job, at, iteration, rank=0):
    seq = JobReport.objects.filter(job=job, rank=rank).count() + 1
    JobReport.objects.create(
        job=job, rank=rank, seq=seq, iteration=iteration, iter_time_s=28.8, reported_at=at
    )


def token_client(api, job):
    raw = jobs.derived_token(job)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


@contextmanager
def ec2_says(instance_id: str, state: str, reason: str) -> Iterator[None]:
    """EC2's ``describe`` answers ``state`` for ``instance_id``, for ``reason``: moto never
    reclaims, stops or powers off an instance by itself."""
    real = ec2.describe

    def describe(region, ids):
        return [
            ec2.InstanceState(**{**s.__dict__, "state": state, "state_reason": reason})
            if s.id == instance_id
            else s
            for s in real(region, ids)
        ]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ec2, "describe", describe)
        yield


def test_a_spot_notice_records_the_lost_minutes_replaces_the_node_and_resumes_from_the_last_checkpoint(
    cloud, owner, plan, api
):
    """Hand-worked: checkpoints at t0+30 min (iteration 100) and t0+60 min (iteration 200);
    node 2's notice says it goes at t0+80 min. Lost: 80 - 60 = 20 min of training; restart
    assumed 6 min -> (20 + 6) / 60 h x $1/h = $0.4333. Progress at t0+80 min is iteration 220
    (1.76 h of work) against uniform progress's 8 h x 1.333/10 = 1.067 h: ahead, so the
    replacement is spot, same type, in rank 1. The replacement reports iteration 201 at
    t0+90 min: resumed from the checkpoint, restart measured 10 min -> $0.50 in all."""
    job, t0 = running(owner, plan, started_h_ago=1.5)
    first, taken = job.instance_ids
    client = token_client(api, job)
    for iteration in (100, 200):
        r = client.post(
            f"/api/v1/jobs/{job.pk}/checkpoints/",
            {"iteration": iteration, "path": f"s3://b/ckpt/{iteration}.pt"},
            format="json",
        )
        assert r.status_code == 201, r.content
    written = {100: t0 + 30 * MIN, 200: t0 + 60 * MIN}
    for ckpt in job.checkpoints.all():
        ckpt.reported_at = written[ckpt.iteration]
        ckpt.save()
    report_at(job, t0, 1)  # training began at t0
    report_at(job, t0 + 79 * MIN, 220)
    notice = {"instance_id": taken, "action": "terminate", "time": (t0 + 80 * MIN).isoformat()}
    r = client.post(f"/api/v1/jobs/{job.pk}/interruptions/", notice, format="json")
    assert r.status_code == 201, r.content
    assert client.post(f"/api/v1/jobs/{job.pk}/interruptions/", notice, format="json").status_code == 200

    assert monitor.watch_job(job, now=t0 + 78 * MIN) == "watching"
    row = JobInterruption.objects.get(job=job)
    assert (row.instance_id, row.cause, row.market, row.instance_type) == (
        taken,
        "spot_notice",
        "spot",
        "g5.xlarge",
    )
    assert row.at == t0 + 80 * MIN and row.checkpoint.iteration == 200
    assert row.lost_min == pytest.approx(20.0) and row.restart_min == pytest.approx(6.0)
    assert row.cost_usd == pytest.approx(26 / 60)
    (new,) = row.replacement_ids
    assert row.replacement_market == "spot"
    job.refresh_from_db()
    assert job.instance_ids == [first, new]  # the replacement took rank 1
    assert (
        cloud.describe_instances(InstanceIds=[new])["Reservations"][0]["Instances"][0]["InstanceType"]
        == "g5.xlarge"
    )
    assert launch.rendezvous(job, new, now=t0 + 88 * MIN)[1]["node_rank"] == 1  # it joins at t0+88 min
    assert JobEvent.objects.filter(job=job, kind="spot_interruption").count() == 1
    assert "resumes from iteration 200" in JobEvent.objects.get(job=job, kind="interruption_cost").message

    assert monitor.watch_job(job, now=t0 + 85 * MIN) == "watching"  # nothing new, nothing twice
    assert JobInterruption.objects.filter(job=job).count() == 1

    report_at(job, t0 + 90 * MIN, 201, rank=1)
    assert interruptions.note_resumes(job) == 1
    row.refresh_from_db()
    assert row.resumed_iteration == 201 and row.restart_min == pytest.approx(10.0)
    assert row.cost_usd == pytest.approx(0.5)
    resumed = JobEvent.objects.get(job=job, kind="resumed")
    assert "resumed at iteration 201 (checkpoint: 200)" in resumed.message and "$0.50" in resumed.message

    api.credentials()  # the job page's data, for its owner
    api.force_authenticate(owner)
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()["resilience"]
    assert [c["iteration"] for c in detail["checkpoints"]] == [200, 100]
    (shown,) = detail["interruptions"]
    # money as decimal strings (srifty_web.money)
    assert shown["lost_min"] == 20.0 and shown["restart_min"] == 10.0 and shown["cost_usd"] == "0.5000"
    assert detail["lost_min"] == 30.0 and detail["cost_usd"] == "0.5000"


def test_a_node_found_gone_without_a_checkpoint_loses_everything_since_the_start(cloud, owner, plan):
    """No checkpoint: an instance that is found terminated by EC2 (not by a user) at t0+40 min
    loses all 40 min, +6 min restart = $0.7667; its replacement resumes from the start."""
    job, t0 = running(owner, plan, started_h_ago=40 / 60)
    report_at(job, t0, 1)
    report_at(job, t0 + 39 * MIN, 90)
    lost = job.instance_ids[0]
    with ec2_says(lost, "terminated", "Server.SpotInstanceTermination: Spot instance termination"):
        assert monitor.watch_job(job, now=t0 + 40 * MIN) == "watching"
    row = JobInterruption.objects.get(job=job)
    assert row.checkpoint is None and row.cause == "terminated"
    assert row.lost_min == pytest.approx(40.0, abs=0.05) and row.cost_usd == pytest.approx(46 / 60, abs=1e-3)
    job.refresh_from_db()
    assert job.instance_ids[0] == row.replacement_ids[0] != lost


def test_the_deadline_guard_moves_to_on_demand_when_progress_falls_behind_uniform_progress(
    cloud, owner, plan
):
    """Hand-worked: C = 1,000 x 28.8 s = 8 h of work, D = 10 h, d = 0.1 h. The job trains at
    the planned 125 iterations/h for 4 h (500), then at 50/h. Uniform progress needs 100 t
    iterations, so 500 + 50 (t - 4) >= 100 t holds until t = 6 h: at 5.9 h (595 >= 590) the job
    stays on spot, at 6.1 h (605 < 610) it moves. On-demand g5.xlarge is $1.006/h in the
    catalog, so the rate goes from $1/h to 2 x 1.006 = $2.012/h from then on."""
    region = Region.objects.get_or_create(code=REGION)[0]
    itype = InstanceType.objects.get_or_create(
        name="g5.xlarge", defaults={"family": "g5", "vcpus": 4, "memory_gib": 16}
    )[0]
    OnDemandPrice.objects.create(
        instance_type=itype,
        region=region,
        usd_per_hour=Decimal("1.006"),
        observed_at=timezone.now(),
        source=PriceSource.ADMIN,
    )
    job, t0 = running(owner, plan, started_h_ago=6.1)
    spot_ids = list(job.instance_ids)

    def progress(t_h):
        return round(125 * t_h) if t_h <= 4 else 500 + round(50 * (t_h - 4))

    assert interruptions.guard(job, now=t0 + MIN) is None  # booting: nothing reported, not "behind"
    report_at(job, t0, 1)  # training began at t0
    report_at(job, t0 + timedelta(hours=5.9), progress(5.9))
    assert progress(5.9) == 595
    decision = interruptions.guard(job, now=t0 + timedelta(hours=5.9))
    assert decision is not None and decision.market == "spot"
    assert Job.objects.get(pk=job.pk).on_demand_since is None

    report_at(job, t0 + timedelta(hours=6.1), progress(6.1))
    moved_at = t0 + timedelta(hours=6.1)
    decision = interruptions.guard(job, now=moved_at)
    assert (decision.market, decision.reason) == ("on_demand", "behind")
    assert "4.84 h of 8.00 h done at 6.10 h" in decision.why and "needs 4.88 h" in decision.why
    job.refresh_from_db()
    assert job.on_demand_since == moved_at and job.hourly_usd == Decimal("2.0120")
    assert set(job.instance_ids).isdisjoint(spot_ids) and len(job.instance_ids) == 2
    for i in job.instance_ids:
        got = cloud.describe_instances(InstanceIds=[i])["Reservations"][0]["Instances"][0]
        assert got["InstanceType"] == "g5.xlarge" and "InstanceLifecycle" not in got  # on-demand
    assert {
        cloud.describe_instances(InstanceIds=[i])["Reservations"][0]["Instances"][0]["State"]["Name"]
        for i in spot_ids
    } <= {"shutting-down", "terminated"}
    event = JobEvent.objects.get(job=job, kind="deadline_guard")
    assert "moved 2 spot node(s) to on-demand" in event.message and "uniform progress" in event.message
    # spend: $1/h for 6.1 h, then $2.012/h; the cap follows the new rate
    assert job.spend_so_far(moved_at + timedelta(hours=1)) == pytest.approx(6.1 + 2.012)
    assert interruptions.guard(job, now=moved_at + MIN) is None  # on on-demand: nothing left to guard
    assert "moved 2 spot node(s)" in interruptions.summary(job)["guard"]


def test_an_interruption_while_behind_moves_the_whole_job_to_on_demand_at_no_extra_loss(cloud, owner, plan):
    """At t0+3 h with iteration 200 (1.6 h of work; uniform needs 2.4 h) a spot notice comes:
    the guard sends the replacement *and* the other spot node to on-demand in one restart."""
    job, t0 = running(owner, plan, started_h_ago=3)
    report_at(job, t0, 1)
    report_at(job, t0 + timedelta(hours=3) - MIN, 200)
    taken = job.instance_ids[1]
    row = interruptions.handle_loss(
        job, taken, "spot_notice", at=t0 + timedelta(hours=3), now=t0 + timedelta(hours=3)
    )
    assert row.replacement_market == "on-demand" and len(row.replacement_ids) == 2
    assert "moved to on-demand" in row.detail
    job.refresh_from_db()
    assert job.on_demand_since is not None and job.instance_ids == row.replacement_ids
    assert JobInterruption.objects.filter(job=job).count() == 1  # one restart, one cost


def test_auto_checkpoint_interval_is_young_daly_from_the_interruption_rate(owner, plan):
    """2 spot nodes of bucket 1 (5-10 %): lambda = -ln(0.925)/730 per node, M = 1/(2 lambda)
    = 4,682 h; with the assumed 1 min checkpoint, sqrt(2 x 1 x 280,900) - 1 = 748 min -> the
    60 min ceiling."""
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("100"), 24, confirm=True)
    minutes, why = interruptions.checkpoint_interval(job)
    assert minutes == 60.0 and "Young/Daly" in why and "assumed" in why
    plan.request = {**plan.request, "checkpoint_write_s": 30}
    plan.save()
    group = {**job.option["groups"][0], "count": 64, "interruption_bucket": 4}
    Job.objects.filter(pk=job.pk).update(option={**job.option, "groups": [group]})
    # 64 nodes of ">20 %": Lambda = 64 x -ln(0.75)/730 = 0.025221/h, M = 39.649 h = 2,378.9 min;
    # w = 30 s = 0.5 min -> sqrt(2 x 0.5 x 2,378.9) - 0.5 = 48.27 min
    minutes, why = interruptions.checkpoint_interval(Job.objects.get(pk=job.pk))
    assert minutes == pytest.approx(48.275, abs=0.01) and "0.5 min checkpoint x 40 h" in why


def test_a_notice_for_an_instance_of_another_job_is_refused(cloud, owner, plan, api):
    job, _ = running(owner, plan, started_h_ago=1)
    r = token_client(api, job).post(
        f"/api/v1/jobs/{job.pk}/interruptions/", {"instance_id": "i-0123456789abcdef0"}, format="json"
    )
    assert r.status_code == 403 and "not a node of this job" in r.json()["instance_id"][0]
    r = token_client(api, job).post(f"/api/v1/jobs/{job.pk}/checkpoints/", {"iteration": -1}, format="json")
    assert r.status_code == 400 and "iteration" in r.json()


def test_a_stopped_node_is_replaced_and_terminated_so_it_does_not_wait_for_the_job(cloud, owner, plan):
    job, t0 = running(owner, plan, started_h_ago=1)
    report_at(job, t0, 1)
    report_at(job, t0 + 59 * MIN, 150)  # ahead of uniform progress (100): the replacement is spot
    stopped = job.instance_ids[1]
    with ec2_says(stopped, "stopped", "Server.InternalError"):
        assert monitor.watch_job(job, now=t0 + 60 * MIN) == "watching"
    row = JobInterruption.objects.get(job=job)
    assert row.cause == "stopped" and row.replacement_ids and row.replacement_market == "spot"
    old = cloud.describe_instances(InstanceIds=[stopped])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert old in ("shutting-down", "terminated")


def test_a_survivor_whose_run_ended_with_its_lost_peer_is_replaced_too_at_no_extra_cost(
    cloud, owner, plan, api
):
    """After node 2's interruption (the hand-worked $0.4333 case) node 1's torchrun fails and
    its VM powers itself off: while the replacement has not trained yet, that is the cluster
    restarting, so node 1 is replaced as well (cause peer_lost, 0 min, $0) instead of counting
    as a finished node; once training resumed, a self-shutdown means done again."""
    job, t0 = running(owner, plan, started_h_ago=1.5)
    first, taken = job.instance_ids
    interruptions.record_checkpoint(job, 200, at=t0 + 60 * MIN)
    report_at(job, t0, 1)
    report_at(job, t0 + 79 * MIN, 220)
    row = interruptions.handle_loss(job, taken, "spot_notice", at=t0 + 80 * MIN, now=t0 + 78 * MIN)
    assert row.cost_usd == pytest.approx(26 / 60)
    with ec2_says(first, "terminated", "Client.InstanceInitiatedShutdown"):
        assert monitor.watch_job(job, now=t0 + 82 * MIN) == "watching"
    peer = JobInterruption.objects.get(job=job, instance_id=first)
    assert peer.cause == "peer_lost" and peer.cost_usd == 0 and peer.replacement_ids
    job.refresh_from_db()
    assert job.instance_ids == [peer.replacement_ids[0], row.replacement_ids[0]]  # both ranks kept
    assert interruptions.summary(job)["cost_usd"] == pytest.approx(26 / 60, abs=1e-4)
    for new in job.instance_ids:  # both replacements join, then the cluster trains again
        assert launch.rendezvous(job, new, now=t0 + 88 * MIN)[0] == 200
    report_at(job, t0 + 90 * MIN, 201)
    interruptions.note_resumes(job)
    peer.refresh_from_db()
    assert peer.resumed_iteration == 201 and peer.restart_min == 0
    assert interruptions.pending_restart(job) is None
    assert interruptions.summary(job)["cost_usd"] == pytest.approx(0.5, abs=1e-4)  # 20 + 10 measured


@contextmanager
def every_node_powers_off() -> Iterator[None]:
    """EC2 describes every node, replacements included, as powered off by its own script."""
    real = ec2.describe

    def describe(region, ids):
        return [
            ec2.InstanceState(**{**s.__dict__, "state": "terminated", "state_reason": monitor.SELF_SHUTDOWN})
            for s in real(region, ids)
        ]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ec2, "describe", describe)
        yield


def launched_instances(cloud, job) -> int:
    found = cloud.describe_instances(Filters=[{"Name": "tag:srifty:job-id", "Values": [str(job.pk)]}])
    return sum(len(r["Instances"]) for r in found["Reservations"])


def test_replacements_that_keep_failing_count_against_the_limit_and_then_fail_the_job(
    cloud, owner, plan, settings
):
    """JOB_MAX_REPLACEMENTS = 2. Node 2 is lost (replacement R1: 1 used); every node powers off
    before training again: node 1 restarts with its peer (peer_lost, not counted), R1 failed
    (replaced: 2 used); on the next pass those replacements fail too: past the limit, so the job
    fails saying why instead of launching new instances on every pass until the spend cap."""
    settings.JOB_MAX_REPLACEMENTS = 2
    plan.request = {k: v for k, v in plan.request.items() if k != "deadline_hours"}
    plan.save()
    job, t0 = running(owner, plan, started_h_ago=1.5)
    first, taken = job.instance_ids
    report_at(job, t0, 1)
    interruptions.handle_loss(job, taken, "gone", now=t0 + 78 * MIN)
    assert launched_instances(cloud, job) == 3
    with every_node_powers_off():
        assert monitor.watch_job(job, now=t0 + 80 * MIN) == "watching"
        causes = dict(JobInterruption.objects.filter(job=job).values_list("instance_id", "cause"))
        assert causes[first] == "peer_lost" and list(causes.values()).count("replacement_failed") == 1
        assert interruptions.replacements_used(job) == 2
        assert monitor.watch_job(job, now=t0 + 86 * MIN) == "failed"
        launched = launched_instances(cloud, job)
        assert monitor.watch_job(job, now=t0 + 92 * MIN) == "failed"
    assert launched_instances(cloud, job) == launched == 5
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "JOB_MAX_REPLACEMENTS = 2" in job.status_reason
    assert "not replaced" in JobEvent.objects.filter(job=job, kind="failed").get().message


def test_a_lost_node_past_the_limit_fails_the_job_and_keeps_its_cost(cloud, owner, plan, settings):
    settings.JOB_MAX_REPLACEMENTS = 0
    job, t0 = running(owner, plan, started_h_ago=1)
    report_at(job, t0, 1)
    row = interruptions.handle_loss(job, job.instance_ids[1], "gone", now=t0 + 30 * MIN)
    assert row.replacement_ids == [] and row.lost_min == pytest.approx(30.0)
    assert "not replaced" in row.detail
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "already replaced 0 nodes" in job.status_reason


def test_reports_of_the_run_being_lost_are_not_taken_for_the_resume(cloud, owner, plan):
    """EC2's spot request status shows node 2's notice at t0+78 min without an action time;
    both nodes keep training through the 2 notice minutes and the Reporter posts iteration 221
    at t0+78.5 min (checkpoint: 200). That is the old run, not the resume: only reports after
    the replacement joined (its rendezvous at t0+84 min) count, here iteration 201 at t0+86."""
    plan.request = {k: v for k, v in plan.request.items() if k != "deadline_hours"}
    plan.save()
    job, t0 = running(owner, plan, started_h_ago=1.5)
    taken = job.instance_ids[1]
    interruptions.record_checkpoint(job, 200, at=t0 + 60 * MIN)
    report_at(job, t0, 1)
    row = interruptions.handle_loss(job, taken, "spot_notice", at=None, now=t0 + 78 * MIN)
    (new,) = row.replacement_ids
    report_at(job, t0 + 78.5 * MIN, 221)
    report_at(job, t0 + 79 * MIN, 222, rank=1)
    assert interruptions.note_resumes(job) == 0
    assert interruptions.pending_restart(job) == row
    assert launch.rendezvous(Job.objects.get(pk=job.pk), new, now=t0 + 84 * MIN)[0] == 200
    assert interruptions.note_resumes(job) == 0  # nothing reported since it joined
    report_at(job, t0 + 86 * MIN, 201)
    assert interruptions.note_resumes(job) == 1
    row.refresh_from_db()
    assert row.resumed_iteration == 201 and row.restart_min == pytest.approx(8.0)
    assert interruptions.pending_restart(job) is None
    assert JobEvent.objects.get(job=job, kind="node_joined").data == {
        "replaces": taken,
        "rank": 1,
        "about": new,
    }


def test_a_spot_node_replaced_on_demand_for_lack_of_spot_capacity_bills_the_on_demand_price(
    cloud, owner, plan, monkeypatch
):
    """Spot has no g5.xlarge capacity when node 2 is lost at t0+78 min, so its replacement runs
    on-demand at the catalog's $1.006/h: the job's rate goes from 2 x $0.50 = $1/h to
    $0.50 + $1.006 = $1.506/h from then on (spend, and the spend cap with it); the job is not "on
    on-demand" (its other node is still spot, the deadline guard keeps watching it)."""
    region = Region.objects.get_or_create(code=REGION)[0]
    itype = InstanceType.objects.get_or_create(
        name="g5.xlarge", defaults={"family": "g5", "vcpus": 4, "memory_gib": 16}
    )[0]
    OnDemandPrice.objects.create(
        instance_type=itype,
        region=region,
        usd_per_hour=Decimal("1.006"),
        observed_at=timezone.now(),
        source=PriceSource.ADMIN,
    )
    plan.request = {k: v for k, v in plan.request.items() if k != "deadline_hours"}
    plan.save()
    job, t0 = running(owner, plan, started_h_ago=1.5)
    taken = job.instance_ids[1]
    real = ec2.launch_from_template

    def no_spot(region, template, count, market, *args, **kwargs):
        if market == "spot":
            raise ec2.CloudError("InsufficientInstanceCapacity", "no spot capacity", "ec2.run_instances")
        return real(region, template, count, market, *args, **kwargs)

    monkeypatch.setattr(ec2, "launch_from_template", no_spot)
    row = interruptions.handle_loss(job, taken, "gone", now=t0 + 78 * MIN)
    assert row.replacement_market == "on-demand" and "no spot replacement" in row.detail
    job.refresh_from_db()
    assert job.hourly_usd == Decimal("1.5060") and job.rate_since == t0 + 78 * MIN
    assert job.on_demand_since is None
    assert job.spend_so_far(t0 + 138 * MIN) == pytest.approx(1.3 + 1.506)
    said = JobEvent.objects.filter(job=job, kind="replacement").values_list("message", flat=True)
    assert any("instead of spot ($0.5/h): $1.0000/h -> $1.5060/h" in m for m in said), list(said)


def ec2_state(cloud, instance_id: str) -> str:
    return cloud.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]


def test_a_stopped_node_is_terminated_when_the_guard_moves_the_job_to_on_demand(cloud, owner, plan):
    """Behind at t0+3 h (iteration 200, uniform needs 2.4 h of 8): node 2 is found stopped; the
    guard moves both nodes to on-demand and the stopped node is terminated with the other."""
    job, t0 = running(owner, plan, started_h_ago=3)
    report_at(job, t0, 1)
    report_at(job, t0 + timedelta(hours=3) - MIN, 200)
    first, stopped = job.instance_ids
    row = interruptions.handle_loss(job, stopped, "stopped", now=t0 + timedelta(hours=3))
    assert row.replacement_market == "on-demand" and "moved to on-demand" in row.detail
    assert {ec2_state(cloud, first), ec2_state(cloud, stopped)} <= {"shutting-down", "terminated"}


def test_a_stopped_node_past_the_replacement_limit_is_terminated(cloud, owner, plan, settings):
    settings.JOB_MAX_REPLACEMENTS = 0
    job, t0 = running(owner, plan, started_h_ago=1)
    report_at(job, t0, 1)
    stopped = job.instance_ids[1]
    row = interruptions.handle_loss(job, stopped, "stopped", now=t0 + 30 * MIN)
    assert row.replacement_ids == [] and Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    assert ec2_state(cloud, stopped) in ("shutting-down", "terminated")


@contextmanager
def no_capacity(markets: set[str]) -> Iterator[None]:
    """EC2 has no capacity for ``markets`` (InsufficientInstanceCapacity at run_instances)."""
    real = ec2.launch_from_template

    def launch_from_template(region, template, count, market, *args, **kwargs):
        if market in markets:
            raise ec2.CloudError("InsufficientInstanceCapacity", "none left", "ec2.run_instances")
        return real(region, template, count, market, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ec2, "launch_from_template", launch_from_template)
        yield


def test_a_lost_node_without_capacity_is_replaced_by_a_later_pass_once_capacity_is_back(cloud, owner, plan):
    plan.request = {k: v for k, v in plan.request.items() if k != "deadline_hours"}
    plan.save()
    job, t0 = running(owner, plan, started_h_ago=1)
    report_at(job, t0, 1)
    taken = job.instance_ids[1]
    with no_capacity({"spot", "on-demand"}):
        row = interruptions.handle_loss(job, taken, "gone", now=t0 + 30 * MIN)
    assert row.replacement_ids == [] and "no on-demand replacement" in row.detail
    assert Job.objects.get(pk=job.pk).instance_ids[1] == taken  # still lost, still in its rank
    again = interruptions.handle_loss(job, taken, "gone", now=t0 + 31 * MIN)  # the next pass
    assert again.pk == row.pk and len(again.replacement_ids) == 1 and again.replacement_market == "spot"
    assert Job.objects.get(pk=job.pk).instance_ids[1] == again.replacement_ids[0]
    assert interruptions.handle_loss(job, taken, "gone", now=t0 + 32 * MIN) is None  # done: nothing twice
    assert JobInterruption.objects.filter(job=job).count() == 1


def test_a_lost_node_is_tried_again_at_most_job_replacement_tries_times(cloud, owner, plan, settings):
    settings.JOB_REPLACEMENT_TRIES = 3
    plan.request = {k: v for k, v in plan.request.items() if k != "deadline_hours"}
    plan.save()
    job, t0 = running(owner, plan, started_h_ago=1)
    report_at(job, t0, 1)
    taken = job.instance_ids[1]
    with no_capacity({"spot", "on-demand"}):
        interruptions.handle_loss(job, taken, "gone", now=t0 + 30 * MIN)  # spot, on-demand: 2 tries
        interruptions.handle_loss(job, taken, "gone", now=t0 + 31 * MIN)  # 2 more: 4 >= 3
        assert interruptions.handle_loss(job, taken, "gone", now=t0 + 32 * MIN) is None
    failed = JobEvent.objects.filter(job=job, kind="replacement", data__failed=True).count()
    assert failed == 4
    assert interruptions.handle_loss(job, taken, "gone", now=t0 + 33 * MIN) is None  # it stays lost

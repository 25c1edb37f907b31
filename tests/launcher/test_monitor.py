"""Watching jobs: drift, spot interruptions and lost nodes (with re-plan offers), the cap, and
the end of a job; EC2 is moto's real server. moto never interrupts spot instances, so the
interruption notice itself (``cloud.ec2.spot_interruption_notices``, tested with botocore's
Stubber in tests/profiler/test_ec2.py) is set per test."""

from __future__ import annotations

import sys
import types
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from cloud import ec2
from launcher import interruptions, jobs, launch, monitor
from launcher.models import Job, JobEvent, JobInterruption, JobReport, JobStatus
from planner.app.models import PlanRecord
from tests.launcher.test_interruptions import MIN, report_at, running
from tests.launcher.test_interruptions import option as interruption_option
from tests.support.jobs import g5_launch_option

pytestmark = pytest.mark.django_db
REGION = "us-east-1"


@pytest.fixture
def plan(owner):
    return PlanRecord.objects.create(
        owner=owner,
        request={"total_samples": 128_000, "objective": "cost", "deadline_hours": 10, "budget_usd": 100},
        status="solved",
        result={"plans": [g5_launch_option()]},
    )


@pytest.fixture
def replanner(monkeypatch, owner):
    """``planner.app.solving.create_plan`` (the lead's solver service) as a recorder that stores
    a solved plan with one on-demand option."""
    asked: list[dict] = []

    def create_plan(who, request):
        asked.append(request)
        return PlanRecord.objects.create(
            owner=who,
            request=request,
            status="solved",
            result={"plans": [g5_launch_option(1, count=1, market="on-demand", price=1.0)]},
        )

    monkeypatch.setitem(sys.modules, "planner.app.solving", types.SimpleNamespace(create_plan=create_plan))
    return asked


def launched(owner, plan, spend="100", hours=10.0) -> Job:
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal(spend), hours, confirm=True)
    assert launch.launch_job(job).startswith("launched")
    return Job.objects.get(pk=job.pk)


def running_without_ec2(owner, plan, iter_s=0.5) -> Job:
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("100"), 10, confirm=True)
    Job.objects.filter(pk=job.pk).update(predicted_iter_s=iter_s)
    jobs.mark_launched(job, instance_ids=["i-0aaa"], node_ips={"i-0aaa": "10.0.0.1"})
    return jobs.mark_running(job, "launched")


def report(job, times, at, rank=0, first_iteration=10, seq=None):
    seq = seq or (JobReport.objects.filter(job=job, rank=rank).count() + 1)
    JobReport.objects.bulk_create(
        [
            JobReport(
                job=job,
                rank=rank,
                seq=seq + i,
                iteration=first_iteration + i,
                iter_time_s=t,
                reported_at=at - timedelta(seconds=len(times) - i),
            )
            for i, t in enumerate(times)
        ]
    )


def state(aws_client, instance_id) -> str:
    return aws_client.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0][
        "State"
    ]["Name"]


# --- drift --------------------------------------------------------------------------------


def test_sustained_slowness_is_flagged_once_and_cleared_when_it_is_back(owner, plan):
    job = running_without_ec2(owner, plan, iter_s=0.5)
    now = timezone.now()
    report(job, [0.62] * 30, now)  # 24% slower than predicted, over minutes
    assert monitor.check_drift(job, now) == "flagged"
    job.refresh_from_db()
    assert job.drift_since is not None
    assert monitor.check_drift(job, now) is None  # still drifting: no second event
    (event,) = JobEvent.objects.filter(job=job, kind="drift")
    assert event.data["ratio"] == pytest.approx(1.24) and event.data["rank_medians"] == {"0": 0.62}
    assert "24% above the predicted" in event.message

    later = now + timedelta(minutes=6)  # the slow minutes have left the 5-minute window
    report(job, [0.5] * 30, later)
    assert monitor.check_drift(job, later) == "cleared"
    job.refresh_from_db()
    assert job.drift_since is None and JobEvent.objects.filter(job=job, kind="drift_cleared").count() == 1


def test_a_few_slow_steps_and_warm_up_iterations_do_not_count_as_drift(owner, plan, settings):
    job = running_without_ec2(owner, plan, iter_s=0.5)
    now = timezone.now()
    report(job, [5.0, 4.0, 3.0], now, first_iteration=1)  # iterations 1-3: warm-up
    report(job, [0.5] * 10 + [2.0, 2.0], now, first_iteration=4, seq=100)  # two hiccups among normal steps
    assert monitor.check_drift(job, now) is None
    report(job, [0.9] * 3, now, seq=200)
    settings.JOB_DRIFT_MIN_REPORTS = 1000  # too few reports in the window: no verdict
    assert monitor.check_drift(job, now) is None and not Job.objects.get(pk=job.pk).drift_since


def test_a_straggler_rank_is_named_in_the_drift_event(owner, plan):
    job = running_without_ec2(owner, plan, iter_s=0.5)
    now = timezone.now()
    report(job, [0.7] * 20, now, rank=0)
    report(job, [0.7] * 20, now, rank=1)
    report(job, [1.4] * 20, now, rank=2)
    assert monitor.check_drift(job, now) == "flagged"
    assert "slowest rank 2" in JobEvent.objects.get(job=job, kind="drift").message


# --- spot interruptions, lost nodes, the cap -----------------------------------------------


def test_a_spot_interruption_adds_one_event_and_a_replan_offer_for_the_remaining_work(
    cloud, owner, plan, replanner, monkeypatch
):
    job = launched(owner, plan)
    Job.objects.filter(pk=job.pk).update(
        started_at=timezone.now() - timedelta(hours=1)
    )  # an hour in, $1 spent
    report(job, [0.5] * 100, timezone.now())  # iterations 10..109 of 128 samples each
    taken = job.instance_ids[1]
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: [taken])
    assert monitor.watch_job(job) == "watching"  # one node still runs
    assert monitor.watch_job(job) == "watching"
    (event,) = JobEvent.objects.filter(job=job, kind="spot_interruption")
    assert taken in event.message
    offer = monitor.latest_offer(job)
    assert offer is not None and offer.data["remaining_samples"] == 128_000 - (10 + 99) * 128
    (asked,) = replanner  # one offer, not one per watch pass
    assert asked["total_samples"] == 128_000 - 109 * 128 and asked["objective"] == "cost"
    assert asked["deadline_hours"] == pytest.approx(9, abs=0.01)  # what is left of deadline and budget
    assert asked["budget_usd"] == pytest.approx(99, abs=0.01)
    assert "1x g5.xlarge (on-demand" in offer.message


def test_losing_every_node_fails_the_job_and_keeps_the_offer(
    cloud, owner, plan, replanner, django_capture_on_commit_callbacks
):
    job = launched(owner, plan)
    cloud.terminate_instances(InstanceIds=job.instance_ids)  # e.g. someone else terminated them
    with django_capture_on_commit_callbacks(execute=True):
        assert monitor.watch_job(job) == "failed"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "every node is gone" in job.status_reason
    assert JobEvent.objects.filter(job=job, kind="node_lost").count() == 2
    assert monitor.latest_offer(job) is not None and "re-plan is offered" in job.status_reason


def test_passing_the_spend_cap_stops_the_job_and_terminates_its_instances(
    cloud, owner, plan, django_capture_on_commit_callbacks
):
    job = launched(owner, plan, spend="2", hours=10)  # $1/h: the $2 cap comes after 2 h
    assert job.cap_at - job.started_at == timedelta(hours=2)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=2, minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert monitor.watch_job(job) == "capped"
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and "spend cap" in job.status_reason
    assert {state(cloud, i) for i in job.instance_ids} <= {"shutting-down", "terminated"}
    assert job.spend_so_far() == pytest.approx(2.0, abs=0.05)


def test_passing_the_time_cap_says_so(owner, plan, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = running_without_ec2(owner, plan)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=11))
    assert monitor.watch_job(job) == "capped"
    assert "time cap (10 h)" in Job.objects.get(pk=job.pk).status_reason


def test_nodes_that_shut_themselves_down_after_the_work_end_the_job_as_succeeded(
    owner, plan, monkeypatch, settings
):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = running_without_ec2(owner, plan)
    gone = ec2.InstanceState(
        id="i-0aaa",
        state="terminated",
        instance_type="g5.xlarge",
        market="spot",
        launch_time=None,
        tags={},
        private_ip=None,
        public_dns=None,
        state_reason="Client.InstanceInitiatedShutdown",
    )
    monkeypatch.setattr(ec2, "describe", lambda region, ids: [gone])
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: [])
    report(job, [0.5] * 5, timezone.now(), first_iteration=job.total_iterations - 4)
    assert monitor.watch_job(job) == "succeeded"
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_nodes_that_shut_down_early_fail_the_job(owner, plan, monkeypatch, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = running_without_ec2(owner, plan)
    gone = ec2.InstanceState(
        id="i-0aaa",
        state="terminated",
        instance_type="g5.xlarge",
        market="spot",
        launch_time=None,
        tags={},
        private_ip=None,
        public_dns=None,
        state_reason="Client.InstanceInitiatedShutdown",
    )
    monkeypatch.setattr(ec2, "describe", lambda region, ids: [gone])
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: [])
    report(job, [0.5] * 5, timezone.now())
    assert monitor.watch_job(job) == "failed"
    assert "after 14 of 1000 iterations" in Job.objects.get(pk=job.pk).status_reason


@pytest.fixture
def undated_plan(owner):
    """test_interruptions' 2 x g5.xlarge spot plan (1,000 iterations) without a deadline: the
    deadline guard stays out of the way."""
    return PlanRecord.objects.create(
        owner=owner,
        request={"total_samples": 128_000, "objective": "cost", "restart_overhead_h": 0.1},
        status="solved",
        result={"plans": [interruption_option()]},
    )


def every_node_shut_itself_down(monkeypatch) -> None:
    """EC2 describes every node as powered off by its own script (the end of ``run``)."""
    real = ec2.describe

    def describe(region, ids):
        return [
            ec2.InstanceState(**{**s.__dict__, "state": "terminated", "state_reason": monitor.SELF_SHUTDOWN})
            for s in real(region, ids)
        ]

    monkeypatch.setattr(ec2, "describe", describe)


def test_a_job_whose_lost_node_was_replaced_and_resumed_succeeds_when_its_nodes_finish(
    cloud, owner, undated_plan, monkeypatch
):
    """Node 2's spot notice at t0+80 min, its replacement joins and the run resumes from the
    checkpoint of iteration 200, then trains to 1,000/1,000 and every node powers off: the loss
    was handled, so the job succeeded (it ended "every node is gone (1 lost)" before)."""
    job, t0 = running(owner, undated_plan, started_h_ago=2.5)
    first, taken = job.instance_ids
    interruptions.record_checkpoint(job, 200, at=t0 + 60 * MIN)
    report_at(job, t0, 1)
    interruptions.record_notice(job, taken, "terminate", (t0 + 80 * MIN).isoformat())
    assert monitor.watch_job(job, now=t0 + 79 * MIN) == "watching"
    (new,) = JobInterruption.objects.get(job=job, instance_id=taken).replacement_ids
    assert launch.rendezvous(Job.objects.get(pk=job.pk), new)[0] == 200
    report_at(job, timezone.now() + MIN, 201, rank=1)
    report_at(job, timezone.now() + 2 * MIN, 1000)
    every_node_shut_itself_down(monkeypatch)
    assert monitor.watch_job(job, now=timezone.now() + 3 * MIN) == "succeeded"
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and "training finished" in job.status_reason
    assert monitor.unhandled_losses(job) == []


def test_a_lost_node_that_was_never_replaced_still_fails_the_job(cloud, owner, undated_plan, monkeypatch):
    """Someone terminated node 2 (no replacement: they meant it); node 1 later powers off
    after iteration 1,000: the loss was never handled, so the job failed."""
    job, t0 = running(owner, undated_plan, started_h_ago=2.5)
    taken = job.instance_ids[1]
    report_at(job, t0, 1)
    cloud.terminate_instances(InstanceIds=[taken])
    real = ec2.describe

    def user_terminated(region, ids):
        return [
            ec2.InstanceState(**{**s.__dict__, "state_reason": "Client.UserInitiatedShutdown"})
            if s.id == taken
            else s
            for s in real(region, ids)
        ]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ec2, "describe", user_terminated)
        assert monitor.watch_job(job, now=t0 + 79 * MIN) == "watching"
    assert not JobInterruption.objects.filter(job=job).exists()
    report_at(job, t0 + 140 * MIN, 1000)
    assert monitor.unhandled_losses(job) == [taken]
    every_node_shut_itself_down(monkeypatch)
    assert monitor.watch_job(job, now=t0 + 141 * MIN) == "failed"
    assert "every node is gone (1 lost or interrupted)" in Job.objects.get(pk=job.pk).status_reason


def test_the_watch_task_requeues_itself_while_the_job_runs(owner, plan, settings, monkeypatch):
    from django_tasks import default_task_backend

    from launcher import tasks as job_tasks

    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = running_without_ec2(owner, plan)
    monkeypatch.setattr(monitor, "watch_job", lambda j: "watching")
    assert job_tasks.watch_job_task.call(job.pk) == "watching"
    (queued,) = default_task_backend.results
    assert (
        queued.task.name == "watch_job_task" and queued.args == [job.pk] and queued.task.run_after is not None
    )


# --- re-plan: one click, then apply --------------------------------------------------------


def test_apply_replan_stops_the_old_cluster_and_launches_the_new_option(
    cloud, owner, plan, replanner, monkeypatch, user_api, django_capture_on_commit_callbacks
):
    job = launched(owner, plan, spend="50", hours=10)
    old_ids = list(job.instance_ids)
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: [old_ids[0]])
    monitor.watch_job(job)
    offered = user_api.post(f"/api/v1/jobs/{job.pk}/replan/", {}, format="json")
    assert offered.status_code == 200, offered.content
    preview = offered.json()
    assert preview["replaces"] == job.pk and preview["instances"][0]["market"] == "on-demand"
    assert Decimal(preview["requested"]["max_spend_usd"]) <= Decimal("50")  # what is left of the cap
    apply_body = {
        "plan": preview["plan"],
        "rank": preview["rank"],
        "confirmation": preview["confirmation"],
        **preview["requested"],
    }
    # A confirmation for a fresh launch does not apply a re-plan (it is bound to the job it replaces).
    fresh = launch.confirmation_for(
        owner,
        preview["plan"],
        preview["rank"],
        "train.py",
        Decimal(preview["requested"]["max_spend_usd"]),
        preview["requested"]["max_hours"],
    )
    resp = user_api.post(
        f"/api/v1/jobs/{job.pk}/replan/apply/", {**apply_body, "confirmation": fresh}, format="json"
    )
    assert resp.status_code == 400 and "confirmation" in resp.json()
    with django_capture_on_commit_callbacks(execute=True):
        resp = user_api.post(f"/api/v1/jobs/{job.pk}/replan/apply/", apply_body, format="json")
    assert resp.status_code == 201, resp.content
    new = Job.objects.get(pk=resp.json()["id"])
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and f"replaced by job {new.pk}" in job.status_reason
    assert {state(cloud, i) for i in old_ids} <= {"shutting-down", "terminated"}
    assert new.status == JobStatus.RUNNING and len(new.instance_ids) == 1 and new.train_command == "train.py"
    assert new.events.get(kind="created").data["replaces"] == job.pk
    assert monitor.latest_offer(job) is None  # applied


def test_replan_without_the_solver_service_says_so(owner, plan, monkeypatch, user_api):
    monkeypatch.setitem(sys.modules, "planner.app.solving", None)  # import fails
    job = running_without_ec2(owner, plan)
    resp = user_api.post(f"/api/v1/jobs/{job.pk}/replan/", {"refresh": True}, format="json")
    assert resp.status_code == 400 and "not available" in resp.json()["job"][0]


@pytest.mark.slow
def test_a_real_plan_launches_and_its_interruption_is_replanned_by_the_real_solver(
    cloud, owner, user_api, catalog, monkeypatch
):
    request = {
        "model": {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"},
        "samples_per_epoch": 1_281_167,
        "epochs": 2,
        "objective": "cost",
        "deadline_hours": 24,
        "spot": True,
        "max_nodes": 4,
        "max_types": 1,
        "regions": ["us-east-1"],
        "global_batch_min": 256,
        "global_batch_max": 256,
    }
    made = user_api.post("/api/v1/plans/", request, format="json")
    assert made.status_code == 202, made.content  # queued: solved by the worker's task
    from planner.app.tasks import solve_plan_task

    solve_plan_task.call(made.json()["id"])
    plan = PlanRecord.objects.get(pk=made.json()["id"])
    job = launched(owner, plan, spend="500", hours=48)
    best = plan.option(1)
    assert len(job.instance_ids) == best["nodes"] and job.region == best["region"]
    zones = {z["ZoneName"]: z["ZoneId"] for z in cloud.describe_availability_zones()["AvailabilityZones"]}
    placed = {zones[s.zone] for s in ec2.describe(REGION, job.instance_ids)}
    assert placed == {g["zone"] for g in best["groups"]}  # the plan's zone (an id such as use1-az2)
    assert job.total_iterations == -(-2 * 1_281_167 // best["global_batch"])
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=1))
    report(job, [best["iter_time_s"]] * 20, timezone.now())
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: ids[:1])
    monitor.watch_job(job)
    offer = monitor.latest_offer(job)
    assert offer is not None, list(job.events.values_list("kind", "message"))
    replan = PlanRecord.objects.get(pk=offer.data["plan"])
    assert (
        replan.status == "solved"
        and replan.request["total_samples"] == 2 * 1_281_167 - 29 * best["global_batch"]
    )
    assert "epochs" not in replan.request and replan.request["deadline_hours"] == pytest.approx(23, abs=0.01)

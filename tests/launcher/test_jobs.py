"""State changes of jobs (launcher.jobs): who may launch, caps, tokens, reports, stopping."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from launcher import jobs
from launcher.models import Job, JobEvent, JobReport, JobStatus
from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db


def option(rank=1):
    return {
        "rank": rank,
        "region": "us-east-1",
        "global_batch": 256,
        "hourly_usd": 4.0,
        "time_h": 3.0,
        "throughput_sps": 50.0,
        "iter_time_s": 0.8,
        "iter_time_p90_s": 1.0,
        "groups": [
            {
                "instance_type": "p4d.24xlarge",
                "market": "on-demand",
                "zone": None,
                "count": 2,
                "gpus_per_node": 8,
                "gpu_model": "A100",
                "price_per_hour": 2.0,
                "batch_per_node": [128, 128],
                "interruption_bucket": 0,
            }
        ],
    }


@pytest.fixture
def plan(user):
    return PlanRecord.objects.create(
        owner=user, request={"total_samples": 256_000}, status="solved", result={"plans": [option()]}
    )


@pytest.fixture
def owner(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    return type(user).objects.get(pk=user.pk)


def test_a_job_needs_the_permission_and_an_explicit_confirmation(user, plan, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    with pytest.raises(jobs.NotAllowed):
        jobs.create_job(user, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    user = type(user).objects.get(pk=user.pk)
    for confirm in (False, None, "yes", 1):
        with pytest.raises(jobs.JobError) as err:
            jobs.create_job(user, plan, 1, "train.py", Decimal("10"), 5, confirm=confirm)
        assert err.value.field == "confirmation"
    assert not Job.objects.exists()


def test_the_permission_can_come_from_a_group(user, plan, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    launchers = Group.objects.create(name="launchers")
    launchers.permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    user.groups.add(launchers)
    assert jobs.can_launch(type(user).objects.get(pk=user.pk))


def test_a_created_job_keeps_the_option_caps_and_queues_its_launch_and_watch(
    owner, plan, django_capture_on_commit_callbacks
):
    from django_tasks import default_task_backend

    with django_capture_on_commit_callbacks(execute=True):
        job = jobs.create_job(owner, plan, 1, "  train.py --lr 0.1  ", Decimal("100"), 10, confirm=True)
    assert job.status == JobStatus.LAUNCHING and job.train_command == "train.py --lr 0.1"
    assert job.hourly_usd == Decimal("4") and job.max_spend_usd == Decimal("40.00")  # 10 h x $4 < $100
    assert job.total_iterations == 1000 and job.predicted_iter_s == 0.8 and job.region == "us-east-1"
    assert job.cap_at == job.created_at + timedelta(hours=10)
    assert job.launch_token and len(job.launch_token) <= 40
    assert JobEvent.objects.get(job=job, kind="created").message.startswith(
        "launch confirmed: 2x p4d.24xlarge"
    )
    assert job.events.count() == 1 and job.option == option()
    launch_task, watch = default_task_backend.results  # queued after commit
    assert launch_task.task.name == "launch_job_task" and launch_task.args == [job.pk]
    assert (
        watch.task.name == "watch_job_task" and watch.task.run_after is not None
    )  # a half-done launch is seen too


def test_the_token_is_derived_hashed_at_rest_and_dies_with_the_job(owner, plan):
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    token = jobs.issue_token(job)
    job.refresh_from_db()
    assert token == jobs.issue_token(job)  # a retried launch gets the same token
    assert job.token_hash == Job.hash_token(token) and token not in job.token_hash
    assert job.token_matches(token) and not job.token_matches(token + "x")
    jobs.stop_job(job, "stopped by alice")
    job.refresh_from_db()
    assert not job.token_matches(token) and job.status == JobStatus.STOPPED


def test_the_first_stop_wins(owner, plan):
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    jobs.fail_job(job, "launch failed: no capacity")
    jobs.stop_job(job, "stopped by alice")
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.status_reason == "launch failed: no capacity"


def test_reports_are_idempotent_and_a_finished_job_takes_no_new_ones(owner, plan):
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    batch = [{"iteration": i, "iter_time_s": 0.8} for i in range(1, 4)]
    assert jobs.record_reports(job, 0, 1, batch) == 3
    assert jobs.record_reports(job, 0, 2, batch) == 1  # seqs 2, 3 were stored, 4 is new
    assert JobReport.objects.filter(job=job).count() == 4
    jobs.stop_job(job)
    assert jobs.record_reports(job, 0, 1, batch) == 0  # a retry of old ones is still fine
    with pytest.raises(jobs.JobClosed):
        jobs.record_reports(job, 0, 100, batch)


def test_spend_so_far_runs_from_the_launch_until_the_end(owner, plan):
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("100"), 10, confirm=True)
    start = timezone.now() - timedelta(hours=2)
    Job.objects.filter(pk=job.pk).update(started_at=start, finished_at=start + timedelta(minutes=30))
    job.refresh_from_db()
    assert job.spend_so_far() == pytest.approx(2.0)  # 0.5 h x $4/h


def test_stopping_needs_the_owner_or_the_change_permission(owner, plan, django_user_model):
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    bob = django_user_model.objects.create_user("bob", password="b-pass-12345")
    assert jobs.can_stop(owner, job) and not jobs.can_stop(bob, job)
    bob.user_permissions.add(
        Permission.objects.get(codename="change_job", content_type__app_label="launcher")
    )
    assert jobs.can_stop(django_user_model.objects.get(pk=bob.pk), job)


@pytest.mark.parametrize("flag", [True, False])
def test_a_boolean_is_neither_hours_nor_an_option_number(flag):
    with pytest.raises(jobs.JobError) as hours:
        jobs.clean_params("train.py", "10", flag)
    assert hours.value.field == "max_hours"
    with pytest.raises(jobs.JobError) as rank:
        jobs.option_rank(flag)
    assert rank.value.field == "rank"
    assert jobs.option_rank("2") == 2 and jobs.clean_params("train.py", "10", "1.5")[2] == 1.5

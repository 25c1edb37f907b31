"""Jobs moved from ``planner.app`` (label ``plans``) to ``launcher`` without losing a row.

The database is taken back to the schema of before the move (``plans.0001_initial`` with the
jobs in it, no ``launcher`` migration), filled through the historical models as an existing
install would be (a job with reports and events, a permission granted on ``plans.job``, queued
tasks under ``planner.app.job_tasks``), then migrated forward to the latest state.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE_THE_MOVE = [("plans", "0001_initial"), ("launcher", None)]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    return executor.migrate(targets).apps  # the state of every app once ``targets`` are reached


def _latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_jobs_keep_their_rows_ids_permissions_and_queued_tasks_across_the_move():
    old = _migrate(BEFORE_THE_MOVE)
    assert old.get_model("plans", "Job")._meta.db_table == "plans_job"
    with pytest.raises(LookupError):
        old.get_model("launcher", "Job")

    User = old.get_model("auth", "User")
    Permission = old.get_model("auth", "Permission")
    OldContentType = old.get_model("contenttypes", "ContentType")
    PlanRecord = old.get_model("plans", "PlanRecord")
    OldJob = old.get_model("plans", "Job")
    OldReport = old.get_model("plans", "JobReport")
    OldEvent = old.get_model("plans", "JobEvent")

    user = User.objects.create(username="migrated", password="!")
    job_type, _ = OldContentType.objects.get_or_create(app_label="plans", model="job")
    add_job, _ = Permission.objects.get_or_create(
        content_type=job_type, codename="add_job", defaults={"name": "Can add job"}
    )
    user.user_permissions.add(add_job)
    plan = PlanRecord.objects.create(owner=user, request={"total_samples": 1000}, status="solved")
    for _ in range(3):  # ids that are not 1: the moved rows must keep theirs
        OldJob.objects.create(**_job_fields(user, plan))
    OldJob.objects.filter(pk__lt=OldJob.objects.order_by("-pk").first().pk).delete()
    old_job = OldJob.objects.get()
    reports = [
        OldReport.objects.create(job=old_job, seq=s, rank=r, iteration=s, iter_time_s=0.5 + s / 100)
        for s in (1, 2)
        for r in (0, 1)
    ]
    events = [
        OldEvent.objects.create(
            job=old_job, kind="created", message="launch confirmed", data={"replaces": None}
        ),
        OldEvent.objects.create(job=old_job, kind="drift", message="slow", data={"ratio": 1.3}),
    ]

    from django_tasks_db.models import DBTaskResult

    queued = DBTaskResult.objects.create(
        task_path="planner.app.job_tasks.reconcile_task",
        args_kwargs={"args": [None, False, True], "kwargs": {}},
        backend_name="default",
        run_after=timezone.now(),
    )
    other = DBTaskResult.objects.create(
        task_path="profiler.tasks.watch_run_task",
        args_kwargs={"args": [1], "kwargs": {}},
        backend_name="default",
        run_after=timezone.now(),
    )

    new = _migrate(_latest())
    with pytest.raises(LookupError):
        new.get_model("plans", "Job")
    assert new.get_model("launcher", "Job")._meta.db_table == "plans_job"

    from launcher.models import Job, JobEvent, JobReport

    job = Job.objects.get(pk=old_job.pk)
    assert (job.owner_id, job.plan_id, job.region, job.max_spend_usd) == (
        user.pk,
        plan.pk,
        "us-east-1",
        Decimal("40.00"),
    )
    assert job.instance_ids == ["i-0123", "i-0456"] and job.plan.jobs.get() == job
    assert sorted(job.reports.values_list("pk", flat=True)) == sorted(r.pk for r in reports)
    assert sorted(JobEvent.objects.filter(job=job).values_list("pk", "kind")) == sorted(
        (e.pk, e.kind) for e in events
    )
    assert JobReport.objects.get(pk=reports[-1].pk).iter_time_s == pytest.approx(0.52)
    # New rows continue after the old ids.
    assert Job.objects.create(**_job_fields(job.owner, job.plan)).pk > job.pk

    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(Job).app_label == "launcher"
    assert not ContentType.objects.filter(app_label="plans", model="job").exists()
    assert get_user_model().objects.get(pk=user.pk).has_perm("launcher.add_job")

    queued.refresh_from_db()
    other.refresh_from_db()
    assert queued.task_path == "launcher.tasks.reconcile_task"
    assert queued.task.func.__module__ == "launcher.tasks"  # the worker can import it
    assert other.task_path == "profiler.tasks.watch_run_task"


def _job_fields(owner, plan) -> dict:
    return {
        "owner_id": owner.pk,
        "plan_id": plan.pk,
        "plan_rank": 1,
        "option": {"region": "us-east-1", "groups": []},
        "region": "us-east-1",
        "train_command": "python train.py",
        "status": "running",
        "hourly_usd": Decimal("4.0000"),
        "max_spend_usd": Decimal("40.00"),
        "max_hours": 10.0,
        "predicted_iter_s": 0.5,
        "predicted_iter_p90_s": 0.6,
        "instance_ids": ["i-0123", "i-0456"],
        "node_ips": {"i-0123": "10.0.0.1"},
    }

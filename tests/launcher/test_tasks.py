"""The launcher's background tasks (django-tasks' dummy backend records what they queue)."""

from __future__ import annotations

import pytest
from django_tasks import default_task_backend

from cloud import ec2
from launcher import tasks
from launcher.models import Job, JobStatus
from tests.launcher.test_interruptions import option
from tests.support.jobs import running_job, solved_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.JOB_WATCH_MAX_ERRORS = 3
    return default_task_backend


def unwatched_job(owner) -> Job:
    return running_job(
        owner, solved_plan(owner, option(), total_samples=128_000), ["i-0aaa"], {"i-0aaa": "10.0.0.1"}
    )


def test_an_unexpected_watch_error_is_logged_and_the_watch_goes_on_until_too_many_in_a_row(
    owner, queued, monkeypatch, caplog
):
    """EC2 answers something the watch cannot read (a ValueError, not a CloudError): the pass
    is logged and the next one queued with the count; the third in a row fails the job."""
    job = unwatched_job(owner)

    def unreadable(region, ids):
        raise ValueError("unexpected DescribeInstances answer")

    monkeypatch.setattr(ec2, "describe", unreadable)
    assert tasks.watch_job_task.call(job.pk) == "watching"
    assert f"watching job {job.pk} failed (1 in a row)" in caplog.text
    assert tasks.watch_job_task.call(job.pk, 1) == "watching"
    assert [r.args for r in queued.results] == [[job.pk, 1], [job.pk, 2]]
    assert tasks.watch_job_task.call(job.pk, 2) == "failed"
    assert len(queued.results) == 2  # nothing queued after the job failed
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.status_reason == (
        "watching the job failed 3 times in a row, last with ValueError: unexpected DescribeInstances answer"
    )


def test_a_good_pass_resets_the_error_count(owner, queued, monkeypatch):
    job = unwatched_job(owner)
    up = ec2.InstanceState(
        id="i-0aaa",
        state="running",
        instance_type="g5.xlarge",
        market="spot",
        launch_time=None,
        tags={},
        private_ip="10.0.0.1",
        public_dns=None,
    )
    monkeypatch.setattr(ec2, "describe", lambda region, ids: [up])
    monkeypatch.setattr(ec2, "spot_interruption_notices", lambda region, ids: [])
    assert tasks.watch_job_task.call(job.pk, 2) == "watching"
    (next_pass,) = queued.results
    assert next_pass.args == [job.pk]


def test_an_ec2_error_neither_ends_the_watch_nor_counts(owner, queued, monkeypatch):
    job = unwatched_job(owner)

    def throttled(region, ids):
        raise ec2.CloudError("RequestLimitExceeded", "slow down", "ec2.describe_instances")

    monkeypatch.setattr(ec2, "describe", throttled)
    assert tasks.watch_job_task.call(job.pk, 2) == "watching"
    (next_pass,) = queued.results
    assert next_pass.args == [job.pk, 2]

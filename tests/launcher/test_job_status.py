"""A job's status and its event log never contradict each other (issue 22 item 9): one function,
``jobs.transition``, changes the status, and it writes the event saying so in the same
transaction; a change the current status does not allow changes and writes nothing."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from launcher import jobs
from launcher.models import JobStatus
from planner.app.models import PlanRecord
from tests.launcher.test_task_launch import option

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
STATUS_EVENTS: dict[str, str] = {
    "launched": JobStatus.RUNNING,
    JobStatus.SUCCEEDED: JobStatus.SUCCEEDED,
    JobStatus.FAILED: JobStatus.FAILED,
    JobStatus.STOPPED: JobStatus.STOPPED,
}


@pytest.fixture
def job(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    owner = type(user).objects.get(pk=user.pk)
    plan = PlanRecord.objects.create(owner=owner, request={}, status="solved", result={"plans": [option()]})
    return jobs.create_job(owner, plan, 1, "train.py", Decimal("50"), 2.0, confirm=True)


def status_by_log(job) -> str:
    """The status the event log says the job has: that of its newest status event."""
    said: str = JobStatus.LAUNCHING
    for event in job.events.order_by("at", "pk"):
        said = STATUS_EVENTS.get(event.kind, said)
    return said


def test_every_status_change_writes_its_event_and_the_log_agrees_with_the_row(job):
    assert job.status == status_by_log(job) == JobStatus.LAUNCHING
    job = jobs.mark_running(job, "launched 2 instances")
    assert job.status == status_by_log(job) == JobStatus.RUNNING
    job = jobs.stop_job(job, "stopped by alice")
    assert job.status == status_by_log(job) == JobStatus.STOPPED
    assert job.events.filter(kind="stopped").get().data["status"] == "stopped"


def test_a_finished_job_never_changes_and_nothing_is_written(job):
    job = jobs.fail_job(job, "launch failed: no capacity")
    events = job.events.count()
    for change in (
        lambda: jobs.mark_running(job, "late launch"),
        lambda: jobs.stop_job(job, "stopped late"),
        lambda: jobs.succeed_job(job, "done late"),
        lambda: jobs.transition(job, JobStatus.RUNNING, "back to life"),
    ):
        assert change().status == JobStatus.FAILED
    assert job.events.count() == events and status_by_log(job) == JobStatus.FAILED


def test_a_running_job_does_not_go_back_to_launching(job):
    job = jobs.mark_running(job, "launched")
    assert jobs.transition(job, JobStatus.LAUNCHING, "relaunch").status == JobStatus.RUNNING
    assert jobs.mark_running(job, "launched again").events.filter(kind="launched").count() == 1


def test_no_code_but_transition_assigns_a_jobs_status():
    """Anywhere in the launcher and the job pages, ``<x>.status = ...`` or ``update(status=...)``
    outside ``launcher.jobs.transition`` would be a second owner of the status."""
    offenders = []
    for path in [*ROOT.glob("launcher/**/*.py"), ROOT / "frontend" / "jobs.py"]:
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        owner = {}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                for node in ast.walk(fn):
                    owner.setdefault(id(node), fn.name)
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            hit = any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "update"
            ):
                hit = hit or any(k.arg == "status" for k in node.keywords)
            if hit and not (
                path.name == "jobs.py"
                and path.parent.name == "launcher"
                and owner.get(id(node)) == "transition"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []

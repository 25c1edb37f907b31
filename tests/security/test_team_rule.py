"""The team rule on every lookup by id: one test per lookup that skipped it (or could be fooled).

Team A: ``alice`` (owner, may launch and stop) and ``carol`` (same group, no permission: reads
only). Team B: ``bob``, who may launch and stop, but only his team's work. Another team's
object must answer exactly like an id that does not exist.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from launcher import monitor
from launcher.models import Job, JobEvent, JobStatus
from planner.app.models import PlanRecord
from profiler.models import ProfilingRun, RunStatus
from tests.support.jobs import g5_spot_option, running_job, solved_plan

pytestmark = pytest.mark.django_db
MISSING = 987654
OPTION = g5_spot_option(time_p90_h=1.2, label="2x g5.xlarge", total_usd=1.0)
REQUEST = {"total_samples": 6400, "objective": "cost", "deadline_hours": 24}


def grant(user, *names):
    for name in names:
        app, codename = name.split(".")
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label=app))


@pytest.fixture
def team(django_user_model, settings, compute_profile):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    a, b = Group.objects.create(name="team-a"), Group.objects.create(name="team-b")
    alice = django_user_model.objects.create_user("alice", password=None)
    carol = django_user_model.objects.create_user("carol", password=None)
    bob = django_user_model.objects.create_user("bob", password=None)
    alice.groups.add(a)
    carol.groups.add(a)
    bob.groups.add(b)
    grant(alice, "launcher.add_job")
    grant(bob, "launcher.add_job", "launcher.change_job", "profiler.change_profilingrun")

    def run(owner, status=RunStatus.SUCCEEDED):
        return ProfilingRun.objects.create(
            owner=owner,
            kind="compute",
            model_spec="examples.tiny_model:build",
            input_shape="3,32,32",
            batch_sizes="4,8",
            status=status,
            profile=compute_profile,
            deadline_at=timezone.now() + timedelta(hours=1),
        )

    def plan(owner, request=REQUEST):
        return solved_plan(owner, OPTION, **request)

    def job(owner, of_plan):
        owner = type(owner).objects.get(pk=owner.pk)  # fresh permission cache
        return running_job(owner, of_plan, ["i-0a"], {"i-0a": "10.0.0.1"})

    class T:
        pass

    t = T()
    t.alice, t.carol, t.bob, t.run, t.plan, t.job = alice, carol, bob, run, plan, job
    return t


def logged_in(user) -> APIClient:
    c = APIClient()
    c.force_login(user)
    return c


def same_as_missing(resp, ident, missing) -> bool:
    norm = lambda r, i: re.sub(rf"\b{i}\b", "ID", r.content.decode())  # noqa: E731
    return resp.status_code == missing.status_code and norm(resp, ident) == norm(missing, MISSING)


# --- plans referencing profiling runs -------------------------------------------------------


def plan_body(run_id):
    return {
        "model": {"profile_run": run_id},
        "samples_per_epoch": 1000,
        "epochs": 1,
        "objective": "cost",
        "deadline_hours": 24,
    }


def test_a_plan_from_another_teams_profiling_run_is_refused_as_missing(team):
    theirs = team.run(team.alice)
    bob = logged_in(team.bob)
    resp = bob.post("/api/v1/plans/", plan_body(theirs.pk), format="json")
    missing = bob.post("/api/v1/plans/", plan_body(MISSING), format="json")
    assert resp.status_code == 400 and "profile_run" in resp.json()
    assert same_as_missing(resp, theirs.pk, missing)
    assert not PlanRecord.objects.exists()


def test_the_plan_form_refuses_another_teams_profiling_run_as_missing(team):
    theirs = team.run(team.alice)
    form = {
        "model_source": "profile",
        "samples_per_epoch": "1000",
        "epochs": "1",
        "objective": "cost",
        "deadline_hours": "24",
        "spot": "on",
        "on_demand": "on",
    }
    bob = logged_in(team.bob)
    resp = bob.post("/plans/", {**form, "profile_run": str(theirs.pk)})
    missing = bob.post("/plans/", {**form, "profile_run": str(MISSING)})
    assert resp.status_code == 400
    norm = lambda errors, i: {k: re.sub(rf"\b{i}\b", "ID", v) for k, v in errors.items()}  # noqa: E731
    assert norm(resp.context["errors"], theirs.pk) == norm(missing.context["errors"], MISSING)
    assert "profile_run" in resp.context["errors"] and not PlanRecord.objects.exists()


def test_the_plan_command_for_a_named_user_refuses_another_teams_run_as_missing(team):
    theirs = team.run(team.alice)
    args = [
        "--samples",
        "1000",
        "--epochs",
        "1",
        "--objective",
        "cost",
        "--deadline-hours",
        "24",
        "--user",
        "bob",
    ]
    with pytest.raises(CommandError) as refused:
        call_command("plan", "--profile-run", str(theirs.pk), *args)
    with pytest.raises(CommandError) as missing:
        call_command("plan", "--profile-run", str(MISSING), *args)
    assert str(refused.value).replace(str(theirs.pk), "ID") == str(missing.value).replace(str(MISSING), "ID")
    assert not PlanRecord.objects.exists()


def test_a_replan_does_not_plan_from_a_profiling_run_the_owner_cannot_see(team):
    """A job whose plan names another team's run (say, stored before the fix) re-plans as its
    owner: the run is not found, no plan is made from it."""
    theirs = team.run(team.bob)
    job = team.job(team.alice, team.plan(team.alice, {**REQUEST, "model": {"profile_run": theirs.pk}}))
    event = monitor.offer_replan(job, "node lost")
    assert event.kind == "replan_failed" and "not found" in event.message
    assert PlanRecord.objects.count() == 1  # only the job's own plan


# --- jobs referencing plans ---------------------------------------------------------------


def launch_body(plan_id, **kw):
    return {
        "plan": plan_id,
        "rank": 1,
        "train_command": "train.py",
        "max_spend_usd": "10",
        "max_hours": 5,
        **kw,
    }


@pytest.mark.parametrize("path", ["/api/v1/jobs/preview/", "/api/v1/jobs/"])
def test_a_job_preview_or_launch_of_another_teams_plan_is_refused_as_missing(team, path):
    theirs = team.plan(team.alice)
    bob = logged_in(team.bob)
    resp = bob.post(path, launch_body(theirs.pk, confirmation="x"), format="json")
    missing = bob.post(path, launch_body(MISSING, confirmation="x"), format="json")
    assert resp.status_code == 400 and resp.json() == {"plan": ["no such plan"]}
    assert same_as_missing(resp, theirs.pk, missing)
    assert not Job.objects.exists()


def test_the_launch_page_of_another_teams_plan_is_missing(team):
    theirs = team.plan(team.alice)
    bob = logged_in(team.bob)
    assert bob.get(f"/jobs/new/?plan={theirs.pk}&rank=1").status_code == 404
    form = {
        "plan": str(theirs.pk),
        "rank": "1",
        "train_command": "train.py",
        "max_spend_usd": "10",
        "max_hours": "5",
    }
    assert bob.post("/jobs/new/", form).status_code == 404 and not Job.objects.exists()


def test_applying_a_replan_with_another_teams_plan_is_refused_as_missing(team):
    """Bob's own job, Alice's plan in the body: 400 on ``plan``, like a plan that does not exist."""
    bobs_job = team.job(team.bob, team.plan(team.bob))
    theirs = team.plan(team.alice)
    bob = logged_in(team.bob)
    body = {"rank": 1, "max_spend_usd": "5", "max_hours": 2, "confirmation": "x"}
    resp = bob.post(f"/api/v1/jobs/{bobs_job.pk}/replan/apply/", {**body, "plan": theirs.pk}, format="json")
    missing = bob.post(f"/api/v1/jobs/{bobs_job.pk}/replan/apply/", {**body, "plan": MISSING}, format="json")
    assert resp.status_code == 400 and resp.json() == {"plan": ["no such plan"]}
    assert same_as_missing(resp, theirs.pk, missing)
    page = bob.post(f"/jobs/{bobs_job.pk}/replan/apply/", {**body, "plan": str(theirs.pk)})
    assert page.status_code == 302 and page["Location"] == f"/jobs/{bobs_job.pk}/"
    assert Job.objects.get(pk=bobs_job.pk).status == JobStatus.RUNNING and Job.objects.count() == 1


def test_a_replan_of_another_teams_job_is_missing_and_solves_nothing(team):
    theirs = team.job(team.alice, team.plan(team.alice))
    bob = logged_in(team.bob)
    assert bob.post(f"/api/v1/jobs/{theirs.pk}/replan/", {}, format="json").status_code == 404
    assert bob.post(f"/jobs/{theirs.pk}/replan/").status_code == 404
    assert not JobEvent.objects.filter(job=theirs, kind__startswith="replan").exists()


# --- read-only teammates: they see, they do not change --------------------------------------


def test_a_teammate_without_the_change_permission_cannot_cancel_a_run_over_the_api(team):
    run = team.run(team.alice, status=RunStatus.RUNNING)
    resp = logged_in(team.carol).post(f"/api/v1/profiling-runs/{run.pk}/cancel/")
    assert resp.status_code == 403
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert (
        logged_in(team.carol).get(f"/api/v1/profiling-runs/{run.pk}/").status_code == 200
    )  # reading is fine
    assert (
        logged_in(team.alice).post(f"/api/v1/profiling-runs/{run.pk}/cancel/").status_code == 200
    )  # the owner may


def test_a_teammate_without_the_change_permission_cannot_cancel_a_run_on_its_page(team):
    run = team.run(team.alice, status=RunStatus.RUNNING)
    assert logged_in(team.carol).post(f"/profiling/{run.pk}/cancel/").status_code == 403
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    page = logged_in(team.carol).get(f"/profiling/{run.pk}/")
    assert page.status_code == 200 and page.context["can_cancel"] is False


@pytest.mark.parametrize("action", ["stop", "replan", "replan/apply"])
def test_a_read_only_teammate_is_refused_a_job_change_on_its_page_with_403(team, action):
    job = team.job(team.alice, team.plan(team.alice))
    form = {
        "plan": str(job.plan_id),
        "rank": "1",
        "max_spend_usd": "5",
        "max_hours": "2",
        "confirmation": "x",
    }
    resp = logged_in(team.carol).post(f"/jobs/{job.pk}/{action}/", form)
    assert resp.status_code == 403
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING and Job.objects.count() == 1
    assert not JobEvent.objects.filter(job=job, kind__startswith="replan").exists()


# --- robustness of the lookups --------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "1e3", "²", "9" * 30, "-1"])
def test_the_plan_form_prefilled_from_a_bad_id_shows_the_empty_form(team, value):
    assert logged_in(team.bob).get("/plans/", {"from": value}).status_code == 200


def test_the_plan_form_is_not_prefilled_from_another_teams_plan(team):
    theirs = team.plan(team.alice, {**REQUEST, "name": "alpha-secret", "samples_per_epoch": 4242})
    page = logged_in(team.bob).get("/plans/", {"from": theirs.pk})
    assert page.status_code == 200 and page.context["values"]["samples_per_epoch"] != "4242"


@pytest.mark.parametrize(
    "path",
    ["/api/v1/jobs/{job}/stop.json", "/api/v1/jobs/preview.json", "/api/v1/profiling-runs/{run}/cancel.json"],
)
def test_a_format_suffix_on_an_action_is_answered_not_a_server_error(team, path):
    job = team.job(team.alice, team.plan(team.alice))
    run = team.run(team.alice, status=RunStatus.RUNNING)
    resp = logged_in(team.bob).post(path.format(job=job.pk, run=run.pk), {}, format="json")
    assert resp.status_code in (400, 404)


def test_token_principals_and_anonymous_viewers_see_no_ones_work(team):
    from django.contrib.auth.models import AnonymousUser

    from launcher.api import JobAgent
    from profiler.auth import AgentPrincipal

    run = team.run(team.alice)
    job = team.job(team.alice, team.plan(team.alice))
    for who in (AnonymousUser(), AgentPrincipal(run), JobAgent(job)):
        assert not ProfilingRun.objects.visible_to(who).exists()
        assert not PlanRecord.objects.visible_to(who).exists()
        assert not Job.objects.visible_to(who).exists()


def test_visible_to_is_the_team_rule(team, django_user_model):
    run, plan = team.run(team.alice), team.plan(team.alice)
    root = django_user_model.objects.create_user("root", password=None, is_staff=True)
    assert list(ProfilingRun.objects.visible_to(team.carol)) == [run]
    assert list(PlanRecord.objects.visible_to(team.carol)) == [plan]
    assert not ProfilingRun.objects.visible_to(team.bob).exists()
    assert not PlanRecord.objects.visible_to(team.bob).exists()
    assert list(PlanRecord.objects.visible_to(root)) == [plan]  # staff see all

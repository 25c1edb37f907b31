"""Job pages: the launch confirmation, the job page without JavaScript, stop and re-plan."""

from __future__ import annotations

import re
import sys
import types
from decimal import Decimal

import pytest

from launcher import jobs
from launcher.models import Job, JobReport, JobStatus
from planner.app.models import PlanRecord
from tests.support.jobs import g5_group, may_launch

pytestmark = pytest.mark.django_db

OPTION = {
    "rank": 1,
    "region": "us-east-1",
    "global_batch": 128,
    "hourly_usd": 2.2,
    "iter_time_s": 0.5,
    "iter_time_p90_s": 0.6,
    "time_h": 2.0,
    "time_p90_h": 2.5,
    "throughput_sps": 100.0,
    "groups": [
        g5_group(zone="us-east-1a"),
        {
            "instance_type": "g5.12xlarge",
            "market": "on-demand",
            "zone": "us-east-1a",
            "count": 1,
            "gpus_per_node": 4,
            "gpu_model": "A10G",
            "price_per_hour": 1.2,
            "batch_per_node": [64],
            "interruption_bucket": 0,
        },
    ],
}


@pytest.fixture
def plan(user):
    return PlanRecord.objects.create(
        owner=user,
        name="resnet",
        request={"total_samples": 128_000},
        status="solved",
        result={"plans": [OPTION]},
    )


@pytest.fixture
def launcher(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    return may_launch(user)


def hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no hidden {name} field"
    return found.group(1)


def test_the_confirmation_page_shows_the_exact_instances_price_and_max_spend(client, launcher, plan):
    client.force_login(launcher)
    page = client.get("/jobs/new/", {"plan": plan.pk, "rank": 1}).content.decode()
    assert "g5.xlarge" in page and "g5.12xlarge" in page and "spot" in page and "on-demand" in page
    assert "$2.20</span> per hour" in page
    assert 'name="max_hours" value="3.8"' in page  # 1.5 x the p90 time, as a suggestion
    assert 'Maximum spend: <strong id="max-spend">$8.36</strong>' in page  # $2.20/h x 3.8 h
    assert 'id="review-button"' in page and 'name="confirmation"' not in page  # no launch without a command


def test_review_then_confirm_launches_and_goes_to_the_job_page(client, launcher, plan):
    client.force_login(launcher)
    form = {
        "plan": plan.pk,
        "rank": 1,
        "train_command": "train.py --epochs 2",
        "max_spend_usd": "5",
        "max_hours": "10",
    }
    review = client.post("/jobs/new/", form)
    page = review.content.decode()
    assert review.status_code == 200 and not Job.objects.exists()
    assert "Launch 3 instances · up to $5.00" in page
    resp = client.post("/jobs/new/", {**form, "confirmation": hidden(page, "confirmation")})
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert job.max_spend_usd == Decimal("5.00") and job.train_command == "train.py --epochs 2"


def test_values_changed_after_the_review_need_a_new_confirmation(client, launcher, plan):
    client.force_login(launcher)
    form = {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "5", "max_hours": "10"}
    token = hidden(client.post("/jobs/new/", form).content.decode(), "confirmation")
    resp = client.post("/jobs/new/", {**form, "max_spend_usd": "500", "confirmation": token})
    page = resp.content.decode()
    assert resp.status_code == 200 and not Job.objects.exists()
    assert "The values changed since the preview" in page and "up to $22.00" in page  # 10 h x $2.20


def test_bad_values_come_back_inline(client, launcher, plan):
    client.force_login(launcher)
    resp = client.post(
        "/jobs/new/",
        {"plan": plan.pk, "rank": 1, "train_command": "", "max_spend_usd": "-3", "max_hours": "10"},
    )
    page = resp.content.decode()
    assert resp.status_code == 400 and "the training command is required" in page
    assert "more than 0 and at most" in page and 'name="max_spend_usd" value="-3"' in page
    assert not Job.objects.exists()


def test_users_without_the_permission_cannot_launch_from_the_page(client, user, plan):
    client.force_login(user)
    resp = client.get("/jobs/new/", {"plan": plan.pk, "rank": 1})
    assert resp.status_code == 403 and "Can add job" in resp.content.decode()
    resp = client.post(
        "/jobs/new/",
        {
            "plan": plan.pk,
            "rank": 1,
            "train_command": "t.py",
            "max_spend_usd": "5",
            "max_hours": "1",
            "confirmation": "x",
        },
    )
    assert resp.status_code == 403 and not Job.objects.exists()


def test_another_teams_plan_is_not_found(client, launcher, django_user_model):
    eve = django_user_model.objects.create_user("eve", password="e-pass-12345")
    theirs = PlanRecord.objects.create(owner=eve, request={}, status="solved", result={"plans": [OPTION]})
    client.force_login(launcher)
    assert client.get("/jobs/new/", {"plan": theirs.pk, "rank": 1}).status_code == 404


@pytest.fixture
def job(launcher, plan):
    job = jobs.create_job(launcher, plan, 1, "train.py", Decimal("20"), 5, confirm=True)
    jobs.mark_launched(job, instance_ids=["i-0aaa", "i-0bbb", "i-0ccc"], node_ips={"i-0aaa": "10.0.0.7"})
    job = jobs.mark_running(job, "launched 3 instances")
    JobReport.objects.bulk_create(
        [JobReport(job=job, rank=0, seq=i, iteration=i, iter_time_s=0.55) for i in range(1, 6)]
    )
    return job


def test_the_job_page_renders_state_spend_instances_and_events_without_javascript(client, launcher, job):
    client.force_login(launcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="status">running<' in page and "of at most $11.00" in page  # 5 h x $2.20 < $20
    assert "i-0aaa" in page and "10.0.0.7" in page and "g5.12xlarge" in page
    assert "launched 3 instances" in page and 'id="iter-chart"' in page and "job_detail.js" in page
    assert "plotly/plotly.min.js" in page and 'id="chart-data"' in page and '"iter_time_s": 0.55' in page
    assert 'id="stop-form"' in page and 'id="replan-form"' in page
    assert 'id="drift" class="badge error" style="display:none"' in page  # no drift flagged
    assert client.get("/jobs/").content.decode().count(f'href="/jobs/{job.pk}/"') == 1


def test_job_pages_are_private_to_the_team(client, job, django_user_model):
    eve = django_user_model.objects.create_user("eve", password="e-pass-12345")
    client.force_login(eve)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/stop/").status_code == 404
    assert f"/jobs/{job.pk}/" not in client.get("/jobs/").content.decode()


def test_the_stop_button_stops_the_job(client, launcher, job):
    client.force_login(launcher)
    resp = client.post(f"/jobs/{job.pk}/stop/")
    assert resp.status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and job.status_reason == "stopped by alice"


def test_the_replan_button_shows_the_offer_and_applying_it_replaces_the_job(
    client, launcher, job, monkeypatch
):
    def create_plan(owner, request):
        single = {**OPTION, "groups": [{**OPTION["groups"][1]}], "hourly_usd": 1.2}
        return PlanRecord.objects.create(
            owner=owner, request=request, status="solved", result={"plans": [single]}
        )

    monkeypatch.setitem(sys.modules, "planner.app.solving", types.SimpleNamespace(create_plan=create_plan))
    client.force_login(launcher)
    page = client.post(f"/jobs/{job.pk}/replan/", {"refresh": "1"}).content.decode()
    assert "Apply re-plan: stop job" in page and "g5.12xlarge" in page and "$1.20 per hour" in page
    form = {
        name: hidden(page, name) for name in ("plan", "rank", "max_spend_usd", "max_hours", "confirmation")
    }
    resp = client.post(f"/jobs/{job.pk}/replan/apply/", form)
    new = Job.objects.exclude(pk=job.pk).get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{new.pk}/"
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and f"replaced by job {new.pk}" in job.status_reason
    assert new.option["groups"][0]["instance_type"] == "g5.12xlarge"


# --- pre-checks and jobs that never started (issue 38 item 2) ------------------------------


def test_the_row_launch_page_shows_failed_pre_checks_with_their_fixes_and_no_launch_button(
    client, launcher, plan, no_aws_credentials
):
    client.force_login(launcher)
    page = client.get(f"/jobs/new/?plan={plan.pk}&rank=1").content.decode()
    assert 'id="prechecks" data-ok="false"' in page and "AWS would refuse this launch" in page
    assert 'data-name="credentials" data-status="error"' in page
    assert "Unable to locate credentials" in page and "AWS_ACCESS_KEY_ID" in page  # the fix
    assert ">Check again<" in page and 'id="launch-button"' not in page
    resp = client.post(
        "/jobs/new/",
        {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "20", "max_hours": "5"},
    )
    page = resp.content.decode()
    assert resp.status_code == 400 and 'data-name="credentials" data-status="error"' in page
    assert 'name="confirmation"' not in page and not Job.objects.exists()


def test_a_confirmed_launch_is_checked_again_on_submit_and_creates_nothing_when_refused(
    client, launcher, plan, settings, monkeypatch
):
    from launcher import prechecks
    from launcher.errors import JobError

    client.force_login(launcher)
    values = {
        "plan": plan.pk,
        "rank": 1,
        "train_command": "train.py",
        "max_spend_usd": "20",
        "max_hours": "5",
    }
    confirmation = hidden(client.post("/jobs/new/", values).content.decode(), "confirmation")
    settings.AWS_PRECHECKS = True
    refused = [{"name": "credentials", "status": "error", "message": "expired", "fix": "Renew them."}]

    def require(option):
        raise JobError("prechecks", "1 pre-check(s) failed", refused)

    monkeypatch.setattr(prechecks, "require", require)
    resp = client.post("/jobs/new/", {**values, "confirmation": confirmation})
    assert resp.status_code == 400 and "Renew them." in resp.content.decode()
    assert not Job.objects.exists()


def test_a_job_that_never_started_says_nothing_was_started_or_spent_and_offers_no_replan(
    client, launcher, plan, no_aws_credentials
):
    from launcher import launch

    job = jobs.create_job(launcher, plan, 1, "train.py", Decimal("20"), 5, confirm=True)
    assert launch.launch_job(job) == "failed to launch"  # its first AWS call: no credentials
    job = Job.objects.get(pk=job.pk)
    assert job.status == JobStatus.FAILED and job.placement_group  # recorded before the call
    assert jobs.never_started(job) and jobs.spend_usd(job) == 0.0 and job.spend_so_far() > 0
    client.force_login(launcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="never-started">nothing was started, nothing was spent<' in page
    assert "Unable to locate credentials" in page  # the reason stays
    for absent in (
        "Spent so far",
        'id="replan-form"',
        'id="iter-chart"',
        "Placement group",
        "Deadline guard",
    ):
        assert absent not in page, absent
    assert "plotly" not in page and "No instance was started." in page
    listed = client.get("/jobs/").content.decode()
    assert "nothing spent" in listed and "never started" in listed


def test_a_job_whose_nodes_ran_keeps_its_spend_chart_and_replan(client, launcher, job):
    jobs.fail_job(job, "a node died")
    assert not jobs.never_started(job)
    client.force_login(launcher)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Spent so far" in page and 'id="iter-chart"' in page and 'id="replan-form"' in page
    assert "nothing was started" not in page and "nothing spent" not in client.get("/jobs/").content.decode()

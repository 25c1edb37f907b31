"""A launch confirmation launches one job (issue 33 item 3).

Before, the signed confirmation id from ``POST /jobs/preview/`` was checked but never consumed:
four simultaneous ``POST /api/v1/jobs/`` with one id created four jobs, and the same body again a
fifth; a re-plan's apply could be replayed the same way. Each job rents its option's instances.
Now the id's digest is stored on the job it created under a unique index, in the same
transaction: a replay or a concurrent duplicate gets 409 with the first job's id, queues no
launch, and the pages send it to that job.

The concurrent tests use real threads, each with its own database connection, and commit for
real (``transaction=True``): on PostgreSQL the losers wait on the unique index for the winner's
commit and then fail on it; on SQLite the IMMEDIATE transactions queue them. ``./test`` runs this
file on both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django_tasks_db.models import DBTaskResult
from rest_framework.test import APIClient

from launcher import jobs, launch
from launcher.models import Job, JobStatus
from tests.support.jobs import g5_spot_option, may_launch, running_job, solved_plan

THREADS = 4  # as many as the probe sent at once


@pytest.fixture(autouse=True)
def _database_tasks(settings):
    """The production task backend: a queued launch is a row, so a test can count them."""
    settings.TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


@pytest.fixture
def launcher(user):
    return may_launch(user)


@pytest.fixture
def plan(launcher):
    return solved_plan(launcher, g5_spot_option(), total_samples=64_000)


def api_as(user) -> APIClient:
    """A client of its own (one per thread) acting as ``user``."""
    c = APIClient()
    c.force_authenticate(user=user)
    return c


def launch_body(plan, **kw) -> dict:
    return {
        "plan": plan.pk,
        "rank": 1,
        "train_command": "train.py --epochs 3",
        "max_spend_usd": "40",
        "max_hours": 10,
        **kw,
    }


def previewed(api: APIClient, plan) -> dict:
    shown = api.post("/api/v1/jobs/preview/", launch_body(plan), format="json")
    assert shown.status_code == 200, shown.content
    return launch_body(plan, confirmation=shown.json()["confirmation"])


def replan_body(launcher, job: Job, new_plan) -> dict:
    """What the re-plan page posts to apply option 1 of ``new_plan`` in ``job``'s place."""
    shown = launch.prepare(launcher, new_plan.pk, 1, job.train_command, "20", 4, replaces=job.pk)
    return {"plan": new_plan.pk, "rank": 1, **shown["requested"], "confirmation": shown["confirmation"]}


def queued_launches() -> list[list]:
    """The args of every launch task queued (committed rows of the task backend)."""
    rows = DBTaskResult.objects.filter(task_path__endswith=".launch_job_task")
    return [row.args_kwargs["args"] for row in rows]


def all_at_once(post: Callable[[], object], n: int = THREADS) -> list:
    """``post()`` from ``n`` threads released together; each thread closes its own connection."""
    start = threading.Barrier(n)
    answers: list = [None] * n

    def one(i: int) -> None:
        try:
            start.wait(timeout=30)
            answers[i] = post()
        except Exception as exc:  # a 500 or a lock timeout: the test shows it
            answers[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a request hung"
    return answers


# --- in sequence ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_replayed_launch_gets_409_with_the_first_jobs_id_and_launches_nothing(
    launcher, plan, django_capture_on_commit_callbacks
):
    api = api_as(launcher)
    body = previewed(api, plan)
    made = api.post("/api/v1/jobs/", body, format="json")
    assert made.status_code == 201, made.content
    first = made.json()["id"]
    with django_capture_on_commit_callbacks() as queued:
        again = api.post("/api/v1/jobs/", body, format="json")
    assert again.status_code == 409, again.content
    assert again.json() == {
        "detail": f"this confirmation already launched job {first}; preview again to launch another",
        "job": first,
    }
    assert queued == []  # no launch, no watch, no websocket message
    assert list(Job.objects.values_list("pk", flat=True)) == [first]


@pytest.mark.django_db
def test_a_new_preview_of_the_same_launch_may_launch_again(launcher, plan):
    """Single use is per confirmation, not per parameters: previewing again is how a user
    launches the same thing twice on purpose (two previews in one second differ too)."""
    api = api_as(launcher)
    one, two = previewed(api, plan), previewed(api, plan)
    assert one["confirmation"] != two["confirmation"]
    assert api.post("/api/v1/jobs/", one, format="json").status_code == 201
    assert api.post("/api/v1/jobs/", two, format="json").status_code == 201
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_replayed_replan_apply_gets_409_with_the_new_jobs_id(launcher, plan):
    old = running_job(launcher, plan, ["i-0aaa"], {"i-0aaa": "10.0.0.5"})
    new_plan = solved_plan(launcher, g5_spot_option())
    body = replan_body(launcher, old, new_plan)
    api = api_as(launcher)
    applied = api.post(f"/api/v1/jobs/{old.pk}/replan/apply/", body, format="json")
    assert applied.status_code == 201, applied.content
    new = applied.json()["id"]
    again = api.post(f"/api/v1/jobs/{old.pk}/replan/apply/", body, format="json")
    assert again.status_code == 409 and again.json()["job"] == new, again.content
    assert set(Job.objects.values_list("pk", flat=True)) == {old.pk, new}
    assert old.events.filter(kind="replan_applied").count() == 1


@pytest.mark.django_db
def test_the_launch_page_sends_a_resent_confirmation_to_the_job_it_launched(client, launcher, plan):
    client.force_login(launcher)
    form = {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "40", "max_hours": "10"}
    preview = launch.prepare(launcher, plan.pk, 1, "train.py", "40", 10)
    form["confirmation"] = preview["confirmation"]
    first = client.post("/jobs/new/", form)
    job = Job.objects.get()
    assert first.status_code == 302 and first["Location"] == f"/jobs/{job.pk}/"
    again = client.post("/jobs/new/", form, follow=True)
    assert again.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert f"This launch was already confirmed: job {job.pk}." in again.content.decode()
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_replan_page_sends_a_resent_apply_to_the_job_it_launched(client, launcher, plan):
    old = running_job(launcher, plan, ["i-0aaa"], {"i-0aaa": "10.0.0.5"})
    new_plan = solved_plan(launcher, g5_spot_option())
    form = replan_body(launcher, old, new_plan)
    client.force_login(launcher)
    client.post(f"/jobs/{old.pk}/replan/apply/", form)
    new = Job.objects.exclude(pk=old.pk).get()
    again = client.post(f"/jobs/{old.pk}/replan/apply/", form, follow=True)
    assert again.redirect_chain == [(f"/jobs/{new.pk}/", 302)]
    assert f"This re-plan was already applied: job {new.pk}." in again.content.decode()
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_the_launch_forms_are_sent_once(client, launcher, plan):
    """The no-JavaScript forms that launch carry the guard against a double click."""
    client.force_login(launcher)
    page = client.post(
        "/jobs/new/",
        {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "40", "max_hours": "10"},
    ).content.decode()
    assert 'id="launch-form" data-submit-once' in page and "frontend/submit_once.js" in page


# --- at once --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_one_confirmation_posted_by_four_threads_at_once_launches_one_job(launcher, plan):
    body = previewed(api_as(launcher), plan)
    answers = all_at_once(lambda: api_as(launcher).post("/api/v1/jobs/", body, format="json"))
    codes = sorted(getattr(a, "status_code", repr(a)) for a in answers)
    assert codes == [201] + [409] * (THREADS - 1), codes
    (job,) = Job.objects.all()
    assert all(a.json()["job"] == job.pk for a in answers if a.status_code == 409)
    assert queued_launches() == [[job.pk]]  # the losers' on_commit work went with their rollback
    assert api_as(launcher).post("/api/v1/jobs/", body, format="json").status_code == 409  # and later
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_one_replan_confirmation_applied_by_four_threads_at_once_launches_one_job(launcher, plan):
    old = running_job(launcher, plan, ["i-0aaa"], {"i-0aaa": "10.0.0.5"})
    body = replan_body(launcher, old, solved_plan(launcher, g5_spot_option()))
    answers = all_at_once(
        lambda: api_as(launcher).post(f"/api/v1/jobs/{old.pk}/replan/apply/", body, format="json")
    )
    codes = sorted(getattr(a, "status_code", repr(a)) for a in answers)
    assert codes == [201] + [409] * (THREADS - 1), codes
    new = Job.objects.exclude(pk=old.pk).get()
    assert queued_launches() == [[old.pk], [new.pk]]
    old.refresh_from_db()
    assert old.status == JobStatus.STOPPED and old.events.filter(kind="replan_applied").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_second_of_two_open_transactions_fails_on_the_unique_index_and_rolls_back(launcher, plan):
    """The race itself, made certain: the first launch holds its transaction open (its job is
    not visible yet, so the second passes the early check) while the second inserts; the second
    fails on the index once the first commits, and keeps nothing of what it did."""
    digest = launch.confirmation_digest("a confirmation id")
    inserted, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                outcome["first"] = jobs.create_job(
                    launcher, plan, 1, "train.py", Decimal("10"), 5, confirm=True, confirmation=digest
                ).pk
                inserted.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    def second() -> None:
        inserted.wait(timeout=30)
        try:
            jobs.create_job(
                launcher, plan, 1, "train.py", Decimal("10"), 5, confirm=True, confirmation=digest
            )
        except jobs.ConfirmationUsed as exc:
            outcome["second"] = exc.job_id
        except Exception as exc:
            outcome["second"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inserted.wait(timeout=30)
    threads[1].join(timeout=1)  # the second is waiting for the first (PostgreSQL: on the index)
    assert threads[1].is_alive() and "second" not in outcome
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert outcome["second"] == outcome["first"], outcome
    assert list(Job.objects.values_list("pk", flat=True)) == [outcome["first"]]
    assert queued_launches() == [[outcome["first"]]]

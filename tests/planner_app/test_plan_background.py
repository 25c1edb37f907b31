"""Plans as background work: 202 and the plan's URL, queued → running → solved with progress,
cancel (queued and running), a worker that died mid-solve, a failing solver, the command's
progress bar, and the live websocket."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from planner.app import service, solving
from planner.app.models import PlanRecord, PlanStatus
from planner.app.tasks import recover_stale_plans_task, solve_plan_task
from planner.plan_result import PlanResult
from tests.support.plans import TINY, plan_body, plan_command

BODY = plan_body(max_nodes=8)


@pytest.fixture
def dummy_tasks(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    from django_tasks import task_backends

    backend = task_backends["default"]
    backend.clear()
    return backend


def _queued(user_api) -> dict:
    resp = user_api.post("/api/v1/plans/", BODY, format="json")
    assert resp.status_code == 202, resp.json()
    return resp.json()


def _running(owner, *, beat_age_s: float = 0, attempts: int = 1) -> PlanRecord:
    """A plan a worker took (``attempts``), whose last heartbeat is ``beat_age_s`` old."""
    beat = timezone.now() - timedelta(seconds=beat_age_s)
    return PlanRecord.objects.create(
        owner=owner,
        request={"model": TINY, "objective": "cost"},
        status=PlanStatus.RUNNING,
        attempts=attempts,
        started_at=beat,
        heartbeat_at=beat,
        phase="search",
    )


# --- 202 and the status flow --------------------------------------------------------------


@pytest.mark.django_db
def test_a_plan_is_accepted_with_its_url_then_queued_running_and_solved_with_progress(
    user_api, catalog, settings, monkeypatch, django_capture_on_commit_callbacks, dummy_tasks
):
    settings.PLAN_PROGRESS_EVERY_S = 0  # store every report
    with django_capture_on_commit_callbacks(execute=True):
        resp = user_api.post("/api/v1/plans/", BODY, format="json")
    assert resp.status_code == 202
    body = resp.json()
    assert resp["Location"] == body["url"] == f"http://testserver/api/v1/plans/{body['id']}/"
    assert body["status"] == "queued" and body["page"].endswith(f"/plans/{body['id']}/")
    # queued: the task is handed to the backend once the request's transaction commits
    [queued] = dummy_tasks.results
    assert queued.task.name == "solve_plan_task" and list(queued.args) == [body["id"]]
    first = user_api.get(body["progress_url"]).json()
    assert first["status"] == "queued" and first["evaluated"] == 0 and not first["finished"]

    seen = []  # what a client polling the progress endpoint sees while the worker solves
    real = service.solve_request

    def watched(req, owner, *, allow_code=False, progress=None):
        def report(phase, evaluated, total):
            progress(phase, evaluated, total)
            seen.append(user_api.get(body["progress_url"]).json())

        return real(req, owner, allow_code=allow_code, progress=report)

    monkeypatch.setattr(service, "solve_request", watched)
    assert solve_plan_task.call(body["id"]) == f"plan {body['id']} solved"

    assert {s["status"] for s in seen} == {"running"}
    phases = [s["phase"] for s in seen]
    assert phases[0] == "model" and "search" in phases and phases[-1] == "baselines"
    counts = [s["evaluated"] for s in seen if s["phase"] == "search"]
    assert counts[-1] > 0 and counts == sorted(counts)
    assert all(0 <= s["fraction"] <= 1 and s["evaluated"] <= s["estimated_total"] for s in seen)
    assert all(s["started_at"] and s["heartbeat_at"] and s["attempts"] == 1 for s in seen)

    done = user_api.get(body["url"]).json()
    assert done["status"] == "solved" and done["result"]["plans"] and done["phase"] == ""
    assert done["progress_evaluated"] == done["progress_total"] == counts[-1]
    assert done["started_at"] <= done["finished_at"] and done["error"] == ""
    final = user_api.get(body["progress_url"]).json()
    assert final["finished"] and final["fraction"] == 1.0
    # a re-delivered task finds nothing to do
    assert "is solved; not solving it" in solve_plan_task.call(body["id"])


@pytest.mark.django_db
def test_bad_requests_are_still_a_400_naming_the_field_and_nothing_is_queued(user_api, catalog, dummy_tasks):
    resp = user_api.post("/api/v1/plans/", {**BODY, "deadline_hours": None}, format="json")
    assert resp.status_code == 400 and "deadline_hours" in resp.json()
    resp = user_api.post("/api/v1/plans/", {**BODY, "model": {"profile_run": 999}}, format="json")
    assert resp.status_code == 400 and "profile_run" in resp.json()
    assert not PlanRecord.objects.exists() and not dummy_tasks.results


# --- cancel -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cancelling_a_queued_plan_is_a_202_and_the_worker_then_skips_it(user_api, catalog, dummy_tasks):
    plan = _queued(user_api)
    resp = user_api.post(f"/api/v1/plans/{plan['id']}/cancel/")
    assert resp.status_code == 202 and resp.json()["status"] == "cancelled" and resp.json()["finished"]
    assert "is cancelled; not solving it" in solve_plan_task.call(plan["id"])
    again = user_api.post(f"/api/v1/plans/{plan['id']}/cancel/")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]
    record = PlanRecord.objects.get(pk=plan["id"])
    assert record.result is None and record.finished_at and "cancelled by alice" in record.error


@pytest.mark.django_db
def test_cancelling_a_running_plan_stops_its_solve(user_api, catalog, settings, monkeypatch, dummy_tasks):
    settings.PLAN_PROGRESS_EVERY_S = 0
    plan = _queued(user_api)
    real = service.solve_request
    answers = []

    def cancel_midway(req, owner, *, allow_code=False, progress=None):
        def report(phase, evaluated, total):
            if phase == "search" and evaluated and not answers:
                answers.append(user_api.post(f"/api/v1/plans/{plan['id']}/cancel/").status_code)
            progress(phase, evaluated, total)

        return real(req, owner, allow_code=allow_code, progress=report)

    monkeypatch.setattr(service, "solve_request", cancel_midway)
    assert solve_plan_task.call(plan["id"]).startswith("stopped")
    record = PlanRecord.objects.get(pk=plan["id"])
    assert answers == [202] and record.status == "cancelled" and record.result is None
    assert user_api.post(f"/api/v1/plans/{plan['id']}/cancel/").status_code == 409


@pytest.mark.django_db
def test_a_result_that_arrives_after_a_cancel_is_dropped(user, monkeypatch):
    plan = solving.store_plan(user, {"model": TINY})

    def solve_then_get_cancelled(req, owner, *, allow_code=False, progress=None):
        solving.cancel_plan(PlanRecord.objects.get(pk=plan.pk))  # e.g. during the baselines
        return PlanResult(solve_time_s=0.1)

    monkeypatch.setattr(service, "solve_request", solve_then_get_cancelled)
    assert "result dropped" in solving.run_plan(plan.pk)
    plan.refresh_from_db()
    assert plan.status == "cancelled" and plan.result is None


@pytest.mark.django_db
def test_only_the_owner_or_a_holder_of_the_permission_may_cancel(user_api, catalog, django_user_model):
    from django.contrib.auth.models import Group, Permission
    from rest_framework.test import APIClient

    plan = _queued(user_api)
    mate = django_user_model.objects.create_user("mate", password="m-pass-12345")
    team = Group.objects.create(name="team")
    team.user_set.add(mate, django_user_model.objects.get(username="alice"))
    other = APIClient()
    other.force_authenticate(mate)
    assert other.get(f"/api/v1/plans/{plan['id']}/progress/").status_code == 200  # a teammate reads it
    assert other.post(f"/api/v1/plans/{plan['id']}/cancel/").status_code == 403
    mate.user_permissions.add(Permission.objects.get(codename="change_planrecord"))
    other.force_authenticate(django_user_model.objects.get(pk=mate.pk))
    assert other.post(f"/api/v1/plans/{plan['id']}/cancel/").status_code == 202


@pytest.mark.django_db
def test_the_plan_page_cancel_button(client, user, user_api, catalog):
    plan = _queued(user_api)
    client.force_login(user)
    resp = client.post(f"/plans/{plan['id']}/cancel/")
    assert resp.status_code == 302 and resp["Location"] == f"/plans/{plan['id']}/"
    page = client.get(resp["Location"]).content.decode()
    assert "cancelled: cancelled by alice" in page and 'id="plan-cancel-form"' not in page


# --- a worker that died mid-solve ---------------------------------------------------------


@pytest.mark.django_db
def test_a_running_plan_whose_worker_died_is_queued_again_and_then_solved(
    user, user_api, catalog, settings, django_capture_on_commit_callbacks, dummy_tasks
):
    settings.PLAN_LEASE_S = 60
    plan = _running(user, beat_age_s=61)
    plan.request = service_request()
    plan.save()
    fresh = _running(user, beat_age_s=5)  # a live worker's plan is left alone
    seen = user_api.get(f"/api/v1/plans/{plan.pk}/progress/").json()  # a read only says so
    assert seen["status"] == "running" and seen["stale"] and "it will be queued again" in seen["notice"]
    assert not user_api.get(f"/api/v1/plans/{fresh.pk}/progress/").json()["stale"]
    with django_capture_on_commit_callbacks(execute=True):
        recover_stale_plans_task.call()  # the workers' recovery heartbeat requeues it
    seen = user_api.get(f"/api/v1/plans/{plan.pk}/progress/").json()
    assert seen["status"] == "queued" and "worker stopped while solving it (try 1)" in seen["error"]
    assert not seen["stale"] and seen["notice"] == ""
    solves = [list(r.args) for r in dummy_tasks.results if r.task.name == "solve_plan_task"]
    assert solves == [[plan.pk]]  # a new task for it
    assert PlanRecord.objects.get(pk=fresh.pk).status == "running"
    assert solve_plan_task.call(plan.pk) == f"plan {plan.pk} solved"
    plan.refresh_from_db()
    assert plan.attempts == 2 and plan.error == "" and plan.result["plans"]


_WRITES = ("INSERT", "UPDATE", "DELETE")


@pytest.mark.django_db
def test_reading_a_stale_plan_writes_nothing_and_says_what_will_happen(user, user_api, settings):
    """The API's reads and the websocket's snapshot show a plan whose worker died as it is; only
    the workers recover it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from planner.app.consumers import PlanConsumer

    settings.PLAN_LEASE_S = 60
    plan = _running(user, beat_age_s=90)
    last = _running(user, beat_age_s=90, attempts=2)  # its workers died twice: it will fail
    before = list(PlanRecord.objects.order_by("pk").values())
    with CaptureQueriesContext(connection) as queries:
        progress = user_api.get(f"/api/v1/plans/{plan.pk}/progress/").json()
        detail = user_api.get(f"/api/v1/plans/{plan.pk}/").json()
        listed = user_api.get("/api/v1/plans/").json()
        snapshot = PlanConsumer().snapshot(user, last.pk)
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(_WRITES)]
    assert writes == [] and list(PlanRecord.objects.order_by("pk").values()) == before
    assert progress["status"] == detail["status"] == "running" and progress["stale"]
    assert "stopped answering 90 s ago (lease 60 s); it will be queued again" in progress["notice"]
    assert {p["id"] for p in listed.get("results", listed)} == {plan.pk, last.pk}
    assert snapshot is not None and snapshot["stale"] and "it will fail" in snapshot["notice"]


@pytest.mark.django_db
def test_a_plan_task_queues_the_recovery_heartbeat_once_and_it_ends_when_no_plan_runs(user, settings):
    """The database backend (the default): the heartbeat is one deferred task row."""
    from django_tasks_db.models import DBTaskResult

    settings.PLAN_RECOVER_EVERY_S = 30
    heartbeats = DBTaskResult.objects.filter(task_path=recover_stale_plans_task.module_path)
    first, second = (solving.store_plan(user, {"model": TINY}) for _ in range(2))
    for plan in (first, second):
        PlanRecord.objects.filter(pk=plan.pk).update(status=PlanStatus.CANCELLED)  # nothing to solve
        solve_plan_task.call(plan.pk)
    [pending] = heartbeats.filter(status="READY")  # the second plan found it queued
    wait = (pending.run_after - timezone.now()).total_seconds()
    assert 25 < wait <= 30
    pending.delete()

    running = _running(user, beat_age_s=1)
    assert recover_stale_plans_task.call().endswith("again later")  # comes back while one runs
    assert heartbeats.filter(status="READY").count() == 1
    heartbeats.delete()
    PlanRecord.objects.filter(pk=running.pk).update(status=PlanStatus.SOLVED)
    assert recover_stale_plans_task.call().endswith("no plan running: done")
    assert not heartbeats.exists()


@pytest.mark.django_db
def test_a_plan_that_killed_its_workers_twice_fails_instead_of_killing_a_third(user, settings):
    settings.PLAN_LEASE_S = 60
    plan = _running(user, beat_age_s=120, attempts=2)
    assert solving.recover_stale_plans() == [(plan.pk, "failed")]
    plan.refresh_from_db()
    assert plan.status == "failed" and plan.finished_at and "2 times" in plan.error
    assert solving.recover_stale_plans() == []


@pytest.mark.django_db
def test_a_stale_worker_that_wakes_up_cannot_overwrite_the_plan(user, settings, monkeypatch):
    """A worker that stalled past its lease (its plan re-queued and taken by another) finds its
    lease gone at its next progress write and stops."""
    settings.PLAN_PROGRESS_EVERY_S = 0
    plan = solving.store_plan(user, {"model": TINY})

    def stalls(req, owner, *, allow_code=False, progress=None):
        PlanRecord.objects.filter(pk=plan.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        assert solving.recover_stale_plans() == [(plan.pk, "queued")]
        assert solving._claim(plan.pk) == 2  # another worker took it
        progress("search", 1, 2)  # the first one wakes up
        raise AssertionError("not reached")

    monkeypatch.setattr(service, "solve_request", stalls)
    assert solving.run_plan(plan.pk).startswith("stopped")
    plan.refresh_from_db()
    assert plan.status == "running" and plan.attempts == 2


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_a_long_phase_alive(user, settings, monkeypatch):
    """Phases without progress calls (a model trace, the baselines) keep the lease: the worker
    renews it while the solve's child process works (the child sees the beats and returns them)."""
    settings.PLAN_HEARTBEAT_S = 0.05
    settings.PLAN_LEASE_S = 0.5
    plan = solving.store_plan(user, {"model": TINY})

    def slow(req, owner, *, allow_code=False, progress=None):
        beats = []
        for _ in range(10):
            time.sleep(0.1)
            beats.append(
                PlanRecord.objects.values_list("heartbeat_at", flat=True).get(pk=plan.pk).isoformat()
            )
            assert solving.recover_stale_plans() == []  # never taken for dead
        return PlanResult(solve_time_s=1.0, stats={"beats": beats})  # the beats come back in it

    monkeypatch.setattr(service, "solve_request", slow)
    assert solving.run_plan(plan.pk) == f"plan {plan.pk} solved"
    plan.refresh_from_db()
    assert len(set(plan.result["stats"]["beats"])) >= 5  # renewed while the phase ran
    assert not [t for t in threading.enumerate() if t.name == f"plan-{plan.pk}-heartbeat"]


def service_request() -> dict:
    from planner.app.serializers import PlanRequestSerializer

    checked = PlanRequestSerializer(data=BODY)
    assert checked.is_valid(), checked.errors
    return dict(checked.validated_data)


# --- failures -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_solver_exception_fails_the_plan_with_its_message(user_api, catalog, monkeypatch):
    import planner.solver

    def boom(*args, **kwargs):
        raise RuntimeError("column generation exploded")

    monkeypatch.setattr(planner.solver, "solve", boom)
    plan = _queued(user_api)
    assert solve_plan_task.call(plan["id"]) == f"plan {plan['id']} failed"
    done = user_api.get(plan["url"]).json()
    assert done["status"] == "failed" and done["result"] is None and done["finished_at"]
    assert done["error"] == "the solver failed: RuntimeError: column generation exploded"


@pytest.mark.django_db
def test_a_model_that_cannot_be_built_fails_naming_the_field(user_api, catalog):
    resp = user_api.post(
        "/api/v1/plans/", {**BODY, "model": {**TINY, "input_shape": "3,2,2"}}, format="json"
    )  # valid as a shape; too small for the network, which only building it shows
    assert resp.status_code == 202
    solve_plan_task.call(resp.json()["id"])
    done = user_api.get(resp["Location"]).json()
    assert done["status"] == "failed" and done["error_field"] == "model"
    assert "cannot build torchvision:squeezenet1_1" in done["error"]


@pytest.mark.django_db
def test_a_backend_that_refuses_the_task_fails_the_plan_rather_than_leave_it_queued(
    user_api, catalog, monkeypatch, django_capture_on_commit_callbacks, dummy_tasks
):
    def refuse(*args, **kwargs):
        raise ConnectionError("queue unreachable")

    monkeypatch.setattr(type(dummy_tasks), "enqueue", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        plan = _queued(user_api)
    record = PlanRecord.objects.get(pk=plan["id"])
    assert record.status == "failed" and "could not queue the plan: queue unreachable" in record.error


# --- the command --------------------------------------------------------------------------


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


CLI = plan_command(max_nodes=8)


@pytest.mark.django_db
def test_the_command_solves_in_the_foreground_with_a_bar_only_on_a_terminal(catalog, staff):
    tty, pipe = Tty(), io.StringIO()
    call_command(*CLI, stdout=tty)
    call_command(*CLI, stdout=pipe)
    assert "\r[" in tty.getvalue() and "configurations" in tty.getvalue() and "search" in tty.getvalue()
    assert "\r" not in pipe.getvalue() and pipe.getvalue().startswith("plan ")
    # both stored as solved, on the worker's path (claimed once, finished)
    plans = list(PlanRecord.objects.order_by("pk"))
    assert [p.status for p in plans] == ["solved", "solved"] and all(p.attempts == 1 for p in plans)
    assert plans[0].progress_evaluated == plans[1].progress_evaluated > 0


# --- the websocket ------------------------------------------------------------------------


def _cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


async def _connect(plan_id: int, cookie: bytes | None):
    from srifty_web.asgi import application

    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", cookie))
    comm = WebsocketCommunicator(application, f"/ws/plans/{plan_id}/", headers=headers)
    connected, code = await comm.connect(timeout=10)
    return comm, connected, code


@pytest.mark.django_db(transaction=True)
async def test_a_viewer_gets_the_snapshot_then_live_progress_and_the_end(
    live_next, user, settings, monkeypatch, django_user_model
):
    settings.PLAN_PROGRESS_EVERY_S = 0
    plan = await sync_to_async(solving.store_plan)(user, {"model": TINY})

    def fake_solve(req, owner, *, allow_code=False, progress=None):
        progress("search", 10, 40)
        progress("search", 40, 40)
        return PlanResult(solve_time_s=0.2)

    monkeypatch.setattr(service, "solve_request", fake_solve)
    comm, connected, _ = await _connect(plan.pk, await sync_to_async(_cookie)(user))
    assert connected
    snap = await live_next(comm)
    assert snap["type"] == "snapshot" and snap["status"] == "queued" and snap["evaluated"] == 0

    assert await sync_to_async(solving.run_plan)(plan.pk) == f"plan {plan.pk} solved"
    seen = [await live_next(comm) for _ in range(4)]
    assert [(m["status"], m["phase"], m["evaluated"]) for m in seen] == [
        ("running", "", 0),
        ("running", "search", 10),
        ("running", "search", 40),
        ("solved", "", 40),
    ]
    assert seen[1]["estimated_total"] == 40 and seen[1]["fraction"] == 0.25 and seen[-1]["finished"]
    await comm.disconnect()

    # anonymous viewers and other teams are refused, as for runs and jobs
    _, connected, code = await _connect(plan.pk, None)
    assert not connected and code == 4401
    eve = await sync_to_async(django_user_model.objects.create_user)("eve", password="e-pass-12345")
    _, connected, code = await _connect(plan.pk, await sync_to_async(_cookie)(eve))
    assert not connected and code == 4403


def test_a_worker_solves_at_a_lower_cpu_priority(settings, monkeypatch):
    """The web server's requests come first on a shared host: the task lowers the priority of
    the worker's threads (never raises it)."""
    import os

    from planner.app.tasks import yield_cpu

    settings.PLAN_WORKER_NICE = 7
    seen = []

    def pool():  # a thread already running, as numpy's or torch's
        seen.append(threading.get_native_id())
        time.sleep(0.5)

    def worker():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        other = threading.Thread(target=pool)
        other.start()
        while not seen:
            time.sleep(0.01)
        # here, the worker's threads are these two (the test process's own are left alone)
        monkeypatch.setattr(os, "listdir", lambda path: [str(seen[0])])
        yield_cpu()
        seen.append((before, os.getpriority(os.PRIO_PROCESS, tid), os.getpriority(os.PRIO_PROCESS, seen[0])))
        other.join()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    before, mine, theirs = seen[1]
    assert mine == theirs == max(before, 7)

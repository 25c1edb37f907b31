"""Background work of plans (django-tasks; ``manage.py db_worker`` runs it): see
``planner.app.solving``.

Two tasks: ``solve_plan_task`` solves one plan, and ``recover_stale_plans_task`` is the workers'
recovery heartbeat. A worker killed mid-solve cannot recover its own plan, and reads never
write, so another worker must notice: every plan task that starts recovers the stale plans and
makes sure the heartbeat is queued; the heartbeat recovers them again every
``PLAN_RECOVER_EVERY_S`` (default 30 s, half the default lease) and queues itself again while a
plan is running, then ends (the next plan that starts queues it again). Its next run is a
deferred task row, so a worker that restarts after all workers died finds it and recovers the
plans they left. Deferring needs a backend that supports ``run_after`` (the database backend
does); without it the plan tasks' own recovery is all there is.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django_tasks import TaskResultStatus, task

from planner.app import solving
from srifty_web import queue


def yield_cpu() -> None:
    """A solve is background work: lower the CPU priority of this worker's threads (Linux nice
    is per thread: the calling one and every thread already running, such as numpy's or torch's
    pools; ``PLAN_WORKER_NICE``, default 10, 0 to leave it) so that on a shared host the web
    server's requests come first. Threads started later (the heartbeat) inherit it."""
    nice = int(getattr(settings, "PLAN_WORKER_NICE", 10))
    try:
        tids = {threading.get_native_id(), *(int(t) for t in os.listdir("/proc/self/task"))}
    except OSError:  # not Linux
        tids = {threading.get_native_id()}
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (AttributeError, OSError):  # gone, not allowed, or no such call: leave it
            pass


@task()
def solve_plan_task(plan_id: int) -> str:
    yield_cpu()
    # A worker that starts a plan first recovers those whose worker died mid-solve, and makes
    # sure the recovery heartbeat watches this one.
    solving.recover_stale_plans()
    schedule_recovery()
    return solving.run_plan(plan_id)


def recover_every_s() -> float:
    return float(getattr(settings, "PLAN_RECOVER_EVERY_S", 30))


def _recovery_pending() -> bool:
    """Is a heartbeat already queued (not yet started)? Only the database backend can say; on
    another one, a second chain costs a query every ``PLAN_RECOVER_EVERY_S`` and no harm (every
    recovery is a conditional update)."""
    if not type(recover_stale_plans_task.get_backend()).__module__.startswith("django_tasks_db"):
        return False
    from django_tasks_db.models import DBTaskResult  # only where it is the backend (an installed app)

    path = recover_stale_plans_task.module_path
    return DBTaskResult.objects.filter(task_path=path, status=TaskResultStatus.READY).exists()


def schedule_recovery() -> bool:
    """Queue the recovery heartbeat ``PLAN_RECOVER_EVERY_S`` from now, unless one is queued
    already or the backend cannot defer. True when one was queued."""
    if not recover_stale_plans_task.get_backend().supports_defer or _recovery_pending():
        return False
    later = timezone.now() + timedelta(seconds=recover_every_s())
    recover_stale_plans_task.using(run_after=later).enqueue()
    return True


@task()
def recover_stale_plans_task() -> str:
    """The recovery heartbeat: requeue (or fail) the plans whose worker stopped answering, then
    come back while a plan is running."""
    recovered = solving.recover_stale_plans()
    again = solving.any_running() and schedule_recovery()
    return f"recovered {recovered}; {'again later' if again else 'no plan running: done'}"


queue.provide(queue.SOLVE_PLAN, solve_plan_task.enqueue)  # solving.enqueue asks for it by name

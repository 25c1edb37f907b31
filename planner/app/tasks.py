"""Background work of plans (django-tasks; ``manage.py db_worker`` runs it): see
``planner.app.solving``."""

from __future__ import annotations

import os
import threading

from django.conf import settings
from django_tasks import task

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
    # A worker that starts a plan first recovers those whose worker died mid-solve.
    solving.recover_stale_plans()
    return solving.run_plan(plan_id)


queue.provide("plans.solve_plan", solve_plan_task.enqueue)  # solving.enqueue asks for it by name

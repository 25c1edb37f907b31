"""Background work of training jobs (django-tasks; ``manage.py db_worker`` runs them).

launch -> watch (re-queued every ``JOB_WATCH_EVERY_S`` until the job ends) -> stop -> cleanup;
plus the reconciler, which re-queues itself every ``RECONCILE_EVERY_S``. The web process never
waits on EC2. Deferred re-queueing needs a backend that supports ``run_after`` (the database
backend does); without it the chain simply ends, as for profiling runs.

The state changes (``launcher.jobs``) ask for this work by name through ``srifty_web.queue``;
the names are bound at the end of this module, which ``LauncherConfig.ready`` imports. This
module imports the state changes and the launch code; they never import it.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.utils import timezone
from django_tasks import default_task_backend, task

from cloud.ec2 import CloudError
from fleet import reconcile
from launcher import jobs, launch, monitor
from launcher.models import Job
from srifty_web import queue

log = logging.getLogger(__name__)


def _later(task_obj: Any, delay_s: float, *args: object) -> bool:
    """Queue ``task_obj`` (a django-tasks task: untyped, hence Any) ``delay_s`` from now."""
    if not default_task_backend.supports_defer:
        return False
    task_obj.using(run_after=timezone.now() + timedelta(seconds=delay_s)).enqueue(*args)
    return True


@task()
def launch_job_task(job_id: int) -> str:
    return launch.launch_job(Job.objects.get(pk=job_id))


def schedule_watch(job_id: int, delay_s: float | None = None, errors: int = 0) -> bool:
    every = float(delay_s or jobs.setting("JOB_WATCH_EVERY_S", 30))
    return _later(watch_job_task, every, job_id, *([errors] if errors else []))


@task()
def watch_job_task(job_id: int, errors: int = 0) -> str:
    """One watch pass, then the next one queued. An EC2 error is a hiccup: the next pass looks
    again (the cap still holds: the reconciler and the VM's own shutdown). Any other error is
    logged and the watch goes on too, since a watch that ends leaves a job unwatched (no
    interruption handling, no cap) for good; ``errors`` counts them in a row, and after
    ``JOB_WATCH_MAX_ERRORS`` (10) the job fails with the error as its reason, which terminates it."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "gone"
    try:
        state = monitor.watch_job(job)
        errors = 0
    except CloudError as exc:
        log.warning("watching job %s: %s", job_id, exc)
        state = "watching"
    except Exception as exc:
        errors += 1
        log.exception("watching job %s failed (%d in a row)", job_id, errors)
        limit = int(jobs.setting("JOB_WATCH_MAX_ERRORS", 10))
        if errors >= limit:
            jobs.fail_job(
                job,
                f"watching the job failed {errors} times in a row, last with {type(exc).__name__}: {exc}",
            )
            return "failed"
        state = "watching"
    if state == "watching":
        schedule_watch(job_id, errors=errors)
    return state


@task()
def stop_job_task(job_id: int) -> str:
    job = Job.objects.get(pk=job_id)
    done = launch.teardown(job)
    if not launch.cleanup(job):
        _later(cleanup_job_task, 60, job_id, 1)
    return f"terminated {len(done)} instance(s)"


@task()
def cleanup_job_task(job_id: int, attempt: int = 1) -> str:
    job = Job.objects.get(pk=job_id)
    if launch.cleanup(job):
        return "cleaned up"
    if attempt < launch.CLEANUP_ATTEMPTS:
        _later(cleanup_job_task, 60 * (attempt + 1), job_id, attempt + 1)
        return "placement group still in use; retrying later"
    return "gave up deleting the placement group"


@task()
def reconcile_task(
    regions: list[str] | None = None, dry_run: bool = False, repeat: bool = True
) -> dict[str, Any]:
    report = reconcile.reconcile(regions=regions, dry_run=dry_run)
    if repeat:
        _later(reconcile_task, float(jobs.setting("RECONCILE_EVERY_S", 600)), regions, dry_run, True)
    return report.as_dict()


queue.provide(queue.LAUNCH_JOB, launch_job_task.enqueue)
queue.provide(queue.WATCH_JOB, schedule_watch)
queue.provide(queue.STOP_JOB, stop_job_task.enqueue)

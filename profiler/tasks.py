"""Background work of profiling runs (django-tasks; ``manage.py db_worker`` runs them).

start -> watch (re-queued every few seconds until the run ends or passes its deadline) -> stop.
The web process never waits on an agent, a subprocess or EC2.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django_tasks import default_task_backend, task

from profiler import actions, providers
from profiler.models import ProfilingRun, Provider, RunKind, RunStatus
from srifty_web import queue

log = logging.getLogger(__name__)
WATCH_EVERY_S = 3.0


def local_code_refused(run: ProfilingRun) -> bool:
    """A local compute run of model code while local code execution is off (checked again
    here: the run may have been stored while it was on)."""
    from workload.specs import SpecError, parse_spec

    if run.kind != RunKind.COMPUTE or run.provider != Provider.LOCAL or settings.LOCAL_CODE_EXECUTION:
        return False
    try:
        return not parse_spec(run.model_spec).is_library
    except SpecError:
        return True


@task()
def start_run_task(run_id: int) -> str:
    run = ProfilingRun.objects.get(pk=run_id)
    if run.status != RunStatus.PENDING:
        return f"run {run_id} is {run.status}; not starting it again"  # a re-delivered task
    return start_run(run)


def start_run(run: ProfilingRun) -> str:
    if local_code_refused(run):
        actions.fail_run(
            run,
            "model code runs on this server only when the operator allows it "
            "(SRIFTY_LOCAL_CODE=1); profile it on EC2 or use a library model",
        )
        return "refused: local code execution is off"
    provider = providers.for_run(run)
    try:
        token = actions.issue_token(run, launch_key=provider.launch_key(run))
    except actions.RunClosed as exc:
        return f"not started: {exc}"
    try:
        handle = provider.start(run, token)
    except Exception as exc:  # any failure to start ends the run with the reason
        log.exception("starting run %s failed", run.pk)
        actions.fail_run(run, f"could not start the agent: {exc}")
        return "failed to start"
    if isinstance(handle, list):
        actions.mark_starting(run, instance_ids=handle)
    else:
        actions.mark_starting(run, pid=handle)
    schedule_watch(run.pk)
    return f"started ({handle})"


def schedule_watch(run_id: int, delay_s: float = WATCH_EVERY_S) -> None:
    if default_task_backend.supports_defer:
        watch_run_task.using(run_after=timezone.now() + timedelta(seconds=delay_s)).enqueue(run_id)


@task()
def watch_run_task(run_id: int) -> str:
    run = ProfilingRun.objects.get(pk=run_id)
    try:
        state = watch_run(run)
    except Exception as exc:  # e.g. throttled DescribeInstances: look again, the deadline still holds
        log.warning("watching run %s failed (%s); retrying", run_id, exc)
        state = "watching"
    if state == "watching":
        schedule_watch(run_id)
    return state


def watch_run(run: ProfilingRun) -> str:
    """One look at a run: end it when past its deadline or when its agent is gone."""
    if run.finished:
        return run.status
    provider = providers.for_run(run)
    if timezone.now() >= run.deadline_at:
        actions.fail_run(run, f"stopped at its hard time limit ({run.deadline_at:%H:%M:%S} UTC)")
        return "timed out"
    poll = provider.poll(run)
    if poll.alive:
        return "watching"
    run.refresh_from_db()
    if run.finished:  # the agent's last post landed while we looked
        return run.status
    profile = provider.result_file(run)
    if profile is not None:
        try:
            actions.complete_run(run, profile)
            return "succeeded from the result file"
        except (actions.BadProfile, actions.RunClosed) as exc:
            actions.fail_run(run, f"result file rejected: {exc}")
            return "failed"
    tail = provider.log_tail(run).strip()
    actions.fail_run(
        run, f"{poll.detail} before reporting a result" + (f"\n--- agent log ---\n{tail}" if tail else "")
    )
    return "failed"


@task()
def stop_run_task(run_id: int) -> str:
    run = ProfilingRun.objects.get(pk=run_id)
    provider = providers.for_run(run)
    provider.stop(run)
    if not provider.cleanup(run):  # a placement group stays busy while its nodes terminate
        schedule_cleanup(run_id, 1)
        return "stopped; cleanup pending"
    return "stopped"


CLEANUP_EVERY_S = 30.0
CLEANUP_ATTEMPTS = 20  # ten minutes: terminating instances release a placement group in one or two


def schedule_cleanup(run_id: int, attempt: int) -> None:
    if default_task_backend.supports_defer:
        cleanup_run_task.using(run_after=timezone.now() + timedelta(seconds=CLEANUP_EVERY_S)).enqueue(
            run_id, attempt
        )


@task()
def cleanup_run_task(run_id: int, attempt: int = 1) -> str:
    """Delete what outlives a run's instances (a cluster's placement group), retried a while."""
    run = ProfilingRun.objects.get(pk=run_id)
    provider = providers.for_run(run)
    provider.stop(run)  # again: a node that was still launching when the run ended goes too
    if provider.cleanup(run):
        return "cleaned up"
    if attempt >= CLEANUP_ATTEMPTS:
        log.error(
            "run %s: placement group %s still not deleted after %d tries",
            run_id,
            run.placement_group,
            attempt,
        )
        return "gave up"
    schedule_cleanup(run_id, attempt + 1)
    return f"cleanup pending (try {attempt})"


@task()
def refit_comm_model_task() -> str:
    """Refit the NCCL comm model with every stored user curve (after a new curve arrived)."""
    from planner.app import comm_training

    path = comm_training.refit()
    return f"wrote {path}"


queue.provide(queue.START_RUN, start_run_task.enqueue)
queue.provide(queue.STOP_RUN, stop_run_task.enqueue)
queue.provide(queue.REFIT_COMM_MODEL, refit_comm_model_task.enqueue)

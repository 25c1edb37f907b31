"""Background work by name, so that state changes never import the tasks that do the work.

A state change (``profiler.actions``, ``launcher.jobs``) commits a row and then wants work done
in the background: start a VM, watch a job, tear a cluster down. That work calls back into the
state changes (a launch that fails marks its job failed), so the task modules import the state
changes, never the other way round. A state change asks for work by name::

    queue.enqueue_on_commit(queue.STOP_JOB, job.pk)

and the app's task module binds each name to what queues it (``provide``) when Django starts
(the app's ``AppConfig.ready`` imports it). Every name is listed here (``NAMES``), so a reader
finds all background work in one place; ``provide`` and ``enqueue`` refuse a name not in the list
(``ValueError``: a typo fails where it is written), and a listed name nobody provides is a
``LookupError``: a forgotten binding fails loudly instead of silently launching nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

# Every name of background work; the app named before the dot binds it in its tasks module.
SOLVE_PLAN = "plans.solve_plan"  # planner.app.tasks: solve a queued plan (planner.app.solving)
LAUNCH_JOB = "launcher.launch_job"  # launcher.tasks: start a confirmed job's instances
WATCH_JOB = "launcher.watch_job"  # launcher.tasks: follow a running job (spend, deadline, nodes)
STOP_JOB = "launcher.stop_job"  # launcher.tasks: terminate a job's instances, then clean up its groups
START_RUN = "profiler.start_run"  # profiler.tasks: start a profiling run's VM or local agent
STOP_RUN = "profiler.stop_run"  # profiler.tasks: stop a profiling run (its VM or local agent)
REFIT_COMM_MODEL = "profiler.refit_comm_model"  # profiler.tasks: refit the comm model after a comm run

NAMES: frozenset[str] = frozenset(
    {SOLVE_PLAN, LAUNCH_JOB, WATCH_JOB, STOP_JOB, START_RUN, STOP_RUN, REFIT_COMM_MODEL}
)

_PROVIDERS: dict[str, Callable[..., object]] = {}


def _listed(name: str) -> str:
    """``name`` if it is one of ``NAMES``; a ``ValueError`` naming the list otherwise."""
    if name not in NAMES:
        raise ValueError(
            f"{name!r} is not a background-work name: use one of srifty_web.queue.NAMES "
            f"({', '.join(sorted(NAMES))}) or add it there"
        )
    return name


def provided() -> frozenset[str]:
    """The names bound so far (all of ``NAMES`` once every app's ``ready`` has run)."""
    return frozenset(_PROVIDERS)


def provide(name: str, enqueue: Callable[..., object]) -> None:
    """Bind ``name`` to the callable that queues its work (e.g. a django-task's ``enqueue``)."""
    _PROVIDERS[_listed(name)] = enqueue


def enqueue(name: str, *args: object) -> object:
    """Queue the work bound to ``name`` now."""
    try:
        provider = _PROVIDERS[_listed(name)]
    except KeyError:
        raise LookupError(
            f"no background work is bound to {name!r}: is its app's task module imported (AppConfig.ready)?"
        ) from None
    return provider(*args)


def enqueue_on_commit(name: str, *args: object) -> None:
    """Queue the work bound to ``name`` once the current transaction commits (at once outside
    one), so that a task never starts on a row that was rolled back."""
    if _listed(name) not in _PROVIDERS:
        enqueue(name, *args)  # raises: better here than inside an on_commit callback
    transaction.on_commit(lambda: enqueue(name, *args))

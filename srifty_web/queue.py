"""Background work by name, so that state changes never import the tasks that do the work.

A state change (``profiler.actions``, ``launcher.jobs``) commits a row and then wants work done
in the background: start a VM, watch a job, tear a cluster down. That work calls back into the
state changes (a launch that fails marks its job failed), so the task modules import the state
changes, never the other way round. A state change asks for work by name::

    queue.enqueue_on_commit("launcher.stop_job", job.pk)

and the app's task module binds each name to what queues it (``provide``) when Django starts
(the app's ``AppConfig.ready`` imports it). A name nobody provides is a ``LookupError``: a
forgotten binding fails loudly instead of silently launching nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

_PROVIDERS: dict[str, Callable[..., object]] = {}


def provide(name: str, enqueue: Callable[..., object]) -> None:
    """Bind ``name`` to the callable that queues its work (e.g. a django-task's ``enqueue``)."""
    _PROVIDERS[name] = enqueue


def enqueue(name: str, *args: object) -> object:
    """Queue the work bound to ``name`` now."""
    try:
        provider = _PROVIDERS[name]
    except KeyError:
        raise LookupError(
            f"no background work is bound to {name!r}: is its app's task module imported (AppConfig.ready)?"
        ) from None
    return provider(*args)


def enqueue_on_commit(name: str, *args: object) -> None:
    """Queue the work bound to ``name`` once the current transaction commits (at once outside
    one), so that a task never starts on a row that was rolled back."""
    if name not in _PROVIDERS:
        enqueue(name, *args)  # raises: better here than inside an on_commit callback
    transaction.on_commit(lambda: enqueue(name, *args))

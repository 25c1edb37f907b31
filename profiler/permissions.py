"""Who may change a profiling run's state: the one rule the API and the pages both ask.

Seeing is not changing (``srifty_web.teams``): a teammate who may read a run may cancel it only
as its owner or holding :data:`CANCEL_PERMISSION`. Callers have already found the run through
``ProfilingRun.objects.visible_to(user)``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

from profiler.models import ProfilingRun
from srifty_web.teams import acts_for_owner

CANCEL_PERMISSION = "profiler.change_profilingrun"  # teammates without it may read a run, not cancel it


def can_cancel(user: Any, run: ProfilingRun) -> bool:
    """May ``user`` cancel ``run`` (whether or not it has finished)."""
    return acts_for_owner(user, run, CANCEL_PERMISSION)


def check_cancel(user: Any, run: ProfilingRun) -> None:
    """Raise ``PermissionDenied`` (a 403 in a view and in the API) unless :func:`can_cancel`."""
    if not can_cancel(user, run):
        raise PermissionDenied(f"only the owner (or {CANCEL_PERMISSION}) may cancel this run")

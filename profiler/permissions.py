"""Who may change a profiling run's state: the one rule the API and the pages both ask.

Seeing is not changing (``srifty_web.teams``): a teammate who may read a run may cancel it only
as its owner or holding :data:`CANCEL_PERMISSION`. Callers have already found the run through
``ProfilingRun.objects.visible_to(user)``.
"""

from __future__ import annotations

from srifty_web.teams import ChangeRule

CANCEL = ChangeRule(
    "profiler.change_profilingrun", "cancel this run"
)  # teammates without it may read a run, not cancel it
CANCEL_PERMISSION = CANCEL.permission
can_cancel = CANCEL.allows  # (user, run) -> bool, whether or not it has finished
check_cancel = CANCEL.check  # raises PermissionDenied unless can_cancel

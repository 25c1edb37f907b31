"""Who may change a plan's state: the one rule the API and the pages both ask.

Seeing is not changing (``srifty_web.teams``): a teammate who may read a plan may cancel it only
as its owner or holding :data:`CANCEL_PERMISSION`. Callers have already found the plan through
``PlanRecord.objects.visible_to(user)``.
"""

from __future__ import annotations

from srifty_web.teams import ChangeRule

CANCEL = ChangeRule(
    "plans.change_planrecord", "cancel this plan"
)  # teammates without it may read a plan, not cancel it
CANCEL_PERMISSION = CANCEL.permission
can_cancel = CANCEL.allows  # (user, record) -> bool, whether or not it has finished
check_cancel = CANCEL.check  # raises PermissionDenied unless can_cancel

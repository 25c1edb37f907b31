"""Who may change a plan's state: the one rule the API and the pages both ask.

Seeing is not changing (``srifty_web.teams``): a teammate who may read a plan may cancel it only
as its owner or holding :data:`CANCEL_PERMISSION`. Callers have already found the plan through
``PlanRecord.objects.visible_to(user)``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

from planner.app.models import PlanRecord
from srifty_web.teams import acts_for_owner

CANCEL_PERMISSION = "plans.change_planrecord"  # teammates without it may read a plan, not cancel it


def can_cancel(user: Any, record: PlanRecord) -> bool:
    """May ``user`` cancel ``record`` (whether or not it has finished)."""
    return acts_for_owner(user, record, CANCEL_PERMISSION)


def check_cancel(user: Any, record: PlanRecord) -> None:
    """Raise ``PermissionDenied`` (a 403 in a view and in the API) unless :func:`can_cancel`."""
    if not can_cancel(user, record):
        raise PermissionDenied(f"only the owner (or {CANCEL_PERMISSION}) may cancel this plan")

"""Who may see whose work: a user, the members of the user's teams (Django groups), and staff.

Runs, plans and jobs all filter through ``visible_owner_q`` so the rule lives in one place;
their managers offer it as ``Model.objects.visible_to(user)`` (``TeamQuerySet``). Every lookup
of a run, plan or job by id on behalf of a user goes through it, so that another team's object
answers exactly like one that does not exist.

Seeing is not changing: ``acts_for_owner`` says whether a user who can see an object may also
change its state (stop, cancel): its owner, or a holder of the given permission.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q


def _is_user(user) -> bool:
    """A real, logged-in user (not AnonymousUser, not an agent or node principal)."""
    return isinstance(user, get_user_model()) and user.is_authenticated and user.is_active


def teammate_ids(user) -> set[int]:
    """The user and everyone who shares a group with them."""
    User = get_user_model()
    ids = set(User.objects.filter(groups__in=user.groups.all()).values_list("pk", flat=True))
    ids.add(user.pk)
    return ids


def visible_owner_q(user, field: str = "owner") -> Q:
    if not _is_user(user):
        return Q(pk__in=[])  # nobody's work: anonymous viewers and token principals see nothing
    if user.is_staff:
        return Q()
    return Q(**{f"{field}__in": teammate_ids(user)})


def acts_for_owner(user, obj, permission: str) -> bool:
    """May ``user`` change ``obj``'s state: its owner, or someone holding ``permission``.
    (Callers have already found ``obj`` through ``visible_to(user)``.)"""
    if not _is_user(user):
        return False
    return obj.owner_id == user.pk or user.has_perm(permission)


@dataclass(frozen=True)
class ChangeRule:
    """One state change on an owned object (cancel a plan, cancel a run): allowed to its owner or
    to whoever holds ``permission``; ``action`` is what the 403 says may not be done."""

    permission: str
    action: str  # e.g. "cancel this plan"

    def allows(self, user: Any, obj: Any) -> bool:
        """May ``user`` do it to ``obj`` (found through ``visible_to(user)``)."""
        return acts_for_owner(user, obj, self.permission)

    def check(self, user: Any, obj: Any) -> None:
        """Raise ``PermissionDenied`` (a 403 in a view and in the API) unless :meth:`allows`."""
        if not self.allows(user, obj):
            raise PermissionDenied(f"only the owner (or {self.permission}) may {self.action}")


class TeamQuerySet(models.QuerySet):
    """Querysets of owned objects (``owner`` foreign key) with the team rule."""

    def visible_to(self, user: Any) -> Self:
        return self.filter(visible_owner_q(user))

"""Who may see whose work: a user, the members of the user's teams (Django groups), and staff.

Runs, plans and jobs all filter through ``visible_owner_q`` so the rule lives in one place.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q


def teammate_ids(user) -> set[int]:
    """The user and everyone who shares a group with them."""
    User = get_user_model()
    ids = set(User.objects.filter(groups__in=user.groups.all()).values_list("pk", flat=True))
    ids.add(user.pk)
    return ids


def visible_owner_q(user, field: str = "owner") -> Q:
    if user.is_staff:
        return Q()
    return Q(**{f"{field}__in": teammate_ids(user)})

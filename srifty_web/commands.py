"""What the management commands share: whose name a command acts in.

``manage.py plan``, ``launch`` and ``profile_model`` create rows owned by a user, like the web
does. ``--user NAME`` names that user; without it the command acts as the first superuser (by
primary key), the administrator who ran ``createsuperuser`` first.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import CommandError


def owner_for_command(username: str | None) -> AbstractBaseUser:
    """The user named by ``--user``, or the first superuser when none is named.

    Raises ``CommandError`` (exit 1 with the message, no traceback) when that user does not
    exist: ``no user 'NAME'``, or ``no superuser; pass --user``.
    """
    User = get_user_model()
    user = (
        User.objects.filter(username=username).first()
        if username
        else User.objects.filter(is_superuser=True).order_by("pk").first()
    )
    if user is None:
        raise CommandError(f"no user {username!r}" if username else "no superuser; pass --user")
    return user

"""Issuing users' API tokens (``accounts.models.ApiToken``): the key is returned once, only its
hash is kept."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken

# Live tokens one user may hold: each POST to the token endpoint issues a new one (the old key
# cannot be shown again), so a script that asks at every start would otherwise pile them up.
# Past this, the oldest are revoked.
MAX_LIVE_TOKENS_PER_USER = 100


@dataclass(frozen=True)
class IssuedToken:
    key: str  # the raw key: shown to its user once, never stored
    expires_at: datetime


def issue_api_token(user) -> IssuedToken:
    """A new API key for ``user``; its expired tokens and those past the cap go."""
    with transaction.atomic():
        mine = ApiToken.objects.filter(user=user)
        mine.filter(token_expires_at__lte=timezone.now()).delete()
        oldest = mine.order_by("-created_at", "-pk").values_list("pk", flat=True)[
            MAX_LIVE_TOKENS_PER_USER - 1 :
        ]
        ApiToken.objects.filter(pk__in=list(oldest)).delete()
        token = ApiToken(user=user)
        key = token.new_token()
        token.save()
    assert token.token_expires_at is not None
    return IssuedToken(key=key, expires_at=token.token_expires_at)


def user_for_key(key: str):
    """The active user whose live token this is, else ``None``."""
    token = ApiToken.objects.live().select_related("user").filter(token_hash=ApiToken.hash_token(key)).first()
    if token is None or not token.user.is_active:
        return None
    return token.user

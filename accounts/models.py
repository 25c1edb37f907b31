"""Users' API tokens for scripts (``Authorization: Token <key>``).

Only the key's SHA-256 is stored, so a copy of the database (a backup, a dump handed to someone)
holds no usable token; the key is shown once, when ``POST /api/v1/auth/token/`` issues it. Each
token ends at ``token_expires_at`` (``API_TOKEN_TTL_DAYS`` after it was issued); a script then
asks for a new one with its username and password.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from srifty_web.tokens import ScopedTokenMixin


def api_token_expiry() -> datetime:
    return timezone.now() + timedelta(days=settings.API_TOKEN_TTL_DAYS)


class ApiTokenQuerySet(models.QuerySet):
    def live(self) -> ApiTokenQuerySet:
        return self.filter(token_expires_at__gt=timezone.now())


class ApiToken(ScopedTokenMixin, models.Model):
    """One API key of a user, kept as its SHA-256 (``ScopedTokenMixin.hash_token``)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    token_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key (hex)")
    token_expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"API token of {self.user} until {self.token_expires_at:%Y-%m-%d %H:%M}"

    def token_expiry(self) -> datetime:
        return api_token_expiry()

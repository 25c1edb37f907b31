"""Scoped bearer tokens (agents, training callbacks): random, stored only as SHA-256, valid for
one object until it ends. Models mix :class:`ScopedTokenMixin` in and say when tokens expire."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.utils import timezone


class ScopedTokenMixin:
    """Needs ``token_hash`` and ``token_expires_at`` fields and a ``token_expiry()`` method."""

    token_hash: str
    token_expires_at: datetime | None

    @staticmethod
    def hash_token(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    def token_expiry(self) -> datetime:  # pragma: no cover - every model defines it
        raise NotImplementedError

    def new_token(self) -> str:
        """A fresh token; the caller hands it out and saves the model (only the hash stays)."""
        raw = secrets.token_urlsafe(32)
        self.token_hash = self.hash_token(raw)
        self.token_expires_at = self.token_expiry()
        return raw

    def token_matches(self, raw: str) -> bool:
        if not self.token_hash or not self.token_expires_at or self.token_expires_at <= timezone.now():
            return False
        return secrets.compare_digest(self.token_hash, self.hash_token(raw))

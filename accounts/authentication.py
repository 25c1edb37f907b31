"""``Authorization: Token <key>`` for users' scripts, checked against the hashed, expiring
``ApiToken`` (``accounts.models``) instead of DRF's clear-text ``authtoken``."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from accounts.tokens import user_for_key


class ApiTokenAuthentication(authentication.TokenAuthentication):
    """DRF's header parsing and ``WWW-Authenticate: Token`` (so an anonymous request gets 401),
    with the key looked up by its SHA-256 and refused once expired."""

    def authenticate_credentials(self, key):
        user = user_for_key(key)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid or expired token.")
        return user, key

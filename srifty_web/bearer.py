"""``Authorization: Bearer <token>`` for one-run and one-job tokens: one parser, two owners.

A subclass says whose token it is (:meth:`BearerTokenAuthentication.principal`): a profiling
run's agent (``profiler.auth``) or a job's nodes (``launcher.api``).  A header of another
scheme is not ours (``None``: the next authenticator tries it); a malformed header or an unknown,
expired or finished owner's token is refused.
"""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"
    refused = "invalid or expired token"

    def principal(self, token: str) -> Any | None:
        """The ``request.user`` stand-in this live token belongs to, else ``None``."""
        raise NotImplementedError

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace") != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Bearer header")
        token = header[1].decode(errors="replace")
        principal = self.principal(token)
        if principal is None:
            raise exceptions.AuthenticationFailed(self.refused)
        return principal, token

    def authenticate_header(self, request) -> str:
        return self.keyword

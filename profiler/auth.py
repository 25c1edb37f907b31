"""Agent authentication: ``Authorization: Bearer <one-run token>``, valid for its own run only."""

from __future__ import annotations

from rest_framework import authentication, exceptions, permissions

from profiler.models import ProfilingRun


class AgentPrincipal:
    """Stands in for ``request.user`` on agent requests: it may act on one run only."""

    is_authenticated = True

    def __init__(self, run: ProfilingRun):
        self.run = run
        self.pk = f"agent-run-{run.pk}"  # throttling keys on it: one bucket per run


class AgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace") != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Bearer header")
        token = header[1].decode(errors="replace")
        token_hash = ProfilingRun.hash_token(token)
        run = ProfilingRun.objects.filter(token_hash=token_hash).first()
        # The run's state decides too, not only the expiry: a token re-issued by a start task that
        # raced a cancel must not come back to life for a finished run.
        if run is None or run.finished or not run.token_matches(token):
            raise exceptions.AuthenticationFailed("invalid or expired agent token")
        return AgentPrincipal(run), token

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsAgentForThisRun(permissions.BasePermission):
    message = "this token belongs to another run"

    def has_permission(self, request, view) -> bool:
        principal = request.user
        return isinstance(principal, AgentPrincipal) and str(principal.run.pk) == str(view.kwargs.get("pk"))

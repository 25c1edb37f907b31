"""Agent authentication: ``Authorization: Bearer <one-run token>``, valid for its own run only."""

from __future__ import annotations

from rest_framework import permissions

from profiler.models import ProfilingRun
from srifty_web.bearer import BearerTokenAuthentication


class AgentPrincipal:
    """Stands in for ``request.user`` on agent requests: it may act on one run only."""

    is_authenticated = True

    def __init__(self, run: ProfilingRun):
        self.run = run
        self.pk = f"agent-run-{run.pk}"  # throttling keys on it: one bucket per run


class AgentTokenAuthentication(BearerTokenAuthentication):
    refused = "invalid or expired agent token"

    def principal(self, token: str) -> AgentPrincipal | None:
        run = ProfilingRun.objects.filter(token_hash=ProfilingRun.hash_token(token)).first()
        # The run's state decides too, not only the expiry: a token re-issued by a start task that
        # raced a cancel must not come back to life for a finished run.
        if run is None or run.finished or not run.token_matches(token):
            return None
        return AgentPrincipal(run)


class IsAgentForThisRun(permissions.BasePermission):
    message = "this token belongs to another run"

    def has_permission(self, request, view) -> bool:
        principal = request.user
        return isinstance(principal, AgentPrincipal) and str(principal.run.pk) == str(view.kwargs.get("pk"))

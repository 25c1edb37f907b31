"""REST endpoints of the profiler: runs for users, events and the agent tarball for agents."""

from __future__ import annotations

import io
import tarfile
from functools import cache
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from profiler import actions
from profiler.auth import AgentTokenAuthentication, IsAgentForThisRun
from profiler.models import ProfilingRun
from profiler.serializers import AgentEventSerializer, ProfilingRunDetailSerializer, ProfilingRunSerializer
from srifty_web.teams import visible_owner_q

MAX_EVENT_BYTES = 8 * 1024 * 1024  # a result with every iteration of a large ladder fits well inside


class ProfilingRunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Start profiling runs and read them with their samples (your team's runs only)."""

    def get_queryset(self):
        qs = ProfilingRun.objects.filter(visible_owner_q(self.request.user)).select_related("owner")
        # A finished run's profile JSON is tens to hundreds of KB; the list never shows it.
        return qs.defer("profile") if self.action == "list" else qs

    def get_serializer_class(self):
        return ProfilingRunDetailSerializer if self.action == "retrieve" else ProfilingRunSerializer

    def perform_create(self, serializer):
        serializer.instance = actions.create_run(self.request.user, **serializer.validated_data)

    @extend_schema(request=None, responses=ProfilingRunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = actions.cancel_run(self.get_object())
        return Response(ProfilingRunSerializer(run).data)

    @extend_schema(responses={200: OpenApiResponse(description="The profile JSON (docs/profile-format.md)")})
    @action(detail=True, methods=["get"], url_path="profile")
    def profile(self, request, pk=None):
        run = self.get_object()
        if run.profile is None:
            raise NotFound("this run has no profile yet")
        resp = Response(run.profile)
        resp["Content-Disposition"] = f'attachment; filename="srifty-profile-{run.pk}.json"'
        return resp


class AgentEventView(APIView):
    """Where an agent posts progress, samples, its result or its error (Bearer one-run token)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgentForThisRun]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "agent"

    @extend_schema(request=AgentEventSerializer, responses={201: None, 200: None, 409: None})
    def post(self, request, pk: int):
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > MAX_EVENT_BYTES:
            return Response({"detail": f"event larger than {MAX_EVENT_BYTES} bytes"},
                            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        envelope = AgentEventSerializer(data=request.data)
        envelope.is_valid(raise_exception=True)
        event = {**request.data, **envelope.validated_data}
        run = request.user.run
        try:
            with transaction.atomic():
                created = actions.record_event(run, event)
        except actions.BadProfile as exc:
            return Response({"profile": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        except actions.RunClosed as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response({"seq": event["seq"], "duplicate": not created},
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@cache
def _agent_tarball() -> bytes:
    base = Path(settings.BASE_DIR)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("profiler/__init__.py"), io.BytesIO(b""))
        for path in sorted((base / "profiler" / "agent").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(base)))
    return buf.getvalue()


class AgentTarballView(APIView):
    """The agent package, for a VM that installs it from this server (Bearer run token)."""

    authentication_classes = [AgentTokenAuthentication]

    @extend_schema(responses={200: OpenApiResponse(description="gzip tarball of profiler/agent")})
    def get(self, request):
        return HttpResponse(_agent_tarball(), content_type="application/gzip")

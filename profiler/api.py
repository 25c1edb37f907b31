"""REST endpoints of the profiler: runs for users, events and the agent tarball for agents."""

from __future__ import annotations

import json
import re

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from fleet import api as fleet_api
from fleet.bundle import agent_tarball
from profiler import actions, permissions
from profiler.auth import AgentTokenAuthentication, IsAgentForThisRun
from profiler.models import ProfilingRun, Provider, RunEvent
from profiler.serializers import (
    AgentEventSerializer,
    CommRunRequestSerializer,
    ComputeRunRequestSerializer,
    ProfilingRunDetailSerializer,
    ProfilingRunSerializer,
)
from srifty_web.http import refuse_size

MAX_EVENT_BYTES = 8 * 1024 * 1024  # a result with every iteration of a large ladder fits well inside
# What one stored event (RunEvent.payload) may weigh, by type. Progress and sample events are
# replayed to every viewer that connects (the last 500) and broadcast to every open page, so
# they stay small; an error ends the run; a result's profile is checked and stored apart.
MAX_PAYLOAD_BYTES = {"progress": 4 * 1024, "error": 64 * 1024, "sample": 256 * 1024, "result": 4 * 1024}
MAX_SAMPLE_EVENTS = 256  # per run: one per batch size (<= 32 given, ~20 auto) or message size (~40)

RESERVED_FIELDS = {"run", "seq", "type", "profile", "status"}  # set by the server in live messages
EXTRA_FIELD_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
MAX_EXTRA_FIELDS = 16
MAX_EXTRA_TEXT = 200


def extra_fields(data, known) -> dict:
    """The fields of an agent post beyond the serializer's own that are kept: a few short
    scalars with plain names. Lists and objects (only ``sample`` and ``profile`` carry those),
    long strings and the names the server itself uses in live messages (``run``, ...) are dropped."""
    out = {}
    for key, value in data.items() if hasattr(data, "items") else ():
        if key in known or key in RESERVED_FIELDS or not EXTRA_FIELD_RE.match(str(key)):
            continue
        if isinstance(value, (int, float, bool)) or (isinstance(value, str) and len(value) <= MAX_EXTRA_TEXT):
            out[key] = value
            if len(out) >= MAX_EXTRA_FIELDS:
                break
    return out


# The schema states what validate() requires: a compute run names its model and input shape.
@extend_schema_view(
    create=extend_schema(
        request=PolymorphicProxySerializer(
            component_name="ProfilingRunCreate",
            serializers=[ComputeRunRequestSerializer, CommRunRequestSerializer],
            resource_type_field_name=None,
        ),
        responses={201: ProfilingRunSerializer},
        examples=[
            OpenApiExample(
                "Compute run on this server",
                request_only=True,
                value={
                    "model_spec": "torchvision:resnet50",
                    "input_shape": "3,224,224",
                    "batch_sizes": "auto",
                },
            ),
            OpenApiExample(
                "AllReduce sweep on one EC2 node",
                request_only=True,
                value={
                    "kind": "comm",
                    "provider": "ec2",
                    "instance_type": "g5.12xlarge",
                    "region": "us-east-1",
                    "backend": "nccl",
                    "world_size": 4,
                },
            ),
        ],
    )
)
class ProfilingRunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Start profiling runs and read them with their samples (your team's runs only)."""

    def get_queryset(self):
        qs = ProfilingRun.objects.visible_to(self.request.user).select_related("owner")
        # A finished run's profile JSON is tens to hundreds of KB; the list never shows it.
        return qs.defer("profile") if self.action == "list" else qs

    def get_serializer_class(self):
        return ProfilingRunDetailSerializer if self.action == "retrieve" else ProfilingRunSerializer

    def perform_create(self, serializer):
        """An EC2 run AWS would refuse (``actions.check_ec2_run``) is a 400 with every check
        and its fix (``{"detail", "checks": [{"name", "status", "message", "fix"}]}``); no run
        row is created."""
        actions.check_may_start(self.request.user, serializer.validated_data.get("provider", Provider.LOCAL))
        try:
            serializer.instance = actions.create_run(self.request.user, **serializer.validated_data)
        except actions.PrecheckFailed as exc:
            raise ValidationError({"detail": exc.message, "checks": exc.checks}) from exc

    @extend_schema(request=None, responses=ProfilingRunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None, **kwargs):
        run = self.get_object()
        permissions.check_cancel(request.user, run)
        run = actions.cancel_run(run)
        return Response(ProfilingRunSerializer(run).data)

    @extend_schema(responses={200: OpenApiResponse(description="The profile JSON (docs/profile-format.md)")})
    @action(detail=True, methods=["get"], url_path="profile")
    def profile(self, request, pk=None, **kwargs):
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
        if (refused := refuse_size(request, MAX_EVENT_BYTES, "event")) is not None:
            return refused
        envelope = AgentEventSerializer(data=request.data)
        envelope.is_valid(raise_exception=True)
        event = {**extra_fields(request.data, envelope.fields), **envelope.validated_data}
        run = request.user.run
        limit = MAX_PAYLOAD_BYTES[event["type"]]
        if len(json.dumps(actions.event_payload(event), ensure_ascii=False).encode()) > limit:
            return Response(
                {"detail": f"a {event['type']} event carries at most {limit} bytes of fields"},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        if (
            event["type"] == "sample"
            and not RunEvent.objects.filter(run=run, seq=event["seq"]).exists()
            and RunEvent.objects.filter(run=run, type="sample").count() >= MAX_SAMPLE_EVENTS
        ):
            return Response(
                {"detail": f"run {run.pk} already has {MAX_SAMPLE_EVENTS} sample events"},
                status=status.HTTP_409_CONFLICT,
            )
        try:
            with transaction.atomic():
                created = actions.record_event(run, event)
        except actions.BadProfile as exc:
            return Response({"profile": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        except actions.RunClosed as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(
            {"seq": event["seq"], "duplicate": not created},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class RendezvousView(fleet_api.RendezvousView):
    """A comm cluster's node asks for its rank and rank 0's address (``actions.rendezvous``);
    401 once the run has ended."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgentForThisRun]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "agent"

    def answer(self, request, pk: int, instance_id: str) -> tuple[int, dict]:
        return actions.rendezvous(ProfilingRun.objects.get(pk=request.user.run.pk), instance_id)


class AgentTarballView(APIView):
    """The agent bundle (:func:`fleet.bundle.agent_tarball`), for a VM that installs it from this
    server (Bearer run token)."""

    authentication_classes = [AgentTokenAuthentication]

    @extend_schema(responses={200: OpenApiResponse(description="gzip tarball: profiler/agent, workload")})
    def get(self, request):
        return HttpResponse(agent_tarball(), content_type="application/gzip")

"""REST endpoints of the planner: queue plans, follow their progress, cancel and reopen them, and
download an option as a SkyPilot task file."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from launcher import jobs, skyexport
from launcher.taskfile import TaskFileError
from planner.app import permissions, service, solving
from planner.app.models import PlanRecord
from planner.app.serializers import (
    PlanProgressSerializer,
    PlanQueuedSerializer,
    PlanRequestSerializer,
    PlanSerializer,
    PlanSummarySerializer,
)


class PlanViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet[PlanRecord]):
    """Plans are stored with their inputs and solved in the background (``manage.py db_worker``);
    ``POST`` answers 202 with the plan's URL, which shows its status and progress until the
    result is there."""

    def get_queryset(self) -> QuerySet[PlanRecord]:
        # Reads write nothing: a plan whose worker died is shown as it is (``stale`` in its
        # progress); the workers' recovery heartbeat requeues it (planner.app.tasks).
        qs = PlanRecord.objects.visible_to(self.request.user).select_related("owner")
        # The result (every evaluated point) is the big part of a plan; lists never show it.
        return qs.defer("result") if self.action in ("progress", "cancel") else qs

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        if self.action == "create":
            return PlanRequestSerializer
        if self.action in ("progress", "cancel"):
            return PlanProgressSerializer
        return PlanSummarySerializer if self.action == "list" else PlanSerializer

    @extend_schema(
        request=PlanRequestSerializer,
        responses={
            202: OpenApiResponse(PlanQueuedSerializer, description="queued; follow Location"),
            400: OpenApiResponse(description="field name -> messages"),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        req = PlanRequestSerializer(data=request.data)
        req.is_valid(raise_exception=True)
        try:
            record = solving.queue_plan(request.user, dict(req.validated_data))
        except service.PlanInputError as exc:
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        url = request.build_absolute_uri(f"/api/v1/plans/{record.pk}/")
        body = {
            "id": record.pk,
            "url": url,
            "status": record.status,
            "progress_url": f"{url}progress/",
            "page": request.build_absolute_uri(f"/plans/{record.pk}/"),
        }
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": url})

    @extend_schema(responses=PlanProgressSerializer)
    @action(detail=True, methods=["get"])
    def progress(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """The plan's status and progress, without its result (what the plan page polls)."""
        return Response(solving.status_message(self.get_object()))

    @extend_schema(
        request=None,
        responses={
            202: PlanProgressSerializer,
            409: OpenApiResponse(PlanProgressSerializer, description="the plan had already finished"),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Cancel a queued or running plan (202); a finished one is a 409."""
        record = self.get_object()
        permissions.check_cancel(request.user, record)
        cancelled = solving.cancel_plan(record, by=request.user)
        record.refresh_from_db()
        body = solving.status_message(record)
        if not cancelled:
            body["detail"] = f"the plan is already {record.status}"
        return Response(body, status=status.HTTP_202_ACCEPTED if cancelled else status.HTTP_409_CONFLICT)

    @extend_schema(
        parameters=[OpenApiParameter("rank", int, OpenApiParameter.PATH, description="the option's rank")],
        responses={
            200: OpenApiResponse(
                description="a SkyPilot task file (YAML), or a zip of one per instance type"
            ),
            400: OpenApiResponse(description="field name -> messages (no such option, plan not solved)"),
            404: OpenApiResponse(description="no such plan (or another team's)"),
        },
    )
    @action(detail=True, methods=["get"], url_path=r"options/(?P<rank>[0-9]+)/skypilot")
    def skypilot(
        self, request: Request, pk: str | None = None, rank: str | None = None, **kwargs: Any
    ) -> Response | HttpResponse:
        """Option ``rank`` as a SkyPilot task file for ``sky launch`` (a mixed-type option: a zip
        with one file per instance type and a note), running the plan's task file when it was
        made from one. Whoever may read the plan may download it (``/api/v1/jobs/sky-export/``'s
        rule)."""
        record = self.get_object()
        try:
            option = jobs.plan_option(request.user, record, rank)
            spec = skyexport.plan_task(record.request)
        except jobs.JobError as exc:
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        except TaskFileError as exc:
            return Response({"task": exc.as_dict()}, status=status.HTTP_400_BAD_REQUEST)
        write_s = (record.request or {}).get("checkpoint_write_s")
        name, data, kind = skyexport.download(option, record.pk, spec, write_s)
        response = HttpResponse(data, content_type=kind)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

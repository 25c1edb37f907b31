"""REST endpoints of the planner: create (solve) and reopen plans."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from planner.app import service
from planner.app.models import PlanRecord, PlanStatus
from planner.app.serializers import PlanRequestSerializer, PlanSerializer, PlanSummarySerializer


class PlanViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Plans are solved on creation and stored with their inputs, so they can be reopened."""

    def get_queryset(self):
        return PlanRecord.objects.visible_to(self.request.user).select_related("owner")

    def get_serializer_class(self):
        if self.action == "create":
            return PlanRequestSerializer
        return PlanSummarySerializer if self.action == "list" else PlanSerializer

    @extend_schema(request=PlanRequestSerializer, responses={201: PlanSerializer, 400: None})
    def create(self, request, *args, **kwargs):
        req = PlanRequestSerializer(data=request.data)
        req.is_valid(raise_exception=True)
        try:
            record = service.create_plan(request.user, dict(req.validated_data))
        except service.PlanInputError as exc:
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        if record.status == PlanStatus.INFEASIBLE:
            return Response(
                {"detail": record.error, "constraint": record.binding_constraint, "plan": record.pk},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response(PlanSerializer(record).data, status=status.HTTP_201_CREATED)

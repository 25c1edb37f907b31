"""Read-only REST endpoints of the catalog. Query parameters are validated by serializers so
that a bad filter is a 400 naming the parameter, not an empty list or a 500."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, TypeVar

from django.db.models import QuerySet
from django.http import HttpResponse, HttpResponseNotModified
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog import revision
from catalog.models import (
    Accelerator,
    AcceleratorKind,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    SpotPrice,
)
from catalog.search import GpuQuery, SearchError, search_gpus
from catalog.serializers import (
    AcceleratorSerializer,
    GpuOfferSerializer,
    GpuSearchParams,
    GpuSearchResponseSerializer,
    InstanceTypeSerializer,
    PriceSerializer,
)
from srifty_web.fields import FloatField
from srifty_web.pagination import BoundedPagination


def _validated(serializer_class: type[serializers.Serializer], request: Request) -> dict:
    params = serializer_class(data=request.query_params)
    params.is_valid(raise_exception=True)  # -> HTTP 400 {"field": ["message"]}
    return params.validated_data


class InstanceTypeFilters(serializers.Serializer):
    gpu = serializers.CharField(required=False, help_text="Accelerator name, e.g. A100 (case-insensitive)")
    min_gpus = FloatField(required=False, min_value=0)
    region = serializers.CharField(required=False, help_text="Offered in this region; prices shown for it")
    spot = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only types with a spot price (in ?region= if given)",
    )
    ddp = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only NVIDIA CUDA GPUs that can run PyTorch DDP",
    )
    family = serializers.CharField(required=False)


if TYPE_CHECKING:  # a mixin for list views: type-check it as one
    _ListViewBase = viewsets.ReadOnlyModelViewSet[Any]
else:
    _ListViewBase = object

_PriceQS = TypeVar("_PriceQS", bound=QuerySet[Any, Any])


class RevisionCachedListMixin(_ListViewBase):
    """Serve a list page's JSON from ``catalog.revision``'s cache while the catalog is unchanged.

    Authentication, permissions and throttles run as usual (DRF's ``initial()`` comes first);
    only building the page is skipped. The key is the catalog revision, the absolute URL (the
    page's ``next``/``previous`` links carry scheme, host and query) and the media type; other
    renderers (the browsable API) are not cached. The ETag lets a poller get a 304.
    """

    def list(self, request: Request, *args, **kwargs):
        renderer = request.accepted_renderer
        if renderer.format != "json":
            return super().list(request, *args, **kwargs)
        rev = revision.current()  # before the data: see catalog.revision
        key = (type(self).__name__, rev, request.build_absolute_uri(), request.accepted_media_type)
        entry = revision.cached(key)
        if not isinstance(entry, tuple):  # None: not cached (this class caches only tuples)
            page = super().list(request, *args, **kwargs)
            if page.status_code != 200:
                return page
            body = renderer.render(page.data, request.accepted_media_type, self.get_renderer_context())
            content_type = renderer.media_type + (f"; charset={renderer.charset}" if renderer.charset else "")
            digest = hashlib.blake2b(body if isinstance(body, bytes) else body.encode(), digest_size=8)
            etag = f'"c{rev}-{digest.hexdigest()}"'
            entry = (body, content_type, etag)
            revision.store(key, entry)
        body, content_type, etag = entry
        response: HttpResponse
        if etag in request.headers.get("If-None-Match", ""):
            response = HttpResponseNotModified()
        else:
            response = HttpResponse(body, content_type=content_type)
        response["ETag"] = etag
        return response


@extend_schema(parameters=[InstanceTypeFilters])
class InstanceTypeViewSet(RevisionCachedListMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = InstanceTypeSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet[InstanceType]:
        filters = _validated(InstanceTypeFilters, self.request) if self.action == "list" else {}
        region = filters.get("region")
        qs = InstanceType.objects.select_related("accelerator").with_current_prices(region)
        if "gpu" in filters:
            qs = qs.filter(accelerator__name__iexact=filters["gpu"])
        if "min_gpus" in filters:
            qs = qs.filter(gpu_count__gte=filters["min_gpus"])
        if "family" in filters:
            qs = qs.filter(family__iexact=filters["family"])
        if region:
            qs = qs.filter(offerings__zone__region__code=region).distinct()
        if filters.get("spot") is True:
            qs = qs.filter(spot_usd__isnull=False)
        elif filters.get("spot") is False:
            qs = qs.filter(spot_usd__isnull=True)
        if filters.get("ddp") is True:
            qs = qs.ddp_capable()
        elif filters.get("ddp") is False:
            qs = qs.exclude(accelerator__kind=AcceleratorKind.NVIDIA_GPU)
        return qs.order_by("name")

    def get_serializer(self, *args, **kwargs):
        """Regions of the types on this page in one query (not one object per zone offering)."""
        instance = args[0] if args else None
        items = instance if isinstance(instance, list) else [instance] if instance is not None else []
        ids = [t.pk for t in items if isinstance(t, InstanceType)]
        regions: dict[int, set[str]] = {}
        pairs = (
            InstanceOffering.objects.filter(instance_type_id__in=ids)
            .values_list("instance_type_id", "zone__region__code")
            .distinct()
        )
        for type_id, code in pairs:
            regions.setdefault(type_id, set()).add(code)
        kwargs.setdefault("context", self.get_serializer_context())["regions"] = regions
        return super().get_serializer(*args, **kwargs)


class AcceleratorFilters(serializers.Serializer):
    kind = serializers.ChoiceField(choices=AcceleratorKind.choices, required=False)


@extend_schema(parameters=[AcceleratorFilters])
class AcceleratorViewSet(RevisionCachedListMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = AcceleratorSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet[Accelerator]:
        filters = _validated(AcceleratorFilters, self.request) if self.action == "list" else {}
        qs = Accelerator.objects.all()
        if "kind" in filters:
            qs = qs.filter(kind=filters["kind"])
        return qs


class PriceFilters(serializers.Serializer):
    instance_type = serializers.CharField(required=False)
    region = serializers.CharField(required=False)
    zone = serializers.CharField(required=False, help_text="Zone ID, e.g. use1-az2 (spot only)")
    market = serializers.ChoiceField(choices=["on-demand", "spot", "all"], default="all")
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    current = serializers.BooleanField(default=False, help_text="Only the latest observation per key")

    def validate(self, attrs: dict) -> dict:
        if attrs.get("since") and attrs.get("until") and attrs["since"] > attrs["until"]:
            raise serializers.ValidationError({"since": "must not be after until"})
        return attrs


class PricePageSerializer(serializers.Serializer):
    """A page of price observations (limit/offset pagination)."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = PriceSerializer(many=True)


class PagingParams(serializers.Serializer):
    limit = serializers.IntegerField(required=False, min_value=1, help_text="Rows per page (default 100)")
    offset = serializers.IntegerField(required=False, min_value=0)


class PriceListView(APIView):
    """Price observations with history, newest first: on-demand per region, spot per zone."""

    @extend_schema(parameters=[PriceFilters, PagingParams], responses=PricePageSerializer)
    def get(self, request: Request) -> Response:
        f = _validated(PriceFilters, request)
        rows: list[dict] = []
        if f["market"] in ("on-demand", "all") and "zone" not in f:
            od = OnDemandPrice.objects.select_related("instance_type", "region")
            od = _filter_prices(od.current() if f["current"] else od, f, region_field="region__code")
            rows += [PriceSerializer.from_on_demand(p) for p in od]
        if f["market"] in ("spot", "all"):
            qs = SpotPrice.objects.select_related("instance_type", "zone__region")
            qs = _filter_prices(qs.current() if f["current"] else qs, f, region_field="zone__region__code")
            if "zone" in f:
                qs = qs.filter(zone__zone_id=f["zone"])
            rows += [PriceSerializer.from_spot(p) for p in qs]
        rows.sort(key=lambda r: (r["observed_at"], r["instance_type"]), reverse=True)
        paginator = BoundedPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(PriceSerializer(page, many=True).data)


def _filter_prices(qs: _PriceQS, f: dict, *, region_field: str) -> _PriceQS:
    if "instance_type" in f:
        qs = qs.filter(instance_type__name=f["instance_type"])
    if "region" in f:
        qs = qs.filter(**{region_field: f["region"]})
    if "since" in f:
        qs = qs.filter(observed_at__gte=f["since"])
    if "until" in f:
        qs = qs.filter(observed_at__lte=f["until"])
    return qs


GPU_OFFER_EXAMPLE = {
    "count": 31,
    "results": [
        {
            "instance_type": "p5.48xlarge",
            "gpu": "H100",
            "gpu_count": 8.0,
            "gpu_memory_gib": 80.0,
            "vcpus": 192,
            "memory_gib": 2048.0,
            "efa": True,
            "network_gbps": 3200.0,
            "region": "us-east-2",
            "zone": "use2-az3",
            "market": "spot",
            "usd_per_hour": "12.345600",
            "usd_per_gpu_hour": "1.543200",
            "observed_at": "2025-12-01T00:00:00Z",
            "interruption_bucket": None,
            "interruption_label": None,
            "interruption_source": None,
            "history": [{"observed_at": "2025-12-01T00:00:00Z", "usd_per_hour": "12.345600"}],
        }
    ],
}


class GpuSearchView(APIView):
    """GPU search across every region and zone, cheapest per GPU-hour first (``catalog.search``)."""

    @extend_schema(
        operation_id="gpus_search",
        summary="Search GPU offers across all regions and zones",
        description=(
            "One row per priced place to rent a GPU instance type: its latest on-demand price per "
            "region and its latest spot price per zone, sorted by USD per GPU-hour across all regions "
            "and zones (then USD/hour, type, region, zone). Each row has its price history for a "
            "sparkline and, for spot, the interruption bucket where known. A bad parameter is a 400 "
            'naming it, e.g. `{"market": [...]}`, as is an unknown GPU.'
        ),
        parameters=[
            GpuSearchParams,
            OpenApiParameter(
                "gpu",
                OpenApiTypes.STR,
                description="GPU model, case-insensitive; without it every NVIDIA CUDA GPU",
                examples=[OpenApiExample("H100", value="H100"), OpenApiExample("A10G", value="a10g")],
            ),
            OpenApiParameter(
                "count",
                OpenApiTypes.INT,
                description="GPUs per instance, exactly (a positive whole number)",
                examples=[OpenApiExample("eight GPUs", value=8)],
            ),
            OpenApiParameter(
                "market",
                OpenApiTypes.STR,
                enum=["both", "spot", "on-demand"],
                description="spot (one row per zone), on-demand (one row per region) or both (default)",
                examples=[OpenApiExample("spot only", value="spot")],
            ),
        ],
        responses={
            200: GpuSearchResponseSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="A bad parameter: {name: [message]}"),
        },
        examples=[
            OpenApiExample(
                "8× H100 on spot", value=GPU_OFFER_EXAMPLE, response_only=True, status_codes=["200"]
            ),
            OpenApiExample(
                "unknown market",
                value={"market": ['"auction" is not a valid choice.']},
                response_only=True,
                status_codes=["400"],
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        f = _validated(GpuSearchParams, request)
        query = GpuQuery(
            gpu=f.get("gpu"),
            count=f.get("count"),
            min_memory_gib=f.get("min_memory_gib"),
            efa=f.get("efa"),
            market=f["market"],
            region=f.get("region"),
            limit=f["limit"],
            include_local_zones=f["local_zones"],
        )
        try:
            result = search_gpus(query)
        except SearchError as exc:
            return Response({exc.field: [exc.message]}, status=400)
        return Response({"count": result.total, "results": GpuOfferSerializer(result.offers, many=True).data})

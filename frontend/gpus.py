"""The GPU search page (``/catalog/gpus/``): ``catalog.search`` across every region and zone."""

from __future__ import annotations

import base64

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from catalog.models import Region
from catalog.search import DEFAULT_BUCKET_LABEL, GpuQuery, SearchError, known_gpus, search_gpus, sparkline_svg
from catalog.serializers import GpuSearchParams

FIELDS = ("gpu", "count", "min_memory_gib", "efa", "market", "region", "limit", "local_zones")
# A sparkline needs two observations: one would be a lone dot (the row says so in words instead).
MIN_SPARK_POINTS = 2


@login_required
def gpu_search(request: HttpRequest) -> HttpResponse:
    values = {k: request.GET.get(k, "").strip() for k in FIELDS}
    params = GpuSearchParams(data={k: v for k, v in values.items() if v != ""})
    errors: dict[str, str] = {}
    result = None
    if params.is_valid():
        f = params.validated_data
        query = GpuQuery(
            gpu=f.get("gpu"),
            count=f.get("count"),
            min_memory_gib=f.get("min_memory_gib"),
            efa=f.get("efa"),
            market=f["market"],
            region=f.get("region"),
            limit=min(f["limit"], 500) if values["limit"] else 50,
            include_local_zones=f["local_zones"],
        )
        try:
            result = search_gpus(query)
        except SearchError as exc:
            errors[exc.field] = exc.message
    else:
        errors = {k: " ".join(str(e) for e in v) for k, v in params.errors.items()}
    rows = []
    if result is not None:
        # The SVG goes in as a data: image (CSP allows img-src data:), so no markup is marked safe.
        rows = [(o, _spark(o.history)) for o in result.offers]
    return render(
        request,
        "frontend/gpus.html",
        {
            "values": values,
            "errors": errors,
            "result": result,
            "rows": rows,
            "gpus": known_gpus(),
            "regions": Region.objects.values_list("code", flat=True),
            "default_bucket": DEFAULT_BUCKET_LABEL,
        },
        status=400 if errors else 200,
    )


def _spark(history: list) -> str:
    """The sparkline as a data: URI, or "" under :data:`MIN_SPARK_POINTS` observations."""
    return _data_uri(sparkline_svg(history)) if len(history) >= MIN_SPARK_POINTS else ""


def _data_uri(svg: str) -> str:
    if not svg:
        return ""
    if "xmlns=" not in svg:
        svg = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()

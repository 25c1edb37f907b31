"""Page views: thin glue between templates and the apps' read helpers."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

from catalog.models import InstanceType, Region
from catalog.pricing import SORT_KEYS, chartable, price_history, price_table
from catalog.regions import offered_region_count
from launcher.models import Job
from planner.app.models import PlanRecord
from profiler.models import ProfilingRun
from srifty_web.teams import visible_owner_q


@require_safe
@cache_control(public=True, max_age=86400)
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: browsers ask for it at the root whatever the page says; no login needed.
    A few hundred bytes: read whole (no file handle left to the response)."""
    path = finders.find("frontend/favicon.ico")
    if not path:
        raise Http404("no favicon")
    with open(path, "rb") as fh:
        return HttpResponse(
            fh.read(), content_type="image/x-icon", headers={"Cache-Control": "max-age=86400"}
        )


@login_required
def home(request: HttpRequest) -> HttpResponse:
    mine = visible_owner_q(request.user)
    jobs = list(Job.objects.filter(mine).select_related("owner")[:10])
    return render(
        request,
        "frontend/home.html",
        {
            "instance_type_count": InstanceType.objects.count(),
            "region_count": offered_region_count(),
            "runs": ProfilingRun.objects.filter(mine).select_related("owner")[:8],
            "plans": PlanRecord.objects.filter(mine).select_related("owner")[:8],
            "jobs": [(j, j.spend_so_far()) for j in jobs],
            "live_spend": sum(float(j.hourly_usd) for j in jobs if not j.finished),
        },
    )


@login_required
def catalog(request: HttpRequest) -> HttpResponse:
    regions = list(Region.objects.values_list("code", flat=True))
    region = request.GET.get("region") or ("us-east-1" if "us-east-1" in regions else (regions or [""])[0])
    if region not in regions:
        region = regions[0] if regions else ""
    sort = request.GET.get("sort", "od_per_gpu")
    descending = sort.startswith("-")
    sort = sort.lstrip("-")
    if sort not in SORT_KEYS:
        sort, descending = "od_per_gpu", False
    show_all = request.GET.get("all") == "1"
    rows = price_table(region, ddp_only=not show_all, sort=sort, descending=descending) if region else []
    chosen = request.GET.get("type") or next((r.name for r in rows if r.spot_usd is not None), "")
    history = price_history(chosen, region) if chosen else None
    return render(
        request,
        "frontend/catalog.html",
        {
            "regions": regions,
            "region": region,
            "rows": rows,
            "sort": sort,
            "descending": descending,
            "show_all": show_all,
            "chosen": chosen,
            "type_names": [r.name for r in rows],
            "history": history,
            "chartable": chartable(history),
            "columns": [
                ("name", "Instance type", False),
                ("accelerator", "GPU", False),
                ("gpu_count", "GPUs", True),
                ("vcpus", "vCPUs", True),
                ("baseline_gbps", "Network Gbps", True),
                ("on_demand_usd", "On-demand $/h", True),
                ("od_per_gpu", "On-demand $/GPU-h", True),
                ("spot_usd", "Spot $/h", True),
                ("spot_per_gpu", "Spot $/GPU-h", True),
                ("spot_saving_pct", "Spot saving", True),
            ],
        },
    )

"""Read-side helpers for pages and the planner: price tables and price history series."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, TypedDict, cast

from catalog.models import InstanceType, OnDemandPrice, SpotPrice
from catalog.zones import zone_label

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _CurrentPrices(TypedDict):
    """What ``InstanceTypeQuerySet.with_current_prices`` annotates."""

    on_demand_usd: Decimal | None
    spot_usd: Decimal | None


SORT_KEYS = (
    "name",
    "accelerator",
    "gpu_count",
    "vcpus",
    "baseline_gbps",
    "on_demand_usd",
    "spot_usd",
    "od_per_gpu",
    "spot_per_gpu",
    "spot_saving_pct",
)


@dataclass
class PriceRow:
    name: str
    accelerator: str
    gpu_count: float
    gpu_memory_gib: float | None
    vcpus: int
    memory_gib: float
    network: str
    baseline_gbps: float | None
    efa: bool
    on_demand_usd: float | None
    spot_usd: float | None
    od_per_gpu: float | None
    spot_per_gpu: float | None
    spot_saving_pct: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def _per_gpu(usd: Decimal | None, gpus: float) -> float | None:
    return None if usd is None or gpus <= 0 else float(usd) / gpus


def price_table(
    region: str, *, ddp_only: bool = True, sort: str = "od_per_gpu", descending: bool = False
) -> list[PriceRow]:
    """One row per instance type offered in ``region``: $/h and $/GPU-hour on-demand vs spot.

    Spot is the cheapest zone's latest observation. Rows without a price sort last.
    """
    qs = InstanceType.objects.filter(offerings__zone__region__code=region).distinct()
    if ddp_only:
        qs = qs.ddp_capable()
    qs = qs.select_related("accelerator").with_current_prices(region)
    rows = []
    for row in qs:
        t = cast("WithAnnotations[InstanceType, _CurrentPrices]", row)
        od = float(t.on_demand_usd) if t.on_demand_usd is not None else None
        spot = float(t.spot_usd) if t.spot_usd is not None else None
        rows.append(
            PriceRow(
                name=t.name,
                accelerator=t.accelerator.name if t.accelerator else "",
                gpu_count=t.gpu_count,
                gpu_memory_gib=t.gpu_memory_mib / 1024 if t.gpu_memory_mib else None,
                vcpus=t.vcpus,
                memory_gib=t.memory_gib,
                network=t.network_performance,
                baseline_gbps=t.sustained_gbps,
                efa=t.efa_supported,
                on_demand_usd=od,
                spot_usd=spot,
                od_per_gpu=_per_gpu(t.on_demand_usd, t.gpu_count),
                spot_per_gpu=_per_gpu(t.spot_usd, t.gpu_count),
                spot_saving_pct=(100 * (1 - spot / od)) if od and spot is not None else None,
            )
        )
    key = sort if sort in SORT_KEYS else "od_per_gpu"
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: (getattr(r, key), r.name), reverse=descending)
    return present + sorted(missing, key=lambda r: r.name)


def price_history(instance_type: str, region: str | None = None) -> dict:
    """Chart series: spot per zone and on-demand per region, each as sorted (time, USD/h) lists."""
    spot = SpotPrice.objects.filter(instance_type__name=instance_type).select_related("zone__region")
    od = OnDemandPrice.objects.filter(instance_type__name=instance_type).select_related("region")
    if region:
        spot = spot.filter(zone__region__code=region)
        od = od.filter(region__code=region)
    series: dict[str, dict] = {}
    for p in spot.order_by("observed_at"):
        kind = zone_label(p.zone.zone_id)  # a Local or Wavelength Zone says so in the legend
        name = f"spot {p.zone.zone_id}" + (f" ({kind})" if kind else "")
        s = series.setdefault(name, {"market": "spot", "x": [], "y": []})
        s["x"].append(p.observed_at.isoformat())
        s["y"].append(float(p.usd_per_hour))
    for o in od.order_by("observed_at"):
        s = series.setdefault(f"on-demand {o.region.code}", {"market": "on-demand", "x": [], "y": []})
        s["x"].append(o.observed_at.isoformat())
        s["y"].append(float(o.usd_per_hour))
    return {"instance_type": instance_type, "region": region, "series": series}


def chartable(history: dict | None) -> bool:
    """Whether a :func:`price_history` has a line to draw: some series with two or more
    observations (one observation per series is a row of lone dots, which pages say in words)."""
    if not history:
        return False
    return any(len(s["x"]) >= 2 for s in history["series"].values())

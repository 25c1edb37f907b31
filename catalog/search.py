"""GPU search across every region and zone, like ``sky show-gpus`` and ec2instances.info.

:func:`search_gpus` is the one query behind the ``/catalog/gpus/`` page, ``GET /api/v1/gpus/``
and ``manage.py gpus``. It returns one :class:`GpuOffer` per priced place to rent a type: its
latest on-demand price per region and its latest spot price per zone, sorted by USD per GPU-hour
(then USD per hour, type, region, zone), across all regions and zones at once.

Each offer carries its price history (oldest first, at most :data:`HISTORY_POINTS`
observations) for a sparkline, and spot offers their interruption bucket where one is known:
the catalog's ``SpotInterruption`` row (edited in the admin; what plans use) first, else the
bundled AWS Spot Advisor snapshot (``catalog/fixtures/spot_advisor_gpu.csv``, 2025-06-28). Where
neither knows the type and region the bucket is ``None``; plans then assume
``DEFAULT_INTERRUPTION_BUCKET`` (10-15 %), which the page says.

Spot prices in AWS Local Zones and Wavelength Zones (``catalog.zones``: they need an opt-in, have
little capacity and no cluster placement groups) are left out unless ``include_local_zones``;
each offer says its zone's kind, so pages can mark them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

from catalog import spot_advisor, zones
from catalog.models import (
    DEFAULT_INTERRUPTION_BUCKET,
    Accelerator,
    AcceleratorKind,
    InstanceType,
    InterruptionBucket,
    OnDemandPrice,
    SpotInterruption,
    SpotPrice,
)

MARKETS = ("both", "spot", "on-demand")
HISTORY_POINTS = 48
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
SPOT_ADVISOR_CSV = Path(__file__).resolve().parent / "fixtures" / "spot_advisor_gpu.csv"
SPOT_ADVISOR_SOURCE = spot_advisor.BUNDLED_NOTE
CATALOG_SOURCE = spot_advisor.ADMIN_LABEL
DEFAULT_BUCKET_LABEL = InterruptionBucket(DEFAULT_INTERRUPTION_BUCKET).label
CENT = Decimal("0.000001")


class SearchError(ValueError):
    """A bad search input; ``field`` names the parameter (API 400 key, form field, CLI option)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class GpuQuery:
    """What to look for. ``None`` means "any"; ``efa=True`` keeps only types with EFA.

    Without ``gpu`` only NVIDIA CUDA GPUs are listed (what DDP training can use); naming any
    accelerator the catalog knows (``gpu="Trainium"``) lists that one.
    """

    gpu: str | None = None
    count: int | None = None
    min_memory_gib: float | None = None
    efa: bool | None = None
    market: str = "both"
    region: str | None = None
    limit: int | None = DEFAULT_LIMIT
    include_local_zones: bool = False  # Local and Wavelength Zones (catalog.zones) too


@dataclass
class GpuOffer:
    instance_type: str
    gpu: str
    gpu_count: float
    gpu_memory_gib: float | None  # per GPU
    vcpus: int
    memory_gib: float
    efa: bool
    network_gbps: float | None
    region: str
    zone: str | None  # spot: the zone ID (use1-az2); on-demand: None (one price per region)
    market: str  # "spot" | "on-demand"
    usd_per_hour: Decimal
    usd_per_gpu_hour: Decimal
    observed_at: datetime
    interruption_bucket: int | None = None  # 0..4 (InterruptionBucket), spot only
    interruption_label: str | None = None
    interruption_source: str | None = None
    history: list[tuple[datetime, float]] = field(default_factory=list)

    @property
    def zone_label(self) -> str:
        """``"Local Zone"``, ``"Wavelength Zone"`` or ``""`` (a regular AZ, or on-demand)."""
        return zones.zone_label(self.zone)

    @property
    def history_points(self) -> list[dict]:
        return [{"observed_at": at, "usd_per_hour": usd} for at, usd in self.history]

    @property
    def gpus_label(self) -> str:
        count = f"{self.gpu_count:g}"
        return f"{self.gpu} × {count}" if self.gpu else "—"


@dataclass
class SearchResult:
    query: GpuQuery
    total: int  # offers matching, before the limit
    offers: list[GpuOffer]


def known_gpus() -> list[str]:
    """Accelerator names with at least one instance type, CUDA GPUs first then the rest."""
    rows = Accelerator.objects.filter(instance_types__isnull=False).distinct().values_list("name", "kind")
    cuda = sorted(n for n, k in rows if k == AcceleratorKind.NVIDIA_GPU)
    other = sorted(n for n, k in rows if k != AcceleratorKind.NVIDIA_GPU)
    return cuda + other


def validate(query: GpuQuery) -> None:
    """Raise :class:`SearchError` naming the bad field; the API, page and command all call it."""
    if query.market not in MARKETS:
        raise SearchError("market", f"must be one of {', '.join(MARKETS)}, got {query.market!r}")
    if query.count is not None and (
        isinstance(query.count, bool) or not isinstance(query.count, int) or query.count < 1
    ):
        raise SearchError("count", f"must be a positive whole number of GPUs, got {query.count!r}")
    if query.min_memory_gib is not None and not query.min_memory_gib >= 0:
        raise SearchError("min_memory_gib", f"must be >= 0 GiB, got {query.min_memory_gib!r}")
    if query.limit is not None and not 1 <= query.limit <= MAX_LIMIT:
        raise SearchError("limit", f"must be 1..{MAX_LIMIT}, got {query.limit!r}")
    if query.gpu is not None:
        names = known_gpus()
        if query.gpu.strip().lower() not in {n.lower() for n in names}:
            raise SearchError("gpu", f"unknown GPU {query.gpu!r}; the catalog has: {', '.join(names)}")
    if query.region is not None:
        from catalog.models import Region

        if not Region.objects.filter(code=query.region).exists():
            raise SearchError("region", f"unknown region {query.region!r}")


def search_gpus(query: GpuQuery) -> SearchResult:
    """Every priced offer matching ``query``, cheapest per GPU-hour first (module docstring)."""
    validate(query)
    types = InstanceType.objects.select_related("accelerator").filter(
        accelerator__isnull=False, gpu_count__gt=0
    )
    if query.gpu is not None:
        types = types.filter(accelerator__name__iexact=query.gpu.strip())
    else:
        types = types.filter(accelerator__kind=AcceleratorKind.NVIDIA_GPU)
    if query.count is not None:
        types = types.filter(gpu_count=query.count)
    if query.efa is not None:
        types = types.filter(efa_supported=query.efa)
    by_id = {}
    for t in types:
        memory = _per_gpu_memory_gib(t)
        if query.min_memory_gib is not None and (memory is None or memory < query.min_memory_gib - 1e-9):
            continue
        by_id[t.pk] = (t, memory)

    offers: list[GpuOffer] = []
    if query.market in ("both", "on-demand"):
        od = OnDemandPrice.objects.filter(instance_type_id__in=by_id).select_related("region")
        if query.region:
            od = od.filter(region__code=query.region)
        for p in od.current():
            t, memory = by_id[p.instance_type_id]
            offers.append(_offer(t, memory, p.region.code, None, "on-demand", p))
    if query.market in ("both", "spot"):
        spot = SpotPrice.objects.filter(instance_type_id__in=by_id).select_related("zone__region")
        if query.region:
            spot = spot.filter(zone__region__code=query.region)
        for p in spot.current():
            if not query.include_local_zones and zones.is_special_zone(p.zone.zone_id):
                continue
            t, memory = by_id[p.instance_type_id]
            offers.append(_offer(t, memory, p.zone.region.code, p.zone.zone_id, "spot", p))

    offers.sort(
        key=lambda o: (o.usd_per_gpu_hour, o.usd_per_hour, o.instance_type, o.region, o.zone or "", o.market)
    )
    total = len(offers)
    page = offers[: query.limit] if query.limit is not None else offers
    _attach_history(page)
    _attach_interruptions(page)
    return SearchResult(query=query, total=total, offers=page)


def _per_gpu_memory_gib(t: InstanceType) -> float | None:
    if t.accelerator is not None and t.accelerator.memory_mib:
        return t.accelerator.memory_mib / 1024
    if t.gpu_memory_mib and t.gpu_count:
        return t.gpu_memory_mib / t.gpu_count / 1024
    return None


def _offer(t: InstanceType, memory: float | None, region: str, zone: str | None, market: str, p) -> GpuOffer:
    per_gpu = (p.usd_per_hour / Decimal(repr(t.gpu_count))).quantize(CENT, rounding=ROUND_HALF_UP)
    return GpuOffer(
        instance_type=t.name,
        gpu=t.accelerator.name if t.accelerator else "",
        gpu_count=t.gpu_count,
        gpu_memory_gib=memory,
        vcpus=t.vcpus,
        memory_gib=t.memory_gib,
        efa=t.efa_supported,
        network_gbps=t.sustained_gbps,
        region=region,
        zone=zone,
        market=market,
        usd_per_hour=p.usd_per_hour,
        usd_per_gpu_hour=per_gpu,
        observed_at=p.observed_at,
    )


def _attach_history(offers: list[GpuOffer]) -> None:
    """Each offer's observations, oldest first, the last :data:`HISTORY_POINTS` of them."""
    spot_keys = {(o.instance_type, o.zone) for o in offers if o.market == "spot"}
    od_keys = {(o.instance_type, o.region) for o in offers if o.market == "on-demand"}
    series: dict[tuple, list[tuple[datetime, float]]] = {}
    if spot_keys:
        rows = SpotPrice.objects.filter(
            instance_type__name__in={k[0] for k in spot_keys}, zone__zone_id__in={k[1] for k in spot_keys}
        ).values_list("instance_type__name", "zone__zone_id", "observed_at", "usd_per_hour")
        for name, zone, at, usd in rows.order_by("observed_at"):
            if (name, zone) in spot_keys:
                series.setdefault(("spot", name, zone), []).append((at, float(usd)))
    if od_keys:
        od_rows = OnDemandPrice.objects.filter(
            instance_type__name__in={k[0] for k in od_keys}, region__code__in={k[1] for k in od_keys}
        ).values_list("instance_type__name", "region__code", "observed_at", "usd_per_hour")
        for name, region, at, usd in od_rows.order_by("observed_at"):
            if (name, region) in od_keys:
                series.setdefault(("on-demand", name, region), []).append((at, float(usd)))
    for o in offers:
        key = (
            ("spot", o.instance_type, o.zone)
            if o.market == "spot"
            else ("on-demand", o.instance_type, o.region)
        )
        o.history = series.get(key, [])[-HISTORY_POINTS:]


@cache
@cache
def spot_advisor_buckets() -> dict[tuple[str, str], int]:
    """(instance type, region) -> Spot Advisor interruption bucket 0..4 of the bundled snapshot
    (read once per process: the bundled file does not change while the server runs)."""
    rows = spot_advisor.parse_csv(SPOT_ADVISOR_CSV)
    return {(r.instance_type, r.region): r.bucket for r in rows}


def _attach_interruptions(offers: list[GpuOffer]) -> None:
    spot = [o for o in offers if o.market == "spot"]
    if not spot:
        return
    # What plans use: the catalog's rows, imported from the Spot Advisor or edited in the admin
    # (each says which); the bundled file only where the catalog has no row.
    stored = {
        (name, region): (bucket, spot_advisor.source_label(origin, note, updated_at))
        for name, region, bucket, origin, note, updated_at in SpotInterruption.objects.filter(
            instance_type__name__in={o.instance_type for o in spot}
        ).values_list("instance_type__name", "region__code", "bucket", "source", "note", "updated_at")
    }
    advisor = spot_advisor_buckets()
    for o in spot:
        key = (o.instance_type, o.region)
        if key in stored:
            bucket, source = stored[key]
        elif key in advisor:
            bucket, source = advisor[key], SPOT_ADVISOR_SOURCE
        else:
            continue
        o.interruption_bucket = bucket
        o.interruption_label = InterruptionBucket(bucket).label
        o.interruption_source = source


def sparkline_svg(history: list[tuple[datetime, float]], *, width: int = 96, height: int = 22) -> str:
    """A tiny inline SVG of a price history (numbers only, so safe to mark safe).

    Time runs left to right by observation time; the y range is the series' own min..max (a flat
    line in the middle when every observation is the same price). One observation is a dot.
    """
    pad = 2.0
    if not history:
        return ""
    ys = [y for _, y in history]
    lo, hi = min(ys), max(ys)
    t0 = history[0][0].timestamp()
    span_t = history[-1][0].timestamp() - t0
    title = (
        f"{len(history)} observation{'s' if len(history) != 1 else ''} since "
        f"{history[0][0]:%Y-%m-%d}: ${lo:.4f}–${hi:.4f}/h"
    )

    def xy(at: datetime, y: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * ((at.timestamp() - t0) / span_t if span_t > 0 else 1.0)
        fy = 0.5 if hi - lo <= 1e-12 else (y - lo) / (hi - lo)
        return x, height - pad - (height - 2 * pad) * fy

    points = [xy(at, y) for at, y in history]
    if len(points) == 1 or span_t <= 0:
        x, y = points[-1]
        body = (
            f'<line x1="{pad:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y:.1f}" stroke="#c3ccd5" stroke-dasharray="2 2"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="#1f6feb"/>'
        )
    else:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        x, y = points[-1]
        body = (
            f'<polyline points="{path}" fill="none" stroke="#1f6feb" stroke-width="1.3"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="#1f6feb"/>'
        )
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{title}"><title>{title}</title>{body}</svg>'
    )

"""Spot prices of one zone far below the other zones of its region: a plan resting on one.

A spot price is "far below" when it is less than :data:`FAR_BELOW_SHARE` (one half) of the median
of the latest spot prices of the same instance type in the region's *other* zones (at least one
other zone priced). On-demand prices are one per region, so they never are. Such a price is
usually a thin pool (a zone with little capacity and few bids), a Local Zone or a stale
observation: a plan that counts on it may find no capacity, or a price that jumps once it asks.

Example from the bundled snapshot: p4d.24xlarge spot in us-east-1 is $2.47/h in use1-az1 and
$7.88-8.19/h in the three other zones: median $8.12, half of it $4.06 > $2.47, so far below.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from catalog.models import SpotPrice

FAR_BELOW_SHARE = 0.5


@dataclass(frozen=True)
class LoneZonePrice:
    instance_type: str
    region: str
    zone: str
    usd_per_hour: float
    others_median: float  # median of the other zones' latest spot prices
    others_low: float
    others_high: float
    other_zones: int

    @property
    def text(self) -> str:
        zones = f"{self.other_zones} other zone{'s' if self.other_zones != 1 else ''}"
        spread = (
            f"${self.others_low:,.2f}/h"
            if self.others_low == self.others_high
            else f"${self.others_low:,.2f}-{self.others_high:,.2f}/h"
        )
        return (
            f"{self.instance_type} spot at ${self.usd_per_hour:,.2f}/h rests on one zone ({self.zone}): "
            f"the {zones} of {self.region} ask {spread} (median ${self.others_median:,.2f}/h); "
            "capacity there may be thin and the price may not hold"
        )


def other_zone_prices(instance_type: str, region: str, zone: str) -> list[float]:
    """Latest spot USD/h of ``instance_type`` in every zone of ``region`` but ``zone``."""
    rows = (
        SpotPrice.objects.current()
        .filter(instance_type__name=instance_type, zone__region__code=region)
        .exclude(zone__zone_id=zone)
        .values_list("usd_per_hour", flat=True)
    )
    return [float(p) for p in rows]


def lone_zone_price(instance_type: str, region: str, zone: str, usd_per_hour: float) -> LoneZonePrice | None:
    """``usd_per_hour`` in ``zone`` judged against the region's other zones (module docstring):
    a :class:`LoneZonePrice` when it is far below them, else None."""
    others = other_zone_prices(instance_type, region, zone)
    if not others:
        return None
    mid = median(others)
    if not usd_per_hour < FAR_BELOW_SHARE * mid:
        return None
    return LoneZonePrice(
        instance_type=instance_type,
        region=region,
        zone=zone,
        usd_per_hour=usd_per_hour,
        others_median=mid,
        others_low=min(others),
        others_high=max(others),
        other_zones=len(others),
    )


def lone_zone_prices(plan: dict) -> list[LoneZonePrice]:
    """The spot groups of a stored plan (``{"region", "groups": [{"instance_type", "market",
    "zone", "price_per_hour"}, ...]}``) whose zone's price is far below the region's others."""
    found = []
    for g in plan.get("groups") or []:
        if g.get("market") != "spot" or not g.get("zone") or g.get("price_per_hour") is None:
            continue
        hit = lone_zone_price(
            str(g["instance_type"]), str(plan.get("region")), str(g["zone"]), float(g["price_per_hour"])
        )
        if hit is not None:
            found.append(hit)
    return found

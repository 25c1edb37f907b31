"""Price history for tests that draw price charts.

The bundled snapshot has one observation per price series, and the catalog page draws its
price chart only for series with two or more (issue 38: no chart of lone dots).  A page test
that needs the chart adds an earlier observation of each spot price of a region, at the same
price, so the latest prices (what plans read) and the prices' age stay as imported.
"""

from __future__ import annotations

from datetime import timedelta


def add_earlier_spot_observations(region: str = "us-east-1", days: int = 7) -> int:
    """One more observation ``days`` before each spot price observed in ``region`` (same price);
    returns how many were added."""
    from catalog.models import SpotPrice

    rows = list(SpotPrice.objects.filter(zone__region__code=region))
    SpotPrice.objects.bulk_create(
        [
            SpotPrice(
                instance_type_id=p.instance_type_id,
                zone_id=p.zone_id,
                usd_per_hour=p.usd_per_hour,
                observed_at=p.observed_at - timedelta(days=days),
                source=p.source,
            )
            for p in rows
        ],
        ignore_conflicts=True,
    )
    return len(rows)

"""Refresh the catalog from AWS: specs, spot price history and on-demand prices.

All AWS calls happen first (through ``catalog.aws``); only then is the database written, in one
transaction per region, so a failed or throttled call changes nothing. History is append-only:
spot observations carry AWS's own timestamps (a repeat refresh adds nothing it already has) and
an on-demand price is added only when it differs from the latest one stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction

from catalog import aws, revision
from catalog.importer import accelerator_kind
from catalog.models import (
    Accelerator,
    AvailabilityZone,
    InstanceType,
    OnDemandPrice,
    PriceSource,
    Region,
    SpotPrice,
)


@dataclass
class RefreshReport:
    region: str
    types_seen: int = 0
    types_created: int = 0
    types_updated: int = 0
    spot_prices_added: int = 0
    on_demand_prices_added: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.region}: {self.types_seen} types (+{self.types_created}, updated {self.types_updated}); "
            f"spot +{self.spot_prices_added}; on-demand +{self.on_demand_prices_added}"
        )


def default_types(region: str) -> list[str]:
    """Accelerator instance types the catalog knows in ``region`` (all types if none there yet)."""
    here = InstanceType.objects.filter(offerings__zone__region__code=region).values_list("name", flat=True)
    names = sorted(set(here))
    return names or sorted(InstanceType.objects.values_list("name", flat=True))


def refresh_region(
    region: str,
    names: list[str] | None = None,
    *,
    since: datetime | None = None,
    on_demand: bool = True,
    now: datetime | None = None,
) -> RefreshReport:
    now = now or datetime.now(UTC)
    names = sorted(names or default_types(region))
    report = RefreshReport(region=region)
    specs = aws.describe_instance_types(region, names)
    spot = aws.spot_price_history(region, names, since or now - timedelta(days=1))
    od = aws.on_demand_prices(region, names) if on_demand else {}
    with transaction.atomic():
        region_obj, _ = Region.objects.get_or_create(code=region)
        types = _apply_specs(specs, report)
        _add_spot(spot, types, region_obj, report)
        _add_on_demand(od, types, region_obj, now, report)
        revision.bump()  # bulk_create sends no post_save
    return report


def _accelerator(spec: dict) -> Accelerator | None:
    if not spec["accelerator"]:
        return None
    acc, _ = Accelerator.objects.get_or_create(
        name=spec["accelerator"],
        defaults={
            "manufacturer": spec["accelerator_manufacturer"],
            "kind": accelerator_kind(spec["accelerator"], spec["accelerator_manufacturer"]),
            "memory_mib": spec["accelerator_memory_mib"],
        },
    )
    return acc


_SPEC_FIELDS = (
    "vcpus",
    "memory_gib",
    "arch",
    "gpu_count",
    "gpu_memory_mib",
    "network_performance",
    "baseline_gbps",
    "peak_gbps",
    "network_cards",
    "efa_supported",
    "max_efa_interfaces",
    "placement_group_strategies",
    "usage_classes",
)


def _apply_specs(specs: list[dict], report: RefreshReport) -> dict[str, InstanceType]:
    types = {}
    for spec in specs:
        report.types_seen += 1
        fields = {k: spec[k] for k in _SPEC_FIELDS}
        obj = InstanceType.objects.filter(name=spec["name"]).first()
        if obj is None:
            obj = InstanceType.objects.create(
                name=spec["name"], family=spec["name"].split(".")[0], accelerator=_accelerator(spec), **fields
            )
            report.types_created += 1
        else:
            # Keep catalog accelerator names (A100-80GB) that are finer than EC2's (A100).
            changed = {k: v for k, v in fields.items() if v is not None and getattr(obj, k) != v}
            if changed:
                for k, v in changed.items():
                    setattr(obj, k, v)
                obj.save()
                report.types_updated += 1
        types[obj.name] = obj
    return types


def _add_spot(observations, types, region: Region, report: RefreshReport) -> None:
    zones = {z.zone_id: z for z in AvailabilityZone.objects.filter(region=region)}
    have = set(
        SpotPrice.objects.filter(zone__region=region).values_list(
            "instance_type__name", "zone__zone_id", "observed_at"
        )
    )
    new = []
    for o in observations:
        if o.instance_type not in types or (o.instance_type, o.zone_id, o.observed_at) in have:
            continue
        if o.zone_id not in zones:
            zones[o.zone_id] = AvailabilityZone.objects.create(zone_id=o.zone_id, region=region)
        have.add((o.instance_type, o.zone_id, o.observed_at))
        new.append(
            SpotPrice(
                instance_type=types[o.instance_type],
                zone=zones[o.zone_id],
                usd_per_hour=o.usd_per_hour,
                observed_at=o.observed_at,
                source=PriceSource.AWS,
            )
        )
    SpotPrice.objects.bulk_create(new)
    report.spot_prices_added += len(new)


def _add_on_demand(prices, types, region: Region, now: datetime, report: RefreshReport) -> None:
    for name, usd in prices.items():
        if name not in types:
            continue
        latest = (
            OnDemandPrice.objects.filter(instance_type=types[name], region=region)
            .order_by("-observed_at")
            .first()
        )
        if latest is not None and latest.usd_per_hour == usd:
            continue
        OnDemandPrice.objects.create(
            instance_type=types[name],
            region=region,
            usd_per_hour=usd,
            observed_at=now,
            source=PriceSource.AWS,
        )
        report.on_demand_prices_added += 1

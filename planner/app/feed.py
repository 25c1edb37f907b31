"""Feed the pure planner from the catalog database: candidate rows and GPU specs.

The planner's ``load_candidates`` reads rows shaped like the snapshot CSV (one per instance type
and zone); this builds the same rows from the *current* prices in the database, so a refresh
from AWS changes the next plan without any other step.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from catalog.models import (
    DEFAULT_INTERRUPTION_BUCKET,
    Accelerator,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    SpotInterruption,
    SpotPrice,
)


def candidate_rows(regions: Collection[str] | None = None) -> list[dict[str, Any]]:
    """One row per (DDP-capable instance type, zone) with its current on-demand and spot price."""
    types = {t.pk: t for t in InstanceType.objects.ddp_capable().select_related("accelerator")}
    offerings = InstanceOffering.objects.filter(instance_type_id__in=types).select_related("zone__region")
    if regions:
        offerings = offerings.filter(zone__region__code__in=list(regions))
    od = {
        (p.instance_type_id, p.region.code): p.usd_per_hour
        for p in OnDemandPrice.objects.current().filter(instance_type_id__in=types).select_related("region")
    }
    spot = {
        (p.instance_type_id, p.zone_id): p.usd_per_hour
        for p in SpotPrice.objects.current().filter(instance_type_id__in=types)
    }
    buckets = {
        (i.instance_type_id, i.region.code): i.bucket
        for i in SpotInterruption.objects.select_related("region")
    }
    rows = []
    for o in offerings:
        t = types[o.instance_type_id]
        region = o.zone.region.code
        rows.append(
            {
                "InstanceType": t.name,
                "AcceleratorName": t.accelerator.name,
                "AcceleratorCount": t.gpu_count,
                "vCPUs": t.vcpus,
                "MemoryGiB": t.memory_gib,
                "Arch": t.arch,
                "Region": region,
                "AvailabilityZone": o.zone.zone_id,
                "Price": float(od[(t.pk, region)]) if (t.pk, region) in od else None,
                "SpotPrice": float(spot[(t.pk, o.zone_id)]) if (t.pk, o.zone_id) in spot else None,
                "network_gbps": t.link_gbps or 0.0,
                "efa": t.efa_supported,
                "interruption_bucket": buckets.get((t.pk, region), DEFAULT_INTERRUPTION_BUCKET),
                "GpuInfo": {"Gpus": [{"MemoryInfo": {"SizeInMiB": t.accelerator.memory_mib}}]}
                if t.accelerator.memory_mib
                else None,
            }
        )
    return rows


def gpu_spec_rows() -> list[dict[str, Any]]:
    """Datasheet rows in ``gpu_specs.csv`` shape, for ``planner.hardware.specs_from_rows``."""
    return [
        {
            "gpu": a.name,
            "sm_count": a.sm_count,
            "fp32_tflops": a.fp32_tflops,
            "tf32_tensor_tflops_dense": a.tf32_tflops,
            "fp16_tensor_tflops_dense": a.fp16_tflops,
            "memory_bandwidth_gbps": a.memory_bandwidth_gbs,
            "memory_gib": (a.memory_mib or 0) / 1024,
            "nvlink_gbps_per_gpu": a.nvlink_gbs,
        }
        for a in Accelerator.objects.filter(kind="nvidia-gpu")
    ]

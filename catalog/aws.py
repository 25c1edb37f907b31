"""The catalog's view of AWS: instance specs in the catalog's fields, spot price history and
on-demand prices. The calls themselves are ``cloud``'s (credentials from boto3's normal chain,
``settings.AWS_ENDPOINT_URL`` for another endpoint such as tests' moto server); failures raise
``cloud.CloudError``, saying which call failed and why."""

from __future__ import annotations

from collections.abc import Iterable

from cloud import ec2
from cloud.pricing import (
    PRICING_REGION,
    SpotObservation,
    on_demand_prices,
    parse_price_list_item,
    spot_price_history,
)

__all__ = [
    "PRICING_REGION",
    "SpotObservation",
    "describe_instance_types",
    "normalize_instance_type",
    "on_demand_prices",
    "parse_price_list_item",
    "spot_price_history",
    "zone_ids",
]

zone_ids = ec2.zone_ids


def describe_instance_types(region: str, names: Iterable[str] | None = None) -> list[dict]:
    """Specs of instance types as the catalog stores them (see ``normalize_instance_type``)."""
    return [normalize_instance_type(item) for item in ec2.describe_instance_types(region, names)]


def normalize_instance_type(item: dict) -> dict:
    gpu_info = item.get("GpuInfo") or {}
    gpus = gpu_info.get("Gpus") or []
    net = item.get("NetworkInfo") or {}
    cards = net.get("NetworkCards") or []
    baseline = sum(c.get("BaselineBandwidthInGbps", 0) for c in cards) or None
    peak = sum(c.get("PeakBandwidthInGbps", 0) for c in cards) or None
    efa = net.get("EfaInfo") or {}
    return {
        "name": item["InstanceType"],
        "vcpus": item["VCpuInfo"]["DefaultVCpus"],
        "memory_gib": item["MemoryInfo"]["SizeInMiB"] / 1024,
        "arch": (item.get("ProcessorInfo", {}).get("SupportedArchitectures") or ["x86_64"])[0],
        "accelerator": gpus[0]["Name"] if gpus else None,
        "accelerator_manufacturer": gpus[0].get("Manufacturer", "") if gpus else "",
        "accelerator_memory_mib": (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB") if gpus else None,
        "gpu_count": sum(g.get("Count", 0) for g in gpus),
        "gpu_memory_mib": gpu_info.get("TotalGpuMemoryInMiB"),
        "network_performance": net.get("NetworkPerformance", ""),
        "baseline_gbps": baseline,
        "peak_gbps": peak,
        "network_cards": net.get("MaximumNetworkCards", 1),
        "efa_supported": bool(net.get("EfaSupported")),
        "max_efa_interfaces": efa.get("MaximumEfaInterfaces", 0),
        "placement_group_strategies": ";".join(
            item.get("PlacementGroupInfo", {}).get("SupportedStrategies", [])
        ),
        "usage_classes": ";".join(item.get("SupportedUsageClasses", [])),
    }

"""The one place Srifty's catalog talks to AWS (EC2 and the Price List API).

Credentials come only from boto3's normal chain (environment, profile, instance role); nothing
is stored in the database. ``settings.AWS_ENDPOINT_URL`` points every client at another endpoint
(tests use moto's server on 127.0.0.1). Functions return plain dicts/dataclasses so callers and
tests need no boto3 types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from botocore.config import Config
from django.conf import settings

# Adaptive retries back off on throttling (RequestLimitExceeded) before giving up.
_RETRY = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=10, read_timeout=30)
# The Price List API lives only in a few regions; us-east-1 serves every region's prices.
PRICING_REGION = "us-east-1"


class AwsError(RuntimeError):
    """An AWS call failed after retries; the message says which call and why."""


def client(service: str, region: str):
    import boto3

    kwargs = {"region_name": region, "config": _RETRY}
    if settings.AWS_ENDPOINT_URL:
        kwargs["endpoint_url"] = settings.AWS_ENDPOINT_URL
    return boto3.client(service, **kwargs)


def _call(what: str, fn, **kwargs):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise AwsError(f"{what} failed: {err.get('Code', '?')}: {err.get('Message', exc)}") from exc
    except BotoCoreError as exc:
        raise AwsError(f"{what} failed: {exc}") from exc


def _pages(what: str, cli, operation: str, key: str, **kwargs) -> Iterator[dict]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        for page in cli.get_paginator(operation).paginate(**kwargs):
            yield from page.get(key, [])
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise AwsError(f"{what} failed: {err.get('Code', '?')}: {err.get('Message', exc)}") from exc
    except BotoCoreError as exc:
        raise AwsError(f"{what} failed: {exc}") from exc


# --- EC2 instance types -------------------------------------------------------------------


def describe_instance_types(region: str, names: Iterable[str] | None = None) -> list[dict]:
    """Specs of instance types as the catalog stores them (see ``normalize_instance_type``)."""
    cli = client("ec2", region)
    kwargs = {"InstanceTypes": sorted(names)} if names else {}
    raw = _pages("ec2.describe_instance_types", cli, "describe_instance_types", "InstanceTypes", **kwargs)
    return [normalize_instance_type(item) for item in raw]


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


# --- Spot price history -------------------------------------------------------------------


@dataclass(frozen=True)
class SpotObservation:
    instance_type: str
    zone_id: str
    usd_per_hour: Decimal
    observed_at: datetime


def zone_ids(region: str) -> dict[str, str]:
    """Zone name (account-specific, ``us-east-1a``) -> zone ID (stable, ``use1-az6``)."""
    cli = client("ec2", region)
    resp = _call("ec2.describe_availability_zones", cli.describe_availability_zones)
    return {z["ZoneName"]: z["ZoneId"] for z in resp.get("AvailabilityZones", [])}


def spot_price_history(region: str, names: Iterable[str], start: datetime) -> list[SpotObservation]:
    """Linux spot prices of ``names`` in every zone of ``region`` since ``start``."""
    names = sorted(names)
    if not names:
        return []
    cli = client("ec2", region)
    ids = zone_ids(region)
    out = []
    for item in _pages(
        "ec2.describe_spot_price_history",
        cli,
        "describe_spot_price_history",
        "SpotPriceHistory",
        InstanceTypes=names,
        ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
        StartTime=start,
    ):
        zone = ids.get(item["AvailabilityZone"])
        if zone is None:  # a zone this account cannot see
            continue
        out.append(SpotObservation(item["InstanceType"], zone, Decimal(item["SpotPrice"]), item["Timestamp"]))
    return out


# --- On-demand prices (Price List API) ----------------------------------------------------


def on_demand_prices(region: str, names: Iterable[str]) -> dict[str, Decimal]:
    """Linux, shared-tenancy, no-pre-installed-software on-demand USD/hour per instance type."""
    cli = client("pricing", PRICING_REGION)
    wanted = set(names)
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    prices: dict[str, Decimal] = {}
    for name in sorted(wanted):
        resp = _call(
            "pricing.get_products",
            cli.get_products,
            ServiceCode="AmazonEC2",
            Filters=[*filters, {"Type": "TERM_MATCH", "Field": "instanceType", "Value": name}],
            FormatVersion="aws_v1",
            MaxResults=10,
        )
        for doc in resp.get("PriceList", []):
            parsed = parse_price_list_item(doc)
            if parsed and parsed[0] in wanted:
                prices[parsed[0]] = parsed[1]
    return prices


def parse_price_list_item(doc: str | dict) -> tuple[str, Decimal] | None:
    """(instance type, USD/hour) from one Price List product document, or None if not hourly."""
    item = json.loads(doc) if isinstance(doc, str) else doc
    name = item.get("product", {}).get("attributes", {}).get("instanceType")
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if dim.get("unit") in ("Hrs", "Hours") and usd is not None and name:
                return name, Decimal(usd)
    return None

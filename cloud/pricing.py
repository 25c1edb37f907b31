"""Prices: EC2 spot price history and on-demand prices from the Price List API."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from cloud import ec2, session
from cloud.errors import call, pages

__all__ = [
    "PRICING_REGION",
    "SpotObservation",
    "on_demand_prices",
    "parse_price_list_item",
    "spot_price_history",
]

# The Price List API lives only in a few regions; us-east-1 serves every region's prices.
PRICING_REGION = "us-east-1"


@dataclass(frozen=True)
class SpotObservation:
    instance_type: str
    zone_id: str
    usd_per_hour: Decimal
    observed_at: datetime


def spot_price_history(region: str, names: Iterable[str], start: datetime) -> list[SpotObservation]:
    """Linux spot prices of ``names`` in every zone of ``region`` since ``start``."""
    names = sorted(names)
    if not names:
        return []
    cli = session.client("ec2", region)
    ids = ec2.zone_ids(region)
    out = []
    for item in pages(
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


def on_demand_prices(region: str, names: Iterable[str]) -> dict[str, Decimal]:
    """Linux, shared-tenancy, no-pre-installed-software on-demand USD/hour per instance type."""
    cli = session.client("pricing", PRICING_REGION)
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
        resp = call(
            cli,
            "get_products",
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


def parse_price_list_item(doc: str | dict[str, Any]) -> tuple[str, Decimal] | None:
    """(instance type, USD/hour) from one Price List product document, or None if not hourly."""
    item = json.loads(doc) if isinstance(doc, str) else doc
    name = item.get("product", {}).get("attributes", {}).get("instanceType")
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if dim.get("unit") in ("Hrs", "Hours") and usd is not None and name:
                return name, Decimal(usd)
    return None

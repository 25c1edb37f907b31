"""Refresh from AWS against moto's real server (EC2) and botocore's Stubber (Price List API,
which moto does not serve), with a response shaped like a recorded get_products answer."""

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from botocore.stub import Stubber
from django.core.management import CommandError, call_command

from catalog import aws as aws_api
from catalog.models import InstanceType, OnDemandPrice, PriceSource, SpotPrice
from catalog.refresh import refresh_region
from cloud import CloudError, session

pytestmark = pytest.mark.django_db

# Shape of one PriceList entry as the Price List API returns it (a JSON *string*), trimmed.
PRICE_DOC = {
    "product": {
        "productFamily": "Compute Instance",
        "attributes": {
            "instanceType": "g5.xlarge",
            "regionCode": "us-east-1",
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "vcpu": "4",
        },
        "sku": "8U3UZ8WS7MAYN5ZE",
    },
    "serviceCode": "AmazonEC2",
    "terms": {
        "OnDemand": {
            "8U3UZ8WS7MAYN5ZE.JRTCKXETXF": {
                "priceDimensions": {
                    "8U3UZ8WS7MAYN5ZE.JRTCKXETXF.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": "0.9900000000"},
                        "description": "$0.99 per On Demand Linux g5.xlarge Instance Hour",
                    }
                },
                "sku": "8U3UZ8WS7MAYN5ZE",
                "effectiveDate": "2026-11-01T00:00:00Z",
            }
        }
    },
    "version": "20261101000000",
}


class StubbedPricing:
    """Wrap the pricing client in a Stubber while leaving EC2 on the moto server."""

    def __init__(self, monkeypatch, responses):
        real_client = session.client
        self.stubbers = []

        def fake_client(service, region):
            cli = real_client(service, region)
            if service == "pricing":
                stub = Stubber(cli)
                for r in responses:
                    if isinstance(r, Exception):
                        stub.add_client_error(
                            "get_products", service_error_code=r.args[0], http_status_code=400
                        )
                    else:
                        stub.add_response("get_products", r)
                stub.activate()
                self.stubbers.append(stub)
            return cli

        monkeypatch.setattr(session, "client", fake_client)


def test_it_parses_an_hourly_on_demand_price():
    assert aws_api.parse_price_list_item(json.dumps(PRICE_DOC)) == ("g5.xlarge", Decimal("0.9900000000"))
    no_hourly = json.loads(json.dumps(PRICE_DOC))
    no_hourly["terms"]["OnDemand"]["8U3UZ8WS7MAYN5ZE.JRTCKXETXF"]["priceDimensions"][
        "8U3UZ8WS7MAYN5ZE.JRTCKXETXF.6YS6EN2CT7"
    ]["unit"] = "Quantity"
    assert aws_api.parse_price_list_item(no_hourly) is None


def test_describe_instance_types_returns_real_specs_from_moto(aws):
    specs = {
        s["name"]: s for s in aws_api.describe_instance_types("us-east-1", ["p4d.24xlarge", "g5.xlarge"])
    }
    assert specs["p4d.24xlarge"]["accelerator"] == "A100" and specs["p4d.24xlarge"]["gpu_count"] == 8
    assert specs["g5.xlarge"]["vcpus"] == 4 and specs["g5.xlarge"]["baseline_gbps"] == 2.5


def test_refresh_adds_spot_history_and_keeps_it_on_the_next_refresh(catalog, aws, monkeypatch):
    StubbedPricing(monkeypatch, [{"PriceList": [json.dumps(PRICE_DOC)], "FormatVersion": "aws_v1"}] * 2)
    snapshot_spot = SpotPrice.objects.filter(instance_type__name="g5.xlarge").count()
    old_od = OnDemandPrice.objects.get(instance_type__name="g5.xlarge", region__code="us-east-1")

    since = datetime(2000, 1, 1, tzinfo=UTC)
    report = refresh_region("us-east-1", ["g5.xlarge"], since=since)
    assert report.types_seen == 1 and report.spot_prices_added >= 1
    aws_rows = SpotPrice.objects.filter(instance_type__name="g5.xlarge", source=PriceSource.AWS)
    assert aws_rows.count() == report.spot_prices_added
    assert all(r.zone.zone_id.startswith("use1-az") for r in aws_rows)  # zone IDs, not names
    od = OnDemandPrice.objects.filter(instance_type__name="g5.xlarge", region__code="us-east-1").order_by(
        "observed_at"
    )
    assert [p.usd_per_hour for p in od] == [old_od.usd_per_hour, Decimal("0.99")]

    again = refresh_region("us-east-1", ["g5.xlarge"], since=since)
    assert again.spot_prices_added == 0 and again.on_demand_prices_added == 0
    total = SpotPrice.objects.filter(instance_type__name="g5.xlarge").count()
    assert total == snapshot_spot + report.spot_prices_added  # snapshot rows all kept


def test_a_throttled_price_call_stores_nothing(catalog, aws, monkeypatch):
    StubbedPricing(monkeypatch, [RuntimeError("ThrottlingException")])
    before = SpotPrice.objects.count(), OnDemandPrice.objects.count()
    with pytest.raises(CloudError, match="pricing.get_products failed: ThrottlingException"):
        refresh_region("us-east-1", ["g5.xlarge"], since=datetime(2000, 1, 1, tzinfo=UTC))
    assert (SpotPrice.objects.count(), OnDemandPrice.objects.count()) == before


def test_refresh_creates_a_type_the_catalog_did_not_know(db, aws):
    report = refresh_region(
        "us-east-1", ["g5.2xlarge"], on_demand=False, since=datetime(2000, 1, 1, tzinfo=UTC)
    )
    assert report.types_created == 1
    g5 = InstanceType.objects.get(name="g5.2xlarge")
    assert g5.accelerator.name == "A10G" and g5.gpu_count == 1 and g5.family == "g5"


def test_the_command_refuses_unknown_regions_and_reports_aws_failures(db, aws, settings):
    with pytest.raises(CommandError, match="unknown region"):
        call_command("refresh_prices", "--region", "moon-1")
    settings.AWS_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens: connection refused
    with pytest.raises(CommandError, match="refresh failed for us-east-1"):
        call_command("refresh_prices", "--region", "us-east-1", "--type", "g5.xlarge", "--no-on-demand")

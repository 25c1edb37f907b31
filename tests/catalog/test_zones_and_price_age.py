"""Zone kinds by ID, the age of the catalog's prices, and a zone priced far below its region."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from catalog.freshness import STALE_AFTER_DAYS, price_age
from catalog.models import SpotPrice
from catalog.zone_prices import lone_zone_price, lone_zone_prices
from catalog.zones import ZoneKind, is_special_zone, zone_kind, zone_label

SNAPSHOT_DAY = datetime(2025, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "kind"),
    [
        ("use1-az2", ZoneKind.AVAILABILITY_ZONE),
        ("apne1-az4", ZoneKind.AVAILABILITY_ZONE),
        ("use1-atl2-az1", ZoneKind.LOCAL_ZONE),
        ("usw2-lax1-az2", ZoneKind.LOCAL_ZONE),
        ("use1-wl1-bos-wlz1", ZoneKind.WAVELENGTH_ZONE),
        ("us-east-1a", ZoneKind.AVAILABILITY_ZONE),  # zone names too, as a launch carries them
        ("us-east-1-atl-2a", ZoneKind.LOCAL_ZONE),
        ("us-east-1-wl1-bos-wlz-1", ZoneKind.WAVELENGTH_ZONE),
    ],
)
def test_it_tells_a_zone_kind_by_the_zone_id_or_name_pattern(zone, kind):
    assert zone_kind(zone) == kind
    assert is_special_zone(zone) == (kind != ZoneKind.AVAILABILITY_ZONE)


def test_an_on_demand_price_has_no_zone_and_no_label():
    assert zone_kind(None) is None and zone_label(None) == "" and zone_label("use1-az1") == ""
    assert zone_label("use1-atl2-az1") == "Local Zone"


@pytest.mark.django_db
def test_the_price_age_is_the_newest_observation_in_days(catalog):
    fresh = price_age(now=SNAPSHOT_DAY + timedelta(days=STALE_AFTER_DAYS, hours=23))
    assert fresh is not None and fresh.observed_at == SNAPSHOT_DAY
    assert fresh.days == STALE_AFTER_DAYS and not fresh.stale
    old = price_age(now=SNAPSHOT_DAY + timedelta(days=371))
    assert old is not None and old.stale and old.text == "prices as of 2025-12-01 (371 days old)"
    one = SpotPrice.objects.order_by("pk").first()
    assert one is not None
    SpotPrice.objects.create(
        instance_type=one.instance_type,
        zone=one.zone,
        usd_per_hour=Decimal("1"),
        observed_at=SNAPSHOT_DAY + timedelta(days=370),
        source="aws",
    )
    refreshed = price_age(now=SNAPSHOT_DAY + timedelta(days=371))
    assert refreshed is not None and refreshed.days == 1 and not refreshed.stale


@pytest.mark.django_db
def test_without_prices_there_is_no_age():
    assert price_age() is None


@pytest.mark.django_db
def test_p4d_spot_in_use1_az1_is_far_below_the_other_us_east_1_zones(catalog):
    low = lone_zone_price("p4d.24xlarge", "us-east-1", "use1-az1", 2.4655)
    assert low is not None and low.other_zones == 3
    assert low.others_low == pytest.approx(7.8799) and low.others_high == pytest.approx(8.1915)
    assert "use1-az1" in low.text and "$7.88-8.19/h" in low.text
    # a zone priced like the others is not; nor is on-demand (one price per region)
    assert lone_zone_price("p4d.24xlarge", "us-east-1", "use1-az2", 8.1915) is None
    plan = {
        "region": "us-east-1",
        "groups": [
            {"instance_type": "p4d.24xlarge", "market": "spot", "zone": "use1-az1", "price_per_hour": 2.4655},
            {"instance_type": "p4d.24xlarge", "market": "on-demand", "zone": None, "price_per_hour": 21.96},
        ],
    }
    assert [z.zone for z in lone_zone_prices(plan)] == ["use1-az1"]


@pytest.mark.django_db
def test_a_price_just_at_half_the_median_is_not_far_below(catalog):
    # us-east-1 p4d others: 8.1915, 8.1203, 7.8799 -> median 8.1203, half 4.06015
    assert lone_zone_price("p4d.24xlarge", "us-east-1", "use1-az1", 4.06015) is None
    assert lone_zone_price("p4d.24xlarge", "us-east-1", "use1-az1", 4.06) is not None

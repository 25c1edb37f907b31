"""The launch preview's money is what the OpenAPI schema says (LaunchInstanceSerializer): each
instance group's ``price_per_hour`` and ``hourly_usd`` are decimal strings (srifty_web.money),
not JSON numbers; the re-plan offer is the same preview (launcher.monitor.prepare_replan)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from launcher import options
from tests.support.jobs import g5_group, g5_spot_option, may_launch, solved_plan

pytestmark = pytest.mark.django_db

# 3 x $0.1/h: as floats 0.30000000000000004; $1.2345/h: four decimals kept, none invented.
GROUPS = [g5_group(3, price=0.1), g5_group(1, market="on-demand", price=1.2345)]


def test_the_preview_responses_instance_money_is_decimal_strings_equal_to_the_price(user):
    owner = may_launch(user)
    plan = solved_plan(owner, g5_spot_option(groups=GROUPS, hourly_usd=1.5345))
    api = APIClient()
    api.force_authenticate(owner)
    resp = api.post(
        "/api/v1/jobs/preview/",
        {"plan": plan.pk, "rank": 1, "train_command": "train.py", "max_spend_usd": "40", "max_hours": 10},
        format="json",
    )
    assert resp.status_code == 200, resp.content
    shown = [(i["count"], i["price_per_hour"], i["hourly_usd"]) for i in resp.json()["instances"]]
    assert shown == [(3, "0.1000", "0.3000"), (1, "1.2345", "1.2345")]
    for group, (count, price, hourly) in zip(GROUPS, shown, strict=True):
        assert Decimal(price) == Decimal(str(group["price_per_hour"]))
        assert Decimal(hourly) == count * Decimal(str(group["price_per_hour"]))


def test_preview_writes_instance_money_as_strings_for_every_caller():
    """The page (frontend.jobs), the dialog's API, the re-plan offer and manage.py launch all
    read ``options.preview``."""
    shown = options.preview(g5_spot_option(groups=GROUPS), Decimal("40"), 10.0)
    assert all(
        isinstance(i["price_per_hour"], str) and isinstance(i["hourly_usd"], str) for i in shown["instances"]
    )

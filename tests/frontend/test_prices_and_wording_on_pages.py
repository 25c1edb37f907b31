"""Issue 38 items 3 and 7 on the pages: the prices' age, Local Zones, a plan resting on one
zone's price, charts only with two points; form errors in the form's words, the "Best" cell,
money and hours, a baseline GPU from the catalog, the region count, the 404 page and the favicon."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from catalog.models import SpotPrice
from frontend.templatetags.srifty import hours, usd
from planner.app.models import PlanRecord
from tests.frontend.test_plan_pages import FORM

pytestmark = pytest.mark.django_db


def _age(page: str) -> str:
    found = re.search(r'<p class="price-age[^"]*" id="price-age"[^>]*>(.*?)</p>', page, re.S)
    assert found, "no price age on the page"
    return re.sub(r"<[^>]+>", "", found.group(1))


@pytest.mark.parametrize("url", ["/", "/catalog/", "/catalog/gpus/?gpu=H100", "/plans/"])
def test_every_page_with_prices_says_how_old_they_are_and_how_to_refresh(client, user, catalog, url):
    client.force_login(user)
    text = _age(client.get(url).content.decode())
    # the bundled snapshot is from 2025-12-01, far more than a week before the test runs
    assert re.fullmatch(
        r"Prices as of 2025-12-01 \([\d,]+ days old\)\. Older than a week: run python manage.py refresh_prices for today's prices\.",
        text,
    ), text


def test_gpu_search_leaves_local_zones_out_until_asked_and_then_marks_them(client, user, catalog):
    client.force_login(user)
    plain = client.get("/catalog/gpus/", {"gpu": "H100", "market": "spot", "limit": "500"})
    assert all(o.zone_label == "" for o, _ in plain.context["rows"])
    assert "use1-atl2-az1" not in plain.content.decode()
    wide = client.get(
        "/catalog/gpus/", {"gpu": "H100", "market": "spot", "limit": "500", "local_zones": "true"}
    )
    local = [o for o, _ in wide.context["rows"] if o.zone == "use1-atl2-az1"]
    assert local and local[0].zone_label == "Local Zone"
    assert re.search(
        r"use1-atl2-az1 <span class=\"badge zone-kind\"[^>]*>Local Zone</span>", wide.content.decode()
    )
    assert 'name="local_zones" id="local_zones" value="true" checked' in wide.content.decode()


def test_a_sparkline_needs_two_observations_else_the_row_says_one(client, user, catalog):
    client.force_login(user)
    first = client.get("/catalog/gpus/", {"gpu": "H100", "market": "spot", "limit": "1"}).context["rows"][0][
        0
    ]
    page = client.get("/catalog/gpus/", {"gpu": "H100", "market": "spot", "limit": "1"}).content.decode()
    assert '<img class="spark"' not in page and "one price observation" in page
    p = SpotPrice.objects.get(instance_type__name=first.instance_type, zone__zone_id=first.zone)
    SpotPrice.objects.create(
        instance_type=p.instance_type,
        zone=p.zone,
        usd_per_hour=p.usd_per_hour * 2,
        observed_at=p.observed_at - timedelta(days=30),
        source="admin",
    )
    page = client.get("/catalog/gpus/", {"gpu": "H100", "market": "spot", "limit": "1"}).content.decode()
    assert page.count('<img class="spark"') == 1 and "one price observation" not in page


def test_the_catalog_chart_is_drawn_only_with_a_history(client, user, catalog):
    client.force_login(user)
    query = {"region": "us-east-1", "type": "p4d.24xlarge"}
    page = client.get("/catalog/", query).content.decode()
    assert 'id="history-chart"' not in page and 'id="history-one-point"' in page
    p = SpotPrice.objects.filter(instance_type__name="p4d.24xlarge", zone__zone_id="use1-az2").get()
    SpotPrice.objects.create(
        instance_type=p.instance_type,
        zone=p.zone,
        usd_per_hour=p.usd_per_hour,
        observed_at=p.observed_at - timedelta(days=7),
        source="admin",
    )
    page = client.get("/catalog/", query).content.decode()
    assert 'id="history-chart"' in page and 'id="history-one-point"' not in page


def _stored_plan(owner, groups: list[dict], **extra) -> PlanRecord:
    plan = {
        "rank": 1,
        "label": "1x p4d.24xlarge (spot) in us-east-1",
        "region": "us-east-1",
        "groups": groups,
        "uses_spot": True,
        "hourly_usd": 2.4655,
        "total_usd": 24.655,
        "time_h": 10.0,
        "time_p90_h": 12.0,
        "throughput_sps": 12345.6,
        "iter_time_s": 0.2,
        "bottleneck": "compute",
        "why": "cheapest",
        **extra,
    }
    return PlanRecord.objects.create(
        owner=owner,
        status="solved",
        request={"objective": "cost", "deadline_hours": 24, "model": {"spec": "torchvision:resnet50"}},
        result={"plans": [plan], "points": [], "pareto": [], "baselines": [], "stats": {}},
    )


def test_a_plan_resting_on_one_zones_outlier_price_says_so_on_the_plan_and_its_row(client, user, catalog):
    group = {
        "instance_type": "p4d.24xlarge",
        "market": "spot",
        "zone": "use1-az1",
        "count": 1,
        "price_per_hour": 2.4655,
        "batch_per_node": [256],
    }
    record = _stored_plan(user, [group])
    client.force_login(user)
    page = client.get(f"/plans/{record.pk}/").content.decode()
    note = re.search(r'<p class="card warning plan-warning lone-zone"[^>]*>(.*?)</p>', page, re.S)
    assert note and "rests on one zone (use1-az1)" in note.group(1) and "$7.88-8.19/h" in note.group(1)
    assert "One zone's price:</strong> use1-az1 at $2.47/h, the region's other zones $7.88–$8.19/h" in page
    assert "12,346/s" in page  # big numbers with separators
    usual = _stored_plan(user, [{**group, "zone": "use1-az2", "price_per_hour": 8.1915}])
    assert "lone-zone" not in client.get(f"/plans/{usual.pk}/").content.decode()


def test_form_errors_use_the_forms_words_not_api_field_names(client, user, catalog):
    client.force_login(user)
    resp = client.post("/plans/", {**FORM, "samples_per_epoch": "", "epochs": ""})
    assert resp.status_code == 400
    assert resp.context["errors"]["samples_per_epoch"] == "give samples per epoch and epochs, or iterations"
    resp = client.post("/plans/", {**FORM, "global_batch_min": "1024", "global_batch_max": "512"})
    assert resp.context["errors"]["global_batch_min"] == "must not exceed global batch max"
    shown = re.findall(r'<span class="error"[^>]*>(.*?)</span>', resp.content.decode())
    assert "must not exceed global batch max" in shown and not any("_" in e for e in shown)


def test_a_made_up_baseline_gpu_is_refused_naming_the_field(client, user, user_api, catalog):
    resp = user_api.post(
        "/api/v1/plans/",
        {
            "model": {"spec": "torchvision:resnet50"},
            "samples_per_epoch": 1000,
            "epochs": 1,
            "objective": "cost",
            "deadline_hours": 24,
            "baseline_gpu": "ZZZ9000",
        },
        format="json",
    )
    assert resp.status_code == 400 and "baseline_gpu" in resp.json()
    assert (
        "unknown GPU 'ZZZ9000'" in resp.json()["baseline_gpu"][0] and "H100" in resp.json()["baseline_gpu"][0]
    )
    client.force_login(user)
    form = client.post("/plans/", {**FORM, "baseline_gpu": "ZZZ9000"})
    assert form.status_code == 400 and 'id="baseline_gpu-error"' in form.content.decode()
    assert not PlanRecord.objects.exists()


def test_a_lowercase_baseline_gpu_becomes_the_catalogs_name(catalog):
    from planner.app.serializers import PlanRequestSerializer

    assert PlanRequestSerializer().validate_baseline_gpu(" h100 ") == "H100"
    assert PlanRequestSerializer().validate_baseline_gpu("") == ""


def test_the_best_cell_names_the_best_plan_and_its_cost_or_why_there_is_none(client, user, catalog):
    group = {
        "instance_type": "p4d.24xlarge",
        "market": "spot",
        "zone": "use1-az2",
        "count": 1,
        "price_per_hour": 8.1915,
        "batch_per_node": [256],
    }
    _stored_plan(user, [group], total_usd=0.01)
    PlanRecord.objects.create(
        owner=user,
        status="infeasible",
        binding_constraint="deadline_hours",
        request={"objective": "cost", "model": {"spec": "x"}},
        result={"plans": []},
    )
    client.force_login(user)
    page = client.get("/plans/").content.decode()
    cells = re.findall(r'<td class="best">(.*?)</td><td class="num">(.*?)</td>', page)
    assert ("no plan fits the deadline (hours)", "—") in cells
    assert ("1x p4d.24xlarge (spot) in us-east-1", "$0.01") in cells
    assert "deadline_hours" not in page.split('id="plans-table"')[1]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.01, "$0.01"), (0.0003, "<$0.01"), (0, "$0.00"), (1234.5, "$1,234.50"), (None, "—")],
)
def test_money_has_two_decimals_and_separators(value, text):
    assert usd(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.5, "30 min"), (3.21, "3.2 h"), (12345.6, "12,346 h"), (13893794518.2, "1,586,050 years")],
)
def test_hours_stay_readable_however_many(value, text):
    assert hours(value) == text


def test_the_home_page_counts_the_regions_the_catalog_offers_types_in(client, user, catalog):
    client.force_login(user)
    page = client.get("/").content.decode()
    assert re.search(r'id="catalog-summary">\d+ EC2 accelerator instance types in 24 regions\.', page)


def test_an_unknown_page_is_the_styled_404(client, user):
    client.force_login(user)
    resp = client.get("/no/such/page/")
    page = resp.content.decode()
    assert resp.status_code == 404 and 'id="not-found"' in page and "srifty.css" in page
    assert "/no/such/page/" in page and 'href="/plans/"' in page


def test_the_favicon_is_served_without_a_login(client):
    resp = client.get("/favicon.ico")
    assert resp.status_code == 200 and resp["Content-Type"] == "image/x-icon"
    body = resp.content
    assert body[:4] == b"\x00\x00\x01\x00" and len(body) < 4096  # an ICO header, small


def test_the_launch_confirmation_marks_a_local_zone_and_dates_its_prices(client, user, catalog):
    from tests.support.jobs import g5_group, may_launch

    launcher = may_launch(user)
    option = {
        "rank": 1,
        "region": "us-east-1",
        "global_batch": 128,
        "hourly_usd": 1.0,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "time_h": 2.0,
        "time_p90_h": 2.5,
        "throughput_sps": 100.0,
        "groups": [g5_group(zone="us-east-1-atl-2a")],
    }
    plan = PlanRecord.objects.create(
        owner=user, request={"total_samples": 128_000}, status="solved", result={"plans": [option]}
    )
    client.force_login(launcher)
    page = client.get("/jobs/new/", {"plan": plan.pk, "rank": 1}).content.decode()
    assert re.search(r'us-east-1-atl-2a <span class="badge zone-kind"[^>]*>Local Zone</span>', page)
    assert "days old" in _age(page)

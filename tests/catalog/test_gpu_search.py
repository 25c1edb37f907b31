"""GPU search across regions and zones: the one function, the API and ``manage.py gpus``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from catalog import spot_advisor
from catalog.models import InstanceType, Region, SpotInterruption, SpotPrice
from catalog.search import (
    SPOT_ADVISOR_SOURCE,
    GpuQuery,
    SearchError,
    search_gpus,
    sparkline_svg,
    spot_advisor_buckets,
)
from catalog.zones import is_special_zone

pytestmark = pytest.mark.django_db


def _key(o):
    return (o.usd_per_gpu_hour, o.usd_per_hour)


def test_h100_spot_is_sorted_by_dollars_per_gpu_hour_across_every_region_and_zone(catalog):
    result = search_gpus(GpuQuery(gpu="h100", market="spot", limit=None))
    offers = result.offers
    assert offers and result.total == len(offers)
    assert {o.gpu for o in offers} == {"H100"} and {o.market for o in offers} == {"spot"}
    assert all(o.zone for o in offers)  # spot: one row per zone
    assert len({o.region for o in offers}) > 1  # not one region at a time
    assert [_key(o) for o in offers] == sorted(_key(o) for o in offers)
    for o in offers:
        assert o.usd_per_gpu_hour == (o.usd_per_hour / Decimal(str(o.gpu_count))).quantize(
            Decimal("0.000001"), rounding=ROUND_HALF_UP
        )
    # brute force: the cheapest spot H100 GPU-hour in the whole database comes first, outside
    # Local and Wavelength Zones (left out unless asked for); with them, the cheapest of all
    current = SpotPrice.objects.current().filter(instance_type__accelerator__name="H100")
    prices = [(p.zone.zone_id, p.usd_per_hour / Decimal(str(p.instance_type.gpu_count))) for p in current]
    regular = [usd for zone, usd in prices if not is_special_zone(zone)]
    assert len(regular) < len(prices)  # the snapshot has H100 spot in a Local Zone
    assert offers[0].usd_per_gpu_hour == min(regular).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
    wide = search_gpus(GpuQuery(gpu="h100", market="spot", limit=None, include_local_zones=True)).offers
    assert wide[0].usd_per_gpu_hour == min(usd for _, usd in prices).quantize(
        Decimal("0.000001"), rounding=ROUND_HALF_UP
    )
    assert any(o.zone_label == "Local Zone" for o in wide)


def test_filters_count_memory_efa_market_and_region(catalog):
    eight = search_gpus(GpuQuery(gpu="A100", count=8, limit=None)).offers
    assert eight and all(o.gpu_count == 8 for o in eight)
    assert {o.market for o in eight} == {"spot", "on-demand"}
    assert all(o.zone is None for o in eight if o.market == "on-demand")
    big = search_gpus(GpuQuery(min_memory_gib=79, limit=None)).offers
    assert big and all(o.gpu_memory_gib >= 79 for o in big)
    assert "T4" not in {o.gpu for o in big}
    efa = search_gpus(GpuQuery(efa=True, market="on-demand", limit=None)).offers
    assert efa and all(o.efa for o in efa)
    assert all(InstanceType.objects.get(name=o.instance_type).efa_supported for o in efa)
    east = search_gpus(GpuQuery(gpu="L4", region="us-east-1", limit=None)).offers
    assert east and {o.region for o in east} == {"us-east-1"}
    # no GPU named: CUDA GPUs only (no Inferentia, Trainium, FPGA)
    anything = search_gpus(GpuQuery(limit=None)).offers
    assert not {o.gpu for o in anything} & {"Inferentia", "Inferentia2", "Trainium"}
    # naming one lists it
    assert {o.gpu for o in search_gpus(GpuQuery(gpu="inferentia2")).offers} == {"Inferentia2"}


def test_the_limit_keeps_the_cheapest_and_counts_them_all(catalog):
    everything = search_gpus(GpuQuery(gpu="T4", limit=None))
    first = search_gpus(GpuQuery(gpu="T4", limit=5))
    assert first.total == everything.total > 5
    assert [(o.instance_type, o.zone, o.market) for o in first.offers] == [
        (o.instance_type, o.zone, o.market) for o in everything.offers[:5]
    ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (GpuQuery(market="auction"), "market"),
        (GpuQuery(count=0), "count"),
        (GpuQuery(count=-8), "count"),
        (GpuQuery(min_memory_gib=-1), "min_memory_gib"),
        (GpuQuery(gpu="H1000"), "gpu"),
        (GpuQuery(region="mars-1"), "region"),
        (GpuQuery(limit=0), "limit"),
    ],
)
def test_bad_input_names_the_field(catalog, query, field):
    with pytest.raises(SearchError) as err:
        search_gpus(query)
    assert err.value.field == field


def test_spot_rows_carry_history_and_the_interruption_bucket_where_known(catalog):
    offers = search_gpus(GpuQuery(gpu="A10G", market="spot", limit=None)).offers
    advisor = spot_advisor_buckets()
    known = [o for o in offers if (o.instance_type, o.region) in advisor]
    assert known and all(o.interruption_source == SPOT_ADVISOR_SOURCE for o in known)
    for o in known:
        assert o.interruption_bucket == advisor[(o.instance_type, o.region)]
    # an admin's value wins over the snapshot (it is what plans use)
    o = known[0]
    SpotInterruption.objects.create(
        instance_type=InstanceType.objects.get(name=o.instance_type),
        region=Region.objects.get(code=o.region),
        bucket=4,
    )
    again = search_gpus(GpuQuery(gpu="A10G", market="spot", region=o.region, limit=None)).offers
    same = next(x for x in again if (x.instance_type, x.zone) == (o.instance_type, o.zone))
    assert (same.interruption_bucket, same.interruption_label, same.interruption_source) == (
        4,
        ">20%",
        "catalog (admin)",
    )
    # on-demand rows have no interruption; every row has its price history
    od = search_gpus(GpuQuery(gpu="A10G", market="on-demand", limit=3)).offers
    assert all(x.interruption_bucket is None for x in od)
    assert all(len(x.history) >= 1 for x in offers + od)


def test_history_grows_with_new_observations_and_the_sparkline_draws_it(catalog):
    first = search_gpus(GpuQuery(gpu="H100", market="spot", limit=1)).offers[0]
    p = SpotPrice.objects.filter(instance_type__name=first.instance_type, zone__zone_id=first.zone).latest(
        "observed_at"
    )
    for i, usd in enumerate(["50", "40", "45"], start=1):
        SpotPrice.objects.create(
            instance_type=p.instance_type,
            zone=p.zone,
            usd_per_hour=Decimal(usd),
            observed_at=p.observed_at + timedelta(days=i),
            source="admin",
        )
    offer = next(
        o
        for o in search_gpus(GpuQuery(gpu="H100", market="spot", limit=None)).offers
        if (o.instance_type, o.zone) == (first.instance_type, first.zone)
    )
    assert [y for _, y in offer.history][-3:] == [50.0, 40.0, 45.0]
    assert offer.usd_per_hour == Decimal("45")  # the latest observation is the price
    svg = sparkline_svg(offer.history)
    assert svg.startswith("<svg") and "<polyline" in svg and "4 observations" in svg
    one = sparkline_svg(offer.history[:1])
    assert "<circle" in one and "<polyline" not in one
    assert sparkline_svg([]) == ""


# --- API ---------------------------------------------------------------------------------


def test_api_searches_h100_times_8_on_spot(user_api, catalog):
    resp = user_api.get("/api/v1/gpus/", {"gpu": "H100", "count": 8, "market": "spot"})
    assert resp.status_code == 200, resp.content
    data = resp.json()
    assert data["count"] >= len(data["results"]) > 0
    row = data["results"][0]
    assert set(row) == {
        "instance_type",
        "gpu",
        "gpu_count",
        "gpu_memory_gib",
        "vcpus",
        "memory_gib",
        "efa",
        "network_gbps",
        "region",
        "zone",
        "market",
        "usd_per_hour",
        "usd_per_gpu_hour",
        "observed_at",
        "interruption_bucket",
        "interruption_label",
        "interruption_source",
        "history",
    }
    assert all(r["gpu"] == "H100" and r["gpu_count"] == 8 and r["market"] == "spot" for r in data["results"])
    per_gpu = [Decimal(r["usd_per_gpu_hour"]) for r in data["results"]]
    assert per_gpu == sorted(per_gpu)
    assert row["history"] and set(row["history"][0]) == {"observed_at", "usd_per_hour"}


def test_imported_spot_advisor_rows_name_the_advisor_and_only_admin_edits_say_admin(catalog):
    spot_advisor.import_bundled()  # what import_catalog does: the rows plans read
    offers = search_gpus(GpuQuery(gpu="A10G", market="spot", limit=None)).offers
    known = [o for o in offers if o.interruption_bucket is not None]
    assert known and {o.interruption_source for o in known} == {
        "AWS Spot Instance Advisor (bundled snapshot, 2025-06-28)"
    }
    o = known[0]
    row = SpotInterruption.objects.get(instance_type__name=o.instance_type, region__code=o.region)
    row.bucket, row.source = 4, "admin"  # as SpotInterruptionAdmin.save_model stores an edit
    row.save()
    again = search_gpus(GpuQuery(gpu="A10G", market="spot", region=o.region, limit=None)).offers
    same = next(x for x in again if (x.instance_type, x.zone) == (o.instance_type, o.zone))
    assert (same.interruption_bucket, same.interruption_source) == (4, "catalog (admin)")


@pytest.mark.parametrize(
    ("source", "note", "label"),
    [
        ("admin", "anything", "catalog (admin)"),
        # the note earlier imports stored for the bundled rows
        ("spot-advisor", "AWS Spot Advisor snapshot 2025-06-28 (bundled)", spot_advisor.BUNDLED_NOTE),
        (
            "spot-advisor",
            "AWS Spot Advisor feed https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json",
            "AWS Spot Instance Advisor (live feed, read 2026-12-07)",
        ),
        (
            "spot-advisor",
            "Spot Advisor CSV advisor.csv",
            "AWS Spot Instance Advisor (Spot Advisor CSV advisor.csv, read 2026-12-07)",
        ),
    ],
)
def test_the_interruption_source_says_which_data_a_stored_bucket_came_from(source, note, label):
    assert spot_advisor.source_label(source, note, datetime(2026, 12, 7, 9, tzinfo=UTC)) == label


def test_api_money_is_a_decimal_string_everywhere_in_the_catalog(user_api, catalog):
    offer = user_api.get("/api/v1/gpus/", {"gpu": "H100", "limit": 1}).json()["results"][0]
    types = user_api.get("/api/v1/instance-types/", {"gpu": "H100"}).json()["results"]
    price = user_api.get("/api/v1/prices/", {"limit": 1}).json()["results"][0]
    amounts = [
        offer["usd_per_hour"],
        offer["usd_per_gpu_hour"],
        offer["history"][0]["usd_per_hour"],
        price["usd_per_hour"],
        *(t["on_demand_usd"] for t in types if t["on_demand_usd"] is not None),
    ]
    assert len(amounts) > 4 and all(isinstance(a, str) and Decimal(a) > 0 for a in amounts)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"market": "auction"}, "market"),
        ({"count": "eight"}, "count"),
        ({"count": 0}, "count"),
        ({"count": "2.5"}, "count"),
        ({"min_memory_gib": "-4"}, "min_memory_gib"),
        ({"efa": "maybe"}, "efa"),
        ({"gpu": "H1000"}, "gpu"),
        ({"region": "mars-1"}, "region"),
        ({"limit": 5000}, "limit"),
    ],
)
def test_api_bad_input_is_a_400_naming_the_parameter(user_api, catalog, params, field):
    resp = user_api.get("/api/v1/gpus/", params)
    assert resp.status_code == 400 and field in resp.json(), resp.content


def test_api_needs_a_login(api, catalog):
    assert api.get("/api/v1/gpus/").status_code == 401


def test_the_openapi_schema_documents_parameters_and_examples(user_api):
    schema = user_api.get("/api/schema/", {"format": "json"}).json()
    op = schema["paths"]["/api/v1/gpus/"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert {"gpu", "count", "min_memory_gib", "efa", "market", "region", "limit"} <= set(params)
    assert sorted(params["market"]["schema"].get("enum")) == ["both", "on-demand", "spot"]
    assert params["gpu"].get("examples") and params["count"].get("examples")
    ok = op["responses"]["200"]["content"]["application/json"]
    assert ok["schema"]["$ref"].endswith("/GpuSearchResponse") and ok.get("examples")
    offer = schema["components"]["schemas"]["GpuOffer"]["properties"]
    assert {"usd_per_gpu_hour", "interruption_bucket", "history"} <= set(offer)


# --- manage.py gpus ----------------------------------------------------------------------


def test_command_prints_a_table_of_h100_spot_offers(catalog):
    out = StringIO()
    call_command("gpus", "H100", "--spot", "--limit", "5", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["instance", "type"] and "$/GPU-h" in lines[0]
    assert len(lines) == 1 + 5 + 1
    assert all(" spot " in line and "H100 × " in line for line in lines[1:6])
    assert "of" in lines[-1] and "cheapest per GPU-hour first" in lines[-1]


def test_command_json_is_the_api_rows(catalog):
    out = StringIO()
    call_command("gpus", "a100", "--count", "8", "--on-demand", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["results"] and all(
        r["market"] == "on-demand" and r["gpu_count"] == 8 for r in data["results"]
    )


def test_command_bad_gpu_or_region_is_a_command_error(catalog):
    with pytest.raises(CommandError, match="unknown GPU"):
        call_command("gpus", "H1000")
    with pytest.raises(CommandError, match="--region"):
        call_command("gpus", "H100", "--region", "mars-1")


def _exit_code(capsys, *args: str) -> tuple[int | str | None, str]:
    """``manage.py gpus ARGS`` as the shell runs it (``run_from_argv``): its exit code and stderr."""
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as done:
        ManagementUtility(["manage.py", "gpus", *args]).execute()
    return done.value.code, capsys.readouterr().err


def test_command_exit_codes_on_bad_input(catalog, capsys):
    """Exit 2 naming the option for a malformed option; exit 1 with a message for an unknown GPU."""
    code, err = _exit_code(capsys, "H100", "--count", "0")
    assert code == 2 and "--count" in err and "positive" in err
    code, err = _exit_code(capsys, "H100", "--count", "eight")
    assert code == 2 and "--count" in err
    code, err = _exit_code(capsys, "H100", "--market", "auction")
    assert code == 2 and "--market" in err
    code, err = _exit_code(capsys, "H100", "--spot", "--on-demand")
    assert code == 2 and "not allowed with" in err
    code, err = _exit_code(capsys, "H1000")
    assert code == 1 and "unknown GPU" in err and "H100" in err


def test_the_api_and_the_command_leave_local_zones_out_unless_asked(user_api, catalog):
    def zones(**extra) -> set[str]:
        resp = user_api.get("/api/v1/gpus/", {"gpu": "H100", "market": "spot", "limit": 1000, **extra})
        assert resp.status_code == 200, resp.content
        return {r["zone"] for r in resp.json()["results"]}

    assert "use1-atl2-az1" not in zones() and "use1-atl2-az1" in zones(local_zones="true")
    out = StringIO()
    call_command("gpus", "H100", "--spot", "--limit", "1000", "--local-zones", stdout=out)
    assert "use1-atl2-az1 (Local Zone)" in out.getvalue()

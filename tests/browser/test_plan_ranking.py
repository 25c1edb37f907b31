"""The plan page in a real browser (issue 22 items 1, 2, 4, 5 and 11): a real plan solved by the
server's worker, where the same cluster ranks on spot above on demand, baselines read in words,
the assumptions are stated and mixed plans say why they are a mix. Screenshots go to the
session's screenshot folder.
"""

from __future__ import annotations

import itertools
import re
import time
from decimal import Decimal

import pytest

pytestmark = pytest.mark.browser

# VGG-19 fastest within $800 on up to 8 nodes of up to 2 types in us-east-1: the same 8x p5en
# cluster on spot ($66) and on demand ($251) is within 0.05 % of the same time, and mixes rank.
REQUEST = {
    "name": "VGG-19 fastest within $800",
    "model": {"spec": "torchvision:vgg19", "input_shape": "3,224,224", "precision": "amp"},
    "samples_per_epoch": 1281167,
    "epochs": 90,
    "objective": "time",
    "budget_usd": 800,
    "max_types": 2,
    "max_nodes": 8,
    "regions": ["us-east-1"],
    "global_batch_min": 256,
    "global_batch_max": 1024,
    "min_batch_per_gpu": 1,  # the mixes this test reads rank only below the default minimum of 32
    "baseline_gpu": "A100",
}


def solved_plan(server, shared: dict) -> dict:
    if "ranking_plan" not in shared:
        queued = server.api("POST", "/api/v1/plans/", json=REQUEST, expect=202)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            plan = server.api("GET", f"/api/v1/plans/{queued['id']}/")
            if plan["status"] not in ("queued", "running"):
                break
            time.sleep(1)
        assert plan["status"] == "solved", plan.get("error")
        shared["ranking_plan"] = plan
    return shared["ranking_plan"]


def usd(p: dict) -> Decimal:
    """A plan row's total: the API says money as a decimal string (compared as text, "92.08" >
    "499.21" -- so read it as a number)."""
    return Decimal(p["total_usd"])


def dominates(a: dict, b: dict) -> bool:
    return (a["time_h"] <= b["time_h"] * 1.005 and usd(a) < usd(b)) or (
        usd(a) <= usd(b) and a["time_h"] < b["time_h"]
    )


def hardware(p: dict) -> tuple:
    return tuple(sorted((g["instance_type"], g["count"]) for g in p["groups"]))


@pytest.mark.timeout(240)
def test_the_same_cluster_ranks_on_spot_above_on_demand_and_no_row_is_dominated_by_a_lower_one(
    staff_tab, shared
):
    plan = solved_plan(staff_tab.server, shared)
    plans = plan["result"]["plans"]
    for hi, lo in itertools.combinations(plans, 2):
        assert not dominates(lo, hi), f"#{lo['rank']} {lo['label']} dominates #{hi['rank']} {hi['label']}"
    page = staff_tab.page
    page.goto(f"/plans/{plan['id']}/")
    rows = page.locator("#ranked-table tbody tr")
    assert rows.count() == len(plans)
    markets = [rows.nth(i).get_attribute("data-market") for i in range(rows.count())]
    assert markets[0] == "spot" and "on-demand" in markets

    # the same cluster all on spot and all on demand (8x p5en...): spot first, and the on-demand
    # row names it
    def market(p: dict) -> str:
        kinds = {g["market"] for g in p["groups"]}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    by_hw: dict[tuple, dict[str, int]] = {}
    for i, p in enumerate(plans):
        by_hw.setdefault(hardware(p), {})[market(p)] = i
    pairs = [(ix["spot"], ix["on-demand"]) for ix in by_hw.values() if {"spot", "on-demand"} <= set(ix)]
    assert pairs
    for i, j in pairs:
        assert i < j and usd(plans[i]) < usd(plans[j])
        assert markets[i] == "spot" and markets[j] == "on-demand"
        assert f"same cluster as #{i + 1} on spot" in rows.nth(j).locator("td.why").inner_text()
    first_why = rows.first.locator("td.why").inner_text()
    assert "slower than the fastest plan within the $800 budget" in first_why and "ranks first" in first_why
    page.locator("#ranked-table").scroll_into_view_if_needed()
    page.locator("#ranked-table").screenshot(
        path=str(staff_tab.shot("page").with_name(f"{staff_tab._name}-table.png"))
    )
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(240)
def test_baselines_read_in_words_and_every_figure_has_its_unit(staff_tab, shared):
    plan = solved_plan(staff_tab.server, shared)
    page = staff_tab.page
    page.goto(f"/plans/{plan['id']}/")
    main = page.inner_text("main")
    assert not re.search(r"-\s*[0-9][0-9,.]*\s*%\s*cheaper", main) and " cheaper" not in page.inner_text(
        "#baselines-table"
    )
    words = page.locator("#baselines-table td.versus-cost").all_inner_texts()
    assert words and all(re.match(r"(saves|costs) \$[0-9,.]+", w) or w == "same cost" for w in words), words
    prices = page.locator("#ranked-table tbody tr td:nth-child(4)").all_inner_texts()
    assert all(re.fullmatch(r"\$[0-9,.]+/h", p) for p in prices), prices
    page.locator("#baselines-table").scroll_into_view_if_needed()
    staff_tab.shot()
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(240)
def test_the_assumptions_and_why_a_mix_are_on_the_page(staff_tab, shared):
    plan = solved_plan(staff_tab.server, shared)
    page = staff_tab.page
    page.goto(f"/plans/{plan['id']}/")
    card = page.locator("#assumptions")
    assert card.is_visible()
    text = card.inner_text()
    for t in plan["assumptions"]["types"]:
        assert f"{t['gpu_model']} (" in text and t["error_text"] in text
    assert "Data loader:" in text and "p90 time: 9 runs in 10" in text and "interruptions" in text
    mixes = page.locator("#ranked-table p.why-mix")
    assert mixes.count() == len(plan["mix_reasons"]) >= 1
    assert all(" alone: " in m for m in mixes.all_inner_texts())
    card.screenshot(path=str(staff_tab.shot().with_name(f"{staff_tab._name}-card.png")))
    assert not staff_tab.errors, staff_tab.errors

"""The plan page reads right: baselines in words, units on every figure, the assumptions and
why a mix (issue 22 items 2, 4, 5)."""

from __future__ import annotations

import re

import pytest

from frontend.plans import baseline_rows, ranked_rows
from planner.app.models import PlanRecord
from tests.frontend.test_plan_pages import FORM, _api_plan, _traced_run, solve_queued

pytestmark = pytest.mark.django_db


def _cells(page: str, table: str, column: int) -> list[str]:
    found = re.search(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert found, f"no {table} on the page"
    out = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if len(cells) > column:
            out.append(re.sub(r"<[^>]+>", "", cells[column]).strip())
    return out


def test_every_money_figure_has_its_currency_and_period_and_every_time_its_unit(client, user, catalog):
    client.force_login(user)
    client.post("/plans/", FORM)
    solve_queued()
    page = client.get(f"/plans/{PlanRecord.objects.get().pk}/").content.decode()
    prices, totals, times, p90s = (_cells(page, "ranked-table", i) for i in (3, 4, 5, 6))
    assert prices and all(re.fullmatch(r"\$[0-9,.]+/h", p) for p in prices), prices
    # Cost and time cells: the p50, then its p10-p90 range (issue 34), each with its unit.
    money, hours = r"\$[0-9,.]+", r"[0-9.,]+ (h|min)"
    assert all(re.fullmatch(rf"{money}({money}–{money})?", t) for t in totals), totals
    assert all(re.fullmatch(rf"{hours}({hours}–{hours})?", t) for t in times), times
    assert all(re.fullmatch(hours, t) for t in p90s), p90s
    assert all(re.fullmatch(r"\$[0-9,.]+/h", p) for p in _cells(page, "markets-table", 2))


def test_baselines_say_saves_or_costs_more_never_a_negative_cheaper(client, user, catalog):
    client.force_login(user)
    client.post("/plans/", FORM)
    solve_queued()
    page = client.get(f"/plans/{PlanRecord.objects.get().pk}/").content.decode()
    words = _cells(page, "baselines-table", 4) + _cells(page, "baselines-table", 5)
    assert words and all(
        re.match(r"(saves \$|costs \$|same cost|finishes |takes |same time)", w) for w in words
    )
    assert "cheaper" not in re.search(r'<table id="baselines-table">.*?</table>', page, re.S).group(0)
    assert not re.search(r"-\s*[0-9][0-9,.]*\s*%", page.split('id="chart-data"')[0])


def test_a_baseline_that_is_cheaper_than_plan_1_says_what_plan_1_costs_more():
    result = {
        "plans": [{"rank": 1, "total_usd": 3700.0, "time_h": 1.0}],
        "baselines": [
            {"name": "a", "plan": {"total_usd": 256.94, "time_h": 14.4}},
            {"name": "b", "plan": None, "infeasible_reason": "no candidate"},
        ],
    }
    a, b = baseline_rows(result)
    assert (
        a["cost_words"] == "costs $3,443 more (14.4× as much)"
        and a["time_words"] == "finishes 13.4 h sooner (14× as fast)"
    )
    assert "cost_words" not in b


def test_the_page_states_the_assumptions_and_flags_amp_from_an_fp32_profile(
    client, user, catalog, make_run, compute_profile
):
    run = _traced_run(make_run, compute_profile, precision="fp32")
    plan = _api_plan(user, profile_run=run.pk, precision="amp")
    client.force_login(user)
    page = client.get(f"/plans/{plan.pk}/").content.decode()
    card = re.search(r'<section class="card" id="assumptions".*?</section>', page, re.S).group(0)
    for t in plan.result["assumptions"]["types"]:
        assert f'data-gpu="{t["gpu_model"]}" data-source="{t["source"]}"' in card
    assert 'id="assumption-precision" class="warning" data-mismatch="1"' in card
    assert "asked amp, the profile ran fp32" in card and "Not what was asked" in card
    assert "Data loader:" in card and "samples/s" in card and "p90 time: 9 runs in 10" in card


def test_a_mixed_row_carries_its_why_a_mix_sentence():
    result = {
        "plans": [{"rank": 1}, {"rank": 2}],
        "mix_reasons": {"2": "a alone: ...; b alone: ...; the mix ..."},
    }
    rows = ranked_rows(result)
    assert rows[0]["why_mix"] is None and rows[1]["why_mix"].startswith("a alone")

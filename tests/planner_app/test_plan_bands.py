"""Issue 34, item 4, through the API: each ranked plan's p10/p50/p90 time and cost, with the
model error of its source read from the json the bench writes."""

import json
import math
from decimal import Decimal

import pytest

from planner.validated import DEFAULT_PATH

pytestmark = pytest.mark.django_db

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}
BAND = (
    "time_p10_h",
    "time_p50_h",
    "time_p90_h",
    "iter_time_p10_s",
    "iter_time_p50_s",
    "iter_time_p90_s",
)


@pytest.fixture
def plan(user_api, catalog, run_queued_plans, settings):
    settings.VALIDATED_ERRORS_PATH = DEFAULT_PATH
    body = {
        "model": TINY,
        "samples_per_epoch": 1_281_167,
        "epochs": 10,
        "objective": "cost",
        "deadline_hours": 24,
        "spot": False,
        "max_nodes": 1,  # one node: the analytical source's error (several nodes: ddp-multinode's)
        "max_types": 1,
        "regions": ["us-east-1"],
        "global_batch_min": 256,
        "global_batch_max": 256,
    }
    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 202, resp.json()
    assert run_queued_plans() == [resp.json()["id"]]
    return user_api.get(resp["Location"]).json()


def test_the_api_states_p10_p50_p90_time_and_cost_of_every_ranked_plan(plan):
    bands = plan["bands"]
    assert len(bands) == len(plan["result"]["plans"]) > 0
    for b, row in zip(bands, plan["result"]["plans"], strict=True):
        assert b["rank"] == row["rank"] and b["label"] == row["label"]
        assert all(isinstance(b[k], float) for k in BAND), b
        # money is a decimal string with 4 places (srifty_web.money.money_tree)
        cost = [Decimal(b[f"cost_p{q}_usd"]) for q in (10, 50, 90)]
        assert all(c.as_tuple().exponent == -4 for c in cost), b
        assert cost[0] < cost[1] < cost[2]
        # both amounts rounded to 4 places: a relative tolerance, not exact
        assert float(cost[2]) == pytest.approx(float(row["hourly_usd"]) * b["time_p90_h"], rel=1e-3)


def test_an_analytical_rows_p90_exceeds_its_p50_by_the_validated_spread_in_the_json(plan):
    q = json.loads(DEFAULT_PATH.read_text())["analytical"]
    spread = math.exp(q["lopo_q90"] - q["lopo_q50"])
    for b in plan["bands"]:
        assert b["model_error"]["validated"] and b["model_error"]["source"] == "analytical"
        assert b["model_error"]["n"] == q["lopo_n"]
        assert b["iter_time_p90_s"] >= b["iter_time_p50_s"] * spread * (1 - 1e-9)
    assert f"n={q['lopo_n']}" in plan["assumptions"]["model_error"]["text"]
    assert "model error" in plan["assumptions"]["p90"]


def test_the_plan_list_states_the_best_plans_p10_p50_p90(plan, user_api):
    listed = user_api.get("/api/v1/plans/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    best = next(r for r in rows if r["id"] == plan["id"])["best"]
    assert best["time_p50_h"] == plan["bands"][0]["time_p50_h"]
    assert best["cost_p90_usd"] == plan["bands"][0]["cost_p90_usd"]

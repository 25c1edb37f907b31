"""Baselines: how they pick, how they are sized, and Srifty's gain over them."""

from __future__ import annotations

import pytest

from planner.baselines import (
    cheapest_per_gpu_hour,
    evaluate_baseline,
    evaluate_baselines,
    fastest_type,
    skypilot_choice,
)
from planner.offers import Candidate
from planner.solver import Estimate, PlanRequest, solve

SPEED = {"g4dn.xlarge": 90.0, "g5.xlarge": 170.0, "p3.8xlarge": 220.0, "p4d.24xlarge": 520.0}
GPUS = {"g4dn.xlarge": 1, "g5.xlarge": 1, "p3.8xlarge": 4, "p4d.24xlarge": 8}
MODEL = {"g4dn.xlarge": "T4", "g5.xlarge": "A10G", "p3.8xlarge": "V100", "p4d.24xlarge": "A100"}


def cand(itype, price, market="on-demand", region="us-east-1") -> Candidate:
    return Candidate(
        instance_type=itype,
        family=itype.split(".")[0],
        region=region,
        market=market,
        zone="use1-az1" if market == "spot" else None,
        price_per_hour=price,
        gpus_per_node=GPUS[itype],
        gpu_model=MODEL[itype],
        vcpus=8 * GPUS[itype],
        network_gbps=25.0,
        efa=False,
        interruption_bucket=1 if market == "spot" else 0,
    )


def perf(config, g):
    merged: dict[str, list] = {}
    for c, n in config:
        merged.setdefault(c.instance_type, [c, 0])[1] += n
    nodes = sum(n for _, n in merged.values())
    raw = sum(SPEED[t] * GPUS[t] * n for t, (_, n) in merged.items())
    eff = 1.0 / (1.0 + 0.05 * (nodes - 1))
    thr = raw * eff
    return Estimate(iter_time_s=g / thr, iter_time_p90_s=1.05 * g / thr, throughput_sps=thr)


CANDS = [
    cand("g4dn.xlarge", 0.526),
    cand("g4dn.xlarge", 0.16, "spot"),
    cand("g5.xlarge", 1.006),
    cand("p3.8xlarge", 12.24),
    cand("p3.8xlarge", 11.0, region="us-west-2"),
    cand("p4d.24xlarge", 32.77),
]


def test_cheapest_per_gpu_hour_picks_the_lowest_price_per_gpu():
    assert cheapest_per_gpu_hour(CANDS).price_per_hour == 0.16
    assert cheapest_per_gpu_hour([]) is None


def test_fastest_type_picks_the_fastest_node_at_its_cheapest_offer():
    req = PlanRequest(objective="cost", total_samples=1e7, deadline_hours=10)
    assert fastest_type(CANDS, req, perf).instance_type == "p4d.24xlarge"


def test_skypilot_choice_is_the_cheapest_per_hour_for_the_requested_gpu():
    assert skypilot_choice(CANDS, "V100", 4).region == "us-west-2"
    assert skypilot_choice(CANDS, "V100", 8) is None
    assert skypilot_choice(CANDS, "T4").market == "on-demand"
    assert skypilot_choice(CANDS, "T4", use_spot=True).market == "spot"


@pytest.mark.parametrize(
    "req",
    [
        PlanRequest(objective="cost", total_samples=5e7, deadline_hours=8, max_nodes=8, max_types=2),
        PlanRequest(objective="time", total_samples=5e7, budget_usd=200, max_nodes=8, max_types=2),
        PlanRequest(objective="throughput", total_samples=5e7, max_hourly_usd=40, max_nodes=8, max_types=2),
    ],
    ids=["cost", "time", "throughput"],
)
def test_srifty_is_never_worse_than_a_feasible_baseline_on_its_objective(req):
    res = solve(req, CANDS, perf)
    results = evaluate_baselines(req, CANDS, perf, res, requested_gpu="V100", requested_gpus_per_node=4)
    assert [b.name for b in results] == ["cheapest-gpu-hour", "fastest-type", "skypilot"]
    for b in results:
        if b.infeasible_reason:
            assert b.plan is None or b.plan.why.startswith("violates")
            continue
        gain = {"cost": b.cost_gain_pct, "time": b.time_gain_pct, "throughput": b.throughput_gain_pct}[
            req.objective
        ]
        assert gain >= -1e-6, b
        assert b.plan.total_usd == pytest.approx(b.plan.hourly_usd * b.plan.time_h)


def test_an_infeasible_baseline_reports_why():
    req = PlanRequest(objective="cost", total_samples=5e7, deadline_hours=3, max_nodes=4)
    res = solve(req, CANDS, perf)
    b = evaluate_baseline("slow", "g4dn only", CANDS[0], req, perf, res.best)
    assert b.plan is None and "fastest config needs" in b.infeasible_reason
    assert b.cost_gain_pct is None


def test_a_fixed_node_count_baseline_is_evaluated_as_given():
    req = PlanRequest(objective="cost", total_samples=5e7, deadline_hours=12, max_nodes=8)
    res = solve(req, CANDS, perf)
    (sky,) = [
        b
        for b in evaluate_baselines(req, CANDS, perf, res, requested_gpu="V100", skypilot_nodes=2)
        if b.name == "skypilot"
    ]
    assert sky.plan.nodes == 2 and sky.plan.groups[0].instance_type == "p3.8xlarge"
    assert sky.cost_gain_pct is not None and sky.cost_gain_pct >= 0

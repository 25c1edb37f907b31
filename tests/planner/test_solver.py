"""Solver: exactness against brute force, constraints, infeasibility explanations."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.offers import Candidate
from planner.solver import (
    OBJECTIVES,
    Estimate,
    Infeasible,
    PlanRequest,
    RequestError,
    batch_grid,
    evaluate_config,
    exhaustive_search,
    pareto_frontier,
    plan_for_config,
    solve,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """``bench/solver.py`` (analytical oracle, catalog loader, random problems) as a module."""
    name = "srifty_bench_solver"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "solver.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


# instance type -> (gpus/node, samples/s per GPU at saturation, vCPUs, network Gbps, EFA)
HW = {
    "g4dn.xlarge": (1, 90.0, 4, 5.0, False),
    "g4dn.12xlarge": (4, 90.0, 48, 50.0, True),
    "g5.xlarge": (1, 170.0, 4, 2.5, False),
    "g5.48xlarge": (8, 170.0, 192, 100.0, True),
    "p3.2xlarge": (1, 220.0, 8, 10.0, False),
    "p3.16xlarge": (8, 220.0, 64, 25.0, False),
    "p4d.24xlarge": (8, 520.0, 96, 400.0, True),
}
PRICE = {
    "g4dn.xlarge": 0.526,
    "g4dn.12xlarge": 3.912,
    "g5.xlarge": 1.006,
    "g5.48xlarge": 16.288,
    "p3.2xlarge": 3.06,
    "p3.16xlarge": 24.48,
    "p4d.24xlarge": 32.77,
}


def cand(
    itype: str,
    region: str = "us-east-1",
    market: str = "on-demand",
    price: float | None = None,
    bucket: int = 0,
    max_count: int | None = None,
) -> Candidate:
    gpus, _speed, vcpus, net, efa = HW[itype]
    p = PRICE[itype] if price is None else price
    if market == "spot" and price is None:
        p = round(p * 0.35, 4)
    return Candidate(
        instance_type=itype,
        family=itype.split(".")[0],
        region=region,
        market=market,
        zone=f"{region}-az1" if market == "spot" else None,
        price_per_hour=p,
        gpus_per_node=gpus,
        gpu_model=itype,
        vcpus=vcpus,
        network_gbps=net,
        efa=efa,
        interruption_bucket=bucket if market == "spot" else 0,
        max_count=max_count,
    )


def toy_perf(config, global_batch):
    """Ring all-reduce DDP model: batch split by speed, slowest link, latency grows with nodes."""
    merged: dict[str, list] = {}
    for c, n in config:
        merged.setdefault(c.instance_type, [c, 0])[1] += n
    groups = list(merged.values())
    gpus = sum(c.gpus_per_node * n for c, n in groups)
    if global_batch < gpus:
        return None
    nodes = sum(n for _, n in groups)
    speed = [HW[c.instance_type][1] * c.gpus_per_node for c, _ in groups]
    total = sum(s * n for s, (_, n) in zip(speed, groups, strict=True))
    share = [global_batch * s / total for s in speed]  # per node
    compute = max(
        (b / c.gpus_per_node + 8.0) / HW[c.instance_type][1] for b, (c, _) in zip(share, groups, strict=True)
    )
    comm = 0.0
    if nodes > 1:
        bw = min(c.network_gbps for c, _ in groups)
        comm = 2 * (nodes - 1) / nodes * 0.8 / bw + 0.004 * nodes
    it = compute + max(0.0, comm - 0.5 * compute) + 0.002
    return Estimate(
        iter_time_s=it,
        iter_time_p90_s=it * 1.05,
        throughput_sps=global_batch / it,
        bottleneck="network" if comm > compute else "compute",
        per_node_batch=tuple(
            int(round(share[[g[0].instance_type for g in groups].index(c.instance_type)])) for c, _ in config
        ),
    )


def objective_value(plan, objective):
    return {"cost": plan.total_usd, "time": plan.time_h, "throughput": -plan.effective_throughput_sps}[
        objective
    ]


def tiny_instance(seed: int, objective: str) -> tuple[PlanRequest, list[Candidate]]:
    rng = random.Random(seed)
    regions = rng.sample(["us-east-1", "eu-west-1"], rng.randint(1, 2))
    types = rng.sample(sorted(HW), rng.randint(2, 3))
    cands = []
    for r in regions:
        for t in types:
            for market in ("on-demand", "spot"):
                if rng.random() < 0.6:
                    cands.append(
                        cand(
                            t,
                            r,
                            market,
                            price=round(PRICE[t] * rng.uniform(0.3, 1.2), 4),
                            bucket=rng.randint(0, 4),
                            max_count=rng.choice([None, None, None, 2]),
                        )
                    )
    if len(cands) < 2:
        cands.append(cand(types[0], regions[0]))
    cands = cands[:6]
    base = PlanRequest(
        objective="cost",
        total_samples=rng.choice([3e6, 3e7]),
        deadline_hours=1e6,
        max_nodes=rng.randint(2, 5),
        max_types=rng.choice([1, 2, 3]),
        global_batch_min=rng.choice([16, 64]),
        global_batch_max=rng.choice([64, 256]),
        startup_overhead_h=rng.choice([0.0, 0.1]),
        checkpoint_interval_h=0.5,
        restart_overhead_h=0.1,
    )
    ref = [m for c in cands for n in (1, base.max_nodes) if (m := evaluate_config(((c, n),), base, toy_perf))]
    scale = lambda xs: sorted(xs)[rng.randrange(len(xs))] * rng.uniform(0.8, 1.3)  # noqa: E731
    kw: dict = {"objective": objective, "deadline_hours": None}
    if objective == "cost" or rng.random() < 0.3:
        kw["deadline_hours"] = max(scale([m.time_h for m in ref]), base.startup_overhead_h + 0.01)
    if objective == "time" or rng.random() < 0.3:
        kw["budget_usd"] = scale([m.total_usd for m in ref])
    if objective == "throughput" or rng.random() < 0.3:
        kw["max_hourly_usd"] = scale([m.hourly_usd for m in ref])
    if rng.random() < 0.4:
        kw["quotas_on_demand"] = {"P": rng.choice([64, 96, 200]), "G": rng.choice([8, 48, 200])}
        kw["quotas_spot"] = {"G": rng.choice([4, 48])}
    return replace(base, **kw), cands


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("seed", range(8))
def test_solver_objective_equals_brute_force_on_tiny_seeded_instances(objective, seed):
    req, cands = tiny_instance(seed, objective)
    ref = exhaustive_search(req, cands, toy_perf)
    if ref is None:
        with pytest.raises(Infeasible):
            solve(req, cands, toy_perf)
        return
    res = solve(req, cands, toy_perf)
    assert objective_value(res.best, objective) == pytest.approx(ref[0], rel=1e-9, abs=1e-12)
    assert res.stats.bound_violations == 0


def test_solver_matches_brute_force_on_catalog_based_random_problems(bench):
    rng = random.Random(7)
    catalog = bench.load_catalog(regions=["us-east-1", "us-west-2", "eu-west-1"])
    for _ in range(6):
        req, cands, oracle = bench.random_problem(rng, catalog)
        ref = exhaustive_search(req, cands, oracle)
        try:
            got = objective_value(solve(req, cands, oracle).best, req.objective)
        except Infeasible:
            got = None
        if ref is None:
            assert got is None
        else:
            assert got == pytest.approx(ref[0], rel=1e-9)


def test_quota_limits_are_respected_and_force_a_mix():
    # one p4d (96 vCPU) fits the P quota; the deadline needs more than one node's throughput
    cands = [cand("p4d.24xlarge"), cand("g5.48xlarge")]
    one = evaluate_config(
        ((cands[0], 1),),
        PlanRequest(
            objective="cost",
            total_samples=2e7,
            deadline_hours=1e6,
            global_batch_min=512,
            global_batch_max=512,
        ),
        toy_perf,
    )
    req = PlanRequest(
        objective="cost",
        total_samples=2e7,
        deadline_hours=one.time_h * 0.85,
        max_nodes=4,
        max_types=2,
        quotas_on_demand={"P": 96, "G": 768},
        global_batch_min=512,
        global_batch_max=512,
    )
    res = solve(req, cands, toy_perf)
    for plan in res.plans:
        p_vcpu = sum(HW[g.instance_type][2] * g.count for g in plan.groups if g.instance_type.startswith("p"))
        g_vcpu = sum(HW[g.instance_type][2] * g.count for g in plan.groups if g.instance_type.startswith("g"))
        assert p_vcpu <= 96 and g_vcpu <= 768
    assert {g.instance_type for g in res.best.groups} == {"p4d.24xlarge", "g5.48xlarge"}
    ref = exhaustive_search(req, cands, toy_perf)
    assert res.best.total_usd == pytest.approx(ref[0], rel=1e-9)


def test_spot_and_on_demand_quotas_are_separate():
    cands = [cand("p3.16xlarge"), cand("p3.16xlarge", market="spot", bucket=0)]
    req = PlanRequest(
        objective="throughput",
        total_samples=1e7,
        max_hourly_usd=1e4,
        max_nodes=8,
        max_types=2,
        quotas_on_demand={"P": 64},
        quotas_spot={"P": 128},
        global_batch_min=1024,
        global_batch_max=1024,
    )
    best = solve(req, cands, toy_perf).best
    counts = {g.market: g.count for g in best.groups}
    assert counts.get("on-demand", 0) <= 1 and counts.get("spot", 0) <= 2


def test_every_plan_lives_in_a_single_region():
    cands = [
        cand("g5.xlarge", "us-east-1", price=0.5),
        cand("p3.2xlarge", "eu-west-1", price=0.9),
        cand("g4dn.xlarge", "eu-west-1", price=0.2),
        cand("p3.2xlarge", "us-east-1", price=3.0),
    ]
    req = PlanRequest(
        objective="throughput",
        total_samples=1e7,
        max_hourly_usd=4.0,
        max_nodes=6,
        max_types=3,
        global_batch_min=128,
        global_batch_max=128,
    )
    res = solve(req, cands, toy_perf)
    for plan in res.plans:
        assert len({plan.region}) == 1
        assert all(
            any(c.instance_type == g.instance_type and c.region == plan.region for c in cands)
            for g in plan.groups
        )
    assert res.best.effective_throughput_sps == pytest.approx(
        -exhaustive_search(req, cands, toy_perf)[0], rel=1e-9
    )


@pytest.mark.parametrize("max_types", [1, 2, 3])
def test_max_types_is_respected(max_types):
    cands = [cand(t) for t in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge", "g4dn.12xlarge")]
    req = PlanRequest(
        objective="throughput",
        total_samples=1e7,
        max_hourly_usd=9.0,
        max_nodes=6,
        max_types=max_types,
        global_batch_min=256,
        global_batch_max=256,
    )
    res = solve(req, cands, toy_perf)
    assert all(len(p.groups) <= max_types for p in res.plans)
    assert all(pt.n_types <= max_types for pt in res.points)


def test_infeasible_deadline_names_the_fastest_time():
    req = PlanRequest(
        objective="cost",
        total_samples=1e9,
        deadline_hours=1.0,
        max_nodes=2,
        global_batch_min=64,
        global_batch_max=64,
    )
    with pytest.raises(Infeasible) as exc:
        solve(req, [cand("g4dn.xlarge")], toy_perf)
    assert exc.value.constraint == "deadline_hours"
    msg = str(exc.value)
    assert "fastest config needs" in msg and "> deadline 1 h" in msg


def test_infeasible_budget_names_the_cheapest_plan():
    req = PlanRequest(
        objective="time",
        total_samples=1e8,
        budget_usd=1.0,
        max_nodes=4,
        global_batch_min=64,
        global_batch_max=64,
    )
    with pytest.raises(Infeasible) as exc:
        solve(req, [cand("g4dn.xlarge"), cand("p3.2xlarge")], toy_perf)
    assert exc.value.constraint == "budget_usd"
    assert str(exc.value).startswith("budget $1.00 < cheapest $")


def test_infeasible_quota_names_how_many_nodes_it_allows():
    c = cand("p4d.24xlarge")
    fast = evaluate_config(
        ((c, 4),),
        PlanRequest(
            objective="cost",
            total_samples=1e9,
            deadline_hours=1e6,
            global_batch_min=2048,
            global_batch_max=2048,
        ),
        toy_perf,
    )
    req = PlanRequest(
        objective="cost",
        total_samples=1e9,
        deadline_hours=fast.time_h * 1.01,
        max_nodes=4,
        quotas_on_demand={"P": 96},
        global_batch_min=2048,
        global_batch_max=2048,
    )
    with pytest.raises(Infeasible) as exc:
        solve(req, [c], toy_perf)
    assert exc.value.constraint == "quotas"
    assert "quota P=96 vCPU (on-demand) allows at most 1 p4d.24xlarge" in str(exc.value)


def test_infeasible_hourly_cap_names_the_cheapest_rate():
    req = PlanRequest(
        objective="throughput",
        total_samples=1e7,
        max_hourly_usd=0.1,
        global_batch_min=64,
        global_batch_max=64,
    )
    with pytest.raises(Infeasible) as exc:
        solve(req, [cand("g4dn.xlarge"), cand("g5.xlarge")], toy_perf)
    assert exc.value.constraint == "max_hourly_usd"
    assert "< cheapest" in str(exc.value) and "$0.53/h" in str(exc.value)


def test_zero_quota_everywhere_is_reported_as_quota_problem():
    req = PlanRequest(
        objective="cost",
        total_samples=1e7,
        deadline_hours=10,
        quotas_on_demand={"G": 0},
        global_batch_min=64,
        global_batch_max=64,
    )
    with pytest.raises(Infeasible) as exc:
        solve(req, [cand("g5.xlarge")], toy_perf)
    assert exc.value.constraint == "quotas"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"objective": "cost", "deadline_hours": 0}, "deadline_hours"),
        ({"objective": "cost", "deadline_hours": -3}, "deadline_hours"),
        (
            {"objective": "cost", "deadline_hours": 5, "global_batch_min": 512, "global_batch_max": 256},
            "global_batch_min",
        ),
        ({"objective": "cost"}, "deadline_hours"),
        ({"objective": "time"}, "budget_usd"),
        ({"objective": "throughput"}, "max_hourly_usd"),
        ({"objective": "speed", "deadline_hours": 5}, "objective"),
        ({"objective": "time", "budget_usd": 10, "max_types": 4}, "max_types"),
        ({"objective": "time", "budget_usd": 10, "max_nodes": 0}, "max_nodes"),
        ({"objective": "time", "budget_usd": -1}, "budget_usd"),
        ({"objective": "cost", "deadline_hours": 5, "quotas_spot": {"P": -8}}, "quotas_spot"),
        ({"objective": "time", "budget_usd": 10, "max_miss_risk": 0.1}, "max_miss_risk"),
    ],
)
def test_contradictory_requests_raise_value_error_naming_the_field(kwargs, field):
    req = PlanRequest(total_samples=1e6, **kwargs)
    with pytest.raises(ValueError) as exc:
        solve(req, [cand("g5.xlarge")], toy_perf)
    assert isinstance(exc.value, RequestError)
    assert exc.value.field == field
    assert field in str(exc.value)


def test_result_has_ranked_plans_points_pareto_and_stats():
    cands = [cand(t) for t in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge")] + [
        cand("g5.xlarge", market="spot", bucket=1)
    ]
    req = PlanRequest(
        objective="cost",
        total_samples=5e7,
        deadline_hours=30,
        max_nodes=6,
        max_types=2,
        global_batch_min=64,
        global_batch_max=256,
        top_k=3,
    )
    res = solve(req, cands, toy_perf)
    assert 1 <= len(res.plans) <= 3
    assert [p.rank for p in res.plans] == list(range(1, len(res.plans) + 1))
    costs = [p.total_usd for p in res.plans]
    assert costs == sorted(costs)
    assert len({tuple(sorted((g.instance_type, g.market) for g in p.groups)) for p in res.plans}) == len(
        res.plans
    )
    assert res.best.why.startswith("cheapest plan meeting the 30 h deadline")
    assert res.best.time_h <= 30 and res.best.time_p90_h >= res.best.base_time_h
    for plan in res.plans:
        assert sum(sum(g.batch_per_node) for g in plan.groups) == plan.global_batch
        assert plan.global_batch in batch_grid(req)
    assert res.pareto and all(p in res.points for p in res.pareto)
    for p in res.pareto:  # nothing strictly better on both axes
        assert not any(q.total_usd < p.total_usd and q.time_h < p.time_h for q in res.points)
    assert res.stats.candidates_in == 4 and res.stats.candidates_kept <= 4
    assert res.stats.milp_status.startswith("Optimal") and res.stats.milp_columns >= len(res.plans)
    assert res.solve_time_s > 0


def test_pareto_frontier_drops_dominated_points():
    res = solve(
        PlanRequest(
            objective="cost",
            total_samples=1e7,
            deadline_hours=100,
            max_nodes=4,
            global_batch_min=64,
            global_batch_max=64,
        ),
        [cand("g5.xlarge"), cand("p3.2xlarge")],
        toy_perf,
    )
    front = pareto_frontier(res.points)
    assert [p.total_usd for p in front] == sorted(p.total_usd for p in front)
    assert [p.time_h for p in front] == sorted((p.time_h for p in front), reverse=True)


def test_dominated_pruning_keeps_the_optimum():
    # g5.xlarge (given a 5 Gbps link here) spot, cheaper than g4dn.xlarge spot, is faster at every count
    fast_link = {"network_gbps": 5.0}
    cands = [
        replace(cand("g5.xlarge", market="spot", price=0.3, bucket=1), **fast_link),
        cand("g4dn.xlarge", market="spot", price=0.35, bucket=1),
        cand("p3.2xlarge"),
        replace(cand("g5.xlarge"), **fast_link),
    ]
    for objective in OBJECTIVES:
        req, _ = tiny_instance(3, objective)
        req = replace(
            req,
            max_types=2,
            max_nodes=4,
            global_batch_min=64,
            global_batch_max=64,
            quotas_spot={},
            quotas_on_demand={},
        )
        ref = exhaustive_search(req, cands, toy_perf)
        if ref is None:
            continue
        res = solve(req, cands, toy_perf)
        assert res.stats.dominated >= 1
        assert objective_value(res.best, objective) == pytest.approx(ref[0], rel=1e-9)


def test_a_super_additive_oracle_is_detected_and_the_answer_stays_exact():
    def weird(config, g):  # mixing magically doubles throughput: breaks the separability bound
        est = toy_perf(config, g)
        if est is None or len({c.instance_type for c, _ in config}) < 2:
            return est
        return replace(est, throughput_sps=est.throughput_sps * 3, iter_time_s=est.iter_time_s / 3)

    cands = [cand("g4dn.xlarge"), cand("g5.xlarge"), cand("p3.2xlarge")]
    req = PlanRequest(
        objective="throughput",
        total_samples=1e7,
        max_hourly_usd=5.0,
        max_nodes=4,
        max_types=2,
        global_batch_min=64,
        global_batch_max=64,
    )
    res = solve(req, cands, weird)
    assert res.stats.bound_violations > 0
    assert res.best.effective_throughput_sps == pytest.approx(
        -exhaustive_search(req, cands, weird)[0], rel=1e-9
    )


def test_deadline_miss_risk_constraint_excludes_risky_spot_plans():
    spot = cand("g5.xlarge", market="spot", price=0.2, bucket=4)
    od = cand("g5.xlarge")
    base = PlanRequest(
        objective="cost",
        total_samples=3e7,
        deadline_hours=1e6,
        global_batch_min=64,
        global_batch_max=64,
        checkpoint_interval_h=4.0,
        restart_overhead_h=1.0,
        max_nodes=3,
    )
    t = evaluate_config(((od, 3),), base, toy_perf).time_h
    loose = replace(base, deadline_hours=t * 1.02)
    assert any(g.market == "spot" for g in solve(loose, [spot, od], toy_perf).best.groups)
    strict = replace(loose, max_miss_risk=0.01)
    best = solve(strict, [spot, od], toy_perf).best
    assert best.deadline_miss_risk <= 0.01
    ref = exhaustive_search(strict, [spot, od], toy_perf)
    assert best.total_usd == pytest.approx(ref[0], rel=1e-9)


def test_tie_tolerance_prefers_the_cheaper_of_nearly_equal_plans():
    fast = cand("p3.2xlarge")
    slow = replace(cand("p3.2xlarge", price=1.0), instance_type="slow.2xlarge")  # a third of the price

    def perf(config, g):  # "slow" is 0.8 % slower: outside the 0.5 % dominance band, inside 1 %
        est = toy_perf(tuple((replace(c, instance_type="p3.2xlarge"), n) for c, n in config), g)
        if est is None or not any(c.instance_type == "slow.2xlarge" for c, _ in config):
            return est
        return replace(est, iter_time_s=est.iter_time_s * 1.008, throughput_sps=est.throughput_sps / 1.008)

    req = PlanRequest(
        objective="time",
        total_samples=1e7,
        budget_usd=1e4,
        max_nodes=2,
        global_batch_min=64,
        global_batch_max=64,
    )
    strict = solve(req, [fast, slow], perf).best
    assert strict.groups[0].instance_type == "p3.2xlarge"
    tied = solve(replace(req, tie_tolerance=0.01), [fast, slow], perf).best
    assert tied.groups[0].instance_type == "slow.2xlarge" and tied.total_usd < strict.total_usd
    assert tied.why.startswith("within 1% of the fastest plan") and "cheaper" in tied.why


def test_evaluate_config_and_plan_for_config_report_violations():
    c = cand("g5.xlarge")
    req = PlanRequest(
        objective="cost", total_samples=1e8, deadline_hours=1.0, global_batch_min=64, global_batch_max=64
    )
    m = evaluate_config(((c, 2),), req, toy_perf)
    assert not m.feasible and "deadline_hours" in m.violated
    assert m.total_usd == pytest.approx(m.hourly_usd * m.time_h)
    plan = plan_for_config(((c, 2),), req, toy_perf)
    assert plan.nodes == 2 and plan.why.startswith("violates")
    with pytest.raises(ValueError):
        evaluate_config(((c, 1), (cand("g5.xlarge", "eu-west-1"), 1)), req, toy_perf)


def test_unsupported_candidates_are_dropped_and_reported():
    def only_g5(config, g):
        return None if any(c.instance_type != "g5.xlarge" for c, _ in config) else toy_perf(config, g)

    req = PlanRequest(
        objective="cost", total_samples=1e6, deadline_hours=100, global_batch_min=64, global_batch_max=64
    )
    res = solve(req, [cand("g5.xlarge"), cand("p3.2xlarge")], only_g5)
    assert res.stats.candidates_supported == 1 and res.best.groups[0].instance_type == "g5.xlarge"
    with pytest.raises(Infeasible) as exc:
        solve(req, [cand("p3.2xlarge")], only_g5)
    assert exc.value.constraint == "candidates"


def test_cost_equals_rate_times_time_and_startup_overhead_counts():
    c = cand("p3.2xlarge")
    req = PlanRequest(
        objective="cost",
        total_samples=1e7,
        deadline_hours=100,
        global_batch_min=64,
        global_batch_max=64,
        startup_overhead_h=0.25,
    )
    best = solve(req, [c], toy_perf).best
    assert best.time_h == pytest.approx(0.25 + best.base_time_h)
    assert best.total_usd == pytest.approx(best.hourly_usd * best.time_h)
    assert best.base_time_h == pytest.approx(1e7 / best.throughput_sps / 3600)
    assert math.isclose(best.effective_throughput_sps, best.throughput_sps)


def test_per_node_batches_follow_node_speed_and_sum_to_the_global_batch():
    fast, slow = cand("p3.2xlarge"), cand("g4dn.xlarge")
    req = PlanRequest(
        objective="cost", total_samples=1e6, deadline_hours=100, global_batch_min=256, global_batch_max=256
    )
    plan = plan_for_config(((fast, 1), (slow, 2)), req, toy_perf)  # not in sorted type order
    by_type = {g.instance_type: g.batch_per_node for g in plan.groups}
    assert len(by_type["g4dn.xlarge"]) == 2 and len(by_type["p3.2xlarge"]) == 1
    assert by_type["p3.2xlarge"][0] > max(by_type["g4dn.xlarge"])
    assert sum(sum(b) for b in by_type.values()) == 256


@pytest.mark.parametrize("market", ["on-demand", "spot"])
def test_of_two_regions_equally_fast_the_cheaper_offer_is_kept_whatever_the_catalog_order(market):
    # same type, count and (for spot) interruption bucket: the same time, so the same objective
    # value; the dearer region comes first in the catalog and used to win the (value, nodes) tie
    dear = cand("p3.2xlarge", "ap-northeast-1", market, price=3.0, bucket=2)
    cheap = cand("p3.2xlarge", "us-east-1", market, price=1.0, bucket=2)
    req = PlanRequest(
        objective="time",
        total_samples=1e7,
        budget_usd=1e4,
        max_nodes=2,
        global_batch_min=64,
        global_batch_max=64,
    )
    plan = solve(req, [dear, cheap], toy_perf).plans[0]
    assert (plan.region, plan.groups[0].price_per_hour) == ("us-east-1", 1.0)


def test_a_spot_offer_within_half_a_percent_of_the_time_and_cheaper_is_kept_over_the_fastest_one():
    # two zones of one type on spot: the riskier one is slower by its interruptions (well under
    # 0.5 %) and a third of the price, so it dominates the other offer of the same type set
    safe = cand("p3.2xlarge", "ap-northeast-1", "spot", price=3.0, bucket=0)
    risky = cand("p3.2xlarge", "us-east-1", "spot", price=1.0, bucket=4)
    req = PlanRequest(
        objective="time",
        total_samples=1e7,
        budget_usd=1e4,
        max_nodes=2,
        global_batch_min=64,
        global_batch_max=64,
    )
    plan = solve(req, [safe, risky], toy_perf).plans[0]
    base = solve(req, [safe], toy_perf).plans[0]
    assert base.time_h < plan.time_h < base.time_h * 1.005
    assert plan.region == "us-east-1" and plan.total_usd < base.total_usd


def _dominance(offers, *, exact_hazard=False):
    from planner.solver.evaluate import hazard_of
    from planner.solver.search import RegionDominance

    regions = sorted({c.region for c in offers})
    usable = {r: [c for c in offers if c.region == r] for r in regions}
    maxc = {r: {c: c.max_count or 8 for c in usable[r]} for r in regions}
    lam = {r: {c: hazard_of(((c, 1),)) for c in usable[r]} for r in regions}
    return RegionDominance(regions, usable, maxc, lam, exact_hazard=exact_hazard)


def test_a_subset_another_region_offers_cheaper_in_every_member_is_dominated():
    import numpy as np

    a = [cand("p3.2xlarge", "us-east-1", price=3.0), cand("g5.xlarge", "us-east-1", price=1.0)]
    b = [cand("p3.2xlarge", "eu-west-1", price=3.5), cand("g5.xlarge", "eu-west-1", price=1.0)]
    c = [cand("p3.2xlarge", "ap-south-1", price=2.0), cand("g5.xlarge", "ap-south-1", price=2.0)]
    dom = _dominance(a + b + c)
    pair = np.array([[0, 1]])
    assert dom.dominated("eu-west-1", pair).tolist() == [True]  # us-east-1: as cheap, one cheaper
    assert dom.dominated("us-east-1", pair).tolist() == [False]
    assert dom.dominated("ap-south-1", pair).tolist() == [False]  # cheaper in one, dearer in the other


def test_of_exact_twin_subsets_only_the_region_first_by_name_is_kept():
    import numpy as np

    twins = [cand(t, r, price=2.0) for r in ("us-east-1", "eu-west-1") for t in ("p3.2xlarge", "g5.xlarge")]
    dom = _dominance(twins)
    pair = np.array([[0, 1]])
    assert dom.dominated("us-east-1", pair).tolist() == [True]
    assert dom.dominated("eu-west-1", pair).tolist() == [False]


def test_a_safer_spot_offer_dominates_only_without_a_miss_risk_cap():
    import numpy as np

    risky = [cand("p3.2xlarge", "us-east-1", "spot", 1.0, 4), cand("g5.xlarge", "us-east-1", price=1.0)]
    safe = [cand("p3.2xlarge", "us-west-2", "spot", 1.0, 1), cand("g5.xlarge", "us-west-2", price=1.0)]
    pair = np.array([[0, 1]])
    assert _dominance(risky + safe).dominated("us-east-1", pair).tolist() == [True]
    assert _dominance(risky + safe, exact_hazard=True).dominated("us-east-1", pair).tolist() == [False]


def test_a_region_with_less_availability_or_two_zones_of_a_type_is_not_dominated():
    import numpy as np

    few = [cand("p3.2xlarge", "us-east-1", price=3.0, max_count=2), cand("g5.xlarge", "us-east-1", price=1.0)]
    many = [
        cand("p3.2xlarge", "eu-west-1", price=3.5),
        cand("g5.xlarge", "eu-west-1", price=1.0),
    ]
    assert _dominance(few + many).dominated("eu-west-1", np.array([[0, 1]])).tolist() == [False]
    zones = [
        cand("p3.2xlarge", "eu-west-1", "spot", 1.0, 2),
        replace(cand("p3.2xlarge", "eu-west-1", "spot", 1.5, 2), zone="eu-west-1-az2"),
    ]
    cheap = [cand("p3.2xlarge", "us-east-1", "spot", 0.5, 0)]
    assert _dominance(zones + cheap).dominated("eu-west-1", np.array([[0, 1]])).tolist() == [False]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_mixes_in_a_dearer_region_are_skipped_and_the_plans_stay_exact(objective, monkeypatch):
    # the same three types in four regions at varied prices and spot buckets: mixes of a region
    # that another offers as cheap and as safe are never bounded, the answer is brute force's
    rng = random.Random(11)
    cands = []
    for r in ("ap-south-1", "eu-west-1", "us-east-1", "us-west-2"):
        for t in ("g5.xlarge", "p3.2xlarge", "g4dn.xlarge"):
            for market in ("on-demand", "spot"):
                price = round(PRICE[t] * rng.uniform(0.5, 1.0) * (0.4 if market == "spot" else 1.0), 2)
                # at most 2 nodes of a type: the fast plans are mixes
                cands.append(cand(t, r, market, price=price, bucket=rng.randint(0, 3), max_count=2))
    kw = {
        "cost": {"deadline_hours": 6.0},
        "time": {"budget_usd": 40.0},
        "throughput": {"max_hourly_usd": 5.0},
    }
    req = PlanRequest(
        objective=objective,
        total_samples=1e7,
        max_nodes=4,
        max_types=2,
        global_batch_min=64,
        global_batch_max=256,
        tie_tolerance=0.0,
        **kw[objective],
    )
    ref = exhaustive_search(req, cands, toy_perf)
    assert ref is not None
    from planner.solver import search

    real = search.RegionDominance.dominated
    skipped = []

    def spy(self, region, combos):
        out = real(self, region, combos)
        skipped.append(int(out.sum()))
        return out

    monkeypatch.setattr(search.RegionDominance, "dominated", spy)
    res = solve(req, cands, toy_perf)
    assert sum(skipped) > 0
    # (plan #1 may be a cheaper option within 0.5 % of the optimum's time: the ranking's rule)
    best = min(objective_value(p, objective) for p in res.plans)
    assert best == pytest.approx(ref[0], rel=1e-9, abs=1e-12)
    # every ranked option is the one found without the region dominance
    monkeypatch.setattr(search.RegionDominance, "dominated", lambda self, region, combos: combos[:, 0] < 0)
    plain = solve(req, cands, toy_perf)
    assert [(p.region, p.label, p.total_usd, p.time_h) for p in res.plans] == [
        (p.region, p.label, p.total_usd, p.time_h) for p in plain.plans
    ]
    assert any(len(p.groups) > 1 for p in res.plans)


def test_count_vectors_within_the_node_limit_are_the_masked_grid_in_its_order():
    import numpy as np

    from planner.solver.candidates import _within_total

    rng = np.random.default_rng(3)
    for _ in range(300):
        N = int(rng.integers(2, 40))
        k = int(rng.integers(2, 4))
        arrs = [
            np.sort(rng.choice(np.arange(1, N + 1), size=int(rng.integers(1, N + 1)), replace=False))
            for _ in range(k)
        ]
        grid = [g.ravel() for g in np.meshgrid(*arrs, indexing="ij")]
        keep = sum(grid) <= N
        got = _within_total(arrs[0], arrs[1:], N)
        assert [x.tolist() for x in got] == [x[keep].tolist() for x in grid]


def test_an_offers_front_keeps_what_the_scan_of_every_column_kept():
    """search.Front answers "is this point covered" and drops what a new column covers by
    bisection; on random streams with ties it keeps the same columns in the same order as
    testing every column (the rule it replaced)."""
    import random

    from planner.solver.evaluate import Col
    from planner.solver.search import Front, covers

    rng = random.Random(20)
    for _ in range(300):
        front, naive = Front(), []
        for n in range(1, 60):
            t = float(rng.choice([1, 2, 3, 4, 5, 6, rng.random() * 6]))
            c = float(rng.choice([1, 2, 3, 4, 5, rng.random() * 5]))
            v = float(rng.choice([c, t, 1.0]))
            point = (t, c, v, n)
            naive_covered = any(covers(o, *point) for o in naive)
            assert front.covered(*point) == naive_covered
            if naive_covered:
                continue
            col = Col("r", (), 1.0, 1, 1.0, 0.0, 1.0, t, c, 1.0, n, v, True)
            naive[:] = [o for o in naive if not covers(col, o.time, o.cost, o.value, o.nodes)]
            naive.append(col)
            front.add(col)
            assert front.cols == naive

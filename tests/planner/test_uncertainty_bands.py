"""Issue 34, item 4: every prediction's p10/p50/p90 carries its source's validated model error
(planner.validated), and the deadline-miss risk is checked on that p90."""

from __future__ import annotations

import json
import math

import pytest

from planner.offers import Candidate
from planner.solver import Estimate, Infeasible, PlanRequest, solve
from planner.spot import SpotParams, completion_quantile
from planner.validated import (
    DEFAULT_PATH,
    ModelError,
    iteration_band,
    job_quantile,
    load_model_errors,
    miss_with_error,
    row_model_error,
)

ITER_S = 0.5  # the simulator's p50 iteration (s) of the toy oracle; its p90 is 5 % longer
BATCH = 256


def _cand(itype: str, price: float) -> Candidate:
    return Candidate(
        instance_type=itype,
        family=itype.split(".")[0],
        region="us-east-1",
        market="on-demand",
        zone=None,
        price_per_hour=price,
        gpus_per_node=1,
        gpu_model=itype,
        vcpus=8,
        network_gbps=10.0,
        efa=False,
        interruption_bucket=0,
    )


def _perf(errors: dict[str, ModelError | None]):
    """One node of each type runs an iteration in ITER_S; each type's estimate carries ``errors[type]``."""

    def perf(config, global_batch):
        if sum(n for _, n in config) != 1:
            return None
        c = config[0][0]
        return Estimate(ITER_S, ITER_S * 1.05, global_batch / ITER_S, model_error=errors[c.instance_type])

    return perf


def _request(**kw) -> PlanRequest:
    base = {
        "objective": "cost" if "deadline_hours" in kw else "time",
        "budget_usd": None if "deadline_hours" in kw else 1e9,
        "total_samples": BATCH / ITER_S * 3600 * 10,  # 10 h of computing
        "max_nodes": 1,
        "global_batch_min": BATCH,
        "global_batch_max": BATCH,
    }
    return PlanRequest(**{**base, **kw})


def test_an_analytical_rows_p90_exceeds_its_p50_by_its_sources_validated_spread():
    shipped = json.loads(DEFAULT_PATH.read_text())["analytical"]  # what the bench wrote
    err = load_model_errors()["analytical"]
    assert (err.q50, err.q90) == (shipped["lopo_q50"], shipped["lopo_q90"])
    req = _request()
    plan = solve(req, [_cand("p3.2xlarge", 3.06)], _perf({"p3.2xlarge": err})).best
    spread = math.exp(shipped["lopo_q90"] - shipped["lopo_q50"])
    assert plan.model_error_source == "analytical"
    assert plan.iter_time_p90_s / plan.iter_time_p50_s == pytest.approx(spread * 1.05)
    assert plan.iter_time_p50_s == pytest.approx(ITER_S * math.exp(shipped["lopo_q50"]))
    # on demand the run's jitter averages out: the job's band is the model error's
    o = req.startup_overhead_h
    assert (plan.time_p90_h - o) / (plan.time_p50_h - o) == pytest.approx(spread, rel=1e-3)
    assert (plan.time_p10_h - o) / (plan.time_p50_h - o) == pytest.approx(
        math.exp(shipped["lopo_q10"] - shipped["lopo_q50"]), rel=1e-3
    )
    assert plan.cost_p90_usd == pytest.approx(plan.hourly_usd * plan.time_p90_h)
    assert plan.cost_p10_usd < plan.cost_p50_usd < plan.cost_p90_usd


def test_a_source_without_validated_quantiles_keeps_the_simulators_spread_alone():
    plan = solve(_request(), [_cand("p3.2xlarge", 3.06)], _perf({"p3.2xlarge": None})).best
    assert plan.model_error_source is None
    assert plan.iter_time_p50_s == ITER_S and plan.iter_time_p90_s == pytest.approx(ITER_S * 1.05)
    assert plan.time_p50_h == pytest.approx(plan.time_h, rel=1e-6)


WIDE = ModelError("analytical", -0.2, 0.0, 0.4, 50, "test")


def test_a_plan_whose_p50_meets_the_deadline_but_whose_p90_does_not_is_infeasible():
    req = _request()
    deadline = req.startup_overhead_h + 10 * 1.2  # p50 (10 h) and the expected time meet it, p90 (14.9 h) not
    cands = [_cand("p3.2xlarge", 3.06)]
    risky = _request(deadline_hours=deadline, max_miss_risk=0.1)
    with pytest.raises(Infeasible) as exc:
        solve(risky, cands, _perf({"p3.2xlarge": WIDE}))
    assert exc.value.constraint == "max_miss_risk"
    # the same plan without the model error meets it: the simulator's jitter alone is tiny
    plan = solve(risky, cands, _perf({"p3.2xlarge": None})).best
    assert plan.deadline_miss_risk is not None and plan.deadline_miss_risk < 0.1
    # without a risk cap it is a plan, whose p90 and risk say so
    shown = solve(_request(deadline_hours=deadline), cands, _perf({"p3.2xlarge": WIDE})).best
    assert shown.time_p50_h <= deadline < shown.time_p90_h
    assert shown.deadline_miss_risk > 0.1


def test_the_deadline_risk_ranks_a_cheaper_type_with_a_wide_model_error_below_a_validated_narrow_one():
    narrow = ModelError("measured", -0.02, 0.0, 0.05, 40, "test")
    cands = [_cand("g4dn.xlarge", 1.0), _cand("p3.2xlarge", 3.06)]
    perf = _perf({"g4dn.xlarge": WIDE, "p3.2xlarge": narrow})
    req = _request(deadline_hours=_request().startup_overhead_h + 12)
    assert solve(req, cands, perf).best.groups[0].instance_type == "g4dn.xlarge"
    safe = solve(_request(deadline_hours=req.deadline_hours, max_miss_risk=0.1), cands, perf).best
    assert safe.groups[0].instance_type == "p3.2xlarge"


@pytest.mark.parametrize("hazard", [0.0, 0.05])
def test_the_miss_risk_is_ten_percent_exactly_where_the_p90_meets_the_deadline(hazard):
    params = SpotParams()
    p90 = job_quantile(0.9, 10.0, hazard, params, 0.05, WIDE)
    assert miss_with_error(p90, 10.0, hazard, params, 0.05, WIDE) == pytest.approx(0.1, abs=1e-6)
    assert miss_with_error(p90 * 0.9, 10.0, hazard, params, 0.05, WIDE) > 0.1
    assert p90 == pytest.approx(
        completion_quantile(0.9, 10.0 * math.exp(0.4), hazard, params, 0.05), rel=1e-6
    )


def test_the_split_normal_passes_through_the_three_validated_quantiles():
    err = ModelError("transferred", -0.4, -0.03, 0.39, 260, "test")
    for p, q in ((0.1, -0.4), (0.5, -0.03), (0.9, 0.39)):
        assert err.log_quantile(p) == pytest.approx(q)
    assert iteration_band(1.0, 1.1, err) == pytest.approx(
        (0.9 * math.exp(-0.4), math.exp(-0.03), 1.1 * math.exp(0.39))
    )


def test_rows_on_several_nodes_take_the_multinode_error_and_one_node_its_worst_source():
    errors = {
        s: ModelError(s, -0.1, 0.0, 0.1, 9, "t") for s in ("transferred", "analytical", "ddp-multinode")
    }
    assert row_model_error(["measured", "analytical"], 1, errors).source == "analytical"
    assert row_model_error(["transferred"], 3, errors).source == "ddp-multinode"
    assert row_model_error(["measured"], 1, errors) is None  # not validated: no invented band


def test_malformed_or_missing_quantiles_are_not_validated(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(
        json.dumps(
            {
                "analytical": {"lopo_q10": 0.3, "lopo_q50": 0.1, "lopo_q90": 0.5, "lopo_n": 5},  # q10 > q50
                "transferred": {"lopo_q10": -0.1, "lopo_q50": 0.0, "lopo_q90": 0.2},  # no n
                "ddp-multinode": {"lopo_q10": -0.1, "lopo_q50": 0.0, "lopo_q90": 0.2, "lopo_n": 3},
            }
        )
    )
    assert list(load_model_errors(path)) == ["ddp-multinode"]
    assert load_model_errors(tmp_path / "absent.json") == {}

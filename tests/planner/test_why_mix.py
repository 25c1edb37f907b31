"""Why a mix (planner/why_mix.py): a mixed plan is set beside the best plan of each of its types."""

from __future__ import annotations

from planner.solver import PlanRequest, evaluate_config, solve
from planner.why_mix import mix_reasons, why_mix
from tests.planner.test_solver import cand, toy_perf


def quota_bound_request() -> tuple[PlanRequest, list]:
    # one p4d (96 vCPU) fits the P quota; the deadline needs more than one node's throughput
    cands = [cand("p4d.24xlarge"), cand("g5.48xlarge")]
    base = PlanRequest(
        objective="cost", total_samples=2e7, deadline_hours=1e6, global_batch_min=512, global_batch_max=512
    )
    one = evaluate_config(((cands[0], 1),), base, toy_perf)
    assert one is not None
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
    return req, cands


def test_a_mix_where_no_type_alone_meets_the_deadline_says_so():
    req, cands = quota_bound_request()
    best = solve(req, cands, toy_perf).best
    assert len(best.groups) == 2
    assert why_mix(best, req, cands, toy_perf) == (
        "p4d.24xlarge alone: no plan (fastest config needs 1.62 h > deadline 1.38049 h); "
        "g5.48xlarge alone: no plan (fastest config needs 1.65 h > deadline 1.38049 h); "
        "no type alone meets the constraints, together they do."
    )


def test_a_mix_that_wins_on_quota_names_each_type_alone_and_the_quota_each_draws_on():
    req, cands = quota_bound_request()
    loose = PlanRequest(**{**req.__dict__, "deadline_hours": None, "objective": "time", "budget_usd": 1e5})
    best = solve(loose, cands, toy_perf).best
    assert best.label == "1x p4d.24xlarge + 3x g5.48xlarge in us-east-1"
    text = why_mix(best, loose, cands, toy_perf)
    p4d = solve(PlanRequest(**{**loose.__dict__, "max_types": 1}), cands[:1], toy_perf).best
    assert text.startswith(
        f"p4d.24xlarge alone: ${p4d.total_usd:,.2f}, {p4d.time_h:.2f} h (1x, on demand, us-east-1); "
    )
    assert "p4d.24xlarge alone reaches the on-demand P quota (96 vCPU) at 1 node" in text
    assert (
        "the mix draws on the on-demand P quota for 1x p4d.24xlarge and the on-demand G quota for 3x g5.48xlarge"
        in text
    )
    sooner = 100 * (1 - best.time_h / p4d.time_h)
    assert text.endswith(f"finishes {sooner:.0f}% sooner than p4d.24xlarge alone.")


def test_single_type_plans_get_no_sentence_and_keys_are_ranks():
    req, cands = quota_bound_request()
    res = solve(req, cands, toy_perf)
    reasons = mix_reasons(res.plans, req, cands, toy_perf)
    assert set(reasons) == {str(p.rank) for p in res.plans if len(p.groups) > 1}
    assert all(why_mix(p, req, cands, toy_perf) is None for p in res.plans if len(p.groups) == 1)

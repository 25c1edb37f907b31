"""The solver's per-GPU batch minimum (issue 38 item 1): configurations that leave a GPU fewer
samples than the minimum are not ranked, unless nothing at the minimum satisfies the request."""

from __future__ import annotations

from planner.solver import PlanRequest, solve
from planner.solver.search import MinBatchPerGpu, with_min_batch_per_gpu
from tests.planner.test_solver import cand, toy_perf


def _per_gpu(plan) -> list[int]:
    return [b // g.gpus_per_node for g in plan.groups for b in g.batch_per_node]


def _fastest(minimum: int | None, **fields):
    request = PlanRequest(
        objective="time",
        total_samples=3e7,
        budget_usd=1e6,
        max_nodes=8,
        global_batch_min=256,
        global_batch_max=256,
        **fields,
    )
    cands = [cand("p4d.24xlarge"), cand("g5.48xlarge"), cand("g5.xlarge")]
    return solve(request, cands, toy_perf, min_batch_per_gpu=minimum)


def test_it_ranks_no_configuration_below_the_minimum_when_one_at_it_fits():
    free = _fastest(None)
    assert min(_per_gpu(free.best)) < 32, "the toy request spreads 256 thinly when it may"
    bounded = _fastest(32)
    assert bounded.plans and all(min(_per_gpu(p)) >= 32 for p in bounded.plans)
    assert all(p.gpus <= 256 // 32 for p in bounded.plans)


def test_it_keeps_the_minimum_for_every_group_of_a_mix():
    result = _fastest(16, max_types=2)
    assert result.plans and all(min(_per_gpu(p)) >= 16 for p in result.plans)


def test_it_ranks_plans_below_the_minimum_when_nothing_at_it_fits():
    result = _fastest(512)  # 256 samples a step cannot give any GPU 512
    assert result.plans and all(min(_per_gpu(p)) < 512 for p in result.plans)
    assert [p.label for p in result.plans] == [p.label for p in _fastest(None).plans]


def test_no_minimum_leaves_the_oracle_as_it_is():
    assert with_min_batch_per_gpu(toy_perf, None) is toy_perf
    assert with_min_batch_per_gpu(toy_perf, 1) is toy_perf
    wrapped = with_min_batch_per_gpu(toy_perf, 32)
    assert isinstance(wrapped, MinBatchPerGpu)
    assert not callable(getattr(wrapped, "throughput_bound", None))  # toy_perf has no bound
    node = cand("p4d.24xlarge")
    assert wrapped(((node, 1),), 256) is not None and wrapped(((node, 2),), 256) is None

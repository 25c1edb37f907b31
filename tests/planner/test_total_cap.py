"""Large mixes under the default batch range (issue 38 item 1 made it 256..4,096): the mix bound
per total node count (A5 per total, :meth:`planner.mix_bound.MixBound.total_cap`), the totals it
rules out (:meth:`planner.solver.candidates.MixBounds.total_limits`) and the GPUs a per-GPU batch
minimum leaves a mix (:meth:`planner.solver.search.MinBatchPerGpu.max_workers`).  Counts, not
wall time: what the search evaluates stays bounded, and the optimum stays the same."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from planner.solver import PlanRequest, solve
from planner.solver.search import MinBatchPerGpu
from tests.planner.golden_plans import catalog
from tests.planner.test_solver import cand, toy_perf

GRID = (256, 512, 1024, 2048, 4096)
IMAGENET_90 = 90 * 1_281_167


def _oracle(model: str = "torchvision:resnet50"):
    from bench.solver import ModelSpec, product_oracle

    shape = (128,) if model.startswith("transformers:") else (3, 224, 224)
    return product_oracle(ModelSpec(model, model, shape))


def _types(region: str = "us-east-1") -> list[Any]:
    by_type: dict[str, Any] = {}
    for c in catalog():
        if c.region == region:
            by_type.setdefault(c.instance_type, c)
    return [by_type[t] for t in sorted(by_type)]


@pytest.mark.parametrize("model", ["torchvision:resnet50", "transformers:bert"])
def test_the_cap_of_a_total_is_above_the_mix_bound_of_every_vector_with_that_total(model):
    from planner.mix_bound import mix_bound

    bound = mix_bound(_oracle(model))
    types = _types()
    rng = random.Random(38)
    checked = below = 0
    for _ in range(80):
        members = rng.sample(types, rng.choice((2, 3)))
        counts = [np.array([rng.choice((1, 1, 2, 5, 17, 60, 200)) for _ in range(40)]) for _ in members]
        a5 = bound(members, counts, GRID)
        cap = bound.total_cap(members, sum(counts), GRID)
        assert (a5 <= cap * (1 + 1e-9) + 1e-9).all()
        runs = np.isfinite(a5) & (a5 > 0)
        checked += int(runs.sum())
        below += int((cap[runs] < np.inf).sum())
    assert checked >= 500
    assert below == checked, "a finite cap wherever the bound is finite"
    # no vector has a total below its number of members
    assert bound.total_cap(types[:3], np.array([1, 2]), GRID).tolist() == [0.0, 0.0]


def test_a_per_gpu_minimum_leaves_a_cluster_at_most_the_batch_over_the_minimum_gpus():
    bounded = MinBatchPerGpu(toy_perf, 32)
    assert bounded.max_workers(4096) == 128
    assert bounded.max_workers(31) == 0
    product = MinBatchPerGpu(_oracle(), 1)
    assert product.max_workers(4096) == 4096  # the oracle's own cap (one sample per GPU) binds
    # and no configuration over that many GPUs runs under the minimum
    p4d = cand("p4d.24xlarge")  # 8 GPUs
    assert bounded(((p4d, 17),), 4096) is None


def test_cutting_the_totals_keeps_the_optimum_and_bounds_fewer_vectors(monkeypatch):
    from planner.solver import search

    request = PlanRequest(
        objective="time",
        total_samples=IMAGENET_90,
        budget_usd=400.0,
        max_nodes=16,
        max_types=3,
        global_batch_min=256,
        global_batch_max=4096,
    )
    cands = [c for c in catalog() if c.region == "us-east-1"]
    monkeypatch.setattr(search, "TOTAL_LIMIT_ROWS", 0)  # every box is cut to its totals
    cut = solve(request, cands, _oracle())
    monkeypatch.setattr(search, "TOTAL_LIMIT_ROWS", float("inf"))
    whole = solve(request, cands, _oracle())
    assert cut.best.label == whole.best.label
    assert cut.best.time_h == whole.best.time_h
    assert cut.stats.mixed_vectors_bounded < whole.stats.mixed_vectors_bounded / 10


def test_the_fastest_plan_within_1000_usd_on_512_nodes_of_3_types_searches_a_bounded_space():
    """The bench's r50 $1,000 on 512 x 3 types, as the service sends it (the default range
    narrowed to 512..4,096 at 512 nodes, a per-GPU minimum of 32): at 32 samples per GPU a
    4,096 batch runs on 128 GPUs, so no mix of more than 16 eight-GPU nodes is bounded, let
    alone evaluated (before the minimum capped the GPUs of a mix the search bounded the vectors
    of every mix up to 512 nodes and ran for minutes)."""
    request = PlanRequest(
        objective="time",
        total_samples=IMAGENET_90,
        budget_usd=1000.0,
        max_nodes=512,
        max_types=3,
        global_batch_min=512,
        global_batch_max=4096,
    )
    cands = [c for c in catalog() if c.region == "us-east-1"]
    result = solve(request, cands, _oracle(), min_batch_per_gpu=32)
    assert result.best.gpus <= 4096 // 32
    st = result.stats
    # (1-GPU types still mix on up to 128 nodes: about a million vectors, bounded in numpy)
    assert st.mixed_vectors_bounded < 5_000_000
    assert st.mixed_configs_evaluated < 100
    assert st.oracle_calls < 1_000

"""The batch-dilution bound (A5, :mod:`planner.mix_bound`): the product oracle's
``mix_throughput_bound(members, counts, grid)`` is never below the best throughput the oracle
gives that mix over the batch grid (what the solver's memo asks for), for any counts, so the
solver may prune with it and stay exact."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

from tests.planner.golden_plans import catalog, solve_with_and_without

GRID = (256, 512, 1024, 2048, 4096, 8192)


def _oracle(model: str = "torchvision:resnet50"):
    from bench.solver import ModelSpec, product_oracle

    shape = (128,) if model.startswith("transformers:") else (3, 224, 224)
    return product_oracle(ModelSpec(model, model, shape))


def _types(region: str = "us-east-1"):
    """One offer per instance type of the region (the bound, like the oracle, sees hardware)."""
    by_type: dict[str, Any] = {}
    for c in catalog():
        if c.region == region:
            by_type.setdefault(c.instance_type, c)
    return [by_type[t] for t in sorted(by_type)]


def _best(oracle, members, counts) -> float:
    best = 0.0
    for g in GRID:
        est = oracle(tuple(zip(members, counts, strict=True)), g)
        if est is not None and est.throughput_sps > best:
            best = est.throughput_sps
    return best


@pytest.mark.parametrize("model", ["torchvision:resnet50", "torchvision:vgg19", "transformers:bert"])
def test_the_bound_is_above_every_mix_the_oracle_runs_whatever_the_counts(model):
    oracle = _oracle(model)
    types = _types()
    rng = random.Random(21)
    checked = tight = 0
    for _ in range(60):
        k = rng.choice((2, 2, 3))
        members = rng.sample(types, k)
        vectors = [[rng.choice((1, 1, 2, 3, 5, 8, 16, 40)) for _ in members] for _ in range(4)]
        counts = [np.array([v[i] for v in vectors]) for i in range(k)]
        bound = oracle.mix_throughput_bound(members, counts, GRID)
        assert bound.shape == (len(vectors),)
        for j, v in enumerate(vectors):
            best = _best(oracle, members, v)
            assert best <= bound[j] * (1 + 1e-9) + 1e-9, (members, v, best, bound[j])
            if best > 0:
                checked += 1
                tight += bound[j] <= 1.25 * best
    assert checked >= 100
    # and it is a useful bound, not just a large number: most mixes within 25 % of it
    assert tight >= checked // 2


def test_the_bound_cannot_say_for_the_monte_carlo_oracle():
    oracle = dataclasses.replace(_oracle(), samples=100)
    a, b = _types()[:2]
    assert np.isinf(oracle.mix_throughput_bound([a, b], [np.array([1, 2]), np.array([3, 1])], GRID)).all()


def test_the_solver_finds_the_same_optimum_with_and_without_the_dilution_bound(monkeypatch):
    """Exactness: the bound only prunes mixes that cannot beat the incumbent; and it prunes."""
    from planner.oracle import Oracle
    from planner.solver import PlanRequest, solve

    cands = [c for c in catalog() if c.region in ("us-east-1", "us-west-2")]
    for request in (
        PlanRequest(
            objective="time", total_samples=90 * 1_281_167, budget_usd=400.0, max_nodes=16, max_types=2
        ),
        PlanRequest(
            objective="throughput",
            total_samples=90 * 1_281_167,
            max_hourly_usd=60.0,
            max_nodes=12,
            max_types=3,
        ),
    ):
        with_bound = solve(request, cands, _oracle())
        with monkeypatch.context() as m:
            m.delattr(Oracle, "mix_throughput_bound")
            without = solve(request, cands, _oracle())
        assert with_bound.best.label == without.best.label
        assert with_bound.best.effective_throughput_sps == without.best.effective_throughput_sps
        # (the other mixes in the table are those the bounds could not rule out: fewer with it)
        assert with_bound.stats.oracle_calls < without.stats.oracle_calls


@pytest.mark.parametrize("model", ["torchvision:resnet50", "transformers:bert"])
def test_the_ceiling_is_above_the_bound_at_every_count_vector(model):
    """The count-free ceiling the solver caps whole subsets with (planner.mix_bound.ceiling,
    from the members' terms and the comm floor at any total) is above A5 at every vector."""
    oracle = _oracle(model)
    types = _types()
    rng = random.Random(5)
    gmax = max(GRID)
    checked = below_inf = 0
    for _ in range(120):
        k = rng.choice((2, 3))
        members = rng.sample(types, k)
        terms = [oracle.mix_ceiling_terms(c, gmax) for c in members]
        if any(t is None for t in terms):
            continue
        vectors = [[rng.choice((1, 2, 3, 8, 30, 100)) for _ in members] for _ in range(6)]
        counts = [np.array([v[i] for v in vectors]) for i in range(k)]
        totals = np.arange(k, sum(max(v[i] for v in vectors) for i in range(k)) + 1)
        floors = oracle.comm_floor_ms(members, totals)
        floor = float(floors.min()) if (floors > 0).all() else 0.0
        first, paced, beta = (max(t[j] for t in terms) for j in range(3))
        cap = float(oracle.mix_ceiling(first, paced, beta, floor, gmax))
        bound = oracle.mix_throughput_bound(members, counts, GRID)
        assert (bound <= cap * (1 + 1e-9)).all(), (members, vectors, bound, cap)
        checked += len(vectors)
        below_inf += np.isfinite(cap)
    assert checked >= 200 and below_inf >= 30


def test_the_solver_finds_the_same_optimum_with_and_without_the_ceiling(monkeypatch):
    from planner.solver import PlanRequest

    request = PlanRequest(
        objective="time", total_samples=90 * 1_281_167, budget_usd=600.0, max_nodes=40, max_types=3
    )
    with_it, without = solve_with_and_without(monkeypatch, request, _oracle, "mix_ceiling")
    assert with_it.stats.mixed_vectors_bounded < without.stats.mixed_vectors_bounded

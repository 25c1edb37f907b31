"""The comm floor (bound A4 of planner.solver.candidates): the product oracle's
``comm_floor_ms(members, nodes)`` never exceeds the iteration of a mix of those members with that
many nodes, whatever the counts, so ``G / floor`` is a valid cap on the mix's throughput."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from tests.planner.golden_plans import catalog


def _oracle():
    from bench.solver import ModelSpec, product_oracle

    return product_oracle(ModelSpec("ResNet-50", "torchvision:resnet50"))


def _members():
    by_type = {c.instance_type: c for c in catalog() if c.region == "us-east-1"}
    return [by_type[t] for t in ("p4d.24xlarge", "g5.48xlarge", "g6.xlarge", "p5.48xlarge") if t in by_type]


def test_the_floor_is_below_every_mix_iteration_whatever_the_counts():
    oracle = _oracle()
    members = _members()
    assert len(members) >= 3
    checked = 0
    for a, b in itertools.combinations(members, 2):
        for n_a, n_b in ((1, 1), (1, 5), (4, 2), (3, 9)):
            total = n_a + n_b
            [floor] = oracle.comm_floor_ms([a, b], np.array([total]))
            assert floor > 0  # several nodes: there are all-reduces to wait for
            for g in (256, 1024):
                est = oracle(((a, n_a), (b, n_b)), g)
                if est is None:
                    continue
                assert est.iter_time_s * 1e3 >= floor * (1 - 1e-9)
                assert est.throughput_sps <= g / (floor / 1e3) * (1 + 1e-9)
                checked += 1
    assert checked >= 10


def test_the_floor_is_zero_where_it_cannot_say():
    oracle = _oracle()
    a, b = _members()[:2]
    floors = oracle.comm_floor_ms([a, b], np.array([1, 2]))
    assert floors[0] == 0.0 and floors[1] > 0  # fewer nodes than members
    assert not dataclasses.replace(oracle, samples=100).comm_floor_ms([a, b], np.array([4])).any()


def test_the_solver_finds_the_same_optimum_with_and_without_the_comm_floor(monkeypatch):
    """Exactness: the bound only prunes mixes that cannot beat the incumbent."""
    from planner.oracle import Oracle
    from planner.solver import PlanRequest, solve

    request = PlanRequest(
        objective="throughput", total_samples=90 * 1_281_167, max_hourly_usd=60.0, max_nodes=12, max_types=2
    )
    cands = [c for c in catalog() if c.region == "us-east-1"]
    with_floor = solve(request, cands, _oracle())
    monkeypatch.delattr(Oracle, "comm_floor_ms")
    without = solve(request, cands, _oracle())
    assert with_floor.best.label == without.best.label
    assert with_floor.best.effective_throughput_sps == without.best.effective_throughput_sps
    assert with_floor.stats.mixed_configs_evaluated <= without.stats.mixed_configs_evaluated

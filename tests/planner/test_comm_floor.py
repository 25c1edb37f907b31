"""The comm floor (bound A4 of planner.solver.candidates): the product oracle's
``comm_floor_ms(members, nodes)`` never exceeds the iteration of a mix of those members with that
many nodes, whatever the counts, so ``G / floor`` is a valid cap on the mix's throughput."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from tests.planner.golden_plans import catalog, solve_with_and_without


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
    from planner.solver import PlanRequest

    request = PlanRequest(
        objective="throughput", total_samples=90 * 1_281_167, max_hourly_usd=60.0, max_nodes=12, max_types=2
    )
    with_floor, without = solve_with_and_without(monkeypatch, request, _oracle, "comm_floor_ms")
    assert with_floor.stats.mixed_configs_evaluated <= without.stats.mixed_configs_evaluated


def _bounds(cands, N):
    from planner.solver.candidates import Curves, MixBounds
    from planner.solver.evaluate import Memo

    oracle = _oracle()
    reps = {}
    for c in cands:
        reps.setdefault(c.instance_type, c)
    return MixBounds(Curves(reps, N, (256, 1024, 4096), Memo(oracle), oracle))


def test_the_subset_cap_is_never_below_the_cap_of_any_count_vector():
    """A4 at subset level: one cap per subset, from the floors of its cluster signature at every
    total up to the most nodes its vectors can have, is the largest per-vector cap (comm_ub) over
    those totals."""
    from planner.solver.candidates import combinations

    N = 24
    cands = [c for c in catalog() if c.region == "us-east-1"]
    bounds = _bounds(cands, N)
    lam = {c: 0.0 for c in cands}
    checked = finite = 0
    for k in (2, 3):
        tables = bounds.member_tables(cands, k, {c: N for c in cands}, lam)
        combos = np.concatenate(list(combinations(len(cands), k)))
        rng = np.random.default_rng(k)
        combos = combos[rng.choice(len(combos), size=min(300, len(combos)), replace=False)]
        most = rng.integers(k, N + 1, size=len(combos))  # the most nodes each subset's vectors have
        floors = bounds.subset_comm_floor(tables, combos, most)
        assert floors is not None and len(floors) == len(combos)
        caps = bounds.cap_of_floor(floors)
        for row, cap, m in zip(combos, caps, most, strict=True):
            subset = [cands[i] for i in row]
            per_total = bounds.comm_ub(subset, np.arange(k, m + 1))
            assert cap >= per_total.max() * (1 - 1e-12)
            assert cap <= per_total.max() * (1 + 1e-12)  # and it is that maximum, not looser
            checked += 1
            finite += bool(np.isfinite(cap))
        # asked again for every total: the cached floors are extended, not reused short
        wide = bounds.cap_of_floor(bounds.subset_comm_floor(tables, combos, np.full(len(combos), N)))
        for row, cap in zip(combos[:50], wide[:50], strict=True):
            assert cap == pytest.approx(
                bounds.comm_ub([cands[i] for i in row], np.arange(k, N + 1)).max(), rel=1e-12
            )
    assert checked == 600 and finite > 300


def test_the_subset_cap_prunes_subsets_and_keeps_the_optimum(monkeypatch):
    from planner.solver import PlanRequest, solve
    from planner.solver.candidates import MixBounds

    request = PlanRequest(
        objective="time", total_samples=90 * 1_281_167, budget_usd=400.0, max_nodes=16, max_types=3
    )
    cands = [c for c in catalog() if c.region == "us-east-1"]
    with_cap = solve(request, cands, _oracle())
    monkeypatch.setattr(MixBounds, "subset_comm_floor", lambda self, tables, combos, most=None: None)
    without = solve(request, cands, _oracle())
    assert with_cap.best.label == without.best.label
    assert with_cap.best.time_h == without.best.time_h
    assert with_cap.stats.mixed_vectors_bounded < without.stats.mixed_vectors_bounded
    assert with_cap.stats.mixed_subsets_pruned > without.stats.mixed_subsets_pruned


def test_the_prefix_minimum_of_the_floors_stops_early_and_equals_asking_every_total(monkeypatch):
    from planner.oracle import Oracle
    from planner.perf.nccl import LearnedComm

    members = _members()
    asked = []
    real = Oracle._chunk_floors  # the floors at a run of totals

    def counting(self, base, topo, chunk, specs):
        asked.extend(chunk)
        return real(self, base, topo, chunk, specs)

    # The early stop needs the least correction times the prior to reach the least floor found:
    # with the prior alone (no trees: a least correction of 0) it does, soon.
    prior_only = dataclasses.replace(_oracle(), comm=LearnedComm(params=_oracle().comm.params))
    with monkeypatch.context() as m:
        m.setattr(Oracle, "_chunk_floors", counting)
        prior_floors = prior_only.comm_floor_prefix_min(members[:2], 200)
    assert 1 <= len(asked) < 199 / 2  # far fewer totals than 2..200
    every = dataclasses.replace(_oracle(), comm=prior_only.comm).comm_floor_ms(members[:2], np.arange(2, 201))
    assert np.array_equal(prior_floors[2:], np.minimum.accumulate(every))
    oracle = _oracle()
    for k in (2, 3):
        for subset in itertools.combinations(members, k):
            upto = 200
            fast = oracle.comm_floor_prefix_min(list(subset), upto)
            # a fresh oracle, one total at a time: the runs of totals give the same floors to the bit
            every = _oracle().comm_floor_ms(list(subset), np.arange(k, upto + 1))
            slow = np.minimum.accumulate(np.where(every > 0, every, -np.inf))
            assert np.isnan(fast[:k]).all()
            assert np.array_equal(fast[k:], np.where(slow == -np.inf, 0.0, slow))


@pytest.mark.parametrize("objective", ["time", "cost", "throughput"])
def test_the_cheap_bounds_first_leave_the_survivors_and_caps_of_every_bound_on_every_row(
    monkeypatch, objective
):
    """subset_survivors applies separability, then the floor-free A5 ceiling, then the rest to
    the rows each leaves; with the floor-free ceiling turned off (every row gets every other
    bound) the survivors and their caps are the same."""
    from planner.solver import PlanRequest
    from planner.solver.candidates import MixBounds, combinations
    from planner.solver.evaluate import Spec

    N = 48
    cands = [c for c in catalog() if c.region == "us-east-1"]
    bounds = _bounds(cands, N)
    fields = {
        "time": {"budget_usd": 400.0},
        "cost": {"deadline_hours": 6.0},
        "throughput": {"max_hourly_usd": 80.0},
    }
    request = PlanRequest(
        objective=objective, total_samples=90 * 1_281_167, max_nodes=N, max_types=3, **fields[objective]
    )
    spec = Spec(objective, request.deadline_hours, request.budget_usd, request.max_hourly_usd, None, {}, 5)
    lam = {c: 0.0 for c in cands}
    theta = {"time": 0.2, "cost": 12.0, "throughput": -80_000.0}[objective]  # an incumbent
    tables = bounds.member_tables(cands, 3, {c: N for c in cands}, lam)
    combos = np.concatenate(list(combinations(len(cands), 3)))
    fast = bounds.subset_survivors(spec, theta, tables, combos, 4, request)
    real = MixBounds.subset_ceiling

    def no_prefilter(self, tables, rows, floor):
        out = real(self, tables, rows, floor)
        return np.full(len(rows), np.inf) if floor is None else out

    monkeypatch.setattr(MixBounds, "subset_ceiling", no_prefilter)
    slow = bounds.subset_survivors(spec, theta, tables, combos, 4, request)
    assert np.array_equal(fast[0], slow[0]) and fast[1] == slow[1]
    assert np.array_equal(fast[2], slow[2])
    assert 0 < len(fast[0]) < len(combos) // 5  # it prunes, and not everything


def test_the_bound_of_one_vector_is_the_bound_of_its_array():
    N = 24
    cands = [c for c in catalog() if c.region == "us-east-1"]
    bounds = _bounds(cands, N)
    rng = np.random.default_rng(3)
    for _ in range(300):
        k = int(rng.integers(2, 4))
        subset = [cands[i] for i in rng.choice(len(cands), size=k, replace=False)]
        counts = [int(x) for x in rng.integers(1, N // k + 1, size=k)]
        for level in (1, 2, 3):
            assert bounds.ub_one(subset, counts, level) == float(bounds.ub(subset, counts, level))

"""The vectorised paths of the plan search (issue 21, item 3): the regression trees, the comm model
over node counts and the oracle over a homogeneous curve give, row by row, exactly what the
one-at-a-time paths give (to the bit: the search compares values the scalar oracle gives the
shown plans), and the search finds the same plan with and without them."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from tests.planner.golden_plans import catalog, solve_with_and_without


def _oracle(samples: int = 0):
    from bench.solver import ModelSpec, product_oracle

    oracle = product_oracle(ModelSpec("ResNet-50", "torchvision:resnet50"))
    return dataclasses.replace(oracle, samples=samples) if samples else oracle


def _random_rows(rng: np.random.Generator, rows: int, width: int) -> np.ndarray:
    x = rng.normal(0.0, 3.0, (rows, width))
    x[rng.random((rows, width)) < 0.05] = np.nan  # missing features take the default branch
    return x


def test_the_trees_give_every_row_what_they_give_it_alone():
    from planner.calibration import load_compute_model
    from planner.hardware import load_gpu_specs
    from planner.perf.nccl import shipped_model
    from planner.perf.opclass import FEATURES
    from tests.planner.golden_plans import ROOT

    rng = np.random.default_rng(21)
    comm = shipped_model()
    residual = load_compute_model(load_gpu_specs(ROOT / "catalog" / "fixtures" / "gpu_specs.csv")).residual
    for trees in (comm.trees, comm.trees_p90, residual):
        assert trees.trees  # the shipped models have trees to walk
        width = 7 if trees is not residual else len(FEATURES)
        x = _random_rows(rng, 2000, width)
        assert np.array_equal(trees.predict_many(x), np.array([trees(list(r)) for r in x]))


def test_trees_without_any_tree_give_their_base():
    from planner.perf.opclass import Trees

    assert np.array_equal(Trees(0.25).predict_many(np.zeros((3, 2))), np.full(3, 0.25))


def test_the_compute_model_predicts_many_batches_as_it_predicts_each():
    oracle = _oracle()
    model, cost, precision = oracle.transfer, oracle.workload.cost, oracle.workload.precision
    batches = list(range(1, 400)) + [1000, 4096]
    gpus = 0
    for gpu in sorted(model.specs):
        try:
            many = model.phase_ms_many(cost, batches, gpu, precision)
        except (KeyError, ValueError) as exc:  # the same refusal as one batch gets
            with pytest.raises(type(exc)):
                model.phase_ms(cost, 8, gpu, precision)
            continue
        one = [model.phase_ms(cost, b, gpu, precision) for b in batches]
        for phase in ("forward", "backward", "optimizer"):
            assert np.array_equal(many[phase], np.array([t[phase] for t in one])), (gpu, phase)
        gpus += 1
    assert gpus >= 8


def test_the_oracle_keeps_the_phases_it_predicts_in_one_pass():
    fresh, batched = _oracle(), _oracle()
    for gpu in ("A100", "A10G", "H100", "T4"):
        cap = fresh.max_batch(gpu)
        batches = [0, 1, 2, 3, 17, cap - 1, cap, cap + 1]
        batched.phases_many(gpu, batches)
        assert all((gpu, b) in batched._phase_cache for b in batches)
        assert [batched.phases(gpu, b) for b in batches] == [fresh.phases(gpu, b) for b in batches]
        assert batched.phases(gpu, cap + 1) is None and batched.phases(gpu, 0) is None


def test_the_comm_model_times_a_whole_curve_as_it_times_each_count():
    from planner.perf.nccl import Topology, prior_us, prior_us_nodes, shipped_model

    model = shipped_model()
    nodes = np.array([2, 3, 4, 5, 8, 13, 16, 31, 64, 100, 128, 257, 512])
    checked = 0
    for gen, nvlink, gpn, net, gbps, placed in itertools.product(
        ("Volta", "Ampere", "Hopper", "Unknown"),
        (0.0, 600.0),
        (1, 4, 8),
        ("efa", "tcp"),
        (25.0, 3200.0),
        (True, False),
    ):
        topo = Topology(gpn, 2, gen, nvlink, 32.0, net, gbps, placed, "")
        sizes = (4.0, 1 << 20, 25e6, 1e9)
        grid50, grid90 = model.estimate_nodes(list(sizes), topo, nodes)  # every size at once
        for size in sizes:
            p50, p90 = model.estimate_nodes(size, topo, nodes)
            row = sizes.index(size)
            assert np.array_equal(grid50[row], p50) and np.array_equal(grid90[row], p90)
            prior = prior_us_nodes(size, topo, nodes, model.params)
            for i, n in enumerate(nodes.tolist()):
                one = dataclasses.replace(topo, nodes=n)
                e = model.estimate(size, one)
                assert (e.p50_us, e.p90_us) == (p50[i], p90[i]), (topo, n, size)
                assert prior_us(size, one, model.params)[0] == prior[i]
                checked += 1
    assert checked == 4 * 2 * 3 * 2 * 2 * 2 * 4 * len(nodes)


def test_the_curve_of_the_prior_refuses_a_single_node():
    from planner.perf.nccl import Topology, prior_us_nodes

    with pytest.raises(ValueError, match="at least 2"):
        prior_us_nodes(1e6, Topology(8, 2, "Hopper", 900.0, net="efa", net_gbps=3200.0), np.array([1, 2]))


def test_the_oracle_curve_is_each_configuration_to_the_bit():
    oracle = _oracle()
    reps: dict[str, object] = {}
    for c in catalog():
        if c.region == "us-east-1":
            reps.setdefault(c.instance_type, c)
    counts = np.arange(1, 81)
    curves = runs = 0
    for c in reps.values():
        for g in (64, 512, 4096, 32768):
            got = oracle.throughput_curve(c, counts, g)
            if got is None:  # no datasheet for its GPU: the search asks one by one
                continue
            one = []
            for n in counts.tolist():
                est = oracle(((c, n),), g)
                ok = est is not None and est.throughput_sps > 0 and math.isfinite(est.throughput_sps)
                one.append(est.throughput_sps if ok else 0.0)
            assert np.array_equal(got, np.array(one)), (c.instance_type, g)
            curves += 1
            runs += int((got > 0).sum())
    assert curves >= 40 and runs >= 2000  # many types, most counts run


def test_the_input_floor_and_the_nccl_slowdown_are_in_the_curve():
    oracle = _oracle()
    assert oracle.pipeline is not None and oracle.transfer.nccl_slowdown > 0
    by_type = {c.instance_type: c for c in catalog() if c.region == "us-east-1"}
    bottlenecks = set()
    # few vCPUs per GPU: the loaders bind somewhere; several GPUs: backward pays κ
    for name in ("g4dn.xlarge", "g5.xlarge", "g5.12xlarge", "p4d.24xlarge"):
        c = by_type[name]
        got = oracle.throughput_curve(c, np.array([1, 2, 3]), 256)
        ests = [oracle(((c, n),), 256) for n in (1, 2, 3)]
        assert got is not None and all(e is not None for e in ests)
        assert list(got) == [e.throughput_sps for e in ests]
        bottlenecks |= {e.bottleneck.split(" (")[0].split(":")[0] for e in ests}
    assert any("input" in b for b in bottlenecks), bottlenecks


def test_the_curve_declines_where_it_would_not_be_the_oracle():
    c = next(c for c in catalog() if c.instance_type == "p4d.24xlarge")
    assert _oracle(samples=50).throughput_curve(c, np.array([1, 2]), 512) is None  # Monte-Carlo


def test_the_search_finds_the_same_plan_with_and_without_the_curve(monkeypatch):
    from planner.solver import PlanRequest

    request = PlanRequest(
        objective="cost", total_samples=90 * 1_281_167, deadline_hours=3.0, max_nodes=96, max_types=2
    )
    with_it, without = solve_with_and_without(monkeypatch, request, _oracle, "throughput_curve")
    assert [p.label for p in with_it.plans] == [p.label for p in without.plans]
    assert with_it.stats.curve_points_evaluated == without.stats.curve_points_evaluated  # the same points


@pytest.mark.parametrize(
    "fields", [{"objective": "cost", "deadline_hours": 3.0}, {"objective": "time", "budget_usd": 90.0}]
)
def test_metrics_of_one_throughput_are_the_metrics_of_its_array(fields):
    from planner.solver import PlanRequest
    from planner.solver.evaluate import metrics, metrics_at

    request = PlanRequest(total_samples=1e8, **fields)
    rng = np.random.default_rng(7)
    for _ in range(500):
        k = int(rng.integers(1, 40))
        rate = rng.random(k) * 10
        hazard = np.where(rng.random(k) > 0.5, rng.random(k) * 0.5, 0.0)
        hazard[rng.random(k) < 0.1] = 1e6  # interrupted faster than it can checkpoint: never ends
        thr = float(rng.random() * 1e5 + 1e-3)
        for a, b in zip(
            metrics(np.full(k, thr), rate, hazard, request),
            metrics_at(thr, rate, hazard, request),
            strict=True,
        ):
            assert np.array_equal(a, b)

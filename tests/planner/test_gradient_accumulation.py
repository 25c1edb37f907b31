"""Gradient accumulation in the product oracle (issue 34): with ``k`` micro-steps per optimizer
step the all-reduces and the optimizer run once per ``k`` micro-steps, and the oracle states the
mean micro-step ``T = ((k - 1) t_local + T_sync) / k`` (``planner.oracle._accumulated``); the
solver's bounds stay bounds."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from tests.planner.golden_plans import catalog


@functools.cache
def _base():
    from bench.solver import ModelSpec, product_oracle

    return product_oracle(ModelSpec("ResNet-50", "torchvision:resnet50"))


def _oracle(k: int = 1):
    from planner.oracle import Oracle

    base = _base()
    return Oracle(
        dataclasses.replace(base.workload, accumulation_steps=k),
        base.transfer,
        base.specs,
        base.comm,
        input_rate_per_vcpu=float("inf"),  # the loaders never set the pace: the GPUs and NCCL do
    )


def _type(name: str):
    return next(c for c in catalog() if c.instance_type == name and c.region == "us-east-1")


def _local_ms(oracle, cand, batch: int) -> float:
    """Forward + backward + the host's input cost δ of one micro-step (no all-reduce, no κ)."""
    from planner.oracle import host_share

    ph = oracle.phases(cand.gpu_model, batch)
    _, delta = oracle.multi_gpu_terms()
    return ph.forward + ph.backward + delta * host_share(cand) * oracle.input_elements() * batch / 1e6


def test_it_leaves_every_figure_as_it_was_without_accumulation():
    cand = _type("p4d.24xlarge")
    default, one = _oracle(), _oracle(1)
    assert default.workload.accumulation_steps == 1
    assert default(((cand, 2),), 4096) == one(((cand, 2),), 4096)


def test_it_pays_the_all_reduce_and_the_optimizer_once_per_k_micro_steps():
    cand = _type("p4d.24xlarge")
    sync = _oracle(1)(((cand, 2),), 4096)
    local = _local_ms(_oracle(1), cand, 256)
    for k in (2, 8, 32):
        est = _oracle(k)(((cand, 2),), 4096)
        assert est.iter_time_s * 1e3 == pytest.approx(((k - 1) * local + sync.iter_time_s * 1e3) / k)
        assert local < est.iter_time_s * 1e3 < sync.iter_time_s * 1e3
        assert est.throughput_sps == pytest.approx(4096 / est.iter_time_s)
        assert est.iter_time_p90_s >= est.iter_time_s


def test_it_spreads_the_optimizer_step_of_one_gpu_over_its_micro_steps():
    cand = _type("g5.xlarge")
    ph = _oracle().phases(cand.gpu_model, 64)
    est = _oracle(16)(((cand, 1),), 64)
    assert est.iter_time_s * 1e3 == pytest.approx(ph.forward + ph.backward + ph.optimizer / 16)


def test_the_search_bounds_stay_below_the_oracle_with_accumulation():
    oracle = _oracle(8)
    cand = _type("p4d.24xlarge")
    counts = np.array([1, 2, 4, 8])
    bound = oracle.throughput_bound(cand, counts, 2048)
    floors = oracle.comm_floor_ms([cand], counts)
    prefix = oracle.comm_floor_prefix_min([cand], 8)
    for i, n in enumerate(counts.tolist()):
        est = oracle(((cand, n),), 2048)
        assert est is not None
        assert est.throughput_sps <= bound[i]
        assert floors[i] <= est.iter_time_s * 1e3
        assert prefix[n] <= est.iter_time_s * 1e3
    assert floors[1] == pytest.approx(_oracle(1).comm_floor_ms([cand], counts)[1] / 8)


def test_the_one_pass_curve_and_the_mix_bound_step_aside_with_accumulation():
    oracle = _oracle(4)
    a, b = _type("p4d.24xlarge"), _type("g5.48xlarge")
    assert oracle.throughput_curve(a, [1, 2, 3], 4096) is None  # asked one count at a time
    assert np.isinf(oracle.mix_throughput_bound([a, b], [np.array([1, 2]), np.array([1, 1])], [4096])).all()
    assert oracle.mix_ceiling_terms(a, 4096) is None
    assert _oracle(1).throughput_curve(a, [1, 2, 3], 4096) is not None

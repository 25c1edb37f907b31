"""The input-pipeline limit: a node trains no faster than (vCPUs - GPUs) x the loader rate per vCPU."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

from planner import input_pipeline as ip
from planner.solver import PlanRequest, solve
from workload import runs


@cache
def _catalog():
    from bench.solver import load_catalog

    return tuple(load_catalog(regions=("us-east-1",), allow_spot=False))


def offer(name: str):
    return next(c for c in _catalog() if c.instance_type == name)


@cache
def resnet50():
    from bench.solver import ModelSpec, product_oracle

    return product_oracle(ModelSpec("torchvision:resnet50", "torchvision:resnet50"))  # amp, 3x224x224


def unfed(oracle):
    """The same oracle with loaders that never bind: what the GPUs alone would do."""
    return dataclasses.replace(oracle, input_rate_per_vcpu=1e12)


def test_it_knows_the_data_kind_from_the_input_shape():
    assert ip.data_kind((3, 224, 224)) == "image"
    assert ip.data_kind((512,)) == "text"
    assert ip.data_kind((3, 32, 32)) == ip.data_kind((1, 64, 64)) == "small_image"  # CIFAR, an array
    assert ip.data_kind((3, 65, 64)) == "image"
    assert ip.InputPipeline.for_workload((3, 32, 32)) == ip.InputPipeline("small_image", 1400.0, False)
    assert ip.data_kind((2, 3, 8, 8)) is None
    assert ip.InputPipeline.for_workload((2, 3, 8, 8)) is None


def test_a_node_keeps_one_vcpu_per_gpu_for_training_and_loads_on_the_rest():
    pipe = ip.InputPipeline.for_workload((3, 224, 224))
    assert pipe == ip.InputPipeline("image", 100.0, measured=False)
    assert pipe.ceiling(4, 1) == 300.0  # g4dn.xlarge: 3 loader vCPUs
    assert pipe.ceiling(96, 8) == 8800.0  # p4d.24xlarge: 88
    assert pipe.ceiling(0, 1) == float("inf")  # vCPUs unknown: no cap
    assert ip.InputPipeline.for_workload((3, 224, 224), 250.0) == ip.InputPipeline("image", 250.0, True)


def test_a_g4dn_xlarge_resnet50_node_is_capped_by_its_input_pipeline_and_says_so():
    """T4 at global batch 256 trains ~379 images/s; 3 loader vCPUs x 100/s (assumed) = 300/s,
    so one iteration takes 256 / 300 = 0.8533 s and the row names the pipeline and g4dn.2xlarge
    (8 vCPUs: 7 x 100 = 700/s >= 379/s)."""
    g4 = offer("g4dn.xlarge")
    assert (g4.vcpus, g4.gpus_per_node, g4.gpu_model) == (4, 1, "T4")
    gpus_alone = unfed(resnet50())(((g4, 1),), 256)
    assert gpus_alone.throughput_sps > 300
    est = resnet50()(((g4, 1),), 256)
    assert est.iter_time_s == pytest.approx(256 / 300)
    assert est.throughput_sps == pytest.approx(300.0)
    assert est.iter_time_p90_s - est.iter_time_s == pytest.approx(
        gpus_alone.iter_time_p90_s - gpus_alone.iter_time_s
    )
    assert est.bottleneck.startswith("input pipeline: g4dn.xlarge feeds 3 loader vCPUs x 100 samples/s")
    assert "assumed for JPEG image data" in est.bottleneck
    assert "g4dn.2xlarge (8 vCPUs for 1 T4) keeps them fed" in est.bottleneck


def test_a_p4d_resnet50_node_at_the_default_batch_is_not_capped():
    """88 loader vCPUs x 100/s = 8,800/s against ~7,200/s on 8 A100 at global batch 256 (the
    default request). (At 1024 and more the A100s would take ~9,500/s and the pipeline binds.)"""
    p4d = offer("p4d.24xlarge")
    est = resnet50()(((p4d, 1),), 256)
    assert est == unfed(resnet50())(((p4d, 1),), 256)
    assert not est.bottleneck.startswith("input pipeline")
    assert est.throughput_sps < 8800


def test_a_measured_rate_replaces_the_default_and_is_called_measured():
    g4 = offer("g4dn.xlarge")
    fast = dataclasses.replace(resnet50(), input_rate_per_vcpu=200.0)  # 600/s > what the T4 takes
    assert fast(((g4, 1),), 256) == unfed(resnet50())(((g4, 1),), 256)
    slow = dataclasses.replace(resnet50(), input_rate_per_vcpu=50.0)
    est = slow(((g4, 1),), 256)
    assert est.throughput_sps == pytest.approx(150.0)
    assert "50 samples/s (measured)" in est.bottleneck


def test_the_throughput_bound_stays_an_upper_bound_and_meets_a_capped_node():
    g4 = offer("g4dn.xlarge")
    oracle = resnet50()
    counts = np.array([1, 2, 4, 8])
    bound = oracle.throughput_bound(g4, counts, 256)
    for n, b in zip(counts.tolist(), bound.tolist(), strict=True):
        est = oracle(((g4, n),), 256)
        assert est is not None and est.throughput_sps <= b * (1 + 1e-9)
    assert bound[0] == pytest.approx(300.0)


def test_a_plan_on_g4dn_xlarge_names_the_input_pipeline_as_its_bottleneck():
    req = PlanRequest(
        objective="cost", total_samples=1_281_167, deadline_hours=100, max_nodes=1, startup_overhead_h=0.0
    )
    plan = solve(req, [offer("g4dn.xlarge")], resnet50()).best
    assert plan.bottleneck.startswith("input pipeline")
    assert plan.throughput_sps == pytest.approx(300.0)


def test_it_suggests_the_nearest_type_of_the_same_gpu_that_keeps_it_fed():
    assert ip.suggest_type("T4", 1, 379.0, 100.0, exclude="g4dn.xlarge") == ("g4dn.2xlarge", 8, 1)
    assert ip.suggest_type("T4", 1, 900.0, 100.0) == ("g4dn.4xlarge", 16, 1)
    assert ip.suggest_type("V100", 1, 1019.0, 100.0) is None  # 7 loader vCPUs per V100 at most


def test_a_profiles_rate_counts_only_for_the_kind_it_was_measured_for():
    assert ip.measured_rate((3, 32, 32), ("small_image", 612.5)) == 612.5 * ip.HYPERTHREAD_SHARE
    assert ip.measured_rate((3, 224, 224), ("small_image", 612.5)) is None  # profiled at another shape
    assert ip.measured_rate((512,), ("text", 5e4)) == 3e4  # one thread x 0.6
    assert ip.measured_rate((3, 224, 224), None) is None
    assert ip.measured_rate((3, 224, 224), ("image", 0.0)) is None
    assert ip.measured_rate((3, 224, 224), ("image", float("nan"))) is None
    assert ip.data_kind is runs.data_kind  # one rule, in workload/, which the agent and the planner share


def test_a_resampled_oracle_keeps_the_input_rate_and_predicts_the_same_bound():
    """The plan's Monte-Carlo re-check (planner.app.service._verify) draws from this copy."""
    g4 = offer("g4dn.xlarge")
    slow = dataclasses.replace(resnet50(), input_rate_per_vcpu=50.0)
    mc = slow.resampled(samples=200, seed=3)
    assert (mc.samples, mc.seed, mc.input_rate_per_vcpu) == (200, 3, 50.0)
    assert mc.workload is slow.workload and mc.placement_group == slow.placement_group
    assert mc._phase_cache is not slow._phase_cache
    assert mc(((g4, 1),), 256).throughput_sps == pytest.approx(150.0, rel=0.05)


def test_the_shared_hosts_input_cost_shrinks_with_more_cpus_per_gpu():
    """δ (the multi-GPU host's per-element input cost) is stated at a DGX-1's 10 threads per GPU:
    a p4d.24xlarge (12 per GPU) pays 10/12 of it per step, a node with twice its vCPUs half that."""
    from planner.oracle import REF_THREADS_PER_GPU, host_share

    p4d = offer("p4d.24xlarge")
    assert REF_THREADS_PER_GPU == 10.0
    assert host_share(p4d) == pytest.approx(10 / 12)
    roomy = dataclasses.replace(p4d, vcpus=2 * p4d.vcpus)
    assert host_share(roomy) == pytest.approx(host_share(p4d) / 2)
    assert host_share(dataclasses.replace(p4d, vcpus=0)) == 1.0  # unknown: δ as stated
    oracle = resnet50()
    assert oracle.transfer.input_ns_per_element > 0
    # same GPUs, only the host differs: the roomier node is faster per step on two nodes
    assert oracle(((roomy, 2),), 512).iter_time_s < oracle(((p4d, 2),), 512).iter_time_s
    free = dataclasses.replace(
        oracle, transfer=dataclasses.replace(oracle.transfer, input_ns_per_element=0.0)
    )
    assert free(((roomy, 2),), 512).iter_time_s == free(((p4d, 2),), 512).iter_time_s


def test_a_corpus_row_knows_its_hosts_threads_from_its_notes():
    from planner.corpus import CorpusRow

    def row(notes: str) -> CorpusRow:
        return CorpusRow(
            1, "s", "m", "3x224x224", "amp", "V100-SXM2-16GB", 8, 1, 64, "images_per_s", 1.0, notes
        )

    assert row("DGX A100 (8x A100 80GB); NGC 21.03").host_vcpus == 256
    assert row("DGX-1 (8x V100 16GB)").host_vcpus == 80
    assert row("DGX-2H (16x V100 32GB, 450 W)").host_vcpus == 96
    assert row("local OEM system").host_vcpus is None

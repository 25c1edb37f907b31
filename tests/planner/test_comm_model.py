"""Ring all-reduce prior, learned quantile correction, persistence, cluster links."""

from __future__ import annotations

import json
import math
import random

import pytest

from planner.hardware import Cluster, GpuSpec
from planner.perf.comm import (
    CommModel,
    CommObservation,
    CommQuery,
    fit_link_from_profile,
    observations_from_profile,
    prior_ms,
    ring_allreduce_prior_ms,
    time_ratios,
)
from planner.profiles import load_comm_profile

A100 = GpuSpec("A100", "Ampere", nvlink_gb_s=600, memory_bandwidth_gb_s=1555)


def synthetic_observations(n_configs=12, seed=0, factor=lambda q: 1.3, noise=0.05, reps=15):
    """Truth: t = factor(q) · prior(q) · lognormal(noise); several cluster shapes and sizes."""
    rng = random.Random(seed)
    obs = []
    shapes = [(1, 2, 100.0), (1, 8, 2400.0), (2, 8, 100.0), (4, 8, 400.0), (2, 4, 25.0), (8, 8, 3200.0)]
    for i in range(n_configs):
        nodes, gpn, gbps = shapes[i % len(shapes)]
        for size in (2**k for k in range(12, 29, 2)):
            q = CommQuery(size, nodes * gpn, nodes, gpn, gbps, gbps, 20.0, efa=gbps >= 400)
            base = factor(q) * prior_ms(q)
            obs.append(
                CommObservation(q, tuple(base * math.exp(noise * rng.gauss(0, 1)) for _ in range(reps)))
            )
    return obs


def test_prior_matches_the_ring_formula():
    # 2(n-1)/n · S/B + 2(n-1)·α with n=4, S=1e9 B, B=100 Gbit/s, α=10 µs
    t = ring_allreduce_prior_ms(1e9, 4, 100.0, 10.0)
    assert t == pytest.approx(1.5 * 1e9 / 12.5e6 + 6 * 0.01)


def test_prior_is_zero_for_a_single_worker():
    assert ring_allreduce_prior_ms(1e9, 1, 100.0, 10.0) == 0.0


def test_the_slowest_link_is_the_network_across_nodes_and_nvlink_inside_one():
    one = Cluster(nodes=1, gpus_per_node=8, gpu=A100)
    two = Cluster(nodes=2, gpus_per_node=8, gpu=A100, network_gbps=400, efa=True)
    assert one.slowest_link().kind == "nvlink"
    assert one.slowest_link().gbps == pytest.approx(600 / 2 * 8)
    assert two.slowest_link().kind == "efa"
    assert two.slowest_link().gbps == 400
    assert Cluster(nodes=1, gpus_per_node=4).slowest_link().kind == "pcie"


def test_a_cluster_builds_from_catalog_style_dicts():
    c = Cluster.from_dict(
        {
            "nodes": 2,
            "gpus_per_node": 4,
            "BaselineBandwidthGbps": "50.0",
            "PeakBandwidthGbps": "100",
            "EfaSupported": "True",
            "InstanceType": "g5.12xlarge",
            "placement_group": True,
            "gpu": {"gpu": "A10G", "memory_bandwidth_gbps": "600"},
        }
    )
    assert (c.world_size, c.network_gbps, c.peak_gbps, c.efa, c.placement_group) == (
        8,
        50.0,
        100.0,
        True,
        True,
    )
    assert c.gpu.memory_bandwidth_gb_s == 600
    q = CommQuery.from_cluster(1 << 20, c)
    assert (q.link_gbps, q.link_peak_gbps, q.link_kind) == (50.0, 100.0, "efa")


def test_it_needs_network_bandwidth_for_several_nodes():
    with pytest.raises(ValueError, match="network_gbps"):
        Cluster(nodes=2, gpus_per_node=1)


def test_the_learned_model_recovers_a_known_formula_and_p90_exceeds_p50():
    truth = lambda q: 1.3 if q.nodes == 1 else 1.8  # noqa: E731
    model = CommModel.fit(synthetic_observations(factor=truth), n_estimators=150)
    assert model.method == "xgboost"
    held_out = [
        CommQuery(3 << 20, 16, 2, 8, 100.0, 100.0, 20.0),
        CommQuery(3 << 22, 8, 1, 8, 2400.0, 2400.0, 20.0),
    ]
    for q in held_out:
        pred = model.predict(q)
        assert pred.p50_ms == pytest.approx(truth(q) * prior_ms(q), rel=0.1)
        assert pred.p90_ms > pred.p50_ms
        # noise σ = 0.05: p90/p50 = exp(1.2816·0.05) ≈ 1.066
        assert pred.p90_ms / pred.p50_ms == pytest.approx(1.066, abs=0.04)
        assert pred.source == "measured"


def test_it_falls_back_to_empirical_ratios_with_few_samples():
    obs = synthetic_observations(n_configs=1, reps=5)[:6]
    model = CommModel.fit(obs)
    assert model.method == "ratio"
    q = obs[2].query
    assert model.predict(q).p50_ms == pytest.approx(1.3 * prior_ms(q), rel=0.05)
    # between two measured sizes the ratio is interpolated; an unseen configuration uses the pooled ratio
    other = CommQuery(1 << 20, 64, 8, 8, 3200.0, 3200.0, 20.0)
    assert model.predict(other).p50_ms == pytest.approx(1.3 * prior_ms(other), rel=0.05)


def test_without_samples_it_returns_the_analytical_prior():
    q = CommQuery(1 << 24, 8, 1, 8, 2400.0)
    pred = CommModel.fit([]).predict(q)
    assert pred.p50_ms == pytest.approx(prior_ms(q))
    assert pred.p90_ms > pred.p50_ms
    assert pred.source == "analytical"


def test_a_saved_model_reloads_with_identical_predictions(tmp_path):
    model = CommModel.fit(synthetic_observations(), n_estimators=30)
    path = tmp_path / "comm.json"
    model.save(path)
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["version"], doc["method"]) == ("srifty-comm-model", 1, "xgboost")
    again = CommModel.load(path)
    q = CommQuery(5 << 20, 16, 2, 8, 100.0, 100.0, 20.0)
    assert again.predict(q) == model.predict(q)
    ratio = CommModel.fit(synthetic_observations()[:5])
    ratio.save(path)
    assert CommModel.load(path).predict(q) == ratio.predict(q)


def test_it_refuses_a_model_file_of_another_version(tmp_path):
    path = tmp_path / "comm.json"
    doc = CommModel().to_dict()
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="version"):
        CommModel.load(path)


def test_it_fits_link_bandwidth_and_latency_from_a_profile():
    # t = 2(n-1)/n·S/B + 2(n-1)α, n=2, B=8 Gbit/s (1e6 B/ms), α=50 µs
    sizes = [2**k for k in range(10, 26, 3)]
    doc = {
        "schema_version": 1,
        "kind": "comm",
        "backend": "gloo",
        "world_size": 2,
        "samples": [{"size_bytes": s, "median_ms": s / 1e6 + 0.1} for s in sizes],
    }
    profile = load_comm_profile(doc)
    gbps, alpha = fit_link_from_profile(profile)
    assert gbps == pytest.approx(8.0, rel=1e-6)
    assert alpha == pytest.approx(50.0, rel=1e-6)
    cluster = Cluster(nodes=1, gpus_per_node=2, intra_node_gbps=gbps, alpha_us=alpha)
    obs = observations_from_profile(profile, cluster)
    assert [o.query.size_bytes for o in obs] == sizes
    model = CommModel.fit(obs)
    assert model.predict(CommQuery.from_cluster(3 << 20, cluster)).p50_ms == pytest.approx(
        (3 << 20) / 1e6 + 0.1, rel=1e-3
    )


def test_time_ratios_are_the_nearest_measured_sizes_times_over_their_median():
    doc = {
        "schema_version": 1,
        "kind": "comm",
        "backend": "gloo",
        "world_size": 2,
        "samples": [
            {"size_bytes": 1 << 20, "times_ms": [0.5, 0.4, 4.0, 0.5, 3.5], "median_ms": 0.5},
            {"size_bytes": 16 << 20, "times_ms": [8.0, 10.0, 12.0], "median_ms": 10.0},
            {"size_bytes": 64 << 20, "median_ms": 40.0},  # summary only: no per-call times
        ],
    }
    profile = load_comm_profile(doc)
    # 3 MiB is nearer 1 MiB than 16 MiB in log size; 8 MiB nearer 16 MiB
    assert time_ratios(profile, 3 << 20) == pytest.approx((1.0, 0.8, 8.0, 1.0, 7.0))
    assert time_ratios(profile, 8 << 20) == pytest.approx((0.8, 1.0, 1.2))
    # the summary-only size is skipped: 64 MiB takes the nearest size that kept its times
    assert time_ratios(profile, 64 << 20) == pytest.approx((0.8, 1.0, 1.2))
    assert time_ratios(load_comm_profile({**doc, "samples": doc["samples"][2:]}), 1 << 20) == ()

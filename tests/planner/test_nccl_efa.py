"""EFA as deployed (issue 35 item 2): interfaces, GPUDirect RDMA or host-staged, the tree at 2-32
nodes under the aws-ofi-nccl tuner plugin, LL128 only inside NVLink nodes; and the comm p90 from
the held-out logs of its regime (item 5)."""

import csv
import json
import math

import numpy as np
import pytest

from planner import nccl_corpus
from planner.hardware import Cluster
from planner.perf.nccl import (
    TREE_EFF,
    LearnedComm,
    Topology,
    efa_interfaces,
    gpudirect_rdma,
    p90_ratio,
    prior_us,
    regime_key,
    shipped_model,
)

GIB = 1 << 30
H100_PAIR = dict(gpus_per_node=8, nodes=2, generation="Hopper", nvlink_gb_s=900, net="efa", net_gbps=3200)


def _catalog_cluster(instance_type: str, nodes: int, gpus: int, efa: bool) -> Cluster:
    with open(nccl_corpus.NETWORK_CSV, newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["InstanceType"] == instance_type)
    return Cluster.from_dict(
        {**row, "nodes": nodes, "gpus_per_node": gpus, "efa": efa, "placement_group": True}
    )


def test_gpudirect_rdma_is_on_for_p4d_p5_and_p6_and_off_for_the_other_efa_types():
    assert all(gpudirect_rdma(t) for t in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"))
    assert gpudirect_rdma("p6-b200.48xlarge")
    assert not any(gpudirect_rdma(t) for t in ("p3dn.24xlarge", "g4dn.metal", "g5.48xlarge", "g6.48xlarge"))


def test_the_catalog_gives_one_four_or_thirty_two_efa_interfaces():
    assert [efa_interfaces(t) for t in ("g5.48xlarge", "p4d.24xlarge", "p5.48xlarge", "no.such")] == [
        1,
        4,
        32,
        0,
    ]


def test_host_staged_efa_runs_at_the_slower_of_the_wire_and_one_gpus_pcie_link():
    # 4 x 100 Gbit/s at ε_efa is over a Gen3 x16 link's 10 GB/s: the PCIe link bounds the hop
    staged = Topology(1, 2, "Volta", 300, 10.0, net="efa", net_gbps=400, gdr=False)
    direct = Topology(1, 2, "Volta", 300, 10.0, net="efa", net_gbps=400, gdr=True)
    assert staged.net_bw() == 10e9
    assert direct.net_bw() == pytest.approx(0.85 * 400e9 / 8)
    # 100 Gbit/s is under the link: the wire bounds it, with or without GPUDirect
    slow = Topology(1, 2, "Turing", 0.0, 10.0, net="efa", net_gbps=50, gdr=False)
    assert slow.net_bw() == pytest.approx(0.85 * 50e9 / 8)


def test_under_the_aws_tuner_plugin_a_two_node_tree_moves_each_byte_once_between_nodes():
    topo = Topology(**H100_PAIR, nvls_allowed=False, nccl_version="2.27.7")
    assert topo.aws_tuner
    t, choice = prior_us(4 * GIB, topo)
    assert choice == "tree/Simple"
    # the tree at 0.92 × min(B_intra, B_net · N/(2(N-1))) = 0.92 × B_net at N = 2: the ring's
    # n/(2(n-1)) = 16/30 share of the network is not its bound; plus under 100 µs of latency
    bytes_us = 4 * GIB / (TREE_EFF * topo.net_bw()) * 1e6
    assert bytes_us < t < bytes_us + 100


def test_without_the_plugin_nccls_own_tuner_keeps_the_ring_for_large_messages():
    old = Topology(**H100_PAIR, nvls_allowed=False, nccl_version="2.18.5")
    p4d = Topology(8, 2, "Ampere", 600, net="efa", net_gbps=400)
    assert not old.aws_tuner and not p4d.aws_tuner
    assert prior_us(4 * GIB, old)[1] == "ring/Simple" and prior_us(4 * GIB, p4d)[1] == "ring/Simple"
    # the same bytes run slower than under the plugin's tree
    assert prior_us(4 * GIB, old)[0] > prior_us(4 * GIB, Topology(**H100_PAIR, nvls_allowed=False))[0]


def test_ll128_runs_only_inside_nvlink_nodes():
    assert "LL128" not in Topology(4, 2, "Turing", net="efa", net_gbps=100).protocols()
    assert "LL128" not in Topology(8, 1, "Ampere").protocols()  # A10G: PCIe
    assert "LL128" in Topology(8, 1, "Ampere", 600).protocols()
    assert all(
        not prior_us(s, Topology(8, n, "Ada", net="tcp", net_gbps=100))[1].endswith("LL128")
        for s in (1 << 10, 1 << 20, 1 << 28)
        for n in (1, 2, 4)
    )


def test_the_corpus_loads_the_stated_interfaces_and_the_staging_of_each_efa_sweep():
    points = nccl_corpus.load_points() + nccl_corpus.load_points(nccl_corpus.CSV_2)
    seen = {
        (p.instance_type, p.topology.net_interfaces, p.topology.gdr)
        for p in points
        if p.topology.net == "efa"
    }
    assert ("p4d.24xlarge", 1, True) in seen and ("p4d.24xlarge", 4, True) in seen
    assert ("p5.48xlarge", 32, True) in seen and ("p6-b200.48xlarge", 8, True) in seen
    assert ("p3dn.24xlarge", 1, False) in seen and ("g4dn.metal", 1, False) in seen


@pytest.mark.parametrize(
    ("instance_type", "gpus", "words"),
    [
        ("p4d.24xlarge", 8, "EFA, 4 interfaces, GPUDirect RDMA"),
        ("p5.48xlarge", 8, "EFA, 32 interfaces, GPUDirect RDMA"),
        ("g4dn.12xlarge", 4, "EFA, 1 interface, staged through host memory (no GPUDirect RDMA)"),
    ],
)
def test_a_catalog_efa_cluster_states_its_interfaces_and_staging(instance_type, gpus, words):
    topo = Topology.from_cluster(_catalog_cluster(instance_type, 2, gpus, efa=True))
    assert topo.transport == words
    assert shipped_model().estimate(25 << 20, topo).transport == words


def test_the_p90_ratio_is_the_nearest_rank_ninetieth_percentile_and_at_least_one():
    logs = [math.log(1 + i / 10) for i in range(10)]  # ratios 1.0 … 1.9
    assert p90_ratio(logs) == pytest.approx(1.9)
    assert p90_ratio([-1.0, -0.5]) == 1.0


def test_the_shipped_model_floors_p90_by_its_regimes_held_out_logs():
    model = shipped_model()
    regimes = model.meta["regime_p90_ratio"]
    assert regimes and all(v >= 1.0 for v in regimes.values())
    corpus = nccl_corpus.load_points() + nccl_corpus.load_points(nccl_corpus.CSV_2)
    assert set(regimes) <= {regime_key(p.topology) for p in corpus}
    p5 = Topology(**H100_PAIR)
    e = model.estimate(1 << 26, p5)
    assert e.p90_us >= regimes[regime_key(p5)] * e.p50_us * 0.999


def test_a_whole_curve_of_node_counts_keeps_each_counts_regime_floor_to_the_bit():
    model = LearnedComm.from_dict(
        {
            **shipped_model().to_dict(),
            "meta": {
                **shipped_model().meta,
                "regime_p90_ratio": {"efa|gdr|2": 3.0, "efa|gdr|3-8": 1.5, "efa|gdr|9-32": 2.0},
            },
        }
    )
    topo = Topology(8, 2, "Ampere", 600, net="efa", net_gbps=400)
    nodes = np.array([2, 3, 8, 9, 32, 40])
    p50, p90 = model.estimate_nodes(1 << 22, topo, nodes)
    for k, a, b in zip(nodes.tolist(), p50.tolist(), p90.tolist(), strict=True):
        one = model.estimate(1 << 22, Topology(8, k, "Ampere", 600, net="efa", net_gbps=400))
        assert (a, b) == (one.p50_us, one.p90_us)
    assert p90[0] >= 3.0 * p50[0] * 0.999 and p90[3] >= 2.0 * p50[3] * 0.999


def test_the_shipped_model_file_carries_the_regime_floors():
    doc = json.loads(nccl_corpus.NCCL_MODEL_FILE.read_text())
    assert "regime_p90_ratio" in doc["meta"] and doc["meta"]["made_by"] == "manage.py calibrate_comm"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("instance_type", "words"),
    [
        ("p4d.24xlarge", "EFA, 4 interfaces, GPUDirect RDMA (efa), 2×8 GPUs"),
        ("g5.2xlarge", "sockets over TCP (tcp), 2×1 GPUs"),
    ],
)
def test_a_plans_comm_source_states_how_nccl_moves_the_bytes(catalog, instance_type, words):
    from tests.planner_app.test_plan_comm import _oracle_and_candidate

    oracle, cand = _oracle_and_candidate(instance_type)
    source = oracle.comm_source(((cand, 2),))
    assert source.source == "learned" and source.detail.endswith(words)


def test_a_mix_counts_as_gpudirect_whichever_of_its_types_sorts_first():
    from planner.perf.nccl import gpudirect_rdma

    # the oracle names a mix's cluster "a.x+b.y" (sorted): the first type's family must not decide
    assert gpudirect_rdma("g6.48xlarge+p4de.24xlarge") and gpudirect_rdma("p4de.24xlarge+p5.48xlarge")
    assert not gpudirect_rdma("g6.48xlarge") and gpudirect_rdma("p4de.24xlarge")

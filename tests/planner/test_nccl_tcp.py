"""NCCL's socket transport over TCP on ENA (issue 35 item 1): flows, flow caps, baseline vs burst,
network cards, host copies, and which clusters are timed over it."""

import csv
import dataclasses

import pytest

from planner import nccl_corpus
from planner.hardware import Cluster
from planner.perf.nccl import (
    TCP_SOCKETS,
    Topology,
    network_cards,
    prior_us,
    shipped_model,
    tcp_sockets,
)

GIB = 1 << 30


def _catalog_cluster(instance_type: str, nodes: int) -> Cluster:
    """A cluster of ``instance_type`` with the catalog's network figures, EFA not configured."""
    with open(nccl_corpus.NETWORK_CSV, newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["InstanceType"] == instance_type)
    gpus = {"g4dn.12xlarge": 4, "p4d.24xlarge": 8}[instance_type]
    return Cluster.from_dict(
        {**row, "nodes": nodes, "gpus_per_node": gpus, "efa": False, "placement_group": True}
    )


def test_nccl_opens_two_threads_of_eight_sockets_per_peer_on_aws():
    assert TCP_SOCKETS == 16


def test_nccl_before_2_4_8_sends_on_one_socket_per_connection():
    # NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD, and their AWS defaults, came with 2.4.8
    assert [
        tcp_sockets(v) for v in ("2.3.7", "2.4.2", "2.4", "2.4.8", "2.6.4+cuda10.2", "", "not printed")
    ] == [
        1,
        1,
        1,
        16,
        16,
        16,
        16,
    ]
    old = Topology(1, 2, "Volta", net="tcp", net_gbps=100, nccl_version="2.4.2")
    new = dataclasses.replace(old, nccl_version="2.4.8")
    assert (old.tcp_wire_gbps(), new.tcp_wire_gbps()) == (10, 100)  # one 10 Gbit/s flow in a placement group


def test_ll128_is_off_where_the_bytes_between_nodes_pass_through_host_memory():
    # NCCL routes a GPU-NIC path without GPUDirect RDMA through the CPU (PATH_PHB) and enables LL128
    # only up to PATH_PXB: so not over sockets nor host-staged EFA, even between NVLink nodes
    p4d = Topology(8, 2, "Ampere", 600.0, net="efa", net_gbps=400)
    assert "LL128" in p4d.protocols()
    assert "LL128" in dataclasses.replace(p4d, nodes=1, net="none").protocols()
    assert "LL128" not in dataclasses.replace(p4d, net="tcp").protocols()
    p3dn = Topology(8, 2, "Volta", 300.0, net="efa", net_gbps=100, gdr=False)
    assert p3dn.staged and "LL128" not in p3dn.protocols()
    choices = {prior_us(1 << k, dataclasses.replace(p4d, net="tcp"))[1] for k in range(9, 32)}
    assert choices and not any(c.endswith("LL128") for c in choices)


def test_two_single_gpu_nodes_run_at_the_nic_rate_with_the_host_staging_pipelined():
    # 16 flows × 5 Gbit/s = 80 does not bind a 50 Gbit/s NIC: the wire is 50 Gbit/s at the
    # 9001-byte MTU's payload share 8949/9039; the host staging (one PCIe Gen4 link, 20 GB/s per
    # direction) overlaps it over NCCL_STEPS, so the slower of the two bounds the hop.
    topo = Topology(1, 2, "Ampere", net="tcp", net_gbps=50, placement_group=False)
    wire = 8949 / 9039 * 50e9 / 8
    assert topo.net_bw() == pytest.approx(wire, rel=1e-12)
    # two ranks: the ring moves S bytes over the network (n/(2(n-1)) = 1), plus latency and the
    # first 512 KiB chunk of each of its two inter-node steps crossing PCIe before the wire
    t, choice = prior_us(GIB, topo)
    assert choice.endswith("/Simple")
    fill = 2 * (512 << 10) / 20e9
    assert t == pytest.approx((GIB / wire + fill) * 1e6, rel=1e-3)


def test_a_message_of_one_chunk_crosses_the_host_copy_and_the_wire_in_series():
    topo = Topology(1, 2, "Ampere", net="tcp", net_gbps=50, placement_group=False)
    wire, stage = topo.net_bw(), topo.efa_stage_bw()

    def simple_ring(size: int) -> float:
        t, choice = prior_us(size, topo)
        assert choice == "ring/Simple"
        return t

    # each rank's half fits in one 512 KiB step: every added byte pays both stages
    one, two = 512 << 10, 1 << 20
    assert simple_ring(two) - simple_ring(one) == pytest.approx((two - one) * (1 / wire + 1 / stage) * 1e6)
    # many steps: the copy overlaps the wire and an added byte pays the slower stage only
    many, more = 64 << 20, 128 << 20
    assert simple_ring(more) - simple_ring(many) == pytest.approx((more - many) / wire * 1e6)


def test_a_cluster_placement_group_raises_the_flow_cap_from_five_to_ten_gbits():
    outside = Topology(1, 2, "Ampere", net="tcp", net_gbps=200, placement_group=False)
    inside = Topology(1, 2, "Ampere", net="tcp", net_gbps=200, placement_group=True)
    assert (outside.tcp_wire_gbps(), inside.tcp_wire_gbps()) == (16 * 5, 16 * 10)
    assert prior_us(GIB, inside)[0] < prior_us(GIB, outside)[0]


def test_a_sustained_run_counts_the_baseline_of_an_up_to_instance_and_a_benchmark_its_burst():
    burst = Topology(1, 2, "Ampere", net="tcp", net_gbps=25, net_baseline_gbps=5)
    sustained = Topology(1, 2, "Ampere", net="tcp", net_gbps=25, net_baseline_gbps=5, sustained=True)
    assert (burst.tcp_wire_gbps(), sustained.tcp_wire_gbps()) == (25, 5)
    assert prior_us(GIB, sustained)[0] > 3 * prior_us(GIB, burst)[0]


def test_one_ena_interface_gets_one_network_cards_share():
    assert (network_cards("p4d.24xlarge"), network_cards("g4dn.12xlarge"), network_cards("no.such")) == (
        4,
        1,
        1,
    )
    topo = Topology(8, 2, "Ampere", nvlink_gb_s=600, net="tcp", net_gbps=400, net_cards=4)
    assert topo.tcp_wire_gbps() == 100


def test_a_plan_on_an_up_to_instance_counts_its_baseline():
    cluster = Cluster(nodes=2, gpus_per_node=1, network_gbps=5.0, peak_gbps=25.0, instance_type="g4dn.xlarge")
    topo = Topology.from_cluster(cluster)
    assert topo.sustained and topo.tcp_wire_gbps() == 5


@pytest.mark.parametrize(("instance_type", "nodes"), [("g4dn.12xlarge", 4), ("p4d.24xlarge", 2)])
def test_a_cluster_without_efa_is_timed_over_nccl_sockets(instance_type, nodes):
    topo = Topology.from_cluster(_catalog_cluster(instance_type, nodes))
    assert (topo.net, topo.interconnect, topo.transport) == ("tcp", "tcp", "sockets over TCP")
    estimate = shipped_model().estimate(25 << 20, topo)
    assert estimate.transport == "sockets over TCP"
    assert estimate.source == "learned"  # the shipped prior × correction, not a ring formula
    assert estimate.choice == prior_us(25 << 20, topo, shipped_model().params)[1]


def test_the_p4d_runs_without_efa_are_loaded_as_tcp_over_one_of_four_cards():
    tcp = [p for p in nccl_corpus.load_points(nccl_corpus.CSV_2) if p.topology.net == "tcp"]
    assert len({p.sweep for p in tcp}) == 2  # HyperPod with EFA disabled, EC2 VMs on one ENA interface
    assert {(p.instance_type, p.topology.net_cards, p.topology.tcp_wire_gbps()) for p in tcp} == {
        ("p4d.24xlarge", 4, 100.0)
    }
    assert not nccl_corpus.interconnect_is_efa("TCP (non-EFA) on the same hosts, EFA disabled")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("instance_type", "nodes", "gpus"), [("g4dn.12xlarge", 4, 4), ("p4d.24xlarge", 2, 8)]
)
def test_a_plan_without_efa_states_sockets_over_tcp_and_the_model_that_timed_it(
    catalog, instance_type, nodes, gpus
):
    # issue 35, "Done when" item 2: the plan's comm source names the transport and the learned
    # model, and the bucket times the simulator overlaps are that model's estimates over TCP
    from tests.planner_app.test_plan_comm import _oracle_and_candidate

    oracle, cand = _oracle_and_candidate(instance_type)
    config = ((dataclasses.replace(cand, efa=False), nodes),)
    source = oracle.comm_source(config)
    assert source.source == "learned"
    assert source.detail.startswith("NCCL prior × correction learned on published and profiled curves")
    assert source.detail.endswith(f"sockets over TCP (tcp), {nodes}×{gpus} GPUs")
    cluster = oracle.cluster(config)
    topo = Topology.from_cluster(cluster)
    assert (topo.net, topo.nodes, topo.gpus_per_node) == ("tcp", nodes, gpus)
    buckets = oracle.workload.bucket_specs(64)
    for bucket, time in zip(buckets, oracle._comm(cluster, buckets), strict=True):
        estimate = oracle.comm.estimate(bucket.size_bytes, topo)
        assert estimate.transport == "sockets over TCP"
        assert time.p50_ms == pytest.approx(estimate.p50_us / 1e3)


def test_the_socket_transport_is_fitted_where_train_sweeps_run_over_tcp_and_left_at_its_documented_values_elsewhere():
    from planner.perf.nccl import DEFAULT_PARAMS, TCP_FRAME_EFF, fit_prior

    tcp = [p for p in nccl_corpus.load_points(nccl_corpus.CSV_2) if p.topology.net == "tcp"]
    efa = [p for p in nccl_corpus.load_points() if p.topology.net == "efa"]
    as_tuples = [(p.size_bytes, p.topology, p.measured_us, p.sweep) for p in efa + tcp]
    with_tcp = fit_prior(as_tuples)
    without = fit_prior([t for t in as_tuples if t[1].net != "tcp"])
    assert without.eps_tcp == pytest.approx(TCP_FRAME_EFF) and without.lat_tcp == pytest.approx(1.0)
    # the p4d runs over sockets deliver well under the wire rate (8 GB/s and less of 12.4)
    assert with_tcp.eps_tcp < 0.9 * DEFAULT_PARAMS.eps_tcp
    big = max(tcp, key=lambda p: p.size_bytes)
    assert prior_us(big.size_bytes, big.topology, with_tcp)[0] > prior_us(big.size_bytes, big.topology)[0]


def test_the_tcp_hop_latency_scales_with_its_fitted_factor():
    from planner.perf.nccl import DEFAULT_PARAMS

    topo = Topology.from_cluster(_catalog_cluster("g4dn.12xlarge", 2))
    slow = dataclasses.replace(DEFAULT_PARAMS, lat_tcp=3.0)
    assert prior_us(8, topo, slow)[0] > 2 * prior_us(8, topo)[0]

"""The NCCL-shaped all-reduce prior, its learned correction and the curves' split."""

import csv
import json
import math

import pytest

from planner import nccl_corpus
from planner.perf.nccl import LearnedComm, Topology, prior_us, regime_key

A100_NODE = Topology(8, 1, "Ampere", nvlink_gb_s=600)
H100_NODE = Topology(8, 1, "Hopper", nvlink_gb_s=900)
P4D_PAIR = Topology(8, 2, "Ampere", nvlink_gb_s=600, net="efa", net_gbps=400)


def test_nccl_picks_ll_for_tiny_messages_and_simple_for_large_ones():
    assert prior_us(8, A100_NODE)[1].endswith("/LL")
    assert prior_us(1 << 30, A100_NODE)[1].endswith("/Simple")


def test_time_grows_with_the_message():
    times = [prior_us(1 << k, P4D_PAIR)[0] for k in range(3, 33)]
    assert times == sorted(times)


def test_large_messages_run_at_the_efa_bandwidth_across_nodes():
    t, _ = prior_us(1 << 30, P4D_PAIR)
    busbw = (1 << 30) / (t / 1e6) * 2 * 15 / 16 / 1e9
    assert busbw == pytest.approx(0.85 * 400 / 8, rel=0.05)


def test_nvls_only_on_hopper_nvswitch_nodes_that_allow_it():
    assert prior_us(1 << 30, H100_NODE)[1].startswith("nvls")
    assert not prior_us(1 << 30, A100_NODE)[1].startswith("nvls")
    off = Topology(8, 1, "Hopper", nvlink_gb_s=900, nvls_allowed=False)
    assert prior_us(1 << 30, off)[1].startswith("ring")


def test_tcp_flows_are_capped_outside_a_cluster_placement_group():
    # NCCL opens 16 sockets per peer on ENA: 16 × 5 Gbit/s = 80 outside a placement group binds
    # a 100 Gbit/s NIC; 16 × 10 inside does not (the host staging, 20 GB/s of PCIe Gen4,
    # overlaps the wire and binds neither).
    inside = Topology(1, 2, "Ampere", net="tcp", net_gbps=100, placement_group=True)
    outside = Topology(1, 2, "Ampere", net="tcp", net_gbps=100, placement_group=False)
    assert (inside.tcp_wire_gbps(), outside.tcp_wire_gbps()) == (100, 80)
    assert prior_us(1 << 30, outside)[0] / prior_us(1 << 30, inside)[0] == pytest.approx(100 / 80, rel=0.01)


def test_every_sweep_of_the_curves_is_in_the_split_once():
    split = nccl_corpus.load_split()
    with open(nccl_corpus.CSV, newline="") as fh:
        sweeps = {nccl_corpus.sweep_id(r) for r in csv.DictReader(fh)}
    train, val = set(split["train_sweeps"]), set(split["validation_sweeps"])
    assert train.isdisjoint(val) and train | val == sweeps
    assert split["csv_sha256"] == nccl_corpus.digest()


def test_a_fit_refuses_validation_sweeps():
    split = nccl_corpus.load_split()
    points = [p for p in nccl_corpus.load_points() if p.sweep in split["validation_sweeps"]][:3]
    with pytest.raises(ValueError, match="not train sweeps"):
        nccl_corpus.train_points(points, split)


def test_the_shipped_correction_was_fitted_on_train_sweeps_only():
    doc = json.loads(nccl_corpus.NCCL_MODEL_FILE.read_text())
    model = LearnedComm.from_dict(doc)
    split = nccl_corpus.load_split()
    assert model.trees.trees and set(model.meta["sweeps"]) <= set(split["train_sweeps"])
    p50, p90, source = model.predict_us(1 << 24, P4D_PAIR)
    assert source == "learned" and p90 > p50 > 0


@pytest.mark.django_db
def test_calibrate_comm_writes_the_model(tmp_path):
    from django.core.management import call_command

    out = tmp_path / "nccl.json"
    call_command("calibrate_comm", "--output", str(out))
    assert LearnedComm.from_dict(json.loads(out.read_text())).meta["made_by"] == "manage.py calibrate_comm"


def test_a_row_that_says_no_efa_runs_over_tcp():
    assert nccl_corpus.interconnect_is_efa('EFA inter-node ("Selected Provider is efa")')
    assert not nccl_corpus.interconnect_is_efa(
        'TCP sockets over ENA eth0 (NCCL "Using network Socket", no EFA)'
    )
    g5 = [p for p in nccl_corpus.load_points() if p.instance_type == "g5.2xlarge"]
    assert g5 and {p.topology.net for p in g5} == {"tcp"}


def test_an_efa_type_counts_its_stated_network_performance():
    from planner.hardware import efa_gbps

    assert (efa_gbps("3200 Gigabit"), efa_gbps("4x 100 Gigabit"), efa_gbps("Up to 10 Gigabit")) == (
        3200,
        400,
        0,
    )
    # p6-b200's cards report 1,600 Gbit/s; its 8 x 400 Gbit/s EFA NICs carry NCCL's traffic
    assert nccl_corpus.network_gbps(1600.0, 1600.0, "3200 Gigabit", efa=True) == 3200
    assert nccl_corpus.network_gbps(10.0, 5.0, "Up to 10 Gigabit", efa=False) == 10
    b200 = {
        p.topology.net_gbps
        for p in nccl_corpus.load_points()
        if p.instance_type == "p6-b200.48xlarge" and p.topology.nodes > 1
    }
    assert b200 == {3200.0}


def test_a_topology_no_train_sweep_is_near_gets_the_held_out_p90_floor():
    model = LearnedComm.from_dict(json.loads(nccl_corpus.NCCL_MODEL_FILE.read_text()))
    far = model.meta["far_p90_ratio"]
    assert far > 1.0
    # host-staged EFA between pairs of one GPU: no train sweep near it, no held-out log of its regime
    host_pairs = Topology(1, 2, "Turing", 0.0, 10.0, net="efa", net_gbps=100.0, gdr=False)
    assert regime_key(host_pairs) not in model.meta["regime_p90_ratio"]
    e = model.estimate(1 << 24, host_pairs)
    assert e.near_points == 0 and e.p90_us >= far * e.p50_us * 0.999
    # a regime with held-out logs takes its own floor, near train points or not
    near = model.estimate(1 << 24, P4D_PAIR)
    ratio = model.meta["regime_p90_ratio"][regime_key(P4D_PAIR)]
    assert near.near_points > 0 and near.p90_us >= ratio * near.p50_us * 0.999


def test_held_out_ratios_predict_each_sweep_from_a_fit_without_it(monkeypatch):
    from planner.perf import nccl

    split = nccl_corpus.load_split()
    points = [
        (p.size_bytes, p.topology, p.measured_us, p.sweep)
        for p in nccl_corpus.load_points()
        if p.sweep in split["train_sweeps"]
    ]
    seen: list[set[str]] = []
    real_fit = nccl.fit

    def spy(pts, rounds=150, params=None, held_out=True):
        seen.append({p[3] for p in pts})
        return real_fit(pts, rounds, params, held_out)

    monkeypatch.setattr(nccl, "fit", spy)
    ratios = nccl.held_out_ratios(points, rounds=5)
    sweeps = {p[3] for p in points}
    assert len(seen) == len(sweeps) and all(len(sweeps - s) == 1 for s in seen)
    assert {next(iter(sweeps - s)) for s in seen} == sweeps  # each sweep left out once
    assert len(ratios) >= 60 * len(sweeps) * 0.5 and all(math.isfinite(r) for r in ratios)


def test_the_prior_never_falls_as_nodes_are_added():
    """What Oracle.comm_floor_prefix_min's early stop rests on: for every GPU generation, GPUs
    per node, link and message size, the prior at n + 1 nodes is at least the prior at n (n >= 2)."""
    sizes = [8, 4096, 1 << 20, 25 << 20, 1 << 30]
    checked = 0
    for generation, nvlink in (
        ("Volta", 300),
        ("Turing", 0),
        ("Ampere", 600),
        ("Ada", 0),
        ("Hopper", 900),
        ("Blackwell", 1800),
    ):
        for gpn in (1, 4, 8):
            for net, gbps in (("efa", 100), ("efa", 400), ("efa", 3200), ("tcp", 25), ("tcp", 100)):
                for placement in (True, False):
                    for size in sizes:
                        times = [
                            prior_us(
                                size,
                                Topology(
                                    gpn,
                                    n,
                                    generation,
                                    nvlink,
                                    net=net,
                                    net_gbps=gbps,
                                    placement_group=placement,
                                ),
                            )[0]
                            for n in range(2, 130)
                        ]
                        assert all(b >= a for a, b in zip(times, times[1:], strict=False)), (
                            generation,
                            gpn,
                            net,
                            gbps,
                            size,
                        )
                        checked += 1
    assert checked == 6 * 3 * 5 * 2 * 5


def test_the_least_correction_is_below_every_estimate_over_the_prior():
    from planner.perf.nccl import least_correction, shipped_model

    model = shipped_model()
    low = math.exp(least_correction(model))
    for topo in (A100_NODE, H100_NODE, P4D_PAIR, Topology(1, 4, "Ampere", net="tcp", net_gbps=25)):
        for size in (8, 1 << 20, 25 << 20, 1 << 30):
            prior, _ = prior_us(size, topo, model.params)
            assert model.estimate(size, topo).p50_us >= low * prior * (1 - 1e-12)


def test_the_least_correction_of_a_topology_bounds_the_shipped_trees_at_every_node_count_and_is_tighter():
    import dataclasses as dc

    from planner.perf.nccl import features, least_correction, prior_us

    model = LearnedComm.from_dict(json.loads(nccl_corpus.NCCL_MODEL_FILE.read_text()))
    loose = least_correction(model)
    tighter = 0
    for topo in (P4D_PAIR, dc.replace(P4D_PAIR, net="tcp"), dc.replace(P4D_PAIR, gpus_per_node=4)):
        for size in (1 << 12, 1 << 22, 25 << 20, 1 << 28):
            bound = least_correction(model, size, topo)
            assert bound >= loose
            tighter += bound > loose + 1e-9
            for n in (2, 3, 5, 8, 16, 64, 512):
                t = dc.replace(topo, nodes=n)
                r = model.trees(features(size, t, prior_us(size, t, model.params)[0]))
                assert max(-model.clip, min(model.clip, r)) >= bound - 1e-9
    assert tighter > 0

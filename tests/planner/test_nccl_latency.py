"""NCCL's latency tables per version band and its protocol weights (src/graph/tuning.cc, read from
the published binaries of 2.13, 2.14, 2.18 and 2.27; issue 35)."""

import pytest

from planner.perf.nccl import (
    NCCL_LATENCY,
    PROTO_BW,
    Topology,
    _algorithms,
    latency_band,
    prior_us,
)


def _choices(topo: Topology) -> dict[str, tuple[float, float]]:
    """``{"algorithm/protocol": (latency µs, algbw bytes/s)}`` under the default parameters."""
    from planner.perf.nccl import DEFAULT_PARAMS

    return {f"{a}/{p}": (lat, bw) for a, p, lat, bw, _, _ in _algorithms(topo, DEFAULT_PARAMS)}


def _pair(version: str) -> Topology:
    return Topology(8, 2, "Ampere", 600.0, net="efa", net_gbps=400, nccl_version=version)


@pytest.mark.parametrize(
    ("version", "band"),
    [
        ("2.6.4+cuda10.2", 2.13),
        ("2.12.7+cuda11.4", 2.13),
        ("2.14.3", 2.14),
        ("2.16.5", 2.14),
        ("2.18.3", 2.18),
        ("2.26.2", 2.18),
        ("2.27.7-1 (from Dockerfile)", 2.27),
        ("2.30.7", 2.27),
        ("not printed (image nccl-tests:latest)", 2.27),
        ("", 2.27),
    ],
)
def test_a_version_takes_the_tables_of_the_latest_band_at_or_before_it(version, band):
    assert latency_band(version) == band


def test_the_ring_of_two_nodes_counts_nccls_hops_of_its_band():
    # 16 ranks, 4 inter-node steps of the NET row, 26 NVLink steps; Simple's base 8.4 µs
    for version, net_hop, nv_hop in (("2.13.4", 28.0, 3.4), ("2.14.3", 9.6, 3.4), ("2.27.7", 14.0, 3.4)):
        lat, _ = _choices(_pair(version))["ring/Simple"]
        assert lat == pytest.approx(8.4 + 26 * nv_hop + 4 * net_hop)


def test_the_tree_before_2_18_pays_a_chunk_per_hop_and_no_base():
    old = _choices(_pair("2.13.4"))["tree/Simple"][0]
    new = _choices(_pair("2.27.7"))["tree/Simple"][0]
    assert old == pytest.approx(2 * (7 * 28.0 + 1 * 28.0))
    assert new == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14.0))


def test_nccl_weighs_ll_at_a_quarter_on_the_ring_and_one_over_three_point_eight_on_the_tree():
    choices = _choices(_pair("2.27.7"))
    assert choices["ring/LL"][1] / choices["ring/Simple"][1] == pytest.approx(1 / 4)
    assert choices["tree/LL"][1] / choices["tree/Simple"][1] == pytest.approx(1 / 3.8)
    assert choices["tree/LL128"][1] / choices["tree/Simple"][1] == pytest.approx(120 / 128)
    assert PROTO_BW["ring"]["LL128"] == 0.92


def test_nvls_comes_with_nccl_2_17_and_costs_its_nvlink_hop_in_2_27():
    node = dict(gpus_per_node=8, nodes=1, generation="Hopper", nvlink_gb_s=900.0)
    assert not Topology(**node, nccl_version="2.16.5").nvls()
    assert Topology(**node, nccl_version="2.18.3").nvls()
    lat, _ = _choices(Topology(**node, nccl_version="2.27.7"))["nvls/Simple"]
    assert lat == NCCL_LATENCY[2.27]["nvlink"]["nvls"]["Simple"] == 25.0
    assert _choices(Topology(**node, nccl_version="2.18.3"))["nvls/Simple"][0] == 23.0


def test_a_tiny_message_takes_a_low_latency_protocol_and_a_large_one_simple():
    topo = _pair("2.27.7")
    assert prior_us(8, topo)[1].endswith("/LL")
    assert prior_us(1 << 30, topo)[1].endswith("/Simple")

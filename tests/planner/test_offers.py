"""Candidate loading (CUDA-only, prices per market/zone) and dominance pruning."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from planner.offers import (
    Candidate,
    bucket_for_frequency,
    find_dominated,
    is_cuda_accelerator,
    load_candidates,
    load_network,
    normalise_quotas,
    prune_dominated,
    quota_class,
)

FIXTURES = Path(__file__).resolve().parents[2] / "catalog" / "fixtures"
NV = "{'Gpus': [{'Name': '%s', 'Manufacturer': 'NVIDIA', 'Count': %d, 'MemoryInfo': {'SizeInMiB': 16384}}]}"


def row(
    itype,
    name="T4",
    count=1.0,
    price="0.526",
    spot="0.2",
    region="us-east-1",
    zone="use1-az1",
    info=None,
    vcpus=4.0,
    arch="x86_64",
):
    return {
        "InstanceType": itype,
        "AcceleratorName": name,
        "AcceleratorCount": str(count),
        "vCPUs": str(vcpus),
        "MemoryGiB": "16",
        "GpuInfo": NV % (name, max(1, int(count))) if info is None else info,
        "Price": price,
        "SpotPrice": spot,
        "Region": region,
        "AvailabilityZone": zone,
        "Arch": arch,
    }


NET = {"g4dn.xlarge": (5.0, False), "g4dn.12xlarge": (50.0, True)}


def test_loader_keeps_only_whole_nvidia_gpus():
    rows = [
        row("g4dn.xlarge"),
        row(
            "dl1.24xlarge",
            "Gaudi HL-205",
            8,
            info="{'Gpus': [{'Name': 'Gaudi HL-205', 'Manufacturer': 'Habana'}]}",
        ),
        row("inf2.xlarge", "Inferentia2", 1, info="{'Gpus': [{'Count': 1, 'Name': 'Inferentia2'}]}"),
        row("trn1.2xlarge", "Trainium", 1, info="{'Gpus': [{'Count': 1, 'Name': 'Trainium'}]}"),
        row("f1.2xlarge", "Virtex UltraScale (VU9P)", 1, info=""),
        row(
            "g4ad.xlarge",
            "Radeon Pro V520",
            1,
            info="{'Gpus': [{'Name': 'Radeon Pro V520', 'Manufacturer': 'AMD'}]}",
        ),
        row("g6f.large", "L4", 0.125),
    ]
    got = load_candidates(rows, NET)
    assert {c.instance_type for c in got} == {"g4dn.xlarge"}
    assert (
        is_cuda_accelerator("A100") and not is_cuda_accelerator("Inferentia2") and not is_cuda_accelerator("")
    )


def test_spot_uses_the_cheapest_zone_and_on_demand_the_region_price():
    rows = [
        row("g4dn.xlarge", spot="0.30", zone="use1-az1"),
        row("g4dn.xlarge", spot="0.21", zone="use1-az4"),
        row("g4dn.xlarge", spot="0.25", zone="use1-az2"),
    ]
    got = {c.market: c for c in load_candidates(rows, NET)}
    assert got["spot"].price_per_hour == pytest.approx(0.21) and got["spot"].zone == "use1-az4"
    assert got["on-demand"].price_per_hour == pytest.approx(0.526) and got["on-demand"].zone is None
    assert got["on-demand"].interruption_bucket == 0
    assert got["spot"].network_gbps == 5.0 and got["spot"].efa is False


def test_empty_prices_are_skipped_per_market_and_local_zones_unless_asked():
    rows = [
        row("g4dn.xlarge", price="", spot="0.2"),
        row("g4dn.12xlarge", price="3.9", spot=""),
        row("g4dn.xlarge", spot="0.01", zone="use1-atl2-az1"),
    ]
    got = load_candidates(rows, NET)
    assert {(c.instance_type, c.market) for c in got} == {
        ("g4dn.xlarge", "spot"),
        ("g4dn.12xlarge", "on-demand"),
    }
    assert next(c for c in got if c.market == "spot").price_per_hour == pytest.approx(0.2)
    with_lz = load_candidates(rows, NET, include_local_zones=True)
    assert next(c for c in with_lz if c.market == "spot").zone == "use1-atl2-az1"


def test_filters_by_region_market_model_and_arch():
    rows = [
        row("g4dn.xlarge", region="us-east-1"),
        row("g4dn.xlarge", region="eu-west-1", zone="euw1-az1"),
        row("g5g.xlarge", "T4g", arch="arm64"),
    ]
    assert {c.region for c in load_candidates(rows, NET, regions=["eu-west-1"])} == {"eu-west-1"}
    assert {c.market for c in load_candidates(rows, NET, allow_spot=False)} == {"on-demand"}
    assert {c.market for c in load_candidates(rows, NET, allow_on_demand=False)} == {"spot"}
    assert {c.gpu_model for c in load_candidates(rows, NET, gpu_models=["T4g"])} == {"T4g"}
    assert {c.arch for c in load_candidates(rows, NET, archs=["x86_64"])} == {"x86_64"}


def test_snake_case_rows_and_inline_network_columns_work():
    rows = [
        {
            "instance_type": "g4dn.12xlarge",
            "accelerator_name": "T4",
            "accelerator_count": 4,
            "vcpus": 48,
            "price": 3.912,
            "spot_price": 1.5,
            "region": "us-west-2",
            "availability_zone": "usw2-az1",
            "network_gbps": 50,
            "efa": True,
            "interruption_frequency": 12.0,
        }
    ]
    got = {c.market: c for c in load_candidates(rows)}
    assert got["on-demand"].gpus_per_node == 4 and got["on-demand"].vcpus == 48
    assert got["spot"].network_gbps == 50 and got["spot"].efa is True
    assert got["spot"].interruption_bucket == 2


def test_interruption_bucket_comes_from_the_mapping_or_the_default():
    rows = [row("g4dn.xlarge")]
    assert load_candidates(rows, NET, default_spot_bucket=4)[-1].interruption_bucket == 4
    got = load_candidates(rows, NET, interruption_buckets={("g4dn.xlarge", "us-east-1"): 1})
    assert next(c for c in got if c.market == "spot").interruption_bucket == 1
    assert [bucket_for_frequency(p) for p in (0, 4.9, 5, 12, 19.9, 20, 60)] == [0, 0, 1, 2, 3, 4, 4]


def test_the_fixture_catalog_loads_nvidia_only():
    with open(FIXTURES / "aws_instance_network.csv", newline="") as f:
        net = load_network(csv.DictReader(f))
    with open(FIXTURES / "aws_gpu_instances.csv", newline="") as f:
        cands = load_candidates(csv.DictReader(f), net)
    names = {c.gpu_model for c in cands}
    assert {"A100", "H100", "T4", "L4", "A10G", "V100"} <= names
    assert not any(w in n for n in names for w in ("Gaudi", "Inferentia", "Trainium", "Virtex", "Radeon"))
    assert {c.market for c in cands} == {"spot", "on-demand"}
    assert len({c.region for c in cands}) >= 20
    assert all(c.gpus_per_node >= 1 and c.price_per_hour > 0 for c in cands)
    assert len({c.key for c in cands}) == len(cands)
    p4d = next(c for c in cands if c.instance_type == "p4d.24xlarge")
    assert p4d.network_gbps == 400 and p4d.efa and p4d.quota_class == "P"
    b200 = next(c for c in cands if c.instance_type == "p6-b200.48xlarge")
    assert b200.network_gbps == 3200 and b200.efa  # its NetworkPerformance, not the cards' 1,600


def test_quota_classes_group_p_and_g_families():
    assert quota_class("p4d") == quota_class("p5.48xlarge") == quota_class("P") == "P"
    assert quota_class("g5") == quota_class("gr6.4xlarge") == quota_class("vt1") == quota_class("G") == "G"
    assert quota_class("p6-b200.48xlarge") == "P"
    assert quota_class("dl1") == "DL"
    assert normalise_quotas({"p4d": 96, "P": 192, "g5": 64}) == {"P": 96.0, "G": 64.0}


# ----------------------------------------------------------------------------------- dominance
def c(
    itype="a.x",
    price=1.0,
    vcpus=8,
    net=10.0,
    efa=False,
    region="r1",
    market="on-demand",
    bucket=0,
    family="g5",
    max_count=None,
) -> Candidate:
    return Candidate(
        instance_type=itype,
        family=family,
        region=region,
        market=market,
        zone=None,
        price_per_hour=price,
        gpus_per_node=1,
        gpu_model="X",
        vcpus=vcpus,
        network_gbps=net,
        efa=efa,
        interruption_bucket=bucket,
        max_count=max_count,
    )


CURVES = {"fast": [10.0, 19.0, 27.0], "slow": [8.0, 15.0, 21.0], "mixed": [12.0, 15.0, 18.0]}


def test_a_faster_cheaper_equivalent_candidate_dominates():
    a, b = c("fast", price=1.0), c("slow", price=1.2)
    assert find_dominated([a, b], CURVES) == {b: a}
    assert prune_dominated([a, b], CURVES) == [a]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"region": "r2"}, "other region"),
        ({"market": "spot"}, "other market"),
        ({"family": "p4d"}, "other quota class"),
        ({"vcpus": 16}, "uses more quota per node"),
        ({"net": 5.0}, "slower link"),
        ({"price": 1.3}, "dearer"),
        ({"max_count": 2}, "less availability"),
    ],
)
def test_no_dominance_unless_usable_in_the_same_situations(change, why):
    a = c(**{"itype": "fast", "price": 1.0, **change})
    b = c("slow", price=1.2)
    assert b not in find_dominated([a, b], CURVES), why


def test_riskier_spot_does_not_dominate_and_crossing_curves_do_not_either():
    a = c("fast", market="spot", bucket=3)
    b = c("slow", market="spot", bucket=1, price=1.2)
    assert find_dominated([a, b], CURVES) == {}
    # faster on one node, slower on three: not comparable
    assert find_dominated([c("mixed", price=0.5), c("slow")], CURVES) == {}


def test_availability_caps_matter_more_when_mixes_are_allowed():
    a, b = c("fast", max_count=3), c("slow", max_count=2, price=1.2)
    assert find_dominated([a, b], CURVES, max_nodes=3) == {b: a}
    # a mix of 3 A + 2 B would need 5 A nodes after replacement: A must be uncapped up to max_nodes
    assert find_dominated([a, b], CURVES, max_nodes=4, mixes=True) == {}
    assert find_dominated([a, b], CURVES, max_nodes=3, mixes=True) == {b: a}


def test_exact_ties_keep_exactly_one_and_chains_point_at_a_kept_candidate():
    t1, t2 = c("fast"), c("twin")
    dropped = find_dominated([t1, t2], dict(CURVES, twin=CURVES["fast"]))
    assert len(dropped) == 1 and next(iter(dropped.values())) in (t1, t2)
    a, b, d = c("fast", price=1.0), c("mid", price=1.1), c("slow", price=1.2)
    chain = {"fast": [3.0, 5.0], "mid": [2.0, 4.0], "slow": [1.0, 3.0]}
    got = find_dominated([d, b, a], chain)
    assert got == {b: a, d: a}


def test_a_throughput_function_can_be_given_instead_of_curves():
    a, b = c("fast"), c("slow", price=2.0)
    fn = lambda cand, n, g: {"fast": 10.0, "slow": 5.0}[cand.instance_type] * n * g  # noqa: E731
    assert prune_dominated([a, b], fn, max_nodes=4, batches=(1, 2)) == [a]
    with pytest.raises(ValueError):
        find_dominated([a, b], fn)


@pytest.mark.parametrize("mixes", [False, True])
def test_the_pairwise_criteria_of_a_group_are_each_pairs_criteria(mixes):
    """find_dominated builds the static criteria of a whole region/market/quota group at once;
    every entry is what _static_dominates says of that pair (the catalog's own offers)."""
    from planner.offers import _static_dominates, _static_matrix

    with open(FIXTURES / "aws_instance_network.csv", newline="") as f:
        net = load_network(csv.DictReader(f))
    with open(FIXTURES / "aws_gpu_instances.csv", newline="") as f:
        cands = load_candidates(csv.DictReader(f), net)
    checked = found = 0
    for region in ("us-east-1", "eu-west-1"):
        for market in ("on_demand", "spot"):
            group = [c for c in cands if c.region == region and c.market == market]
            group = [c for c in group if c.quota_class == group[0].quota_class]
            for max_nodes in (None, 8):
                m = _static_matrix(group, max_nodes, mixes)
                for i, a in enumerate(group):
                    for j, b in enumerate(group):
                        expected = a is not b and _static_dominates(a, b, max_nodes, mixes)
                        assert bool(m[i, j]) == expected, (a.key, b.key)
                        checked += 1
                        found += expected
    assert checked > 1000 and found > 10

"""cloud.account.quota_class against AWS's grouping of the EC2 vCPU quotas."""

from __future__ import annotations

import pytest

from cloud import account


@pytest.mark.parametrize(
    ("instance_type", "quota"),
    [
        ("p5.48xlarge", "P"),
        ("g6e.xlarge", "G"),
        ("g5g.xlarge", "G"),
        ("vt1.3xlarge", "G"),  # "Running On-Demand G and VT instances"
        ("f1.2xlarge", "F"),
        ("x2idn.16xlarge", "X"),
        ("x1e.xlarge", "X"),
        ("inf2.xlarge", "Inf"),
        ("trn1n.32xlarge", "Trn"),
        ("dl1.24xlarge", "DL"),
        ("hpc7g.16xlarge", "HPC"),
        ("u-6tb1.metal", "U"),
        ("u7i-12tb.224xlarge", "U"),
        ("a1.large", "Standard"),
        ("c7i.large", "Standard"),
        ("d3.xlarge", "Standard"),
        ("h1.2xlarge", "Standard"),
        ("i4i.large", "Standard"),
        ("im4gn.large", "Standard"),
        ("m7g.large", "Standard"),
        ("r6i.large", "Standard"),
        ("t3.micro", "Standard"),
        ("z1d.large", "Standard"),
    ],
)
def test_each_type_counts_against_the_quota_aws_groups_its_family_in(instance_type, quota):
    assert account.quota_class(instance_type) == quota


def test_every_class_but_the_on_demand_only_ones_has_an_on_demand_and_a_spot_quota_code():
    classes = {cls for _, cls in account.EC2_QUOTAS}
    assert classes == {"P", "G", "F", "X", "Inf", "Trn", "DL", "HPC", "U", "Standard"}
    for cls in classes - {"HPC", "U"}:
        assert ("on-demand", cls) in account.EC2_QUOTAS and ("spot", cls) in account.EC2_QUOTAS
    assert len(set(account.EC2_QUOTAS.values())) == len(account.EC2_QUOTAS)

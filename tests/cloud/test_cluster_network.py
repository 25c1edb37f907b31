"""``cloud`` for training clusters on moto: the DLAMI from its public SSM parameter, the
members-only security group, EFA interfaces on RunInstances, type offerings, subnets, quota
classes and S3 workdir archives. What moto lacks (``/aws`` SSM names) is answered at the
botocore boundary (``tests/launcher/fake_aws.py``)."""

from __future__ import annotations

import pytest
import requests

from cloud import account, ec2, s3, session
from tests.launcher.fake_aws import DLAMI_X86, LaunchAws

REGION = "us-east-1"


@pytest.fixture
def fake(aws, aws_hooks) -> LaunchAws:
    made = LaunchAws(aws)
    aws_hooks.extend(made.handlers())
    return made


def test_the_dlami_comes_from_the_first_ssm_parameter_that_exists(fake):
    fake.ssm[ec2.DLAMI_PARAMETERS[1].format(arch="x86_64")] = "ami-0000000000000b2"
    assert ec2.dlami_image(REGION) == ec2.Image(
        "ami-0000000000000b2", ec2.DLAMI_PARAMETERS[1].format(arch="x86_64")
    )
    fake.ssm[DLAMI_X86] = "ami-0000000000000a1"  # the newest flavour wins
    assert ec2.dlami_image(REGION).image_id == "ami-0000000000000a1"
    with pytest.raises(ValueError):
        ec2.dlami_image(REGION, "sparc")


def test_without_a_parameter_the_image_search_is_the_fallback(fake):
    found = ec2.dlami_image(REGION, "x86_64")  # moto has no /aws/service/deeplearning parameter
    assert found.image_id.startswith("ami-") and found.source == "describe_images (x86_64)"


def test_the_cluster_security_group_admits_only_itself_and_goes_away(fake):
    group = ec2.create_cluster_security_group(REGION, "srifty-job-7", {"srifty:job-id": "7"})
    assert (
        ec2.create_cluster_security_group(REGION, "srifty-job-7", {"srifty:job-id": "7"}) == group
    )  # retried
    [sg] = fake.moto.describe_security_groups(GroupIds=[group])["SecurityGroups"]
    [rule] = sg["IpPermissions"]
    assert rule["IpProtocol"] == "-1" and [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [group]
    assert rule["IpRanges"] == [] and rule.get("Ipv6Ranges", []) == []
    assert ec2.find_security_groups(REGION, {"srifty:job-id": "7"}) == [group]
    ec2.delete_security_group(REGION, group)
    ec2.delete_security_group(REGION, group)  # already gone: fine
    assert ec2.find_security_groups(REGION, {"srifty:job-id": "7"}) == []


def test_efa_launches_put_subnet_and_groups_on_every_interface(fake):
    group = ec2.create_cluster_security_group(REGION, "srifty-job-8", {})
    subnet = ec2.subnets(REGION, zone="use1-az1")[0]
    spec = ec2.LaunchSpec(region=REGION, instance_type="p4d.24xlarge", max_minutes=30)
    template = ec2.create_launch_template(REGION, "srifty-job-8-g0", spec)
    ids = ec2.launch_from_template(
        REGION,
        template,
        1,
        "on-demand",
        {},
        [subnet.id],
        image_id="ami-12c6146b",
        security_group_ids=[group],
        efa_interfaces=2,
    )
    assert len(ids) == 1
    [run] = fake.params("RunInstances")
    assert run["ImageId"] == "ami-12c6146b" and "SecurityGroupIds" not in run and "SubnetId" not in run
    assert [
        (n["NetworkCardIndex"], n["InterfaceType"], n["SubnetId"], n["Groups"])
        for n in run["NetworkInterfaces"]
    ] == [
        (0, "efa", subnet.id, [group]),
        (1, "efa", subnet.id, [group]),
    ]


def test_offerings_subnets_and_quota_classes(fake):
    assert ec2.instance_type_offerings(REGION, ["p4d.24xlarge", "x9.fake"]) == {"p4d.24xlarge"}
    assert ec2.instance_type_offerings(REGION, ["g5.xlarge"], zone="use1-az9") == set()
    [default] = ec2.subnets(REGION, zone="use1-az1")
    assert default.zone_id == "use1-az1" and default.default_for_az and default.free_ips > 0
    assert ec2.subnets(REGION, [default.id]) == [default]
    assert [
        account.quota_class(t)
        for t in ("p5.48xlarge", "g6e.xlarge", "gr6.4xlarge", "trn1.32xlarge", "c5.large")
    ] == [
        "P",
        "G",
        "G",
        "Trn",
        "Standard",
    ]


def test_workdir_archives_go_to_s3_behind_a_presigned_url(aws):
    session.client("s3", REGION).create_bucket(Bucket="srifty-workdirs")
    s3.put_object(REGION, "srifty-workdirs", "w/a.tar.gz", b"archive")
    url = s3.presigned_get(REGION, "srifty-workdirs", "w/a.tar.gz", 3600)
    assert "X-Amz-Signature=" in url and requests.get(url, timeout=10).content == b"archive"

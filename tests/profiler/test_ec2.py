"""cloud.ec2 against moto's real server (the ``aws`` fixture), plus botocore's Stubber and
``before-send`` hooks for what moto does not emulate (placement groups, ClientToken, spot
interruptions, throttling). Hooks sit on every client ``cloud`` creates (``aws_hooks``)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import moto.settings
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.stub import Stubber
from django.conf import settings

from cloud import CloudError, session
from cloud import ec2 as ec2_api
from cloud.ec2 import LaunchSpec

REGION = "us-east-1"
LIVE = ["pending", "running"]


@pytest.fixture
def ec2(aws):
    """A raw EC2 client on the moto server, for setting up and checking."""
    return session.client("ec2", REGION)


@pytest.fixture
def hooks(aws_hooks):
    return aws_hooks


@pytest.fixture
def sent(hooks):
    """Parameters of every call cloud.ec2 makes: {"RunInstances": [params, ...], ...}."""
    calls: dict[str, list[dict]] = {}

    def record(params, model, **kwargs):
        calls.setdefault(model.name, []).append(dict(params))

    hooks.append(("before-parameter-build.ec2", record))
    return calls


@pytest.fixture
def stubbed(aws, monkeypatch):
    """One Stubber-backed client handed out for every cloud.ec2 call."""
    cli = session.client("ec2", REGION)
    monkeypatch.setattr(session, "client", lambda service, region: cli)
    with Stubber(cli) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def network(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.1.{i}.0/24", AvailabilityZone=f"{REGION}{zone}")[
            "Subnet"
        ]["SubnetId"]
        for i, zone in ((1, "a"), (2, "b"))
    ]
    group = ec2.create_security_group(GroupName="srifty-nodes", Description="nodes", VpcId=vpc)["GroupId"]
    return {"vpc": vpc, "subnets": subnets, "group": group}


def spec(**kw) -> LaunchSpec:
    fields = {
        "region": REGION,
        "instance_type": "g5.xlarge",
        "max_minutes": 45,
        "user_data": "#!/bin/bash\necho hello\n",
        "tags": {"srifty:run-id": "12"},
    }
    return LaunchSpec(**{**fields, **kw})


def instance(ec2, instance_id: str) -> dict:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def tags_of(item: dict) -> dict:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


def volume_tags(ec2, instance_id: str) -> dict:
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])[
        "Volumes"
    ]
    assert volumes
    return tags_of(volumes[0])


def attribute(ec2, instance_id: str, name: str):
    key = name[0].upper() + name[1:]
    return ec2.describe_instance_attribute(InstanceId=instance_id, Attribute=name)[key]["Value"]


def error_response(code: str, message: str, status: int = 400) -> AWSResponse:
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>stub</RequestID></Response>"
    ).encode()

    class Raw:
        def stream(self, *args, **kwargs):
            yield body

    return AWSResponse("https://ec2.stub", status, {}, Raw())


# --- Launching ----------------------------------------------------------------------------------


def test_launch_on_demand_tags_instance_and_volume_and_terminates_on_shutdown(ec2):
    ids = ec2_api.launch(spec(count=2))
    assert len(ids) == 2
    for instance_id in ids:
        item = instance(ec2, instance_id)
        assert item["InstanceType"] == "g5.xlarge"
        assert "InstanceLifecycle" not in item  # on-demand
        assert item["MetadataOptions"]["HttpTokens"] == "required"
        ours = {"srifty:managed": "true", "srifty:install-id": settings.INSTALL_ID, "srifty:run-id": "12"}
        assert tags_of(item) == ours
        assert volume_tags(ec2, instance_id) == ours
        assert attribute(ec2, instance_id, "instanceInitiatedShutdownBehavior") == "terminate"


def test_launch_puts_the_time_limit_guard_into_the_user_data(ec2):
    (instance_id,) = ec2_api.launch(spec(max_minutes=45))
    user_data = base64.b64decode(attribute(ec2, instance_id, "userData")).decode()
    assert user_data == "#!/bin/bash\nshutdown -h +45\necho hello\n"


def test_the_managed_and_install_tags_cannot_be_overridden_by_the_caller(ec2):
    (instance_id,) = ec2_api.launch(
        spec(tags={"srifty:managed": "false", "srifty:install-id": "someone-else", "srifty:job-id": "3"})
    )
    assert tags_of(instance(ec2, instance_id)) == {
        "srifty:managed": "true",
        "srifty:install-id": settings.INSTALL_ID,
        "srifty:job-id": "3",
    }


def test_launch_spot_sends_one_time_terminate_market_options(ec2, sent):
    (instance_id,) = ec2_api.launch(spec(market="spot", spot_max_price="1.25"))
    assert instance(ec2, instance_id)["InstanceLifecycle"] == "spot"
    (params,) = sent["RunInstances"]
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
            "MaxPrice": "1.25",
        },
    }
    assert [t["ResourceType"] for t in params["TagSpecifications"]] == [
        "instance",
        "volume",
        "spot-instances-request",
    ]
    assert params["MinCount"] == params["MaxCount"] == 1


def test_spot_without_a_max_price_is_capped_at_on_demand(ec2, sent):
    ec2_api.launch(spec(market="spot"))
    assert "MaxPrice" not in sent["RunInstances"][0]["InstanceMarketOptions"]["SpotOptions"]


def test_launch_requests_the_placement_group_which_moto_ignores(ec2, sent):
    (instance_id,) = ec2_api.launch(spec(placement_group="srifty-job-3"))
    assert sent["RunInstances"][0]["Placement"] == {"GroupName": "srifty-job-3"}
    assert instance(ec2, instance_id)["Placement"].get("GroupName", "") == ""  # moto drops it


def test_launch_in_a_subnet_with_security_group_key_and_instance_profile(aws, ec2, network):
    iam = session.client("iam", REGION)
    iam.create_instance_profile(InstanceProfileName="srifty-node")
    ids = ec2_api.launch(
        spec(
            subnet_id=network["subnets"][1],
            security_group_ids=[network["group"]],
            key_name="ops",
            iam_instance_profile="srifty-node",
        )
    )
    item = instance(ec2, ids[0])
    assert item["SubnetId"] == network["subnets"][1]
    assert [g["GroupId"] for g in item["SecurityGroups"]] == [network["group"]]
    assert item["KeyName"] == "ops"
    assert item["IamInstanceProfile"]["Arn"].endswith("instance-profile/srifty-node")


def test_a_retry_with_the_same_client_token_returns_the_same_instances(ec2, sent):
    first = ec2_api.launch(spec(count=2, client_token="run-12-attempt"))
    again = ec2_api.launch(spec(count=2, client_token="run-12-attempt"))
    assert again == first
    assert len(sent["RunInstances"]) == 1  # the retry found the first attempt's instances
    assert sent["RunInstances"][0]["ClientToken"] == "run-12-attempt"  # real EC2 dedupes on it too
    assert tags_of(instance(ec2, first[0]))["srifty:client-token"] == "run-12-attempt"
    assert len(ec2_api.find_managed(REGION)) == 2
    assert ec2_api.launch(spec(client_token="run-12-next")) != first  # a new token is a new launch


def test_launch_uses_the_newest_deep_learning_ami(stubbed):
    images = [
        {
            "ImageId": "ami-old",
            "Name": "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.4 (Ubuntu 22.04) 20240801",
            "CreationDate": "2024-08-01T00:00:00.000Z",
        },
        {
            "ImageId": "ami-new",
            "Name": "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.5 (Ubuntu 22.04) 20250110",
            "CreationDate": "2025-01-10T00:00:00.000Z",
        },
    ]
    stubbed.add_response(
        "describe_images",
        {"Images": images},
        {
            "Owners": ["amazon"],
            "Filters": [
                {"Name": "name", "Values": ["Deep Learning OSS Nvidia Driver AMI GPU PyTorch*"]},
                {"Name": "architecture", "Values": ["x86_64"]},
                {"Name": "state", "Values": ["available"]},
            ],
        },
    )
    assert ec2_api.default_image(REGION) == "ami-new"


def test_without_a_deep_learning_ami_the_newest_amazon_linux_is_used(ec2):
    image = ec2.describe_images(ImageIds=[ec2_api.default_image(REGION)])["Images"][0]
    assert image["Name"].startswith(("al2023-ami-", "amzn2-ami-"))
    assert image["Architecture"] == "x86_64"


def test_no_image_at_all_is_a_clear_error(stubbed):
    stubbed.add_response("describe_images", {"Images": []})
    stubbed.add_response("describe_images", {"Images": []})
    with pytest.raises(CloudError, match="no Deep Learning AMI nor Amazon Linux x86_64 image in us-east-1"):
        ec2_api.launch(spec())


def test_a_bad_instance_type_is_a_clear_error(ec2, monkeypatch):
    monkeypatch.setattr(moto.settings, "EC2_ENABLE_INSTANCE_TYPE_VALIDATION", True)  # moto runs in-process
    with pytest.raises(CloudError, match=r"^ec2\.run_instances failed: InvalidInstanceType\S*: .*'g9\.mega'"):
        ec2_api.launch(spec(instance_type="g9.mega"))


def test_a_bad_ami_is_a_clear_error(ec2, monkeypatch):
    monkeypatch.setattr(moto.settings, "ENABLE_AMI_VALIDATION", True)
    with pytest.raises(
        CloudError, match=r"^ec2\.run_instances failed: InvalidAMIID\.NotFound: .*ami-00000000deadbeef"
    ):
        ec2_api.launch(spec(image_id="ami-00000000deadbeef"))


@pytest.mark.parametrize(
    "kw",
    [
        {"market": "reserved"},
        {"count": 0},
        {"max_minutes": 0},
        {"client_token": "x" * 65},
        {"spot_max_price": "1.0"},
    ],
)
def test_invalid_specs_are_refused_before_calling_aws(kw):
    with pytest.raises(ValueError):
        spec(**kw)


# --- Throttling -----------------------------------------------------------------------------------


@pytest.fixture
def no_backoff(monkeypatch):
    """Keep botocore's retry decisions but skip its sleeps (backoff, adaptive rate limiting)."""
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda self, ctx: 0)
    monkeypatch.setattr(
        "botocore.retries.bucket.TokenBucket.acquire", lambda self, amount=1, block=True: True
    )


def throttle(hooks, times: int) -> list[int]:
    """Answer the next ``times`` DescribeInstances with RequestLimitExceeded, then let moto answer."""
    attempts = [0]

    def before_send(request, **kwargs):
        attempts[0] += 1
        if attempts[0] <= times:
            return error_response("RequestLimitExceeded", "Request limit exceeded.", 503)
        return None

    hooks.append(("before-send.ec2.DescribeInstances", before_send))
    return attempts


def test_throttled_calls_are_retried_until_they_succeed(ec2, hooks, no_backoff):
    # Not with Stubber: it answers before botocore's retry handler runs, so it cannot show retries.
    (instance_id,) = ec2_api.launch(spec())
    attempts = throttle(hooks, 3)
    (state,) = ec2_api.describe(REGION, [instance_id])
    assert state.id == instance_id
    assert attempts[0] == 4


def test_throttling_that_never_ends_is_a_clear_error(ec2, hooks, no_backoff, monkeypatch):
    monkeypatch.setattr(session, "RETRY", Config(retries={"max_attempts": 3, "mode": "adaptive"}))
    attempts = throttle(hooks, 100)
    with pytest.raises(
        CloudError, match=r"^ec2\.describe_instances failed: RequestLimitExceeded: Request limit exceeded\.$"
    ):
        ec2_api.describe(REGION, ["i-0123456789abcdef0"])
    assert attempts[0] == 4  # the first try plus max_attempts retries (botocore's legacy meaning)


# --- Describe, find, terminate --------------------------------------------------------------------


def test_describe_returns_plain_states_and_skips_unknown_ids(ec2):
    (on_demand,) = ec2_api.launch(spec())
    (spot,) = ec2_api.launch(spec(market="spot", instance_type="p4d.24xlarge"))
    states = {s.id: s for s in ec2_api.describe(REGION, [on_demand, spot, "i-0123456789abcdef0"])}
    assert set(states) == {on_demand, spot}
    assert states[on_demand].market == "on-demand" and states[spot].market == "spot"
    assert states[spot].instance_type == "p4d.24xlarge"
    assert states[on_demand].state in LIVE
    assert isinstance(states[on_demand].launch_time, datetime)
    assert states[on_demand].tags["srifty:run-id"] == "12"
    assert states[on_demand].private_ip and states[on_demand].public_dns
    assert ec2_api.describe(REGION, []) == []


def test_find_managed_lists_only_live_srifty_instances_and_filters_by_tag(ec2):
    run_12 = ec2_api.launch(spec(count=2))
    job_3 = ec2_api.launch(spec(tags={"srifty:job-id": "3"}))
    gone = ec2_api.launch(spec())
    ec2_api.terminate(REGION, gone)
    image = ec2_api.default_image(REGION)
    ec2.run_instances(ImageId=image, InstanceType="t3.micro", MinCount=1, MaxCount=1)  # someone else's
    ec2.run_instances(
        ImageId=image,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "srifty:run-id", "Value": "12"}]}],
    )
    assert [s.id for s in ec2_api.find_managed(REGION)] == sorted(run_12 + job_3)
    assert [s.id for s in ec2_api.find_managed(REGION, {"srifty:run-id": "12"})] == sorted(run_12)
    assert [s.id for s in ec2_api.find_managed(REGION, {"srifty:job-id": "3"})] == job_3
    assert ec2_api.find_managed(REGION, {"srifty:job-id": "4"}) == []


def test_terminate_stops_managed_instances_and_skips_unknown_ids(ec2):
    ids = ec2_api.launch(spec(count=2))
    done = ec2_api.terminate(REGION, [*ids, "i-0123456789abcdef0"])
    assert done == sorted(ids)
    assert {s.state for s in ec2_api.describe(REGION, ids)} == {"terminated"}
    assert ec2_api.find_managed(REGION) == []
    assert ec2_api.terminate(REGION, []) == []


def test_terminate_refuses_instances_srifty_did_not_launch(ec2):
    (ours,) = ec2_api.launch(spec())
    theirs = ec2.run_instances(
        ImageId=ec2_api.default_image(REGION), InstanceType="t3.micro", MinCount=1, MaxCount=1
    )["Instances"][0]["InstanceId"]
    with pytest.raises(CloudError, match=f"not Srifty-managed: {theirs}"):
        ec2_api.terminate(REGION, [ours, theirs])
    assert {s.state for s in ec2_api.describe(REGION, [ours, theirs])} <= set(LIVE)


# --- Launch templates ----------------------------------------------------------------------------


def test_launch_template_holds_user_data_base64_and_the_safety_settings(ec2):
    template_id = ec2_api.create_launch_template(REGION, "srifty-job-3", spec(tags={"srifty:job-id": "3"}))
    version = ec2.describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"][0]
    data = version["LaunchTemplateData"]
    assert base64.b64decode(data["UserData"]).decode() == "#!/bin/bash\nshutdown -h +45\necho hello\n"
    assert data["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["InstanceType"] == "g5.xlarge"
    assert {"instance", "volume"} <= {t["ResourceType"] for t in data["TagSpecifications"]}


def test_creating_a_launch_template_again_adds_a_version(ec2):
    first = ec2_api.create_launch_template(REGION, "srifty-job-3", spec())
    again = ec2_api.create_launch_template(REGION, "srifty-job-3", spec(instance_type="p5.48xlarge"))
    assert again == first
    template = ec2.describe_launch_templates(LaunchTemplateIds=[first])["LaunchTemplates"][0]
    assert template["LatestVersionNumber"] == 2
    (instance_id,) = ec2_api.launch_from_template(REGION, first, 1, "on-demand", {})
    assert instance(ec2, instance_id)["InstanceType"] == "p5.48xlarge"  # $Latest


def test_launch_from_template_tags_and_terminates_on_shutdown(ec2, network, sent):
    template_id = ec2_api.create_launch_template(
        REGION, "srifty-job-3", spec(security_group_ids=[network["group"]])
    )
    ids = ec2_api.launch_from_template(
        REGION, template_id, 3, "spot", {"srifty:job-id": "3"}, subnets=[network["subnets"][0]]
    )
    assert len(ids) == 3
    for instance_id in ids:
        item = instance(ec2, instance_id)
        assert item["SubnetId"] == network["subnets"][0]
        assert item["InstanceLifecycle"] == "spot"
        assert {"srifty:managed": "true", "srifty:job-id": "3"}.items() <= tags_of(item).items()
        assert volume_tags(ec2, instance_id) == {
            "srifty:managed": "true",
            "srifty:install-id": settings.INSTALL_ID,
            "srifty:job-id": "3",
        }
        assert attribute(ec2, instance_id, "instanceInitiatedShutdownBehavior") == "terminate"
        assert (
            base64.b64decode(attribute(ec2, instance_id, "userData"))
            .decode()
            .startswith("#!/bin/bash\nshutdown -h +45\n")
        )
    assert sent["RunInstances"][0]["LaunchTemplate"] == {
        "LaunchTemplateId": template_id,
        "Version": "$Latest",
    }
    assert [s.id for s in ec2_api.find_managed(REGION, {"srifty:job-id": "3"})] == sorted(ids)


def test_launch_from_template_moves_to_the_next_subnet_when_one_has_no_capacity(ec2, network, hooks, sent):
    template_id = ec2_api.create_launch_template(REGION, "srifty-job-3", spec())
    answered = []

    def no_capacity_in_first(request, **kwargs):
        answered.append(1)
        if len(answered) == 1:
            return error_response(
                "InsufficientInstanceCapacity", "We currently do not have sufficient capacity."
            )
        return None

    hooks.append(("before-send.ec2.RunInstances", no_capacity_in_first))
    ids = ec2_api.launch_from_template(
        REGION, template_id, 2, "on-demand", {}, subnets=network["subnets"], client_token="job-3-try"
    )
    assert {instance(ec2, i)["SubnetId"] for i in ids} == {network["subnets"][1]}
    assert [p.get("SubnetId") for p in sent["RunInstances"]] == network["subnets"]
    assert [p["ClientToken"] for p in sent["RunInstances"]] == ["job-3-try-0", "job-3-try-1"]
    assert (
        ec2_api.launch_from_template(REGION, template_id, 2, "on-demand", {}, client_token="job-3-try") == ids
    )


def test_launch_from_template_gives_up_when_no_subnet_has_capacity(ec2, network, hooks):
    template_id = ec2_api.create_launch_template(REGION, "srifty-job-3", spec())
    hooks.append(
        (
            "before-send.ec2.RunInstances",
            lambda request, **kw: error_response("InsufficientInstanceCapacity", "None left."),
        )
    )
    with pytest.raises(
        CloudError, match="ec2.run_instances failed: InsufficientInstanceCapacity: None left."
    ):
        ec2_api.launch_from_template(REGION, template_id, 2, "on-demand", {}, subnets=network["subnets"])


def test_deleting_a_launch_template_twice_is_fine(ec2):
    template_id = ec2_api.create_launch_template(REGION, "srifty-job-3", spec())
    ec2_api.delete_launch_template(REGION, template_id)
    assert ec2.describe_launch_templates()["LaunchTemplates"] == []


# --- Placement groups (moto does not implement them: Stubber) -------------------------------------


def test_create_placement_group_asks_for_a_cluster_group_and_tolerates_an_existing_one(stubbed):
    expected = {
        "GroupName": "srifty-job-3",
        "Strategy": "cluster",
        "TagSpecifications": [
            {
                "ResourceType": "placement-group",
                "Tags": [
                    {"Key": "srifty:managed", "Value": "true"},
                    {"Key": "srifty:install-id", "Value": settings.INSTALL_ID},
                ],
            }
        ],
    }
    stubbed.add_response("create_placement_group", {}, expected)
    stubbed.add_client_error("create_placement_group", "InvalidPlacementGroup.Duplicate", "exists")
    ec2_api.create_placement_group(REGION, "srifty-job-3")
    ec2_api.create_placement_group(REGION, "srifty-job-3")


def test_delete_placement_group_tolerates_a_missing_one_but_not_one_in_use(stubbed):
    stubbed.add_response("delete_placement_group", {}, {"GroupName": "srifty-job-3"})
    stubbed.add_client_error("delete_placement_group", "InvalidPlacementGroup.Unknown", "no such group")
    stubbed.add_client_error("delete_placement_group", "InvalidPlacementGroup.InUse", "group is in use")
    ec2_api.delete_placement_group(REGION, "srifty-job-3")
    ec2_api.delete_placement_group(REGION, "srifty-job-3")
    with pytest.raises(
        CloudError, match="ec2.delete_placement_group failed: InvalidPlacementGroup.InUse: group is in use"
    ):
        ec2_api.delete_placement_group(REGION, "srifty-job-3")


# --- Spot interruptions ---------------------------------------------------------------------------


def test_fresh_or_user_terminated_spot_instances_have_no_interruption_notice(ec2):
    ids = ec2_api.launch(spec(market="spot", count=2))
    ec2_api.terminate(REGION, ids[:1])  # Client.UserInitiatedShutdown is not an interruption
    assert ec2_api.spot_interruption_notices(REGION, ids) == []


def stub_instance(instance_id, state, reason=None, request=None) -> dict:
    item = {
        "InstanceId": instance_id,
        "InstanceType": "g5.xlarge",
        "State": {"Name": state, "Code": 16},
        "InstanceLifecycle": "spot",
        "LaunchTime": datetime(2026, 1, 1, tzinfo=UTC),
        "AmiLaunchIndex": 0,
    }
    if reason:
        item["StateReason"] = {"Code": reason, "Message": reason}
    if request:
        item["SpotInstanceRequestId"] = request
    return item


def test_spot_interruptions_are_read_from_state_reason_and_spot_request_status(stubbed):
    instances = [
        stub_instance("i-0000000000000000a", "shutting-down", "Server.SpotInstanceTermination"),
        stub_instance("i-0000000000000000b", "running", request="sir-b"),  # in its two-minute notice
        stub_instance("i-0000000000000000c", "running", request="sir-c"),  # fine
        stub_instance("i-0000000000000000d", "terminated", "Client.UserInitiatedShutdown"),
    ]
    stubbed.add_response("describe_instances", {"Reservations": [{"Instances": instances}]})
    stubbed.add_response(
        "describe_spot_instance_requests",
        {
            "SpotInstanceRequests": [
                {
                    "SpotInstanceRequestId": "sir-b",
                    "InstanceId": "i-0000000000000000b",
                    "Status": {"Code": "marked-for-termination"},
                },
                {
                    "SpotInstanceRequestId": "sir-c",
                    "InstanceId": "i-0000000000000000c",
                    "Status": {"Code": "fulfilled"},
                },
            ]
        },
        {"Filters": [{"Name": "spot-instance-request-id", "Values": ["sir-b", "sir-c"]}]},
    )
    ids = [i["InstanceId"] for i in instances]
    assert ec2_api.spot_interruption_notices(REGION, ids) == ["i-0000000000000000a", "i-0000000000000000b"]


def test_console_output_is_decoded(ec2):
    (instance_id,) = ec2_api.launch(spec())
    assert "Linux version" in ec2_api.console_output(REGION, instance_id)

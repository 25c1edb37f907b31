"""EC2 for Srifty: launching, inspecting and stopping VMs (profiling VMs and training clusters),
launch templates, cluster placement groups, EFA network interfaces, images, subnets, zones and
instance-type specs.

Plain dataclasses in and out; no Django. Clients come from ``cloud.session`` (one retry policy,
the configured endpoint); failed calls raise ``cloud.CloudError`` carrying AWS's code and saying
which call failed and why, e.g. ``ec2.run_instances failed: InsufficientInstanceCapacity: ...``.

Safety rules every launch follows:

* Instances and their volumes are tagged by ``cloud.tags.resource_tags``: ``srifty:managed=true``,
  ``srifty:install-id=<this install's id>`` and the caller's tags (``srifty:run-id``,
  ``srifty:job-id``...), so the reconciler (``find_managed``) finds every VM this install
  started, and ``terminate`` refuses instances that are not Srifty's or that another install (a
  staging server, a colleague's ``./run``) started in the same AWS account: their ``job 7`` is
  not ours.
* ``InstanceInitiatedShutdownBehavior=terminate`` and a ``shutdown -h +N`` guard in the
  user-data (``cloud.userdata.with_time_limit``): the VM terminates itself at the hard time
  limit even if Srifty is gone. IMDSv2 is required (``HttpTokens=required``).
* Retried launches never duplicate VMs: ``client_token`` becomes EC2's ``ClientToken`` *and* a
  ``srifty:client-token`` tag that ``launch`` looks for before calling ``run_instances``. (EC2
  honours ClientToken for a while after the launch; the tag check also covers a retry after that
  window and emulators such as moto, which ignores ClientToken.) Without a client_token botocore
  still generates one per call, which makes its own retries of that call safe.

What moto (5.2) emulates and what it does not, as far as this module goes: it honours tags on
instances and volumes, user-data, shutdown behaviour, spot market options (``InstanceLifecycle``)
and launch templates; it ignores ``ClientToken``, ``Placement.GroupName`` and an interface's
``InterfaceType`` (EFA interfaces come back as plain ones), does not implement
placement-group calls, does not apply a template's shutdown behaviour or volume tags (``launch_
from_template`` passes both explicitly, so that does not matter), never links a spot instance to a
spot request and never interrupts one, and accepts any instance type or AMI unless
``MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION`` / ``MOTO_ENABLE_AMI_VALIDATION`` are set.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from cloud import account, session, tags
from cloud.errors import CloudError, call, pages
from cloud.tags import CLIENT_TOKEN_TAG, INSTALL_TAG, MANAGED_TAG
from cloud.userdata import check_size, with_time_limit

__all__ = [
    "CloudError",
    "INSTALL_TAG",
    "Image",
    "InstanceState",
    "LaunchSpec",
    "MANAGED_TAG",
    "Subnet",
    "console_output",
    "create_cluster_security_group",
    "create_launch_template",
    "create_placement_group",
    "default_image",
    "dlami_image",
    "default_subnets",
    "describe_instance_types",
    "delete_launch_template",
    "delete_placement_group",
    "delete_security_group",
    "describe",
    "efa_network_interfaces",
    "find_managed",
    "find_security_groups",
    "instance_type_offerings",
    "live_instance_types",
    "managed_security_groups",
    "launch",
    "launch_from_template",
    "spot_interruption_notices",
    "subnets",
    "terminate",
    "zone_ids",
    "zone_subnets",
]

log = logging.getLogger(__name__)

MARKETS = ("spot", "on-demand")
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")

# Deep Learning AMIs with NVIDIA drivers and PyTorch; newest first is picked.
DLAMI_NAMES = ["Deep Learning OSS Nvidia Driver AMI GPU PyTorch*"]
# Only when a region (or an emulator) has no DLAMI: a plain Amazon Linux image. It has no GPU
# driver, so the user-data falls back to pip-installing torch (CPU work only).
FALLBACK_IMAGE_NAMES = ["al2023-ami-2023*", "amzn2-ami-hvm-*", "amzn2-ami-kernel-*"]

# Errors that mean "this subnet/zone cannot take the launch now; another one may".
_CAPACITY_ERRORS = {
    "InsufficientInstanceCapacity",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
    "InsufficientCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
}

# describe_spot_instance_requests status codes that mean the instance is being (or was) taken
# away by EC2 rather than by us. https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html
SPOT_INTERRUPTION_CODES = {
    "marked-for-termination",
    "marked-for-stop",
    "marked-for-hibernation",
    "instance-terminated-by-price",
    "instance-terminated-no-capacity",
    "instance-terminated-capacity-oversubscribed",
    "instance-terminated-launch-group-constraint",
    "instance-stopped-by-price",
    "instance-stopped-no-capacity",
    "instance-stopped-capacity-oversubscribed",
    "instance-hibernated-by-price",
    "instance-hibernated-no-capacity",
}
# describe_instances StateReason codes of an instance EC2 interrupted.
SPOT_STATE_REASONS = {"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"}

_TEMPLATE_NOT_FOUND = {"InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateName.NotFoundException"}
_CHUNK = 100  # ids per describe/terminate call (EC2 filter values are capped at 200)


def _ec2(region: str) -> Any:
    return session.client("ec2", region)


def _instances(cli: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    for reservation in pages(cli, "describe_instances", "Reservations", **kwargs):
        yield from reservation.get("Instances", [])


def _chunks(ids: Sequence[str], size: int = _CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


# --- Data in and out --------------------------------------------------------------------------


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, not {value!r}")


def _check_token(token: str | None, limit: int = 64) -> None:
    if token is not None and not 0 < len(token) <= limit:  # EC2's ClientToken is at most 64 ASCII chars
        raise ValueError(f"client_token must be 1-{limit} characters")


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """What to launch. ``max_minutes`` is the hard time limit, enforced on the VM itself."""

    region: str
    instance_type: str
    max_minutes: int
    count: int = 1
    market: str = "on-demand"  # "spot" | "on-demand"
    user_data: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    image_id: str | None = None  # None: default_image(region)
    subnet_id: str | None = None
    security_group_ids: Sequence[str] = ()
    key_name: str | None = None
    iam_instance_profile: str | None = None  # name or ARN
    placement_group: str | None = None
    client_token: str | None = None  # same token = same launch, however often it is retried
    spot_max_price: str | Decimal | None = None  # USD/hour; None: capped at the on-demand price
    efa_interfaces: int = 0  # EFA interfaces, one per network card (0: EC2's default ENA interface)

    def __post_init__(self) -> None:
        if self.market not in MARKETS:
            raise ValueError(f"market must be one of {MARKETS}, not {self.market!r}")
        _check_count("count", self.count)
        if (
            isinstance(self.efa_interfaces, bool)
            or not isinstance(self.efa_interfaces, int)
            or self.efa_interfaces < 0
        ):
            raise ValueError(f"efa_interfaces must be an int >= 0, not {self.efa_interfaces!r}")
        _check_count("max_minutes", self.max_minutes)
        _check_token(self.client_token)
        if self.spot_max_price is not None and self.market != "spot":
            raise ValueError("spot_max_price only applies to market='spot'")


@dataclass(frozen=True)
class InstanceState:
    id: str
    state: str  # pending | running | shutting-down | terminated | stopping | stopped
    instance_type: str
    market: str  # "spot" | "on-demand"
    launch_time: datetime | None
    tags: dict[str, str]
    private_ip: str | None
    public_dns: str | None
    state_reason: str | None = None  # e.g. "Server.SpotInstanceTermination"
    spot_request_id: str | None = None
    launch_index: int = 0
    zone: str | None = None
    subnet_id: str | None = None


def _state(item: dict[str, Any]) -> InstanceState:
    reason = (item.get("StateReason") or {}).get("Code") or None
    return InstanceState(
        id=item["InstanceId"],
        state=(item.get("State") or {}).get("Name", "unknown"),
        instance_type=item.get("InstanceType", ""),
        market="spot" if item.get("InstanceLifecycle") == "spot" else "on-demand",
        launch_time=item.get("LaunchTime"),
        tags=tags.as_dict(item),
        private_ip=item.get("PrivateIpAddress") or None,
        public_dns=item.get("PublicDnsName") or None,
        state_reason=reason,
        spot_request_id=item.get("SpotInstanceRequestId") or None,
        launch_index=item.get("AmiLaunchIndex") or 0,
        zone=(item.get("Placement") or {}).get("AvailabilityZone"),
        subnet_id=item.get("SubnetId") or None,
    )


def _tags(extra: Mapping[str, object], client_token: str | None = None) -> list[dict[str, str]]:
    return tags.tag_list(tags.resource_tags(extra, client_token=client_token))


def _tag_specs(listed: list[dict[str, str]], spot: bool = False) -> list[dict[str, Any]]:
    kinds = ["instance", "volume"] + (["spot-instances-request"] if spot else [])
    return [{"ResourceType": kind, "Tags": listed} for kind in kinds]


def _market_options(market: str, max_price: str | Decimal | None) -> dict[str, Any]:
    if market != "spot":
        return {}
    spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    if max_price is not None:
        spot["MaxPrice"] = str(max_price)
    return {"InstanceMarketOptions": {"MarketType": "spot", "SpotOptions": spot}}


def _instance_profile(value: str) -> dict[str, Any]:
    return {"Arn": value} if value.startswith("arn:") else {"Name": value}


# --- Images -----------------------------------------------------------------------------------


def default_image(region: str, arch: str = "x86_64") -> str:
    """Newest Amazon Deep Learning AMI (NVIDIA driver + PyTorch) for ``arch`` in ``region``.

    ``arch`` is the instance type's (``arm64`` for Graviton GPU types such as g5g: EC2 refuses
    an x86_64 image there). Falls back (with a warning) to the newest plain Amazon Linux image of
    that architecture when the region has no such AMI (moto has none); raises CloudError when
    there is no image at all.
    """
    cli = _ec2(region)
    common = [{"Name": "architecture", "Values": [arch]}, {"Name": "state", "Values": ["available"]}]
    for names in (DLAMI_NAMES, FALLBACK_IMAGE_NAMES):
        resp = call(
            cli,
            "describe_images",
            Owners=["amazon"],
            Filters=[{"Name": "name", "Values": names}, *common],
        )
        images = [i for i in resp.get("Images", []) if "minimal" not in i.get("Name", "")]
        if images:
            newest = max(images, key=lambda i: (i.get("CreationDate", ""), i.get("Name", "")))
            if names is FALLBACK_IMAGE_NAMES:
                log.warning("no Deep Learning AMI in %s; using %s", region, newest.get("Name"))
            return str(newest["ImageId"])
    text = f"ec2.describe_images found no Deep Learning AMI nor Amazon Linux {arch} image in {region}"
    raise CloudError("NoImage", text, "ec2.describe_images", text=text)


# AWS publishes the newest Deep Learning AMI of each flavour as a public SSM parameter
# (https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html); tried in order: PyTorch
# images first (torch, NCCL, aws-ofi-nccl and the EFA installer ready), then the base image
# (drivers, CUDA and EFA; the user-data pip-installs torch there).
DLAMI_PARAMETERS = (
    "/aws/service/deeplearning/ami/{arch}/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id",
    "/aws/service/deeplearning/ami/{arch}/oss-nvidia-driver-gpu-pytorch-2.6-ubuntu-22.04/latest/ami-id",
    "/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
)


@dataclass(frozen=True)
class Image:
    image_id: str
    source: str  # the SSM parameter it came from, "custom", or "describe_images: <name>"


def dlami_image(region: str, arch: str = "x86_64", parameters: Sequence[str] = DLAMI_PARAMETERS) -> Image:
    """The AWS Deep Learning AMI for ``arch`` (``x86_64`` or ``arm64``) in ``region``, read from
    its public SSM parameter (the first of ``parameters`` that exists there). Without one (a
    region or an emulator that has none) the newest image ``default_image`` finds, with a
    warning."""
    if arch not in ("x86_64", "arm64"):
        raise ValueError(f"arch must be x86_64 or arm64, not {arch!r}")
    for template in parameters:
        name = template.format(arch=arch)
        value = account.ssm_parameter(region, name)
        if value:
            return Image(value, name)
    log.warning("no Deep Learning AMI SSM parameter for %s in %s; searching images", arch, region)
    found = default_image(region, arch)
    return Image(found, f"describe_images ({arch})")


# --- Launching --------------------------------------------------------------------------------


def _existing(cli: Any, client_token: str) -> list[str]:
    """Instances an earlier attempt with this client token launched (any state), in launch order."""
    found = _instances(cli, Filters=[{"Name": f"tag:{CLIENT_TOKEN_TAG}", "Values": [client_token]}])
    return _ids({"Instances": list(found)})


def _ids(resp: dict[str, Any]) -> list[str]:
    items = sorted(resp.get("Instances", []), key=lambda i: (i.get("AmiLaunchIndex") or 0, i["InstanceId"]))
    return [i["InstanceId"] for i in items]


def efa_network_interfaces(spec: LaunchSpec) -> list[dict[str, Any]]:
    """``spec.efa_interfaces`` EFA interfaces, one per network card, as AWS documents for p4d/p5:
    card 0 carries the primary interface (device index 0), every other card one at device
    index 1. Subnet and security groups must then be given per interface (EC2 refuses them at
    the top level next to ``NetworkInterfaces``); all interfaces share one subnet. EC2 assigns
    no public IP to an instance with several interfaces: its subnet needs a route (NAT) to the
    Srifty server. The security group must allow all traffic to and from itself (EFA's rule;
    the default VPC group does)."""
    out = []
    for card in range(spec.efa_interfaces):
        nic: dict[str, Any] = {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa",
            "DeleteOnTermination": True,
        }
        if spec.subnet_id:
            nic["SubnetId"] = spec.subnet_id
        if spec.security_group_ids:
            nic["Groups"] = list(spec.security_group_ids)
        out.append(nic)
    return out


def launch(spec: LaunchSpec) -> list[str]:
    """Start ``spec.count`` instances (all or none); returns their IDs in launch-index order.

    With ``spec.client_token``, a retry returns the first attempt's instances instead of
    launching new ones (even if they have been terminated since: a new launch needs a new token).
    """
    user_data = check_size(with_time_limit(spec.user_data, spec.max_minutes))
    cli = _ec2(spec.region)
    if spec.client_token and (ids := _existing(cli, spec.client_token)):
        log.info("launch with client token %s already done: %s", spec.client_token, ids)
        return ids
    params: dict[str, Any] = {
        "ImageId": spec.image_id or default_image(spec.region),
        "InstanceType": spec.instance_type,
        "MinCount": spec.count,
        "MaxCount": spec.count,
        "UserData": user_data,  # botocore base64-encodes it for RunInstances
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": _tag_specs(_tags(spec.tags, spec.client_token), spot=spec.market == "spot"),
        **_market_options(spec.market, spec.spot_max_price),
    }
    if spec.client_token:
        params["ClientToken"] = spec.client_token
    if spec.efa_interfaces:
        params["NetworkInterfaces"] = efa_network_interfaces(spec)  # subnet and groups go inside
    else:
        if spec.subnet_id:
            params["SubnetId"] = spec.subnet_id
        if spec.security_group_ids:
            params["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.key_name:
        params["KeyName"] = spec.key_name
    if spec.iam_instance_profile:
        params["IamInstanceProfile"] = _instance_profile(spec.iam_instance_profile)
    if spec.placement_group:
        params["Placement"] = {"GroupName": spec.placement_group}
    resp = call(cli, "run_instances", **params)
    ids = _ids(resp)
    log.info("launched %s %s x%d in %s: %s", spec.market, spec.instance_type, spec.count, spec.region, ids)
    return ids


def create_launch_template(region: str, name: str, spec: LaunchSpec) -> str:
    """A launch template (for cluster launches) from ``spec``; returns its ID.

    Holds image, type, user-data (with the time-limit guard, base64 as EC2 requires), shutdown
    behaviour, IMDSv2, tags, key, security groups, instance profile and placement group. Market,
    count and subnet are chosen per launch (``launch_from_template``). If a template called
    ``name`` exists already (a retried cluster launch), ``spec`` becomes its new, latest version.
    """
    user_data = check_size(with_time_limit(spec.user_data, spec.max_minutes))
    cli = _ec2(region)
    data: dict[str, Any] = {
        "ImageId": spec.image_id or default_image(region),
        "InstanceType": spec.instance_type,
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": _tag_specs(_tags(spec.tags)),
    }
    if spec.security_group_ids:
        data["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.key_name:
        data["KeyName"] = spec.key_name
    if spec.iam_instance_profile:
        data["IamInstanceProfile"] = _instance_profile(spec.iam_instance_profile)
    if spec.placement_group:
        data["Placement"] = {"GroupName": spec.placement_group}
    tag_spec = [{"ResourceType": "launch-template", "Tags": _tags(spec.tags)}]
    try:
        resp = call(
            cli,
            "create_launch_template",
            LaunchTemplateName=name,
            LaunchTemplateData=data,
            TagSpecifications=tag_spec,
        )
        return str(resp["LaunchTemplate"]["LaunchTemplateId"])
    except CloudError as exc:
        if exc.code != "InvalidLaunchTemplateName.AlreadyExistsException":
            raise
    resp = call(
        cli,
        "create_launch_template_version",
        LaunchTemplateName=name,
        LaunchTemplateData=data,
    )
    return str(resp["LaunchTemplateVersion"]["LaunchTemplateId"])


def delete_launch_template(region: str, template_id: str) -> None:
    """Delete a launch template; one that is already gone is fine."""
    cli = _ec2(region)
    try:
        call(cli, "delete_launch_template", LaunchTemplateId=template_id)
    except CloudError as exc:
        if exc.code not in _TEMPLATE_NOT_FOUND:
            raise


def launch_from_template(
    region: str,
    template_id: str,
    count: int,
    market: str,
    tags: Mapping[str, str],
    subnets: Sequence[str | None] = (None,),
    *,
    client_token: str | None = None,
    spot_max_price: str | Decimal | None = None,
    image_id: str | None = None,
    placement_group: str | None = None,
    security_group_ids: Sequence[str] = (),
    efa_interfaces: int = 0,
) -> list[str]:
    """Start ``count`` instances (all or none) from the template's latest version.

    ``image_id``, ``placement_group`` and ``security_group_ids`` are passed again at launch
    (EC2 lets RunInstances override a template), so every RunInstances call says which AMI,
    group and firewall it asks for. With ``efa_interfaces`` the call carries one EFA interface
    per network card (``efa_network_interfaces``), each in the subnet tried and the security
    groups (EC2 refuses instance-level groups next to ``NetworkInterfaces``).

    All instances go to one subnet (a cluster placement group is single-zone anyway): the
    subnets are tried in order and the next one is tried only when EC2 reports no capacity
    there (``InsufficientInstanceCapacity`` and the like); ``None`` means the default subnet.
    Shutdown behaviour, IMDSv2 and tags (``srifty:managed`` + ``tags``, on instance and volume)
    are passed again at launch, so they hold whatever the template says. ``client_token`` works
    as in ``launch``. Returns the IDs in launch-index order.
    """
    if market not in MARKETS:
        raise ValueError(f"market must be one of {MARKETS}, not {market!r}")
    _check_count("count", count)
    _check_token(client_token, 60)  # room for the "-N" subnet suffix
    subnets = list(subnets) or [None]
    cli = _ec2(region)
    if client_token and (ids := _existing(cli, client_token)):
        return ids
    base: dict[str, Any] = {
        "LaunchTemplate": {"LaunchTemplateId": template_id, "Version": "$Latest"},
        "MinCount": count,
        "MaxCount": count,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": _tag_specs(_tags(tags, client_token), spot=market == "spot"),
        **_market_options(market, spot_max_price),
    }
    if image_id:
        base["ImageId"] = image_id
    if placement_group:
        base["Placement"] = {"GroupName": placement_group}
    last: CloudError | None = None
    for index, subnet in enumerate(subnets):
        params = dict(base)
        if efa_interfaces:
            nic_spec = LaunchSpec(
                region=region,
                instance_type="-",
                max_minutes=1,
                subnet_id=subnet,
                security_group_ids=tuple(security_group_ids),
                efa_interfaces=efa_interfaces,
            )
            params["NetworkInterfaces"] = efa_network_interfaces(nic_spec)
        else:
            if subnet:
                params["SubnetId"] = subnet
            if security_group_ids:
                params["SecurityGroupIds"] = list(security_group_ids)
        if client_token:  # one token per subnet: EC2 rejects a reused token with other parameters
            params["ClientToken"] = f"{client_token}-{index}"
        try:
            resp = call(cli, "run_instances", **params)
        except CloudError as exc:
            if exc.code not in _CAPACITY_ERRORS:
                raise
            log.warning("no capacity in subnet %s: %s", subnet or "(default)", exc)
            last = exc
            continue
        return _ids(resp)
    assert last is not None
    raise last


def default_subnets(region: str) -> dict[str, str]:
    """The default VPC's subnet of each zone, by zone id (``use1-az2`` -> ``subnet-...``)."""
    resp = call(_ec2(region), "describe_subnets", Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    return {
        s.get("AvailabilityZoneId") or s["AvailabilityZone"]: s["SubnetId"] for s in resp.get("Subnets", [])
    }


_ZONE_ID_RE = re.compile(r"^[a-z]{2,}[0-9]*-az[0-9]+$")  # e.g. use1-az2 (the catalog's zone ids)


def zone_subnets(region: str, zone: str, subnet_ids: Sequence[str] = ()) -> list[str]:
    """Subnets of ``zone`` (a zone id such as ``use1-az2`` or a zone name such as
    ``us-east-1c``), sorted: those among ``subnet_ids`` if given, else the zone's default one."""
    key = "availability-zone-id" if _ZONE_ID_RE.match(zone) else "availability-zone"
    filters = [
        {"Name": key, "Values": [zone]},
        {"Name": "subnet-id", "Values": list(subnet_ids)}
        if subnet_ids
        else {"Name": "default-for-az", "Values": ["true"]},
    ]
    resp = call(_ec2(region), "describe_subnets", Filters=filters)
    return sorted(s["SubnetId"] for s in resp.get("Subnets", []))


def zone_ids(region: str) -> dict[str, str]:
    """Zone name (account-specific, ``us-east-1a``) -> zone ID (stable, ``use1-az6``)."""
    resp = call(_ec2(region), "describe_availability_zones")
    return {z["ZoneName"]: z["ZoneId"] for z in resp.get("AvailabilityZones", [])}


@dataclass(frozen=True)
class Subnet:
    id: str
    vpc_id: str
    zone: str  # name, e.g. us-east-1a
    zone_id: str  # e.g. use1-az6
    free_ips: int
    default_for_az: bool


def subnets(region: str, subnet_ids: Sequence[str] = (), *, zone: str | None = None) -> list[Subnet]:
    """Subnets by id (every one of ``subnet_ids``; a missing one is a CloudError), or the
    default subnet of ``zone`` (a zone id or name), or every default subnet; sorted by id."""
    filters: list[dict[str, Any]] = []
    if subnet_ids:
        filters.append({"Name": "subnet-id", "Values": list(subnet_ids)})
    else:
        filters.append({"Name": "default-for-az", "Values": ["true"]})
    if zone:
        key = "availability-zone-id" if _ZONE_ID_RE.match(zone) else "availability-zone"
        filters.append({"Name": key, "Values": [zone]})
    resp = call(_ec2(region), "describe_subnets", Filters=filters)
    return sorted(
        (
            Subnet(
                id=s["SubnetId"],
                vpc_id=s.get("VpcId", ""),
                zone=s.get("AvailabilityZone", ""),
                zone_id=s.get("AvailabilityZoneId", ""),
                free_ips=int(s.get("AvailableIpAddressCount") or 0),
                default_for_az=bool(s.get("DefaultForAz")),
            )
            for s in resp.get("Subnets", [])
        ),
        key=lambda s: s.id,
    )


def _default_vpc(region: str) -> str:
    resp = call(_ec2(region), "describe_vpcs", Filters=[{"Name": "is-default", "Values": ["true"]}])
    vpcs = resp.get("Vpcs", [])
    if not vpcs:
        text = f"ec2.describe_vpcs: {region} has no default VPC; set JOB_SUBNET_IDS"
        raise CloudError("NoDefaultVpc", text, "ec2.describe_vpcs", text=text)
    return str(vpcs[0]["VpcId"])


# --- Security groups ----------------------------------------------------------------------------


def create_cluster_security_group(
    region: str, name: str, extra_tags: Mapping[str, str], subnet_id: str | None = None
) -> str:
    """A security group that admits only its own members (every protocol and port, as c10d,
    NCCL and EFA need), in the VPC of ``subnet_id`` (the default VPC if None). Outbound stays
    open (the nodes fetch code and post to Srifty). Tagged like instances; a group called
    ``name`` that exists already (a retried launch) is reused. Returns its id."""
    cli = _ec2(region)
    vpc = subnets(region, [subnet_id])[0].vpc_id if subnet_id else _default_vpc(region)
    found = call(
        cli,
        "describe_security_groups",
        Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc]}],
    ).get("SecurityGroups", [])
    if found:
        return str(found[0]["GroupId"])
    resp = call(
        cli,
        "create_security_group",
        GroupName=name,
        Description="Srifty training cluster: members only",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": _tags(extra_tags)}],
    )
    group = str(resp["GroupId"])
    call(
        cli,
        "authorize_security_group_ingress",
        GroupId=group,
        IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}],
    )
    return group


def delete_security_group(region: str, group_id: str) -> None:
    """Delete a security group; one already gone is fine. While instances still use it (they
    take a minute to terminate) EC2 answers ``DependencyViolation``: a CloudError to retry."""
    try:
        call(_ec2(region), "delete_security_group", GroupId=group_id)
    except CloudError as exc:
        if exc.code not in ("InvalidGroup.NotFound", "InvalidGroupId.NotFound"):
            raise


def find_security_groups(region: str, tag_filters: Mapping[str, str]) -> list[str]:
    """Ids of this install's security groups with these tags (a job's teardown)."""
    return [group for group, _ in _security_groups(region, tag_filters)]


def _security_groups(region: str, tag_filters: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    filters = [
        {"Name": f"tag:{MANAGED_TAG}", "Values": ["true"]},
        {"Name": f"tag:{INSTALL_TAG}", "Values": [tags.install_id()]},
        *({"Name": f"tag:{k}", "Values": [str(v)]} for k, v in tag_filters.items()),
    ]
    found = pages(_ec2(region), "describe_security_groups", "SecurityGroups", Filters=filters)
    return sorted((str(g["GroupId"]), tags.as_dict(g)) for g in found)


def managed_security_groups(region: str) -> list[tuple[str, dict[str, str]]]:
    """``(id, tags)`` of every security group this install made in ``region`` (the reconciler's sweep)."""
    return _security_groups(region, {})


# --- Instance types -----------------------------------------------------------------------------


def instance_type_offerings(region: str, instance_types: Iterable[str], zone: str | None = None) -> set[str]:
    """Which of ``instance_types`` EC2 offers in ``region`` (or in ``zone``, an id or a name)."""
    names = sorted(set(instance_types))
    if not names:
        return set()
    if zone:
        location_type = "availability-zone-id" if _ZONE_ID_RE.match(zone) else "availability-zone"
        filters = [{"Name": "location", "Values": [zone]}]
    else:
        location_type, filters = "region", [{"Name": "location", "Values": [region]}]
    filters.append({"Name": "instance-type", "Values": names})
    found = pages(
        _ec2(region),
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType=location_type,
        Filters=filters,
    )
    return {str(o["InstanceType"]) for o in found}


def live_instance_types(region: str) -> list[tuple[str, str]]:
    """``(instance type, market)`` of every pending or running instance of the account in
    ``region``, Srifty's or not: they all count against the vCPU quotas."""
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    return [
        (i.get("InstanceType", ""), "spot" if i.get("InstanceLifecycle") == "spot" else "on-demand")
        for i in _instances(_ec2(region), Filters=filters)
    ]


def describe_instance_types(region: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """EC2's raw description of ``names`` (every type offered in ``region`` if None)."""
    kwargs = {"InstanceTypes": sorted(names)} if names else {}
    return list(pages(_ec2(region), "describe_instance_types", "InstanceTypes", **kwargs))


# --- Placement groups -------------------------------------------------------------------------


def create_placement_group(region: str, name: str) -> None:
    """A ``cluster`` placement group (low-latency, one zone); one that exists already is fine."""
    try:
        call(
            _ec2(region),
            "create_placement_group",
            GroupName=name,
            Strategy="cluster",
            TagSpecifications=[{"ResourceType": "placement-group", "Tags": _tags({})}],
        )
    except CloudError as exc:
        if exc.code != "InvalidPlacementGroup.Duplicate":
            raise


def managed_placement_groups(region: str) -> list[str]:
    """Names of every placement group this install made in ``region`` (the reconciler's sweep)."""
    filters = [
        {"Name": f"tag:{MANAGED_TAG}", "Values": ["true"]},
        {"Name": f"tag:{INSTALL_TAG}", "Values": [tags.install_id()]},
    ]
    resp = call(_ec2(region), "describe_placement_groups", Filters=filters)
    return sorted(str(g["GroupName"]) for g in resp.get("PlacementGroups", []))


def delete_placement_group(region: str, name: str) -> None:
    """Delete a placement group; one that is already gone is fine (one still in use is not)."""
    try:
        call(_ec2(region), "delete_placement_group", GroupName=name)
    except CloudError as exc:
        if exc.code != "InvalidPlacementGroup.Unknown":
            raise


# --- Watching and stopping --------------------------------------------------------------------


def describe(region: str, ids: Iterable[str]) -> list[InstanceState]:
    """The instances among ``ids`` that EC2 knows (unknown or long-gone IDs are simply absent)."""
    ids = sorted(set(ids))
    cli = _ec2(region)
    out = []
    for chunk in _chunks(ids):
        out += [_state(i) for i in _instances(cli, Filters=[{"Name": "instance-id", "Values": chunk}])]
    return sorted(out, key=lambda s: s.id)


def find_managed(
    region: str, tag_filters: Mapping[str, str] | None = None, *, any_install: bool = False
) -> list[InstanceState]:
    """Every live (not terminated) Srifty-managed instance of this install (``srifty:install-id``),
    optionally only those with these tags. ``any_install``: those of every install and those
    launched before install ids, for the reconciler's report; it acts on this install's only."""
    filters = [
        {"Name": f"tag:{MANAGED_TAG}", "Values": ["true"]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]
    if not any_install:
        filters.append({"Name": f"tag:{INSTALL_TAG}", "Values": [tags.install_id()]})
    filters += [{"Name": f"tag:{k}", "Values": [str(v)]} for k, v in (tag_filters or {}).items()]
    return sorted((_state(i) for i in _instances(_ec2(region), Filters=filters)), key=lambda s: s.id)


_ID_RE = re.compile(r"i-[0-9a-zA-Z]+")


def _refused(why: str) -> CloudError:
    return CloudError(
        "Refused", why, "ec2.terminate_instances", text=f"ec2.terminate_instances refused: {why}"
    )


def terminate(region: str, ids: Iterable[str], *, only_managed: bool = True) -> list[str]:
    """Terminate instances; returns the IDs EC2 accepted (IDs it does not know are skipped).

    With ``only_managed`` (the default) an instance that EC2 shows without ``srifty:managed=true``,
    or with another install's ``srifty:install-id``, is refused (CloudError, nothing terminated): a
    bug in Srifty must not stop someone else's VM. (One without an install id was launched before
    install ids existed; a caller that names it has it on record, so it passes.) An ID that is
    not visible yet (just launched; EC2 is eventually consistent) is still terminated.
    """
    ids = sorted(set(ids))
    if not ids:
        return []
    if only_managed:
        seen = describe(region, ids)
        foreign = [s.id for s in seen if s.tags.get(MANAGED_TAG) != "true"]
        if foreign:
            raise _refused(f"not Srifty-managed: {', '.join(foreign)}")
        ours = tags.install_id()
        others = [s.id for s in seen if s.tags.get(INSTALL_TAG, ours) != ours]
        if others:
            raise _refused(f"started by another Srifty install: {', '.join(others)}")
    cli = _ec2(region)
    done: list[str] = []
    for chunk in _chunks(ids):
        while chunk:
            try:
                resp = call(cli, "terminate_instances", InstanceIds=chunk)
            except CloudError as exc:
                if exc.code != "InvalidInstanceID.NotFound":
                    raise
                missing = set(_ID_RE.findall(exc.message)) & set(chunk)
                if not missing:
                    raise
                log.info("already gone, not terminating: %s", sorted(missing))
                chunk = [i for i in chunk if i not in missing]
                continue
            done += [i["InstanceId"] for i in resp.get("TerminatingInstances", [])]
            break
    return sorted(done)


def spot_interruption_notices(region: str, ids: Iterable[str]) -> list[str]:
    """IDs among ``ids`` that EC2 has marked for (or already carried out) a spot interruption.

    Two sources, because either may lag: the instance's ``StateReason`` (code
    ``Server.SpotInstanceTermination``/``Server.SpotInstanceShutdown`` once it is shutting down
    or gone) and the status code of its spot request (``marked-for-termination`` during the
    two-minute notice, ``instance-terminated-by-price`` and friends after). Instances we stopped
    ourselves (``Client.UserInitiatedShutdown``) and on-demand ones are never reported. The
    in-VM signals (IMDS ``spot/instance-action``, rebalance recommendations) and EventBridge
    events are not visible through these APIs. moto never interrupts instances nor links them to
    spot requests, so there only the "nothing to report" case can be seen; the others are
    tested with botocore's Stubber.
    """
    states = describe(region, ids)
    hit = {s.id for s in states if s.state_reason in SPOT_STATE_REASONS}
    requests = {s.spot_request_id: s.id for s in states if s.spot_request_id and s.id not in hit}
    if requests:
        cli = _ec2(region)
        for chunk in _chunks(sorted(requests)):
            resp = call(
                cli,
                "describe_spot_instance_requests",
                Filters=[{"Name": "spot-instance-request-id", "Values": chunk}],
            )
            for req in resp.get("SpotInstanceRequests", []):
                if (req.get("Status") or {}).get("Code") in SPOT_INTERRUPTION_CODES:
                    hit.add(req.get("InstanceId") or requests.get(req.get("SpotInstanceRequestId"), ""))
    hit.discard("")
    return sorted(hit)


def console_output(region: str, instance_id: str) -> str:
    """The instance's serial console (cloud-init prints the user-data script's output there)."""
    resp = call(_ec2(region), "get_console_output", InstanceId=instance_id)
    raw = resp.get("Output") or ""
    try:  # EC2 sends it base64-encoded; some emulators send plain text
        return base64.b64decode(raw, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return raw

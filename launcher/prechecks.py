"""Launch pre-checks: what AWS would refuse, asked before the confirmation (issue 22, item 9).

``run(option)`` asks AWS, for the plan option's region, and returns one :class:`Check` per
question, each with the fix when it fails:

* **credentials**: STS ``GetCallerIdentity`` answers (nothing else is asked without them);
* **quota**: for each vCPU quota class (P, G, ...) and market, the vCPUs of the option plus what
  already runs in the region fit the applied Service Quotas value;
* **offering**: EC2 offers each type in the region and in the plan's zone
  (``DescribeInstanceTypeOfferings``);
* **subnet**: each zone has a subnet to launch into (``JOB_SUBNET_IDS`` there, else the zone's
  default subnet) with a free address per network interface.

An ``error`` stops the launch (the dialog shows no confirm button); a ``warning`` (a quota AWS
did not state) does not. Nothing here changes anything in AWS.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass

from cloud import account, ec2
from launcher import jobs, options

CREDENTIALS_FIX = (
    "Give the Srifty server AWS credentials through boto3's usual chain: AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in its environment, or an instance role; then reload."
)


@dataclass(frozen=True)
class Check:
    name: str  # credentials | quota | offering | subnet
    status: str  # ok | warning | error
    message: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "error"

    def as_dict(self) -> dict:
        return asdict(self)


def run(option: dict) -> list[Check]:
    """Every pre-check of launching ``option`` (see module doc)."""
    region = option["region"]
    found = credentials(region)
    if found.failed:
        return [found]
    launches = options.node_launches(option)
    out = [found]
    for name, check in (("quota", quotas), ("offering", offerings), ("subnet", subnets)):
        try:
            out += check(region, launches)
        except ec2.CloudError as exc:  # a question AWS would not answer is a failed check, not a crash
            out.append(
                Check(
                    name,
                    "error",
                    f"could not ask AWS: {exc}",
                    "Retry; if it persists, check the server's IAM permissions.",
                )
            )
    return out


def summary(option: dict) -> dict:
    checks = run(option)
    return {
        "ok": not any(c.failed for c in checks),
        "region": option["region"],
        "checks": [c.as_dict() for c in checks],
    }


def credentials(region: str) -> Check:
    try:
        me = account.caller_identity(region)
    except ec2.CloudError as exc:
        return Check(
            "credentials", "error", f"AWS does not accept the server's credentials: {exc}", CREDENTIALS_FIX
        )
    return Check("credentials", "ok", f"AWS account {me.account} ({me.arn})")


def _vcpus(names: set[str], region: str) -> dict[str, int]:
    """vCPUs per type: the catalog's, else EC2's description."""
    from catalog.models import InstanceType

    known = dict(InstanceType.objects.filter(name__in=names).values_list("name", "vcpus"))
    missing = sorted(n for n in names if n not in known and n)
    for name in missing:  # one by one: EC2 refuses the whole call for one unknown name
        try:
            for item in ec2.describe_instance_types(region, [name]):
                known[item["InstanceType"]] = int(item.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        except ec2.CloudError:
            known[name] = 0  # not a type EC2 knows: the offering check says so
    return known


def quotas(region: str, launches: list[options.NodeLaunch]) -> list[Check]:
    """One check per (market, quota class) the option uses."""
    live = ec2.live_instance_types(region)
    vcpus = _vcpus({n.instance_type for n in launches} | {t for t, _ in live}, region)
    wanted: dict[tuple[str, str], int] = defaultdict(int)
    for n in launches:
        wanted[(n.market, account.quota_class(n.instance_type))] += n.count * vcpus.get(n.instance_type, 0)
    running: dict[tuple[str, str], int] = defaultdict(int)
    for itype, market in live:
        running[(market, account.quota_class(itype))] += vcpus.get(itype, 0)
    out = []
    for (market, cls), need in sorted(wanted.items()):
        if need == 0:
            continue  # only types EC2 does not know: the offering check names them
        code = account.EC2_QUOTAS.get((market, cls))
        label = f"{market} {cls} vCPUs"
        value = account.service_quota(region, "ec2", code) if code else None
        if value is None:
            out.append(
                Check(
                    "quota",
                    "warning",
                    f"{label}: the launch needs {need}; AWS states no quota{f' ({code})' if code else ''} "
                    f"in {region}, so EC2 decides at launch",
                )
            )
            continue
        used = running.get((market, cls), 0)
        if need + used > value:
            out.append(
                Check(
                    "quota",
                    "error",
                    f"{label}: the launch needs {need}, {used} run already, the quota is {value:g}",
                    f"Request at least {math.ceil(need + used)} for '{code}' in Service Quotas "
                    f"(console: Service Quotas > Amazon EC2, {region}; or aws service-quotas "
                    f"request-service-quota-increase --service-code ec2 --quota-code {code} "
                    f"--desired-value {math.ceil(need + used)} --region {region}), or pick an option with fewer vCPUs.",
                )
            )
        else:
            out.append(Check("quota", "ok", f"{label}: {need} needed + {used} running ≤ quota {value:g}"))
    return out


def offerings(region: str, launches: list[options.NodeLaunch]) -> list[Check]:
    types = {n.instance_type for n in launches}
    in_region = ec2.instance_type_offerings(region, types)
    out = []
    for itype in sorted(types - in_region):
        out.append(
            Check(
                "offering",
                "error",
                f"EC2 does not offer {itype} in {region}",
                "Re-plan without this region or type (the catalog may be out of date: refresh it).",
            )
        )
    by_zone: dict[str, set[str]] = defaultdict(set)
    for n in launches:
        if n.zone and n.instance_type in in_region:
            by_zone[n.zone].add(n.instance_type)
    for zone, names in sorted(by_zone.items()):
        missing = sorted(names - ec2.instance_type_offerings(region, names, zone))
        if missing:
            out.append(
                Check(
                    "offering",
                    "error",
                    f"EC2 does not offer {', '.join(missing)} in zone {zone}",
                    "Pick a plan option in another zone, or re-plan (refresh the catalog's offerings first).",
                )
            )
    if not out:
        out.append(Check("offering", "ok", f"{', '.join(sorted(types))} offered in {region}"))
    return out


def subnets(region: str, launches: list[options.NodeLaunch]) -> list[Check]:
    """A subnet with room in every zone of the option (EFA types: an address per interface)."""
    from launcher import launch  # the EFA count lives with the launch code

    configured = list(jobs.setting("JOB_SUBNET_IDS", []) or [])
    need: dict[str | None, int] = defaultdict(int)
    for n in launches:
        need[n.zone] += n.count * max(1, launch.efa_interfaces(n.instance_type))
    out = []
    for zone, addresses in sorted(need.items(), key=lambda kv: kv[0] or ""):
        try:
            if configured:
                found = [s for s in ec2.subnets(region, configured) if zone in (None, s.zone, s.zone_id)]
            else:
                found = ec2.subnets(region, zone=zone) if zone else ec2.subnets(region)
        except ec2.CloudError as exc:
            out.append(Check("subnet", "error", f"subnets in {region}: {exc}", "Check JOB_SUBNET_IDS."))
            continue
        where = f"zone {zone}" if zone else region
        if not found:
            fix = (
                f"Add a subnet of {where} to JOB_SUBNET_IDS."
                if configured
                else f"Create the default subnet (aws ec2 create-default-subnet --availability-zone-id {zone} "
                f"--region {region}) or set JOB_SUBNET_IDS to a subnet of {where}."
            )
            what = "none of JOB_SUBNET_IDS is" if configured else "no default subnet is"
            out.append(Check("subnet", "error", f"{what} in {where}", fix))
            continue
        best = max(found, key=lambda s: s.free_ips)
        if best.free_ips < addresses:
            out.append(
                Check(
                    "subnet",
                    "error",
                    f"subnet {best.id} ({where}) has {best.free_ips} free addresses; the nodes need {addresses}",
                    "Free addresses there, or set JOB_SUBNET_IDS to a larger subnet of the zone.",
                )
            )
        else:
            out.append(Check("subnet", "ok", f"subnet {best.id} in {where}: {best.free_ips} free addresses"))
    return out

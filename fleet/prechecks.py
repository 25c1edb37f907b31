"""What AWS would refuse, asked before anything paid starts (issue 22 item 9, issue 38 item 2).

Every paid action (a job launch from the plan row, the task-file dialog, the API or
``manage.py launch``; an EC2 profiling run) describes what it would start as
:class:`LaunchGroup` s and asks :func:`run`. One :class:`Check` per question, each with its fix
when it fails:

* **credentials**: STS ``GetCallerIdentity`` answers (nothing else is asked without them);
* **quota**: for each vCPU quota class (P, G, ...) and market, the vCPUs of the groups plus
  what already runs in the region fit the applied Service Quotas value, i.e.
  ``sum(count x vcpus(type)) + running <= quota``;
* **offering**: EC2 offers each type in the region and in the group's zone
  (``DescribeInstanceTypeOfferings``);
* **subnet**: each zone has a subnet to launch into (``subnet_ids`` there, else the zone's
  default subnet) with ``sum(count x addresses_per_node)`` free addresses.

An ``error`` stops the action; a ``warning`` (a quota AWS did not state) does not. Nothing
here changes anything in AWS, and nothing here reads the database: the callers turn their own
records into launch groups (``launcher.prechecks``, ``profiler.actions``). AWS is asked only
through ``cloud``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from cloud import account, ec2

CREDENTIALS_FIX = (
    "Give the Srifty server AWS credentials through boto3's usual chain: AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in its environment, or an instance role; then reload."
)
RETRY_FIX = "Retry; if it persists, check the server's IAM permissions."

# vCPUs per instance type for the names given: the caller's catalog, say. A name it does not
# know is asked of EC2 (``DescribeInstanceTypes``).
VcpuLookup = Callable[[set[str]], dict[str, int]]


@dataclass(frozen=True)
class LaunchGroup:
    """``count`` nodes of one type and market in one region (and zone, when the plan names
    one): what one ``run_instances`` would start. (A plan's group of nodes, which a launch
    turns into these, is ``planner.option.NodeGroup``.)"""

    instance_type: str
    count: int
    region: str
    zone: str | None = None  # a zone id (use1-az2) or name (us-east-1c); None: EC2 chooses
    market: str = "on-demand"  # on-demand | spot
    addresses_per_node: int = 1  # private addresses a node takes: one per EFA interface


@dataclass(frozen=True)
class Check:
    name: str  # credentials | quota | offering | subnet
    status: str  # ok | warning | error
    message: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "error"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def run(
    groups: Sequence[LaunchGroup], *, subnet_ids: Sequence[str] = (), vcpus: VcpuLookup | None = None
) -> list[Check]:
    """Every pre-check of starting ``groups`` (see the module doc), region by region; the
    credentials are asked once, in the first region, and nothing else is asked without them."""
    if not groups:
        return []
    regions = sorted({g.region for g in groups})
    found = credentials(regions[0])
    if found.failed:
        return [found]
    out = [found]
    for region in regions:
        here = [g for g in groups if g.region == region]
        out += _asked("quota", quotas, region, here, vcpus)
        out += _asked("offering", offerings, region, here)
        out += _asked("subnet", subnets, region, here, subnet_ids)
    return out


def failed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.failed]


def summary(region: str, checks: Sequence[Check]) -> dict[str, object]:
    """What the API and the pages answer: ``ok`` (no check failed), the region, every check."""
    return {"ok": not failed(checks), "region": region, "checks": [c.as_dict() for c in checks]}


def refusal(checks: Sequence[Check]) -> str:
    """One sentence naming the failed checks, for a log or a form's error line."""
    bad = failed(checks)
    return f"{len(bad)} pre-check(s) failed, nothing was started: " + "; ".join(
        f"{c.name}: {c.message}" for c in bad
    )


def _asked(name: str, ask: Callable[..., list[Check]], region: str, *args: object) -> list[Check]:
    """``ask(region, *args)``; a question AWS would not answer is a failed check, not a crash."""
    try:
        return ask(region, *args)
    except ec2.CloudError as exc:
        return [Check(name, "error", f"could not ask AWS in {region}: {exc}", RETRY_FIX)]


def credentials(region: str) -> Check:
    try:
        me = account.caller_identity(region)
    except ec2.CloudError as exc:
        return Check(
            "credentials", "error", f"AWS does not accept the server's credentials: {exc}", CREDENTIALS_FIX
        )
    return Check("credentials", "ok", f"AWS account {me.account} ({me.arn})")


def _vcpus(names: set[str], region: str, known: VcpuLookup | None) -> dict[str, int]:
    """vCPUs per type: the caller's, else EC2's description (0: a type EC2 does not know)."""
    out = dict(known(names)) if known else {}
    for name in sorted(n for n in names if n and n not in out):
        try:  # one by one: EC2 refuses the whole call for one unknown name
            for item in ec2.describe_instance_types(region, [name]):
                out[item["InstanceType"]] = int(item.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        except ec2.CloudError:
            out[name] = 0  # not a type EC2 knows: the offering check says so
    return out


def quotas(region: str, groups: Sequence[LaunchGroup], known: VcpuLookup | None = None) -> list[Check]:
    """One check per (market, quota class) the groups use."""
    live = ec2.live_instance_types(region)
    vcpus = _vcpus({g.instance_type for g in groups} | {t for t, _ in live}, region, known)
    wanted: dict[tuple[str, str], int] = defaultdict(int)
    for g in groups:
        wanted[(g.market, account.quota_class(g.instance_type))] += g.count * vcpus.get(g.instance_type, 0)
    running: dict[tuple[str, str], int] = defaultdict(int)
    for itype, market in live:
        running[(market, account.quota_class(itype))] += vcpus.get(itype, 0)
    return [
        _quota(region, market, cls, need, running.get((market, cls), 0))
        for (market, cls), need in sorted(wanted.items())
        if need  # 0: only types EC2 does not know, which the offering check names
    ]


def _quota(region: str, market: str, cls: str, need: int, used: int) -> Check:
    code = account.EC2_QUOTAS.get((market, cls))
    label = f"{market} {cls} vCPUs"
    value = account.service_quota(region, "ec2", code) if code else None
    if value is None:
        return Check(
            "quota",
            "warning",
            f"{label}: the launch needs {need}; AWS states no quota{f' ({code})' if code else ''} "
            f"in {region}, so EC2 decides at launch",
        )
    if need + used <= value:
        return Check("quota", "ok", f"{label}: {need} needed + {used} running ≤ quota {value:g}")
    want = math.ceil(need + used)
    return Check(
        "quota",
        "error",
        f"{label}: the launch needs {need}, {used} run already, the quota is {value:g}",
        f"Request at least {want} for '{code}' in Service Quotas "
        f"(console: Service Quotas > Amazon EC2, {region}; or aws service-quotas "
        f"request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {want} --region {region}), or pick an option with fewer vCPUs.",
    )


def offerings(region: str, groups: Sequence[LaunchGroup]) -> list[Check]:
    types = {g.instance_type for g in groups}
    in_region = ec2.instance_type_offerings(region, types)
    out = [
        Check(
            "offering",
            "error",
            f"EC2 does not offer {itype} in {region}",
            "Re-plan without this region or type (the catalog may be out of date: refresh it).",
        )
        for itype in sorted(types - in_region)
    ]
    by_zone: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        if g.zone and g.instance_type in in_region:
            by_zone[g.zone].add(g.instance_type)
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
    return out or [Check("offering", "ok", f"{', '.join(sorted(types))} offered in {region}")]


def subnets(region: str, groups: Sequence[LaunchGroup], subnet_ids: Sequence[str] = ()) -> list[Check]:
    """A subnet with room in every zone of the groups (EFA types: an address per interface)."""
    need: dict[str | None, int] = defaultdict(int)
    for g in groups:
        need[g.zone] += g.count * max(1, g.addresses_per_node)
    return [
        _subnet(region, zone, addresses, list(subnet_ids))
        for zone, addresses in sorted(need.items(), key=lambda kv: kv[0] or "")
    ]


def _subnet(region: str, zone: str | None, addresses: int, configured: list[str]) -> Check:
    try:
        if configured:
            found = [s for s in ec2.subnets(region, configured) if zone in (None, s.zone, s.zone_id)]
        else:
            found = ec2.subnets(region, zone=zone) if zone else ec2.subnets(region)
    except ec2.CloudError as exc:
        return Check("subnet", "error", f"subnets in {region}: {exc}", "Check JOB_SUBNET_IDS.")
    where = f"zone {zone}" if zone else region
    if not found:
        fix = (
            f"Add a subnet of {where} to JOB_SUBNET_IDS."
            if configured
            else f"Create the default subnet (aws ec2 create-default-subnet --availability-zone-id {zone} "
            f"--region {region}) or set JOB_SUBNET_IDS to a subnet of {where}."
        )
        what = "none of JOB_SUBNET_IDS is" if configured else "no default subnet is"
        return Check("subnet", "error", f"{what} in {where}", fix)
    best = max(found, key=lambda s: s.free_ips)
    if best.free_ips < addresses:
        return Check(
            "subnet",
            "error",
            f"subnet {best.id} ({where}) has {best.free_ips} free addresses; the nodes need {addresses}",
            "Free addresses there, or set JOB_SUBNET_IDS to a larger subnet of the zone.",
        )
    return Check("subnet", "ok", f"subnet {best.id} in {where}: {best.free_ips} free addresses")

"""A plan option's launch pre-checks: ``fleet.prechecks`` asked about its node groups.

The checks themselves (credentials, vCPU quotas, offerings, subnets; each failure with its fix)
live in ``fleet.prechecks``; this module only says what an option would start: one
``fleet.prechecks.LaunchGroup`` per ``options.node_launches`` entry, with the catalog's vCPUs and
one private address per EFA interface, and the configured ``JOB_SUBNET_IDS``.

Every launch path asks twice: before the confirmation (``launch.prepare``, the precheck
endpoint, the job-new page, ``manage.py launch``) and again on submit (``launch.confirm_and_create``),
so a launch confirmed a few minutes ago still meets what AWS says now. ``require`` turns a
failed check into ``JobError("prechecks", ..., details=[checks])``: the API answers
``{"prechecks": [{"name", "status", "message", "fix"}, ...]}`` (400) and nothing is created.
The setting ``AWS_PRECHECKS`` (default True) turns the asking off, for test suites that fake
no AWS at all; ``manage.py launch --no-prechecks`` does the same for one launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet import network
from fleet import prechecks as fleet
from fleet.prechecks import CREDENTIALS_FIX as CREDENTIALS_FIX
from fleet.prechecks import Check as Check
from launcher import jobs, options
from planner.option import PlanOption

Option = PlanOption | Mapping[str, Any]  # typed, or as stored (PlanRecord.option, Job.option)


def enabled() -> bool:
    return bool(jobs.setting("AWS_PRECHECKS", True))


def _catalog_vcpus(names: set[str]) -> dict[str, int]:
    from catalog.models import InstanceType

    return dict(InstanceType.objects.filter(name__in=names).values_list("name", "vcpus"))


def launch_groups(option: Option) -> list[fleet.LaunchGroup]:
    """What launching ``option`` starts, as launch groups (one per ``run_instances``)."""
    typed = PlanOption.read(option)
    return [
        fleet.LaunchGroup(
            instance_type=n.instance_type,
            count=n.count,
            region=typed.region,
            zone=n.zone,
            market=n.market,
            addresses_per_node=max(1, network.efa_interfaces_of(n.instance_type)),
        )
        for n in options.node_launches(typed)
    ]


def run(option: Option) -> list[Check]:
    """Every pre-check of launching ``option`` (``fleet.prechecks.run``)."""
    return fleet.run(
        launch_groups(option),
        subnet_ids=list(jobs.setting("JOB_SUBNET_IDS", []) or []),
        vcpus=_catalog_vcpus,
    )


def summary(option: Option) -> dict[str, Any]:
    typed = PlanOption.read(option)
    return fleet.summary(typed.region, run(typed))


def require(option: Option) -> list[Check]:
    """The checks of ``option`` when none failed (none when ``AWS_PRECHECKS`` is off), else
    ``JobError("prechecks")`` carrying every check, failed or not, with its fix."""
    if not enabled():
        return []
    checks = run(option)
    if fleet.failed(checks):
        raise jobs.JobError("prechecks", fleet.refusal(checks), [c.as_dict() for c in checks])
    return checks

"""The reconciler: terminate Srifty-managed EC2 instances that no live job or run accounts for.

It judges the nodes of both apps (``launcher`` jobs, ``profiler`` runs), so it lives above them
both: neither app imports the other.

It looks at every instance tagged ``srifty:managed=true`` (``cloud.ec2.find_managed``). Only
those tagged with this install's ``srifty:install-id`` (``settings.INSTALL_ID``) are its to judge:
a staging server or a colleague's ``./run`` in the same AWS account has its own job 7, which this
database knows nothing of. Other installs' instances are counted and left alone; instances without
an install id (launched before install ids) are kept and reported, since nothing says whose they
are. Of its own, it terminates those whose ``srifty:job-id`` / ``srifty:run-id`` points at

* nothing (the row is gone),
* a job or run that has finished, or
* a job past its cap (``Job.cap_at``) or a run past its deadline, by more than
  ``RECONCILE_GRACE_MINUTES`` (5; the watch task normally gets there first). Such a job is
  stopped as well, so its page says why.

Instances of live jobs and runs are left alone, and so are managed instances with neither tag
(nothing says whose they are). Regions scanned: those of unfinished jobs and EC2 runs and of
those created in the last ``RECONCILE_RECENT_DAYS`` (7), plus ``RECONCILE_REGIONS`` (default:
``AWS_DEFAULT_REGION``), or exactly the ones given. One region failing (credentials, throttling)
is reported and does not stop the others; no AWS credentials at all skips the scan ("skipped: no
AWS credentials", no counts). It also deletes this install's job security groups and
placement groups whose job has finished or is gone (the stop task's cleanup, for a server that died
first or a launch stopped half-way). Run it from ``manage.py reconcile_instances``
(``--dry-run`` reports only) or as the self-repeating ``reconcile_task``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from cloud import ec2
from launcher import jobs
from launcher.models import JOB_FINISHED, Job
from profiler.models import FINISHED as RUN_FINISHED
from profiler.models import ProfilingRun, Provider

log = logging.getLogger(__name__)
# botocore's exceptions (cloud.errors: the code of a failure that never reached AWS) when boto3's
# credential chain found nothing: environment, profile files, instance role.
NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError"})


@dataclass
class Action:
    instance_id: str
    region: str
    owner: str  # "job 12", "run 4" or "-"
    reason: str


@dataclass
class Report:
    regions: list[str] = field(default_factory=list)
    scanned: int = 0
    other_installs: int = 0  # managed instances of another install: never judged here
    terminated: list[Action] = field(default_factory=list)
    kept: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped_jobs: list[int] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)  # of finished or gone jobs, deleted
    placement_groups: list[str] = field(default_factory=list)  # of finished or gone jobs, deleted
    dry_run: bool = False
    # Why nothing was looked at ("no AWS credentials"): the report then claims no count at all.
    skipped: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"skipped: {self.skipped}"]
        verb = "would terminate" if self.dry_run else "terminated"
        out = [f"{verb} {a.instance_id} ({a.region}, {a.owner}): {a.reason}" for a in self.terminated]
        out += [f"error: {e}" for e in self.errors]
        gone = "would delete" if self.dry_run else "deleted"
        out += [f"{gone} security group {g} (its job has ended)" for g in self.security_groups]
        out += [f"{gone} placement group {g} (its job has ended)" for g in self.placement_groups]
        out.append(
            f"{self.scanned} managed instance(s) of this install in {', '.join(self.regions) or 'no region'}: "
            f"{len(self.terminated)} {verb}, {len(self.kept)} kept"
            + (f"; {self.other_installs} of other installs left alone" if self.other_installs else "")
        )
        return out


def regions_to_scan(now: datetime | None = None) -> list[str]:
    now = now or timezone.now()
    since = now - timedelta(days=float(jobs.setting("RECONCILE_RECENT_DAYS", 7)))
    found = set(
        Job.objects.filter(Q(created_at__gte=since) | ~Q(status__in=JOB_FINISHED)).values_list(
            "region", flat=True
        )
    )
    found |= set(
        ProfilingRun.objects.filter(provider=Provider.EC2)
        .filter(Q(created_at__gte=since) | ~Q(status__in=RUN_FINISHED))
        .values_list("region", flat=True)
    )
    found |= set(jobs.setting("RECONCILE_REGIONS", None) or [settings.AWS_DEFAULT_REGION])
    return sorted(r for r in found if r)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def verdict(state: ec2.InstanceState, now: datetime) -> tuple[str, str, Job | None]:
    """("terminate" | "keep", reason, a job to stop) for one managed instance."""
    grace = timedelta(minutes=float(jobs.setting("RECONCILE_GRACE_MINUTES", 5)))
    job_tag, run_tag = state.tags.get("srifty:job-id"), state.tags.get("srifty:run-id")
    if job_tag is not None:
        job_pk = _int(job_tag)
        job = Job.objects.filter(pk=job_pk).first() if job_pk else None
        if job is None:
            return "terminate", f"job {job_tag} does not exist", None
        if job.finished:
            return "terminate", f"job {job.pk} is {job.status}", None
        if now > job.cap_at + grace:
            return "terminate", f"job {job.pk} is past its cap ({job.cap_at:%Y-%m-%d %H:%M} UTC)", job
        return "keep", f"job {job.pk} is {job.status}", None
    if run_tag is not None:
        run_pk = _int(run_tag)
        run = ProfilingRun.objects.filter(pk=run_pk).first() if run_pk else None
        if run is None:
            return "terminate", f"run {run_tag} does not exist", None
        if run.finished:
            return "terminate", f"run {run.pk} is {run.status}", None
        if now > run.deadline_at + grace:
            return (
                "terminate",
                f"run {run.pk} is past its deadline ({run.deadline_at:%Y-%m-%d %H:%M} UTC)",
                None,
            )
        return "keep", f"run {run.pk} is {run.status}", None
    return "keep", "no srifty:job-id or srifty:run-id tag", None


def reconcile(regions: list[str] | None = None, dry_run: bool = False, now: datetime | None = None) -> Report:
    now = now or timezone.now()
    report = Report(regions=sorted(set(regions)) if regions else regions_to_scan(now), dry_run=dry_run)
    for region in report.regions:
        try:
            managed = ec2.find_managed(region, any_install=True)
        except ec2.CloudError as exc:
            if exc.code in NO_CREDENTIALS:
                # Nothing can be looked at in any region, and nothing can have been launched
                # with these settings either: a skip, not an error per region every 10 minutes.
                report.skipped = "no AWS credentials"
                break
            report.errors.append(f"{region}: {exc}")
            continue
        doomed: list[str] = []
        for state in managed:
            install = state.tags.get(ec2.INSTALL_TAG)
            if install is not None and install != settings.INSTALL_ID:
                report.other_installs += 1
                continue
            report.scanned += 1
            if state.state in ("shutting-down",):
                continue  # already on its way out
            if install is None:
                report.kept.append(
                    Action(
                        state.id,
                        region,
                        "-",
                        f"no {ec2.INSTALL_TAG} tag (launched before "
                        "install ids, or not by Srifty): whose it is is unknown; left alone",
                    )
                )
                continue
            decision, reason, job = verdict(state, now)
            owner = (
                f"job {state.tags['srifty:job-id']}"
                if "srifty:job-id" in state.tags
                else f"run {state.tags['srifty:run-id']}"
                if "srifty:run-id" in state.tags
                else "-"
            )
            action = Action(state.id, region, owner, reason)
            if decision == "keep":
                report.kept.append(action)
                continue
            report.terminated.append(action)
            doomed.append(state.id)
            if job is not None and job.pk not in report.stopped_jobs:
                report.stopped_jobs.append(job.pk)
                if not dry_run:
                    jobs.stop_job(job, "stopped by the reconciler: past its spend/time cap")
        if doomed and not dry_run:
            try:
                ec2.terminate(region, doomed)
            except ec2.CloudError as exc:
                report.errors.append(f"{region}: {exc}")
        sweep_security_groups(region, report)
        sweep_placement_groups(region, report)
    for line in report.lines():
        log.info("reconcile: %s", line)
    return report


def _ended(job_pk: int | None) -> bool:
    """The job is finished or gone (a group of no known job is not judged: job_pk None)."""
    if job_pk is None:
        return False
    job = Job.objects.filter(pk=job_pk).first()
    return job is None or job.finished


JOB_GROUP_NAME = re.compile(r"^srifty-job-(\d+)$")


def sweep_placement_groups(region: str, report: Report) -> None:
    """Delete this install's job placement groups (``srifty-job-{id}``) whose job has finished
    or is gone, as for security groups: the stop task deletes them, this catches a server that
    died first or a launch stopped half-way. One still in use is left for the next pass."""
    try:
        names = ec2.managed_placement_groups(region)
    except Exception as exc:  # e.g. an endpoint without placement groups: the sweeps before stand
        log.warning("listing placement groups in %s failed", region, exc_info=True)
        report.errors.append(f"{region}: placement groups: {exc}")
        return
    for name in names:
        found = JOB_GROUP_NAME.match(name)
        if not _ended(int(found.group(1)) if found else None):
            continue
        if report.dry_run:
            report.placement_groups.append(name)
            continue
        try:
            ec2.delete_placement_group(region, name)
            report.placement_groups.append(name)
        except ec2.CloudError as exc:
            log.info("placement group %s not deleted yet: %s", name, exc)


def sweep_security_groups(region: str, report: Report) -> None:
    """Delete this install's job security groups whose job has finished or is gone (the stop
    task deletes them; this catches a server that died before it could). A group still held by
    terminating instances (``DependencyViolation``) is left for the next pass."""
    try:
        groups = ec2.managed_security_groups(region)
    except ec2.CloudError as exc:
        report.errors.append(f"{region}: {exc}")
        return
    for group_id, group_tags in groups:
        job_pk = _int(group_tags.get("srifty:job-id"))
        if job_pk is None:
            continue
        job = Job.objects.filter(pk=job_pk).first()
        if job is not None and not job.finished:
            continue
        if report.dry_run:
            report.security_groups.append(group_id)
            continue
        try:
            ec2.delete_security_group(region, group_id)
            report.security_groups.append(group_id)
        except ec2.CloudError as exc:
            log.info("security group %s of job %s not deleted yet: %s", group_id, job_pk, exc)

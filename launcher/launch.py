"""Launching a plan option on EC2, and taking it down again.

What a launch is, exactly (``launcher.options.preview`` shows it before anything starts;
``launch_job`` does it):

* one ``cluster`` placement group ``srifty-job-{id}`` (low latency, one zone);
* one launch template per node group (``srifty-job-{id}-g{n}``; a group whose nodes get
  different batch sizes is split so that each template carries one ``SRIFTY_PER_NODE_BATCH``),
  holding the ``profiler.userdata.training_user_data`` script: it waits for the server's
  rendezvous answer (``GET /api/v1/jobs/{id}/rendezvous/``), then runs ``torchrun`` with the
  user's training command, and powers the VM off (= terminates it) when training ends or at the
  job's cap (``shutdown -h +N``, N = minutes to the cap);
* one ``run_instances`` per node group, spot or on-demand as the plan says, in a subnet of the
  plan's zone, tagged ``srifty:job-id`` (and ``srifty:managed``), with the ClientToken
  ``{launch_token}-g{n}`` stored on the job: a retried launch task finds the instances of the
  first attempt instead of starting new ones;
* instance ids and private IPs are recorded right after each ``run_instances`` so the
  rendezvous can answer as soon as the nodes ask.

Networking: nodes get ``JOB_SECURITY_GROUP_IDS`` (default: the VPC's default group, which lets
members reach each other on every port, as c10d and NCCL need) in ``JOB_SUBNET_IDS`` of the
plan's zone (default: the zone's default subnet), and must reach ``SITE_URL`` over HTTP(S).
``JOB_KEY_NAME`` and ``JOB_INSTANCE_PROFILE`` are passed on when set.

The server-side cap (``Job.cap_at`` = start + min(max_hours, max_spend / hourly)) is enforced by
the watch task and by the reconciler; the VM's own shutdown guard is the backstop.

Confirmation ids are ``django.core.signing`` tokens bound to user, plan, option, command, spend
and hours (and the job a re-plan replaces), valid ``JOB_CONFIRM_MAX_AGE_S`` (600 s).
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import timedelta
from decimal import Decimal

from django.core import signing
from django.utils import timezone

from cloud import ec2
from launcher import jobs, options
from launcher.models import Job, JobStatus
from planner.app.models import PlanRecord
from srifty_web.teams import visible_owner_q

log = logging.getLogger(__name__)

CONFIRM_SALT = "srifty.jobs.confirm"
CLEANUP_ATTEMPTS = 10


# --- confirmation -------------------------------------------------------------------------


def _binding(
    user,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None,
) -> dict:
    return {
        "u": user.pk,
        "p": int(plan_id),
        "r": int(rank),
        "s": str(max_spend_usd),
        "h": repr(float(max_hours)),
        "c": hashlib.sha256(train_command.encode()).hexdigest()[:32],
        "x": replaces,
    }


def confirmation_for(
    user,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None = None,
) -> str:
    """A short-lived signed id that confirms exactly this launch by this user."""
    return signing.dumps(
        _binding(user, plan_id, rank, train_command, max_spend_usd, max_hours, replaces),
        salt=CONFIRM_SALT,
        compress=True,
    )


def check_confirmation(
    token,
    user,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None = None,
) -> None:
    """JobError("confirmation", ...) unless ``token`` confirms exactly these parameters."""
    if not isinstance(token, str) or not token:
        raise jobs.JobError("confirmation", "preview the launch first and send its confirmation id")
    try:
        bound = signing.loads(token, salt=CONFIRM_SALT, max_age=jobs.setting("JOB_CONFIRM_MAX_AGE_S", 600))
    except signing.SignatureExpired as exc:
        raise jobs.JobError("confirmation", "the confirmation has expired; preview the launch again") from exc
    except signing.BadSignature as exc:
        raise jobs.JobError("confirmation", "not a valid confirmation id") from exc
    if bound != _binding(user, plan_id, rank, train_command, max_spend_usd, max_hours, replaces):
        raise jobs.JobError(
            "confirmation",
            "the confirmation is for another launch (plan, option, command, "
            "spend or hours changed); preview again",
        )


def _minutes_to_cap(job: Job, cap_hours: float) -> int:
    now = timezone.now()
    deadline = job.cap_at if job.started_at else now + timedelta(hours=cap_hours)
    return max(1, math.ceil((deadline - now).total_seconds() / 60))


# --- launching ----------------------------------------------------------------------------


def zone_subnets(region: str, zone: str | None) -> list[str | None]:
    """Subnets to try for ``zone`` (a zone id such as ``use1-az2``, as the catalog and the plans
    use, or a zone name such as ``us-east-1c``): ``JOB_SUBNET_IDS`` there, else the zone's
    default subnet."""
    if not zone:
        return [None]
    subnets = ec2.zone_subnets(region, zone, list(jobs.setting("JOB_SUBNET_IDS", []) or []))
    if not subnets:
        log.warning("no subnet in %s for zone %s; letting EC2 choose", region, zone)
    return list(subnets) or [None]


def launch_job(job: Job) -> str:
    """The launch task's body; safe to run again for the same job (see module doc)."""
    job = Job.objects.get(pk=job.pk)
    if job.status != JobStatus.LAUNCHING:
        return f"job {job.pk} is {job.status}; not launching it again"
    option = job.option
    token = jobs.issue_token(job)
    lim = options.limits(option, job.max_spend_usd, job.max_hours)
    tags = {"srifty:job-id": str(job.pk)}
    try:
        launches = options.node_launches(option)
        zones = {n.zone for n in launches}
        group_name = f"srifty-job-{job.pk}"
        use_group = len(zones) == 1  # a cluster placement group lives in one zone
        if use_group:
            ec2.create_placement_group(job.region, group_name)
        job = jobs.mark_launched(
            job, instance_ids=[], node_ips={}, placement_group=group_name if use_group else ""
        )
        images: dict[str, str] = {}
        for node in launches:
            arch = _arch_of(node.instance_type)
            if arch not in images:
                images[arch] = ec2.default_image(job.region, arch)
            image = images[arch]
            minutes = _minutes_to_cap(job, lim.cap_hours)
            spec = ec2.LaunchSpec(
                region=job.region,
                instance_type=node.instance_type,
                max_minutes=minutes,
                market=node.market,
                user_data=options.user_data(job.pk, option, token, job.train_command, node, minutes),
                tags={**tags, "Name": f"srifty-job-{job.pk}-g{node.index}"},
                image_id=image,
                security_group_ids=tuple(jobs.setting("JOB_SECURITY_GROUP_IDS", ()) or ()),
                key_name=jobs.setting("JOB_KEY_NAME", None) or None,
                iam_instance_profile=jobs.setting("JOB_INSTANCE_PROFILE", None) or None,
                placement_group=group_name if use_group else None,
            )
            template = ec2.create_launch_template(job.region, f"srifty-job-{job.pk}-g{node.index}", spec)
            ids = ec2.launch_from_template(
                job.region,
                template,
                node.count,
                node.market,
                {**tags, "Name": f"srifty-job-{job.pk}-g{node.index}"},
                zone_subnets(job.region, node.zone),
                client_token=f"{job.launch_token}-g{node.index}",
            )
            ips = {s.id: s.private_ip for s in ec2.describe(job.region, ids)}
            job = jobs.mark_launched(job, instance_ids=ids, node_ips=ips, template_id=template)
            if job.finished:  # stopped (user, cap) while launching: what started since goes too
                teardown(job)
                return f"job {job.pk} was {job.status} during the launch; terminated its instances"
    except (ec2.CloudError, ValueError) as exc:
        log.exception("launching job %s failed", job.pk)
        jobs.fail_job(job, f"launch failed: {exc}")
        return "failed to launch"
    job = jobs.mark_running(
        job, f"launched {len(job.instance_ids)} instances: {options.describe_option(option)}"
    )
    return f"launched {len(job.instance_ids)} instances"


# --- rendezvous ---------------------------------------------------------------------------


def rendezvous(job: Job, instance_id: str) -> tuple[int, dict]:
    """The server side of the nodes' master discovery (``profiler.userdata.training_user_data``):
    200 ``{"master_addr", "node_rank", "nnodes"}`` go, 202 wait, 4xx give up.

    Rank 0 is the first instance of the first node group; node ranks follow launch order.
    """
    if not instance_id:
        return 400, {"instance_id": ["required: the asking node's EC2 instance id"]}
    if job.finished:
        return 410, {"detail": f"job {job.pk} is {job.status}"}
    if instance_id not in job.instance_ids:
        if job.status == JobStatus.LAUNCHING:
            return 202, {"detail": "the cluster is still launching"}
        return 403, {"detail": "this instance is not a node of this job"}
    if job.status == JobStatus.LAUNCHING:
        return 202, {"detail": "the cluster is still launching"}
    master = job.instance_ids[0]
    if not job.node_ips.get(master):
        try:  # EC2 is eventually consistent: the IP may not have been visible at launch
            found = {s.id: s.private_ip for s in ec2.describe(job.region, job.instance_ids)}
        except ec2.CloudError:
            log.warning("describing job %s nodes for rendezvous failed", job.pk, exc_info=True)
            found = {}
        job = jobs.set_node_ips(job, found)
    addr = job.node_ips.get(master)
    if not addr:
        return 202, {"detail": "waiting for the master's private IP"}
    return 200, {
        "master_addr": addr,
        "node_rank": job.instance_ids.index(instance_id),
        "nnodes": len(job.instance_ids),
    }


# --- taking it down -----------------------------------------------------------------------


def job_instances(job: Job) -> list[str]:
    """Recorded instances plus any EC2 shows with the job's tag (an unrecorded partial launch)."""
    ids = set(job.instance_ids)
    ids |= {s.id for s in ec2.find_managed(job.region, {"srifty:job-id": str(job.pk)})}
    return sorted(ids)


def teardown(job: Job) -> list[str]:
    """Terminate every instance of the job; then the templates and the placement group go."""
    ids = job_instances(job)
    done = ec2.terminate(job.region, ids) if ids else []
    if done:
        jobs.add_event(job, "terminated", f"terminated {len(done)} instance(s)", {"instance_ids": done})
    return done


def cleanup(job: Job) -> bool:
    """Delete launch templates and the placement group; False while the group is still in use
    (terminating instances keep it busy for a minute or two)."""
    for template in job.launch_template_ids:
        ec2.delete_launch_template(job.region, template)
    if job.placement_group:
        try:
            ec2.delete_placement_group(job.region, job.placement_group)
        except ec2.CloudError as exc:
            log.info("placement group %s not deleted yet: %s", job.placement_group, exc)
            return False
    return True


# --- the two-step launch (API and pages) --------------------------------------------------


def _plan(user, plan_id):
    plan = PlanRecord.objects.filter(visible_owner_q(user)).filter(pk=plan_id).first()
    if plan is None:
        raise jobs.JobError("plan", "no such plan")
    return plan


def prepare(
    user, plan_id, rank, train_command, max_spend_usd, max_hours, *, replaces: int | None = None
) -> dict:
    """Step 1: the exact launch (``preview``) plus a confirmation id bound to it."""
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    train_command, spend, hours = jobs.clean_params(train_command, max_spend_usd, max_hours)
    plan = _plan(user, plan_id)
    option = jobs.plan_option(user, plan, rank)
    options.check_user_data(option, train_command)
    out = options.preview(option, spend, hours)
    out.update(
        {
            "plan": plan.pk,
            "rank": int(rank),
            "train_command": train_command,
            "requested": {"max_spend_usd": str(spend), "max_hours": hours},  # send these back with the id
            "confirmation": confirmation_for(user, plan.pk, int(rank), train_command, spend, hours, replaces),
            "confirmation_expires_s": int(jobs.setting("JOB_CONFIRM_MAX_AGE_S", 600)),
        }
    )
    return out


def confirm_and_create(user, plan_id, rank, train_command, max_spend_usd, max_hours, confirmation) -> Job:
    """Step 2: launch, if ``confirmation`` confirms exactly these parameters for this user."""
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    train_command, spend, hours = jobs.clean_params(train_command, max_spend_usd, max_hours)
    plan = _plan(user, plan_id)
    check_confirmation(confirmation, user, plan.pk, int(rank), train_command, spend, hours)
    return jobs.create_job(user, plan, rank, train_command, spend, hours, confirm=True)


def apply_replan(user, job: Job, plan_id, rank, max_spend_usd, max_hours, confirmation) -> Job:
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    _, spend, hours = jobs.clean_params(job.train_command, max_spend_usd, max_hours)
    plan = _plan(user, plan_id)
    check_confirmation(
        confirmation, user, plan.pk, int(rank), job.train_command, spend, hours, replaces=job.pk
    )
    return jobs.apply_replan(job, user, plan, rank, spend, hours, confirm=True)


def _arch_of(instance_type: str) -> str:
    """The catalog's CPU architecture of a type (EC2 needs an image built for it)."""
    from catalog.models import InstanceType

    return InstanceType.objects.filter(name=instance_type).values_list("arch", flat=True).first() or "x86_64"

"""Launching a plan option on EC2, and taking it down again.

What a launch is, exactly (``preview`` shows it before anything starts; ``launch_job`` does it):

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
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.core import signing
from django.utils import timezone

from cloud import ec2
from launcher import jobs
from launcher.models import Job, JobStatus
from profiler.userdata import SERVER_DISCOVERY, training_user_data

log = logging.getLogger(__name__)

CONFIRM_SALT = "srifty.jobs.confirm"
CLEANUP_ATTEMPTS = 10
WORK_DIR = "/opt/srifty/work"


@dataclass(frozen=True)
class NodeLaunch:
    """One ``run_instances`` call: ``count`` nodes of one type/market/zone with one batch size."""

    index: int  # launch order; rank 0 is the first node of launch 0
    group: int  # index into option["groups"]
    instance_type: str
    market: str
    zone: str | None
    count: int
    gpus_per_node: int
    batch_per_node: int
    price_per_hour: float

    @property
    def hourly_usd(self) -> float:
        return self.count * self.price_per_hour


@dataclass(frozen=True)
class Limits:
    hourly_usd: Decimal
    max_spend_usd: Decimal  # min(asked max spend, hourly x max hours)
    cap_hours: float  # min(max hours, max spend / hourly)


def node_launches(option: dict) -> list[NodeLaunch]:
    out: list[NodeLaunch] = []
    for g, group in enumerate(option["groups"]):
        count = int(group["count"])
        batches = [int(b) for b in (group.get("batch_per_node") or [])] or [0] * count
        if len(batches) != count:
            raise jobs.JobError("rank", f"group {g} has {count} nodes but {len(batches)} batch sizes")
        runs: list[tuple[int, int]] = []  # (batch, nodes) in node order
        for b in batches:
            if runs and runs[-1][0] == b:
                runs[-1] = (b, runs[-1][1] + 1)
            else:
                runs.append((b, 1))
        for batch, n in runs:
            out.append(
                NodeLaunch(
                    index=len(out),
                    group=g,
                    instance_type=group["instance_type"],
                    market=group["market"],
                    zone=group.get("zone"),
                    count=n,
                    gpus_per_node=max(1, int(group.get("gpus_per_node") or 1)),
                    batch_per_node=batch,
                    price_per_hour=float(group["price_per_hour"]),
                )
            )
    return out


def option_hourly(option: dict) -> float:
    value = option.get("hourly_usd")
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return sum(int(g["count"]) * float(g["price_per_hour"]) for g in option["groups"])


def limits(option: dict, max_spend_usd: Decimal, max_hours: float) -> Limits:
    hourly = Decimal(str(round(option_hourly(option), 4)))
    if hourly <= 0:
        raise jobs.JobError("rank", "this option has no price")
    by_time = (hourly * Decimal(str(max_hours))).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    spend = min(max_spend_usd, by_time).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    if spend <= 0:
        raise jobs.JobError("max_spend_usd", "the cap allows less than one cent of compute")
    return Limits(hourly_usd=hourly, max_spend_usd=spend, cap_hours=min(max_hours, float(spend / hourly)))


def describe_option(option: dict) -> str:
    parts = [
        f"{g['count']}x {g['instance_type']} ({g['market']}{', ' + g['zone'] if g.get('zone') else ''})"
        for g in option["groups"]
    ]
    return " + ".join(parts) + f" in {option['region']}"


def preview(option: dict, max_spend_usd: Decimal, max_hours: float) -> dict:
    """Exactly what a launch starts and what it may cost."""
    lim = limits(option, max_spend_usd, max_hours)
    launches = node_launches(option)
    return {
        "region": option["region"],
        "instances": [
            {
                "instance_type": n.instance_type,
                "count": n.count,
                "market": n.market,
                "zone": n.zone,
                "gpus_per_node": n.gpus_per_node,
                "gpu_model": option["groups"][n.group].get("gpu_model", ""),
                "batch_per_node": n.batch_per_node,
                "price_per_hour": n.price_per_hour,
                "hourly_usd": round(n.hourly_usd, 4),
            }
            for n in launches
        ],
        "nodes": sum(n.count for n in launches),
        "gpus": sum(n.count * n.gpus_per_node for n in launches),
        "hourly_usd": format(lim.hourly_usd.normalize(), "f"),
        "max_spend_usd": str(lim.max_spend_usd),
        "cap_hours": round(lim.cap_hours, 4),
        "predicted_iter_s": option.get("iter_time_s"),
        "predicted_iter_p90_s": option.get("iter_time_p90_s"),
        "predicted_time_h": option.get("time_h"),
        "global_batch": option.get("global_batch"),
        "placement_group": "cluster",
        "label": describe_option(option),
    }


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


# --- user-data ----------------------------------------------------------------------------


def _nnodes(option: dict) -> int:
    return sum(int(g["count"]) for g in option["groups"])


def agent_url(job_id) -> str:
    return f"{settings.SITE_URL.rstrip('/')}/api/v1/jobs/{job_id}/agent.tar.gz"


def user_data(
    job_id, option: dict, token: str, train_command: str, node: NodeLaunch, max_minutes: int
) -> str:
    """The node script: rendezvous through the server, then torchrun the user's command.

    The profiler package (with ``profiler.agent.report``) is unpacked into the working
    directory, which is put on ``PYTHONPATH``, so the training script can report back.
    """
    return training_user_data(
        server_url=settings.SITE_URL,
        job_id=job_id,
        token=token,
        node_rank=None,
        nnodes=_nnodes(option),
        nproc_per_node=node.gpus_per_node,
        master_addr_discovery=SERVER_DISCOVERY,
        train_command=train_command,
        per_node_batch=max(1, node.batch_per_node),
        max_minutes=max(1, max_minutes),
        env={"PYTHONPATH": WORK_DIR, "SRIFTY_GLOBAL_BATCH": option.get("global_batch") or ""},
        repo_tarball_url=agent_url(job_id),
    )


def check_user_data(option: dict, train_command: str) -> None:
    """Build every node script once with a placeholder token: a command that cannot become a
    script (too long for EC2's 16 KiB, say) is refused before anything launches."""
    try:
        for node in node_launches(option):
            user_data(0, option, "x" * 64, train_command, node, 60)
    except ValueError as exc:
        if isinstance(exc, jobs.JobError):
            raise
        raise jobs.JobError("train_command", str(exc)) from exc


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
    lim = limits(option, job.max_spend_usd, job.max_hours)
    tags = {"srifty:job-id": str(job.pk)}
    try:
        launches = node_launches(option)
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
                user_data=user_data(job.pk, option, token, job.train_command, node, minutes),
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
    job = jobs.mark_running(job, f"launched {len(job.instance_ids)} instances: {describe_option(option)}")
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
    from planner.app.models import PlanRecord
    from srifty_web.teams import visible_owner_q

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
    check_user_data(option, train_command)
    out = preview(option, spend, hours)
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


def replan_budget(job: Job, now=None) -> tuple[Decimal, float]:
    """What is left of the job's caps, for the job that replaces it."""
    now = now or timezone.now()
    spend_left = (job.max_spend_usd - Decimal(str(job.spend_so_far(now)))).quantize(
        Decimal("0.01"), ROUND_DOWN
    )
    start = job.started_at or job.created_at
    hours_left = round(job.max_hours - (min(now, job.finished_at or now) - start).total_seconds() / 3600, 4)
    return spend_left, hours_left


def prepare_replan(user, job: Job, max_spend_usd=None, max_hours=None, refresh: bool = False) -> dict:
    """The re-plan offer for ``job`` (solved now if there is none, or on ``refresh``) as a
    launch preview with a confirmation id that also names the job it replaces."""
    from launcher import monitor

    if not jobs.can_stop(user, job):
        raise jobs.NotAllowed("only the owner (or launcher.change_job) may replace this job")
    offer = None if refresh else monitor.latest_offer(job)
    if offer is None:
        made = monitor.offer_replan(job, "re-plan requested")
        if made is None:
            raise jobs.JobError("job", "no work is left to re-plan")
        if made.kind != "replan_offer":
            raise jobs.JobError("job", made.message)
        offer = made
    spend_left, hours_left = replan_budget(job)
    spend = max_spend_usd if max_spend_usd is not None else spend_left
    hours = max_hours if max_hours is not None else hours_left
    if max_spend_usd is None and spend_left <= 0:
        raise jobs.JobError(
            "max_spend_usd", "nothing is left of the job's spend cap; give a new max_spend_usd"
        )
    if max_hours is None and hours_left <= 0:
        raise jobs.JobError("max_hours", "nothing is left of the job's time cap; give a new max_hours")
    out = prepare(
        user, offer.data["plan"], offer.data["rank"], job.train_command, spend, hours, replaces=job.pk
    )
    out.update(
        {"replaces": job.pk, "remaining_samples": offer.data.get("remaining_samples"), "offer": offer.message}
    )
    return out


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

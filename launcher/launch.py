"""Launching a plan option on EC2, and taking it down again.

What a launch is, exactly (``launcher.options.preview`` shows it before anything starts,
``launcher.prechecks`` asks AWS whether it would accept it, before the confirmation and again on
submit, ``launch_job`` does it):

* ``prepare_cluster``: one ``cluster`` placement group ``srifty-job-{id}`` (one zone), one
  security group ``srifty-job-{id}`` that admits only its own members (every port: c10d, NCCL,
  EFA) and the image: the AWS Deep Learning AMI of each architecture from its public SSM
  parameter (``cloud.ec2.dlami_image``), unless the job names a custom AMI; all recorded on the
  job before any node starts;
* ``launch_nodes``, once per node group (``options.node_launches``): a launch template
  ``srifty-job-{id}-g{n}`` holding the ``fleet.boot.task_user_data`` script (fetch the
  workdir, ask the server's rendezvous for the node's environment, ``setup`` once, ``run``;
  power off at the end and at the cap), then one ``run_instances`` naming the AMI, the
  placement group, the security group (``JOB_SECURITY_GROUP_IDS`` are added) and, on EFA types,
  one EFA interface per network card; spot or on-demand as the plan says, in a subnet of the
  plan's zone (``JOB_SUBNET_IDS`` there, else the default one), tagged ``srifty:job-id`` with the
  ClientToken ``{launch_token}-g{n}``: a retried task finds the first attempt's instances;
* instance ids and private IPs are recorded right after each ``run_instances``; ``rendezvous``
  answers every node with its environment (``taskfile.node_env``) once all IPs are known;
* a launch that fails half-way is rolled back (``rollback``: instances, templates, both groups)
  before the job is marked failed. ``launch_replacement`` starts more nodes for a running job.

The server-side cap (``Job.cap_at`` = start + min(max_hours, max_spend / hourly)) is enforced by
the watch task and by the reconciler; the VM's own shutdown guard is the backstop. ``JOB_KEY_NAME``
and ``JOB_INSTANCE_PROFILE`` are passed on when set; nodes must reach ``SITE_URL``.

Confirmation ids are ``django.core.signing`` tokens bound to user, plan, option, command (or
task file, custom AMI and the digest of an uploaded workdir archive), spend and hours (and the job a re-plan replaces), valid
``JOB_CONFIRM_MAX_AGE_S`` (600 s). Each launches one job: its SHA-256 is stored on the job it
created (unique), so a replay, a double click or a client retry gets ``ConfirmationUsed`` (the
API's 409 naming that job) and starts nothing; every preview makes a new id (a random nonce).
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.core import signing
from django.db import transaction
from django.utils import timezone

from cloud import ec2
from fleet import network
from fleet.rendezvous import Cluster, decide
from launcher import jobs, options, prechecks, spot_policy, taskfile, workdirs
from launcher.models import Job, JobInterruption, JobStatus
from planner.app.models import PlanRecord
from planner.option import PlanOption
from srifty_web import queue
from srifty_web.teams import visible_owner_q

if TYPE_CHECKING:
    from catalog.models import InstanceType

log = logging.getLogger(__name__)

CONFIRM_SALT = "srifty.jobs.confirm"
CLEANUP_ATTEMPTS = 10


# --- confirmation -------------------------------------------------------------------------


def _binding(
    user: Any,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None,
) -> dict[str, Any]:
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
    user: Any,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None = None,
) -> str:
    """A short-lived signed id that confirms exactly this launch by this user, once. The nonce
    keeps two previews of the same launch in the same second apart (the timestamp counts whole
    seconds): each may launch one job."""
    return signing.dumps(
        {
            **_binding(user, plan_id, rank, train_command, max_spend_usd, max_hours, replaces),
            "n": secrets.token_hex(8),
        },
        salt=CONFIRM_SALT,
        compress=True,
    )


def check_confirmation(
    token: object,
    user: Any,
    plan_id: int,
    rank: int,
    train_command: str,
    max_spend_usd: Decimal,
    max_hours: float,
    replaces: int | None = None,
) -> str:
    """JobError("confirmation", ...) unless ``token`` confirms exactly these parameters;
    ``ConfirmationUsed`` when it already launched a job. Returns its digest, which
    ``jobs.create_job`` stores on the job in the transaction that creates it."""
    if not isinstance(token, str) or not token:
        raise jobs.JobError("confirmation", "preview the launch first and send its confirmation id")
    try:
        bound = signing.loads(token, salt=CONFIRM_SALT, max_age=jobs.setting("JOB_CONFIRM_MAX_AGE_S", 600))
    except signing.SignatureExpired as exc:
        raise jobs.JobError("confirmation", "the confirmation has expired; preview the launch again") from exc
    except signing.BadSignature as exc:
        raise jobs.JobError("confirmation", "not a valid confirmation id") from exc
    if not isinstance(bound, dict):
        raise jobs.JobError("confirmation", "not a valid confirmation id")
    bound.pop("n", None)
    if bound != _binding(user, plan_id, rank, train_command, max_spend_usd, max_hours, replaces):
        raise jobs.JobError(
            "confirmation",
            "the confirmation is for another launch (plan, option, command, "
            "spend or hours changed); preview again",
        )
    digest = confirmation_digest(token)
    if (first := jobs.confirmation_used(digest)) is not None:
        raise jobs.ConfirmationUsed(first)  # early, before an archive is stored: the index decides
    return digest


def confirmation_digest(token: str) -> str:
    """What a job stores of the confirmation id that launched it (64 hex digits)."""
    return hashlib.sha256(token.encode()).hexdigest()


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


def _type_row(instance_type: str) -> InstanceType | None:
    from catalog.models import InstanceType

    return InstanceType.objects.filter(name=instance_type).first()


def _arch_of(instance_type: str) -> str:
    """The catalog's CPU architecture of a type (EC2 needs an image built for it)."""
    row = _type_row(instance_type)
    return row.arch if row is not None and row.arch else "x86_64"


def resolve_images(job: Job, launches: list[options.NodeLaunch]) -> Job:
    """The AMI of every node: the job's custom one, else the AWS Deep Learning AMI of each
    architecture from its public SSM parameter; recorded on the job (``arch:ami`` pairs when
    the cluster mixes architectures)."""
    if job.image_id and job.image_source == "custom":
        return job
    archs = sorted({_arch_of(n.instance_type) for n in launches})
    found = {arch: ec2.dlami_image(job.region, arch) for arch in archs}
    if len(found) == 1:
        [image] = found.values()
        return jobs.set_cluster(job, image_id=image.image_id, image_source=image.source)
    return jobs.set_cluster(
        job,
        image_id=",".join(f"{a}:{i.image_id}" for a, i in found.items())[:64],
        image_source=",".join(i.source for i in found.values())[:255],
    )


def image_for(job: Job, instance_type: str) -> str:
    """The AMI ``resolve_images`` recorded for this type's architecture."""
    if "," not in job.image_id and ":" not in job.image_id:
        return job.image_id
    pairs = dict(p.split(":", 1) for p in job.image_id.split(","))
    return pairs[_arch_of(instance_type)]


def prepare_cluster(job: Job, launches: list[options.NodeLaunch]) -> Job:
    """Before any node: the cluster placement group (one zone only), the members-only security
    group (in the VPC of the first node group's subnet) and the image, all recorded on the job
    first, so a launch that fails half-way still removes them."""
    zones = {n.zone for n in launches}
    name = f"srifty-job-{job.pk}"
    if len(zones) == 1:  # a cluster placement group lives in one zone
        job = jobs.set_cluster(job, placement_group=name)
        ec2.create_placement_group(job.region, name)
    if not job.security_group_id:
        subnet = zone_subnets(job.region, launches[0].zone)[0]
        group = ec2.create_cluster_security_group(
            job.region, name, {"srifty:job-id": str(job.pk), "Name": name}, subnet
        )
        job = jobs.set_cluster(job, security_group_id=group)
    return resolve_images(job, launches)


def launch_nodes(job: Job, node: options.NodeLaunch, token: str, *, attempt: str = "") -> list[str]:
    """Start one node group of ``job`` (``node.count`` nodes of one type, market and zone) in
    the job's placement group and security group, with EFA interfaces where the type has them;
    records the instances and their IPs on the job and returns their ids.

    Reusable for a running job (a replacement node: ``launch_replacement``): ``attempt`` makes
    the template name and client token new, so a retried call with the same ``attempt`` finds
    the instances it started instead of starting more."""
    lim = options.limits(job.plan_option, job.max_spend_usd, job.max_hours)
    minutes = _minutes_to_cap(job, lim.cap_hours)
    spec = options.task_spec(job.task, job.train_command)
    archive = (
        workdirs.download_url(job.workdir_archive, job.region, job.pk, minutes * 60 + 3600)
        if job.workdir_archive
        else None
    )
    name = f"srifty-job-{job.pk}-g{node.index}{attempt}"
    tags = {"srifty:job-id": str(job.pk), "Name": name}
    launch_spec = ec2.LaunchSpec(
        region=job.region,
        instance_type=node.instance_type,
        max_minutes=minutes,
        market=node.market,
        user_data=options.user_data(job.pk, spec, token, minutes, archive_url=archive),
        tags=tags,
        image_id=image_for(job, node.instance_type),
        key_name=jobs.setting("JOB_KEY_NAME", None) or None,
        iam_instance_profile=jobs.setting("JOB_INSTANCE_PROFILE", None) or None,
        placement_group=job.placement_group or None,
    )
    template = ec2.create_launch_template(job.region, name, launch_spec)
    job = jobs.mark_launched(job, instance_ids=[], node_ips={}, template_id=template)
    groups = [g for g in (job.security_group_id,) if g]
    groups += list(jobs.setting("JOB_SECURITY_GROUP_IDS", ()) or ())
    ids = ec2.launch_from_template(
        job.region,
        template,
        node.count,
        node.market,
        tags,
        zone_subnets(job.region, node.zone),
        client_token=f"{job.launch_token}-g{node.index}{attempt}",
        image_id=launch_spec.image_id,
        placement_group=job.placement_group or None,
        security_group_ids=groups,
        efa_interfaces=network.efa_interfaces_of(node.instance_type),
    )
    ips = {s.id: s.private_ip for s in ec2.describe(job.region, ids)}
    jobs.mark_launched(job, instance_ids=ids, node_ips=ips)
    return ids


def launch_replacement(
    job: Job, instance_type: str, count: int = 1, *, market: str | None = None, attempt: str = "-r1"
) -> list[str]:
    """Start ``count`` more nodes of ``instance_type`` for a running job (after a spot
    interruption): the first node group of that type is the template (zone, batch, GPUs),
    ``market`` may switch it (e.g. to on-demand). New ranks follow the existing ones; the nodes
    get their environment from the rendezvous like the others."""
    group = next(
        (n for n in options.node_launches(job.plan_option) if n.instance_type == instance_type), None
    )
    if group is None:
        raise jobs.JobError("instance_type", f"job {job.pk} has no {instance_type} nodes")
    node = replace(group, count=count, market=market or group.market)
    return launch_nodes(job, node, jobs.issue_token(job), attempt=attempt)


LAUNCH_CLAIM = "launch_started"


def claim_launch(job: Job, now: datetime | None = None) -> str | None:
    """Claim the launch of ``job`` (None), or say why this caller must not launch it: the job is
    no longer launching, or another caller claimed it less than ``JOB_LAUNCH_CLAIM_S`` (600 s)
    ago. ``create_job`` queues the launch task and ``manage.py launch`` launches too, so with a
    worker running two callers can arrive at once: the claim (a ``launch_started`` event, written
    under the job's row lock) lets one through. An older claim is a launcher that died half-way:
    the next caller takes over (the client tokens make it find what that one started)."""
    now = now or timezone.now()
    lease = timedelta(seconds=float(jobs.setting("JOB_LAUNCH_CLAIM_S", 600)))
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status != JobStatus.LAUNCHING:
            return f"job {locked.pk} is {locked.status}; not launching it again"
        claim = locked.events.filter(kind=LAUNCH_CLAIM).order_by("-at", "-pk").first()
        if claim is not None and now - claim.at < lease:
            return (
                f"job {locked.pk} is being launched (since {claim.at:%H:%M:%S} UTC); not launching it twice"
            )
        jobs.add_event(
            locked,
            LAUNCH_CLAIM,
            "launch started" + (" again: the earlier launch did not finish" if claim is not None else ""),
            at=now,
        )
    return None


def launch_job(job: Job) -> str:
    """The launch task's body; safe to call twice, at once or later (``claim_launch``). A launch
    that fails half-way takes down what it started (instances, templates, placement group,
    security group) before the job is marked failed: a job is never left half-launched."""
    refused = claim_launch(job)
    if refused is not None:
        return refused
    job = Job.objects.get(pk=job.pk)
    token = jobs.issue_token(job)
    try:
        launches = options.node_launches(job.plan_option)
        if (said := _stopped_meanwhile(job)) is not None:
            return said
        job = prepare_cluster(job, launches)
        prepare_node_env(job)
        for node in launches:
            if (said := _stopped_meanwhile(job)) is not None:
                return said
            launch_nodes(job, node, token)
        if (said := _stopped_meanwhile(job)) is not None:
            return said
    except (ec2.CloudError, ValueError) as exc:
        log.exception("launching job %s failed", job.pk)
        rollback(job)
        jobs.fail_job(job, f"launch failed: {exc}")
        return "failed to launch"
    job = Job.objects.get(pk=job.pk)  # launch_nodes recorded the instances on the row, not on job
    job = jobs.mark_running(
        job, f"launched {len(job.instance_ids)} instances: {options.describe_option(job.plan_option)}"
    )
    return f"launched {len(job.instance_ids)} instances"


def _stopped_meanwhile(job: Job) -> str | None:
    """A job stopped (user, cap) while it launched: the stop task may have run before this
    launch made its groups, templates and instances, so the launch undoes all it made."""
    job = Job.objects.get(pk=job.pk)
    if not job.finished:
        return None
    if not rollback(job):  # EC2 still holds a group: the stop task retries (it may have run already)
        queue.enqueue_on_commit(queue.STOP_JOB, job.pk)
    return f"job {job.pk} was {job.status} during the launch; took down what it started"


def rollback(job: Job) -> bool:
    """Undo a failed launch at once: terminate what started, then delete the templates, the
    placement group and the security group (what EC2 still holds is retried by the stop task).
    False while EC2 still holds something."""
    job = Job.objects.get(pk=job.pk)
    try:
        teardown(job)
        return cleanup(job)
    except ec2.CloudError:
        log.warning("rolling back job %s: the stop task retries", job.pk, exc_info=True)
        return False


# --- rendezvous ---------------------------------------------------------------------------


def job_cluster(job: Job) -> Cluster:
    """The job as the rendezvous sees it: ranks in launch order, made for the option's node
    count, launching until every group has started; each answer needs every node's IP
    (``SKYPILOT_NODE_IPS``)."""
    return Cluster(
        noun="job",
        pk=job.pk,
        region=job.region,
        status=job.status,
        ended=job.finished,
        launching=job.status == JobStatus.LAUNCHING,
        instance_ids=tuple(job.instance_ids),
        node_ips=dict(job.node_ips),
        expected_nodes=job.plan_option.nodes,
    )


def prepare_node_env(job: Job) -> dict[str, dict[str, str]]:
    """Per instance type, the environment its nodes start from (``Job.node_env``): the type's
    network settings, the task's envs, secrets and checkpoint settings, and the interval the
    training should checkpoint at (the task file's, or Young/Daly from the option's interruption
    rate when it says ``auto``; seconds, for the training loop). Stored on the job: made once
    per job, at launch or at its first rendezvous, as the option and the task never change."""
    spec = options.task_spec(job.task, job.train_command)
    shared = taskfile.task_env(spec)
    groups = job.plan_option.groups
    if spec.checkpoint is not None:
        minutes, _why = spot_policy.option_interval_min(
            groups,
            (job.plan.request or {}).get("checkpoint_write_s"),
            spec.checkpoint.interval_min,
        )
        shared["SRIFTY_CHECKPOINT_INTERVAL_S"] = str(round(minutes * 60))
    by_type = network.network_env(g.instance_type for g in groups)
    prepared = {name: {**env, **shared} for name, env in by_type.items()}
    Job.objects.filter(pk=job.pk).update(node_env=prepared)
    job.node_env = prepared
    return prepared


def rendezvous(job: Job, instance_id: str, now: datetime | None = None) -> tuple[int, dict[str, Any]]:
    """The server side of the nodes' discovery (``fleet.boot.task_user_data``;
    ``fleet.rendezvous.decide``): 200 ``{"master_addr", "node_rank", "nnodes", "env"}`` go, 202
    wait, 4xx give up.

    Rank 0 is the first instance of the first node group; node ranks follow launch order.
    ``env`` is the node's whole environment (``taskfile.node_env`` over the job's prepared
    ``node_env``); it needs every node's private IP (``SKYPILOT_NODE_IPS``), so the answer waits
    until EC2 shows them all. The first 200 to a replacement node is recorded (``node_joined``,
    at ``now``): the cluster cannot train again before it, so ``interruptions.note_resumes``
    counts only later reports.
    """
    answer = decide(
        job_cluster(job), instance_id, remember=lambda found: jobs.set_node_ips(job, dict(found)).node_ips
    )
    if answer.rank is None:
        return answer.status, answer.body
    prepared = job.node_env or prepare_node_env(job)
    env = taskfile.node_env(None, job.plan_option, answer.rank, list(answer.ips), type_env=prepared)
    _note_joined(job, instance_id, answer.rank, now)
    return answer.status, {**answer.body, "env": env}


def _note_joined(job: Job, instance_id: str, rank: int, now: datetime | None = None) -> None:
    replaced = JobInterruption.objects.filter(job=job).values_list("instance_id", "replacement_ids")
    took = next((old for old, ids in replaced if instance_id in ids), None)
    if took is not None:
        jobs.add_event(
            job,
            "node_joined",
            f"{instance_id} (replacing {took}) joined the cluster as node rank {rank}",
            {"replaces": took, "rank": rank},
            once_for=instance_id,
            at=now,
        )


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
    """Delete launch templates, the placement group and the security group; False while EC2
    still holds one of them (terminating instances keep both groups busy for a minute or two)."""
    for template in job.launch_template_ids:
        ec2.delete_launch_template(job.region, template)
    done = True
    if job.placement_group:
        try:
            ec2.delete_placement_group(job.region, job.placement_group)
        except ec2.CloudError as exc:
            log.info("placement group %s not deleted yet: %s", job.placement_group, exc)
            done = False
    for group in _security_groups(job):
        try:
            ec2.delete_security_group(job.region, group)
        except ec2.CloudError as exc:
            log.info("security group %s not deleted yet: %s", group, exc)
            done = False
    return done


def _security_groups(job: Job) -> list[str]:
    """The recorded group, and any group EC2 shows with the job's tag (made by a launch that
    died before recording it)."""
    found = set(ec2.find_security_groups(job.region, {"srifty:job-id": str(job.pk)}))
    if job.security_group_id:
        found.add(job.security_group_id)
    return sorted(found)


# --- the two-step launch (API and pages) --------------------------------------------------


def _plan(user: Any, plan_id: int | str | None) -> PlanRecord:
    plan = None
    if plan_id is not None:  # a form without one
        plan = PlanRecord.objects.filter(visible_owner_q(user)).filter(pk=plan_id).first()
    if plan is None:
        raise jobs.JobError("plan", "no such plan")
    return plan


def _launched_what(train_command: str, task: str, image_id: str, archive_sha256: str = "") -> str:
    """What a confirmation binds besides plan, option and limits: the command or the task file
    (its whole text), a custom AMI and the uploaded workdir archive's digest."""
    if archive_sha256:
        return f"{train_command}\0{task}\0{image_id}\0{archive_sha256}"
    return train_command if not (task or image_id) else f"{train_command}\0{task}\0{image_id}"


def _clean(
    train_command: str,
    max_spend_usd: object,
    max_hours: object,
    task: str,
    image_id: object,
    *,
    uploaded: bool = False,
    archive: workdirs.Upload | None = None,
) -> tuple[str, str, Decimal, float, str]:
    """(command, task text, spend, hours, image id) of a launch request, or JobError.
    ``uploaded``: a re-plan whose job already has its workdir archive; ``archive``: the one
    uploaded with this request (web dialog, API)."""
    spec = jobs.clean_task(task)
    command = "task" if spec is not None else train_command
    command, spend, hours = jobs.clean_params(command, max_spend_usd, max_hours)
    if spec is not None:
        options.check_user_data(spec, "task")
    folder = spec.workdir.path if spec and spec.workdir and spec.workdir.kind == "local" else None
    local = folder is not None
    if local and not (uploaded or archive):
        line = _key_line(task, "workdir")
        raise jobs.JobError(
            "workdir_archive",
            f"the task's workdir{f' (line {line})' if line else ''}, {folder}, is a folder on your "
            "disk, which the server cannot read: upload the folder as an archive (.tar.gz or .zip), "
            "or use git:URL@ref",
        )
    if archive is not None and not local:
        raise jobs.JobError(
            "workdir_archive",
            "the task has no local workdir for this archive: set workdir: to the folder's "
            "path (e.g. ./train), or leave the archive out",
        )
    return command, (task if spec is not None else ""), spend, hours, jobs.clean_image_id(image_id)


def task_notes(task: str, option: dict[str, Any]) -> list[str]:
    """What the launch preview notes about a task file: where its resources disagree with the
    option, then what it asks that Srifty reads but does not act on (with its line)."""
    if not task:
        return []
    spec = taskfile.parse_task(task)
    return [*taskfile.plan_conflicts(spec, option), *(str(w) for w in spec.warnings)]


def _key_line(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(f"{key}:"):
            return number
    return None


def prepare(
    user: Any,
    plan_id: int | str | None,
    rank: object,
    train_command: str,
    max_spend_usd: object,
    max_hours: object,
    *,
    replaces: int | None = None,
    task: str = "",
    image_id: str = "",
    archive: workdirs.Upload | None = None,
) -> dict[str, Any]:
    """Step 1: the exact launch (``preview``) plus a confirmation id bound to it, once the
    pre-checks passed (``prechecks.require``: else JobError("prechecks") with each check and its
    fix, and no confirmation id). ``task``: a
    task file's text instead of ``train_command`` (errors: JobError("task") with line and field);
    ``archive``: its local workdir, uploaded (checked here, stored only by step 2)."""
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    uploaded = False
    if replaces is not None:  # a re-plan runs what the job it replaces ran, with its workdir
        train_command, task, image_id, uploaded = _replaced(replaces, train_command)
        archive = None
    train_command, task, spend, hours, image_id = _clean(
        train_command,
        max_spend_usd,
        max_hours,
        task,
        image_id,
        uploaded=uploaded,
        archive=archive,
    )
    plan = _plan(user, plan_id)
    option = jobs.plan_option(user, plan, rank)
    if not task:
        options.check_user_data(options.task_spec("", train_command))
    # What AWS would refuse gets no confirmation id. Not for a re-plan: the cluster it replaces
    # still runs and would count twice against the quotas.
    checks = prechecks.require(option) if replaces is None else []
    out = options.preview(option, spend, hours)
    what = _launched_what(train_command, task, image_id, archive.sha256 if archive else "")
    out.update(
        {
            "plan": plan.pk,
            "rank": jobs.option_rank(rank),
            "train_command": train_command if not task else "",
            "task": task,
            "image_id": image_id,
            "task_notes": task_notes(task, option),
            "prechecks": [c.as_dict() for c in checks],
            "workdir_archive": archive.summary() if archive else None,
            "requested": {"max_spend_usd": str(spend), "max_hours": hours},  # send these back with the id
            "confirmation": confirmation_for(
                user, plan.pk, jobs.option_rank(rank), what, spend, hours, replaces
            ),
            "confirmation_expires_s": int(jobs.setting("JOB_CONFIRM_MAX_AGE_S", 600)),
        }
    )
    return out


def confirm_and_create(
    user: Any,
    plan_id: int | str | None,
    rank: object,
    train_command: str,
    max_spend_usd: object,
    max_hours: object,
    confirmation: object,
    *,
    task: str = "",
    image_id: str = "",
    archive: workdirs.Upload | None = None,
) -> Job:
    """Step 2: launch, if ``confirmation`` confirms exactly these parameters for this user
    and the pre-checks still pass (with ``archive``: the same archive as the preview's, which
    is stored only now)."""
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    train_command, task, spend, hours, image_id = _clean(
        train_command, max_spend_usd, max_hours, task, image_id, archive=archive
    )
    plan = _plan(user, plan_id)
    what = _launched_what(train_command, task, image_id, archive.sha256 if archive else "")
    digest = check_confirmation(confirmation, user, plan.pk, jobs.option_rank(rank), what, spend, hours)
    option = jobs.plan_option(user, plan, rank)
    prechecks.require(option)  # again on submit: AWS may have changed since the preview
    stored = ""
    if archive is not None:
        stored = workdirs.store(archive.data, PlanOption.from_json(option).region)
    return jobs.create_job(
        user,
        plan,
        rank,
        train_command,
        spend,
        hours,
        confirm=True,
        task=task,
        image_id=image_id,
        workdir_archive=stored,
        confirmation=digest,
    )


def _replaced(job_id: int, train_command: str) -> tuple[str, str, str, bool]:
    """(command, task, custom image, has an uploaded workdir) of the job a re-plan replaces."""
    old = Job.objects.filter(pk=job_id).first()
    if old is None:
        return train_command, "", "", False
    image = old.image_id if old.image_source == "custom" else ""
    if not old.task:
        return train_command, "", image, False
    return "", old.task, image, bool(old.workdir_archive)


def apply_replan(
    user: Any,
    job: Job,
    plan_id: int | str | None,
    rank: object,
    max_spend_usd: object,
    max_hours: object,
    confirmation: object,
) -> Job:
    if not jobs.can_launch(user):
        raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
    command, task, image_id, uploaded = _replaced(job.pk, job.train_command)
    command, task, spend, hours, image_id = _clean(
        command, max_spend_usd, max_hours, task, image_id, uploaded=uploaded
    )
    plan = _plan(user, plan_id)
    what = _launched_what(command, task, image_id)
    digest = check_confirmation(
        confirmation, user, plan.pk, jobs.option_rank(rank), what, spend, hours, replaces=job.pk
    )
    return jobs.apply_replan(job, user, plan, rank, spend, hours, confirm=True, confirmation=digest)

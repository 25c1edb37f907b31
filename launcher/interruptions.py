"""Checkpoints, interruptions, replacements and the deadline guard of a running job: every
state change about them, one function each (as ``launcher.jobs`` for the rest of a job).

What happens when a node is lost
--------------------------------
A node is *lost* when its spot notice arrives (from the node's own IMDS watcher,
``profiler.agent.spotwatch``, through ``POST /jobs/{id}/interruptions/``, or from EC2's spot
request status), or when the watch finds it gone, stopped or terminated without having shut
itself down. The watch (``launcher.monitor.watch_job``) then calls :func:`handle_loss`, which

1. records a :class:`~launcher.models.JobInterruption`: when the node stopped training (a
   notice's action time, else when it was found), the last checkpoint the job reported before
   that, the **lost minutes** (training since that checkpoint, done again), the **restart
   minutes** (until the replacement trains: the plan's ``restart_overhead_h`` assumed, replaced
   by the measured figure once the job reports again) and the cluster's rate, so that its cost
   is ``spot_policy.interruption_cost``: ``(lost + restart) x rate``;
2. asks the deadline guard where the replacement goes (spot, or on-demand when the job is
   behind its deadline; see below);
3. launches the replacement with ``launcher.launch.launch_replacement`` (same type; on-demand
   when the guard says so or when spot has no capacity; the job's rate then follows the
   catalog's on-demand price) and puts it in the lost node's slot, so the rendezvous gives it
   the lost node's rank, batch and environment;
4. the run resumes from the last checkpoint: the nodes restart ``run``, which loads the newest
   checkpoint under ``SRIFTY_CHECKPOINT_S3``/``SRIFTY_CHECKPOINT_DIR``; the first report after
   the lost node stopped *and* after every replacement got its rendezvous answer is recorded
   as the resume (:func:`note_resumes`: the iteration it resumed at and the measured restart).

   Why the rendezvous: the nodes keep training through a spot notice's 2 minutes (and an EC2
   notice without an action time is dated when the watch saw it) and the Reporter posts its
   batch seconds later, so reports of iterations past the checkpoint arrive after the notice
   from the run that is being lost. An iteration rule (<= checkpoint + a margin) cannot tell
   those from the resumed run's (both follow the checkpoint, and the margin depends on the
   speed and the flush interval); the cluster cannot train again before every rank has joined,
   so a report after the last replacement's first rendezvous answer (``node_joined`` event) is
   the resumed run's.

A surviving node whose ``run`` fails with its lost peer (NCCL errors out, the node script ends
and the VM powers itself off) while the replacement has not trained yet is replaced too (cause
``peer_lost``, no cost of its own: the interruption's lost and restart minutes already count the
whole cluster), so the whole cluster restarts from the checkpoint with every rank in place. A
*replacement* that powers off before the cluster trained again (its setup or ``run`` failed) is
replaced the same way, with cause ``replacement_failed``.

At most ``JOB_MAX_REPLACEMENTS`` (20) nodes are replaced per job: every lost node counts, and so
does every replacement that failed before training (so replacements that keep failing cannot
launch new instances on every watch pass until the spend cap); the original nodes that only
restart with their lost peer (``peer_lost``) do not, or one interruption of a cluster of more
than 20 nodes would use up the limit. When a node is lost past the limit the job fails (its
event says why) and the watch's re-plan offer is what is left. A lost node whose replacement did
not start (no capacity on spot nor on-demand, or a pass that failed half-way) is tried again on
the next passes, up to ``JOB_REPLACEMENT_TRIES`` (10) failed launches; then it stays lost.

Deadline guard (``spot_policy.decide``, "Can't Be Late", NSDI'24)
------------------------------------------------------------------
A job whose plan has a deadline and whose cluster has spot nodes is checked on every watch
pass and at every interruption: ``C`` = total iterations x the predicted iteration time,
``p`` = the latest reported iteration x the same, ``t`` = hours since the start, ``D`` = the
plan's deadline, ``d`` = its restart overhead; ``t`` and ``D`` count from the first report (when
training began, so that booting and setup are not "behind"). When ``p < C t / D`` (behind uniform progress) or
``D - t - (C - p) <= 2 d`` (one more restart would miss the deadline) every spot node is
replaced by an on-demand node of the same type, the job's rate becomes the on-demand one
(catalog prices) and an event says when and why. It does not move back to spot: every move
costs a restart, and a job that was behind once has no slack to spend on it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cloud import ec2
from launcher import jobs, launch, spot_policy
from launcher.models import Job, JobCheckpoint, JobEvent, JobInterruption, JobReport
from planner.option import NodeGroup

log = logging.getLogger(__name__)

SPOT_MARKET = "spot"
ON_DEMAND_MARKET = "on-demand"


# --- reading the plan ---------------------------------------------------------------------


def _request(job: Job) -> dict[str, Any]:
    return job.plan.request or {}


def restart_h(job: Job) -> float:
    value = _request(job).get("restart_overhead_h")
    return float(value) if isinstance(value, (int, float)) and value >= 0 else 0.1


def node_slots(job: Job) -> list[NodeGroup]:
    """The option's group of each node rank (launch order)."""
    out: list[NodeGroup] = []
    for group in job.plan_option.groups:
        out += [group] * group.count
    return out


def node_market(job: Job, instance_id: str) -> str:
    """The market a node of the job runs on now (replacements may differ from the plan)."""
    for row in JobInterruption.objects.filter(job=job).order_by("-at", "-pk"):
        if instance_id in row.replacement_ids:
            return row.replacement_market
    slot = _slot(job, instance_id)
    return (slot.market or "") if slot is not None else ""


def node_type(job: Job, instance_id: str) -> str:
    slot = _slot(job, instance_id)
    return slot.instance_type if slot is not None else ""


def _slot(job: Job, instance_id: str) -> NodeGroup | None:
    """The option's group of one of the job's launched nodes (None: not one of them)."""
    slots = node_slots(job)
    ids: list[str] = job.instance_ids
    if instance_id in ids and ids.index(instance_id) < len(slots):
        return slots[ids.index(instance_id)]
    return None


def checkpoint_interval(job: Job) -> tuple[float, str]:
    """Minutes between checkpoints and why (``spot_policy.option_interval_min``): the task
    file's interval, or ``auto``: Young/Daly from the cluster's interruption rate."""
    task_min = None
    if job.task:
        from launcher.options import task_spec

        spec = task_spec(job.task, job.train_command)
        task_min = spec.checkpoint.interval_min if spec.checkpoint is not None else None
    write_s = _request(job).get("checkpoint_write_s")
    return spot_policy.option_interval_min(
        job.plan_option.groups, float(write_s) if isinstance(write_s, (int, float)) else None, task_min
    )


# --- checkpoints --------------------------------------------------------------------------


def record_checkpoint(
    job: Job,
    iteration: int,
    *,
    samples: int | None = None,
    path: str = "",
    rank: int = 0,
    at: datetime | None = None,
) -> JobCheckpoint | None:
    """Store a checkpoint the training reported (once per iteration: a retried post stores
    nothing twice). Raises JobClosed on a finished job."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.finished:
            raise jobs.JobClosed(f"job {locked.pk} is {locked.status}")
        if JobCheckpoint.objects.filter(job=locked, iteration=iteration).exists():
            return None
        ckpt = JobCheckpoint.objects.create(
            job=locked,
            iteration=iteration,
            samples=samples,
            path=path[:1024],
            rank=rank,
            reported_at=at or timezone.now(),
        )
        jobs.add_event(
            locked,
            "checkpoint",
            f"checkpoint at iteration {iteration:,}" + (f": {path}" if path else ""),
            {"iteration": iteration, "samples": samples, "path": path},
        )
    return ckpt


def last_checkpoint(job: Job, before: datetime | None = None) -> JobCheckpoint | None:
    rows = JobCheckpoint.objects.filter(job=job)
    if before is not None:
        rows = rows.filter(reported_at__lte=before)
    return rows.order_by("-reported_at", "-pk").first()


# --- notices from the nodes ---------------------------------------------------------------


def record_notice(job: Job, instance_id: str, action: str, time: str) -> tuple[bool, str]:
    """A node's IMDS watcher saw its spot notice. Stored once per node as a ``spot_notice``
    event; the next watch pass (``reported_notices``) replaces the node. ``(stored, why)``."""
    if instance_id not in job.instance_ids:
        return False, "this instance is not a node of this job"
    at = parse_datetime(time) if time else None
    event = jobs.add_event(
        job,
        "spot_notice",
        f"{instance_id} got its spot interruption notice: {action or 'terminate'} at {time or 'soon'}",
        {"action": action, "time": at.isoformat() if at else None},
        once_for=instance_id,
    )
    return event is not None, "stored" if event is not None else "already reported"


def reported_notices(job: Job) -> dict[str, datetime | None]:
    """Nodes that reported a spot notice: instance id -> the notice's action time."""
    out: dict[str, datetime | None] = {}
    for event in job.events.filter(kind="spot_notice"):
        when = event.data.get("time")
        out[str(event.data.get("about"))] = parse_datetime(when) if when else None
    return out


# --- losing a node ------------------------------------------------------------------------


def handle_loss(
    job: Job, instance_id: str, cause: str, at: datetime | None = None, now: datetime | None = None
) -> JobInterruption | None:
    """Record a lost node, ask the guard where its replacement goes, launch it in the lost
    node's slot (see the module doc). A node handled before whose replacement never started
    (no capacity, or a pass that failed half-way) is tried again (``_retry``); else None."""
    now = now or timezone.now()
    at = min(at or now, now) if cause != "spot_notice" else (at or now)
    job = Job.objects.get(pk=job.pk)
    if job.finished:
        return None
    existing = JobInterruption.objects.filter(job=job, instance_id=instance_id).first()
    if existing is not None:
        return _retry(job, existing, now)
    try:
        if cause == PEER_LOST:
            return _replace_peer(job, instance_id, at)
        return _record_and_replace(job, instance_id, cause, at, now)
    finally:
        # Every path (replaced, moved to on-demand, past the limit, no capacity): a stopped node
        # would wait, billing its disks, until the job ends. A noticed node trains until EC2
        # takes it; a gone one is gone.
        if cause not in ("spot_notice", "gone"):
            try:
                ec2.terminate(job.region, [instance_id])
            except ec2.CloudError:
                log.warning("job %s: terminating lost node %s failed", job.pk, instance_id, exc_info=True)


def _record_and_replace(
    job: Job, instance_id: str, cause: str, at: datetime, now: datetime
) -> JobInterruption:
    ckpt = last_checkpoint(job, before=at)
    start = job.started_at or job.created_at
    since = ckpt.reported_at if ckpt else start
    restart = restart_h(job)
    cost = spot_policy.interruption_cost(
        max(0.0, (at - start).total_seconds() / 3600),
        max(0.0, (since - start).total_seconds() / 3600),
        restart,
        float(job.hourly_usd),
    )
    market = node_market(job, instance_id)
    itype = node_type(job, instance_id)
    row = JobInterruption.objects.create(
        job=job,
        instance_id=instance_id,
        instance_type=itype,
        market=market,
        cause=cause,
        at=at,
        checkpoint=ckpt,
        lost_min=(cost.lost_h - restart) * 60,
        restart_min=restart * 60,
        hourly_usd=job.hourly_usd,
    )
    resume = (
        f"iteration {ckpt.iteration:,} (checkpoint of {ckpt.reported_at:%H:%M:%S})"
        if ckpt
        else "the start (no checkpoint yet)"
    )
    jobs.add_event(
        job,
        "interruption_cost",
        f"{instance_id} ({itype or '?'}, {market or '?'}) lost: {row.lost_min:.1f} min of training since "
        f"the last checkpoint + {row.restart_min:.1f} min restart (assumed) at ${job.hourly_usd}/h = "
        f"${cost.lost_usd:.2f}; resumes from {resume}",
        {"lost_min": row.lost_min, "restart_min": row.restart_min, "cost_usd": round(cost.lost_usd, 4)},
        once_for=instance_id,
    )
    if _limit_reached(job, instance_id, row):
        return JobInterruption.objects.get(pk=row.pk)
    _place(job, row, now)
    return JobInterruption.objects.get(pk=row.pk)


def _place(job: Job, row: JobInterruption, now: datetime) -> None:
    """Launch the replacement of ``row``'s node: the deadline guard may move the whole job to
    on-demand instead; a node restarting with its peer keeps its market."""
    decision = (
        guard_decision(job, now, current=spot_policy.NONE)
        if row.market == SPOT_MARKET and row.cause not in RESTART_CAUSES
        else None
    )
    if (
        decision is not None
        and decision.market == spot_policy.ON_DEMAND
        and decision.reason in ("must", "behind")
    ):
        move_to_on_demand(job, decision, now, lost=row)
        return
    _replace(job, row, row.market or ON_DEMAND_MARKET, now)


def _retry(job: Job, row: JobInterruption, now: datetime) -> JobInterruption | None:
    """Launch the replacement of a lost node again when no earlier pass did: spot and on-demand
    had no capacity, or a pass failed between recording the loss and launching (the attempt's
    client token makes a launch that did happen be found, not repeated). At most
    ``JOB_REPLACEMENT_TRIES`` (10) failed launches per lost node, and within
    ``JOB_MAX_REPLACEMENTS``; after that the node stays lost (the re-plan offer is left)."""
    if row.replacement_ids or row.cause == "deadline_guard":
        return None
    failed = JobEvent.objects.filter(
        job=job, kind="replacement", data__interruption=row.pk, data__failed=True
    ).count()
    if failed >= int(jobs.setting("JOB_REPLACEMENT_TRIES", 10)):
        return None
    if row.cause != PEER_LOST and _limit_reached(job, row.instance_id, row):
        return JobInterruption.objects.get(pk=row.pk)
    _place(job, row, now)
    return JobInterruption.objects.get(pk=row.pk)


PEER_LOST = "peer_lost"
REPLACEMENT_FAILED = "replacement_failed"
RESTART_CAUSES = (PEER_LOST, REPLACEMENT_FAILED)  # part of another interruption's restart


def replacements_used(job: Job) -> int:
    """Nodes replaced so far that count against ``JOB_MAX_REPLACEMENTS`` (module doc): every
    replaced node but the original survivors restarted with a lost peer."""
    return (
        JobInterruption.objects.filter(job=job).exclude(replacement_ids=[]).exclude(cause=PEER_LOST).count()
    )


def _limit_reached(job: Job, instance_id: str, row: JobInterruption | None = None) -> bool:
    """Past ``JOB_MAX_REPLACEMENTS`` the node is not replaced and the job fails, saying why
    (the cluster cannot train with a rank missing; what still runs is terminated)."""
    limit = int(jobs.setting("JOB_MAX_REPLACEMENTS", 20))
    used = replacements_used(job)
    if used < limit:
        return False
    if row is not None:
        _annotate(row, f"not replaced: the job already replaced {used} nodes (JOB_MAX_REPLACEMENTS)")
    jobs.fail_job(
        job,
        f"{instance_id} was lost and not replaced: the job already replaced {used} nodes, its limit "
        f"(JOB_MAX_REPLACEMENTS = {limit}); a re-plan of the work left is offered where possible",
    )
    return True


def pending_restart(job: Job) -> JobInterruption | None:
    """The latest interruption whose replacement has not trained yet (the cluster restarts)."""
    return (
        JobInterruption.objects.filter(job=job, resumed_at__isnull=True)
        .exclude(replacement_ids=[])
        .exclude(cause__in=RESTART_CAUSES)
        .order_by("-at", "-pk")
        .first()
    )


def _replace_peer(job: Job, instance_id: str, at: datetime) -> JobInterruption | None:
    """A surviving node whose ``run`` ended (its peer was lost, so NCCL failed and the node
    powered off) while the cluster waits for a replacement: it is replaced too, so the whole
    cluster restarts from the checkpoint. Its time is already the interruption's cost (0 here)."""
    cause = pending_restart(job)
    if cause is None:
        return None
    # A replacement that powers off before the cluster trained again failed (setup, run, a bad
    # host): it counts against the limit, or failing replacements would be replaced forever.
    failed = any(
        instance_id in ids
        for ids in JobInterruption.objects.filter(job=job, resumed_at__isnull=True).values_list(
            "replacement_ids", flat=True
        )
    )
    if failed and _limit_reached(job, instance_id):
        return None
    row = JobInterruption.objects.create(
        job=job,
        instance_id=instance_id,
        instance_type=node_type(job, instance_id),
        market=node_market(job, instance_id),
        cause=REPLACEMENT_FAILED if failed else PEER_LOST,
        at=at,
        checkpoint=cause.checkpoint,
        lost_min=0.0,
        restart_min=0.0,
        hourly_usd=job.hourly_usd,
        detail=(
            f"a replacement that powered off before training again after {cause.instance_id} was lost"
            if failed
            else f"its run ended when {cause.instance_id} was lost"
        )
        + "; counted in that interruption's cost",
    )
    _place(job, row, at)
    return JobInterruption.objects.get(pk=row.pk)


def _annotate(row: JobInterruption, text: str, *, failed: bool = False) -> None:
    row.detail = (row.detail + "; " if row.detail else "") + text
    row.save(update_fields=["detail"])
    data = {"interruption": row.pk, **({"failed": True} if failed else {})}
    jobs.add_event(row.job, "replacement", f"{row.instance_id}: {text}", data)


def _replace(job: Job, row: JobInterruption, market: str, now: datetime | None = None) -> list[str]:
    """Launch one node of the lost node's type (spot, else on-demand when spot has no capacity)."""
    attempt = f"-r{JobInterruption.objects.filter(job=job, pk__lte=row.pk).count()}"
    tried = [market] + ([ON_DEMAND_MARKET] if market == SPOT_MARKET else [])
    for m in tried:
        try:
            ids = launch.launch_replacement(job, row.instance_type, 1, market=m, attempt=attempt + m[0])
        except (ec2.CloudError, jobs.JobError) as exc:
            _annotate(row, f"no {m} replacement: {exc}", failed=True)
            continue
        put_in_slots(job, {row.instance_id: ids[0]})
        row.replacement_ids, row.replacement_market = ids, m
        row.save(update_fields=["replacement_ids", "replacement_market"])
        jobs.add_event(
            job,
            "replacement",
            f"{ids[0]} ({row.instance_type}, {m}) replaces {row.instance_id} in its rank; the run resumes "
            + (
                f"from the checkpoint of iteration {row.checkpoint.iteration:,}"
                if row.checkpoint
                else "from the start"
            ),
            {"interruption": row.pk, "instance_ids": ids, "market": m},
        )
        if m != market:
            _fallback_rate(job, row, market, m, now or timezone.now())
        return ids
    return []


def _fallback_rate(job: Job, row: JobInterruption, was: str, now_on: str, now: datetime) -> None:
    """A spot node replaced on-demand (spot had no capacity): the job's rate, and so its spend
    and cap, follow the on-demand price from now on (the job itself stays "on spot": the deadline
    guard still watches its other spot nodes)."""
    job = Job.objects.get(pk=job.pk)
    price = on_demand_price(row.instance_type, job.region)
    if price is None:
        _annotate(
            row, f"no catalog {now_on} price of {row.instance_type}: the job's rate stays ${job.hourly_usd}/h"
        )
        return
    old = Decimal(str(job.plan_option.price_of(row.instance_type)))
    rate = Decimal(str(job.hourly_usd)) + price - old
    _set_rate(job, rate, now, on_demand=False)
    jobs.add_event(
        job,
        "replacement",
        f"{row.replacement_ids[0]} runs {now_on} (${price}/h) instead of {was} (${old}/h): "
        f"${job.hourly_usd}/h -> ${rate.quantize(Decimal('0.0001'))}/h",
        {"interruption": row.pk, "hourly_usd": str(rate)},
    )


def put_in_slots(job: Job, moves: dict[str, str]) -> Job:
    """Give each new instance its predecessor's slot (rank) and drop the predecessor."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        ids = [i for i in locked.instance_ids if i not in moves.values()]
        locked.instance_ids = [moves.get(i, i) for i in ids]
        for old in moves:
            locked.node_ips.pop(old, None)
        locked.save(update_fields=["instance_ids", "node_ips"])
    return locked


def joined_at(job: Job, instance_ids: list[str]) -> datetime | None:
    """When the last of ``instance_ids`` got its first rendezvous answer; None until all did."""
    joined: dict[str, datetime] = dict(
        JobEvent.objects.filter(job=job, kind="node_joined", data__about__in=instance_ids).values_list(
            "data__about", "at"
        )
    )
    if not instance_ids or any(i not in joined for i in instance_ids):
        return None
    return max(joined.values())


def note_resumes(job: Job) -> int:
    """For replaced nodes not yet seen training again: the first report after the lost node
    stopped and after its replacements joined is the resume (module doc, step 4: iteration,
    measured restart). Returns how many were noted."""
    noted = 0
    for row in JobInterruption.objects.filter(job=job, resumed_at__isnull=True).exclude(replacement_ids=[]):
        joined = joined_at(job, list(row.replacement_ids))
        if joined is None:
            continue
        first = (
            JobReport.objects.filter(job=job, reported_at__gt=max(row.at, joined))
            .order_by("reported_at", "pk")
            .first()
        )
        if first is None:
            continue
        if row.cause in RESTART_CAUSES:  # its restart is the interruption's, counted there
            row.resumed_at, row.resumed_iteration = first.reported_at, first.iteration
            row.save(update_fields=["resumed_at", "resumed_iteration"])
            continue
        row.resumed_at, row.resumed_iteration = first.reported_at, first.iteration
        row.restart_min = max(0.0, (first.reported_at - row.at).total_seconds() / 60)
        row.save(update_fields=["resumed_at", "resumed_iteration", "restart_min"])
        from_ckpt = row.checkpoint.iteration if row.checkpoint else 0
        jobs.add_event(
            job,
            "resumed",
            f"training resumed at iteration {first.iteration:,} (checkpoint: {from_ckpt:,}) "
            f"{row.restart_min:.1f} min after {row.instance_id} was lost; the interruption cost "
            f"${row.cost_usd:.2f} ({row.lost_min:.1f} + {row.restart_min:.1f} min)",
            {"interruption": row.pk, "iteration": first.iteration, "checkpoint_iteration": from_ckpt},
        )
        noted += 1
    return noted


# --- the deadline guard -------------------------------------------------------------------


def _latest_iteration(job: Job) -> int:
    last = JobReport.objects.filter(job=job).order_by("-reported_at", "-pk").first()
    return int(last.iteration) if last else 0


def guard_decision(
    job: Job, now: datetime | None = None, current: str | None = None
) -> spot_policy.Decision | None:
    """``spot_policy.decide`` for the job now; None when there is nothing to guard (no
    deadline, no size, already on on-demand, not started)."""
    now = now or timezone.now()
    deadline = _request(job).get("deadline_hours")
    if not isinstance(deadline, (int, float)) or deadline <= 0 or job.started_at is None:
        return None
    if job.on_demand_since is not None or job.total_iterations <= 0 or job.predicted_iter_s <= 0:
        return None
    if current is None:
        if not any(node_market(job, i) == SPOT_MARKET for i in job.instance_ids):
            return None
        current = spot_policy.SPOT
    # Uniform progress counts from when training began (the first report), with the deadline
    # that was left then: booting, setup and the first rendezvous are not "behind".
    first = JobReport.objects.filter(job=job).order_by("reported_at", "pk").first()
    if first is None:
        return None
    per_it_h = job.predicted_iter_s / 3600
    return spot_policy.decide(
        spot_policy.Progress(
            now_h=max(0.0, (now - first.reported_at).total_seconds() / 3600),
            deadline_h=float(deadline) - (first.reported_at - job.started_at).total_seconds() / 3600,
            work_total_h=job.total_iterations * per_it_h,
            work_done_h=min(job.total_iterations, _latest_iteration(job)) * per_it_h,
            restart_h=restart_h(job),
            current=current,
        )
    )


def guard(job: Job, now: datetime | None = None) -> spot_policy.Decision | None:
    """One watch pass of the deadline guard: move to on-demand when the job falls behind."""
    now = now or timezone.now()
    decision = guard_decision(job, now)
    if (
        decision is not None
        and decision.market == spot_policy.ON_DEMAND
        and decision.reason in ("must", "behind")
    ):
        move_to_on_demand(job, decision, now)
    return decision


def on_demand_price(instance_type: str, region: str) -> Decimal | None:
    from catalog.models import OnDemandPrice

    row = (
        OnDemandPrice.objects.filter(instance_type__name=instance_type, region__code=region)
        .order_by("-observed_at")
        .first()
    )
    return row.usd_per_hour if row else None


def move_to_on_demand(
    job: Job, decision: spot_policy.Decision, now: datetime | None = None, lost: JobInterruption | None = None
) -> list[str]:
    """Replace every spot node by an on-demand node of its type, in its slot; the job's rate
    becomes the on-demand one. ``lost``: the interruption that led here (its node is replaced
    too, and the move costs nothing more: the cluster restarts from the checkpoint anyway)."""
    now = now or timezone.now()
    job = Job.objects.get(pk=job.pk)
    spot = [i for i in job.instance_ids if node_market(job, i) == SPOT_MARKET]
    if not spot:
        return []
    moves: dict[str, str] = {}
    new_rate = Decimal(str(job.hourly_usd))
    for itype in sorted({node_type(job, i) for i in spot}):
        old = [i for i in spot if node_type(job, i) == itype]
        try:
            ids = launch.launch_replacement(
                job, itype, len(old), market=ON_DEMAND_MARKET, attempt=f"-od{len(moves)}"
            )
        except (ec2.CloudError, jobs.JobError) as exc:
            jobs.add_event(
                job, "deadline_guard", f"moving {itype} to on-demand failed: {exc}", {"why": decision.why}
            )
            continue
        moves.update(zip(old, ids, strict=False))
        group_price = job.plan_option.price_of(itype)
        price = on_demand_price(itype, job.region)
        if price is not None:
            new_rate += (price - Decimal(str(group_price))) * len(old)
    if not moves:
        return []
    put_in_slots(job, moves)
    survivors = [old for old in moves if lost is None or old != lost.instance_id]
    if survivors:
        try:
            ec2.terminate(job.region, survivors)
        except ec2.CloudError:
            log.warning("job %s: terminating the spot nodes moved to on-demand failed", job.pk, exc_info=True)
    row = lost or JobInterruption.objects.create(
        job=job,
        instance_id=next(iter(moves)),
        instance_type=node_type(job, next(iter(moves.values()))),
        market=SPOT_MARKET,
        cause="deadline_guard",
        at=now,
        checkpoint=last_checkpoint(job, before=now),
        lost_min=0.0,
        restart_min=restart_h(job) * 60,
        hourly_usd=job.hourly_usd,
    )
    if lost is None and row.checkpoint is not None:
        row.lost_min = max(0.0, (now - row.checkpoint.reported_at).total_seconds() / 60)
    elif lost is None:
        row.lost_min = max(0.0, (now - (job.started_at or now)).total_seconds() / 60)
    row.replacement_ids, row.replacement_market = list(moves.values()), ON_DEMAND_MARKET
    row.detail = (row.detail + "; " if row.detail else "") + f"moved to on-demand: {decision.why}"
    row.save()
    _set_rate(job, new_rate, now)
    jobs.add_event(
        job,
        "deadline_guard",
        f"moved {len(moves)} spot node(s) to on-demand at {now:%Y-%m-%d %H:%M} UTC: {decision.why}; "
        f"${job.hourly_usd}/h -> ${new_rate.quantize(Decimal('0.0001'))}/h",
        {"reason": decision.reason, "why": decision.why, "moves": moves, "hourly_usd": str(new_rate)},
    )
    return list(moves.values())


def _set_rate(job: Job, rate: Decimal, now: datetime, *, on_demand: bool = True) -> Job:
    """The cluster's rate changes at ``now``: what was billed so far is kept apart.
    ``on_demand``: the whole job moved to on-demand (the deadline guard stops watching it)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.spend_before_usd = Decimal(str(round(locked.spend_so_far(now), 4)))
        locked.rate_since = now
        locked.hourly_usd = rate.quantize(Decimal("0.0001"))
        fields = ["spend_before_usd", "rate_since", "hourly_usd"]
        if on_demand:
            locked.on_demand_since = now
            fields.append("on_demand_since")
        locked.save(update_fields=fields)
        jobs.broadcast(locked, jobs.status_message(locked))
    return locked


# --- for the page and the API -------------------------------------------------------------


def summary(job: Job) -> dict[str, Any]:
    """Checkpoints, interruptions and what they cost, the guard's state and the interval
    (datetimes as such: the page formats them, the API's JSON encoder writes ISO 8601)."""
    interval, why = checkpoint_interval(job)
    rows = list(JobInterruption.objects.filter(job=job).select_related("checkpoint"))
    ckpts = list(JobCheckpoint.objects.filter(job=job).order_by("-reported_at", "-pk")[:50])
    return {
        "checkpoint_interval_min": round(interval, 2),
        "checkpoint_interval_why": why,
        "checkpoints": [
            {"iteration": c.iteration, "samples": c.samples, "path": c.path, "at": c.reported_at}
            for c in ckpts
        ],
        "interruptions": [
            {
                "instance_id": r.instance_id,
                "instance_type": r.instance_type,
                "market": r.market,
                "cause": r.cause,
                "at": r.at,
                "checkpoint_iteration": r.checkpoint.iteration if r.checkpoint else None,
                "lost_min": round(r.lost_min, 2),
                "restart_min": round(r.restart_min, 2),
                "restart_measured": r.resumed_at is not None,
                "cost_usd": round(r.cost_usd, 4),
                "replacement_ids": r.replacement_ids,
                "replacement_market": r.replacement_market,
                "resumed_at": r.resumed_at,
                "resumed_iteration": r.resumed_iteration,
                "detail": r.detail,
            }
            for r in rows
        ],
        "lost_min": round(sum(r.lost_min + r.restart_min for r in rows), 2),
        "cost_usd": round(sum(r.cost_usd for r in rows), 4),
        "on_demand_since": job.on_demand_since,
        "guard": _guard_text(job),
    }


def _guard_text(job: Job) -> str:
    moved = job.events.filter(kind="deadline_guard").order_by("-at").first()
    if moved is not None:
        return moved.message
    decision = guard_decision(job)
    if decision is None:
        return "not active (no deadline, no spot nodes, or no training reported yet)"
    return decision.why if decision.market == spot_policy.SPOT else f"would move to on-demand: {decision.why}"


def recent_replacements(job: Job, since: datetime) -> set[str]:
    """Replacement nodes launched after ``since`` (EC2 may not describe them yet)."""
    out: set[str] = set()
    for row in JobInterruption.objects.filter(job=job, at__gte=since):
        out.update(row.replacement_ids)
    return out

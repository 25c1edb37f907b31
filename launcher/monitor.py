"""Watching a running job: observed vs predicted speed, drift, spot interruptions, lost nodes,
the spend/time cap, and re-plan offers for the work that is left.

Drift (interference detection)
------------------------------
The planner predicts the p50 iteration time of the cluster (``Job.predicted_iter_s``) from
profiles taken on quiet machines. Once the job runs, every rank reports the wall time of each
iteration (``profiler.agent.report``). Whenever reports arrive, and on every watch pass,
``check_drift`` takes the reports of the last ``JOB_DRIFT_WINDOW_MINUTES`` (5) minutes, all
ranks together, leaves out each rank's first ``JOB_DRIFT_WARMUP_ITERATIONS`` (3) iterations
(CUDA context, autotuning, DDP's first bucket rebuild) and computes their median. With at least
``JOB_DRIFT_MIN_REPORTS`` (5) reports in the window:

* median > (1 + ``JOB_DRIFT_THRESHOLD`` (0.15)) x predicted p50 -> the job *drifts*:
  ``drift_since`` is set and one ``JobEvent("drift")`` records the median, the ratio and each
  rank's own median (a rank far above the others is a straggler node);
* median <= that bound again -> ``drift_since`` is cleared and ``JobEvent("drift_cleared")``
  is added.

A median over minutes, not one step, so a GC pause, a checkpoint write or a data-loader hiccup
does not trip it; a sustained slowdown does: a noisy neighbour on a shared host, thermal or
power throttling, a degraded network path or a slow node holding back every allreduce (or a
model the planner got wrong). Fewer reports than the minimum in the window (nothing yet, or a
stalled job) leave the state as it is.

Watching (``watch_job``, every ``JOB_WATCH_EVERY_S`` = 30 s)
------------------------------------------------------------
Past ``Job.cap_at`` (spend or time, whichever first) the job is stopped and its instances
terminated. Otherwise its instances are described: a spot interruption notice (the node's own
IMDS watcher's, or EC2's) or a node that is gone or stopped (not by its own shutdown) adds one
event per instance and a re-plan offer for the remaining samples (total minus reported) at
current prices, and ``launcher.interruptions.handle_loss`` records what it cost and launches a
replacement in its rank that resumes from the last checkpoint (not for an instance someone
terminated on purpose: ``Client.UserInitiated*``). Each pass also notes replaced nodes that
train again (the measured restart) and runs the deadline guard, which moves spot nodes to
on-demand when the job falls behind its deadline. When every node is gone the job ends:
succeeded when the nodes shut themselves down after the work was done and every lost node's
replacement trained again (``unhandled_losses``), else failed.
"""

from __future__ import annotations

import copy
import logging
import statistics
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.db.models import Count, Max, Sum
from django.utils import timezone

from cloud import ec2
from launcher import interruptions, jobs, launch, options
from launcher.models import Job, JobEvent, JobInterruption, JobReport, JobStatus
from planner.plan_result import PlanResult

log = logging.getLogger(__name__)

MAX_WINDOW_REPORTS = 20_000
LIVE = ("pending", "running")
SELF_SHUTDOWN = "Client.InstanceInitiatedShutdown"
USER_TERMINATED = "Client.UserInitiated"
LOSS_KINDS = ("spot_interruption", "node_lost")


def _drift_settings() -> tuple[float, float, int, int]:
    return (
        float(jobs.setting("JOB_DRIFT_WINDOW_MINUTES", 5)),
        float(jobs.setting("JOB_DRIFT_THRESHOLD", 0.15)),
        int(jobs.setting("JOB_DRIFT_MIN_REPORTS", 5)),
        int(jobs.setting("JOB_DRIFT_WARMUP_ITERATIONS", 3)),
    )


def window_times(job: Job, now: datetime | None = None) -> dict[int, list[float]]:
    """Iteration times per rank over the drift window (warm-up iterations left out)."""
    now = now or timezone.now()
    minutes, _, _, warmup = _drift_settings()
    rows = (
        JobReport.objects.filter(
            job=job, reported_at__gte=now - timedelta(minutes=minutes), iteration__gt=warmup
        )
        .order_by("-reported_at")
        .values_list("rank", "iter_time_s")[:MAX_WINDOW_REPORTS]
    )
    per_rank: dict[int, list[float]] = {}
    for rank, t in rows:
        per_rank.setdefault(rank, []).append(t)
    return per_rank


def check_drift(job: Job, now: datetime | None = None) -> str | None:
    """Apply the drift rule (module doc). Returns "flagged", "cleared" or None (no change)."""
    job = Job.objects.get(pk=job.pk)
    if job.finished or job.predicted_iter_s <= 0:
        return None
    minutes, threshold, min_reports, _ = _drift_settings()
    per_rank = window_times(job, now)
    times = [t for ts in per_rank.values() for t in ts]
    if len(times) < min_reports:
        return None
    median = statistics.median(times)
    ratio = median / job.predicted_iter_s
    data = {
        "median_iter_s": round(median, 6),
        "predicted_iter_s": job.predicted_iter_s,
        "ratio": round(ratio, 4),
        "window_minutes": minutes,
        "reports": len(times),
        "rank_medians": {str(r): round(statistics.median(ts), 6) for r, ts in sorted(per_rank.items())},
    }
    if ratio > 1 + threshold:
        slowest = max(per_rank.items(), key=lambda kv: statistics.median(kv[1]))[0]
        message = (
            f"iterations take {median:.3f} s (median of the last {minutes:g} min), "
            f"{(ratio - 1) * 100:.0f}% above the predicted {job.predicted_iter_s:.3f} s; slowest rank {slowest}"
        )
        return "flagged" if jobs.set_drift(job, message, data) else None
    if job.drift_since is not None:
        message = f"back to {median:.3f} s per iteration ({(ratio - 1) * 100:+.0f}% vs predicted)"
        return "cleared" if jobs.clear_drift(job, message, data) else None
    return None


def progress(job: Job) -> dict[str, Any]:
    """Work done and left. Samples are the reported ones (every rank reports its own, so their
    sum is the cluster's); without samples, iterations x the global batch."""
    global_batch = max(1, job.plan_option.global_batch or 1)
    agg = JobReport.objects.filter(job=job).aggregate(
        sum_samples=Sum("samples"), with_samples=Count("samples"), iterations=Max("iteration")
    )
    iterations = int(agg["iterations"] or 0)
    done = float(agg["sum_samples"]) if agg["with_samples"] else float(iterations * global_batch)
    total = jobs.total_samples(job.plan, job.plan_option) or float(job.total_iterations * global_batch)
    remaining = max(0.0, total - done)
    return {
        "done_samples": done,
        "total_samples": total,
        "remaining_samples": remaining,
        "iterations": iterations,
        "total_iterations": job.total_iterations,
        "fraction": round(min(1.0, done / total), 4) if total else None,
    }


def observed(job: Job, limit: int = 2000) -> dict[str, Any]:
    """Observed vs predicted, for the API and the page."""
    recent = list(
        JobReport.objects.filter(job=job)
        .order_by("-reported_at", "-seq")
        .values("iteration", "iter_time_s", "rank")[:limit]
    )[::-1]
    times = [r["iter_time_s"] for r in recent]
    p50 = statistics.median(times) if times else None
    p90 = statistics.quantiles(times, n=10)[-1] if len(times) >= 2 else p50
    return {
        "reports": JobReport.objects.filter(job=job).count(),
        "median_iter_s": p50,
        "p90_iter_s": p90,
        "predicted_iter_s": job.predicted_iter_s,
        "predicted_iter_p90_s": job.predicted_iter_p90_s,
        "ratio": round(p50 / job.predicted_iter_s, 4) if p50 and job.predicted_iter_s else None,
        "series": recent,
    }


# --- re-plan ------------------------------------------------------------------------------


def replan_request(job: Job, remaining_samples: float, now: datetime | None = None) -> dict[str, Any]:
    """The job's plan request for the work that is left: ``total_samples`` = remaining, and the
    deadline/budget reduced by what has already passed/been spent (dropped when used up)."""
    now = now or timezone.now()
    request = copy.deepcopy(job.plan.request or {})
    for key in ("samples_per_epoch", "epochs", "iterations"):
        request.pop(key, None)  # sizes that would override total_samples
    request["total_samples"] = remaining_samples
    start = job.started_at or job.created_at
    elapsed_h = max(0.0, (now - start).total_seconds() / 3600)
    if isinstance(request.get("deadline_hours"), (int, float)):
        left = request["deadline_hours"] - elapsed_h
        request["deadline_hours"] = round(left, 4) if left > 0 else None
    if isinstance(request.get("budget_usd"), (int, float)):
        left = request["budget_usd"] - job.spend_so_far(now)
        request["budget_usd"] = round(left, 2) if left > 0 else None
    return {k: v for k, v in request.items() if v is not None}


def offer_replan(job: Job, reason: str) -> JobEvent | None:
    """Solve the remaining work again (``planner.app.solving.create_plan``) and offer the best
    option as a ``replan_offer`` event; ``replan_failed`` when that is not possible."""
    left = progress(job)["remaining_samples"]
    if left <= 0:
        return None
    try:
        from planner.app.solving import create_plan
    except ImportError:
        return jobs.add_event(job, "replan_failed", "re-planning is not available on this server")
    try:
        plan = create_plan(job.owner, replan_request(job, left))
    except Exception as exc:  # an infeasible or failed solve is a message for the user, not a crash
        log.warning("re-plan of job %s failed", job.pk, exc_info=True)
        return jobs.add_event(job, "replan_failed", f"re-plan failed: {exc}")
    offered = PlanResult.read(plan.result).best
    if offered is None:
        return jobs.add_event(
            job, "replan_failed", f"re-plan found no option: {plan.error or plan.status}", {"plan": plan.pk}
        )
    best = offered.option
    return jobs.add_event(
        job,
        "replan_offer",
        f"{reason}; re-plan for the {left:,.0f} samples left: {options.describe_option(best)} at "
        f"${best.hourly_usd or 0:.2f}/h, about {best.time_h or 0:.2f} h",
        {
            "plan": plan.pk,
            "rank": best.rank,
            "remaining_samples": left,
            "hourly_usd": best.hourly_usd,
            "time_h": best.time_h,
            "label": options.describe_option(best),
        },
    )


def latest_offer(job: Job) -> JobEvent | None:
    offer = JobEvent.objects.filter(job=job, kind="replan_offer").order_by("-at", "-pk").first()
    if offer is None:
        return None
    applied = JobEvent.objects.filter(job=job, kind="replan_applied", at__gte=offer.at).exists()
    return None if applied else offer


def replan_budget(job: Job, now: datetime | None = None) -> tuple[Decimal, float]:
    """What is left of the job's caps, for the job that replaces it."""
    now = now or timezone.now()
    spend_left = (job.max_spend_usd - Decimal(str(job.spend_so_far(now)))).quantize(
        Decimal("0.01"), ROUND_DOWN
    )
    start = job.started_at or job.created_at
    hours_left = round(job.max_hours - (min(now, job.finished_at or now) - start).total_seconds() / 3600, 4)
    return spend_left, hours_left


def prepare_replan(
    user: Any,
    job: Job,
    max_spend_usd: Decimal | None = None,
    max_hours: float | None = None,
    refresh: bool = False,
) -> dict[str, Any]:
    """The re-plan offer for ``job`` (solved now if there is none, or on ``refresh``) as a
    launch preview with a confirmation id that also names the job it replaces."""
    if not jobs.can_stop(user, job):
        raise jobs.NotAllowed("only the owner (or launcher.change_job) may replace this job")
    offer = None if refresh else latest_offer(job)
    if offer is None:
        made = offer_replan(job, "re-plan requested")
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
    out = launch.prepare(
        user, offer.data["plan"], offer.data["rank"], job.train_command, spend, hours, replaces=job.pk
    )
    out.update(
        {"replaces": job.pk, "remaining_samples": offer.data.get("remaining_samples"), "offer": offer.message}
    )
    return out


# --- the watch ----------------------------------------------------------------------------


def cap_reason(job: Job) -> str:
    spend_hours = float(job.max_spend_usd / job.hourly_usd) if job.hourly_usd else job.max_hours
    if spend_hours < job.max_hours:
        return f"stopped at its spend cap (${job.max_spend_usd} at ${job.hourly_usd}/h)"
    return f"stopped at its time cap ({job.max_hours:g} h)"


def watch_job(job: Job, now: datetime | None = None) -> str:
    """One look at a job; returns "watching" while it should be looked at again."""
    now = now or timezone.now()
    job = Job.objects.get(pk=job.pk)
    if job.finished:
        return job.status
    if now >= job.cap_at:
        jobs.stop_job(job, cap_reason(job))
        return "capped"
    if job.status == JobStatus.LAUNCHING or not job.instance_ids:
        limit = timedelta(minutes=float(jobs.setting("JOB_LAUNCH_TIMEOUT_MINUTES", 30)))
        if now - job.created_at > limit:
            jobs.fail_job(job, "the launch did not finish in time")
            return "failed"
        return "watching"
    states = {s.id: s for s in ec2.describe(job.region, job.instance_ids)}
    # A notice from the node's own IMDS watcher (with the action time) or from EC2's spot request.
    noticed = interruptions.reported_notices(job)
    interrupted = set(ec2.spot_interruption_notices(job.region, job.instance_ids)) | set(noticed)
    fresh_grace = timedelta(minutes=5)  # describe may not show a just-launched instance yet
    fresh = interruptions.recent_replacements(job, now - fresh_grace)
    # Resumes first: a cluster that trained again since the last pass is no longer restarting,
    # so its nodes shutting down now finished the work (not peers of a lost node).
    interruptions.note_resumes(job)
    restarting = interruptions.pending_restart(job)
    losses: list[tuple[str, str, datetime | None]] = []  # (instance, cause, when it stopped training)
    new, exited = 0, []
    for instance_id in job.instance_ids:
        state = states.get(instance_id)
        if instance_id in interrupted:
            ev = jobs.add_event(
                job,
                "spot_interruption",
                f"spot interruption of {instance_id} ({state.instance_type if state else '?'})",
                once_for=instance_id,
            )
            new += ev is not None
            losses.append((instance_id, "spot_notice", noticed.get(instance_id)))
            continue
        if state is None:
            if job.started_at and now - job.started_at > fresh_grace and instance_id not in fresh:
                ev = jobs.add_event(job, "node_lost", f"{instance_id} is gone", once_for=instance_id)
                new += ev is not None
                losses.append((instance_id, "gone", None))
            continue
        if state.state in LIVE:
            continue
        if state.state_reason == SELF_SHUTDOWN:
            if restarting is not None:  # its run failed with the lost peer: replace it too
                losses.append((instance_id, interruptions.PEER_LOST, None))
                continue
            exited.append(instance_id)
            continue
        ev = jobs.add_event(
            job,
            "node_lost",
            f"{instance_id} ({state.instance_type}) is {state.state}"
            + (f": {state.state_reason}" if state.state_reason else ""),
            {"state": state.state, "reason": state.state_reason},
            once_for=instance_id,
        )
        new += ev is not None
        if not (state.state_reason or "").startswith(USER_TERMINATED):  # someone meant it: no replacement
            losses.append((instance_id, state.state, None))
    # Every lost node is handed on each pass: handle_loss records each node once, and launches
    # again a replacement that did not start (no capacity, a pass that failed half-way), a
    # bounded number of times (interruptions._retry).
    replaced = [
        row
        for instance_id, cause, at in losses
        if (row := interruptions.handle_loss(job, instance_id, cause, at, now)) is not None
        and row.replacement_ids
    ]
    if new:
        offer_replan(job, f"lost {new} node(s)" + (f", {len(replaced)} replaced" if replaced else ""))
    job = Job.objects.get(pk=job.pk)
    if job.finished:  # a loss past JOB_MAX_REPLACEMENTS failed it
        return job.status
    fresh |= {i for row in replaced for i in row.replacement_ids}
    live = [
        i
        for i in job.instance_ids
        if (i in states and states[i].state in LIVE and i not in interrupted) or i in fresh
    ]
    if not live:
        return _all_nodes_gone(job, exited)
    check_drift(job, now)
    interruptions.guard(job, now)
    return "watching"


def unhandled_losses(job: Job) -> list[str]:
    """Nodes lost (interrupted, gone, stopped) that the job did not get past: a loss is handled
    once its replacement trained (``JobInterruption.resumed_at``, set by ``note_resumes``), so
    a job that lost a node, got a replacement and resumed can still end "succeeded"."""
    lost = {
        str(about)
        for about in JobEvent.objects.filter(job=job, kind__in=LOSS_KINDS).values_list(
            "data__about", flat=True
        )
    }
    resumed = set(
        JobInterruption.objects.filter(job=job, instance_id__in=lost, resumed_at__isnull=False)
        .exclude(replacement_ids=[])
        .values_list("instance_id", flat=True)
    )
    return sorted(lost - resumed)


def _all_nodes_gone(job: Job, exited: list[str]) -> str:
    lost = len(unhandled_losses(job))
    done = progress(job)
    if not lost and len(exited) == len(job.instance_ids):
        if done["fraction"] is None or done["fraction"] >= 0.99:
            jobs.succeed_job(job, "training finished: every node shut itself down")
            return "succeeded"
        jobs.fail_job(
            job,
            f"every node shut itself down after {done['iterations']} of "
            f"{done['total_iterations']} iterations (see the node log)",
        )
        return "failed"
    jobs.fail_job(
        job,
        f"every node is gone ({lost} lost or interrupted)"
        + ("; a re-plan is offered" if latest_offer(job) else ""),
    )
    return "failed"

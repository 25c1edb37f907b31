"""Job pages: confirm a launch, list jobs, watch one live, stop it, apply a re-plan.

Every page renders its content on the server (tables and events work without JavaScript);
``job_detail.js`` adds the live chart and updates over the job's websocket.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from launcher import interruptions, jobs, launch, monitor, options, prechecks
from planner.app.models import PlanRecord
from planner.option import PlanOption


def _job(request: HttpRequest, job_id: int):
    job = jobs.visible_jobs(request.user).filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    return job


def _defaults(option: dict) -> dict:
    """Suggested caps: 1.5x the predicted p90 time (at least half an hour), and its cost."""
    typed = PlanOption.from_json(option)
    hours = max(0.5, math.ceil((typed.time_p90_h or typed.time_h or 1.0) * 1.5 * 10) / 10)
    spend = math.ceil(options.option_hourly(typed) * hours)
    return {"train_command": "", "max_spend_usd": str(spend), "max_hours": f"{hours:g}"}


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    listed = list(jobs.visible_jobs(request.user)[:100])
    return render(
        request, "frontend/job_list.html", {"jobs": listed, "never_started": jobs.never_started_ids(listed)}
    )


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    """GET: the exact instances, $/h and max spend of ``?plan=&rank=``, the AWS pre-checks
    (``launcher.prechecks``, each failure with its fix) and, when none failed, the launch form.
    POST without a (matching) confirmation: the preview for the values given, with a fresh
    confirmation id; POST with it: launch and go to the job's page. Both POSTs ask the
    pre-checks again (``launch.prepare``, ``launch.confirm_and_create``): a failure creates
    nothing and shows the checks."""
    source = request.POST if request.method == "POST" else request.GET
    try:
        plan_id, rank = int(source.get("plan", "")), int(source.get("rank", "1"))
    except ValueError as exc:
        raise Http404("give ?plan=<id>&rank=<option>") from exc
    plan = PlanRecord.objects.visible_to(request.user).filter(pk=plan_id).first()
    if plan is None:
        raise Http404("no such plan")
    # The template's values, of many kinds.
    context: dict[str, Any] = {"plan": plan, "rank": rank, "errors": {}, "preview": None, "confirmation": ""}
    if not jobs.can_launch(request.user):
        context["forbidden"] = True
        return render(request, "frontend/job_new.html", context, status=403)
    try:
        option = jobs.plan_option(request.user, plan, rank)
    except jobs.JobError as exc:
        context["errors"] = {exc.field: exc.message}
        return render(request, "frontend/job_new.html", context, status=400)
    values = _defaults(option)
    if request.method == "POST":
        values.update({k: request.POST.get(k, "").strip() for k in values})
    context.update(values=values, option=option)
    if request.method != "POST" and prechecks.enabled():
        context["checks"] = prechecks.summary(option)  # before the form: a failure shows no button
    try:
        _, spend, hours = jobs.clean_params(
            values["train_command"] or "x", values["max_spend_usd"], values["max_hours"]
        )
        context["preview"] = options.preview(option, spend, hours)
    except jobs.JobError as exc:
        context["errors"][exc.field] = exc.message
    if request.method != "POST":
        return render(request, "frontend/job_new.html", context)
    confirmation = request.POST.get("confirmation", "")
    try:
        if confirmation:
            try:
                job = launch.confirm_and_create(
                    request.user,
                    plan.pk,
                    rank,
                    values["train_command"],
                    values["max_spend_usd"],
                    values["max_hours"],
                    confirmation,
                )
                messages.success(request, f"Job {job.pk} is launching.")
                return redirect("job-page", job_id=job.pk)
            except jobs.ConfirmationUsed as exc:  # a second click or a resent form: no second job
                messages.info(request, f"This launch was already confirmed: job {exc.job_id}.")
                return redirect("job-page", job_id=exc.job_id)
            except jobs.JobError as exc:
                if exc.field != "confirmation":
                    raise
                context["changed"] = True  # values edited after the preview: confirm the new ones
        prepared = launch.prepare(
            request.user, plan.pk, rank, values["train_command"], values["max_spend_usd"], values["max_hours"]
        )
    except jobs.JobError as exc:
        context["errors"][exc.field] = exc.message
        if exc.field == "prechecks":  # asked again on review and on submit: nothing was created
            context["checks"] = _checks(option, exc.details or [])
        return render(request, "frontend/job_new.html", context, status=400)
    context.update(preview=prepared, confirmation=prepared["confirmation"])
    if prepared.get("prechecks"):
        context["checks"] = _checks(option, prepared["prechecks"])
    return render(request, "frontend/job_new.html", context)


def _checks(option: dict, checks: list[dict]) -> dict:
    """The pre-checks as ``launcher.prechecks.summary`` gives them, from a launch step's answer."""
    return {
        "ok": not any(c.get("status") == "error" for c in checks),
        "region": PlanOption.from_json(option).region,
        "checks": checks,
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """The job's state, chart, nodes, checkpoints and events; a job that never started (its
    launch failed before any node) says "nothing was started, nothing was spent" and shows no
    spend, re-plan, chart, placement group or deadline guard, which would describe a cluster
    that never was."""
    job = _job(request, job_id)
    if jobs.never_started(job):
        return _never_started(request, job)
    seen = monitor.observed(job)
    groups = _node_groups(job)
    nodes = [
        {"rank": i, "id": iid, "ip": job.node_ips.get(iid, "")} for i, iid in enumerate(job.instance_ids)
    ]
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "groups": groups,
            "nodes": nodes,
            "events": list(job.events.order_by("-at")[:200]),
            "observed": seen,
            "progress": monitor.progress(job),
            "offer": monitor.latest_offer(job),
            "resilience": interruptions.summary(job),
            "spend": job.spend_so_far(),
            "can_stop": jobs.can_stop(request.user, job) and not job.finished,
            "can_replan": jobs.can_launch(request.user) and jobs.can_stop(request.user, job),
            "chart": {
                "series": seen["series"],
                "predicted_iter_s": job.predicted_iter_s,
                "predicted_iter_p90_s": job.predicted_iter_p90_s,
            },
        },
    )


def _node_groups(job) -> list[dict]:
    """Each ``run_instances`` of the job's option with its group's GPU model (the page's table)."""
    option = job.plan_option
    return [{"node": n, "gpu_model": option.groups[n.group].gpu_model} for n in options.node_launches(option)]


def _never_started(request: HttpRequest, job) -> HttpResponse:
    groups = _node_groups(job)
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "never_started": True,
            "groups": groups,
            "nodes": [],
            "events": list(job.events.order_by("-at")[:200]),
            "can_stop": False,
            "can_replan": False,
        },
    )


@login_required
def job_stop(request: HttpRequest, job_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("job-page", job_id=job_id)
    job = _job(request, job_id)
    if not jobs.can_stop(request.user, job):  # a teammate who may watch the job, not stop it
        raise PermissionDenied("only the owner (or launcher.change_job) may stop this job")
    jobs.stop_job(job, f"stopped by {request.user.get_username()}")
    messages.success(request, f"Job {job.pk} is stopping; its instances are being terminated.")
    return redirect("job-page", job_id=job_id)


@login_required
def job_replan(request: HttpRequest, job_id: int) -> HttpResponse:
    """POST: the re-plan for the remaining work, shown as a launch to confirm."""
    if request.method != "POST":
        return redirect("job-page", job_id=job_id)
    job = _job(request, job_id)
    if not (jobs.can_launch(request.user) and jobs.can_stop(request.user, job)):
        raise PermissionDenied(
            "a re-plan needs the launcher.add_job permission and the right to stop this job"
        )
    try:
        prepared = monitor.prepare_replan(request.user, job, refresh=request.POST.get("refresh") == "1")
    except (jobs.JobError, jobs.NotAllowed) as exc:
        messages.error(request, f"No re-plan: {getattr(exc, 'message', exc)}")
        return redirect("job-page", job_id=job_id)
    return render(request, "frontend/job_replan.html", {"job": job, "preview": prepared})


@login_required
def job_replan_apply(request: HttpRequest, job_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("job-page", job_id=job_id)
    job = _job(request, job_id)
    if not (jobs.can_launch(request.user) and jobs.can_stop(request.user, job)):
        raise PermissionDenied(
            "a re-plan needs the launcher.add_job permission and the right to stop this job"
        )
    try:
        new = launch.apply_replan(
            request.user,
            job,
            request.POST.get("plan"),
            int(request.POST.get("rank", "0")),
            Decimal(request.POST.get("max_spend_usd", "0") or "0"),
            request.POST.get("max_hours"),
            request.POST.get("confirmation"),
        )
    except jobs.ConfirmationUsed as exc:
        messages.info(request, f"This re-plan was already applied: job {exc.job_id}.")
        return redirect("job-page", job_id=exc.job_id)
    except (jobs.JobError, jobs.NotAllowed, ValueError, ArithmeticError) as exc:
        messages.error(request, f"Re-plan not applied: {getattr(exc, 'message', exc)}")
        return redirect("job-page", job_id=job_id)
    messages.success(request, f"Job {job.pk} is stopping; job {new.pk} launches the re-plan.")
    return redirect("job-page", job_id=new.pk)

"""Plan pages: the request form (inline errors), the trade-off chart and the ranked table."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from catalog.models import Region
from catalog.zone_prices import lone_zone_prices
from frontend.wording import humanize_errors
from launcher import workdirs
from launcher.taskfile import MAX_TASK_BYTES
from planner.app import permissions, profile_first, service, solving
from planner.app.models import PlanRecord
from planner.app.serializers import PlanRequestSerializer
from planner.defaults import LR_SCALING_NOTE, MIN_BATCH_PER_GPU, PLAN_DEFAULTS
from planner.plan_result import PlanResult, PlanRow
from planner.solver.explain import saves_or_costs, sooner_or_longer
from profiler import actions
from profiler.models import ProfilingRun, RunKind, RunStatus

FORM_DEFAULTS = {
    "model_source": "spec",
    "spec": "torchvision:resnet50",
    "input_shape": "3,224,224",
    "precision": "amp",
    "profile_run": "",
    "samples_per_epoch": "1281167",
    "epochs": "90",
    "objective": "cost",
    "deadline_hours": "24",
    "budget_usd": "",
    "max_hourly_usd": "",
    "regions": [],
    "spot": "on",
    "on_demand": "on",
    "quota_p": "",
    "quota_g": "",
    "baseline_gpu": "A100",
    **{k: str(v) for k, v in PLAN_DEFAULTS.items() if k != "top_k"},  # the one set (planner.defaults)
    "min_batch_per_gpu": "",  # blank: the profile's knee, else MIN_BATCH_PER_GPU (planner.app.service)
    "task": "",  # a task file (planner.app.task_constraints): pasted, or uploaded as task_file
    "task_filename": "",
}


def _visible_plans(request: HttpRequest):
    return PlanRecord.objects.visible_to(request.user).select_related("owner")


def _to_request(v: dict) -> dict:
    """Form fields → the API's plan request (empty fields left out so defaults apply)."""
    model = (
        {"profile_run": v["profile_run"]}
        if v.get("model_source") == "profile" and v.get("profile_run")
        else {
            "spec": v.get("spec", ""),
            "input_shape": v.get("input_shape", ""),
            "precision": v.get("precision"),
        }
    )
    data = {
        "model": model,
        "objective": v.get("objective"),
        "spot": v.get("spot") == "on",
        "on_demand": v.get("on_demand") == "on",
        "regions": v.get("regions") or [],
    }
    for key in (
        "samples_per_epoch",
        "epochs",
        "deadline_hours",
        "budget_usd",
        "max_hourly_usd",
        "max_nodes",
        "max_types",
        "global_batch_min",
        "global_batch_max",
        "min_batch_per_gpu",
        "checkpoint_interval_h",
        "restart_overhead_h",
        "baseline_gpu",
        "name",
    ):
        if v.get(key) not in (None, ""):
            data[key] = v[key]
    quotas = {k: v[f"quota_{k.lower()}"] for k in ("P", "G") if v.get(f"quota_{k.lower()}") not in (None, "")}
    if quotas:
        data["quotas_on_demand"] = quotas
    if (v.get("task") or "").strip():
        data["task"] = v["task"]
        data["task_filename"] = v.get("task_filename") or ""
    return data


def _uploaded_task(request: HttpRequest, values: dict) -> dict[str, str]:
    """An uploaded task file replaces the pasted text (its name names a file without ``name:``);
    field -> message when it cannot be read as text."""
    upload = request.FILES.get("task_file")
    if upload is None:
        return {}
    if (upload.size or 0) > MAX_TASK_BYTES:
        return {"task": f"the task file is larger than {MAX_TASK_BYTES} bytes"}
    try:
        values["task"] = upload.read().decode("utf-8")
    except UnicodeDecodeError:
        return {"task": "the task file is not UTF-8 text"}
    values["task_filename"] = (upload.name or "")[:200]
    return {}


def _flatten_errors(errors: dict) -> dict[str, str]:
    out = {}
    for key, value in errors.items():
        if isinstance(value, dict):
            for sub, msgs in value.items():
                out[sub] = " ".join(map(str, msgs if isinstance(msgs, list) else [msgs]))
        else:
            out[key] = " ".join(map(str, value if isinstance(value, list) else [value]))
    return out


@login_required
def plan_list(request: HttpRequest) -> HttpResponse:
    values, errors = dict(FORM_DEFAULTS), {}
    base_id = request.GET.get("from", "")
    if re.fullmatch(
        r"[0-9]{1,18}", base_id
    ):  # anything else (or another team's plan) is ignored: the empty form
        base = _visible_plans(request).filter(pk=int(base_id)).first()
        if base is not None:
            values.update(_values_from_request(base.request))
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in FORM_DEFAULTS}
        values["regions"] = request.POST.getlist("regions")
        for box in ("spot", "on_demand"):
            values[box] = "on" if request.POST.get(box) else ""
        errors = _uploaded_task(request, values)  # an upload that cannot be read: the form again
        checked = PlanRequestSerializer(data=_to_request(values))
        if not errors and checked.is_valid():
            try:
                record = solving.queue_plan(request.user, dict(checked.validated_data))
            except service.PlanInputError as exc:
                errors = humanize_errors({exc.field: exc.message})
            else:  # solved in the background; the plan page follows its progress
                return redirect("plan-page", plan_id=record.pk)
        elif not errors:
            errors = humanize_errors(_flatten_errors(checked.errors))
    runs = ProfilingRun.objects.visible_to(request.user).filter(
        kind=RunKind.COMPUTE, status=RunStatus.SUCCEEDED
    )[:30]
    return render(
        request,
        "frontend/plans.html",
        {
            "values": values,
            "errors": errors,
            "plans": _visible_plans(request)[:30],
            "regions": Region.objects.values_list("code", flat=True),
            "runs": runs,
            "min_batch_default": MIN_BATCH_PER_GPU,
            "lr_note": LR_SCALING_NOTE,
        },
        status=400 if errors else 200,
    )


def _values_from_request(req: dict) -> dict:
    v: dict[str, Any] = {
        k: ("" if req.get(k) is None else str(req.get(k))) for k in FORM_DEFAULTS if k in req
    }
    model = req.get("model", {})
    if model.get("profile_run"):
        v.update(model_source="profile", profile_run=str(model["profile_run"]))
    else:
        v.update(
            model_source="spec",
            spec=model.get("spec", ""),
            input_shape=model.get("input_shape", ""),
            precision=model.get("precision", "amp"),
        )
    v["regions"] = req.get("regions") or []
    v["spot"] = "on" if req.get("spot") else ""
    v["on_demand"] = "on" if req.get("on_demand", True) else ""
    quotas = req.get("quotas_on_demand") or {}
    v["quota_p"], v["quota_g"] = str(quotas.get("P", "")), str(quotas.get("G", ""))
    v["task"], v["task_filename"] = req.get("task") or "", req.get("task_filename") or ""
    return v


@login_required
def plan_cancel(request: HttpRequest, plan_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("plan-page", plan_id=plan_id)
    record = _visible_plans(request).filter(pk=plan_id).first()
    if record is None:
        raise Http404("no such plan")
    permissions.check_cancel(request.user, record)
    solving.cancel_plan(record, by=request.user)  # already finished: nothing to do, the page says so
    return redirect("plan-page", plan_id=plan_id)


def ranked_rows(result: PlanResult | dict) -> list[dict]:
    """The ranked plans, each with its why-a-mix sentence (``result["mix_reasons"]``, by rank) and
    ``twin_of``: the rank of the first plan above it that is the same cluster (types and counts)
    in the other market, as its *why* says ("same cluster as #N on spot"); the table groups the
    two when they are adjacent (``twin_adjacent``), which the ranking makes them whenever no plan
    between them is at least as fast and cheaper (planner.solver.rank, rule 4)."""
    typed = PlanResult.read(result)
    rows: list[dict] = []
    for i, p in enumerate(typed.plans):
        twin = next((j for j, q in enumerate(typed.plans[:i]) if _are_twins(p, q)), None)
        doc = p.to_json()
        rows.append(
            {
                **doc,
                "why_mix": typed.mix_reason(p),
                "twin_of": None if twin is None else typed.plans[twin].rank,
                "twin_adjacent": twin == i - 1,
                # spot groups priced by one zone far below the region's others (catalog.zone_prices)
                "lone_zone_prices": lone_zone_prices(doc),
            }
        )
    return rows


def _prediction_key(p: dict) -> tuple:
    error = p.get("model_error") or {}
    return (
        p.get("prediction_source"),
        bool(error.get("validated")),
        error.get("source"),
        error.get("factor_p10"),
        error.get("factor_p90"),
    )


def shared_prediction(rows: list[dict], model_source: str | None = None) -> dict | None:
    """The compute prediction's source and model error when every ranked row has the same ones
    (the page says them once, above the table); None when rows differ (each row says its own).
    The all-reduce side is summarised over the rows that all-reduce across GPUs: the comm
    models used and the range of their train points near the clusters (each row's own figure
    is in its iteration cell's tooltip)."""
    if not rows or len({_prediction_key(p) for p in rows}) != 1:
        return None
    first = rows[0]
    comm = [p for p in rows if p.get("comm_source") and p.get("comm_source") != "none"]
    near = [int(p.get("comm_near_points") or 0) for p in comm]
    return {
        "source": first.get("prediction_source") or model_source or "analytical",
        "model_error": first.get("model_error") or {},
        "comm_sources": sorted({str(p["comm_source"]) for p in comm}),
        "near_low": min(near, default=0),
        "near_high": max(near, default=0),
    }


def configuration_count(result: PlanResult | dict) -> dict:
    """One count of configurations for the chart and the footer: every (offer, node count,
    batch) the search evaluated -- an offer is an instance type in one region and market --
    before the chart's thinning (``stats.points_seen``; older results: the points stored), and
    how many the chart draws."""
    typed = PlanResult.read(result)
    drawn = len(typed.points)
    seen = typed.points_seen or drawn
    return {"evaluated": seen, "drawn": drawn}


def _are_twins(a: PlanRow, b: PlanRow) -> bool:
    def cluster(p: PlanRow) -> list[tuple[str, int]]:
        return sorted((g.instance_type, g.count) for g in p.option.groups)

    return cluster(a) == cluster(b) and a.uses_spot != b.uses_spot


def baseline_rows(result: PlanResult | dict) -> list[dict]:
    """The baselines, each with plan #1 against it in words ("saves $120 (45%)", "costs $30.00
    more (12%)"): computed from the stored totals, so older results read the same way."""
    typed = PlanResult.read(result)
    best = typed.best
    rows = []
    for b in typed.baselines:
        row = b.to_json()
        if b.plan and best is not None:
            row["cost_words"] = saves_or_costs(_number(best.total_usd), _number(b.plan.total_usd))
            row["time_words"] = sooner_or_longer(_number(best.time_h), _number(b.plan.time_h))
        rows.append(row)
    return rows


def _number(value: float | None) -> float:
    """A stored total as a number (nan where a row has none: the words then say nan, not $0)."""
    return float("nan") if value is None else value


@login_required
def plan_detail(request: HttpRequest, plan_id: int) -> HttpResponse:
    record = _visible_plans(request).filter(pk=plan_id).first()
    if record is None:
        raise Http404("no such plan")
    result = record.result or {}
    typed = PlanResult.read(result)
    req = record.request
    chart = {
        "points": [dict(p) for p in typed.points],
        "pareto": [dict(p) for p in typed.pareto],
        "plans": [
            {"rank": p.rank, "label": p.label, "total_usd": p.total_usd, "time_h": p.time_h}
            for p in typed.plans
        ],
        "baselines": [
            {"name": b.name, "label": b.plan.label, "total_usd": b.plan.total_usd, "time_h": b.plan.time_h}
            for b in typed.baselines
            if b.plan
        ],
        "deadline_hours": req.get("deadline_hours"),
        "budget_usd": req.get("budget_usd"),
    }
    ranked = ranked_rows(typed)
    return render(
        request,
        "frontend/plan_detail.html",
        {
            "plan": record,
            "shared_prediction": shared_prediction(ranked, typed.model.source),
            "configs": configuration_count(typed),
            "batch": typed.batch.to_json() if typed.batch else None,
            "live": solving.status_message(record),
            "can_cancel": not record.finished and permissions.can_cancel(request.user, record),
            "result": result,
            "ranked": ranked,
            "baselines": baseline_rows(typed),
            "assumptions": typed.assumptions,
            "req": req,
            "chart": chart,
            "can_launch": request.user.has_perm("launcher.add_job"),
            "workdir_max_mb": workdirs.max_bytes() // (1024 * 1024),
            "profile_offers": profile_first.offers(typed, req, settings.PROFILER_MAX_RUN_MINUTES),
            "can_profile_ec2": request.user.has_perm(actions.EC2_PERMISSION),
            "ec2_permission": actions.EC2_PERMISSION,
        },
    )

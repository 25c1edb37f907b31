"""Profiling pages: start a run, list runs, watch one live."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from catalog.models import InstanceType, Region
from frontend.profile_charts import chart_data
from profiler import actions, permissions, quality
from profiler.models import CommSample, ComputeSample, ProfilingRun, Provider
from profiler.serializers import ProfilingRunSerializer

# Suggestions only (any registry name works). Model code (the examples.tiny_model factories)
# profiles locally only with SRIFTY_LOCAL_CODE=1, as ./run sets it.
MODEL_CHOICES = [
    "torchvision:resnet18",
    "torchvision:resnet50",
    "torchvision:mobilenet_v3_small",
    "torchvision:vgg11",
    "torchvision:alexnet",
    "torchvision:vit_b_16",
    "timm:resnet50",
    "timm:vit_base_patch16_224",
    "timm:convnext_tiny",
    "transformers:bert",
    "transformers:gpt2",
    "transformers:roberta",
    "examples.tiny_model:build",
    "examples.tiny_model:build_transformer",
]
DEFAULTS = {
    "kind": "compute",
    "model_spec": "torchvision:resnet18",
    "input_shape": "3,32,32",
    "batch_sizes": "auto",
    "device": "cpu",
    "precision": "fp32",
    "iters": 5,
    "max_memory": "2GB",
    "world_size": 2,
    "backend": "gloo",
    "sizes": "1KB..16MB",
    "nodes": "",
    "provider": "local",
    "market": "on-demand",
}


def _visible_runs(request: HttpRequest):
    return ProfilingRun.objects.visible_to(request.user).select_related("owner")


@login_required
def runs(request: HttpRequest) -> HttpResponse:
    values, errors = dict(DEFAULTS), {}
    checks: dict[str, Any] | None = None
    if request.method == "GET":  # prefilled from a link (e.g. a plan's "profile on a cheap GPU first")
        values.update(
            {k: v for k, v in request.GET.items() if k in DEFAULTS or k in ("instance_type", "region")}
        )
    if request.method == "POST":
        values.update(
            {k: v for k, v in request.POST.items() if k in DEFAULTS or k in ("instance_type", "region")}
        )
        data = {k: v for k, v in values.items() if v != ""}
        if data.get("kind") == "comm":
            data.pop("model_spec", None)
            data.pop("input_shape", None)
        if data.get("nodes"):  # a cluster: every GPU of every node, over NCCL (the serializer fills them in)
            data.pop("world_size", None)
            data.pop("backend", None)
        checked = ProfilingRunSerializer(data=data)
        if checked.is_valid():
            actions.check_may_start(request.user, checked.validated_data.get("provider", Provider.LOCAL))
            try:
                run = actions.create_run(request.user, **checked.validated_data)
            except actions.PrecheckFailed as exc:  # AWS would refuse: no row; show every check and its fix
                checks = precheck_summary(exc, str(checked.validated_data.get("region", "")))
            else:
                return redirect("profiling-run", run_id=run.pk)
        else:
            errors = {k: " ".join(str(e) for e in v) for k, v in checked.errors.items()}
    return render(
        request,
        "frontend/profiling.html",
        {
            "runs": _visible_runs(request)[:50],
            "values": values,
            "errors": errors,
            "checks": checks,
            "models": MODEL_CHOICES,
            "instance_types": InstanceType.objects.ddp_capable().values_list("name", flat=True),
            "regions": Region.objects.values_list("code", flat=True),
            # single-user mode: a package.module:factory model is imported and called on this machine
            "local_code": settings.LOCAL_CODE_EXECUTION,
        },
        status=400 if errors or checks else 200,
    )


def precheck_summary(exc: actions.PrecheckFailed, region: str) -> dict[str, Any]:
    """The refused run's pre-checks in the shape the job-new page shows them (``frontend.jobs``)."""
    return {"ok": False, "region": region, "message": exc.message, "checks": exc.checks}


@login_required
def cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("profiling-run", run_id=run_id)
    run = _visible_runs(request).filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    permissions.check_cancel(request.user, run)
    actions.cancel_run(run)
    return redirect("profiling-run", run_id=run_id)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_runs(request).filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    compute = list(run.compute_samples.all())
    comm = list(run.comm_samples.all())
    flags = quality.compute_flags(compute) + quality.comm_flags(comm)
    by_key = quality.flags_by_key(flags)
    # what was timed (a time budget or the agent's repeats may differ from the iterations asked)
    measured = max((len(s.times_ms) for s in [*compute, *comm]), default=run.iters)
    return render(
        request,
        "frontend/profiling_run.html",
        {
            "run": run,
            "compute": [(s, quality.reasons_for(by_key, s.batch_size, s.phase)) for s in compute],
            "comm": [(s, quality.reasons_for(by_key, s.size_bytes)) for s in comm],
            "noisy": flags,
            "noisy_cv": quality.NOISY_CV,
            "measured_iters": measured,
            "rerun_iters": rerun_iters(measured),
            "rerun_url": rerun_url(run, measured),
            "buckets": list(run.bucket_samples.all()),
            "can_cancel": permissions.can_cancel(request.user, run) and not run.finished,
            "charts": chart_data(run),
            "samples_json": {
                "compute": [
                    {
                        "batch_size": s.batch_size,
                        "phase": s.phase,
                        "times_ms": s.times_ms,
                        "median_ms": s.median_ms,
                        "cv": s.cv,
                        "noisy": quality.reasons_for(by_key, s.batch_size, s.phase),
                    }
                    for s in compute
                ],
                "comm": [
                    {
                        "size_bytes": s.size_bytes,
                        "times_ms": s.times_ms,
                        "median_ms": s.median_ms,
                        "busbw_gbps": s.busbw_gbps,
                        "algbw_gbps": s.algbw_gbps,
                        "cv": s.cv,
                    }
                    for s in comm
                ],
                "latency": latency_series(compute, comm),
            },
        },
    )


def latency_series(compute: list[ComputeSample], comm: list[CommSample]) -> list[dict[str, Any]]:
    """The stored counterpart of the live latency chart, on the same axes: per batch (or message
    size), the time of each timed iteration against its index within that batch. A compute step
    is forward + backward + optimizer of one iteration, as the agent's live ``time_ms`` is."""
    steps: dict[int, list[list[float]]] = {}
    for s in compute:
        if s.phase in quality.PHASES:
            steps.setdefault(s.batch_size, []).append(list(s.times_ms))
    series = [
        {"key": f"batch {b}", "times_ms": [sum(t) for t in zip(*phases, strict=False)]}
        for b, phases in sorted(steps.items())
    ]
    return series + [{"key": f"{s.size_bytes} B", "times_ms": list(s.times_ms)} for s in comm]


def rerun_iters(iters: int) -> int:
    """The iteration count a noisy run's "profile again" link proposes: at least 20, at least
    twice what this run timed (the standard error of a median shrinks like 1/sqrt(n)), at most the form's
    1000."""
    return min(1000, max(20, 2 * iters))


def rerun_url(run: ProfilingRun, measured: int) -> str:
    """The form, pre-filled with this run's settings and ``rerun_iters(measured)`` iterations."""
    fields = {k: getattr(run, k) for k in DEFAULTS if k != "iters" and hasattr(run, k)}
    fields.update(instance_type=run.instance_type, region=run.region, iters=rerun_iters(measured))
    query = urlencode({k: v for k, v in fields.items() if v not in (None, "")})
    return f"{reverse('profiling')}?{query}"

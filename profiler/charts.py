"""The chart data of a profiling run: plain functions returning JSON-ready dicts (the run's page,
``frontend/profile_charts.py``, only hands them to ``frontend/static/frontend/profile_charts.js``).

The data fits the planner's models and reads the catalog, so it lives here, beside the runs it
describes (the profiler may import the planner; the planner never imports the profiler).

Compute runs:

* **throughput vs batch** — measured samples/s per profiled batch ``b``: ``b / T(b)`` with ``T``
  the sum of the phase medians (forward + backward + optimizer, as the planner sums them); error
  bars ``b / (T ± s)`` with ``s`` the standard deviation of the per-iteration totals (phases of
  one iteration added up). The fitted curve is the planner's own model
  (``planner.perf.compute.fit_compute_model``: a piecewise-linear fit per phase with at most
  one knee each) over the batch range it predicts for; each phase's knee is marked; the largest
  batch that fitted in memory (the profile's ``max_batch_size``) is a vertical line.
* **gradient readiness** — per DDP bucket, when its gradients were ready in the backward pass
  (ms after the backward started), at each profiled batch size.
* **predicted vs measured** — jobs launched from plans made from this profile: the predicted
  iteration time (p50, p90) against the median of what the training reported.

Comm runs: **all-reduce time vs size**, measured medians with p10–p90 bars, against the model:
the NCCL model plans use (``planner.app.service.comm_model``, p50 and p90) where the run was an
NCCL sweep on an EC2 GPU type the catalog knows; otherwise (a gloo or local run, where NCCL's
model does not apply) the ring model fitted to this run's own points
(``planner.perf.comm.fit_link_from_profile``), said so in the chart's note.
"""

from __future__ import annotations

import logging
import math
import statistics
from typing import Any

from catalog.models import Accelerator, InstanceType
from planner import nccl_corpus
from planner.app.service import comm_model
from planner.hardware import GpuSpec, load_gpu_specs
from planner.perf.comm import fit_link_from_profile, ring_allreduce_prior_ms
from planner.perf.compute import fit_compute_model
from planner.profiles import CommProfile, parse_comm_profile, parse_compute_profile
from profiler.models import ProfilingRun, RunKind

log = logging.getLogger(__name__)
PHASES = ("forward", "backward", "optimizer")
CURVE_POINTS = 80


def for_run(run: ProfilingRun) -> dict[str, Any]:
    """Everything a run's charts show, JSON-ready; ``{}`` before the run has a profile."""
    if not isinstance(run.profile, dict):
        return {}
    if run.kind == RunKind.COMPUTE:
        return {
            "kind": "compute",
            "throughput": throughput(run.profile),
            "buckets": bucket_readiness(run.profile),
            "jobs": predicted_vs_measured(run),
        }
    return {"kind": "comm", "allreduce": allreduce(run)}


# --------------------------------------------------------------------------- compute


def _totals(sample: dict) -> list[float]:
    series = [sample["phases"][p].get("times_ms") or [] for p in PHASES]
    n = min(len(s) for s in series)
    return [sum(s[i] for s in series) for i in range(n)]


def throughput(profile: dict) -> dict[str, Any]:
    parsed = parse_compute_profile(profile)
    measured = []
    for s in sorted(profile["samples"], key=lambda s: s["batch_size"]):
        b = s["batch_size"]
        total = sum(s["phases"][p]["median_ms"] for p in PHASES)
        totals = _totals(s)
        sd = statistics.stdev(totals) if len(totals) >= 2 else 0.0
        rate = b * 1000.0 / total if total > 0 else None
        if rate is None:
            continue
        hi = b * 1000.0 / (total - sd) if total - sd > 0 else rate
        lo = b * 1000.0 / (total + sd)
        measured.append(
            {
                "batch": b,
                "samples_per_s": rate,
                "err_plus": hi - rate,
                "err_minus": rate - lo,
                "iteration_ms": total,
                "sd_ms": sd,
                "iterations": len(totals),
            }
        )
    model = fit_compute_model(parsed)

    def rate_at(b: float) -> float:
        t = sum(max(model.fits[p](b), 1e-6) for p in PHASES)
        return b * 1000.0 / t

    lo_b, hi_b = model.min_batch, model.max_batch
    grid = sorted(
        {lo_b + (hi_b - lo_b) * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)}
        | {float(b) for b in model.batch_sizes}
        | {float(f.knee) for f in model.fits.values() if f.knee is not None and lo_b <= f.knee <= hi_b}
    )
    by_batch: dict[float, list[str]] = {}
    for p, f in model.fits.items():
        if f.knee is not None:
            by_batch.setdefault(f.knee, []).append(p)
    knees = [
        {"phase": ", ".join(phases), "batch": b, "samples_per_s": rate_at(b)}
        for b, phases in sorted(by_batch.items())
    ]
    max_batch = profile.get("max_batch_size")
    return {
        "unit": "samples/s",
        "device": parsed.device.name,
        "precision": parsed.device.precision,
        "measured": measured,
        "fit": {"batch": grid, "samples_per_s": [rate_at(b) for b in grid], "range": [lo_b, hi_b]},
        "fit_error_pct": {p: 100 * f.rel_rmse for p, f in model.fits.items()},
        "knees": knees,
        "max_batch": (
            {"batch": max_batch, "capped": bool(profile.get("max_batch_capped"))} if max_batch else None
        ),
    }


def bucket_readiness(profile: dict) -> list[dict[str, Any]]:
    out = []
    for s in sorted(profile["samples"], key=lambda s: s["batch_size"]):
        if not s.get("buckets"):
            continue
        out.append(
            {
                "batch": s["batch_size"],
                "backward_ms": s["phases"]["backward"]["median_ms"],
                "buckets": [
                    {
                        "index": b["index"],
                        "size_mib": b["size_bytes"] / 2**20,
                        "num_params": b["num_params"],
                        "ready_ms": b["ready_ms"],
                        "ready_fraction": b["ready_fraction"],
                    }
                    for b in sorted(s["buckets"], key=lambda b: b["ready_ms"])
                ],
            }
        )
    return out


def predicted_vs_measured(run: ProfilingRun) -> list[dict[str, Any]]:
    """Jobs of plans made from this profile, with what their training reported. Reached through
    reverse relations only (``run.plans``, ``plan.jobs``, ``job.reports``), so it does not care
    which app the job models live in; empty when those relations are not there."""
    rows = []
    try:
        plans = list(run.plans.all())
        for plan in plans:
            for job in plan.jobs.all():
                times = list(job.reports.values_list("iter_time_s", flat=True))
                rows.append(
                    {
                        "job": job.pk,
                        "plan": plan.pk,
                        "status": job.status,
                        "predicted_iter_s": job.predicted_iter_s,
                        "predicted_iter_p90_s": job.predicted_iter_p90_s,
                        "observed_median_s": statistics.median(times) if times else None,
                        "reports": len(times),
                    }
                )
    except (AttributeError, LookupError) as exc:  # the job models moved or were renamed
        log.info("predicted-vs-measured skipped for run %s: %s", run.pk, exc)
        return []
    return rows


# --------------------------------------------------------------------------- comm


def allreduce(run: ProfilingRun) -> dict[str, Any]:
    if not isinstance(run.profile, dict):
        raise ValueError(f"run {run.pk} has no profile")
    profile = parse_comm_profile(run.profile)
    measured = [
        {
            "size_bytes": s.size_bytes,
            "median_us": s.stats.median_ms * 1000,
            "p10_us": s.stats.p10_ms * 1000,
            "p90_us": s.stats.p90_ms * 1000,
        }
        for s in profile.samples
    ]
    sizes = _size_grid([s.size_bytes for s in profile.samples])
    model = _nccl_model_curve(run, sizes) or _ring_fit_curve(profile, sizes)
    return {
        "backend": profile.backend,
        "world_size": profile.world_size,
        "nodes": profile.nodes,
        "measured": measured,
        "model": model,
    }


def _size_grid(sizes: list[int]) -> list[float]:
    lo, hi = math.log2(max(min(sizes), 1)), math.log2(max(max(sizes), 2))
    n = 40
    return [2 ** (lo + (hi - lo) * i / (n - 1)) for i in range(n)]


def _nccl_model_curve(run: ProfilingRun, sizes: list[float]) -> dict[str, Any] | None:
    """The NCCL model plans use, for the topology this run's stored curve was measured on."""
    point = run.curve_points.first()
    if point is None:
        return None
    itype = InstanceType.objects.filter(name=point.instance_type).first()
    spec = nccl_corpus.spec_for(point.gpu, load_gpu_specs(nccl_corpus.SPECS_CSV))
    if spec is None:
        acc = Accelerator.objects.filter(name=point.gpu).first()
        if acc is None or not acc.architecture:
            return None
        spec = GpuSpec(name=acc.name, architecture=acc.architecture, nvlink_gb_s=acc.nvlink_gbs or 0.0)
    if itype is None:
        return None
    topo = nccl_corpus.catalog_topology(
        spec, itype, point.gpus_per_node, point.nodes, network=point.network, nccl_version=point.nccl_version
    )
    model = comm_model()
    estimates = [model.estimate(s, topo) for s in sizes]
    return {
        "kind": "nccl",
        "label": f"NCCL model ({estimates[0].source}) for {point.nodes}× {point.instance_type}",
        "note": (
            f"The all-reduce model plans use ({estimates[0].source}; {estimates[0].near_points} train "
            f"points near this cluster), for {point.nodes} node(s) × {point.gpus_per_node} {point.gpu} "
            f"over {point.network}. This run's curve is itself train data of the refit model."
        ),
        "size_bytes": sizes,
        "p50_us": [e.p50_us for e in estimates],
        "p90_us": [e.p90_us for e in estimates],
    }


def _ring_fit_curve(profile: CommProfile, sizes: list[float]) -> dict[str, Any] | None:
    """A ring all-reduce fitted to this run's own medians (bandwidth and per-step latency)."""
    if profile.world_size < 2 or len(profile.samples) < 2:
        return None
    gbps, alpha_us = fit_link_from_profile(profile)
    curve = [ring_allreduce_prior_ms(s, profile.world_size, gbps, alpha_us) * 1000 for s in sizes]
    if gbps > 1e5:  # the slope was clamped: the times do not grow with the size in this range
        fitted = f"latency only, α {alpha_us:.0f} µs: the times do not grow with size here"
    else:
        fitted = f"{gbps:.3g} Gbit/s, α {alpha_us:.0f} µs"
    return {
        "kind": "ring-fit",
        "label": f"ring model fitted to this run ({fitted})",
        "note": (
            f"A {profile.backend} run{'' if profile.nodes > 1 else ' on one machine'}: the NCCL model "
            "plans use applies to NCCL on EC2 GPU types, so this compares the points with the ring "
            "model t = 2(n−1)/n·S/B + 2(n−1)·α fitted to them."
        ),
        "size_bytes": sizes,
        "p50_us": curve,
        "p90_us": None,
    }

"""What every plan assumes, stated: where each GPU type's prediction comes from and its validated
error, the precision the profile really ran, the data-loader assumption and what p90 includes.

The validated errors come from one place, ``planner/data/validated_errors.json``
(:mod:`planner.validated`), which the benches write: ``bench/accuracy_local.py`` for *measured*,
``bench/accuracy_public.py`` for *transferred*, *analytical* and *scaling* (multi-GPU, multi-node).
A source the file does not validate is said to be "not validated", never given a number.

Pure: no Django.  :func:`describe` returns plain JSON for the API result and the plan page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from planner.input_pipeline import HYPERTHREAD_SHARE, InputPipeline
from planner.precision import same_precision
from planner.solver.request import Plan, PlanRequest
from planner.validated import MULTINODE, SCALING, SOURCES, ModelError, SourceError, error_of

SOURCE_WORDS = {
    "measured": "measured: profiled on this GPU",
    "transferred": "transferred: scaled from the profile on {measured_on} by the compute model",
    "analytical": "analytical: the compute model's operator counts, no profile of this model",
}


def _error_words(err: Mapping[str, Any]) -> str:
    if not err.get("validated"):
        return "not validated"
    when = f", {err['measured_at']}" if err.get("measured_at") else ""
    return (
        f"validated p90 error ±{err['p90_pct']:.1f}% (median {err['median_pct']:.1f}%, "
        f"n={err['n']}, {err['bench']}{when})"
    )


def gpu_types(
    plans: Sequence[Plan],
    source_of: Callable[[str, int], str],
    errors: Mapping[str, SourceError],
    measured_on: str | None,
    support_of: Callable[[str], str] | None = None,
) -> list[dict[str, Any]]:
    """One entry per GPU model of the plans: its instance types, prediction source and error,
    and the compute model's training support for it.

    ``source_of(gpu_model, per_gpu_batch)`` is the oracle's ``PhaseTimes.source`` (or
    ``"analytical"`` when it has none); ``support_of(gpu_model)`` the compute model's sentence
    (``OpClassModel.support``: training rows on its chip, where its chip factor comes from)."""
    seen: dict[str, dict[str, Any]] = {}
    for p in plans:
        for g in p.groups:
            b = g.batch_per_node[0] // max(1, g.gpus_per_node) if g.batch_per_node else 1
            entry = seen.get(g.gpu_model)
            if entry is None:
                source = source_of(g.gpu_model, max(1, b))
                source = source if source in SOURCES else "analytical"
                err = error_of(source, errors)
                entry = seen[g.gpu_model] = {
                    "gpu_model": g.gpu_model,
                    "instance_types": [],
                    "source": source,
                    "source_text": SOURCE_WORDS[source].format(measured_on=measured_on or "another GPU"),
                    "error": err,
                    "error_text": _error_words(err),
                    "support_text": support_of(g.gpu_model) if support_of else "",
                }
            if g.instance_type not in entry["instance_types"]:
                entry["instance_types"].append(g.instance_type)
    return list(seen.values())


def unpredicted(cands: Sequence[Any], why_not: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """The GPU models of the offers that no plan can use because nothing predicts them, each
    with its instance types and why (``why_not(gpu_model)``: None when it is predicted)."""
    out: dict[str, dict[str, Any]] = {}
    for c in cands:
        gpu = c.gpu_model
        if gpu not in out:
            reason = why_not(gpu)
            out[gpu] = {"gpu_model": gpu, "instance_types": [], "reason": reason}
        if out[gpu]["reason"] and c.instance_type not in out[gpu]["instance_types"]:
            out[gpu]["instance_types"].append(c.instance_type)
    return [v for v in out.values() if v["reason"]]


def precision(
    requested: str | None, profile_ran: str | None, planned: str, warning: str | None
) -> dict[str, Any]:
    """The precision asked for, the one the profile ran and the one predictions are made at.

    ``warning``: :func:`planner.precision.precision_warning`'s sentence (the mismatch flag)."""
    mismatch = warning is not None or (
        requested is not None and profile_ran is not None and not same_precision(requested, profile_ran)
    )
    if warning:
        text = warning
    elif profile_ran is not None:
        text = f"Predictions are made at {planned}; the profile ran {profile_ran}, as asked."
    else:
        text = f"No profile: predictions are made at {planned} from the model's operator counts."
    return {
        "requested": requested,
        "profile_ran": profile_ran,
        "planned": planned,
        "mismatch": mismatch,
        "text": text,
    }


def data_loader(pipeline: InputPipeline | None) -> dict[str, Any]:
    """The input-pipeline assumption (:mod:`planner.input_pipeline`)."""
    if pipeline is None:
        return {
            "kind": None,
            "rate_per_vcpu": None,
            "measured": False,
            "text": "No input-pipeline limit: the input shape is neither image (C, H, W) nor token "
            "(seq_len,) data, so the data loaders are assumed to keep up.",
        }
    origin = (
        f"measured by the profile on one thread, x {HYPERTHREAD_SHARE:g} for a node whose vCPUs all load"
        if pipeline.measured
        else f"assumed for {pipeline.label} data (planner/input_pipeline.py: the PyTorch reference "
        f"pipeline on one core, {HYPERTHREAD_SHARE:g} of it per vCPU)"
    )
    return {
        "kind": pipeline.kind,
        "rate_per_vcpu": pipeline.rate_per_vcpu,
        "measured": pipeline.measured,
        "text": f"Each vCPU beyond one per GPU runs a data-loader worker preparing "
        f"{pipeline.rate_per_vcpu:,.0f} samples/s ({origin}); a node trains no faster than its "
        "loaders feed it. Storage is assumed not to stall the loaders.",
    }


def model_error(model_errors: Mapping[str, ModelError]) -> dict[str, Any]:
    """The one line per plan naming the model error each source's p10-p90 carries."""
    entries = {s: e.as_dict() for s, e in model_errors.items() if s != SCALING}
    named = [model_errors[s].text() for s in (*SOURCES, MULTINODE) if s in model_errors and s != SCALING]
    missing = [s for s in SOURCES if s not in model_errors]
    text = (
        "p10-p90 model error, leave-one-publisher-out: " + "; ".join(named)
        if named
        else "No source has a validated model error: p10-p90 is the simulator's spread alone"
    )
    if named and missing:
        text += "; " + ", ".join(missing) + ": not validated (the simulator's spread alone)"
    return {"sources": entries, "text": text}


def p90(request: PlanRequest, uses_spot: bool) -> str:
    """What the p90 time includes (and leaves out)."""
    parts = [
        f"{request.startup_overhead_h:g} h of startup",
        "the model error of the prediction's source at its p90 (validated by leave-one-publisher-out; "
        "none where that source is not validated)",
        "the iteration-time jitter of the simulator's p90 iteration over the whole run",
    ]
    if uses_spot:
        parts.append(
            "for spot nodes, interruptions at the hourly rate of each type's Spot Advisor bucket, "
            f"each losing the work since the last checkpoint (every {request.checkpoint_interval_h:g} h) "
            f"plus {request.restart_overhead_h:g} h to replace the node"
        )
    return (
        "p90 time: 9 runs in 10 finish by then. It includes "
        + ", ".join(parts[:-1])
        + " and "
        + parts[-1]
        + ". It leaves out price changes, waiting for capacity and a slower input pipeline than assumed."
    )


def describe(
    plans: Sequence[Plan],
    request: PlanRequest,
    *,
    source_of: Callable[[str, int], str],
    errors: Mapping[str, SourceError],
    measured_on: str | None,
    requested_precision: str | None,
    profile_precision: str | None,
    planned_precision: str,
    precision_warning: str | None,
    pipeline: InputPipeline | None,
    model_errors: Mapping[str, ModelError] | None = None,
    support_of: Callable[[str], str] | None = None,
    unplanned: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The assumptions block of a plan result (module docstring); ``unplanned``:
    :func:`unpredicted`'s list."""
    scaling = error_of(SCALING, errors)
    return {
        "unpredicted": [dict(u) for u in unplanned],
        "model_error": model_error(model_errors or {}),
        "types": gpu_types(plans, source_of, errors, measured_on, support_of),
        "scaling": {
            "error": scaling,
            "text": "Scaling to several GPUs and nodes (all-reduce and input-pipeline model): "
            + _error_words(scaling),
        },
        "precision": precision(requested_precision, profile_precision, planned_precision, precision_warning),
        "data_loader": data_loader(pipeline),
        "p90": p90(request, any(p.uses_spot for p in plans)),
    }

"""Planning as a service: turn a stored request into the pure planner's inputs, solve, store.

Steps of :func:`solve_request` (each pure function lives in ``planner/``):

1. the model: a stored compute profile (fitted with ``fit_compute_model``; its device says
   whether it is *measured* on a target GPU or must be *transferred*), or a model spec counted
   on the meta device (*analytical*);
2. the candidates: the catalog's current prices (``feed.candidate_rows``) → ``load_candidates``;
3. the oracle (``planner.oracle.Oracle``) and ``planner.solver.solve``;
4. re-verification: the chosen plans are re-simulated with a 2,000-draw Monte-Carlo;
5. the baselines a user would otherwise pick, on the same oracle.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from planner.app import feed
from planner.app.plan_input import PlanInput, PlanInputError, plan_request
from planner.app.ports import ProfileUnavailable, StoredProfile, profile_store
from planner.defaults import LR_SCALING_NOTE, MIN_BATCH_PER_GPU
from planner.plan_result import Alternative, Baseline, BatchInfo, ModelInfo, PlanResult, PlanRow, PlanWarning

if TYPE_CHECKING:
    from planner.baselines import BaselineResult
    from planner.hardware import GpuSpec
    from planner.offers import Candidate
    from planner.oracle import Oracle, Workload
    from planner.perf.compute import ComputeModel
    from planner.perf.nccl import LearnedComm
    from planner.perf.transfer import TransferModel
    from planner.profiles import ComputeProfile
    from planner.solver import PerfOracle, Plan, PlanRequest, Point, ProgressCallback
    from planner.solver import PlanResult as SearchResult
    from planner.validated import ModelError, SourceError

#: ``progress(phase, evaluated, total)`` of a plan's work (:func:`solve_request`).
PhaseProgress = Callable[[str, int | None, int | None], None]

# The request's parse (planner.app.plan_input) is read through this module too.
__all__ = ["PlanInput", "PlanInputError", "plan_request"]


# --- caches (per process; both are pure functions of their inputs) ------------------------

_specs_cache: dict[str, dict[str, GpuSpec]] = {}
_transfer_cache: dict[str, TransferModel] = {}


def gpu_specs() -> dict[str, GpuSpec]:
    from planner.hardware import specs_from_rows

    rows = feed.gpu_spec_rows()
    key = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    if key not in _specs_cache:
        _specs_cache.clear()
        _specs_cache[key] = specs_from_rows(rows)
    return _specs_cache[key]


def transfer_model() -> TransferModel:
    """The compute model plans use: the operator-class model shipped in
    ``planner/data/compute-model.json`` (``manage.py calibrate_compute``; plain JSON, no
    xgboost import). Without that file, the previous ResNet-50 roofline (calibrated and cached
    on first use)."""
    from planner.calibration import COMPUTE_MODEL_FILE, load_compute_model, load_or_calibrate

    specs = gpu_specs()
    key = str(id(specs))
    if key not in _transfer_cache:
        _transfer_cache.clear()
        if COMPUTE_MODEL_FILE.exists():
            _transfer_cache[key] = load_compute_model(specs)
        else:
            calibration = Path(settings.CATALOG_FIXTURES_DIR) / "calibration_resnet50_single_gpu.csv"
            _transfer_cache[key] = load_or_calibrate(calibration, specs, Path(settings.DATA_DIR) / "models")
    return _transfer_cache[key]


def workload(
    spec: str,
    input_shape: tuple[int, ...],
    precision: str,
    measured: ComputeModel | None = None,
    measured_on: str | None = None,
    *,
    allow_code: bool = False,
) -> Workload:
    """The model's workload, counted once and cached on disk (a meta-device trace takes seconds).

    Library specs only (``check_library_spec``), unless ``allow_code`` (the operator's own
    ``manage.py plan``/``predict``); only library workloads are cached, since a code spec's
    module can change under the same name."""
    from planner.oracle import Workload, workload_for_spec
    from workload.specs import SpecError, check_library_spec, parse_spec

    try:
        library = parse_spec(spec).is_library
        if not allow_code:
            check_library_spec(spec)
    except SpecError as exc:
        raise PlanInputError("spec", str(exc)) from exc
    key = hashlib.sha256(f"{spec}|{input_shape}|{precision}|v1".encode()).hexdigest()[:20]
    path = Path(settings.DATA_DIR) / "models" / f"workload-{key}.json"
    if library and path.exists():
        base = Workload.from_dict(json.loads(path.read_text()))
    else:
        try:
            base = workload_for_spec(spec, input_shape, precision=precision, allow_code=allow_code)
        except Exception as exc:  # unknown model, factory error, shape mismatch
            # The first line of the error says what is wrong (a shape mismatch, an unknown name);
            # the rest of a framework's message is internals that a 400 need not show.
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise PlanInputError(
                "model", f"cannot build {spec} with input shape {input_shape}: {reason}"
            ) from exc
        if library:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(base.to_dict()))
            tmp.replace(path)
    return dataclasses.replace(base, measured=measured, measured_on=measured_on)


# --- request -> pure inputs ---------------------------------------------------------------


def _profile_workload(
    run: StoredProfile,
    profile: ComputeProfile,
    precision: str,
    measured: ComputeModel | None,
    measured_on: str | None,
    allow_code: bool,
) -> Workload:
    """The workload the agent traced with the profile; without one (older agents), a library
    spec is counted here, and model code is refused: the server never imports it."""
    from planner.oracle import Workload

    trace = run.profile.get("workload")
    if trace is not None:
        try:
            base = Workload.from_dict(trace)
        except (ValueError, KeyError, TypeError) as exc:
            raise PlanInputError(
                "profile_run", f"the workload trace of run {run.run_id} is malformed: {exc}"
            ) from exc
        # Not cached by spec: the trace is the run's own (its agent may have posted anything).
        return dataclasses.replace(base, measured=measured, measured_on=measured_on)
    shape = tuple(profile.model.input_shape) or tuple(int(x) for x in run.input_shape.split(","))
    try:
        return workload(
            profile.model.spec,
            shape,
            profile.device.precision or precision,
            measured,
            measured_on,
            allow_code=allow_code,
        )
    except PlanInputError as exc:
        if exc.field != "spec":
            raise
        raise PlanInputError(
            "profile_run",
            f"run {run.run_id} carries no workload trace and names model code, which "
            "the server does not run; profile it again with this version's agent",
        ) from exc


def _model_inputs(
    inp: PlanInput, owner: Any, allow_code: bool = False
) -> tuple[Workload, StoredProfile | None, ComputeProfile | None]:
    """(Workload, profile run or None, parsed profile or None) for the request's model.

    A profiling run is looked up through the team rule (``visible_owner_q``): another team's
    run is "not found", exactly like one that does not exist."""
    from planner.perf.compute import fit_compute_model

    model = inp.model
    precision = model.planned_precision
    if model.profile_run is not None:
        run, profile = _profile_run(model.profile_run, owner, allow_code)
        measured = fit_compute_model(profile)
        device = profile.device.name if profile.device.type == "cuda" else None
        return _profile_workload(run, profile, precision, measured, device, allow_code), run, profile
    return workload(model.spec, model.input_shape, precision, allow_code=allow_code), None, None


_VENDOR_PREFIXES = ("NVIDIA ", "Tesla ")


def datasheet_gpu_name(device_name: str, transfer: TransferModel) -> str:
    """The GPU name the transfer model knows for a profile's CUDA device name.

    torch names devices ``NVIDIA A10G``, ``Tesla T4`` or ``NVIDIA A100-SXM4-40GB``; the datasheet
    rows (and their aliases) are ``A10G``, ``T4``, ``A100-SXM4-40GB``. Unknown names stay as they
    are (the oracle then predicts analytically, as before)."""
    candidates = [device_name] + [
        device_name[len(p) :] for p in _VENDOR_PREFIXES if device_name.startswith(p)
    ]
    for name in candidates:
        try:
            transfer.spec(name)
        except KeyError:
            continue
        return name
    return device_name


def plan_warnings(
    inp: PlanInput, wl: Workload, run: StoredProfile | None, profile: ComputeProfile | None
) -> list[PlanWarning]:
    """What a user must know about how the plan was predicted: ``[{"code", "message"}]``.

    ``precision_mismatch``: the request names a precision the profile did not run (e.g. amp from
    an fp32 profile, or from a CPU profile, where amp runs as bf16 autocast)."""
    from planner.precision import precision_warning

    out = []
    if profile is not None and run is not None:  # a profile is always its run's
        message = precision_warning(
            inp.model.precision,
            profile.device.precision,
            run_id=run.run_id,
            device_type=profile.device.type,
            device_name=profile.device.name,
            planned=wl.precision,
        )
        if message:
            out.append(PlanWarning(code="precision_mismatch", message=message))
    return out


def plan_assumptions(
    plans: Sequence[Plan],
    pr: PlanRequest,
    inp: PlanInput,
    wl: Workload,
    profile: ComputeProfile | None,
    oracle: Oracle,
    warnings: list[PlanWarning],
    cands: Sequence[Candidate] = (),
) -> dict[str, Any]:
    """What the plans assume (``planner.assumptions``): each GPU type's prediction source and
    validated error, the precision the profile ran, the data-loader assumption, what p90 includes,
    and the offers' GPUs that nothing predicts (with why)."""
    from planner.assumptions import describe, unpredicted

    def source_of(gpu: str, batch: int) -> str:
        try:
            t = oracle.phases(gpu, batch)
        except KeyError:
            t = None
        return t.source if t is not None else "analytical"

    def support_of(gpu: str) -> str:
        support = getattr(oracle.transfer, "support", None)  # the operator-class model states it
        try:
            return support(gpu, wl.precision) if support else ""
        except KeyError:
            return ""

    return describe(
        plans,
        pr,
        source_of=source_of,
        errors=validated_errors(),
        measured_on=wl.measured_on,
        requested_precision=inp.model.precision,
        profile_precision=profile.device.precision if profile else None,
        planned_precision=wl.precision,
        precision_warning=next((w.message for w in warnings if w.code == "precision_mismatch"), None),
        pipeline=oracle.pipeline,
        model_errors=oracle.model_errors,
        support_of=support_of,
        unplanned=unpredicted(cands, lambda gpu: why_unpredicted(oracle.transfer, gpu, wl.precision)),
    )


def why_unpredicted(model: TransferModel, gpu: str, precision: str) -> str | None:
    """Why the compute model cannot predict ``gpu`` at ``precision`` (None when it can): the
    datasheet figures a roofline needs are missing from the catalog."""
    try:
        spec = model.spec(gpu)
    except KeyError:
        return "no datasheet row for this GPU in the catalog"
    missing = [
        name
        for name, value in (
            (f"{precision} compute peak", spec.peak_tflops(precision)),
            ("memory bandwidth", spec.memory_bandwidth_gb_s),
        )
        if not value
    ]
    if missing:
        return f"its datasheet row has no {' and no '.join(missing)} (fill them in the admin's accelerators)"
    return None


def candidates(inp: PlanInput) -> list[Candidate]:
    """The catalog's offers the request allows; a task file's resources (``task_constraints``,
    :mod:`planner.app.task_constraints`) keep only the offers that satisfy one of its choices."""
    from planner.app.task_constraints import filter_candidates
    from planner.offers import load_candidates

    cands = load_candidates(
        feed.candidate_rows(inp.regions),
        regions=inp.regions,
        allow_spot=inp.spot,
        allow_on_demand=inp.on_demand,
        gpu_models=inp.gpu_models,
    )
    return filter_candidates(inp.task_constraints, cands)


# --- the per-GPU batch ----------------------------------------------------------------------


def profile_knee(profile: ComputeProfile | None) -> int | None:
    """The per-GPU batch below which the profiled GPU is under-occupied: the largest knee of the
    profile's fitted phases (:mod:`planner.perf.compute`: time flat up to the knee, then
    linear), rounded up; None when no phase has one (a straight line fits best)."""
    from planner.perf.compute import fit_compute_model

    if profile is None:
        return None
    knees = [f.knee for f in fit_compute_model(profile).fits.values() if f.knee is not None]
    return math.ceil(max(knees)) if knees else None


def min_batch_per_gpu(requested: int | None, profile: ComputeProfile | None = None) -> dict[str, Any]:
    """The smallest per-GPU batch the solver ranks: ``{"value", "source"}`` with source
    ``"request"`` (the user's), ``"profile knee"`` (:func:`profile_knee`) or ``"default"``
    (:data:`planner.defaults.MIN_BATCH_PER_GPU`)."""
    if requested:
        return {"value": int(requested), "source": "request"}
    knee = profile_knee(profile)
    if knee is not None and knee > 1:
        return {"value": knee, "source": "profile knee"}
    return {"value": MIN_BATCH_PER_GPU, "source": "default"}


def batch_per_gpu(plan: Plan) -> list[int]:
    """Each group's smallest per-GPU batch: its nodes' batches split over their GPUs."""
    return [min(b // max(1, g.gpus_per_node) for b in g.batch_per_node or (0,)) for g in plan.groups]


# --- solving ------------------------------------------------------------------------------


NO_CANDIDATES = "no CUDA GPU instance type with a price matches the regions and markets"
NO_TASK_CANDIDATES = (
    "no CUDA GPU instance type with a price in the allowed regions and markets has the task file's resources"
)


def no_candidates(inp: PlanInput) -> PlanInputError:
    """Nothing to plan on: the task file's resources when it has some (they are what narrowed
    the offers to none), else the regions and markets."""
    said = "; ".join(f"{c['field']} {c['value']}" for c in inp.constraints_from_task)
    if said:
        return PlanInputError("task", f"{NO_TASK_CANDIDATES} ({said})")
    return PlanInputError("regions", NO_CANDIDATES)


def check_request(req: Mapping[str, Any], owner: Any, *, allow_code: bool = False) -> None:
    """The quick checks of a request, before it is stored and queued: the pure request's
    validation, the profiling run (team rule, finished, usable) and that some offer matches.
    Raises :class:`PlanInputError` naming the field. Building the model and solving are the
    worker's (:func:`solve_request` checks all of this again)."""
    from planner.app.serializers import region_offer_counts

    inp = PlanInput.from_request(req)
    if inp.model.profile_run is not None:
        _profile_run(inp.model.profile_run, owner, allow_code)
    offers = sum(
        region_offer_counts(inp.gpu_models, inp.task_constraints, inp.regions, inp.spot, inp.on_demand)
    )
    if not offers:
        raise no_candidates(inp)
    _check_memory(inp.request, _instance_types(inp), offers)


def memory_limit_mb() -> float:
    """The search state one solve may hold (``PLAN_MAX_MEMORY_MB``)."""
    from planner.solver import DEFAULT_MAX_MEMORY_MB

    return float(getattr(settings, "PLAN_MAX_MEMORY_MB", DEFAULT_MAX_MEMORY_MB))


def _instance_types(inp: PlanInput) -> int:
    """Distinct CUDA instance types with an offer in the regions the request allows."""
    from planner.app.serializers import allowed_offers

    offers = allowed_offers(inp.gpu_models, inp.task_constraints, inp.regions)
    return offers.values("instance_type").distinct().count()


def _check_memory(pr: PlanRequest, types: int, offers: int) -> None:
    """A request whose up-front search state cannot fit the memory limit is refused now, naming
    the field and the limit (:func:`planner.solver.preflight`); what only the search finds out
    fails the plan instead (:func:`_solve`)."""
    from planner.solver import RequestError, preflight

    try:
        preflight(pr, types, offers, memory_limit_mb())
    except RequestError as exc:
        raise PlanInputError(exc.field, str(exc).split(": ", 1)[-1]) from exc


def _solve(
    pr: PlanRequest,
    cands: Sequence[Candidate],
    oracle: PerfOracle,
    progress: ProgressCallback | None = None,
    min_per_gpu: int | None = None,
) -> SearchResult:
    """``planner.solver.solve`` under the memory limit and the per-GPU batch minimum; its
    request errors (a search that would outgrow the limit names max_nodes or max_types) become
    :class:`PlanInputError`."""
    from planner.solver import RequestError, solve

    try:
        return solve(
            pr,
            cands,
            oracle,
            progress=progress,
            max_memory_mb=memory_limit_mb(),
            min_batch_per_gpu=min_per_gpu,
        )
    except RequestError as exc:
        raise PlanInputError(exc.field, str(exc).split(": ", 1)[-1]) from exc


def _profile_run(run_id: int, owner: Any, allow_code: bool) -> tuple[StoredProfile, ComputeProfile]:
    """(run, parsed profile) of the request's profiling run, through the team rule (the
    profiler's records, read through ``planner.app.ports``)."""
    from planner.profiles import ProfileError, parse_compute_profile
    from workload.specs import SpecError, check_library_spec

    try:
        run = profile_store().compute_profile(run_id, owner)
    except ProfileUnavailable as exc:
        if exc.reason == "not_found":
            raise PlanInputError("profile_run", f"profiling run {run_id} not found") from exc
        raise PlanInputError(
            "profile_run", f"profiling run {exc.run_id} is not a finished compute profile"
        ) from exc
    try:
        profile = parse_compute_profile(run.profile)
    except ProfileError as exc:
        raise PlanInputError("model", f"profile of run {run.run_id} cannot be used: {exc}") from exc
    if run.profile.get("workload") is None and not allow_code:
        try:
            check_library_spec(profile.model.spec)
        except SpecError as exc:
            raise PlanInputError(
                "profile_run",
                f"run {run.run_id} carries no workload trace and names model code, which "
                "the server does not run; profile it again with this version's agent",
            ) from exc
    return run, profile


class _Stages:
    """Progress of one request's work: ``report(phase, evaluated, total)`` with the main search's
    configurations evaluated out of its estimated total; the other phases report their name
    only (each report is also where a cancel is noticed)."""

    def __init__(self, report: PhaseProgress | None):
        self.report = report
        self.phase = ""

    def enter(self, phase: str) -> None:
        self.phase = phase
        if self.report is not None:
            self.report(phase, None, None)

    def counts(self, evaluated: int, total: int) -> None:
        if self.report is not None:
            self.report(self.phase, evaluated, total)

    def ping(self, evaluated: int, total: int) -> None:
        if self.report is not None:
            self.report(self.phase, None, None)


def solve_request(
    req: Mapping[str, Any] | PlanInput,
    owner: Any,
    *,
    allow_code: bool = False,
    progress: PhaseProgress | None = None,
) -> PlanResult:
    """Solve the request (a validated request dict, parsed here, or its :class:`PlanInput`) and
    return the result (its JSON: :meth:`PlanResult.to_json`); raises PlanInputError or Infeasible.

    ``owner``: whose team rule applies to referenced profiling runs; ``allow_code``: see
    :func:`workload`. ``progress(phase, evaluated, total)``, when given, is called as the work
    goes (``evaluated``/``total`` are None outside the main search); an exception it raises
    propagates (how a worker stops a cancelled plan)."""
    from planner.app.task_constraints import with_node_count
    from planner.baselines import evaluate_baselines
    from planner.oracle import Oracle
    from planner.why_mix import mix_reasons

    stages = _Stages(progress)
    started = time.perf_counter()
    stages.enter("model")
    inp = req if isinstance(req, PlanInput) else PlanInput.from_request(req)
    pr = inp.request
    wl, run, profile = _model_inputs(inp, owner, allow_code)
    # gradient accumulation is the request's, not the cached trace's (Workload.accumulation_steps)
    wl = dataclasses.replace(wl, accumulation_steps=inp.accumulation_steps)
    stages.enter("candidates")
    cands = candidates(inp)
    if not cands:
        raise no_candidates(inp)
    transfer = transfer_model()
    if wl.measured_on is not None:
        wl = dataclasses.replace(wl, measured_on=datasheet_gpu_name(wl.measured_on, transfer))
    oracle = Oracle(
        wl,
        transfer,
        gpu_specs(),
        comm_model(),
        input_rate_per_vcpu=input_rate(profile, wl),
        model_errors=model_errors(),  # each row's p10/p50/p90 carries its source's model error
    )
    stages.enter("search")
    minimum = min_batch_per_gpu(inp.min_batch_per_gpu, profile)
    # a task file's num_nodes: only clusters of exactly that many nodes are ranked
    searched = with_node_count(oracle, inp.task_constraints)
    result = _solve(
        pr, cands, searched, progress=stages.counts if progress else None, min_per_gpu=minimum["value"]
    )
    stages.enter("verify")
    verified = _verify(result.plans, pr, oracle, {c.key: c for c in cands})
    rows = RowSource(oracle, validated_errors(), {c.key: c for c in cands}, minimum["value"])
    stages.enter("alternatives")
    alternatives = (
        _market_alternatives(pr, cands, searched, rows, progress=stages.ping if progress else None)
        if inp.spot and inp.on_demand
        else {}
    )
    stages.enter("baselines")
    warnings = plan_warnings(inp, wl, run, profile)
    baselines = evaluate_baselines(
        pr,
        cands,
        oracle,
        result,
        requested_gpu=inp.baseline_gpu,
        skypilot_use_spot=inp.spot,
        skypilot_nodes=inp.task_nodes,  # as SkyPilot sizes it
    )
    return PlanResult(
        plans=tuple(_plan_row(p, verified.get(p.rank), rows) for p in result.plans),
        pareto=tuple(p._asdict() for p in result.pareto),
        points=tuple(p._asdict() for p in _thin(result.points)),
        baselines=tuple(_baseline(b, rows) for b in baselines),
        alternatives=alternatives,
        stats=dataclasses.asdict(result.stats),
        solve_time_s=result.solve_time_s,
        total_time_s=time.perf_counter() - started,
        model=ModelInfo(
            spec=wl.model_spec,
            input_shape=tuple(wl.input_shape),
            precision=wl.precision,
            profile_run=run.run_id if run else None,
            measured_on=wl.measured_on,
            source=_source_of(result.plans, oracle),
            precision_requested=inp.model.precision,
            profile_precision=profile.device.precision if profile else None,
            accumulation_steps=wl.accumulation_steps,
        ),
        total_samples=pr.total_samples,
        batch=_batch_info(pr, minimum, result.plans),
        warnings=tuple(warnings),
        assumptions=plan_assumptions(result.plans, pr, inp, wl, profile, oracle, warnings, cands),
        mix_reasons=mix_reasons(result.plans, pr, cands, oracle),
        # only with a task file: a plan without one reads as before (no key)
        constraints_from_task=inp.constraints_from_task if inp.task_constraints else None,
    )


def _market_alternatives(
    pr: PlanRequest,
    cands: Sequence[Candidate],
    oracle: PerfOracle,
    rows: RowSource,
    progress: ProgressCallback | None = None,
) -> dict[str, Alternative]:
    """The best spot-only and on-demand-only plan, side by side (same request, same oracle)."""
    from dataclasses import replace

    from planner.solver import Infeasible

    out: dict[str, Alternative] = {}
    for market in ("spot", "on-demand"):
        pool = [c for c in cands if c.market == market]
        if not pool:
            out[market] = Alternative(plan=None, reason=f"no {market} offers in the allowed regions")
            continue
        try:
            best = _solve(
                replace(pr, top_k=1), pool, oracle, progress=progress, min_per_gpu=rows.min_batch_per_gpu
            ).best
            out[market] = Alternative(plan=_plan_row(best, None, rows), reason=None)
        except Infeasible as exc:
            out[market] = Alternative(plan=None, reason=str(exc))
    return out


def input_rate(profile: ComputeProfile | None, wl: Workload) -> float | None:
    """The data-loader rate per vCPU the plan uses: the profile's measured one when it was
    measured for the plan's input kind, else None (the kind's default, planner.input_pipeline)."""
    from planner.input_pipeline import measured_rate

    measured = profile.input_pipeline if profile is not None else None
    if measured is None:
        return None
    return measured_rate(wl.input_shape, (measured.kind, measured.samples_per_s_per_vcpu))


def _verify(
    plans: Sequence[Plan], pr: PlanRequest, oracle: Oracle, by_key: Mapping[tuple[str, str, str], Candidate]
) -> dict[int, dict[str, float]]:
    """Re-simulate each chosen plan with a 2,000-draw Monte-Carlo (the search used one
    deterministic timeline per configuration) of the same oracle: same workload, models and
    input rate."""
    mc = oracle.resampled(samples=2000, seed=7)
    out = {}
    for p in plans:
        config = tuple((by_key[(p.region, g.market, g.instance_type)], g.count) for g in p.groups)
        est = mc(config, p.global_batch)
        if est is not None:
            out[p.rank] = {
                "iter_time_s": est.iter_time_s,
                "iter_time_p90_s": est.iter_time_p90_s,
                "throughput_sps": est.throughput_sps,
                "time_h": pr.total_samples / est.throughput_sps / 3600 + pr.startup_overhead_h,
            }
    return out


def _source_of(plans: Sequence[Plan], oracle: Oracle) -> str:
    for p in plans[:1]:
        for g in p.groups:
            b = g.batch_per_node[0] // max(1, g.gpus_per_node) if g.batch_per_node else 1
            t = oracle.phases(g.gpu_model, max(1, b))
            if t is not None:
                return t.source
    return "analytical"


# Least trustworthy last: a row mixing GPU types is as good as its worst-predicted group.
SOURCE_ORDER = ("measured", "transferred", "analytical")


def comm_model() -> LearnedComm:
    """The NCCL all-reduce model plans use: the one refit with this install's EC2 comm sweeps
    when there is one (``planner.app.comm_training``), else the shipped one."""
    from planner.app.comm_training import current_model_path
    from planner.perf.nccl import load_model

    return load_model(current_model_path())


def validated_errors() -> dict[str, SourceError]:
    """The benches' validated error per prediction source (``planner.validated``; may be empty)."""
    from planner.validated import load_validated_errors

    return load_validated_errors(Path(settings.VALIDATED_ERRORS_PATH))


def model_errors() -> dict[str, ModelError]:
    """The LOPO model error (q10/q50/q90 of ln(measured/predicted)) per prediction source
    (``planner.validated.load_model_errors``; may be empty: no band beyond the simulator's)."""
    from planner.validated import load_model_errors

    return load_model_errors(Path(settings.VALIDATED_ERRORS_PATH))


@dataclasses.dataclass
class RowSource:
    """Each plan row's prediction source (``PhaseTimes.source`` of its groups) and its validated error."""

    oracle: Oracle
    errors: Mapping[str, SourceError]
    candidates: Mapping[tuple[str, str, str], Candidate] = dataclasses.field(default_factory=dict)  # by key
    min_batch_per_gpu: int | None = None  # the solver's minimum (min_batch_per_gpu), None: none

    def source(self, plan: Plan) -> str:
        found = []
        for g in plan.groups:
            b = g.batch_per_node[0] // max(1, g.gpus_per_node) if g.batch_per_node else 1
            t = self.oracle.phases(g.gpu_model, max(1, b))
            found.append(t.source if t is not None else "analytical")
        rank = {s: i for i, s in enumerate(SOURCE_ORDER)}
        return max(found or ["analytical"], key=lambda s: rank.get(s, len(SOURCE_ORDER)))

    def fields(self, plan: Plan) -> dict[str, Any]:
        from planner.validated import error_of

        source = self.source(plan)
        from planner.validated import model_error_of

        return {
            "prediction_source": source,
            "prediction_error": error_of(source, self.errors),
            "model_error": model_error_of(plan.model_error_source, self.oracle.model_errors),
            **self.comm(plan),
            **self.batch(plan),
        }

    def batch(self, plan: Plan) -> dict[str, Any]:
        """The row's per-GPU batch (smallest over its groups) and whether it is below the
        solver's minimum (ranked only because nothing at the minimum fits)."""
        per_gpu = batch_per_gpu(plan)
        low = min(per_gpu, default=0)
        return {
            "batch_per_gpu": low,
            "batch_per_gpu_by_group": per_gpu,
            "below_min_batch_per_gpu": bool(self.min_batch_per_gpu and low < self.min_batch_per_gpu),
        }

    def comm(self, plan: Plan) -> dict[str, Any]:
        """The comm model that timed the row's all-reduces and its train points near this cluster."""
        try:
            config = tuple(
                (self.candidates[(plan.region, g.market, g.instance_type)], g.count) for g in plan.groups
            )
        except KeyError:
            return {}
        c = self.oracle.comm_source(config)
        return {"comm_source": c.source, "comm_near_points": c.near_points, "comm_detail": c.detail}


def _thin(points: Sequence[Point], limit: int = 4000) -> list[Point]:
    """At most ``limit`` points for the chart: all feasible ones first, then a stride of the rest."""
    feasible = [p for p in points if p.feasible]
    rest = [p for p in points if not p.feasible]
    room = max(0, limit - len(feasible))
    stride = max(1, math.ceil(len(rest) / room)) if room else len(rest) + 1
    return feasible[:limit] + rest[::stride][:room]


def _batch_info(pr: PlanRequest, minimum: Mapping[str, Any], plans: Sequence[Plan]) -> BatchInfo:
    """The result's batch settings: the range searched, the per-GPU minimum and where it came
    from, the learning-rate note, and the ranks below the minimum (nothing at it fitted)."""
    below = [p.rank for p in plans if min(batch_per_gpu(p), default=0) < minimum["value"]]
    return BatchInfo(
        global_batch_min=int(pr.global_batch_min),
        global_batch_max=int(pr.global_batch_max),
        min_per_gpu=minimum["value"],
        min_per_gpu_source=minimum["source"],
        below_min_ranks=tuple(below),
        note=LR_SCALING_NOTE,
    )


def _plan_row(plan: Plan, verified: dict[str, float] | None, rows: RowSource) -> PlanRow:
    """The stored row of a solver plan: ``dataclasses.asdict(plan)`` and the service's fields
    (the one writer of a plan row; planner.option reads it)."""
    doc = dataclasses.asdict(plan)
    doc["label"] = plan.label
    doc["uses_spot"] = plan.uses_spot
    doc["verified"] = verified
    doc.update(rows.fields(plan))
    return PlanRow.from_json(doc)


def _baseline(b: BaselineResult, rows: RowSource) -> Baseline:
    return Baseline(
        name=b.name,
        description=b.description,
        candidate=b.candidate.label if b.candidate else None,
        plan=_plan_row(b.plan, None, rows) if b.plan else None,
        infeasible_reason=b.infeasible_reason,
        throughput_gain_pct=b.throughput_gain_pct,
        cost_gain_pct=b.cost_gain_pct,
        time_gain_pct=b.time_gain_pct,
    )

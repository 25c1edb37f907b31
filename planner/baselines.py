"""Baselines a user would otherwise pick, evaluated with the same oracle and cost model as Srifty.

Each baseline fixes ONE candidate by a simple rule and is then sized generously: the node count is
the best one for that candidate under the same request (``solve`` restricted to that candidate,
homogeneous), unless a fixed ``num_nodes`` is given (as a SkyPilot user writes ``num_nodes:``).
So the gains reported are a conservative measure of what the type/market/region choice and
mixing buy.

* ``cheapest-gpu-hour``: the candidate with the lowest $/GPU-hour.
* ``fastest-type``: the instance type with the highest single-node throughput for this job (best
  batch), at its cheapest candidate (region/market).
* ``skypilot``: "SkyPilot-style" -- the cheapest per-hour candidate offering the requested GPU
  (``gpu_model`` and, if given, at least ``gpus_per_node`` GPUs per node), over all allowed regions;
  on-demand unless ``use_spot``.

Gains of Srifty's best plan over a baseline (positive = Srifty is better):
``throughput_gain_pct = 100 (goodput_srifty / goodput_base - 1)``,
``cost_gain_pct = 100 (1 - cost_srifty / cost_base)``, ``time_gain_pct = 100 (1 - time_srifty / time_base)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.offers import ON_DEMAND, Candidate
from planner.solver import (
    Infeasible,
    PerfOracle,
    Plan,
    PlanRequest,
    PlanResult,
    batch_grid,
    plan_for_config,
    solve,
)


@dataclass(frozen=True)
class BaselineResult:
    name: str
    description: str
    candidate: Candidate | None
    plan: Plan | None
    infeasible_reason: str | None
    throughput_gain_pct: float | None
    cost_gain_pct: float | None
    time_gain_pct: float | None


def _allowed(request: PlanRequest, candidates: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in candidates if request.regions is None or c.region in request.regions]


def _supported(request: PlanRequest, candidates: Sequence[Candidate], perf: PerfOracle) -> list[Candidate]:
    """Candidates whose instance type the oracle can run on one node at some grid batch."""
    grid = batch_grid(request)
    ok: dict[str, bool] = {}
    for c in candidates:
        if c.instance_type not in ok:
            ok[c.instance_type] = any(perf(((c, 1),), g) is not None for g in grid)
    return [c for c in candidates if ok[c.instance_type]]


def cheapest_per_gpu_hour(candidates: Sequence[Candidate]) -> Candidate | None:
    """Lowest $/GPU-hour (ties: fewer GPUs per node, then key)."""
    return min(candidates, key=lambda c: (c.price_per_gpu_hour, c.gpus_per_node, c.key), default=None)


def fastest_type(candidates: Sequence[Candidate], request: PlanRequest, perf: PerfOracle) -> Candidate | None:
    """Cheapest candidate of the instance type with the highest single-node throughput."""
    grid = batch_grid(request)
    best: dict[str, float] = {}
    rep: dict[str, Candidate] = {}
    for c in candidates:
        if c.instance_type in best:
            continue
        rep[c.instance_type] = c
        thr = 0.0
        for g in grid:
            e = perf(((c, 1),), g)
            if e is not None and e.throughput_sps > thr:
                thr = e.throughput_sps
        best[c.instance_type] = thr
    if not best or max(best.values()) <= 0:
        return None
    top = max(best, key=lambda t: (best[t], -rep[t].price_per_hour))
    return min((c for c in candidates if c.instance_type == top), key=lambda c: (c.price_per_hour, c.key))


def skypilot_choice(
    candidates: Sequence[Candidate], gpu_model: str, gpus_per_node: int | None = None, use_spot: bool = False
) -> Candidate | None:
    """Cheapest per-hour candidate with the requested accelerator (SkyPilot's optimizer rule)."""
    want = gpu_model.strip().lower()
    pool = [
        c
        for c in candidates
        if c.gpu_model.lower() == want
        and (gpus_per_node is None or c.gpus_per_node >= gpus_per_node)
        and (c.is_spot if use_spot else c.market == ON_DEMAND)
    ]
    return min(pool, key=lambda c: (c.price_per_hour, c.key), default=None)


def _gains(best: Plan, plan: Plan) -> tuple[float, float, float]:
    thr = 100.0 * (best.effective_throughput_sps / plan.effective_throughput_sps - 1.0)
    cost = 100.0 * (1.0 - best.total_usd / plan.total_usd)
    t = 100.0 * (1.0 - best.time_h / plan.time_h)
    return thr, cost, t


def evaluate_baseline(
    name: str,
    description: str,
    candidate: Candidate | None,
    request: PlanRequest,
    perf: PerfOracle,
    srifty: Plan | None,
    num_nodes: int | None = None,
) -> BaselineResult:
    """Size ``candidate`` for ``request`` (or use ``num_nodes``) and compare with Srifty's plan."""
    if candidate is None:
        return BaselineResult(
            name, description, None, None, "no candidate matches this baseline", None, None, None
        )
    plan: Plan | None = None
    reason: str | None = None
    if num_nodes is not None:
        plan = plan_for_config(((candidate, int(num_nodes)),), request, perf)
        if plan is None:
            reason = f"the performance model cannot run {num_nodes}x {candidate.instance_type}"
        elif plan.why.startswith("violates"):
            reason = plan.why
    else:
        try:
            res = solve(replace(request, max_types=1, top_k=1), [candidate], perf)
            plan = res.best
        except Infeasible as exc:
            reason = str(exc)
    gains: tuple[float | None, float | None, float | None] = (None, None, None)
    if plan is not None and srifty is not None and reason is None:
        gains = _gains(srifty, plan)
    return BaselineResult(name, description, candidate, plan, reason, *gains)


def evaluate_baselines(
    request: PlanRequest,
    candidates: Sequence[Candidate],
    perf: PerfOracle,
    srifty: PlanResult | Plan | None,
    *,
    requested_gpu: str | None = None,
    requested_gpus_per_node: int | None = None,
    skypilot_nodes: int | None = None,
    skypilot_use_spot: bool = False,
) -> list[BaselineResult]:
    """All baselines for ``request``; ``srifty`` is Srifty's result (or best plan) to compare with.
    The SkyPilot-style baseline is included when ``requested_gpu`` is given."""
    best = srifty.best if isinstance(srifty, PlanResult) else srifty
    pool = _supported(request, _allowed(request, candidates), perf)
    out = [
        evaluate_baseline(
            "cheapest-gpu-hour",
            "cheapest $/GPU-hour instance, best node count",
            cheapest_per_gpu_hour(pool),
            request,
            perf,
            best,
        ),
        evaluate_baseline(
            "fastest-type",
            "fastest single instance type, best node count",
            fastest_type(pool, request, perf),
            request,
            perf,
            best,
        ),
    ]
    if requested_gpu:
        spec = f"{requested_gpu}:{requested_gpus_per_node}" if requested_gpus_per_node else requested_gpu
        nodes = f"{skypilot_nodes} nodes" if skypilot_nodes else "best node count"
        out.append(
            evaluate_baseline(
                "skypilot",
                f"SkyPilot-style: cheapest per hour for {spec} ({'spot' if skypilot_use_spot else 'on-demand'}), {nodes}",
                skypilot_choice(pool, requested_gpu, requested_gpus_per_node, skypilot_use_spot),
                request,
                perf,
                best,
                num_nodes=skypilot_nodes,
            )
        )
    return out

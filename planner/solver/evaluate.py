"""Oracle calls: memoised, counted, reported, and the metrics of a configuration.

For a configuration ``x`` with oracle throughput ``T(x, G)`` (samples/s), ``S`` samples to
process, startup overhead ``o`` and the spot model of :mod:`planner.spot` (job hazard
``L = sum over spot groups n_i * lambda(bucket_i)``, checkpoint interval ``c``, write time ``w``,
loss per interruption ``l``)::

    rate(x)    = sum_i n_i * price_i                               [$/h]
    base(x)    = S / (3600 * T(x, G))                              [h]
    time(x)    = o + base * (1 + w/c) / (1 - L * l)  (= o + base when L = 0)   [h, expected]
    cost(x)    = rate(x) * time(x)                                 [$]
    goodput(x) = S / (3600 * (time(x) - o))                        [samples/s]

All four are monotone in ``T`` at a fixed configuration (rate and hazard do not depend on
``G``), so a configuration uses the grid batch with the highest throughput (ties: the smallest
batch), and an upper bound on ``T`` gives lower bounds on time and cost and an upper bound on
goodput (:func:`metrics` works on floats and numpy arrays alike).

The oracle must depend on the hardware only (instance types and counts), not on region, market
or price: calls are memoised on ``(sorted (instance_type, n), G)`` and two groups of one type
(spot + on-demand) reach it merged.  An oracle may also offer
``throughput_bound(candidate, counts, G) -> array``, an upper bound on the homogeneous
throughput for many counts at once that is 0 exactly where the oracle cannot run
(:meth:`planner.oracle.Oracle.throughput_bound`); the search uses it to evaluate only the
configurations that can matter.
"""

from __future__ import annotations

import math
import time as _time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner import spot as spotmodel
from planner.offers import Candidate
from planner.solver.request import (
    PROGRESS_INTERVAL_S,
    REL,
    Z90,
    Config,
    Estimate,
    PerfOracle,
    PlanRequest,
    ProgressCallback,
    batch_grid,
    qkey,
    quota_table,
)
from planner.validated import miss_with_error


def hazard_of(groups: Iterable[tuple[Candidate, int]]) -> float:
    return spotmodel.job_hazard((n, c.interruption_bucket, c.is_spot) for c, n in groups)


def metrics(thr: Any, rate: Any, hazard: Any, request: PlanRequest) -> tuple[Any, Any, Any, Any]:
    """``(base_h, time_h, cost, goodput)``; works on floats and numpy arrays."""
    params = request.spot_params
    if type(thr) is float and type(rate) is float and type(hazard) is float:  # noqa: E721 (the common case, cheaply)
        return _metrics_scalar(thr, rate, hazard, request, params)
    if np.ndim(thr) == 0 and np.ndim(rate) == 0 and np.ndim(hazard) == 0:
        return _metrics_scalar(float(thr), float(rate), float(hazard), request, params)
    with np.errstate(divide="ignore", invalid="ignore"):
        thr_a = np.asarray(thr, dtype=float)
        haz = np.asarray(hazard, dtype=float)
        base = np.where(thr_a > 0, request.total_samples / (3600.0 * np.where(thr_a > 0, thr_a, 1.0)), np.inf)
        work = np.where(
            haz > 0, base * (1.0 + params.checkpoint_write_h / params.checkpoint_interval_h), base
        )
        denom = 1.0 - haz * params.loss_per_interruption_h
        exp_h = np.where(denom > 0, work / np.where(denom > 0, denom, 1.0), np.inf)
        t = request.startup_overhead_h + exp_h
        cost = np.asarray(rate, dtype=float) * t
        good = np.where(np.isfinite(exp_h) & (exp_h > 0), request.total_samples / (3600.0 * exp_h), 0.0)
    if np.ndim(base) == 0:
        return float(base), float(t), float(cost), float(good)
    return base, t, cost, good


def metrics_at(
    thr: float, rate: np.ndarray, hazard: np.ndarray, request: PlanRequest
) -> tuple[Any, Any, Any, Any]:
    """:func:`metrics` of one throughput ``thr > 0`` at many rates and hazards (the offers of
    one instance type at one count), with the same operations: the search's inner loop asks
    this thousands of times, on arrays of a few dozen."""
    params = request.spot_params
    base = request.total_samples / (3600.0 * thr)
    haz = np.asarray(hazard, dtype=float)
    work = np.where(haz > 0, base * (1.0 + params.checkpoint_write_h / params.checkpoint_interval_h), base)
    denom = 1.0 - haz * params.loss_per_interruption_h
    safe = denom > 0
    exp_h = np.full(len(haz), math.inf)
    np.divide(work, denom, out=exp_h, where=safe)
    t = request.startup_overhead_h + exp_h
    cost = np.asarray(rate, dtype=float) * t
    good = np.zeros(len(haz))
    live = safe & (exp_h > 0)  # finite where denom > 0
    np.divide(request.total_samples, 3600.0 * exp_h, out=good, where=live)
    return np.full(len(haz), base), t, cost, good


def _metrics_scalar(
    thr: float, rate: float, haz: float, request: PlanRequest, params: Any
) -> tuple[float, float, float, float]:
    """:func:`metrics` for one configuration, in plain floats (the same operations)."""
    base = request.total_samples / (3600.0 * thr) if thr > 0 else math.inf
    work = base * (1.0 + params.checkpoint_write_h / params.checkpoint_interval_h) if haz > 0 else base
    denom = 1.0 - haz * params.loss_per_interruption_h
    exp_h = work / denom if denom > 0 else math.inf
    t = request.startup_overhead_h + exp_h
    cost = rate * t
    good = request.total_samples / (3600.0 * exp_h) if math.isfinite(exp_h) and exp_h > 0 else 0.0
    return base, t, cost, good


def lim(theta: float, tol: float = 0.0) -> float:
    """Bounds at or above this cannot beat (or, with a tie tolerance, tie) the incumbent ``theta``."""
    if not math.isfinite(theta):
        return math.inf
    return theta + abs(theta) * (REL + tol) + 1e-12


def value_of(objective: str, t: Any, cost: Any, good: Any, rate: Any) -> Any:
    if objective == "cost":
        return cost
    if objective == "time":
        return t
    if objective == "throughput":
        return -good if np.ndim(good) else -float(good)
    return rate  # "rate": min $/h (infeasibility explanations)


class Progress:
    """Counts evaluated configurations against an estimated total and reports them, throttled."""

    def __init__(self, callback: ProgressCallback | None, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.callback = callback
        self.interval_s = interval_s
        self.done = 0
        self.total = 0
        self._last = -math.inf

    def remaining(self, n: int) -> None:
        """About ``n`` more configurations to evaluate (the estimate shrinks as bounds prune)."""
        self.total = self.done + max(0, int(n))

    def tick(self, n: int = 1) -> None:
        self.done += n
        if self.callback is not None:
            now = _time.monotonic()
            if now - self._last >= self.interval_s:
                self._last = now
                self.callback(self.done, max(self.total, self.done))

    def finish(self) -> None:
        if self.callback is not None:
            self.callback(self.done, self.done)


class Memo:
    """Memoised oracle keyed on hardware only."""

    def __init__(self, perf: PerfOracle) -> None:
        self.perf = perf
        self.cache: dict[tuple[tuple[tuple[str, int], ...], int], Estimate | None] = {}
        self.rep: dict[str, Candidate] = {}
        self.calls = 0
        # hw -> best over a grid (a mix is asked again in every region that offers its types)
        self._best: dict[
            tuple[tuple[tuple[str, int], ...], tuple[int, ...]], tuple[float, int, Estimate | None]
        ] = {}

    @staticmethod
    def hw_key(groups: Iterable[tuple[Candidate, int]]) -> tuple[tuple[str, int], ...]:
        merged: dict[str, int] = defaultdict(int)
        for c, n in groups:
            merged[c.instance_type] += int(n)
        return tuple(sorted(merged.items()))

    def get(self, hw: tuple[tuple[str, int], ...], g: int) -> Estimate | None:
        key = (hw, g)
        if key in self.cache:
            return self.cache[key]
        cfg = tuple((self.rep[t], n) for t, n in hw)
        self.calls += 1
        est = self.perf(cfg, g)
        if est is not None and not (est.throughput_sps > 0 and math.isfinite(est.throughput_sps)):
            est = None
        self.cache[key] = est
        return est

    def forget_mixes(self) -> None:
        """Drop what is kept of mixes (a cache: asked again when needed); single types stay."""
        self.cache = {k: v for k, v in self.cache.items() if len(k[0]) == 1}
        self._best = {k: v for k, v in self._best.items() if len(k[0]) == 1}

    def best(
        self, groups: Sequence[tuple[Candidate, int]], grid: Sequence[int]
    ) -> tuple[float, int, Estimate | None]:
        for c, _ in groups:
            self.rep.setdefault(c.instance_type, c)
        hw = self.hw_key(groups)
        key = (hw, tuple(grid))
        hit = self._best.get(key)
        if hit is not None:
            return hit  # what asking each batch again gives (dropped with the cache: forget_mixes)
        best_t, best_g, best_e = 0.0, grid[0], None
        for g in grid:
            e = self.get(hw, g)
            if e is not None and e.throughput_sps > best_t:
                best_t, best_g, best_e = e.throughput_sps, g, e
        self._best[key] = (best_t, best_g, best_e)
        return best_t, best_g, best_e


# ----------------------------------------------------------------------------------- columns
@dataclass
class Spec:
    objective: str
    deadline: float | None
    budget: float | None
    cap: float | None
    risk: float | None
    quotas: dict[tuple[str, str], float]
    top_k: int
    tie_tol: float = 0.0
    bound_pruning: bool = True

    def feasible_mask(self, t: np.ndarray, cost: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """Deadline, budget and $/h cap (numpy; the miss-risk cap is checked per column)."""
        ok = np.isfinite(t)
        if self.deadline is not None:
            ok &= t <= self.deadline * (1 + REL)
        if self.budget is not None:
            ok &= cost <= self.budget * (1 + REL)
        if self.cap is not None:
            ok &= rate <= self.cap * (1 + REL)
        return np.asarray(ok, dtype=bool)


@dataclass
class Col:
    region: str
    groups: tuple[tuple[Candidate, int], ...]
    thr: float
    g: int
    rate: float
    hazard: float
    base: float
    time: float
    cost: float
    good: float
    nodes: int
    value: float
    feasible: bool
    risk: float | None = None
    bound: float = -math.inf  # the search's lower bound on ``value`` when it chose to evaluate it

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((c.instance_type, c.market) for c, _ in self.groups))

    @property
    def vcpus(self) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = defaultdict(float)
        for c, n in self.groups:
            out[qkey(c)] += c.vcpus * n
        return out

    def label(self) -> str:
        return " + ".join(
            f"{n}x {c.instance_type}" + (" (spot)" if c.is_spot else "") for c, n in self.groups
        )


@dataclass(frozen=True)
class ConfigMetrics:
    """Evaluation of one configuration under a request (see :func:`evaluate_config`)."""

    region: str
    config: Config
    global_batch: int
    estimate: Estimate
    hourly_usd: float
    hazard_per_h: float
    base_time_h: float
    time_h: float
    total_usd: float
    goodput_sps: float
    nodes: int
    vcpus: Mapping[tuple[str, str], float]
    feasible: bool
    violated: tuple[str, ...]

    def objective_value(self, objective: str) -> float:
        return float(value_of(objective, self.time_h, self.total_usd, self.goodput_sps, self.hourly_usd))


def risk_of(
    request: PlanRequest, base_h: float, hazard: float, est: Estimate, g: int, deadline_h: float | None = None
) -> float | None:
    """The deadline-miss probability, the model error of ``est``'s source included
    (:func:`planner.validated.miss_with_error`: at most 10 % exactly when the p90 time meets it)."""
    deadline = request.deadline_hours if deadline_h is None else deadline_h
    if deadline is None:
        return None
    jitter = jitter_sd_h(request, est, g)
    return miss_with_error(
        deadline - request.startup_overhead_h, base_h, hazard, request.spot_params, jitter, est.model_error
    )


def jitter_sd_h(request: PlanRequest, est: Estimate, g: int) -> float:
    iters = request.total_samples / max(1, g)
    sigma = max(0.0, est.iter_time_p90_s - est.iter_time_s) / Z90
    return math.sqrt(iters) * sigma / 3600.0


def _violations(
    request: PlanRequest,
    t: float,
    cost: float,
    rate: float,
    nodes: int,
    vcpus: Mapping[tuple[str, str], float],
    counts_ok: bool,
    risk_fn: Callable[[], float | None],
    *,
    deadline: float | None,
    budget: float | None,
    cap: float | None,
    risk: float | None,
    quotas: Mapping[tuple[str, str], float],
) -> tuple[str, ...]:
    bad: list[str] = []
    if not math.isfinite(t):
        bad.append("interruptions")
    if deadline is not None and t > deadline * (1 + REL):
        bad.append("deadline_hours")
    if budget is not None and cost > budget * (1 + REL):
        bad.append("budget_usd")
    if cap is not None and rate > cap * (1 + REL):
        bad.append("max_hourly_usd")
    if nodes > request.max_nodes:
        bad.append("max_nodes")
    if not counts_ok:
        bad.append("availability")
    for k, used in vcpus.items():
        if k in quotas and used > quotas[k] + 1e-9:
            bad.append("quotas")
            break
    if risk is not None and not bad:
        r = risk_fn()
        if r is not None and r > risk + 1e-12:
            bad.append("max_miss_risk")
    return tuple(bad)


def evaluate_config(
    config: Config, request: PlanRequest, perf: PerfOracle, global_batch: int | None = None
) -> ConfigMetrics | None:
    """Evaluate a user-given configuration (what-if).  ``global_batch=None`` picks the grid batch
    with the highest throughput, as the solver does.  ``None`` when the oracle cannot run it."""
    if not config:
        raise ValueError("config is empty")
    regions = {c.region for c, _ in config}
    if len(regions) != 1:
        raise ValueError("all nodes of a plan must be in one region")
    grid = (int(global_batch),) if global_batch is not None else batch_grid(request)
    best_t, best_g, best_e = 0.0, grid[0], None
    for g in grid:
        e = perf(config, g)
        if e is not None and e.throughput_sps > best_t and math.isfinite(e.throughput_sps):
            best_t, best_g, best_e = e.throughput_sps, g, e
    if best_e is None:
        return None
    rate = sum(c.price_per_hour * n for c, n in config)
    hazard = hazard_of(config)
    base, t, cost, good = metrics(best_t, rate, hazard, request)
    vcpus: dict[tuple[str, str], float] = defaultdict(float)
    for c, n in config:
        vcpus[qkey(c)] += c.vcpus * n
    nodes = sum(n for _, n in config)
    counts_ok = all(c.max_count is None or n <= c.max_count for c, n in config)
    quotas = quota_table(request)
    bad = _violations(
        request,
        t,
        cost,
        rate,
        nodes,
        vcpus,
        counts_ok,
        lambda: risk_of(request, base, hazard, best_e, best_g),
        deadline=request.deadline_hours,
        budget=request.budget_usd,
        cap=request.max_hourly_usd,
        risk=request.max_miss_risk,
        quotas=quotas,
    )
    return ConfigMetrics(
        region=next(iter(regions)),
        config=tuple(config),
        global_batch=best_g,
        estimate=best_e,
        hourly_usd=rate,
        hazard_per_h=hazard,
        base_time_h=base,
        time_h=t,
        total_usd=cost,
        goodput_sps=good,
        nodes=nodes,
        vcpus=dict(vcpus),
        feasible=not bad,
        violated=bad,
    )

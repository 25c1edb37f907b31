"""Cluster-plan solver: pick instance types, markets and node counts for a DDP training job.

Problem
-------
Given candidate node offers (:class:`planner.candidates.Candidate`), a performance oracle and a
:class:`PlanRequest`, choose ONE region ``r`` and a configuration
``x = ((c_1, n_1), ..., (c_k, n_k))`` of ``k <= max_types`` distinct candidates of region ``r``
(a candidate is an instance type in one market, so a spot + on-demand blend of one type counts as
two groups) with ``n_i >= 1`` nodes each, ``sum n_i <= max_nodes``, plus a global batch ``G``.

For a configuration the oracle gives the throughput ``T(x, G)`` (samples/s).  With ``S`` total
samples (samples/epoch x epochs, or iterations x global batch), startup overhead ``o`` and the spot
model of :mod:`planner.spot` (job hazard ``L = sum over spot groups n_i * lambda(bucket_i)``)::

    rate(x)   = sum_i n_i * price_i                                   [$/h]
    base(x)   = S / (3600 * T(x, G))                                  [h]
    time(x)   = o + E[T_completion](base, L)    (= o + base when L=0) [h, expected]
    cost(x)   = rate(x) * time(x)                                     [$]
    goodput(x)= S / (3600 * (time(x) - o))                            [samples/s, after interruptions]

Objectives:  ``"cost"``: min cost s.t. time <= deadline;  ``"time"``: min time s.t. cost <= budget;
``"throughput"``: max goodput s.t. rate <= max_hourly_usd.  Every constraint given in the request
applies whatever the objective (deadline, budget, $/h cap, deadline-miss risk), as do the vCPU
quotas per (market, quota class) -- ``sum over groups in that class/market of n_i * vcpus_i <= Q``
-- and per-candidate availability caps (``Candidate.max_count``).

Global batch: ``G`` ranges over :func:`batch_grid` (the request's explicit ``batch_sizes``, else
powers of two between ``global_batch_min`` and ``global_batch_max`` plus both ends).  At a fixed
configuration, rate and hazard do not depend on ``G`` and cost, time and goodput are monotone in
``T``, so each configuration uses the grid batch with the highest throughput (ties: the smallest).

Method (exact on the enumerated space)
--------------------------------------
1. **Memoised oracle.**  The oracle must depend on the hardware only (instance types and counts),
   not on region, market or price; calls are memoised on ``(sorted (instance_type, n), G)``, and
   two groups of the same instance type (spot + on-demand) are passed to it merged.
2. **Homogeneous curves.**  ``T_c(n) = max_G T(((c, n),), G)`` for every instance type and
   ``n = 1..max_nodes`` (``#types x max_nodes x #batches`` oracle calls).  Types the oracle cannot
   run at all are dropped.
3. **Dominance pruning** (:func:`planner.candidates.find_dominated`, per region, market and quota
   class) removes candidates that another candidate beats on every count, price, quota use, risk,
   availability and link speed.
4. **Homogeneous columns** ``(c, n)`` are all evaluated (vectorised).  They seed the incumbent.
5. **Mixed columns, best-first branch and bound.**  Two upper bounds on the throughput of a mix,
   both monotone assumptions about DDP that hold for ring all-reduce / slowest-node models:

   * (A1) *separability*: ``T(mix) <= sum_i T_{c_i}(n_i)`` -- a cluster never processes more
     samples/s than its groups would as separate clusters (when a group cannot run alone,
     ``n_i * max_m T_{c_i}(m) / m`` is used);
   * (A2) *replacement*: if member ``a``'s curve is at least member ``b``'s at every node count,
     replacing the ``b`` nodes by ``a`` nodes does not slow the mix down, so
     ``T(mix) <= T_a(n_a + n_b) (+ the other groups' terms)`` -- this is what stops a saturated
     fast type (e.g. 10 nodes already at the scaling limit) from dragging every mix with it into
     the search.

   Their minimum gives, for all count vectors of a subset at once (numpy), lower bounds on time and
   cost and an upper bound on goodput (all monotone in ``T``).  A subset is skipped when even its
   best bound cannot be feasible or beat the incumbent (the $/h cap limits each member's count);
   surviving vectors are evaluated in increasing bound order until the bound reaches the incumbent.
   Every evaluated mix is checked against its bound: a violation (an oracle breaking A1/A2) drops
   to the weaker bound (A1 only, then none) and redoes the mixed search, so the optimum stays exact.
6. **MILP selection** (PuLP/CBC): one binary ``y_j`` per column ``j`` -- the best evaluated
   configuration (count vector with its best batch) of each distinct set of (instance type,
   market) groups, over all regions -- with::

       min  sum_j v_j y_j          (v = cost, time or -goodput)
       s.t. sum_j y_j = 1
            sum_j time_j y_j <= deadline,  sum_j cost_j y_j <= budget,  sum_j rate_j y_j <= cap,
            sum_j nodes_j y_j <= max_nodes, sum_j vcpu_{j,q} y_j <= Q_q  for each quota q,
            sum_j risk_j y_j <= max_miss_risk

   Because exactly one column is chosen the model is exact on the column set; the per-column
   constraints are also applied while enumerating (which keeps the model to a few hundred
   columns), and the MILP answer is cross-checked against the sorted column list.
   :func:`exhaustive_search` is the brute-force reference used by the tests and the bench.

Ranking: plan #1 is the exact optimum.  Plans #2.. are the best *evaluated* configuration of each
other type set (exact for single-type plans, which are all evaluated; a mixed alternative may have
an unevaluated, slightly better count vector).  With ``tie_tolerance > 0`` plans within that
relative distance of the optimum count as tied and the secondary objective decides (time for
``"cost"``, cost for ``"time"`` and ``"throughput"``); the default 0 keeps the strict optimum.

Outputs: :class:`PlanResult` with the ranked plans, every evaluated point, their (cost, time)
Pareto frontier and statistics.  When nothing is feasible :class:`Infeasible` names the binding
constraint (found by re-solving with constraints relaxed); a contradictory request raises
:class:`RequestError` (a ``ValueError``) naming the field.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time as _time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from planner import spot as spotmodel
from planner.candidates import SPOT, Candidate, find_dominated, quota_class
from planner.defaults import PLAN_DEFAULTS

OBJECTIVES = ("cost", "time", "throughput")
_Z90 = 1.2815515655446004
_REL = 1e-9

Config = tuple[tuple[Candidate, int], ...]


@dataclass(frozen=True)
class Estimate:
    """What the performance oracle returns for ``(config, global_batch)``.

    ``per_node_batch`` (optional) has one entry per config entry: the batch each node of that
    entry processes per iteration.  When absent the solver splits ``G`` in proportion to each
    type's single-node throughput.
    """

    iter_time_s: float
    iter_time_p90_s: float
    throughput_sps: float
    bottleneck: str = "compute"
    per_node_batch: tuple[int, ...] | None = None


#: ``perf(config, global_batch) -> Estimate`` (``None`` when the configuration cannot run,
#: e.g. out of memory).  Must depend on the hardware only, not on region/market/price.
PerfOracle = Callable[[Config, int], "Estimate | None"]


class RequestError(ValueError):
    """A contradictory or malformed :class:`PlanRequest`; ``field`` names the offending field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class Infeasible(Exception):
    """No plan satisfies the request; ``constraint`` names the binding constraint
    (``"deadline_hours"``, ``"budget_usd"``, ``"max_hourly_usd"``, ``"max_miss_risk"``,
    ``"quotas"``, ``"max_nodes"`` or ``"candidates"``)."""

    def __init__(self, message: str, constraint: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.details = dict(details or {})


@dataclass(frozen=True)
class PlanRequest:
    """What the user asks for (times in hours, money in USD).

    * ``objective``: ``"cost"`` (min total $, needs ``deadline_hours``), ``"time"`` (min expected
      time, needs ``budget_usd``) or ``"throughput"`` (max goodput, needs ``max_hourly_usd``);
      the other two limits may be given too and then also apply.
    * ``total_samples``: samples to process (see :meth:`samples_for`).
    * ``max_nodes``: nodes per plan; ``max_types``: groups per plan (1 = homogeneous, up to 3).
    * ``quotas_on_demand`` / ``quotas_spot``: vCPU limit per quota class (``"P"``, ``"G"``; a
      family or type name is normalised with :func:`planner.candidates.quota_class`); a missing
      class is unlimited.
    * ``global_batch_min`` / ``global_batch_max`` (or explicit ``batch_sizes``): see :func:`batch_grid`.
    * ``regions``: restrict to these regions (``None`` = all given candidates).
    * ``startup_overhead_h``: paid once per plan (provisioning, data staging), billed.
    * ``checkpoint_interval_h``, ``restart_overhead_h``, ``checkpoint_write_s``: spot fault tolerance
      (:mod:`planner.spot`).
    * ``max_miss_risk``: optional cap on P(miss the deadline) (needs ``deadline_hours``).
    * ``top_k``: number of ranked plans; ``tie_tolerance``: see the module docstring.
    """

    objective: str
    total_samples: float
    deadline_hours: float | None = None
    budget_usd: float | None = None
    max_hourly_usd: float | None = None
    max_nodes: int = int(PLAN_DEFAULTS["max_nodes"])
    max_types: int = int(PLAN_DEFAULTS["max_types"])
    quotas_on_demand: Mapping[str, float] = field(default_factory=dict)
    quotas_spot: Mapping[str, float] = field(default_factory=dict)
    global_batch_min: int = int(PLAN_DEFAULTS["global_batch_min"])
    global_batch_max: int = int(PLAN_DEFAULTS["global_batch_max"])
    batch_sizes: tuple[int, ...] | None = None
    regions: tuple[str, ...] | None = None
    startup_overhead_h: float = 0.1
    checkpoint_interval_h: float = PLAN_DEFAULTS["checkpoint_interval_h"]
    restart_overhead_h: float = PLAN_DEFAULTS["restart_overhead_h"]
    checkpoint_write_s: float = 0.0
    max_miss_risk: float | None = None
    top_k: int = int(PLAN_DEFAULTS["top_k"])
    tie_tolerance: float = 0.0

    @staticmethod
    def samples_for(
        samples_per_epoch: float | None = None,
        epochs: float | None = None,
        iterations: int | None = None,
        global_batch: int | None = None,
    ) -> float:
        """``samples/epoch x epochs`` or ``iterations x global batch``."""
        if samples_per_epoch is not None and epochs is not None:
            return float(samples_per_epoch) * float(epochs)
        if iterations is not None and global_batch is not None:
            return float(iterations) * float(global_batch)
        raise RequestError(
            "total_samples", "give samples_per_epoch and epochs, or iterations and global_batch"
        )

    @property
    def spot_params(self) -> spotmodel.SpotParams:
        return spotmodel.SpotParams(
            checkpoint_interval_h=self.checkpoint_interval_h,
            restart_overhead_h=self.restart_overhead_h,
            checkpoint_write_h=self.checkpoint_write_s / 3600.0,
        )

    def validate(self) -> None:
        """Raise :class:`RequestError` naming the first contradictory field."""
        if self.objective not in OBJECTIVES:
            raise RequestError("objective", f"must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if not (self.total_samples and self.total_samples > 0 and math.isfinite(self.total_samples)):
            raise RequestError("total_samples", "must be > 0")
        for name in ("deadline_hours", "budget_usd", "max_hourly_usd"):
            v = getattr(self, name)
            if v is not None and not (v > 0):
                raise RequestError(name, f"must be > 0, got {v}")
        required = {"cost": "deadline_hours", "time": "budget_usd", "throughput": "max_hourly_usd"}[
            self.objective
        ]
        if getattr(self, required) is None:
            raise RequestError(required, f"is required for objective {self.objective!r}")
        if int(self.max_nodes) < 1:
            raise RequestError("max_nodes", "must be >= 1")
        if not 1 <= int(self.max_types) <= 3:
            raise RequestError("max_types", "must be 1, 2 or 3")
        if int(self.global_batch_min) < 1:
            raise RequestError("global_batch_min", "must be >= 1")
        if int(self.global_batch_min) > int(self.global_batch_max):
            raise RequestError(
                "global_batch_min", f"global batch min {self.global_batch_min} > max {self.global_batch_max}"
            )
        if self.batch_sizes is not None and (not self.batch_sizes or min(self.batch_sizes) < 1):
            raise RequestError("batch_sizes", "must be a non-empty list of positive sizes")
        for name in ("quotas_on_demand", "quotas_spot"):
            for k, v in (getattr(self, name) or {}).items():
                if v is not None and v < 0:
                    raise RequestError(name, f"quota {k!r} must be >= 0, got {v}")
        if self.startup_overhead_h < 0:
            raise RequestError("startup_overhead_h", "must be >= 0")
        if not self.checkpoint_interval_h > 0:
            raise RequestError("checkpoint_interval_h", "must be > 0")
        if self.restart_overhead_h < 0:
            raise RequestError("restart_overhead_h", "must be >= 0")
        if self.checkpoint_write_s < 0:
            raise RequestError("checkpoint_write_s", "must be >= 0")
        if self.max_miss_risk is not None:
            if not 0 < self.max_miss_risk <= 1:
                raise RequestError("max_miss_risk", "must be in (0, 1]")
            if self.deadline_hours is None:
                raise RequestError("max_miss_risk", "needs deadline_hours")
        if self.deadline_hours is not None and self.deadline_hours <= self.startup_overhead_h:
            raise RequestError(
                "deadline_hours",
                f"deadline {self.deadline_hours} h leaves no time after the "
                f"{self.startup_overhead_h} h startup overhead",
            )
        if int(self.top_k) < 1:
            raise RequestError("top_k", "must be >= 1")
        if not 0 <= self.tie_tolerance < 1:
            raise RequestError("tie_tolerance", "must be in [0, 1)")


@dataclass(frozen=True)
class NodeGroup:
    """``count`` nodes of one candidate inside a plan."""

    instance_type: str
    market: str
    zone: str | None
    count: int
    gpus_per_node: int
    gpu_model: str
    price_per_hour: float
    batch_per_node: tuple[int, ...]
    interruption_bucket: int

    @property
    def label(self) -> str:
        return f"{self.count}x {self.instance_type}" + (" (spot)" if self.market == SPOT else "")


@dataclass(frozen=True)
class Plan:
    rank: int
    region: str
    groups: tuple[NodeGroup, ...]
    global_batch: int
    nodes: int
    gpus: int
    hourly_usd: float
    total_usd: float
    time_h: float
    time_p90_h: float
    base_time_h: float
    throughput_sps: float
    effective_throughput_sps: float
    iter_time_s: float
    iter_time_p90_s: float
    bottleneck: str
    deadline_miss_risk: float | None
    expected_interruptions: float
    why: str

    @property
    def label(self) -> str:
        return " + ".join(g.label for g in self.groups) + f" in {self.region}"

    @property
    def uses_spot(self) -> bool:
        return any(g.market == SPOT for g in self.groups)


class Point(NamedTuple):
    """One evaluated configuration (for scatter charts and the Pareto frontier); ``_asdict()`` for JSON.

    ``time_h`` is the expected time including startup and interruptions; ``feasible`` says whether
    it meets the deadline / budget / $/h cap (the miss-risk cap is only checked for plans).
    """

    region: str
    label: str
    nodes: int
    n_types: int
    global_batch: int
    hourly_usd: float
    total_usd: float
    time_h: float
    throughput_sps: float
    feasible: bool


@dataclass(frozen=True)
class SolveStats:
    candidates_in: int
    candidates_supported: int
    candidates_kept: int
    dominated: int
    regions: int
    homogeneous_configs: int
    mixed_subsets: int
    mixed_subsets_pruned: int
    mixed_vectors_bounded: int
    mixed_configs_evaluated: int
    milp_columns: int
    milp_status: str
    oracle_calls: int
    bound_violations: int


@dataclass(frozen=True)
class PlanResult:
    request: PlanRequest
    plans: tuple[Plan, ...]
    pareto: tuple[Point, ...]
    points: tuple[Point, ...]
    stats: SolveStats
    solve_time_s: float

    @property
    def best(self) -> Plan:
        return self.plans[0]


# ----------------------------------------------------------------------------------- helpers
def batch_grid(request: PlanRequest) -> tuple[int, ...]:
    """The global batch sizes considered (sorted, unique)."""
    if request.batch_sizes:
        vals = {
            int(b)
            for b in request.batch_sizes
            if request.global_batch_min <= int(b) <= request.global_batch_max
        }
        if not vals:
            raise RequestError("batch_sizes", "no size lies within [global_batch_min, global_batch_max]")
        return tuple(sorted(vals))
    lo, hi = int(request.global_batch_min), int(request.global_batch_max)
    vals = {lo, hi}
    p = 1
    while p <= hi:
        if lo < p < hi:
            vals.add(p)
        p *= 2
    return tuple(sorted(vals))


def _quota_table(request: PlanRequest) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for market, q in (("on-demand", request.quotas_on_demand), (SPOT, request.quotas_spot)):
        for k, v in (q or {}).items():
            if v is None:
                continue
            key = (market, quota_class(str(k)))
            out[key] = min(float(v), out.get(key, math.inf))
    return out


def _qkey(c: Candidate) -> tuple[str, str]:
    return (c.market, c.quota_class)


def _max_count(c: Candidate, quotas: Mapping[tuple[str, str], float], max_nodes: int) -> int:
    m = max_nodes if c.max_count is None else min(max_nodes, int(c.max_count))
    q = quotas.get(_qkey(c))
    if q is not None and c.vcpus > 0:
        m = min(m, int(math.floor(q / c.vcpus + 1e-9)))
    return max(0, m)


def _hazard_of(groups: Iterable[tuple[Candidate, int]]) -> float:
    return spotmodel.job_hazard((n, c.interruption_bucket, c.is_spot) for c, n in groups)


def _metrics(thr: Any, rate: Any, hazard: Any, request: PlanRequest) -> tuple[Any, Any, Any, Any]:
    """``(base_h, time_h, cost, goodput)``; works on floats and numpy arrays."""
    params = request.spot_params
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


def _lim(theta: float, tol: float = 0.0) -> float:
    """Bounds at or above this cannot beat (or, with a tie tolerance, tie) the incumbent ``theta``."""
    if not math.isfinite(theta):
        return math.inf
    return theta + abs(theta) * (_REL + tol) + 1e-12


def _value(objective: str, t: Any, cost: Any, good: Any, rate: Any) -> Any:
    if objective == "cost":
        return cost
    if objective == "time":
        return t
    if objective == "throughput":
        return -good if np.ndim(good) else -float(good)
    return rate  # "rate": min $/h (infeasibility explanations)


#: ``progress(evaluated, estimated_total)``: called as the solve goes (at most every
#: :data:`PROGRESS_INTERVAL_S`); an exception it raises propagates out of :func:`solve` (cancel).
ProgressCallback = Callable[[int, int], None]
PROGRESS_INTERVAL_S = 0.1


class _Progress:
    """Counts oracle evaluations against an estimated total and reports them, throttled."""

    def __init__(self, callback: ProgressCallback | None, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.callback = callback
        self.interval_s = interval_s
        self.done = 0
        self.total = 0
        self._last = -math.inf

    def expect(self, n: int) -> None:
        self.total += max(0, int(n))

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


class _Memo:
    """Memoised oracle keyed on hardware only."""

    def __init__(self, perf: PerfOracle, progress: _Progress | None = None) -> None:
        self.perf = perf
        self.cache: dict[tuple[tuple[tuple[str, int], ...], int], Estimate | None] = {}
        self.rep: dict[str, Candidate] = {}
        self.calls = 0
        self.progress = progress or _Progress(None)

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
        self.progress.tick()
        if est is not None and not (est.throughput_sps > 0 and math.isfinite(est.throughput_sps)):
            est = None
        self.cache[key] = est
        return est

    def best(
        self, groups: Sequence[tuple[Candidate, int]], grid: Sequence[int]
    ) -> tuple[float, int, Estimate | None]:
        for c, _ in groups:
            self.rep.setdefault(c.instance_type, c)
        hw = self.hw_key(groups)
        best_t, best_g, best_e = 0.0, grid[0], None
        for g in grid:
            e = self.get(hw, g)
            if e is not None and e.throughput_sps > best_t:
                best_t, best_g, best_e = e.throughput_sps, g, e
        return best_t, best_g, best_e


# ----------------------------------------------------------------------------------- evaluation
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
        return float(_value(objective, self.time_h, self.total_usd, self.goodput_sps, self.hourly_usd))


def _risk(request: PlanRequest, base_h: float, hazard: float, est: Estimate, g: int) -> float | None:
    if request.deadline_hours is None:
        return None
    jitter = _jitter_sd_h(request, est, g)
    return spotmodel.miss_probability(
        request.deadline_hours - request.startup_overhead_h, base_h, hazard, request.spot_params, jitter
    )


def _jitter_sd_h(request: PlanRequest, est: Estimate, g: int) -> float:
    iters = request.total_samples / max(1, g)
    sigma = max(0.0, est.iter_time_p90_s - est.iter_time_s) / _Z90
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
    if deadline is not None and t > deadline * (1 + _REL):
        bad.append("deadline_hours")
    if budget is not None and cost > budget * (1 + _REL):
        bad.append("budget_usd")
    if cap is not None and rate > cap * (1 + _REL):
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
    hazard = _hazard_of(config)
    base, t, cost, good = _metrics(best_t, rate, hazard, request)
    vcpus: dict[tuple[str, str], float] = defaultdict(float)
    for c, n in config:
        vcpus[_qkey(c)] += c.vcpus * n
    nodes = sum(n for _, n in config)
    counts_ok = all(c.max_count is None or n <= c.max_count for c, n in config)
    quotas = _quota_table(request)
    bad = _violations(
        request,
        t,
        cost,
        rate,
        nodes,
        vcpus,
        counts_ok,
        lambda: _risk(request, base, hazard, best_e, best_g),
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


def exhaustive_search(
    request: PlanRequest, candidates: Sequence[Candidate], perf: PerfOracle
) -> tuple[float, ConfigMetrics] | None:
    """Brute-force reference: every subset of <= max_types candidates of one region, every count
    vector, evaluated with :func:`evaluate_config`.  Returns ``(objective value, metrics)`` of the
    best feasible configuration (``None`` if none).  Exponential; for small problems only."""
    request.validate()
    cands = [c for c in candidates if request.regions is None or c.region in request.regions]
    by_region: dict[str, list[Candidate]] = defaultdict(list)
    for c in cands:
        by_region[c.region].append(c)
    best: tuple[float, ConfigMetrics] | None = None
    for region in sorted(by_region):
        group = by_region[region]
        for k in range(1, request.max_types + 1):
            for subset in itertools.combinations(group, k):
                for counts in itertools.product(range(1, request.max_nodes + 1), repeat=k):
                    if sum(counts) > request.max_nodes:
                        continue
                    m = evaluate_config(tuple(zip(subset, counts, strict=True)), request, perf)
                    if m is None or not m.feasible:
                        continue
                    v = m.objective_value(request.objective)
                    if best is None or v < best[0]:
                        best = (v, m)
    return best


# ----------------------------------------------------------------------------------- engine
@dataclass
class _Spec:
    objective: str
    deadline: float | None
    budget: float | None
    cap: float | None
    risk: float | None
    quotas: dict[tuple[str, str], float]
    top_k: int
    tie_tol: float = 0.0
    bound_pruning: bool = True


@dataclass
class _Col:
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

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((c.instance_type, c.market) for c, _ in self.groups))

    @property
    def vcpus(self) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = defaultdict(float)
        for c, n in self.groups:
            out[_qkey(c)] += c.vcpus * n
        return out

    def label(self) -> str:
        return " + ".join(
            f"{n}x {c.instance_type}" + (" (spot)" if c.is_spot else "") for c, n in self.groups
        )


class _TopK:
    """Best objective value per distinct type set; ``threshold`` = k-th best (inf until k keys)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.best: dict[tuple[tuple[str, str], ...], float] = {}
        self.threshold = math.inf

    def offer(self, key: tuple[tuple[str, str], ...], value: float) -> None:
        old = self.best.get(key)
        if old is None or value < old:
            self.best[key] = value
            if len(self.best) >= self.k:
                self.threshold = heapq.nsmallest(self.k, self.best.values())[-1]


@dataclass
class _Outcome:
    cols: list[_Col]
    topk_threshold: float
    homogeneous: int
    subsets: int
    subsets_pruned: int
    vectors_bounded: int
    mixed_evaluated: int
    violations: int
    points: list[Point]


class _Engine:
    def __init__(
        self,
        request: PlanRequest,
        candidates: Sequence[Candidate],
        perf: PerfOracle,
        progress: _Progress | None = None,
    ) -> None:
        self.request = request
        self.grid = batch_grid(request)
        self.progress = progress or _Progress(None)
        self.memo = _Memo(perf, self.progress)
        self.N = int(request.max_nodes)
        cands = [c for c in candidates if request.regions is None or c.region in request.regions]
        self.candidates_in = len(cands)
        self.progress.expect(len({c.instance_type for c in cands}) * self.N * len(self.grid))
        # homogeneous curves per instance type: thr[n], g[n] for n = 0..N
        self.curve: dict[str, np.ndarray] = {}
        self.curve_g: dict[str, np.ndarray] = {}
        self.per_node_best: dict[str, float] = {}
        flat: dict[str, list[float]] = {}
        for c in cands:
            t = c.instance_type
            if t in self.curve:
                continue
            self.memo.rep.setdefault(t, c)
            thr = np.zeros(self.N + 1)
            gs = np.zeros(self.N + 1, dtype=int)
            row: list[float] = []
            for n in range(1, self.N + 1):
                best_t, best_g = 0.0, self.grid[0]
                for g in self.grid:
                    e = self.memo.get(((t, n),), g)
                    v = e.throughput_sps if e is not None else 0.0
                    row.append(v)
                    if v > best_t:
                        best_t, best_g = v, g
                thr[n], gs[n] = best_t, best_g
            self.curve[t], self.curve_g[t] = thr, gs
            flat[t] = row
            self.per_node_best[t] = float(max((thr[n] / n for n in range(1, self.N + 1)), default=0.0))
        supported = [c for c in cands if self.per_node_best.get(c.instance_type, 0.0) > 0]
        self.supported = supported
        dropped = find_dominated(supported, flat, max_nodes=self.N, mixes=request.max_types > 1)
        self.kept = [c for c in supported if c not in dropped]
        self.dominated = len(dropped)
        self.by_region: dict[str, list[Candidate]] = defaultdict(list)
        for c in self.kept:
            self.by_region[c.region].append(c)
        # separability bound terms: T_c(n) when it runs alone, else n * best per-node throughput
        self.term: dict[str, np.ndarray] = {}
        for t, thr in self.curve.items():
            lin = np.arange(self.N + 1) * self.per_node_best[t]
            self.term[t] = np.where(thr > 0, thr, lin)
        # hardware dominance for the replacement bound: at least as fast at every node count, each at
        # its best batch (assumption A2 of the module docstring; violations are detected)
        self.types = sorted(flat)
        self.tidx = {t: i for i, t in enumerate(self.types)}
        if self.types:
            F = np.array([self.curve[t][1:] for t in self.types])
            self.dom = (F[:, None, :] >= F[None, :, :]).all(axis=2)
            self.curve_sum = F.sum(axis=1)
        else:
            self.dom = np.zeros((0, 0), dtype=bool)
            self.curve_sum = np.zeros(0)
        # prefix max of term over s = 2..S and prefix min of s / term(s) (pair-level replacement bound)
        self.pmax: dict[str, np.ndarray] = {}
        self.rmin: dict[str, np.ndarray] = {}
        for t, term in self.term.items():
            pm = np.zeros(self.N + 1)
            rm = np.full(self.N + 1, np.inf)
            with np.errstate(divide="ignore"):
                ratio = np.where(term > 0, np.arange(self.N + 1) / np.where(term > 0, term, 1.0), np.inf)
            if self.N >= 2:
                pm[2:] = np.maximum.accumulate(term[2:])
                rm[2:] = np.minimum.accumulate(ratio[2:])
            self.pmax[t], self.rmin[t] = pm, rm
        self.bound_level = 2

    def _reps(self, subset: Sequence[Candidate]) -> list[int]:
        """For each member, the member whose hardware dominates it with the largest curve (itself
        if none): the replacement bound merges every member into its representative."""
        idx = [self.tidx[c.instance_type] for c in subset]
        out = []
        for i in range(len(subset)):
            best = i
            for j in range(len(subset)):
                if self.dom[idx[j], idx[i]] and (self.curve_sum[idx[j]], -j) > (
                    self.curve_sum[idx[best]],
                    -best,
                ):
                    best = j
            out.append(best)
        return out

    def _ub(self, subset: Sequence[Candidate], ns: Sequence[Any], level: int) -> Any:
        """Upper bound on the mix throughput for count vectors ``ns`` (arrays or ints)."""
        sep = sum(self.term[c.instance_type][n] for c, n in zip(subset, ns, strict=True))
        if level < 2:
            return sep
        merged: dict[int, Any] = {}
        for i, r in enumerate(self._reps(subset)):
            merged[r] = merged.get(r, 0) + ns[i]
        if len(merged) == len(subset):
            return sep
        rep = sum(self.term[subset[r].instance_type][cnt] for r, cnt in merged.items())
        return np.minimum(sep, rep)

    # -- feasibility helpers
    def _risk_of(self, col: _Col, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        est = self.memo.get(self.memo.hw_key(col.groups), col.g)
        assert est is not None
        jitter = _jitter_sd_h(self.request, est, col.g)
        return spotmodel.miss_probability(
            deadline - self.request.startup_overhead_h, col.base, col.hazard, self.request.spot_params, jitter
        )

    def _feasible_mask(self, spec: _Spec, t: np.ndarray, cost: np.ndarray, rate: np.ndarray) -> np.ndarray:
        ok = np.isfinite(t)
        if spec.deadline is not None:
            ok &= t <= spec.deadline * (1 + _REL)
        if spec.budget is not None:
            ok &= cost <= spec.budget * (1 + _REL)
        if spec.cap is not None:
            ok &= rate <= spec.cap * (1 + _REL)
        return ok

    def _finish_col(self, col: _Col, spec: _Spec) -> None:
        if col.feasible and spec.risk is not None:
            col.risk = self._risk_of(col, spec.deadline)
            if col.risk is not None and col.risk > spec.risk + 1e-12:
                col.feasible = False

    # -- main search
    def run(self, spec: _Spec, *, want_points: bool = True) -> _Outcome:
        """Best feasible column of every distinct type set that was evaluated; the best overall is
        exact (bounds only prune what cannot beat the incumbent)."""
        req = self.request
        top = _TopK(1)
        best_by_key: dict[tuple[tuple[str, str], ...], _Col] = {}
        points: list[Point] = []
        homogeneous = 0

        def keep(col: _Col) -> None:
            old = best_by_key.get(col.key)
            if old is None or (col.value, col.nodes) < (old.value, old.nodes):
                best_by_key[col.key] = col
            top.offer((), col.value)

        # 1) homogeneous columns, vectorised per candidate
        rows: list[tuple[Candidate, dict[str, np.ndarray]]] = []
        for c in self.kept:
            m = _max_count(c, spec.quotas, self.N)
            if m < 1:
                continue
            n = np.arange(1, m + 1)
            thr = self.curve[c.instance_type][1 : m + 1]
            runs = thr > 0
            if not runs.any():
                continue
            n, thr = n[runs], thr[runs]
            rate = c.price_per_hour * n
            haz = _hazard_of(((c, 1),)) * n
            base, t, cost, good = _metrics(thr, rate, haz, req)
            val = _value(spec.objective, t, cost, good, rate)
            ok = self._feasible_mask(spec, t, cost, rate)
            homogeneous += len(n)
            arr = {
                "n": n,
                "thr": thr,
                "rate": rate,
                "haz": haz,
                "base": base,
                "t": t,
                "cost": cost,
                "good": good,
                "val": val,
                "ok": ok,
            }
            rows.append((c, arr))
            idx = np.flatnonzero(ok)
            if len(idx):
                # in value order (then fewer nodes) until one passes the (non-vectorised) risk check
                for i in idx[np.lexsort((n[idx], val[idx]))]:
                    col = self._homo_col(c, arr, int(i))
                    self._finish_col(col, spec)
                    if col.feasible:
                        keep(col)
                        break
                    arr["ok"][i] = False
            if want_points:
                g = self.curve_g[c.instance_type][n]
                suffix = f"x {c.instance_type}" + (" (spot)" if c.is_spot else "")
                points.extend(
                    Point(c.region, f"{nn}{suffix}", nn, 1, gg, r, co, tt, th, bool(f))
                    for nn, gg, r, co, tt, th, f in zip(
                        n.tolist(),
                        g.tolist(),
                        rate.tolist(),
                        cost.tolist(),
                        t.tolist(),
                        thr.tolist(),
                        ok.tolist(),
                        strict=True,
                    )
                )
        # 2) mixed columns
        stats = {"subsets": 0, "pruned": 0, "bounded": 0, "evaluated": 0, "violations": 0}
        if req.max_types > 1:
            homo_best = dict(best_by_key)
            mixed, mpoints = self._mixed(spec, top, stats, bound_pruning=spec.bound_pruning)
            total_violations = stats["violations"]
            while stats["violations"] and spec.bound_pruning and self.bound_level >= 1:
                # the oracle broke a bound assumption: fall back to a weaker bound (2: replacement +
                # separability, 1: separability only, 0: none) and redo the mixed search
                self.bound_level -= 1
                top = _TopK(1)
                for col in homo_best.values():
                    top.offer((), col.value)
                stats = {"subsets": 0, "pruned": 0, "bounded": 0, "evaluated": 0, "violations": 0}
                mixed, mpoints = self._mixed(spec, top, stats, bound_pruning=self.bound_level >= 1)
                total_violations += stats["violations"]
            stats["violations"] = total_violations
            best_by_key = homo_best
            for col in mixed:
                keep(col)
            if want_points:
                points.extend(mpoints)
        return _Outcome(
            list(best_by_key.values()),
            top.threshold,
            homogeneous,
            stats["subsets"],
            stats["pruned"],
            stats["bounded"],
            stats["evaluated"],
            stats["violations"],
            points,
        )

    def _homo_col(self, c: Candidate, arr: Mapping[str, np.ndarray], i: int) -> _Col:
        nn = int(arr["n"][i])
        return _Col(
            c.region,
            ((c, nn),),
            float(arr["thr"][i]),
            int(self.curve_g[c.instance_type][nn]),
            float(arr["rate"][i]),
            float(arr["haz"][i]),
            float(arr["base"][i]),
            float(arr["t"][i]),
            float(arr["cost"][i]),
            float(arr["good"][i]),
            nn,
            float(arr["val"][i]),
            bool(arr["ok"][i]),
        )

    def _subset_survivors(
        self,
        spec: _Spec,
        top: _TopK,
        usable: Sequence[Candidate],
        k: int,
        maxc: Mapping[Candidate, int],
        lam: Mapping[Candidate, float],
        bound_pruning: bool,
    ) -> tuple[list[tuple[int, ...]], int]:
        """Index tuples of the k-subsets of ``usable`` that survive the subset-level bounds
        (vectorised over all subsets), and how many were pruned."""
        req = self.request
        K = len(usable)
        combos = np.array(list(itertools.combinations(range(K), k)), dtype=int).reshape(-1, k)
        if not bound_pruning or len(combos) == 0:
            return [tuple(x) for x in combos.tolist()], 0
        N = self.N
        price = np.array([c.price_per_hour for c in usable])
        lam_a = np.array([lam[c] for c in usable])
        ub1, rho1 = np.zeros(K), np.zeros(K)
        pm1 = np.zeros((K, N + 1))  # prefix max of term over 1..m
        m1 = np.zeros(K, dtype=int)
        for i, c in enumerate(usable):
            m = min(maxc[c], N - (k - 1))
            term = self.term[c.instance_type][1 : m + 1]
            ub1[i] = term.max()
            rho1[i] = float(np.min(c.price_per_hour * np.arange(1, m + 1) / term))
            pm1[i, 1 : m + 1] = np.maximum.accumulate(term)
            pm1[i, m + 1 :] = pm1[i, m]
            m1[i] = m
        min_rate = price[combos].sum(axis=1)
        cap = spec.cap * (1 + _REL) if spec.cap is not None else None
        sep_terms = np.zeros((len(combos), k))  # separability term of each member (cap-aware)
        for col in range(k):
            me = combos[:, col]
            if cap is not None:
                # with a $/h cap a member can afford at most (cap - the others' one node) / price nodes
                afford = np.floor((cap - (min_rate - price[me])) / price[me] + 1e-9)
                afford = np.clip(np.minimum(afford, m1[me]), 0, N).astype(int)
                sep_terms[:, col] = pm1[me, afford]
            else:
                sep_terms[:, col] = ub1[me]
        ub = sep_terms.sum(axis=1)
        rho = rho1[combos].min(axis=1)
        if self.bound_level >= 2:
            # replacement bound: members whose hardware another member dominates are merged into it
            ti = np.array([self.tidx[c.instance_type] for c in usable])
            pmax = np.array([self.pmax[c.instance_type] for c in usable])
            rmin = np.array([self.rmin[c.instance_type] for c in usable])
            merges: list[tuple[int, tuple[int, ...]]] = [
                (x, (y,)) for x in range(k) for y in range(k) if x != y
            ]
            if k == 3:
                merges += [(x, tuple(y for y in range(k) if y != x)) for x in range(k)]
            for x, ys in merges:
                X = combos[:, x]
                d = np.ones(len(combos), dtype=bool)
                for y in ys:
                    d &= self.dom[ti[X], ti[combos[:, y]]]
                if not d.any():
                    continue
                merged = (x, *ys)
                others = [z for z in range(k) if z not in merged]
                smax = np.minimum(N - len(others), sum(m1[combos[:, z]] for z in merged))
                pmin = np.min(price[combos[:, list(merged)]], axis=1)
                if cap is not None:
                    other_price = price[combos[:, others]].sum(axis=1) if others else 0.0
                    smax = np.minimum(smax, np.floor((cap - other_price) / pmin + 1e-9))
                smax = np.clip(smax, 0, N).astype(int)
                bound = pmax[X, smax] + (sep_terms[:, others].sum(axis=1) if others else 0.0)
                r = pmin * rmin[X, smax]
                if others:
                    r = np.minimum(r, rho1[combos[:, others]].min(axis=1))
                ub = np.where(d, np.minimum(ub, bound), ub)
                rho = np.where(d, np.maximum(rho, r), rho)
        haz = lam_a[combos].sum(axis=1)
        _, t_lb, _, good_ub = _metrics(ub, min_rate, haz, req)
        cost_lb = rho * req.total_samples / 3600.0 + min_rate * req.startup_overhead_h
        keep = np.isfinite(t_lb)
        if spec.cap is not None:
            keep &= min_rate <= spec.cap * (1 + _REL)
        if spec.deadline is not None:
            keep &= t_lb <= spec.deadline * (1 + _REL)
        if spec.budget is not None:
            keep &= cost_lb <= spec.budget * (1 + _REL)
        theta = top.threshold
        if math.isfinite(theta):
            lim = _lim(theta, spec.tie_tol)
            lb = {"cost": cost_lb, "time": t_lb, "throughput": -good_ub}.get(spec.objective, min_rate)
            keep &= lb < lim
        return [tuple(x) for x in combos[keep].tolist()], int((~keep).sum())

    def _mixed(
        self, spec: _Spec, top: _TopK, stats: dict[str, int], *, bound_pruning: bool
    ) -> tuple[list[_Col], list[Point]]:
        req = self.request
        N = self.N
        queue: list[tuple[float, int, str, tuple[Candidate, ...], tuple[int, ...]]] = []
        seq = 0
        for region in sorted(self.by_region):
            group = self.by_region[region]
            maxc = {c: _max_count(c, spec.quotas, N) for c in group}
            usable = [c for c in group if maxc[c] >= 1]
            lam = {c: _hazard_of(((c, 1),)) for c in usable}
            for k in range(2, min(req.max_types, len(usable), N) + 1):
                survivors, pruned = self._subset_survivors(spec, top, usable, k, maxc, lam, bound_pruning)
                stats["subsets"] += len(survivors) + pruned
                stats["pruned"] += pruned
                for idx in survivors:
                    subset = tuple(usable[i] for i in idx)
                    ms = [min(maxc[c], N - (k - 1)) for c in subset]
                    if spec.cap is not None and bound_pruning:
                        total_p = sum(c.price_per_hour for c in subset)
                        ms = [
                            min(
                                m,
                                int(
                                    math.floor(
                                        (spec.cap * (1 + _REL) - (total_p - c.price_per_hour))
                                        / c.price_per_hour
                                        + 1e-9
                                    )
                                ),
                            )
                            for m, c in zip(ms, subset, strict=True)
                        ]
                        if min(ms) < 1:
                            stats["pruned"] += 1
                            continue
                    grids = np.meshgrid(*[np.arange(1, m + 1) for m in ms], indexing="ij")
                    ns = [g.ravel() for g in grids]
                    mask = sum(ns) <= N
                    # joint quotas for members sharing a (market, class)
                    shared: dict[tuple[str, str], list[int]] = defaultdict(list)
                    for i, c in enumerate(subset):
                        shared[_qkey(c)].append(i)
                    for qk, members in shared.items():
                        if len(members) > 1 and qk in spec.quotas:
                            used = sum(ns[i] * subset[i].vcpus for i in members)
                            mask &= used <= spec.quotas[qk] + 1e-9
                    if not mask.any():
                        stats["pruned"] += 1
                        continue
                    ns = [x[mask] for x in ns]
                    stats["bounded"] += len(ns[0])
                    if bound_pruning:
                        ub = self._ub(subset, ns, self.bound_level)
                        rate = sum(subset[i].price_per_hour * ns[i] for i in range(k))
                        haz = sum(lam[subset[i]] * ns[i] for i in range(k))
                        _, t, cost, good = _metrics(ub, rate, haz, req)
                        lb = _value(spec.objective, t, cost, good, rate)
                        ok = self._feasible_mask(spec, t, cost, rate)
                        if math.isfinite(top.threshold):
                            ok &= lb < _lim(top.threshold, spec.tie_tol)
                        sel = np.flatnonzero(ok)
                        lbs = lb[sel].tolist()
                    else:
                        sel = np.arange(len(ns[0]))
                        lbs = [-math.inf] * len(sel)
                    cols_n = [x[sel].tolist() for x in ns]
                    for j, v in enumerate(lbs):
                        seq += 1
                        queue.append((v, seq, region, subset, tuple(cn[j] for cn in cols_n)))
        queue.sort(key=lambda q: (q[0], q[1]))
        self.progress.expect(len(queue) * len(self.grid))
        out: list[_Col] = []
        points: list[Point] = []
        for lb, _, region, subset, counts in queue:
            if bound_pruning and lb >= _lim(top.threshold, spec.tie_tol):
                break
            groups = tuple(zip(subset, counts, strict=True))
            thr, g, _est = self.memo.best(groups, self.grid)
            stats["evaluated"] += 1
            if thr <= 0:
                continue
            ub_v = float(self._ub(subset, counts, self.bound_level))
            if bound_pruning and thr > ub_v * (1 + 1e-9) + 1e-9:
                stats["violations"] += 1
            rate = sum(c.price_per_hour * n for c, n in groups)
            haz = _hazard_of(groups)
            base, t, cost, good = _metrics(thr, rate, haz, req)
            val = float(_value(spec.objective, t, cost, good, rate))
            feasible = bool(self._feasible_mask(spec, np.array([t]), np.array([cost]), np.array([rate]))[0])
            col = _Col(region, groups, thr, g, rate, haz, base, t, cost, good, sum(counts), val, feasible)
            self._finish_col(col, spec)
            points.append(
                Point(region, col.label(), col.nodes, len(groups), g, rate, cost, t, thr, col.feasible)
            )
            if col.feasible:
                top.offer(col.key, val)
                out.append(col)
        return out, points


# ----------------------------------------------------------------------------------- MILP
def _milp_pick(cols: Sequence[_Col], spec: _Spec, max_nodes: int) -> tuple[int | None, str]:
    """Solve the one-hot column-selection MILP of the module docstring with CBC."""
    import warnings

    import pulp

    prob = pulp.LpProblem("srifty_plan", pulp.LpMinimize)
    if hasattr(prob, "add_variable"):  # PuLP >= 3.3 (LpVariable(...) is deprecated there)
        y = [prob.add_variable(f"y{j}", cat=pulp.LpBinary) for j in range(len(cols))]
    else:  # pragma: no cover - older PuLP
        y = [pulp.LpVariable(f"y{j}", cat=pulp.LpBinary) for j in range(len(cols))]
    prob += pulp.LpAffineExpression([(y[j], cols[j].value) for j in range(len(cols))])
    prob += pulp.LpAffineExpression([(v, 1.0) for v in y]) == 1, "one_plan"
    if spec.deadline is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].time) for j in range(len(cols))])
            <= spec.deadline * (1 + _REL),
            "deadline",
        )
    if spec.budget is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].cost) for j in range(len(cols))])
            <= spec.budget * (1 + _REL),
            "budget",
        )
    if spec.cap is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].rate) for j in range(len(cols))])
            <= spec.cap * (1 + _REL),
            "hourly_cap",
        )
    if spec.risk is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].risk or 0.0) for j in range(len(cols))])
            <= spec.risk + 1e-12,
            "risk",
        )
    prob += (
        pulp.LpAffineExpression([(y[j], cols[j].nodes) for j in range(len(cols))]) <= max_nodes,
        "max_nodes",
    )
    usage: dict[tuple[str, str], list[tuple[Any, float]]] = defaultdict(list)
    for j, col in enumerate(cols):
        for qk, v in col.vcpus.items():
            if qk in spec.quotas:
                usage[qk].append((y[j], v))
    for (market, cls), terms in sorted(usage.items()):
        prob += (
            pulp.LpAffineExpression(terms) <= spec.quotas[(market, cls)] + 1e-9,
            f"quota_{market}_{cls}".replace("-", "_"),
        )
    with warnings.catch_warnings():
        # the bundled CBC is deprecated for PuLP 4.0; it is what ships with the wheel today
        warnings.simplefilter("ignore", DeprecationWarning)
        prob.solve(pulp.PULP_CBC_CMD(msg=False))
    status = pulp.LpStatus[prob.status]
    if status != "Optimal":
        return None, status
    pick = max(range(len(cols)), key=lambda j: y[j].value() or 0.0)
    return pick, status


# ----------------------------------------------------------------------------------- plans
def _split_batch(
    groups: Sequence[tuple[Candidate, int]], g: int, weights: Sequence[float]
) -> list[tuple[int, ...]]:
    """Per-node batches summing exactly to ``g``: shares proportional to the per-node ``weights``
    of each group, rounded by largest remainder."""
    total_w = sum(w * n for w, (_, n) in zip(weights, groups, strict=True)) or 1.0
    exact = [g * w / total_w for w in weights]
    nodes = [(i, k) for i, (_, n) in enumerate(groups) for k in range(n)]
    base = {nd: int(math.floor(exact[nd[0]] + 1e-9)) for nd in nodes}
    rem = g - sum(base.values())
    order = sorted(nodes, key=lambda nd: (-(exact[nd[0]] - base[nd]), nd))
    for nd in order[: max(0, rem)]:
        base[nd] += 1
    return [tuple(base[(i, k)] for k in range(n)) for i, (_, n) in enumerate(groups)]


def _batch_weights(
    groups: Sequence[tuple[Candidate, int]],
    est: Estimate,
    est_types: Sequence[str],
    single_node: Callable[[Candidate], float],
) -> list[float]:
    """Per-node batch weights of each group: the oracle's ``per_node_batch`` (whose entries follow
    ``est_types``, the instance types of the config the oracle was called with) when given, else
    each type's single-node throughput."""
    if est.per_node_batch is not None and len(est.per_node_batch) == len(est_types):
        by_type = {t: float(b) for t, b in zip(est_types, est.per_node_batch, strict=True)}
        if all(by_type.get(c.instance_type, 0) > 0 for c, _ in groups):
            return [by_type[c.instance_type] for c, _ in groups]
    return [max(single_node(c), 1e-12) for c, _ in groups]


def _fh(hours: float) -> str:
    """Hours with two decimals below 10 h, one above."""
    return f"{hours:.2f}" if hours < 10 else f"{hours:.1f}"


def _pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b if b else 0.0


def _fp(x: float) -> str:
    """Percentage with sensible precision (``x`` >= 0)."""
    x = abs(x)
    if x < 0.1:
        return "<0.1%" if x > 0 else "0%"
    return f"{x:.1f}%" if x < 10 else f"{x:.0f}%"


def _why(
    rank: int, col: _Col, cols: Sequence[_Col], spec: _Spec, req: PlanRequest, binding: list[str]
) -> str:
    obj = spec.objective
    if obj == "cost":
        what = f"cheapest plan meeting the {req.deadline_hours:g} h deadline"
    elif obj == "time":
        what = f"fastest plan within the ${req.budget_usd:,.0f} budget"
    else:
        what = f"highest throughput within ${req.max_hourly_usd:,.2f}/h"
    parts: list[str] = []
    if rank == 0:
        parts.append(what)
        if len(cols) > 1:
            nxt = cols[1]
            if obj == "cost":
                word = "cheaper" if col.cost <= nxt.cost else "dearer"
                parts.append(f"{_fp(_pct(col.cost, nxt.cost))} {word} than the next option ({nxt.label()})")
            elif obj == "time":
                word = "faster" if col.time <= nxt.time else "slower"
                parts.append(f"{_fp(_pct(col.time, nxt.time))} {word} than the next option ({nxt.label()})")
            else:
                word = "more" if col.good >= nxt.good else "less"
                parts.append(
                    f"{_fp(_pct(col.good, nxt.good))} {word} throughput than the next option ({nxt.label()})"
                )
    else:
        best = cols[0]
        if obj == "cost":
            word = "dearer" if col.cost >= best.cost else "cheaper"
            parts.append(f"#{rank + 1}: {_fp(_pct(col.cost, best.cost))} {word} than #1")
            if col.time < best.time:
                parts.append(f"{best.time - col.time:.1f} h faster")
        elif obj == "time":
            word = "slower" if col.time >= best.time else "faster"
            parts.append(f"#{rank + 1}: {_fp(_pct(col.time, best.time))} {word} than #1")
            if col.cost < best.cost:
                parts.append(f"${best.cost - col.cost:,.0f} cheaper")
        else:
            word = "less" if col.good <= best.good else "more"
            parts.append(f"#{rank + 1}: {_fp(_pct(col.good, best.good))} {word} throughput than #1")
            if col.rate < best.rate:
                parts.append(f"${best.rate - col.rate:,.2f}/h cheaper")
        if not any(c.is_spot for c, _ in col.groups) and any(c.is_spot for c, _ in best.groups):
            parts.append("no spot interruptions")
    if len(col.groups) > 1:
        parts.append(f"mixes {len(col.groups)} node types")
    if binding:
        parts.append("binding: " + ", ".join(binding))
    return "; ".join(parts)


def _binding(col: _Col, spec: _Spec, req: PlanRequest) -> list[str]:
    out: list[str] = []
    for qk, used in col.vcpus.items():
        q = spec.quotas.get(qk)
        if q is None:
            continue
        smallest = min(c.vcpus for c, _ in col.groups if _qkey(c) == qk)
        if used + smallest > q + 1e-9:
            out.append(f"{qk[0]} quota {qk[1]}={q:g} vCPU")
    if col.nodes >= req.max_nodes:
        out.append(f"max_nodes={req.max_nodes}")
    for c, n in col.groups:
        if c.max_count is not None and n >= c.max_count:
            out.append(f"availability of {c.instance_type} ({c.max_count})")
    return out


def _make_plan(
    rank: int, col: _Col, ranked: Sequence[_Col], spec: _Spec, engine: _Engine, why: str | None = None
) -> Plan:
    est = engine.memo.get(engine.memo.hw_key(col.groups), col.g)
    assert est is not None
    if why is None:
        why = _why(rank, col, ranked, spec, engine.request, _binding(col, spec, engine.request))
    est_types = [t for t, _ in engine.memo.hw_key(col.groups)]
    weights = _batch_weights(
        col.groups, est, est_types, lambda c: engine.per_node_best.get(c.instance_type, 1.0)
    )
    return _build_plan(rank, col, est, engine.request, why, weights)


def _build_plan(
    rank: int, col: _Col, est: Estimate, req: PlanRequest, why: str, weights: Sequence[float]
) -> Plan:
    params = req.spot_params
    jitter = _jitter_sd_h(req, est, col.g)
    deadline_left = None if req.deadline_hours is None else req.deadline_hours - req.startup_overhead_h
    comp = spotmodel.completion(col.base, col.hazard, params, deadline_left, jitter)
    batches = _split_batch(col.groups, col.g, weights)
    groups = tuple(
        NodeGroup(
            instance_type=c.instance_type,
            market=c.market,
            zone=c.zone,
            count=n,
            gpus_per_node=c.gpus_per_node,
            gpu_model=c.gpu_model,
            price_per_hour=c.price_per_hour,
            batch_per_node=b,
            interruption_bucket=c.interruption_bucket,
        )
        for (c, n), b in zip(col.groups, batches, strict=True)
    )
    if col.hazard > 0:
        why += f"; spot: {comp.expected_interruptions:.2g} expected interruptions" + (
            f", {100 * comp.miss_probability:.1f}% risk of missing the deadline"
            if comp.miss_probability is not None
            else ""
        )
    return Plan(
        rank=rank + 1,
        region=col.region,
        groups=groups,
        global_batch=col.g,
        nodes=col.nodes,
        gpus=sum(c.gpus_per_node * n for c, n in col.groups),
        hourly_usd=col.rate,
        total_usd=col.cost,
        time_h=col.time,
        time_p90_h=req.startup_overhead_h + comp.p90_h,
        base_time_h=col.base,
        throughput_sps=col.thr,
        effective_throughput_sps=col.good,
        iter_time_s=est.iter_time_s,
        iter_time_p90_s=est.iter_time_p90_s,
        bottleneck=est.bottleneck,
        deadline_miss_risk=comp.miss_probability,
        expected_interruptions=comp.expected_interruptions,
        why=why.lstrip("; "),
    )


def plan_for_config(
    config: Config, request: PlanRequest, perf: PerfOracle, *, global_batch: int | None = None, why: str = ""
) -> Plan | None:
    """A :class:`Plan` for a user-given configuration (what-if analysis, baselines); ``None`` when
    the oracle cannot run it.  Constraints are not enforced: see :func:`evaluate_config` for
    ``feasible`` / ``violated``."""
    m = evaluate_config(config, request, perf, global_batch)
    if m is None:
        return None
    col = _Col(
        m.region,
        m.config,
        m.estimate.throughput_sps,
        m.global_batch,
        m.hourly_usd,
        m.hazard_per_h,
        m.base_time_h,
        m.time_h,
        m.total_usd,
        m.goodput_sps,
        m.nodes,
        m.objective_value(request.objective),
        m.feasible,
    )

    def single(c: Candidate) -> float:
        e = perf(((c, 1),), m.global_batch)
        return e.throughput_sps if e is not None else 1.0

    weights = _batch_weights(m.config, m.estimate, [c.instance_type for c, _ in m.config], single)
    if not why and not m.feasible:
        why = "violates: " + ", ".join(m.violated)
    return _build_plan(0, col, m.estimate, request, why, weights)


def pareto_frontier(points: Sequence[Point]) -> tuple[Point, ...]:
    """Points not beaten on both total cost and time, by increasing cost (ties keep the first)."""
    if not points:
        return ()
    cost = np.fromiter((p.total_usd for p in points), dtype=float, count=len(points))
    hours = np.fromiter((p.time_h for p in points), dtype=float, count=len(points))
    order = np.lexsort((hours, cost))
    order = order[np.isfinite(cost[order]) & np.isfinite(hours[order])]
    t = hours[order]
    prev_min = np.concatenate(([np.inf], np.minimum.accumulate(t)[:-1]))
    return tuple(points[i] for i in order[t < prev_min].tolist())


def _spec_of(req: PlanRequest, **over: Any) -> _Spec:
    base = _Spec(
        objective=req.objective,
        deadline=req.deadline_hours,
        budget=req.budget_usd,
        cap=req.max_hourly_usd,
        risk=req.max_miss_risk,
        quotas=_quota_table(req),
        top_k=int(req.top_k),
        tie_tol=float(req.tie_tolerance),
    )
    return replace(base, **over)


# ----------------------------------------------------------------------------------- public entry
def solve(
    request: PlanRequest,
    candidates: Sequence[Candidate],
    perf: PerfOracle,
    *,
    progress: ProgressCallback | None = None,
) -> PlanResult:
    """Plan a cluster; see the module docstring.  Raises :class:`RequestError` or :class:`Infeasible`.

    ``progress(evaluated, estimated_total)`` is called as oracle evaluations are made (at most
    every 0.1 s, and once at the end); an exception it raises propagates out of ``solve``, which
    is how a caller cancels a solve."""
    t0 = _time.perf_counter()
    request.validate()
    tracker = _Progress(progress)
    engine = _Engine(request, candidates, perf, tracker)
    spec = _spec_of(request)
    out = engine.run(spec)
    ranked_all = sorted(out.cols, key=lambda c: (c.value, c.nodes, c.region, c.label()))
    if not ranked_all:
        raise _explain(engine, spec)
    pick, status = _milp_pick(ranked_all, spec, request.max_nodes)
    if pick is not None and abs(ranked_all[pick].value - ranked_all[0].value) <= 1e-9 * max(
        1.0, abs(ranked_all[0].value)
    ):
        ranked_all.insert(0, ranked_all.pop(pick))
    elif pick is not None:
        status = f"{status} (disagreed with sorted columns; sorted order used)"
    tie_why: str | None = None
    if spec.tie_tol > 0 and len(ranked_all) > 1:
        strict = ranked_all[0]
        lim = strict.value + abs(strict.value) * spec.tie_tol
        secondary: dict[str, Callable[[_Col], tuple[float, float]]] = {
            "cost": lambda c: (c.time, c.cost),
            "time": lambda c: (c.cost, c.time),
            "throughput": lambda c: (c.cost, -c.good),
        }
        choice = min((c for c in ranked_all if c.value <= lim), key=secondary[spec.objective])
        if choice is not strict:
            ranked_all.remove(choice)
            ranked_all.insert(0, choice)
            tol = f"{100 * spec.tie_tol:g}%"
            if spec.objective == "cost":
                tie_why = (
                    f"within {tol} of the cheapest plan meeting the {request.deadline_hours:g} h deadline "
                    f"({strict.label()} in {strict.region}, {_fp(_pct(choice.cost, strict.cost))} dearer) "
                    f"and {_fh(strict.time - choice.time)} h faster"
                )
            elif spec.objective == "time":
                tie_why = (
                    f"within {tol} of the fastest plan within the ${request.budget_usd:,.0f} budget "
                    f"({strict.label()} in {strict.region}, {_fp(_pct(choice.time, strict.time))} slower) "
                    f"and {_fp(_pct(choice.cost, strict.cost))} cheaper"
                )
            else:
                tie_why = (
                    f"within {tol} of the highest throughput within ${request.max_hourly_usd:,.2f}/h "
                    f"({strict.label()} in {strict.region}, {_fp(_pct(choice.good, strict.good))} less) "
                    f"and {_fp(_pct(choice.cost, strict.cost))} cheaper"
                )
    # best column per distinct type set
    seen: set[tuple[tuple[str, str], ...]] = set()
    ranked: list[_Col] = []
    for col in ranked_all:
        if col.key in seen:
            continue
        seen.add(col.key)
        ranked.append(col)
        if len(ranked) >= request.top_k:
            break
    plans = tuple(
        _make_plan(i, col, ranked, spec, engine, tie_why if i == 0 else None) for i, col in enumerate(ranked)
    )
    points = tuple(out.points)
    tracker.finish()
    stats = SolveStats(
        candidates_in=engine.candidates_in,
        candidates_supported=len(engine.supported),
        candidates_kept=len(engine.kept),
        dominated=engine.dominated,
        regions=len(engine.by_region),
        homogeneous_configs=out.homogeneous,
        mixed_subsets=out.subsets,
        mixed_subsets_pruned=out.subsets_pruned,
        mixed_vectors_bounded=out.vectors_bounded,
        mixed_configs_evaluated=out.mixed_evaluated,
        milp_columns=len(ranked_all),
        milp_status=status,
        oracle_calls=engine.memo.calls,
        bound_violations=out.violations,
    )
    return PlanResult(
        request=request,
        plans=plans,
        pareto=pareto_frontier(points),
        points=points,
        stats=stats,
        solve_time_s=_time.perf_counter() - t0,
    )


# ----------------------------------------------------------------------------------- infeasibility
def _best(engine: _Engine, spec: _Spec) -> _Col | None:
    out = engine.run(replace(spec, top_k=1), want_points=False)
    return min(out.cols, key=lambda c: (c.value, c.nodes)) if out.cols else None


def _quota_note(engine: _Engine, col: _Col, quotas: Mapping[tuple[str, str], float]) -> str:
    notes = []
    for c, n in col.groups:
        q = quotas.get(_qkey(c))
        if q is not None and c.vcpus > 0 and n * c.vcpus > q:
            allowed = int(q // c.vcpus)
            notes.append(
                f"quota {c.quota_class}={q:g} vCPU ({c.market}) allows at most {allowed} {c.instance_type}"
            )
    return "; ".join(notes)


def _explain(engine: _Engine, spec: _Spec) -> Infeasible:
    req = engine.request
    if not engine.candidates_in:
        return Infeasible("no candidate instances in the allowed regions/markets", "candidates")
    if not engine.kept:
        return Infeasible(
            "the performance model cannot run this job on any candidate instance "
            "(e.g. the model does not fit in GPU memory at these batch sizes)",
            "candidates",
        )
    if all(_max_count(c, spec.quotas, engine.N) < 1 for c in engine.kept):
        qs = ", ".join(f"{cls}={q:g} vCPU ({m})" for (m, cls), q in sorted(spec.quotas.items()))
        smallest = min(engine.kept, key=lambda c: c.vcpus)
        return Infeasible(
            f"quotas {qs} admit no instance: the smallest candidate, {smallest.instance_type}, "
            f"needs {smallest.vcpus} vCPU",
            "quotas",
        )
    no_q = replace(spec, quotas={})
    if spec.deadline is not None:
        fastest = _best(engine, replace(spec, objective="time", deadline=None, risk=None))
        if fastest is None or fastest.time > spec.deadline * (1 + _REL):
            if fastest is None:
                # nothing meets the other constraints at all: report those instead
                return _explain_without_deadline(engine, spec)
            msg = (
                f"fastest config needs {_fh(fastest.time)} h > deadline {spec.deadline:g} h "
                f"({fastest.label()} in {fastest.region}, max_nodes={req.max_nodes})"
            )
            free = (
                _best(engine, replace(no_q, objective="time", deadline=None, risk=None))
                if spec.quotas
                else None
            )
            if free is not None and free.time <= spec.deadline * (1 + _REL):
                note = _quota_note(engine, free, spec.quotas)
                return Infeasible(
                    f"{msg}; {note} (without quotas {free.label()} would take {_fh(free.time)} h)",
                    "quotas",
                    {"fastest_h": fastest.time, "deadline_h": spec.deadline},
                )
            details = {"fastest_h": fastest.time, "deadline_h": spec.deadline}
            if spec.budget is not None:
                cheapest = _best(engine, replace(spec, objective="cost", budget=None, cap=None, risk=None))
                if cheapest is not None and cheapest.cost > spec.budget * (1 + _REL):
                    return Infeasible(
                        f"{msg}; meeting the deadline costs at least ${cheapest.cost:,.0f} > budget "
                        f"${spec.budget:,.0f} ({cheapest.label()} in {cheapest.region})",
                        "budget_usd",
                        {**details, "cheapest_usd": cheapest.cost},
                    )
            if spec.cap is not None:
                lowest = _best(engine, replace(spec, objective="rate", budget=None, cap=None, risk=None))
                if lowest is not None and lowest.rate > spec.cap * (1 + _REL):
                    return Infeasible(
                        f"{msg}; meeting the deadline needs at least ${lowest.rate:,.2f}/h > cap "
                        f"${spec.cap:,.2f}/h ({lowest.label()} in {lowest.region})",
                        "max_hourly_usd",
                        {**details, "cheapest_per_hour": lowest.rate},
                    )
            return Infeasible(msg, "deadline_hours", details)
    if spec.budget is not None:
        cheapest = _best(engine, replace(spec, objective="cost", budget=None, risk=None))
        if cheapest is None or cheapest.cost > spec.budget * (1 + _REL):
            if cheapest is None:
                return _explain_without_deadline(engine, spec)
            return Infeasible(
                f"budget ${spec.budget:,.0f} < cheapest ${cheapest.cost:,.0f} "
                f"({cheapest.label()} in {cheapest.region}, {_fh(cheapest.time)} h)",
                "budget_usd",
                {"cheapest_usd": cheapest.cost, "budget_usd": spec.budget},
            )
    if spec.cap is not None:
        lowest = _best(engine, replace(spec, objective="rate", cap=None, risk=None))
        if lowest is None or lowest.rate > spec.cap * (1 + _REL):
            if lowest is None:
                return _explain_without_deadline(engine, spec)
            return Infeasible(
                f"max ${spec.cap:,.2f}/h < cheapest feasible ${lowest.rate:,.2f}/h "
                f"({lowest.label()} in {lowest.region})",
                "max_hourly_usd",
                {"cheapest_per_hour": lowest.rate, "max_hourly_usd": spec.cap},
            )
    if spec.risk is not None:
        relaxed = engine.run(replace(spec, risk=None, top_k=10**6), want_points=False).cols
        risks = [(engine._risk_of(c, spec.deadline) or 0.0, c) for c in relaxed]
        if risks:
            r, c = min(risks, key=lambda x: x[0])
            return Infeasible(
                f"lowest deadline-miss risk among plans meeting the other constraints is "
                f"{100 * r:.1f}% > max_miss_risk {100 * spec.risk:.1f}% ({c.label()} in {c.region})",
                "max_miss_risk",
                {"lowest_risk": r},
            )
    return Infeasible(
        "constraints are jointly infeasible (deadline, budget and $/hour cap cannot all be met)",
        "deadline_hours",
    )


def _explain_without_deadline(engine: _Engine, spec: _Spec) -> Infeasible:
    """Nothing satisfies the non-deadline constraints: name the budget / cap / quota that binds."""
    base = replace(spec, deadline=None, risk=None)
    if spec.cap is not None:
        lowest = _best(engine, replace(base, objective="rate", cap=None, budget=None))
        if lowest is not None and lowest.rate > spec.cap * (1 + _REL):
            return Infeasible(
                f"max ${spec.cap:,.2f}/h < cheapest node ${lowest.rate:,.2f}/h ({lowest.label()} in "
                f"{lowest.region})",
                "max_hourly_usd",
                {"cheapest_per_hour": lowest.rate},
            )
    if spec.budget is not None:
        cheapest = _best(engine, replace(base, objective="cost", budget=None))
        if cheapest is not None and cheapest.cost > spec.budget * (1 + _REL):
            return Infeasible(
                f"budget ${spec.budget:,.0f} < cheapest ${cheapest.cost:,.0f} ({cheapest.label()} in "
                f"{cheapest.region}, {_fh(cheapest.time)} h)",
                "budget_usd",
                {"cheapest_usd": cheapest.cost},
            )
    return Infeasible("no configuration satisfies the quotas and node limits", "quotas")

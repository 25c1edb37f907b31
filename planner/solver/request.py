"""What a plan request is, what a plan is, and what the solver returns: the types at the
boundary of :mod:`planner.solver`, with the request's validation.

The defaults of a request (nodes, types, batch range, spot fault tolerance, top k) come from
:data:`planner.defaults.PLAN_DEFAULTS`, the one source shared by the web form, the API
serializer, ``manage.py plan`` and the service.

Units: times in hours, money in USD, throughput in samples/s.  A *candidate*
(:class:`planner.offers.Candidate`) is an instance type in one region and market; a
*configuration* ``x = ((c_1, n_1), ..., (c_k, n_k))`` is ``n_i >= 1`` nodes of each of ``k``
distinct candidates of one region.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from planner import spot as spotmodel
from planner.defaults import PLAN_DEFAULTS
from planner.offers import SPOT, Candidate, quota_class
from planner.validated import ModelError

OBJECTIVES = ("cost", "time", "throughput")
Z90 = 1.2815515655446004
REL = 1e-9  # relative slack on constraint and bound comparisons
#: Memory one solve may hold for its search state (counted, see :mod:`planner.solver.search`).
DEFAULT_MAX_MEMORY_MB = 1000.0

Config = tuple[tuple[Candidate, int], ...]

#: ``progress(evaluated, estimated_total)``: called as the solve goes (at most every
#: :data:`PROGRESS_INTERVAL_S`, and once at the end); an exception it raises propagates out of
#: :func:`planner.solver.solve`, which is how a caller cancels a solve.
ProgressCallback = Callable[[int, int], None]
PROGRESS_INTERVAL_S = 0.1


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
    #: the validated model error of the prediction's source (:mod:`planner.validated`; None: no
    #: validated quantiles, the band is the simulator's spread alone). The iteration times above
    #: are the simulator's: the model error is systematic, so it never enters the jitter.
    model_error: ModelError | None = None


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
      family or type name is normalised with :func:`planner.offers.quota_class`); a missing
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
    # p10/p50/p90 with the model error (planner.validated); time_p90_h and iter_time_p90_s above
    # include it too. model_error_source: whose validated quantiles, None when none were.
    time_p10_h: float | None = None
    time_p50_h: float | None = None
    cost_p10_usd: float | None = None
    cost_p50_usd: float | None = None
    cost_p90_usd: float | None = None
    iter_time_p10_s: float | None = None
    iter_time_p50_s: float | None = None
    model_error_source: str | None = None

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
    curve_points_evaluated: int = 0  # (instance type, count) points the oracle was asked about
    configs_evaluated: int = 0  # curve points + mixes evaluated (what progress counts)
    points_seen: int = 0  # evaluated (offer, count) points before the chart's thinning
    search_memory_mb: float = 0.0  # peak counted search state (see MemoryBudget)
    full_curves: bool = False  # every curve point evaluated up front (small problems)


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


# The search's column and spec types live in planner.solver.evaluate, which imports this module;
# the protocols take them as type parameters so that this module never imports them back.
SpecT = TypeVar("SpecT", contravariant=True)
ColT = TypeVar("ColT")
ColT_co = TypeVar("ColT_co", covariant=True)


class Outcome(Protocol[ColT_co]):
    """What one run of the search returns, as far as its callers read it."""

    @property
    def cols(self) -> Sequence[ColT_co]:
        """The best feasible column of every type set that was evaluated."""
        ...


class Engine(Protocol[SpecT, ColT]):
    """A search engine prepared for one request (:class:`planner.solver.search.Engine`), as
    :mod:`planner.solver.explain` uses it: it re-runs the search with constraints relaxed and
    asks for the deadline-miss risk of a column. Used as ``Engine[Spec, Col]``."""

    @property
    def request(self) -> PlanRequest: ...

    @property
    def N(self) -> int:
        """``max_nodes``: the most nodes a configuration may have."""
        ...

    @property
    def candidates_in(self) -> int:
        """Offers the catalog gave for the request, before any pruning."""
        ...

    @property
    def kept(self) -> Sequence[Candidate]:
        """The offers left after the supported and dominance filters."""
        ...

    def run(self, spec: SpecT, *, want_points: bool = True) -> Outcome[ColT]:
        """The search under ``spec``: the best column of every type set evaluated."""
        ...

    def risk_of(self, col: ColT, deadline: float | None) -> float | None:
        """``P(T > deadline)`` of ``col``, model error included; None without a deadline."""
        ...


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


def quota_table(request: PlanRequest) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for market, q in (("on-demand", request.quotas_on_demand), (SPOT, request.quotas_spot)):
        for k, v in (q or {}).items():
            if v is None:
                continue
            key = (market, quota_class(str(k)))
            out[key] = min(float(v), out.get(key, math.inf))
    return out


def qkey(c: Candidate) -> tuple[str, str]:
    return (c.market, c.quota_class)


def max_count(c: Candidate, quotas: Mapping[tuple[str, str], float], max_nodes: int) -> int:
    m = max_nodes if c.max_count is None else min(max_nodes, int(c.max_count))
    q = quotas.get(qkey(c))
    if q is not None and c.vcpus > 0:
        m = min(m, int(math.floor(q / c.vcpus + 1e-9)))
    return max(0, m)

"""Order and dominance: ranking the evaluated columns, the Pareto frontier of the evaluated
points, and the plans built from the ranked columns.

Ranking: the candidates are one column for each set of (instance type, market) groups, over all
regions, zones and counts: the first by priority (rule 1) of its evaluated columns that no other
of them dominates (:func:`best_of_key`; rule 2), so of equally fast offers the cheapest stands for
the set, not the first in catalog order.  Exact for single-type sets (the search proves that no
unevaluated count can enter the top ``k`` or come within 0.5 % of a set's best; it evaluates a
type's offers in every region and market together, so the other market of a ranked single-type
cluster is always there to compare); for a mixed set, among its count vectors whose bound could
beat the optimum (the ones the search had to evaluate), plus the other-market twin of each mix
that may be shown (the search stops at the incumbent, so the slightly slower, cheaper spot twin of
an on-demand optimum would otherwise be missing) -- a mixed alternative may still have an
unevaluated, slightly better count vector.

1. **Priority** is the objective value, then fewer nodes, then region and label (stable and total).
   With ``tie_tolerance > 0`` the column within that relative distance of the optimum that is best
   on the secondary objective (time for ``"cost"``, cost for ``"time"`` and ``"throughput"``)
   moves to the front.
2. **Dominance** (:func:`dominates`): column ``a`` dominates ``b`` when ``a`` is at least as fast
   within :data:`DOMINANCE_TOL` (0.5 %) and strictly cheaper in total, or exactly as cheap (or
   cheaper) and strictly faster.  The tolerance is on time only: with it on both axes two plans
   could each dominate the other.  As stated the relation never cycles (``a`` dominating ``b``
   means ``(cost, time)`` of ``a`` is lexicographically smaller), so an order without a plan above
   one that dominates it always exists.
3. **The order** is the first such order by priority: each next plan is the highest-priority
   remaining column that no remaining column dominates (the lexicographically smallest
   topological order of the dominance relation).  So plan #1 is the optimum unless a plan within
   0.5 % of its time is cheaper (it then says so in its *why*); for ``"cost"`` the optimum is only
   displaced by an equally cheap, faster plan.  The same cluster on spot and on demand is ranked
   by this rule like any two plans: the spot one first whenever it is within 0.5 % as fast and
   cheaper, and the second one's *why* names the first ("same cluster as #1 on spot").
4. **Twins are adjacent** when dominance allows it.  Twins are the same cluster (instance types
   and counts, :func:`~planner.solver.explain.cluster`; the region may differ, since each
   (type, market) set keeps its best offer over all regions) where one uses spot and the other
   does not.  Rule 3 picks which ``top_k`` plans are shown (a twin outside them is not pulled
   in: it would push out a plan better on the objective); among those, right after a plan is
   placed, its twin (the first by priority when there are several) is placed next if no
   remaining plan dominates it; otherwise dominance wins and the twin waits for its turn like
   any plan.  Equivalently, the shown plans are in the first valid order (no plan above one that
   dominates it) by the key (not a twin of the plan just above, priority) at each position.  So
   a twin only ever jumps above plans that do not dominate it, and two shown twins end up apart
   only when a plan between them dominates the lower one.

Points: every evaluated configuration is a point on the cost/time chart.  The search keeps
them in compact arrays; :class:`PointStore` thins them when they grow past its cap (always
keeping the (cost, time) Pareto frontier, then one point per cell of a log-cost x log-time
grid), so a 512-node request returns a chart of a few thousand points, not millions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from planner import spot as spotmodel
from planner.offers import Candidate
from planner.solver.evaluate import Col, Memo, Spec, evaluate_config, jitter_sd_h, risk_of
from planner.solver.explain import binding, cluster, dominance_text, fh, fp, pct, usd, why_text
from planner.solver.request import Config, Estimate, NodeGroup, PerfOracle, Plan, PlanRequest, Point
from planner.validated import iteration_band, job_quantile


def pareto_frontier(points: Sequence[Point]) -> tuple[Point, ...]:
    """Points not beaten on both total cost and time, by increasing cost (ties keep the first)."""
    if not points:
        return ()
    cost = np.fromiter((p.total_usd for p in points), dtype=float, count=len(points))
    hours = np.fromiter((p.time_h for p in points), dtype=float, count=len(points))
    return tuple(points[i] for i in _frontier(cost, hours).tolist())


def _frontier(cost: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """Indices of the (cost, time) Pareto frontier, by increasing cost (ties keep the first)."""
    order = np.lexsort((hours, cost))
    order = order[np.isfinite(cost[order]) & np.isfinite(hours[order])]
    t = hours[order]
    prev_min = np.concatenate(([np.inf], np.minimum.accumulate(t)[:-1]))
    return np.asarray(order[t < prev_min])


class PointStore:
    """Evaluated points as columns of numpy arrays, thinned past ``cap`` (module docstring).

    A homogeneous point refers to its candidate by index (its label is built only for the points
    that are returned); a mixed point carries its :class:`Point`."""

    FIELDS = ("cand", "n", "g", "rate", "cost", "time", "thr", "feasible")
    BYTES_PER_POINT = 8 * len(FIELDS)

    def __init__(self, cands: Sequence[Candidate], cap: int = 4000, grid_cells: int = 48) -> None:
        self.cands = cands
        self.cap = int(cap)
        self.cells = int(grid_cells)
        self.parts: dict[str, list[np.ndarray]] = {f: [] for f in self.FIELDS}
        self.mixed: list[Point] = []
        self.size = 0
        self.seen = 0

    def add_homogeneous(
        self,
        cand_idx: np.ndarray,
        n: np.ndarray,
        g: np.ndarray,
        rate: np.ndarray,
        cost: np.ndarray,
        time_h: np.ndarray,
        thr: np.ndarray,
        feasible: np.ndarray,
    ) -> None:
        if not len(n):
            return
        for f, a in zip(self.FIELDS, (cand_idx, n, g, rate, cost, time_h, thr, feasible), strict=True):
            self.parts[f].append(np.asarray(a, dtype=float))
        self.size += len(n)
        self.seen += len(n)
        if self.size > 2 * self.cap:
            self._thin()

    def add_mixed(self, p: Point) -> None:
        self.mixed.append(p)
        self.seen += 1
        if len(self.mixed) > 2 * self.cap:
            self._thin_mixed()

    def _columns(self) -> dict[str, np.ndarray]:
        cols = {f: (np.concatenate(v) if v else np.zeros(0)) for f, v in self.parts.items()}
        self.parts = {f: [a] for f, a in cols.items()}
        return cols

    def _keep(self, cost: np.ndarray, hours: np.ndarray, cap: int) -> np.ndarray:
        """Frontier + one point per log-grid cell, at most ~``cap`` (indices, ascending)."""
        front = _frontier(cost, hours)
        ok = np.isfinite(cost) & np.isfinite(hours) & (cost > 0) & (hours > 0)
        lc = np.log(np.where(ok, cost, 1.0))
        lt = np.log(np.where(ok, hours, 1.0))
        cells = max(2, int(math.sqrt(cap)))
        if ok.any():
            ci = np.floor((lc - lc[ok].min()) / max(np.ptp(lc[ok]), 1e-12) * (cells - 1)).astype(np.int64)
            ti = np.floor((lt - lt[ok].min()) / max(np.ptp(lt[ok]), 1e-12) * (cells - 1)).astype(np.int64)
            cell = np.where(ok, ci * cells + ti, -1)
            _, first = np.unique(cell, return_index=True)
            sample = first[cell[first] >= 0]
        else:
            sample = np.zeros(0, dtype=np.int64)
        return np.union1d(front, sample)

    def _thin(self) -> None:
        cols = self._columns()
        keep = self._keep(cols["cost"], cols["time"], self.cap)
        self.parts = {f: [a[keep]] for f, a in cols.items()}
        self.size = len(keep)

    def _thin_mixed(self) -> None:
        cost = np.array([p.total_usd for p in self.mixed])
        hours = np.array([p.time_h for p in self.mixed])
        keep = self._keep(cost, hours, self.cap)
        self.mixed = [self.mixed[i] for i in keep.tolist()]

    def nbytes(self) -> int:
        return self.size * self.BYTES_PER_POINT + len(self.mixed) * 200

    def points(self) -> list[Point]:
        """The kept points (homogeneous first, in evaluation order, then mixes)."""
        if self.size > self.cap:
            self._thin()
        if len(self.mixed) > self.cap:
            self._thin_mixed()
        cols = self._columns()
        out: list[Point] = []
        for i, n, g, r, co, t, th, f in zip(
            cols["cand"].astype(int).tolist(),
            cols["n"].astype(int).tolist(),
            cols["g"].astype(int).tolist(),
            cols["rate"].tolist(),
            cols["cost"].tolist(),
            cols["time"].tolist(),
            cols["thr"].tolist(),
            cols["feasible"].astype(bool).tolist(),
            strict=True,
        ):
            c = self.cands[i]
            label = f"{n}x {c.instance_type}" + (" (spot)" if c.is_spot else "")
            out.append(Point(c.region, label, n, 1, g, r, co, t, th, f))
        out.extend(self.mixed)
        return out


#: Two plans within this relative time of each other are "as fast": the cheaper ranks first.
DOMINANCE_TOL = 0.005


def dominates(a: Col, b: Col, tol: float = DOMINANCE_TOL) -> bool:
    """``a`` is at least as fast as ``b`` (within ``tol``) and cheaper, or as cheap and faster."""
    return (a.time <= b.time * (1 + tol) and a.cost < b.cost) or (a.cost <= b.cost and a.time < b.time)


def dominated_mask(time_h: np.ndarray, cost: np.ndarray, tol: float = DOMINANCE_TOL) -> np.ndarray:
    """For each column, whether another one dominates it (:func:`dominates`), in O(n log n).

    "As fast and cheaper": the cheapest column with ``time <= t (1 + tol)`` costs less.
    "As cheap and faster": the fastest column with ``cost <= c`` takes less time."""
    by_t = np.argsort(time_h, kind="stable")
    t_sorted = time_h[by_t]
    cheapest_upto = np.minimum.accumulate(cost[by_t])
    k = np.searchsorted(t_sorted, time_h * (1 + tol), side="right")
    first = np.where(k > 0, cheapest_upto[np.maximum(k - 1, 0)], np.inf) < cost
    by_c = np.argsort(cost, kind="stable")
    c_sorted = cost[by_c]
    fastest_upto = np.minimum.accumulate(time_h[by_c])
    k = np.searchsorted(c_sorted, cost, side="right")
    second = np.where(k > 0, fastest_upto[np.maximum(k - 1, 0)], np.inf) < time_h
    return np.asarray(first | second, dtype=bool)


def priority(col: Col) -> tuple[float, int, str, str]:
    """Rule 1 without the tie tolerance: the objective value, then fewer nodes, region, label."""
    return (col.value, col.nodes, col.region, col.label())


def best_of_key(cols: Sequence[Col]) -> Col:
    """The column that stands for a type set (its offers in every region and zone, its count
    vectors): the first by priority among those no other one of them dominates.  So of two
    equally fast offers the cheaper is kept, and an offer at most 0.5 % slower but cheaper is
    kept over the fastest one, as the ranking would order them."""
    if len(cols) == 1:
        return cols[0]
    t = np.fromiter((c.time for c in cols), dtype=float, count=len(cols))
    cost = np.fromiter((c.cost for c in cols), dtype=float, count=len(cols))
    free = np.flatnonzero(~dominated_mask(t, cost)).tolist()
    return min((cols[i] for i in free), key=priority)


def are_twins(a: Col, b: Col) -> bool:
    """The same cluster (types and counts), one of them on spot and the other not (rule 4)."""
    return cluster(a) == cluster(b) and uses_spot(a) != uses_spot(b)


def uses_spot(col: Col) -> bool:
    return any(c.is_spot for c, _ in col.groups)


def dominance_order(cols: Sequence[Col], want: int) -> list[Col]:
    """``cols`` (in priority order) reordered so that no column precedes one that dominates it:
    each next column is the first remaining one no remaining column dominates (rule 3).  Only the
    first ``want`` distinct type sets are placed so, then reordered among themselves to put twins
    together (rule 4); the rest follow in priority order."""
    placed = _valid_order(list(cols), want, twins=False)
    head = _valid_order(list(placed), len(placed), twins=True)
    return head + [c for c in cols if not any(c is p for p in placed)]


def _valid_order(remaining: list[Col], want: int, *, twins: bool) -> list[Col]:
    """The first ``want`` distinct type sets of ``remaining`` (in priority order) in the order of
    rule 3, or with ``twins`` of rule 4: a free twin of the column just placed comes next."""
    out: list[Col] = []
    keys: set[tuple[tuple[str, str], ...]] = set()
    while remaining and len(keys) < want:
        t = np.fromiter((c.time for c in remaining), dtype=float, count=len(remaining))
        cost = np.fromiter((c.cost for c in remaining), dtype=float, count=len(remaining))
        free = np.flatnonzero(~dominated_mask(t, cost)).tolist()
        twin = [i for i in free if twins and out and are_twins(out[-1], remaining[i])]
        pick = twin[0] if twin else free[0] if free else 0  # never empty: the relation has no cycle
        col = remaining.pop(pick)
        out.append(col)
        keys.add(col.key)
    return out


def rank_columns(
    cols: Sequence[Col], spec: Spec, request: PlanRequest
) -> tuple[list[Col], list[Col], str | None]:
    """``(ranked, all columns in order, why of plan #1 when it is not the plain optimum)``: the
    best column of each distinct type set, first ``top_k``, in the order of the module docstring."""
    ranked_all = sorted(cols, key=priority)
    tie_why: str | None = None
    optimum = ranked_all[0] if ranked_all else None
    if spec.tie_tol > 0 and len(ranked_all) > 1:
        strict = ranked_all[0]
        limit = strict.value + abs(strict.value) * spec.tie_tol
        secondary: dict[str, Callable[[Col], tuple[float, float]]] = {
            "cost": lambda c: (c.time, c.cost),
            "time": lambda c: (c.cost, c.time),
            "throughput": lambda c: (c.cost, -c.good),
        }
        choice = min((c for c in ranked_all if c.value <= limit), key=secondary[spec.objective])
        if choice is not strict:
            ranked_all.remove(choice)
            ranked_all.insert(0, choice)
            tie_why = tie_text(spec, request, strict, choice)
    head = ranked_all[0] if ranked_all else None
    ranked_all = dominance_order(ranked_all, request.top_k)
    if ranked_all and optimum is not None and ranked_all[0] is not head:
        tie_why = dominance_text(spec, request, optimum, ranked_all[0])
    seen: set[tuple[tuple[str, str], ...]] = set()
    ranked: list[Col] = []
    for col in ranked_all:
        if col.key in seen:
            continue
        seen.add(col.key)
        ranked.append(col)
        if len(ranked) >= request.top_k:
            break
    return ranked, ranked_all, tie_why


def tie_text(spec: Spec, request: PlanRequest, strict: Col, choice: Col) -> str:
    tol = f"{100 * spec.tie_tol:g}%"
    if spec.objective == "cost":
        return (
            f"within {tol} of the cheapest plan meeting the {request.deadline_hours:g} h deadline "
            f"({strict.label()} in {strict.region}, {fp(pct(choice.cost, strict.cost))} dearer) "
            f"and {fh(strict.time - choice.time)} h faster"
        )
    elif spec.objective == "time":
        return (
            f"within {tol} of the fastest plan within the {usd(request.budget_usd or 0.0)} budget "
            f"({strict.label()} in {strict.region}, {fp(pct(choice.time, strict.time))} slower) "
            f"and {fp(pct(choice.cost, strict.cost))} cheaper"
        )
    else:
        return (
            f"within {tol} of the highest throughput within ${request.max_hourly_usd:,.2f}/h "
            f"({strict.label()} in {strict.region}, {fp(pct(choice.good, strict.good))} less) "
            f"and {fp(pct(choice.cost, strict.cost))} cheaper"
        )


def split_batch(
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


def batch_weights(
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


def make_plan(
    rank: int,
    col: Col,
    ranked: Sequence[Col],
    spec: Spec,
    request: PlanRequest,
    memo: Memo,
    per_node: Callable[[Candidate], float],
    why: str | None = None,
) -> Plan:
    """Plan ``rank`` (0-based) of the ranked columns; ``per_node(c)`` weighs the batch split when
    the oracle gives no per-node batches."""
    est = memo.get(memo.hw_key(col.groups), col.g)
    assert est is not None
    if why is None:
        why = why_text(rank, col, ranked, spec, request, binding(col, spec, request))
    est_types = [t for t, _ in memo.hw_key(col.groups)]
    weights = batch_weights(col.groups, est, est_types, per_node)
    return build_plan(rank, col, est, request, why, weights)


def build_plan(
    rank: int, col: Col, est: Estimate, req: PlanRequest, why: str, weights: Sequence[float]
) -> Plan:
    params = req.spot_params
    jitter = jitter_sd_h(req, est, col.g)
    deadline_left = None if req.deadline_hours is None else req.deadline_hours - req.startup_overhead_h
    comp = spotmodel.completion(col.base, col.hazard, params, deadline_left, jitter)
    # p10/p50/p90 with the model error of the estimate's source (planner.validated); the miss
    # risk is the same quantile's, so max_miss_risk 0.1 and "p90 <= deadline" agree.
    err = est.model_error
    p10_h, p50_h, p90_h = (
        req.startup_overhead_h + job_quantile(q, col.base, col.hazard, params, jitter, err)
        for q in (0.1, 0.5, 0.9)
    )
    it10, it50, it90 = iteration_band(est.iter_time_s, est.iter_time_p90_s, err)
    miss = risk_of(req, col.base, col.hazard, est, col.g)
    batches = split_batch(col.groups, col.g, weights)
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
            f", {100 * miss:.1f}% risk of missing the deadline" if miss is not None else ""
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
        time_p90_h=p90_h,
        base_time_h=col.base,
        throughput_sps=col.thr,
        effective_throughput_sps=col.good,
        iter_time_s=est.iter_time_s,
        iter_time_p90_s=it90,
        bottleneck=est.bottleneck,
        deadline_miss_risk=miss,
        expected_interruptions=comp.expected_interruptions,
        why=why.lstrip("; "),
        time_p10_h=p10_h,
        time_p50_h=p50_h,
        cost_p10_usd=col.rate * p10_h,
        cost_p50_usd=col.rate * p50_h,
        cost_p90_usd=col.rate * p90_h,
        iter_time_p10_s=it10,
        iter_time_p50_s=it50,
        model_error_source=err.source if err is not None else None,
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
    col = Col(
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

    weights = batch_weights(m.config, m.estimate, [c.instance_type for c, _ in m.config], single)
    if not why and not m.feasible:
        why = "violates: " + ", ".join(m.violated)
    return build_plan(0, col, m.estimate, request, why, weights)

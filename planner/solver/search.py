"""The search: the exact optimum over every configuration of at most ``max_types`` candidates of
one region with at most ``max_nodes`` nodes and a grid global batch.

Problem
-------
Choose ONE region ``r`` and a configuration ``x = ((c_1, n_1), ..., (c_k, n_k))`` of
``k <= max_types`` distinct candidates of region ``r`` (a candidate is an instance type in one
market, so a spot + on-demand blend of one type counts as two groups) with ``n_i >= 1`` nodes
each, ``sum n_i <= max_nodes``, plus a global batch ``G`` (:func:`~planner.solver.request.batch_grid`).
Time, cost, rate and goodput are those of :mod:`planner.solver.evaluate`.

Objectives:  ``"cost"``: min cost s.t. time <= deadline;  ``"time"``: min time s.t. cost <= budget;
``"throughput"``: max goodput s.t. rate <= max_hourly_usd.  Every constraint given in the request
applies whatever the objective (deadline, budget, $/h cap, deadline-miss risk), as do the vCPU
quotas per (market, quota class) -- ``sum over groups in that class/market of n_i * vcpus_i <= Q``
-- and per-candidate availability caps (``Candidate.max_count``).

Method: exact enumeration with proven bounds
--------------------------------------------
1. **Curves and dominance** (:mod:`planner.solver.candidates`): per instance type an upper
   bound on its homogeneous throughput at every count and batch, from the oracle's compute
   bound (no comm-model call); small problems evaluate the curves fully and drop candidates
   another candidate beats on every count, price, quota use, risk, availability and link
   (:func:`planner.offers.find_dominated`).
2. **Single-type columns**: for every offer and count the bound gives a lower bound on the
   objective (and on time and cost for the constraints); (type, count) points are evaluated in
   increasing bound order while the bound can still enter the top ``k`` type sets or tie the
   optimum within ``tie_tolerance``.  Beyond a type's scaling knee the compute bound keeps
   rising in cost (more GPUs at a smaller per-GPU batch) so those counts are never evaluated;
   a $/h cap or budget bounds the count directly.
3. **Mixed columns, best-first branch and bound**: subsets of 2..``max_types`` offers and their
   count vectors are streamed through the separability / replacement bounds (a subset another
   region offers at least as cheap, as safe and as available in every member is skipped first:
   :class:`RegionDominance`); survivors wait in
   a queue of sorted numpy slices and are evaluated in increasing bound order until the bound
   reaches the incumbent.  Every evaluated mix is checked against its bound: a violation (an
   oracle breaking the bound assumptions) drops to the weaker bound (level 3: comm floor +
   replacement + separability, 2: replacement + separability, 1: separability, 0: none) and
   redoes the mixed search, so the optimum stays exact.
4. **Memory**: the state is counted as the search goes (:class:`MemoryBudget`, default
   ``max_memory_mb`` = 1000): curves and bound matrices up front, each subset block and
   count-vector slice before it is built, the queue as it grows (it is drained best-first, which
   only lowers the incumbent, whenever it would pass half the room), the memo of evaluated
   mixes (dropped past a quarter), the chart's points (thinned, :class:`~planner.solver.rank.PointStore`).
   A request whose fixed state cannot fit gets a :class:`RequestError` naming ``max_nodes`` or
   ``max_types`` and the limit before anything large is allocated; :func:`preflight` counts that
   state from the catalog's sizes alone, so the service refuses such a plan when it is
   submitted (the product's limit is ``PLAN_MAX_MEMORY_MB``, default 512).

Why no MILP
-----------
Until this package the search ended in PuLP/CBC: one binary per evaluated column (the best
count vector of each type set), ``sum y = 1`` and the constraints as column sums.  With exactly
one column chosen that model is a ``min()`` over columns that were already evaluated, filtered
and sorted; CBC decided nothing.  The alternative that would let a MILP decide -- integer
counts per type and a per-type batch split under quotas, budget and deadline -- needs the
iteration time as a function of the counts, and that is not linear nor separable: the DDP
iteration is the slowest worker's backward plus exposed all-reduce of the *whole* cluster
(ring latency grows with the total node count, the link is the slowest NIC of the mix), and
the batch split balances per-type step times.  Linearising it per candidate would be a bound,
not the oracle, so every MILP answer would still need the oracle and the same branch and bound
to be exact.  Exact enumeration with the bounds above is exact on the enumerated space and
needs no solver; PuLP is not imported on the plan path.  ``CROSS_CHECK_MILP`` keeps the old
model as a cross-check for the bench.

Measured (2-core VM, product oracle, full bundled catalog, 5 Dec 2026):

* CBC on or off (``CROSS_CHECK_MILP``) on the ``bench/solver.py`` speed problems (64 nodes,
  2 types, batch 256..4096): median solve 0.31 s without, 0.30 s with -- CBC's one-hot model
  costs tens of ms, within the noise -- and it agreed with the sorted columns on every one, and
  on 20/20 small random problems; it never changed an answer.
* Optimality vs :func:`exhaustive_search`: ``bench/solver.py --quick`` 20/20 small and 5/5
  medium seeded problems equal the brute-force optimum.
* The old path (737ef96) vs this one, ``bench/plan_speed.py`` (12 requests, each in a child
  under ``ulimit -v 4000000``, 60 s timeout, 6 Dec 2026, 2 cores shared with other work; the
  new oracle has the input-pipeline floor of e0f3728, so some plans differ from the old path's
  for that reason, not the search's): median 0.79 s new vs 1.20 s old, peak RSS 437 MB (the
  import baseline) on both.  ResNet-50 min cost 24 h on 16 nodes 0.28 -> 0.27 s; 64 nodes x
  2 types x batch 256..4096 1.32 -> 0.28 s; max throughput under $100/h on 128 nodes x 2 types
  29.95 -> 11.3 s (it timed out at > 120 s before the comm floor, A4 of
  :mod:`planner.solver.candidates`: 26,326 configurations and 9,265 oracle calls vs the old
  path's 547,606 and 204,820); 256 on-demand nodes x 3 types: old timeout -> 1.96 s; the
  issue's 512 nodes x 3 types ImageNet request: old MemoryError at 3.2 GB RSS -> 0.73 s (and
  through ``manage.py plan`` / the API + ``db_worker`` under ``ulimit -v 4000000``: solve
  1.8 s, peak RSS 0.9 GB with the model trace, verification and baselines); max $25/h on
  512 nodes x 2 types x batch 256..2048 6.29 -> 0.85 s.
* Region dominance (:class:`RegionDominance`), the exact :meth:`planner.oracle.Oracle.split`
  without per-round overhead, and count vectors built only where ``sum n_i <= N``
  (``bench/plan_speed.py``, dbb6061 vs this, each request's old and new child back to back,
  120 s timeout, 6 Dec 2026, 2 cores shared with 2-3 other processes; every plan the same):
  r50 $500 on 64 nodes x 2 types 43.99 -> 20.59 s (326,359 -> 120,635 configurations evaluated,
  39,449 -> 39,447 oracle calls: a hardware mix is still evaluated in every region not
  dominated, and the oracle is now most of the time); max throughput under $100/h on 128 x 2
  12.21 -> 5.97 s (26,326 -> 14,788 configurations, 9,265 -> 9,255 calls); 256 on-demand
  nodes x 3 types 1.96 -> 0.56 s; BERT $300 on 128 x 3 types timeout -> 114.7 s (2,214
  configurations; 100.3 s once the comm floors are memoised per slowest cluster); the others within the noise (0.25-1.3 s).  Summary line: new median
  0.95 s over 11 finished, old 0.85 s over 10 (the old one's median leaves out BERT $300,
  which timed out); max > 120 s on both (r50 $1,000 on 512 x 3).
* The batch-dilution bound (A5, :mod:`planner.mix_bound`), then the comm floor and A5's
  count-free ceiling at subset level with the least floor over totals found without asking
  every total (:meth:`planner.oracle.Oracle.comm_floor_prefix_min`), see
  :mod:`planner.solver.candidates`.  ``bench/plan_speed.py`` against the old path (737ef96),
  12 requests, each in a child under ``ulimit -v 4000000``, 120 s timeout, 6 Dec 2026, two runs
  back to back on the same 2 cores (their spread: 1-type plans moved by up to 50 % between
  them): new median 0.84 / 0.93 s, max 2.59 / 2.48 s, peak RSS 437 MB (the import baseline);
  old median 1.36 / 1.46 s over the 7 of 12 it finishes (5 out of memory or time).  Per request
  (second run): r50 $500 on 64 x 2 types timeout -> 0.51 s (264 oracle calls; 39,119 before
  A5); max throughput under $100/h on 128 x 2 40.2 -> 1.01 s; 256 on-demand nodes x 3 timeout
  -> 0.83 s; 512 x 3 spot MemoryError -> 0.83 s; r50 $1,000 on 512 x 3 MemoryError -> 2.48 s
  (> 120 s before the subset bounds); BERT $300 on 128 x 3 MemoryError -> 2.12 s (153 s before);
  max $25/h on 512 x 2 x batch 256..2048 7.05 -> 1.01 s; the 1-type plans as before (0.27-1.66 s:
  r50 3 h on 512 nodes asks 4,548 curve points, 0.3 ms each).
* Vectorised evaluation (7 Dec 2026): a type's curve over 64 counts in one pass
  (:meth:`planner.oracle.Oracle.throughput_curve`, all-reduces by
  :meth:`planner.perf.nccl.LearnedComm.estimate_nodes`, phases by
  :meth:`planner.perf.opclass.OpClassModel.phase_ms_many`, each the one-call figures to the
  bit), the subset bounds from the cheapest (the floor-free A5 ceiling leaves a few hundred of
  523,433 subsets before the rest are computed), step envelopes over arrays, the comm floor's
  prefix over runs of totals, each offer's covering columns in a bisected :class:`Front`.
  ``bench/plan_speed.py`` against the old path (737ef96), same setup: new median 0.55 s, max
  1.12 s (r50 $1,000 on 512 x 3), peak RSS 437 MB; old median 1.44 s over the 7 of 12 it
  finishes.  Per request: r50 cost 24 h on 16 nodes 0.34 s; 64 x 2 types x batch to 4,096
  0.58 s; $500 on 64 x 2 0.44 s; $100/h on 128 x 2 0.66 s; 256 on-demand x 3 0.49 s; 512 x 3
  spot 0.53 s; $1,000 on 512 x 3 1.12 s; 3 h on 512 x 1 0.70 s; BERT cost 12 h on 32 x 2
  0.36 s; BERT $300 on 128 x 3 0.77 s; BERT $50/h on 64 x 1 0.49 s; $25/h on 512 x 2 x batch
  256..2,048 0.93 s.  The machine's noise moves single requests by up to 50 % between runs.
* The default batch range 256..4,096 (issue 38 item 1, 7 Dec 2026): a per-GPU minimum caps the
  GPUs of every mix (:meth:`MinBatchPerGpu.max_workers`) and A5 holds per total node count
  (:meth:`planner.solver.candidates.MixBounds.total_cap`, ``total_limits``).  ResNet-50 fastest
  within $1,000 on 512 x 3 types as the service sends it (512..4,096, 32 per GPU), us-east-1:
  > 300 s -> 5.4 s (3 mixes evaluated, 67 oracle calls; the full catalog 11-17 s on the shared
  2 cores).  The same request over the whole range with no minimum (``bench/plan_speed.py``'s,
  which the API refuses by its search size) still runs past 120 s: p5 / p5en / p6-b200 mixes
  on 200-512 nodes lie within A5 of the homogeneous optimum, and A5 (``G`` samples per step
  where the split's giveback leaves far fewer) does not rule out tens of millions of their
  count vectors.

:func:`exhaustive_search` is the brute-force reference used by the tests and the bench.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time as _time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.offers import Candidate, find_dominated
from planner.solver.candidates import COMM_CACHE_BYTES, Curves, MixBounds, combinations, hardware_rows
from planner.solver.evaluate import (
    Col,
    ConfigMetrics,
    Memo,
    Progress,
    Spec,
    evaluate_config,
    hazard_of,
    lim,
    metrics,
    metrics_at,
    risk_of,
    value_of,
)
from planner.solver.explain import explain_infeasible
from planner.solver.rank import (
    DOMINANCE_TOL,
    PointStore,
    best_of_key,
    make_plan,
    pareto_frontier,
    rank_columns,
)
from planner.solver.request import (
    DEFAULT_MAX_MEMORY_MB,
    REL,
    Config,
    Estimate,
    PerfOracle,
    PlanRequest,
    PlanResult,
    Point,
    ProgressCallback,
    RequestError,
    SolveStats,
    batch_grid,
    max_count,
    qkey,
    quota_table,
)

#: Run the one-hot CBC model over the ranked columns after the search and record its status
#: (to time CBC against the plain search; it never changes the answer).
CROSS_CHECK_MILP = False
MB = 1 << 20
#: Rows of one queue chunk refined by the oracle's mix bound (A5) at once: its cost is mostly per
#: call (the per-type envelopes and all-reduce suffixes), so larger blocks are cheaper per row even
#: when some rows would never have been reached (r50 fastest within $1,000 on 512 x 3 types: 512
#: rows -> 161 s, 16,384 -> 97 s; the 64- and 128-node plans 5-35 % faster).
REFINE_ROWS = 16384
#: Count boxes (the product of the members' largest counts) above this many vectors are first cut
#: to the totals that can pay off (:meth:`~planner.solver.candidates.MixBounds.total_limits`): its
#: per-total caps cost an all-reduce table per type set (a few ms per total the first time a
#: cluster is asked), which a box of a few thousand vectors does not repay.
TOTAL_LIMIT_ROWS = 1 << 16


def _mb(nbytes: float) -> str:
    mb = nbytes / MB
    return f"{mb:,.0f}" if mb >= 10 else f"{mb:.2g}"


#: Bytes one kept column holds (a Col with its groups: ~0.6 KB measured with tracemalloc).
COL_BYTES = 640


class MemoryBudget:
    """Bytes of search state one solve may hold, counted as it goes (module docstring)."""

    def __init__(self, limit_mb: float, request: PlanRequest) -> None:
        if not limit_mb > 0:
            raise RequestError("max_memory_mb", f"must be > 0, got {limit_mb}")
        self.limit = float(limit_mb) * MB
        self.request = request
        self.fixed = 0  # curves, bound matrices, point store
        self.peak = 0

    def charge(self, nbytes: float, field_name: str, what: str) -> None:
        """Hold ``nbytes`` more for the rest of the solve, or raise :class:`RequestError`."""
        self.check(nbytes, field_name, what)
        self.fixed += int(nbytes)
        self.peak = max(self.peak, self.fixed)

    def check(self, extra: float, field_name: str, what: str) -> None:
        need = self.fixed + extra
        self.peak = max(self.peak, int(need))
        if need > self.limit:
            value = getattr(self.request, field_name, None)
            raise RequestError(
                field_name,
                f"{what} needs about {_mb(need)} MB of search state, over the "
                f"{_mb(self.limit)} MB limit per plan; lower {field_name} (now {value})"
                + (" or restrict regions/instance types" if field_name == "max_types" else ""),
            )

    def room(self) -> float:
        return self.limit - self.fixed


def curves_bytes(n_types: int, max_nodes: int, batches: int) -> int:
    """The homogeneous curves: bounds and values per type, count and batch (:class:`Curves`)."""
    return n_types * (max_nodes + 1) * (2 * batches + 3) * 8


def bounds_bytes(n_offers: int, max_nodes: int) -> int:
    """The per-offer bound arrays of the homogeneous and mixed search."""
    return n_offers * max_nodes * 17 + n_offers * 200


def preflight(request: PlanRequest, n_types: int, n_offers: int, max_memory_mb: float) -> MemoryBudget:
    """Charge what a solve over ``n_types`` instance types and ``n_offers`` offers holds from its
    start (curves, bound arrays, the comm-floor cache); raises :class:`RequestError` naming
    ``max_nodes`` and the limit when that alone cannot fit, before anything is built.  The
    service calls it when a plan is submitted, so such a request is refused at once."""
    budget = MemoryBudget(max_memory_mb, request)
    N, grid = int(request.max_nodes), batch_grid(request)
    budget.charge(
        curves_bytes(n_types, N, len(grid)),
        "max_nodes",
        f"throughput curves of {n_types} instance types x {N} nodes x {len(grid)} batches",
    )
    budget.charge(bounds_bytes(n_offers, N), "max_nodes", f"bounds of {n_offers} offers x {N} nodes")
    if request.max_types > 1:
        budget.charge(COMM_CACHE_BYTES, "max_nodes", "the comm-floor cache")
    return budget


def _left_below(sorted_lb: np.ndarray, pos: int, stop: float) -> int:
    """How many entries from ``pos`` on lie below ``stop`` (all of them when it is infinite): the
    work left, for the progress bar."""
    if not math.isfinite(stop):
        return len(sorted_lb) - pos
    return int(np.searchsorted(sorted_lb, stop, side="left")) - pos


class TopK:
    """Best objective value per distinct type set; ``threshold`` = k-th best (inf until k keys)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.best: dict[tuple[tuple[str, str], ...], float] = {}
        self.threshold = math.inf
        self.first = math.inf

    def offer(self, key: tuple[tuple[str, str], ...], value: float) -> None:
        old = self.best.get(key)
        if old is None or value < old:
            self.best[key] = value
            self.first = min(self.first, value)
            if len(self.best) >= self.k:
                self.threshold = heapq.nsmallest(self.k, self.best.values())[-1]


@dataclass
class Outcome:
    cols: list[Col]
    homogeneous: int
    subsets: int
    subsets_pruned: int
    vectors_bounded: int
    mixed_evaluated: int
    violations: int
    points: PointStore | None
    curve_points: int = 0


@dataclass
class _Chunk:
    lb: np.ndarray
    counts: np.ndarray
    region: str
    subset: tuple[Candidate, ...]
    pos: int = 0
    #: the throughput bound each row was refined to (A5 included), ``None`` until refined
    ub: np.ndarray | None = None


@dataclass
class MixQueue:
    """Count vectors waiting for evaluation, in increasing bound order across all subsets, held
    as sorted numpy slices (one heap entry per slice, not per vector)."""

    heap: list[tuple[float, int, int]] = field(default_factory=list)
    chunks: dict[int, _Chunk] = field(default_factory=dict)
    seq: int = 0
    entries: int = 0
    nbytes: int = 0

    CHUNK_OVERHEAD = 600

    def push(
        self,
        lb: np.ndarray,
        counts: np.ndarray,
        region: str,
        subset: tuple[Candidate, ...],
        ub: np.ndarray | None = None,
    ) -> None:
        if not len(lb):
            return
        order = np.argsort(lb, kind="stable")
        ch = _Chunk(
            lb[order], counts[order].astype(np.int32), region, subset, ub=None if ub is None else ub[order]
        )
        self.seq += 1
        self.chunks[self.seq] = ch
        heapq.heappush(self.heap, (float(ch.lb[0]), self.seq, self.seq))
        self.entries += len(lb)
        self.nbytes += self._bytes(ch)

    def _bytes(self, ch: _Chunk) -> int:
        return (
            ch.lb.nbytes + ch.counts.nbytes + (ch.ub.nbytes if ch.ub is not None else 0) + self.CHUNK_OVERHEAD
        )

    def peek(self) -> float:
        return self.heap[0][0] if self.heap else math.inf

    def top_refined(self) -> bool:
        """Whether the next row to pop has been refined (:meth:`take`)."""
        return self.chunks[self.heap[0][2]].ub is not None

    def pop(self) -> tuple[float, str, tuple[Candidate, ...], tuple[int, ...], float]:
        """The row of least bound: ``(bound, region, subset, counts, throughput bound)`` (the last
        ``inf`` when the row was not refined)."""
        _, _, cid = heapq.heappop(self.heap)
        ch = self.chunks[cid]
        i = ch.pos
        lb, counts = float(ch.lb[i]), tuple(int(x) for x in ch.counts[i])
        ub = float(ch.ub[i]) if ch.ub is not None else math.inf
        ch.pos += 1
        self.entries -= 1
        if ch.pos < len(ch.lb):
            heapq.heappush(self.heap, (float(ch.lb[ch.pos]), cid, cid))
        else:
            self.nbytes -= self._bytes(ch)
            del self.chunks[cid]
        return lb, ch.region, ch.subset, counts, ub

    def take(self, rows: int) -> tuple[np.ndarray, np.ndarray, str, tuple[Candidate, ...]]:
        """Up to ``rows`` rows of least bound of the chunk at the top, removed from the queue
        (to be refined and pushed back): ``(bounds, counts, region, subset)``."""
        _, _, cid = heapq.heappop(self.heap)
        ch = self.chunks[cid]
        a, b = ch.pos, min(len(ch.lb), ch.pos + rows)
        lb, counts = ch.lb[a:b].copy(), ch.counts[a:b].copy()
        ch.pos = b
        self.entries -= b - a
        if ch.pos < len(ch.lb):
            heapq.heappush(self.heap, (float(ch.lb[ch.pos]), cid, cid))
        else:
            self.nbytes -= self._bytes(ch)
            del self.chunks[cid]
        return lb, counts, ch.region, ch.subset

    def clear(self) -> None:
        self.heap.clear()
        self.chunks.clear()
        self.entries = 0
        self.nbytes = 0


def covers(o: Col, time_h: float, cost: float, value: float, nodes: int) -> bool:
    """``o`` is at least as fast and as cheap as the point (and better on one, or first by value
    and nodes): the point can never be the column ranked for its type set, nor make another one
    dominated that ``o`` does not (:func:`~planner.solver.rank.best_of_key`)."""
    if o.time > time_h or o.cost > cost:
        return False
    return o.time < time_h or o.cost < cost or (o.value, o.nodes) <= (value, nodes)


class Front:
    """One offer's single-type columns none of the others covers (:func:`covers`), in the
    order they were found (ties in :func:`~planner.solver.rank.best_of_key` go to the first).

    No two such columns cover each other, so sorted by time their times are distinct and their
    costs fall strictly: the only one that may cover a point is the last one no slower than it,
    and the ones a new column covers are a run from its time on.  Both are found by bisection,
    not by a scan of every column (a cost-by-deadline curve keeps hundreds of them)."""

    def __init__(self) -> None:
        self.cols: list[Col] = []
        self._times: list[float] = []
        self._by_time: list[Col] = []

    def covered(self, time_h: float, cost: float, value: float, nodes: int) -> bool:
        """``any(covers(o, point) for o in self.cols)``."""
        i = bisect.bisect_right(self._times, time_h) - 1
        return i >= 0 and covers(self._by_time[i], time_h, cost, value, nodes)

    def add(self, col: Col) -> None:
        """Keep ``col`` (covered by none) and drop the columns it covers."""
        i = bisect.bisect_left(self._times, col.time)
        j = i
        while j < len(self._by_time) and self._by_time[j].cost >= col.cost:
            j += 1  # costs fall with time: whatever col covers lies in [i, j)
        gone = [o for o in self._by_time[i:j] if covers(col, o.time, o.cost, o.value, o.nodes)]
        if gone:
            ids = {id(o) for o in gone}
            self.cols = [o for o in self.cols if id(o) not in ids]
            kept = [o for o in self._by_time[i:j] if id(o) not in ids]
            self._by_time[i:j] = kept
            self._times[i:j] = [o.time for o in kept]
        self.cols.append(col)
        k = bisect.bisect_left(self._times, col.time)
        self._times.insert(k, col.time)
        self._by_time.insert(k, col)


class RegionDominance:
    """Which subsets of one region's offers another region offers at least as well.

    The oracle depends on the hardware only (instance types and counts), so a subset whose every
    member has an offer of the same type and market in region ``r'`` that is at most as dear, at
    most as likely to be interrupted and available in at least as many nodes gives, at every
    count vector, a configuration in ``r'`` with the same throughput and batch, a rate and
    hazard at most as high (so time and cost at most as high, goodput at least as high, the same
    quota use) -- strictly better on time and cost when one member is strictly cheaper or safer.
    Such a subset can neither be the optimum nor the column ranked for its type set
    (:func:`~planner.solver.rank.best_of_key` keeps the undominated one); an exact twin (equal
    price, hazard and availability for every member) is left to the region first by name, which
    is what ranking by ``(value, nodes, region)`` would keep.  With a miss-risk cap the hazards
    must be equal (the risk is then equal too), so no monotonicity of the risk is assumed.
    Subsets with two offers of one type and market (two zones) are always kept."""

    def __init__(
        self,
        regions: Sequence[str],
        usable: dict[str, list[Candidate]],
        maxc: dict[str, dict[Candidate, int]],
        lam: dict[str, dict[Candidate, float]],
        *,
        exact_hazard: bool,
    ) -> None:
        self.regions = list(regions)
        by_key: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
        for r in self.regions:
            for c in usable[r]:
                by_key[(c.instance_type, c.market)].append(c)
        self.keyid: dict[str, np.ndarray] = {}
        # rel[r][j, i]: 3 = offer i of r is beaten (strictly) by an offer in the j-th other region,
        # 2 = matched exactly there and that region comes first by name, 1 = matched exactly and
        # it comes after, 0 = neither
        self.rel: dict[str, np.ndarray] = {}
        keys = {key: n for n, key in enumerate(by_key)}
        for r in self.regions:
            others = [o for o in self.regions if o != r]
            oidx = {o: j for j, o in enumerate(others)}
            rel = np.zeros((len(others), len(usable[r])), dtype=np.int8)
            for i, c in enumerate(usable[r]):
                p, h, m = c.price_per_hour, lam[r][c], maxc[r][c]
                for o in by_key[(c.instance_type, c.market)]:
                    if o.region == r:
                        continue
                    po, ho, mo = o.price_per_hour, lam[o.region][o], maxc[o.region][o]
                    if po > p or mo < m or (ho != h if exact_hazard else ho > h):
                        continue
                    code = 3 if (po < p or ho < h) else (2 if o.region < r else 1)
                    j = oidx[o.region]
                    rel[j, i] = max(rel[j, i], code)
            self.rel[r] = rel[rel.any(axis=1)]
            self.keyid[r] = np.array([keys[(c.instance_type, c.market)] for c in usable[r]], dtype=np.int64)

    def dominated(self, region: str, combos: np.ndarray) -> np.ndarray:
        """For each row of ``combos`` (indices into the region's usable offers): dominated?"""
        out = np.zeros(len(combos), dtype=bool)
        rel = self.rel[region]
        if not len(rel) or not len(combos):
            return out
        keys = self.keyid[region][combos]
        k = combos.shape[1]
        distinct = np.ones(len(combos), dtype=bool)
        for a in range(k):
            for b in range(a + 1, k):
                distinct &= keys[:, a] != keys[:, b]
        for row in rel:
            codes = row[combos]
            low = codes.min(axis=1)
            out |= (low >= 2) | ((low >= 1) & (codes == 3).any(axis=1))
        return out & distinct


class Engine:
    """One request's search state: the memoised oracle, the curves and the kept candidates;
    :meth:`run` searches under a :class:`Spec` (the request's, or a relaxed one when explaining
    an infeasibility)."""

    def __init__(
        self,
        request: PlanRequest,
        candidates: Sequence[Candidate],
        perf: PerfOracle,
        progress: Progress | None = None,
        max_memory_mb: float = DEFAULT_MAX_MEMORY_MB,
    ) -> None:
        self.request = request
        self.grid = batch_grid(request)
        self.progress = progress or Progress(None)
        self.memo = Memo(perf)
        self.N = int(request.max_nodes)
        cands = [c for c in candidates if request.regions is None or c.region in request.regions]
        self.candidates_in = len(cands)
        reps: dict[str, Candidate] = {}
        for c in cands:
            reps.setdefault(c.instance_type, c)
        # the up-front state, counted before it is built (as for a plan being submitted)
        self.budget = preflight(request, len(reps), len(cands), max_memory_mb)
        self.curves = Curves(reps, self.N, self.grid, self.memo, perf, self.progress)
        supported = [c for c in cands if self.curves.runnable(c.instance_type)]
        self.supported = supported
        types = sorted({c.instance_type for c in supported})
        if self.curves.full:
            table = {t: self.curves.flat(t) for t in types}
        else:
            # curves are not all known: dominance by the hardware (A3 of planner.solver.candidates)
            rows = hardware_rows([self.curves.reps[t] for t in types])
            table = {t: rows[i].tolist() for i, t in enumerate(types)}
        dropped = find_dominated(supported, table, max_nodes=self.N, mixes=request.max_types > 1)
        self.kept = [c for c in supported if c not in dropped]
        self.dominated = len(dropped)
        self.by_region: dict[str, list[Candidate]] = defaultdict(list)
        for c in self.kept:
            self.by_region[c.region].append(c)
        self.by_type: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(self.kept):
            self.by_type[c.instance_type].append(i)
        # 3: comm floor + replacement + separability (see planner.solver.candidates); lowered on a violation
        self.bound_level = (
            4 if self.curves.mix_bound is not None else 3 if self.curves.comm_floor is not None else 2
        )

    # -- helpers
    def per_node(self, c: Candidate) -> float:
        """Single-type throughput per node (batch-split weights when the oracle gives none)."""
        thr = self.curves.thr.get(c.instance_type)
        if thr is None:
            return 1.0
        n = np.arange(len(thr))
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.where(np.isnan(thr[1:]), 0.0, thr[1:] / n[1:])
        best = float(per.max(initial=0.0))
        return best if best > 0 else 1.0

    def risk_of(self, col: Col, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        est = self.memo.get(self.memo.hw_key(col.groups), col.g)
        assert est is not None
        return risk_of(self.request, col.base, col.hazard, est, col.g, deadline)  # model error included

    def finish_col(self, col: Col, spec: Spec) -> None:
        if col.feasible and spec.risk is not None:
            col.risk = self.risk_of(col, spec.deadline)
            if col.risk is not None and col.risk > spec.risk + 1e-12:
                col.feasible = False

    def _check_memo(self) -> None:
        """The memo of mixes is a cache: dropped (plans re-ask the oracle) past a quarter of the room."""
        if len(self.memo.cache) * 400 > self.budget.room() / 4:
            self.memo.forget_mixes()

    # -- main search
    def run(self, spec: Spec, *, want_points: bool = True) -> Outcome:
        """Best feasible column of every distinct type set that had to be evaluated; the best
        overall is exact (bounds only prune what cannot beat the incumbent)."""
        req = self.request
        top = TopK(spec.top_k)
        points = PointStore(self.kept) if want_points else None
        if points is not None:
            self.budget.charge(4 * points.cap * points.BYTES_PER_POINT, "max_nodes", "the point store")
        cand_best: dict[int, Front] = {}
        homogeneous = self._homogeneous(spec, top, cand_best, points)
        # every evaluated column of each type set (all regions and zones), chosen from at the end:
        # the best by value alone would keep the first of equally fast offers in catalog order
        # (a dear region over a cheap one) or a slightly faster one over a much cheaper one
        by_key: dict[tuple[tuple[str, str], ...], list[Col]] = defaultdict(list)

        def keep(col: Col) -> None:
            by_key[col.key].append(col)

        for i in sorted(cand_best):
            for col in cand_best[i].cols:
                keep(col)
        theta_homo = min((c.value for cs in by_key.values() for c in cs), default=math.inf)
        stats = {"subsets": 0, "pruned": 0, "bounded": 0, "evaluated": 0, "violations": 0, "refined": 0}
        if req.max_types > 1:
            level = self.bound_level if spec.bound_pruning else 0
            mixed = self._mixed(spec, theta_homo, stats, level, points)
            total_violations = stats["violations"]
            while stats["violations"] and spec.bound_pruning and self.bound_level >= 1:
                # the oracle broke a bound assumption: fall back to a weaker bound (2: replacement +
                # separability, 1: separability only, 0: none) and redo the mixed search
                self.bound_level -= 1
                stats = {
                    "subsets": 0,
                    "pruned": 0,
                    "bounded": 0,
                    "evaluated": 0,
                    "violations": 0,
                    "refined": 0,
                }
                mixed = self._mixed(spec, theta_homo, stats, self.bound_level, points)
                total_violations += stats["violations"]
            stats["violations"] = total_violations
            for col in mixed:
                keep(col)
            for col in self._mixed_twins(spec, by_key):
                keep(col)
        return Outcome(
            [best_of_key(cs) for cs in by_key.values()],
            homogeneous,
            stats["subsets"],
            stats["pruned"],
            stats["bounded"],
            stats["evaluated"],
            stats["violations"],
            points,
            self.curves.points_evaluated,
        )

    def _homogeneous(
        self, spec: Spec, top: TopK, cand_best: dict[int, Front], points: PointStore | None
    ) -> int:
        """Single-type columns: each (type, count) point in increasing order of its best bound
        over the offers of that type, evaluated while the bound can still enter the top k (or
        tie the optimum within the tie tolerance).  Returns the points added to ``points``."""
        types = [t for t in self.curves.types if t in self.by_type]
        per_type = {t: self._type_bounds(t, spec) for t in types}
        evaluated = 0
        if points is not None and self.curves.full:
            evaluated += sum(self._points(t, per_type[t], spec, points) for t in types)
        if not types:
            return evaluated
        all_lb, all_t, all_n = self._point_order(types, per_type)
        key_best: dict[tuple[tuple[str, str], ...], float] = {}
        # a count or offer at most 0.5 % slower than a type set's best and cheaper is the one
        # ranked for it (best_of_key): evaluated too.  For "cost" only an equally cheap, faster
        # column could displace the best, and that is an exact tie of the value.
        band = 0.0 if spec.objective == "cost" else DOMINANCE_TOL
        pos_report = 0
        for pos in range(len(all_lb)):
            stop = max(lim(top.threshold, band), lim(top.first, spec.tie_tol))
            if all_lb[pos] >= stop:
                break
            if pos >= pos_report:  # remaining work, for the progress bar
                pos_report = pos + 256
                self.progress.remaining(_left_below(all_lb, pos, stop))
            t, n = types[int(all_t[pos])], int(all_n[pos])
            if self._point_needed(per_type[t], n, stop, band, key_best):
                evaluated += self._point_columns(t, n, per_type[t], spec, top, cand_best, points, key_best)
        self.progress.remaining(0)
        return evaluated

    def _type_bounds(self, t: str, spec: Spec) -> dict[str, np.ndarray]:
        """The offers of type ``t`` (``idx`` into the kept ones), their largest counts ``m``,
        prices, hazards and ``lb[offer, n - 1]``: a lower bound on the objective of ``n`` nodes
        of that offer from the curve's upper bound (``inf`` where the count cannot run, is out
        of the offer's reach or cannot be feasible).  Time and cost fall and goodput rises with
        the throughput (:func:`~planner.solver.evaluate.metrics`), so the bound on the curve
        bounds all three."""
        req, N = self.request, self.N
        n_all = np.arange(1, N + 1)
        idx = np.array(self.by_type[t])
        cs = [self.kept[i] for i in idx.tolist()]
        m = np.array([max_count(c, spec.quotas, N) for c in cs])
        price = np.array([c.price_per_hour for c in cs])
        lam = np.array([hazard_of(((c, 1),)) for c in cs])
        up = self.curves.upper(t)[1:]
        rate = price[:, None] * n_all[None, :]
        haz = lam[:, None] * n_all[None, :]
        ub = np.broadcast_to(up, rate.shape)
        _, t_lb, cost_lb, good_ub = metrics(ub, rate, haz, req)
        lb = np.asarray(value_of(spec.objective, t_lb, cost_lb, good_ub, rate), dtype=float)
        possible = (ub > 0) & (n_all[None, :] <= m[:, None]) & spec.feasible_mask(t_lb, cost_lb, rate)
        return {"idx": idx, "m": m, "price": price, "lam": lam, "lb": np.where(possible, lb, np.inf)}

    @staticmethod
    def _point_order(
        types: Sequence[str], per_type: dict[str, dict[str, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (type, count) point with a finite bound, as ``(bound, type index, count)``
        sorted by the best bound over the type's offers (ties: type, then count): the order the
        points are evaluated in, so the search can stop at the first one that cannot matter."""
        entries_lb: list[np.ndarray] = []
        entries_t: list[np.ndarray] = []
        entries_n: list[np.ndarray] = []
        for ti, t in enumerate(types):
            lbmin = per_type[t]["lb"].min(axis=0)
            finite = np.flatnonzero(np.isfinite(lbmin))
            entries_lb.append(lbmin[finite])
            entries_t.append(np.full(len(finite), ti))
            entries_n.append(finite + 1)
        if not entries_lb:
            empty = np.zeros(0)
            return empty, empty.astype(np.int64), empty.astype(np.int64)
        all_lb = np.concatenate(entries_lb)
        all_t = np.concatenate(entries_t)
        all_n = np.concatenate(entries_n)
        order = np.lexsort((all_n, all_t, all_lb))
        return all_lb[order], all_t[order], all_n[order]

    def _point_needed(
        self,
        d: dict[str, np.ndarray],
        n: int,
        stop: float,
        band: float,
        key_best: dict[tuple[tuple[str, str], ...], float],
    ) -> bool:
        """Whether ``n`` nodes of some offer of the type may still matter: its bound is below
        ``stop`` (the top k / the tie with the optimum) and within ``band`` of the best its own
        type set (type and market) has found, so it could become that set's ranked column."""
        col_lb = d["lb"][:, n - 1]
        for j in np.flatnonzero(col_lb < stop).tolist():
            c = self.kept[int(d["idx"][j])]
            kb = key_best.get(((c.instance_type, c.market),), math.inf)
            if col_lb[j] < lim(kb, band):
                return True
        return False

    def _point_columns(
        self,
        t: str,
        n: int,
        d: dict[str, np.ndarray],
        spec: Spec,
        top: TopK,
        cand_best: dict[int, Front],
        points: PointStore | None,
        key_best: dict[tuple[tuple[str, str], ...], float],
    ) -> int:
        """Evaluate ``n`` nodes of type ``t`` (one curve point, whatever the offer: the oracle sees
        hardware) and keep, per offer, the feasible column no earlier one of that offer covers
        (:class:`Front`), updating the type sets' bests and the top k.  Returns the points added
        to ``points`` (only here while the curves are partial)."""
        thr, g = self.curves.evaluate(t, n)
        if thr <= 0:
            return 0
        cs_idx, col_lb = d["idx"], d["lb"][:, n - 1]
        rate = d["price"] * n
        haz = d["lam"] * n
        base, tt, cost, good = metrics_at(thr, rate, haz, self.request)
        val = np.asarray(value_of(spec.objective, tt, cost, good, rate), dtype=float)
        fits = n <= d["m"]
        ok = spec.feasible_mask(tt, cost, rate) & fits
        added = 0
        if points is not None and not self.curves.full:
            sel = np.flatnonzero(fits)
            points.add_homogeneous(
                cs_idx[sel],
                np.full(len(sel), n),
                np.full(len(sel), g),
                rate[sel],
                cost[sel],
                tt[sel],
                np.full(len(sel), thr),
                ok[sel],
            )
            added = len(sel)
        for j in np.flatnonzero(ok).tolist():
            ci = int(cs_idx[j])
            front = cand_best.get(ci)
            if front is None:
                front = cand_best[ci] = Front()
            v = float(val[j])
            if front.covered(float(tt[j]), float(cost[j]), v, n):
                continue
            c = self.kept[ci]
            col = Col(
                c.region,
                ((c, n),),
                float(thr),
                int(g),
                float(rate[j]),
                float(haz[j]),
                float(base[j]),
                float(tt[j]),
                float(cost[j]),
                float(good[j]),
                n,
                v,
                True,
                bound=float(col_lb[j]),
            )
            self.finish_col(col, spec)
            if not col.feasible:
                continue
            front.add(col)
            key_best[col.key] = min(key_best.get(col.key, math.inf), v)
            top.offer(col.key, v)
        return added

    def _points(self, t: str, d: dict[str, np.ndarray], spec: Spec, points: PointStore) -> int:
        """Every (offer, count) point of type ``t`` (full curves: they are all known)."""
        thr_all = self.curves.thr[t]
        g_all = self.curves.best_g[t]
        added = 0
        for j, ci in enumerate(d["idx"].tolist()):
            m = int(d["m"][j])
            if m < 1:
                continue
            n = np.arange(1, m + 1)
            thr = thr_all[1 : m + 1]
            runs = thr > 0
            if not runs.any():
                continue
            n, thr = n[runs], thr[runs]
            rate = d["price"][j] * n
            haz = d["lam"][j] * n
            _, tt, cost, _ = metrics(thr, rate, haz, self.request)
            ok = spec.feasible_mask(tt, cost, rate)
            points.add_homogeneous(np.full(len(n), ci), n, g_all[n], rate, cost, tt, thr, ok)
            added += len(n)
        return added

    def _mixed_twins(self, spec: Spec, by_key: dict[tuple[tuple[str, str], ...], list[Col]]) -> list[Col]:
        """The other-market twins (same region, types and counts; all on demand for a mix using
        spot, all on spot otherwise) of the mixes that may be shown: the best column of each
        mixed type set within 0.5 % of the ``top_k``-th best value.  The mixed search stops at
        the incumbent, so the spot twin of an on-demand optimum (slower by its interruptions,
        but cheaper: it dominates) would never be evaluated.  Their estimates are in the memo
        (it keys on the hardware, not the market), so this costs no oracle call."""
        best = [best_of_key(cs) for cs in by_key.values()]
        values = sorted(c.value for c in best)
        if not values:
            return []
        limit = lim(values[min(spec.top_k, len(values)) - 1], DOMINANCE_TOL)
        seen = {(c.region, tuple(c.groups)) for cs in by_key.values() for c in cs if len(c.groups) > 1}
        out: list[Col] = []
        for col in best:
            if len(col.groups) < 2 or col.value > limit:
                continue
            spot = not any(c.is_spot for c, _ in col.groups)
            offers = [
                [
                    o
                    for o in self.by_region[col.region]
                    if o.instance_type == c.instance_type
                    and o.is_spot == spot
                    and max_count(o, spec.quotas, self.N) >= n
                ]
                for c, n in col.groups
            ]
            for combo in itertools.islice(itertools.product(*offers), 8):
                groups = tuple(zip(combo, (n for _, n in col.groups), strict=True))
                if len(set(combo)) < len(combo) or (col.region, groups) in seen:
                    continue
                seen.add((col.region, groups))
                twin = self._mix_col(spec, col.region, groups, col.bound)
                if twin is not None and twin.feasible:
                    out.append(twin)
        return out

    def _mix_col(
        self, spec: Spec, region: str, groups: tuple[tuple[Candidate, int], ...], lb: float
    ) -> Col | None:
        """A mixed configuration evaluated as a column (``None`` when the oracle cannot run it)."""
        thr, g, _est = self.memo.best(groups, self.grid)
        if thr <= 0:
            return None
        rate = sum(c.price_per_hour * n for c, n in groups)
        haz = hazard_of(groups)
        base, t, cost, good = metrics(thr, rate, haz, self.request)
        val = float(value_of(spec.objective, t, cost, good, rate))
        quotas_ok = True
        if spec.quotas:
            used: dict[tuple[str, str], float] = defaultdict(float)
            for c, n in groups:
                used[qkey(c)] += c.vcpus * n
            quotas_ok = all(v <= spec.quotas[k] + 1e-9 for k, v in used.items() if k in spec.quotas)
        feasible = (
            quotas_ok
            and math.isfinite(t)
            and (spec.deadline is None or t <= spec.deadline * (1 + REL))
            and (spec.budget is None or cost <= spec.budget * (1 + REL))
            and (spec.cap is None or rate <= spec.cap * (1 + REL))
        )
        nodes = sum(n for _, n in groups)
        col = Col(region, groups, thr, g, rate, haz, base, t, cost, good, nodes, val, feasible, bound=lb)
        self.finish_col(col, spec)
        return col

    def _mixed(
        self, spec: Spec, theta: float, stats: dict[str, int], level: int, points: PointStore | None
    ) -> list[Col]:
        """Mixed columns: subsets and count vectors streamed through their bounds into a queue,
        evaluated in increasing bound order while the bound can beat the incumbent; the queue is
        drained early (best first) whenever it would outgrow the memory budget (the steps:
        :class:`_MixedSearch`)."""
        search = _MixedSearch(self, spec, stats, level, points, MixBounds(self.curves), theta)
        regions = sorted(self.by_region)
        dom = search.region_tables(regions)
        for region in regions:
            search.push_region(region, dom)
        return search.finish()

    def _polish(
        self,
        spec: Spec,
        cols: list[Col],
        bounds: MixBounds,
        lam_all: dict[str, dict[Candidate, float]],
        maxc_all: dict[str, dict[Candidate, int]],
        evaluate_next: Callable[[Callable[[], float]], Col | None],
        new_queue: Callable[[], MixQueue],
    ) -> list[Col]:
        """The best count vector of each mixed type set that may be shown (the ``top_k`` best
        by value), in the region of its best column: the search stops at the optimum, so the
        vector it happened to evaluate for such a type set need not be that set's best (how
        many are evaluated depends on how tight the bounds are).  Each is a small branch and
        bound of its own against the set's best value (and 0.5 % above it, the band within
        which a cheaper column is the one ranked, as for single types)."""
        best = sorted(
            (best_of_key([c for c in cols if c.key == key]) for key in {c.key for c in cols}),
            key=lambda c: c.value,
        )
        req = self.request
        band = max(spec.tie_tol, 0.0 if spec.objective == "cost" else DOMINANCE_TOL)
        seen = {(c.region, c.groups) for c in cols}
        out: list[Col] = []
        for col in best[: spec.top_k]:
            region = col.region
            subset = tuple(c for c, _ in col.groups)
            local = {"v": col.value}

            def limit(local: dict[str, float] = local) -> float:
                return lim(local["v"], band)

            queue = new_queue()
            ms = bounds.member_limits(
                spec, subset, maxc_all[region], True, local["v"] + abs(local["v"]) * band, req
            )
            if min(ms) < 1:
                continue
            allowed = bounds.allowed_counts(spec, subset, ms, local["v"] + abs(local["v"]) * band, req)
            for ns in bounds.count_vectors(spec, subset, allowed):
                self.budget.check(
                    len(ns[0]) * (len(subset) * 8 * 4 + 8 * 8) + queue.nbytes,
                    "max_nodes",
                    f"bounding {len(ns[0]):,} count vectors of "
                    + " + ".join(c.instance_type for c in subset),
                )
                lb, ok = bounds.vector_bounds(spec, subset, ns, lam_all[region], 3, req)
                ok &= lb < limit()
                sel = np.flatnonzero(ok)
                queue.push(lb[sel], np.column_stack([x[sel] for x in ns]), region, subset)
            while queue.heap and queue.peek() < limit():
                got = evaluate_next(limit)
                if got is not None and got.key == col.key:
                    local["v"] = min(local["v"], got.value)
                    if (got.region, got.groups) not in seen:
                        seen.add((got.region, got.groups))
                        out.append(got)
            queue.clear()
        return out


@dataclass
class _MixedSearch:
    """One run of the mixed search of :meth:`Engine._mixed`: the queue, the incumbent ``theta``
    and the counters its steps share.  Subsets of each region go through the subset bounds
    (:meth:`push_region`), a survivor's count vectors through the vector bounds into the queue
    (:meth:`push_subset`), and the queue is evaluated best first (:meth:`evaluate_next`) while
    its least bound can beat the incumbent (:meth:`finish`)."""

    engine: Engine
    spec: Spec
    stats: dict[str, int]
    level: int
    points: PointStore | None
    bounds: MixBounds
    theta: float
    queue: MixQueue = field(default_factory=MixQueue)
    out: list[Col] = field(default_factory=list)
    lam_all: dict[str, dict[Candidate, float]] = field(default_factory=dict)
    maxc_all: dict[str, dict[Candidate, int]] = field(default_factory=dict)
    usable_all: dict[str, list[Candidate]] = field(default_factory=dict)

    def cut(self) -> float:
        """Rows whose bound reaches this cannot beat (or tie) the incumbent."""
        return lim(self.theta, self.spec.tie_tol)

    def new_queue(self) -> MixQueue:
        """A fresh queue for the helpers that reuse :meth:`evaluate_next` (:meth:`Engine._polish`)."""
        self.queue = MixQueue()
        return self.queue

    def region_tables(self, regions: Sequence[str]) -> RegionDominance | None:
        """Each region's largest counts, usable offers and hazards, and which subsets another
        region offers as well (:class:`RegionDominance`; only with bounds, ``level >= 1``)."""
        eng, spec = self.engine, self.spec
        for region in regions:
            group = eng.by_region[region]
            self.maxc_all[region] = {c: max_count(c, spec.quotas, eng.N) for c in group}
            self.usable_all[region] = [c for c in group if self.maxc_all[region][c] >= 1]
            self.lam_all[region] = {c: hazard_of(((c, 1),)) for c in self.usable_all[region]}
        if self.level < 1:
            return None
        return RegionDominance(
            regions, self.usable_all, self.maxc_all, self.lam_all, exact_hazard=spec.risk is not None
        )

    def push_region(self, region: str, dom: RegionDominance | None) -> None:
        """Every subset of 2..``max_types`` usable offers of ``region``, a block of subsets at a
        time through the subset bounds (and region dominance: the same hardware as cheap and
        as safe elsewhere is never needed, asked after the bounds, which leave far fewer rows);
        each survivor's count vectors into the queue."""
        eng, bounds, stats = self.engine, self.bounds, self.stats
        usable, maxc, lam = self.usable_all[region], self.maxc_all[region], self.lam_all[region]
        for k in range(2, min(eng.request.max_types, len(usable), eng.N) + 1):
            tables = bounds.member_tables(usable, k, maxc, lam)
            for combos in combinations(len(usable), k):
                eng.budget.check(
                    len(combos) * (k * 16 + 16 * 8) + self.queue.nbytes,
                    "max_types",
                    f"bounding {len(combos):,} subsets of {k} offers in {region}",
                )
                survivors, pruned, ceilings = bounds.subset_survivors(
                    self.spec, self.theta, tables, combos, self.level, eng.request
                )
                stats["subsets"] += len(combos)
                stats["pruned"] += pruned
                if dom is not None and len(survivors):
                    n_all = len(survivors)
                    undominated = ~dom.dominated(region, survivors)
                    survivors, ceilings = survivors[undominated], ceilings[undominated]
                    stats["pruned"] += n_all - len(survivors)
                for row, ceiling in zip(survivors.tolist(), ceilings.tolist(), strict=True):
                    if not self.push_subset(region, tuple(usable[i] for i in row), ceiling):
                        stats["pruned"] += 1

    def push_subset(self, region: str, subset: tuple[Candidate, ...], ceiling: float) -> bool:
        """The count vectors of ``subset`` that may beat the incumbent, into the queue: each
        member's counts cut by the money and speed bounds (:meth:`MixBounds.member_limits`,
        :meth:`MixBounds.allowed_counts`), a large box first to the totals that can pay off
        (:meth:`MixBounds.total_limits`, whose cap then tightens the subset's ceiling).
        Whether any vector was bounded (``False``: the subset is pruned)."""
        eng, bounds, spec, req = self.engine, self.bounds, self.spec, self.engine.request
        maxc, lam = self.maxc_all[region], self.lam_all[region]
        ms = bounds.member_limits(spec, subset, maxc, self.level >= 1, self.theta, req, ceiling)
        if min(ms) < 1:
            return False
        totals = None
        if self.level >= 4 and math.prod(ms) > TOTAL_LIMIT_ROWS:
            tight, totals = bounds.total_limits(spec, subset, ms, lam, self.theta, req, ceiling)
            if tight < ceiling:
                ceiling = tight
                ms = bounds.member_limits(spec, subset, maxc, True, self.theta, req, ceiling)
        allowed = (
            bounds.allowed_counts(spec, subset, ms, self.theta, req, ceiling)
            if self.level >= 1
            else [np.arange(1, m + 1) for m in ms]
        )
        any_vectors = False
        for ns in bounds.count_vectors(spec, subset, allowed, totals):
            any_vectors = True
            self.stats["bounded"] += len(ns[0])
            k = len(subset)
            slice_bytes = len(ns[0]) * (k * 8 * 4 + 8 * 8)
            eng.budget.check(
                slice_bytes + self.queue.nbytes,
                "max_nodes" if k < 3 else "max_types",
                f"bounding {len(ns[0]):,} count vectors of " + " + ".join(c.instance_type for c in subset),
            )
            self.push_vectors(region, subset, ns, ceiling)
            room = eng.budget.room() - slice_bytes
            if self.queue.nbytes > room / 2:
                self.drain(room / 4)
        return any_vectors

    def push_vectors(
        self, region: str, subset: tuple[Candidate, ...], ns: list[np.ndarray], ceiling: float
    ) -> None:
        """One slice of count vectors into the queue with their bounds (without bounds,
        ``level 0``: all of them, at ``-inf``), those that cannot beat the incumbent left out."""
        if self.level >= 1:
            lb, ok = self.bounds.vector_bounds(
                self.spec, subset, ns, self.lam_all[region], self.level, self.engine.request, ceiling
            )
            if math.isfinite(self.theta):
                ok &= lb < lim(self.theta, self.spec.tie_tol)
            sel = np.flatnonzero(ok)
            lbs = lb[sel]
        else:
            sel = np.arange(len(ns[0]))
            lbs = np.full(len(sel), -math.inf)
        if len(sel):
            self.queue.push(lbs, np.column_stack([x[sel] for x in ns]), region, subset)
            self.engine.progress.remaining(self.queue.entries)

    def refine_top(self, limit: Callable[[], float]) -> None:
        """(A5) the oracle's bound on the rows next in line, a block at a time (vectorised): it
        rules most of them out or sends them back behind better ones."""
        bounds, queue = self.bounds, self.queue
        lb, counts, region, subset = queue.take(REFINE_ROWS)
        ns = [counts[:, i].astype(np.int64) for i in range(counts.shape[1])]
        ub = np.minimum(bounds.ub(subset, ns, min(self.level, 3)), bounds.dilution_ub(subset, ns))
        lb2, ok = bounds.bounds_of_ub(self.spec, subset, ns, ub, self.lam_all[region], self.engine.request)
        lb = np.maximum(lb, lb2)
        ok &= lb < limit()
        self.stats["refined"] += len(lb)
        queue.push(lb[ok], counts[ok], region, subset, ub=ub[ok])

    def evaluate_next(self, limit: Callable[[], float] | None = None) -> Col | None:
        """The queue's next row: refined first (level 4), re-bounded with its members' curve
        points (partial curves), else evaluated by the oracle (:meth:`evaluate`).  The feasible
        column it gives, or ``None``.  ``limit``: the bound at which rows stop mattering
        (default :meth:`cut`)."""
        limit = limit or self.cut
        queue = self.queue
        if self.level >= 4 and not queue.top_refined():
            self.refine_top(limit)
            return None
        lb, region, subset, counts, ub_row = queue.pop()
        if self.level >= 1 and not self.engine.curves.full and self.bounds.refine(subset, counts):
            # the members' own curve points are cheaper than the mix: with them the bound may
            # rule the mix out, or send it back behind better candidates
            ns = [np.array([n]) for n in counts]
            lb2, ok = self.bounds.vector_bounds(
                self.spec, subset, ns, self.lam_all[region], min(self.level, 3), self.engine.request
            )
            lb = max(lb, float(lb2[0]))
            if not ok[0] or lb >= limit():
                return None
            if lb > queue.peek():
                queue.push(
                    np.array([lb]),
                    np.array([counts]),
                    region,
                    subset,
                    ub=np.array([ub_row]) if self.level >= 4 else None,
                )
                return None
        return self.evaluate(region, subset, counts, lb, ub_row)

    def evaluate(
        self, region: str, subset: tuple[Candidate, ...], counts: tuple[int, ...], lb: float, ub_row: float
    ) -> Col | None:
        """The oracle's best over the grid for one mix, checked against its bound (a violation is
        counted: the search then redoes itself with weaker bounds), as a column; a feasible one
        lowers the incumbent and is kept (and counted against the memory budget)."""
        eng, spec, req = self.engine, self.spec, self.engine.request
        groups = tuple(zip(subset, counts, strict=True))
        thr, g, _est = eng.memo.best(groups, eng.grid)
        self.stats["evaluated"] += 1
        eng.progress.tick()
        if thr <= 0:
            return None
        ub_v = min(self.bounds.ub_one(subset, counts, self.level), ub_row)
        if self.level >= 1 and thr > ub_v * (1 + 1e-9) + 1e-9:
            self.stats["violations"] += 1
        rate = sum(c.price_per_hour * n for c, n in groups)
        haz = hazard_of(groups)
        base, t, cost, good = metrics(thr, rate, haz, req)
        val = float(value_of(spec.objective, t, cost, good, rate))
        feasible = (
            math.isfinite(t)
            and (spec.deadline is None or t <= spec.deadline * (1 + REL))
            and (spec.budget is None or cost <= spec.budget * (1 + REL))
            and (spec.cap is None or rate <= spec.cap * (1 + REL))
        )
        col = Col(
            region, groups, thr, g, rate, haz, base, t, cost, good, sum(counts), val, feasible, bound=lb
        )
        eng.finish_col(col, spec)
        if self.points is not None:
            self.points.add_mixed(
                Point(region, col.label(), col.nodes, len(groups), g, rate, cost, t, thr, col.feasible)
            )
        if not col.feasible:
            return None
        self.theta = min(self.theta, val)
        # every feasible mix evaluated is kept until the end (one per type set is shown): counted,
        # so a search that evaluates millions gets a clear error, not gigabytes
        eng.budget.charge(COL_BYTES, "max_types", f"keeping {len(self.out) + 1:,} evaluated mixes")
        self.out.append(col)
        return col

    def drain(self, target_bytes: float) -> None:
        """Evaluate the queue best first until it holds ``target_bytes`` (or nothing left can
        beat the incumbent): what keeps the queue within the memory budget."""
        queue = self.queue
        while queue.heap and queue.nbytes > target_bytes:
            if self.level >= 1 and queue.peek() >= self.cut():
                queue.clear()
                break
            self.evaluate_next()
        self.engine._check_memo()

    def finish(self) -> list[Col]:
        """Evaluate what is left in the queue while it can beat the incumbent; the mixes kept:
        those whose bound the final optimum could not rule out, and the best count vector of each
        type set that may be shown (:meth:`Engine._polish`)."""
        queue = self.queue
        while queue.heap:
            if self.level >= 1 and queue.peek() >= self.cut():
                break
            self.evaluate_next()
        queue.clear()
        final = self.cut()
        kept = [c for c in self.out if self.level < 1 or c.bound < final]
        if self.level >= 1:
            kept += self.engine._polish(
                self.spec, kept, self.bounds, self.lam_all, self.maxc_all, self.evaluate_next, self.new_queue
            )
        self.engine.progress.remaining(0)
        return kept


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


def milp_pick(cols: Sequence[Col], spec: Spec, max_nodes: int) -> tuple[int | None, str]:
    """The one-hot column-selection model the solver used to hand CBC (kept for the
    ``CROSS_CHECK_MILP`` measurement; see the module docstring): ``(index of the chosen column, status)``."""
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
            <= spec.deadline * (1 + REL),
            "deadline",
        )
    if spec.budget is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].cost) for j in range(len(cols))])
            <= spec.budget * (1 + REL),
            "budget",
        )
    if spec.cap is not None:
        prob += (
            pulp.LpAffineExpression([(y[j], cols[j].rate) for j in range(len(cols))]) <= spec.cap * (1 + REL),
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


def spec_of(req: PlanRequest, **over: Any) -> Spec:
    base = Spec(
        objective=req.objective,
        deadline=req.deadline_hours,
        budget=req.budget_usd,
        cap=req.max_hourly_usd,
        risk=req.max_miss_risk,
        quotas=quota_table(req),
        top_k=int(req.top_k),
        tie_tol=float(req.tie_tolerance),
    )
    return replace(base, **over)


# ----------------------------------------------------------------------------------- per-GPU batch
def per_gpu_batches(config: Config, global_batch: int, est: Estimate | None) -> list[int]:
    """The batch each GPU of ``config`` processes per iteration, one entry per group: the
    oracle's ``per_node_batch`` split evenly over the node's GPUs (``floor(b_node / gpus)``, so
    the smallest share), or, without it, ``floor(G / sum_i n_i * gpus_i)``."""
    if est is not None and est.per_node_batch is not None and len(est.per_node_batch) == len(config):
        return [
            int(b) // max(1, int(c.gpus_per_node))
            for (c, _), b in zip(config, est.per_node_batch, strict=True)
        ]
    gpus = sum(int(n) * max(1, int(c.gpus_per_node)) for c, n in config)
    return [int(global_batch) // max(1, gpus)] * len(config)


class MinBatchPerGpu:
    """``perf`` with every ``(config, G)`` whose smallest per-GPU batch is below ``minimum``
    marked as unable to run (``None``; 0 in curves and bounds).

    Why here and not in the request: a GPU far below its occupancy knee computes little per
    step while the all-reduce still moves the whole model, so a plan that buys speed by
    spreading a small global batch over many GPUs buys mostly communication, and the fastest
    GPUs tie (they all wait on the network).  Zeroing the compute bound of those points keeps
    the search's bounds valid upper bounds (the constraint only removes configurations) and
    lets it skip them.  Every other attribute (comm floor, mix bounds, ...) is the oracle's."""

    def __init__(self, perf: PerfOracle, minimum: int) -> None:
        self.perf: Any = perf  # a callable, with the optional bound methods of the Curves
        self.minimum = int(minimum)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.perf, name)

    def __call__(self, config: Config, global_batch: int) -> Estimate | None:
        gpus = sum(int(n) * max(1, int(c.gpus_per_node)) for c, n in config)
        if int(global_batch) < self.minimum * gpus:
            return None  # even an even split leaves some GPU below the minimum
        est: Estimate | None = self.perf(config, global_batch)
        if est is not None and min(per_gpu_batches(config, global_batch, est)) < self.minimum:
            return None
        return est

    def max_workers(self, global_batch: int) -> int:
        """Most GPUs a configuration can have at ``global_batch``: ``G // minimum`` (more leave
        some GPU below it, :meth:`__call__`), or fewer where the oracle says so.  The search caps
        every mix's GPUs with it (:class:`~planner.solver.candidates.Curves`), so a minimum
        that rules out large clusters also rules out their count vectors."""
        own = int(global_batch) // self.minimum
        inner = getattr(self.perf, "max_workers", None)
        return min(own, int(inner(global_batch))) if callable(inner) else own

    def _keep(self, c: Candidate, counts: Any, g: int) -> Any:
        n = np.asarray(counts, dtype=np.int64)
        return int(g) // np.maximum(1, n * max(1, int(c.gpus_per_node))) >= self.minimum

    def throughput_bound(self, c: Candidate, counts: Any, g: int) -> np.ndarray:
        got = np.asarray(self.perf.throughput_bound(c, counts, g), dtype=np.float64)
        return np.where(self._keep(c, counts, g), got, 0.0)

    def throughput_curve(self, c: Candidate, counts: Any, g: int) -> np.ndarray | None:
        curve = getattr(self.perf, "throughput_curve", None)
        got = curve(c, counts, g) if callable(curve) else None
        if got is None:
            return None
        return np.where(self._keep(c, counts, g), np.asarray(got, dtype=np.float64), 0.0)


def with_min_batch_per_gpu(perf: PerfOracle, minimum: int | None) -> PerfOracle:
    """``perf`` under a per-GPU batch minimum (:class:`MinBatchPerGpu`); unchanged without one.
    The bound and curve methods are only offered where ``perf`` has them (the curves test for
    them with ``getattr``)."""
    if not minimum or int(minimum) <= 1:
        return perf
    wrapped = MinBatchPerGpu(perf, int(minimum))
    if not callable(getattr(perf, "throughput_bound", None)):
        return _NoBound(perf, int(minimum))
    return wrapped


class _NoBound(MinBatchPerGpu):
    """:class:`MinBatchPerGpu` for an oracle without a compute bound or curve."""

    throughput_bound = None  # type: ignore[assignment]
    throughput_curve = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------------- public entry
def _search(
    request: PlanRequest,
    candidates: Sequence[Candidate],
    perf: PerfOracle,
    tracker: Progress,
    max_memory_mb: float,
    spec: Spec,
) -> tuple[Engine, Outcome]:
    engine = Engine(request, candidates, perf, tracker, max_memory_mb)
    return engine, engine.run(spec)


def solve(
    request: PlanRequest,
    candidates: Sequence[Candidate],
    perf: PerfOracle,
    *,
    progress: ProgressCallback | None = None,
    max_memory_mb: float = DEFAULT_MAX_MEMORY_MB,
    min_batch_per_gpu: int | None = None,
) -> PlanResult:
    """Plan a cluster; see the module docstring.  Raises :class:`RequestError` (also when the
    search would need more than ``max_memory_mb`` of state: it names ``max_nodes`` or
    ``max_types`` and the limit) or :class:`Infeasible`.

    ``progress(evaluated, estimated_total)`` is called as configurations are evaluated (at most
    every 0.1 s, and once at the end); an exception it raises propagates out of ``solve``,
    which is how a caller cancels a solve.

    ``min_batch_per_gpu``: configurations whose smallest per-GPU batch is below it are not
    ranked (:class:`MinBatchPerGpu`), unless none at or above it satisfies the request: then
    the search runs again without the minimum (the caller sees it on the plans' batches).
    (A keyword, not a request field, until :class:`PlanRequest` carries it.)"""
    t0 = _time.perf_counter()
    request.validate()
    tracker = Progress(progress)
    spec = spec_of(request)
    bounded = with_min_batch_per_gpu(perf, min_batch_per_gpu)
    engine, out = _search(request, candidates, bounded, tracker, max_memory_mb, spec)
    if not out.cols and bounded is not perf:
        # nothing fits at the minimum: rank what does fit below it rather than nothing
        engine, out = _search(request, candidates, perf, tracker, max_memory_mb, spec)
    if not out.cols:
        raise explain_infeasible(engine, spec)
    ranked, ranked_all, tie_why = rank_columns(out.cols, spec, request)
    status = "Optimal (exact search, no MILP)"
    if CROSS_CHECK_MILP:
        pick, milp_status = milp_pick(ranked_all, spec, request.max_nodes)
        agrees = pick is not None and abs(ranked_all[pick].value - ranked_all[0].value) <= 1e-9 * max(
            1.0, abs(ranked_all[0].value)
        )
        status = f"{milp_status} (CBC cross-check {'agrees' if agrees else 'DISAGREES'})"
    plans = tuple(
        make_plan(i, col, ranked, spec, request, engine.memo, engine.per_node, tie_why if i == 0 else None)
        for i, col in enumerate(ranked)
    )
    points = tuple(out.points.points()) if out.points is not None else ()
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
        curve_points_evaluated=out.curve_points,
        configs_evaluated=tracker.done,
        points_seen=out.points.seen if out.points is not None else 0,
        search_memory_mb=engine.budget.peak / MB,
        full_curves=engine.curves.full,
    )
    return PlanResult(
        request=request,
        plans=plans,
        pareto=pareto_frontier(points),
        points=points,
        stats=stats,
        solve_time_s=_time.perf_counter() - t0,
    )

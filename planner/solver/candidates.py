"""Enumeration and bounds: homogeneous throughput curves, upper bounds on a mix's throughput, and
the stream of (type subset x count vector) columns the search may evaluate.

(Loading the catalog into :class:`planner.offers.Candidate` offers is
:mod:`planner.offers`; this module starts from those offers.)

Homogeneous curves
------------------
``T_t(n) = max_G T(((t, n),), G)`` for every instance type ``t`` and ``n = 1..N``.  Where the
oracle offers ``throughput_bound`` (the product oracle does: compute time alone, no comm model,
see :meth:`planner.oracle.Oracle.throughput_bound`) every curve starts as the upper bound
``U_t(n, G) >= T(((t, n),), G)``, 0 exactly where the configuration cannot run, and points are
evaluated only when the search asks (:meth:`Curves.evaluate`).  Within one point the batches
are tried by decreasing bound, and a batch whose bound is below the best throughput already
found there is skipped (it cannot be the best batch).  Small problems
(``types x N x |grid| <= FULL_CURVE_LIMIT``) evaluate every point up front, which is what
dominance pruning of candidates (:func:`planner.offers.find_dominated`, "faster at every
count and batch") and the replacement bound need.

Bounds on a mix (both are monotone assumptions about DDP that hold for ring all-reduce /
slowest-node models; the search checks every evaluated mix against them):

* (A1) *separability*: ``T(mix) <= sum_i T_{c_i}(n_i)`` -- a cluster never processes more
  samples/s than its groups would as separate clusters (when a group cannot run alone,
  ``n_i * max_m T_{c_i}(m) / m`` is used; an unevaluated point uses its upper bound);
* (A2) *replacement*: if member ``a``'s curve is at least member ``b``'s at every node count,
  replacing the ``b`` nodes by ``a`` nodes does not slow the mix down, so
  ``T(mix) <= T_a(n_a + n_b) (+ the other groups' terms)``.  With full curves "at least" is read
  off the curves; otherwise from the hardware (A3, :func:`hardware_rows`: same GPU model and
  GPUs per node, a link at least as fast, EFA where the other has it).

A mix whose bound rests on unevaluated curve points is refined before the mix itself is
evaluated (:meth:`MixBounds.refine`: its members' points and the merged counts of A2, far cheaper
than a mix, whose batch split is a bisection); the tighter bound then rules it out or sends it
back into the queue.

An oracle that says how many GPUs it can run at most (``max_workers(G)``; the product oracle:
``G``, one sample per worker) lets terms and count vectors beyond it go: no mix runs there.

* (A4) *comm floor*: with an oracle that offers ``comm_floor_ms(members, nodes)`` (the product
  oracle: the sum of the all-reduces of the cluster the mix runs on -- fewest GPUs per node,
  slowest link, slowest GPU, whatever the counts -- which the deterministic timeline's
  iteration never undercuts), ``T(mix) <= G_max / floor(sum_i n_i)``.  It sees what A1 cannot:
  a mix with a slow-network or one-GPU type runs its all-reduce over that link for the whole
  cluster (measured on r50 max throughput under $100/h, 128 nodes x 2 types: the mixes A1 let
  through ran at 2-50 % of their A1 bound and at 50-98 % of this one).  Cached per type set
  and total count, asked only for the totals of vectors that reach it.
* (A5) *batch dilution*: with an oracle that offers ``mix_throughput_bound(members, counts,
  grid)`` (the product oracle: :mod:`planner.mix_bound`), a mix's own bound at one global batch
  over all its GPUs -- each GPU gets a smaller, less efficient batch than alone, the split
  balances the step times, and the all-reduces wait for the slowest backward.  Dearer per
  vector than A1-A4, so it is asked only for the queue's rows next in line
  (:meth:`MixBounds.dilution_ub`, a block of rows at a time), where it rules most mixes out.

Both also hold for a whole subset, whatever its counts (:meth:`MixBounds.subset_survivors`, for
the subsets the other subset bounds leave): A4 with the least floor over the totals the subset
can reach (a mix's cluster depends on its members only through the fewest GPUs per node, the
slowest link, EFA for all and the first slowest GPU, so the floors are asked once per such
signature), and A5's *ceiling* ``G_max / max(paced_1, (1 - beta) c_1 + floor)`` from the
members' largest step at batch 1 (:func:`planner.mix_bound.ceiling`).  The cap then bounds the
subset's time and cost, each member's count (:meth:`MixBounds.member_limits`), the subset's
rate under a budget (:meth:`MixBounds.allowed_counts`) and every vector's bound.  Measured on
``bench/plan_speed.py`` requests: BERT fastest within $300 on 128 x 3 types, 153 -> 4.6 s (the
per-vector A4 was ruling out 97 % of 144,077 subsets 443 M vectors at a time); ResNet-50
fastest within $1,000 on 512 x 3 types, 105 -> 7 s (A5 saturates near 20,000 samples/s for
every count of the fast mixes, so their count boxes shrink to what the budget buys).

A5 also holds per *total* node count (:meth:`MixBounds.total_cap`,
:meth:`planner.mix_bound.MixBound.total_cap`): on few nodes the global batch leaves every GPU a
large batch, on many the slowest member's one-sample step and the all-reduces at that total
bind, whatever the split.  One array per type set caps every vector's bound at its total, and a
large count box is first cut to the totals that can still pay off
(:meth:`MixBounds.total_limits`): with the default batch range 256..4,096 a 3-type mix on 512
nodes has tens of millions of vectors, most of them on totals no mix can use.  An oracle's
``max_workers`` (every GPU needs a sample; under a per-GPU batch minimum ``G // minimum``,
:class:`planner.solver.search.MinBatchPerGpu`) caps each member's count and the totals too.

Their minimum gives, for all count vectors of a subset at once (numpy), lower bounds on time and
cost and an upper bound on goodput (all monotone in ``T``, :func:`planner.solver.evaluate.metrics`).

Streaming
---------
Nothing of size ``subsets x counts`` is ever built: subsets of ``k`` candidates are generated
in blocks of whole first members (about 65,536 rows at a time) and bounded at subset level
(:meth:`MixBounds.subset_survivors`, with the $/h cap limiting each member's count); a
surviving subset's count vectors are generated one slice at a time (the first member's count
in blocks for ``k = 3``, at most ``max(N^2, SLICE_ROWS)`` rows), filtered by ``sum n_i <= N``, joint quotas and the
vector bound, and only the survivors go on to the search's queue.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from planner.mix_bound import BoundOracle
from planner.mix_bound import mix_bound as mix_bound_of
from planner.offers import Candidate
from planner.solver.evaluate import Memo, Progress, Spec, lim, metrics, value_of
from planner.solver.request import REL, PerfOracle, qkey

#: Evaluate every curve point up front when ``types x max_nodes x batches`` is at most this.
FULL_CURVE_LIMIT = 2048
#: Count vectors built at once for a subset of three (the first member's counts in blocks).
SLICE_ROWS = 1 << 18
#: Node counts of one type evaluated in one pass (the oracle's ``throughput_curve``).
CURVE_BLOCK = 64
#: Bytes of cached comm-floor caps (A4) per solve.
COMM_CACHE_BYTES = 8 << 20


class Curves:
    """Homogeneous curves of every instance type, evaluated on demand (module docstring)."""

    def __init__(
        self,
        reps: Mapping[str, Candidate],
        N: int,
        grid: Sequence[int],
        memo: Memo,
        perf: PerfOracle,
        progress: Progress | None = None,
    ) -> None:
        self.N = int(N)
        self.progress = progress or Progress(None)
        self.grid = tuple(int(g) for g in grid)
        self.memo = memo
        self.types = list(reps)
        self.reps = dict(reps)
        self.tidx = {t: i for i, t in enumerate(self.types)}
        for t, c in reps.items():
            memo.rep.setdefault(t, c)
        workers_fn = getattr(perf, "max_workers", None)
        self.max_workers = max(int(workers_fn(g)) for g in self.grid) if callable(workers_fn) else None
        bound_fn = getattr(perf, "throughput_bound", None)
        self.has_bound = callable(bound_fn)
        floor_fn = getattr(perf, "comm_floor_ms", None)
        self.comm_floor: Callable[[Sequence[Candidate], np.ndarray], np.ndarray] | None = (
            floor_fn if callable(floor_fn) else None
        )
        prefix_fn = getattr(perf, "comm_floor_prefix_min", None)
        self.comm_floor_prefix: Callable[[Sequence[Candidate], int], np.ndarray] | None = (
            prefix_fn if callable(prefix_fn) and self.comm_floor is not None else None
        )
        curve_fn = getattr(perf, "throughput_curve", None)
        self.throughput_curve: Callable[[Candidate, np.ndarray, int], np.ndarray | None] | None = (
            curve_fn if callable(curve_fn) else None
        )
        # (type, batch, block) -> the exact throughput of counts block*CURVE_BLOCK.. (None: the
        # oracle cannot do it in one pass, so each count is asked alone)
        self._blocks: dict[tuple[str, int, int], np.ndarray | None] = {}
        speed_fn = getattr(perf, "gpu_speed", None)
        self.gpu_speed: Callable[[str], float] | None = speed_fn if callable(speed_fn) else None
        mix_fn = getattr(perf, "mix_throughput_bound", None)
        self.mix_bound: (
            Callable[[Sequence[Candidate], Sequence[np.ndarray], Sequence[int]], np.ndarray] | None
        ) = mix_fn if callable(mix_fn) else None
        # the A5 ceiling (MixBounds.subset_ceiling) rests on the mix bound's own argument
        terms_fn = getattr(perf, "mix_ceiling_terms", None)
        ceil_fn = getattr(perf, "mix_ceiling", None)
        usable = callable(terms_fn) and callable(ceil_fn) and self.mix_bound is not None
        self.ceiling_terms: Callable[[Candidate, int], tuple[float, float, float] | None] | None = (
            terms_fn if usable else None
        )
        self.mix_ceiling: Callable[..., np.ndarray] | None = ceil_fn if usable else None
        # A5 per total node count (MixBounds.total_cap): the mix bound's own argument, so only
        # where the oracle offers that bound and is what planner.mix_bound bounds
        self.total_cap: Callable[[Sequence[Candidate], np.ndarray, Sequence[int]], np.ndarray] | None = (
            mix_bound_of(perf).total_cap
            if self.mix_bound is not None and isinstance(perf, BoundOracle)
            else None
        )
        self.g_max = max(self.grid)
        counts = np.arange(1, self.N + 1)
        self.ub: dict[str, np.ndarray] = {}  # t -> (|grid|, N + 1) upper bounds (0: cannot run)
        for t, c in reps.items():
            rows = np.zeros((len(self.grid), self.N + 1))
            if self.has_bound:
                assert bound_fn is not None
                for j, g in enumerate(self.grid):
                    rows[j, 1:] = np.asarray(bound_fn(c, counts, g), dtype=float)
            else:
                rows[:, 1:] = np.inf
            self.ub[t] = rows
        self.ub_best = {t: rows.max(axis=0) for t, rows in self.ub.items()}
        # per count, the grid batches by decreasing bound, ties to the smaller batch: the order
        # evaluate() asks them in (row n)
        batches = np.array(self.grid, dtype=float)
        self._order = {
            t: np.lexsort((np.broadcast_to(batches, rows.T.shape), -rows.T)) for t, rows in self.ub.items()
        }
        # evaluated values: vals[t][n, j] (nan = not evaluated), thr/g the best over the grid
        self.vals = {t: np.full((self.N + 1, len(self.grid)), np.nan) for t in self.types}
        self.thr = {t: np.full(self.N + 1, np.nan) for t in self.types}
        self.best_g = {t: np.full(self.N + 1, self.grid[0], dtype=np.int64) for t in self.types}
        for t in self.types:
            self.thr[t][0] = 0.0
        self.full = (not self.has_bound) or len(self.types) * self.N * len(self.grid) <= FULL_CURVE_LIMIT
        self.points_evaluated = 0
        if self.full:
            self.progress.remaining(len(self.types) * self.N)
            for t in self.types:
                for n in range(1, self.N + 1):
                    self.evaluate(t, n)

    def nbytes(self) -> int:
        return len(self.types) * (self.N + 1) * (3 * len(self.grid) + 3) * 8  # + the curve blocks

    def known(self, t: str, n: int) -> bool:
        return not math.isnan(self.thr[t][n])

    def evaluate(self, t: str, n: int) -> tuple[float, int]:
        """``(T_t(n), best batch)``: the oracle at the grid batches that can be the best."""
        thr = self.thr[t]
        if not math.isnan(thr[n]):
            return float(thr[n]), int(self.best_g[t][n])
        scan = self._scan(t, n, lambda g: self._value(t, n, g))
        assert scan is not None  # _value always answers
        best_t, best_g, vals = scan
        self.vals[t][n] = vals
        thr[n] = best_t
        self.best_g[t][n] = best_g
        self.points_evaluated += 1
        self.progress.tick()
        return best_t, best_g

    def _scan(
        self, t: str, n: int, value: Callable[[int], float | None]
    ) -> tuple[float, int, np.ndarray] | None:
        """The best (throughput, batch) of ``(t, n)`` over the grid batches in decreasing order of
        their bound (stopping once no later one can beat it), and the values seen (nan: not
        asked); ``None`` as soon as ``value`` has none."""
        ub = self.ub[t][:, n]
        vals = np.full(len(self.grid), np.nan)
        order = range(len(self.grid)) if self.full else self._order[t][n].tolist()
        best_t, best_g = 0.0, self.grid[0]
        for j in order:
            g = self.grid[j]
            if ub[j] <= 0:
                vals[j] = 0.0
                continue
            if not self.full and ub[j] < best_t:
                break  # sorted by bound: no later batch can beat best_t
            v = value(g)
            if v is None:
                return None
            vals[j] = v
            if v > best_t or (v == best_t and v > 0 and g < best_g):
                best_t, best_g = v, g
        return best_t, best_g, vals

    def _block_value(self, t: str, n: int, g: int) -> float | None:
        """The throughput of ``(t, n)`` at ``g`` from the oracle's curve over its block of counts
        (computed if need be); ``None`` where the oracle has no curve for it."""
        if self.throughput_curve is None:
            return None
        block = n // CURVE_BLOCK
        key = (t, g, block)
        if key not in self._blocks:
            lo = max(block * CURVE_BLOCK, 1)
            counts = np.arange(lo, min((block + 1) * CURVE_BLOCK, self.N + 1))
            got = self.throughput_curve(self.reps[t], counts, g)
            self._blocks[key] = (
                None if got is None else np.concatenate([np.zeros(lo - block * CURVE_BLOCK), got])
            )
        row = self._blocks[key]
        return None if row is None else float(row[n - block * CURVE_BLOCK])

    def _value(self, t: str, n: int, g: int) -> float:
        """The oracle's throughput of ``n`` nodes of type ``t`` at global batch ``g`` (0: cannot
        run): from the oracle's ``throughput_curve`` over a block of counts where it has one
        (the search asks a type's counts near one another), else one call (memoised)."""
        v = self._block_value(t, n, g)
        if v is not None:
            self.memo.calls += 1  # one configuration the search used
            return v
        e = self.memo.get(((t, n),), g)
        return e.throughput_sps if e is not None else 0.0

    def upper(self, t: str) -> np.ndarray:
        """``T_t(n)`` where evaluated, else its upper bound (``n = 0..N``)."""
        thr = self.thr[t]
        return np.where(np.isnan(thr), self.ub_best[t], thr)

    def per_node_best(self, t: str) -> float:
        """``max_n T_t(n) / n`` (an upper bound of it while the curve is partly evaluated)."""
        up = self.upper(t)[1:]
        return float(np.max(up / np.arange(1, self.N + 1))) if self.N else 0.0

    def runnable(self, t: str) -> bool:
        """Can ``t`` run alone at some count?  (Exact with full curves; else "possibly".)"""
        if self.full:
            return bool(np.nanmax(self.thr[t][1:], initial=0.0) > 0)
        return bool(self.ub_best[t][1:].max(initial=0.0) > 0)

    def flat(self, t: str) -> list[float]:
        """Every (count, batch) value, count-major (full curves only): dominance pruning's input."""
        return self.vals[t][1:].ravel().tolist()


def hardware_rows(cands: Sequence[Candidate]) -> np.ndarray:
    """One row per candidate such that row(a) >= row(b) element-wise iff a has b's GPU model and
    GPUs per node, a link at least as fast and EFA where b has it (assumption A3: the oracle
    depends on the hardware, and a faster link never slows a cluster down)."""
    sig: dict[tuple[str, int], int] = {}
    rows = []
    for c in cands:
        i = sig.setdefault((c.gpu_model, int(c.gpus_per_node)), len(sig))
        rows.append([float(c.network_gbps or 0.0), float(bool(c.efa)), float(i), -float(i)])
    return np.array(rows, dtype=float).reshape(len(cands), 4)


def combinations(K: int, k: int, block: int = 1 << 16) -> Iterator[np.ndarray]:
    """All ``k``-subsets of ``range(K)`` in lexicographic order, as ``(m, k)`` int arrays of about
    ``block`` rows (whole first members at a time, so at most ``block + C(K-1, k-1)`` rows)."""
    if k < 1 or K < k:
        return
    if k == 1:
        yield np.arange(K).reshape(-1, 1)
        return
    pending: list[np.ndarray] = []
    rows = 0
    for i in range(K - k + 1):
        rest = _all_combinations(K - i - 1, k - 1)
        pending.append(np.column_stack([np.full(len(rest), i), rest + i + 1]))
        rows += len(rest)
        if rows >= block:
            yield np.concatenate(pending)
            pending, rows = [], 0
    if pending:
        yield np.concatenate(pending)


def _within_total(head: np.ndarray, rest: Sequence[np.ndarray], N: int, low: int = 0) -> list[np.ndarray]:
    """The rows of ``meshgrid(head, *rest, indexing="ij")`` (raveled) whose sum is at most ``N``
    (and at least ``low``), in the same order, for one or two ``rest`` arrays sorted ascending --
    without building the rows outside (for three members and hundreds of nodes most of the cube
    is over ``N``, and a mix that only pays off on many nodes has most of it under ``low``)."""
    last = np.asarray(rest[-1])
    if len(rest) == 1:
        pre = [np.asarray(head)]
    else:
        mid = np.asarray(rest[0])
        pre = [np.repeat(head, len(mid)), np.tile(mid, len(head))]
    # every earlier column fixed, the valid counts of the last member are a run of it
    fixed = np.asarray(sum(pre), dtype=np.int64)
    start = (
        np.searchsorted(last, low - fixed, side="left") if low > 0 else np.zeros(len(fixed), dtype=np.int64)
    )
    cnt = np.maximum(np.searchsorted(last, N - fixed, side="right") - start, 0)
    total = int(cnt.sum())
    ends = np.cumsum(cnt)
    j = np.arange(total) - np.repeat(ends - cnt, cnt) + np.repeat(start, cnt)
    return [np.repeat(x, cnt) for x in pre] + [last[j]]


def _all_combinations(K: int, k: int) -> np.ndarray:
    """All ``k``-subsets of ``range(K)`` in lexicographic order; pairs and singles are kept (every
    region asks the same tails again, a few MB in all; read-only: callers build new arrays)."""
    return _kept_combinations(K, k) if k <= 2 else _build_combinations(K, k)


@lru_cache(maxsize=512)
def _kept_combinations(K: int, k: int) -> np.ndarray:
    out = _build_combinations(K, k)
    out.setflags(write=False)
    return out


def _build_combinations(K: int, k: int) -> np.ndarray:
    if k == 1:
        return np.arange(K).reshape(-1, 1)
    if k == 2:
        a, b = np.triu_indices(K, 1)
        return np.column_stack([a, b])
    parts = [
        np.column_stack([np.full(len(rest), i), rest + i + 1])
        for i in range(K - k + 1)
        for rest in (_all_combinations(K - i - 1, k - 1),)
    ]
    return np.concatenate(parts) if parts else np.zeros((0, k), dtype=int)


class MixBounds:
    """Separability / replacement bounds of mixes over the current curves (module docstring)."""

    def __init__(self, curves: Curves) -> None:
        N = curves.N
        self.curves = curves
        self.N = N
        self.tidx = curves.tidx
        self.term: dict[str, np.ndarray] = {}
        self.pnb: dict[str, float] = {}
        for t in curves.types:
            pnb = curves.per_node_best(t)
            self.pnb[t] = pnb
            up = curves.upper(t)
            lin = np.arange(N + 1) * pnb
            term = np.where(up > 0, up, lin)
            if curves.max_workers is not None:
                # more GPUs than the oracle can ever run (every worker needs a sample): no mix either
                gpn = int(curves.reps[t].gpus_per_node)
                term = np.where(np.arange(N + 1) * gpn > curves.max_workers, 0.0, term)
            self.term[t] = term
        # replacement bound: "a's curve is at least b's at every count" -- read off the curves
        # when they are all known, else from the hardware (A3: same GPU model and GPUs per node,
        # a link at least as fast, EFA if b has it)
        self.replacement = True
        types = curves.types
        if types and curves.full:
            F = np.array([np.nan_to_num(curves.thr[t][1:]) for t in types])
            self.dom: np.ndarray = np.asarray((F[:, None, :] >= F[None, :, :]).all(axis=2))
            self.curve_sum = F.sum(axis=1)
        elif types:
            H = hardware_rows([curves.reps[t] for t in types])
            self.dom = np.asarray((H[:, None, :] >= H[None, :, :]).all(axis=2))
            self.curve_sum = np.array([float(curves.upper(t)[1:].sum()) for t in types])
        else:
            self.dom = np.zeros((0, 0), dtype=bool)
            self.curve_sum = np.zeros(0)
        # comm floor (A4): throughput caps of mixes by their all-reduces, per distinct type set and
        # total count (nan: not asked yet), filled as vectors need them
        self.comm = curves.comm_floor is not None
        self._comm_ub: dict[tuple[str, ...], np.ndarray] = {}
        self._total_cap: dict[tuple[str, ...], np.ndarray] = {}
        self._subset_comm: dict[tuple[Any, ...], np.ndarray] = {}
        self._ceiling_terms: dict[str, tuple[float, float, float] | None] = {}
        self._reps: dict[tuple[str, ...], list[int]] = {}
        self.comm_entries = max(16, COMM_CACHE_BYTES // (8 * (N + 1)))
        self.pmax: dict[str, np.ndarray] = {}
        self.rmin: dict[str, np.ndarray] = {}
        for t, term in self.term.items():
            pm = np.zeros(N + 1)
            rm = np.full(N + 1, np.inf)
            with np.errstate(divide="ignore"):
                ratio = np.where(term > 0, np.arange(N + 1) / np.where(term > 0, term, 1.0), np.inf)
            if N >= 2:
                pm[2:] = np.maximum.accumulate(term[2:])
                rm[2:] = np.minimum.accumulate(ratio[2:])
            self.pmax[t], self.rmin[t] = pm, rm

    def refine(self, subset: Sequence[Candidate], counts: Sequence[int]) -> bool:
        """Evaluate the members' curve points ``T_{c_i}(n_i)`` not known yet and tighten their
        separability terms (later bounds use them); whether anything changed."""
        points = [(c.instance_type, int(n)) for c, n in zip(subset, counts, strict=True)]
        merged: dict[int, int] = {}
        for i, r in enumerate(self.reps(subset)):
            merged[r] = merged.get(r, 0) + int(counts[i])
        points += [(subset[r].instance_type, n) for r, n in merged.items() if n <= self.N]
        changed = False
        for t, n in points:
            if not self.curves.known(t, n):
                thr, _ = self.curves.evaluate(t, n)
                if thr > 0 or self.term[t][n] > 0:
                    self.term[t][n] = thr if thr > 0 else n * self.pnb[t]
                changed = True
        return changed

    def reps(self, subset: Sequence[Candidate]) -> list[int]:
        """For each member, the member whose hardware dominates it with the largest curve (itself
        if none): the replacement bound merges every member into its representative."""
        types = tuple(c.instance_type for c in subset)
        hit = self._reps.get(types)
        if hit is not None:
            return hit
        idx = [self.tidx[t] for t in types]
        out: list[int] = []
        for i in range(len(subset)):
            best = i
            for j in range(len(subset)):
                if self.dom[idx[j], idx[i]] and (self.curve_sum[idx[j]], -j) > (
                    self.curve_sum[idx[best]],
                    -best,
                ):
                    best = j
            out.append(best)
        self._reps[types] = out  # hardware and curve sums are fixed for the solve
        return out

    def ub(self, subset: Sequence[Candidate], ns: Sequence[Any], level: int) -> Any:
        """Upper bound on the mix throughput for count vectors ``ns`` (arrays or ints)."""
        sep = sum(self.term[c.instance_type][n] for c, n in zip(subset, ns, strict=True))
        out = sep
        if level >= 2 and self.replacement:
            merged: dict[int, Any] = {}
            for i, r in enumerate(self.reps(subset)):
                merged[r] = merged.get(r, 0) + ns[i]
            if len(merged) < len(subset):
                rep = sum(self.term[subset[r].instance_type][cnt] for r, cnt in merged.items())
                out = np.minimum(sep, rep)
        if level >= 3 and self.comm:
            out = np.minimum(out, self.comm_ub(subset, sum(ns)))
        if level >= 4 and self.curves.total_cap is not None:
            out = np.minimum(out, self.total_cap(subset, sum(ns)))
        return out

    def ub_one(self, subset: Sequence[Candidate], counts: Sequence[int], level: int) -> float:
        """:meth:`ub` of one count vector, in plain floats (the same terms; the search checks
        every mix it evaluates against it)."""
        term = self.term
        sep = 0.0
        for c, n in zip(subset, counts, strict=True):
            sep += float(term[c.instance_type][n])
        out = sep
        if level >= 2 and self.replacement:
            merged: dict[int, int] = {}
            for i, r in enumerate(self.reps(subset)):
                merged[r] = merged.get(r, 0) + int(counts[i])
            if len(merged) < len(subset):
                rep = 0.0
                for r, cnt in merged.items():
                    rep += float(term[subset[r].instance_type][cnt])
                out = min(sep, rep)
        if level >= 3 and self.comm:
            out = min(out, float(self.comm_ub(subset, [int(sum(counts))])[0]))
        if level >= 4 and self.curves.total_cap is not None:
            out = min(out, float(self.total_cap(subset, [int(sum(counts))])[0]))
        return out

    def dilution_ub(self, subset: Sequence[Candidate], ns: Sequence[np.ndarray]) -> np.ndarray:
        """(A5) the oracle's own bound on the mix at one global batch over all its GPUs
        (``mix_throughput_bound``: batch dilution, the balanced split and the all-reduces after
        the slowest backward); ``inf`` where the oracle offers none.  The two groups of one type
        (spot + on-demand) reach it merged, as they reach the oracle."""
        V = len(ns[0])
        if self.curves.mix_bound is None:
            return np.full(V, np.inf)
        merged: dict[str, Any] = {}
        reps: dict[str, Candidate] = {}
        for c, n in zip(subset, ns, strict=True):
            merged[c.instance_type] = merged.get(c.instance_type, 0) + np.asarray(n)
            reps.setdefault(c.instance_type, self.curves.reps.get(c.instance_type, c))
        if len(merged) < 2:
            return np.full(V, np.inf)
        types = sorted(merged)
        out = self.curves.mix_bound([reps[t] for t in types], [merged[t] for t in types], self.curves.grid)
        return np.asarray(out, dtype=float)

    def total_cap(self, subset: Sequence[Candidate], totals: Any) -> np.ndarray:
        """(A5 per total) the oracle's mix bound over every count vector of ``subset`` whose counts
        add up to each total of ``totals`` (:meth:`planner.mix_bound.MixBound.total_cap`): batch
        dilution where the total is small, the slowest member's step at one sample per GPU where
        it is large.  Cached per type set (the groups of one type merged, as in
        :meth:`dilution_ub`) and total, asked only for the totals that vectors reach; ``inf``
        for a subset of one type."""
        assert self.curves.total_cap is not None
        key = tuple(sorted({c.instance_type for c in subset}))
        t = np.asarray(totals, dtype=np.int64)
        if len(key) < 2:
            return np.full(t.shape, np.inf)
        arr = self._total_cap.get(key)
        if arr is None:
            if len(self._total_cap) >= self.comm_entries:
                self._total_cap.clear()  # a cache: asked again when needed
            arr = self._total_cap[key] = np.full(self.N + 1, np.nan)
        vals = arr[t]
        miss = np.isnan(vals)
        if miss.any():
            need = np.unique(t[miss])
            members = [
                self.curves.reps.get(x) or next(c for c in subset if c.instance_type == x) for x in key
            ]
            arr[need] = self.curves.total_cap(members, need, self.curves.grid)
            vals = arr[t]
        return vals

    def cap_of_floor(self, floor_ms: np.ndarray) -> np.ndarray:
        """(A4) ``G_max / floor``: the throughput cap of comm floors (ms; inf where 0, unknown)."""
        with np.errstate(divide="ignore"):
            return np.where(
                floor_ms > 0, self.curves.g_max * 1e3 / np.where(floor_ms > 0, floor_ms, 1.0), np.inf
            )

    def comm_ub(self, subset: Sequence[Candidate], totals: Any) -> np.ndarray:
        """(A4) ``G_max / floor(n)`` for each total node count ``n`` of ``totals``: a mix runs on
        one cluster (fewest GPUs per node, slowest link, slowest GPU, whatever the counts) and
        its iteration takes at least that cluster's all-reduces (``comm_floor_ms`` of the
        oracle); inf where the oracle cannot say."""
        key = tuple(sorted({c.instance_type for c in subset}))
        arr = self._comm_ub.get(key)
        if arr is None:
            if len(self._comm_ub) >= self.comm_entries:
                self._comm_ub.clear()  # a cache: asked again when needed
            arr = self._comm_ub[key] = np.full(self.N + 1, np.nan)
        t = np.asarray(totals, dtype=np.int64)
        vals = arr[t]
        miss = np.isnan(vals)
        if miss.any():
            assert self.curves.comm_floor is not None
            need = np.unique(t[miss])
            floor = np.asarray(self.curves.comm_floor([self.curves.reps[x] for x in key], need), dtype=float)
            arr[need] = self.cap_of_floor(floor)
            vals = arr[t]
        return vals

    def member_tables(
        self,
        usable: Sequence[Candidate],
        k: int,
        maxc: Mapping[Candidate, int],
        lam: Mapping[Candidate, float],
    ) -> dict[str, np.ndarray]:
        """Per-offer terms of the subset bound for subsets of ``k`` (built once per region and k)."""
        N = self.N
        K = len(usable)
        ub1, rho1 = np.zeros(K), np.zeros(K)
        pm1 = np.zeros((K, N + 1))  # prefix max of term over 1..m
        m1 = np.zeros(K, dtype=int)
        for i, c in enumerate(usable):
            m = min(maxc[c], N - (k - 1))
            term = self.term[c.instance_type][1 : m + 1]
            ub1[i] = term.max()
            with np.errstate(divide="ignore"):
                rho1[i] = float(np.min(c.price_per_hour * np.arange(1, m + 1) / term))
            pm1[i, 1 : m + 1] = np.maximum.accumulate(term)
            pm1[i, m + 1 :] = pm1[i, m]
            m1[i] = m
        offers = np.empty(K, dtype=object)
        for i, c in enumerate(usable):
            offers[i] = c
        out = {
            "offers": offers,
            "price": np.array([c.price_per_hour for c in usable]),
            "lam": np.array([lam[c] for c in usable]),
            "ub1": ub1,
            "rho1": rho1,
            "pm1": pm1,
            "m1": m1,
        }
        if self.comm and self.curves.gpu_speed is not None:
            # what the cluster of a mix is made of (planner.oracle.Oracle.cluster): the fewest GPUs
            # per node, the slowest link, EFA only if all have it, the first slowest GPU
            speed_of = {m: self._speed(m) for m in {c.gpu_model for c in usable}}
            out["gpn"] = np.array([float(c.gpus_per_node) for c in usable])
            out["link"] = np.array(
                [float(c.network_gbps) if c.network_gbps is not None else math.nan for c in usable]
            )
            out["efa"] = np.array([float(bool(c.efa)) for c in usable])
            out["speed"] = np.array([speed_of[c.gpu_model] for c in usable])
            code_of = {m: i for i, m in enumerate(sorted(speed_of))}
            out["model"] = np.array([code_of[c.gpu_model] for c in usable], dtype=np.int64)
        if self.replacement:
            out["ti"] = np.array([self.tidx[c.instance_type] for c in usable])
            out["pmax"] = np.array([self.pmax[c.instance_type] for c in usable])
            out["rmin"] = np.array([self.rmin[c.instance_type] for c in usable])
        return out

    def subset_survivors(
        self,
        spec: Spec,
        theta: float,
        tables: Mapping[str, np.ndarray],
        combos: np.ndarray,
        level: int,
        request: Any,
    ) -> tuple[np.ndarray, int, np.ndarray]:
        """The rows of ``combos`` (k-subsets of the offers of ``tables``) that survive the
        subset-level bounds (vectorised over the subsets), how many were pruned, and each
        survivor's throughput cap (A4/A5; inf where none).

        The bounds are applied from the cheapest, each to the rows the previous ones leave:
        separability, then the floor-free A5 ceiling, then replacement, then the comm floor and
        the A5 ceiling with it.  Every test is monotone in its bounds and each later bound is
        at least as tight (a lower cap, a higher rate, hazard or cost bound), so a row an early,
        looser test prunes fails the last one too: the survivors and caps are those of applying
        every bound to every row, at a fraction of the cost (the floor-free ceiling leaves a few
        hundred of the hundreds of thousands of subsets of a "fastest within a budget" request)."""
        k = combos.shape[1]
        total = len(combos)
        if level < 1 or total == 0:
            return combos, 0, np.full(total, np.inf)
        N = self.N
        price, lam_a, ub1, rho1, pm1, m1 = (tables[x] for x in ("price", "lam", "ub1", "rho1", "pm1", "m1"))
        min_rate = price[combos].sum(axis=1)
        cap = spec.cap * (1 + REL) if spec.cap is not None else None
        sep_terms: np.ndarray = np.zeros((total, k))  # separability term of each member (cap-aware)
        most: np.ndarray = np.zeros(total, dtype=np.int64)  # most nodes a vector of the subset can have
        for col in range(k):
            me = combos[:, col]
            if cap is not None:
                # with a $/h cap a member can afford at most (cap - the others' one node) / price nodes
                afford = np.floor((cap - (min_rate - price[me])) / price[me] + 1e-9)
                afford = np.clip(np.minimum(afford, m1[me]), 0, N).astype(int)
                sep_terms[:, col] = pm1[me, afford]
                most += afford
            else:
                sep_terms[:, col] = ub1[me]
                most += m1[me]
        most = np.minimum(most, N)
        ub = sep_terms.sum(axis=1)
        rho = rho1[combos].min(axis=1)
        haz = lam_a[combos].sum(axis=1)
        S, o = request.total_samples, request.startup_overhead_h

        def cost_lb_of(rho: np.ndarray, rate: np.ndarray) -> np.ndarray:
            return np.asarray(rho * S / 3600.0 + rate * o, dtype=float)

        keep = self._subset_keep(spec, theta, ub, min_rate, haz, cost_lb_of(rho, min_rate), request)
        if level >= 4 and self.curves.ceiling_terms is not None and keep.any():
            rows = np.flatnonzero(keep)
            cap0 = self.subset_ceiling(tables, combos[rows], None)
            r = min_rate[rows]
            with np.errstate(divide="ignore"):
                c0 = np.maximum(cost_lb_of(rho[rows], r), r * S / (3600.0 * cap0) + r * o)
            keep[rows] = self._subset_keep(spec, theta, np.minimum(ub[rows], cap0), r, haz[rows], c0, request)
        at = np.flatnonzero(keep)  # from here on, the rows still in
        combos, sep_terms, most = combos[at], sep_terms[at], most[at]
        ub, rho, haz, min_rate = ub[at], rho[at], haz[at], min_rate[at]
        if level >= 2 and self.replacement and len(combos):
            ub, rho = self._replacement(tables, combos, sep_terms, ub, rho, cap)
        cost_lb = cost_lb_of(rho, min_rate)
        keep = self._subset_keep(spec, theta, ub, min_rate, haz, cost_lb, request)
        caps = np.full(len(combos), np.inf)
        if level >= 3 and keep.any():
            # (A4 at subset level, and at level 4 the A5 ceiling) asked only for the rows the
            # bounds above leave
            rows = np.flatnonzero(keep)
            floor = self.subset_comm_floor(tables, combos[rows], most[rows])
            tcap = np.full(len(rows), np.inf) if floor is None else self.cap_of_floor(floor)
            if level >= 4 and self.curves.ceiling_terms is not None:
                tcap = np.minimum(tcap, self.subset_ceiling(tables, combos[rows], floor))
            caps[rows] = tcap
            r = min_rate[rows]
            # any vector pays at least one node of each member, at a throughput of at most the cap
            with np.errstate(divide="ignore"):
                c_lb = np.maximum(cost_lb[rows], r * S / (3600.0 * tcap) + r * o)
            keep[rows] = self._subset_keep(
                spec, theta, np.minimum(ub[rows], tcap), r, haz[rows], c_lb, request
            )
        return combos[keep], total - int(keep.sum()), caps[keep]

    def _replacement(
        self,
        tables: Mapping[str, np.ndarray],
        combos: np.ndarray,
        sep_terms: np.ndarray,
        ub: np.ndarray,
        rho: np.ndarray,
        cap: float | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ub, rho)`` tightened by the replacement bound: members whose hardware another member
        dominates are merged into it (their counts added, the cheaper price)."""
        k, N = combos.shape[1], self.N
        price, rho1, m1 = tables["price"], tables["rho1"], tables["m1"]
        ti, pmax, rmin = tables["ti"], tables["pmax"], tables["rmin"]
        ub, rho = ub.copy(), rho.copy()
        T = ti[combos]
        # dominates[x, y]: member x's hardware dominates member y's, per row
        dominates = {(x, y): self.dom[T[:, x], T[:, y]] for x in range(k) for y in range(k) if x != y}
        merges: list[tuple[int, tuple[int, ...]]] = [(x, (y,)) for x in range(k) for y in range(k) if x != y]
        if k == 3:
            merges += [(x, tuple(y for y in range(k) if y != x)) for x in range(k)]
        for x, ys in merges:
            d = dominates[(x, ys[0])]
            for y in ys[1:]:
                d = d & dominates[(x, y)]
            at = np.flatnonzero(d)  # few rows: the merge is computed on them alone
            if not len(at):
                continue
            C = combos[at]
            X = C[:, x]
            merged = (x, *ys)
            others = [z for z in range(k) if z not in merged]
            smax = np.minimum(N - len(others), sum(m1[C[:, z]] for z in merged))
            pmin = price[C[:, merged[0]]]
            for z in merged[1:]:
                pmin = np.minimum(pmin, price[C[:, z]])
            if cap is not None:
                other_price = price[C[:, others]].sum(axis=1) if others else 0.0
                smax = np.minimum(smax, np.floor((cap - other_price) / pmin + 1e-9))
            smax = np.clip(smax, 0, N).astype(int)
            bound = pmax[X, smax] + (sep_terms[at][:, others].sum(axis=1) if others else 0.0)
            r = pmin * rmin[X, smax]
            if others:
                r = np.minimum(r, rho1[C[:, others]].min(axis=1))
            ub[at] = np.minimum(ub[at], bound)
            rho[at] = np.maximum(rho[at], r)
        return ub, rho

    def subset_ceiling(
        self, tables: Mapping[str, np.ndarray], combos: np.ndarray, floor: np.ndarray | None
    ) -> np.ndarray:
        """(A5 ceiling) for each row of ``combos``, a cap on the oracle's mix bound over all its
        count vectors (:func:`planner.mix_bound.ceiling`: the members' largest step at batch 1,
        paced step and backward share, and the subset's comm floor); ``inf`` where unknown."""
        assert self.curves.mix_ceiling is not None and self.curves.ceiling_terms is not None
        terms = self._offer_ceiling_terms(tables, combos)  # (offers, 3), nan where unknown
        cols = [combos[:, j] for j in range(combos.shape[1])]
        first, paced, beta = (terms[cols[0], x] for x in range(3))
        for c in cols[1:]:  # the members' largest of each (nan, unknown, propagates)
            first = np.maximum(first, terms[c, 0])
            paced = np.maximum(paced, terms[c, 1])
            beta = np.maximum(beta, terms[c, 2])
        unknown = np.isnan(first) | np.isnan(paced) | np.isnan(beta)
        fl = np.zeros(len(combos)) if floor is None else np.where(floor > 0, floor, 0.0)
        out = np.asarray(self.curves.mix_ceiling(first, paced, beta, fl, self.curves.g_max), dtype=float)
        return np.where(unknown, np.inf, out)

    def _offer_ceiling_terms(self, tables: Mapping[str, Any], combos: np.ndarray) -> np.ndarray:
        """The A5 ceiling's terms (:meth:`planner.oracle.Oracle.mix_ceiling_terms`) of every offer
        of ``tables`` that is a member of a row of ``combos`` (nan: unknown, or not asked yet),
        kept with the tables: per instance type, asked only for the members of subsets that get
        this far (each builds the type's step envelope over every batch: milliseconds)."""
        assert self.curves.ceiling_terms is not None
        offers = tables["offers"]
        held = tables.get("_a5")
        if held is None:
            held = (np.full((len(offers), 3), np.nan), np.zeros(len(offers), dtype=bool))
            tables["_a5"] = held  # type: ignore[index]
        terms, asked = held
        present = np.zeros(len(offers), dtype=bool)
        present[combos.ravel()] = True
        for i in np.flatnonzero(present & ~asked).tolist():
            t = offers[i].instance_type
            if t not in self._ceiling_terms:
                self._ceiling_terms[t] = self.curves.ceiling_terms(self.curves.reps[t], self.curves.g_max)
            terms[i] = self._ceiling_terms[t] or (math.nan, math.nan, math.nan)
            asked[i] = True
        return terms

    @staticmethod
    def _subset_keep(
        spec: Spec,
        theta: float,
        ub: np.ndarray,
        min_rate: np.ndarray,
        haz: np.ndarray,
        cost_lb: np.ndarray,
        request: Any,
    ) -> np.ndarray:
        """Which subsets may hold a feasible vector better than ``theta``, from an upper bound on
        their throughput and lower bounds on their rate and cost."""
        _, t_lb, _, good_ub = metrics(ub, min_rate, haz, request)
        keep = np.asarray(np.isfinite(t_lb), dtype=bool)
        if spec.cap is not None:
            keep &= min_rate <= spec.cap * (1 + REL)
        if spec.deadline is not None:
            keep &= t_lb <= spec.deadline * (1 + REL)
        if spec.budget is not None:
            keep &= cost_lb <= spec.budget * (1 + REL)
        if math.isfinite(theta):
            lb = {"cost": cost_lb, "time": t_lb, "throughput": -good_ub}.get(spec.objective, min_rate)
            keep &= lb < lim(theta, spec.tie_tol)
        return keep

    def _speed(self, model: str) -> float:
        """The oracle's ``gpu_speed`` (NaN where it has no datasheet: no cap for such a mix)."""
        assert self.curves.gpu_speed is not None
        try:
            return float(self.curves.gpu_speed(model))
        except (KeyError, TypeError, ValueError):
            return math.nan

    def subset_comm_floor(
        self, tables: Mapping[str, np.ndarray], combos: np.ndarray, most: np.ndarray | None = None
    ) -> np.ndarray | None:
        """(A4 at subset level) for each row of ``combos``, ``min_n floor(n)`` (ms; 0 where the
        oracle cannot say) over the total counts ``n = k..most`` its vectors can have (``most``:
        per row, at most ``N``): ``G_max / that`` is the cap of :meth:`comm_ub` at its loosest.

        A mix's cluster depends on its members only through the fewest GPUs per node, the
        slowest link, whether all have EFA and the first slowest GPU (the comm floor's own cache
        key, :meth:`planner.oracle.Oracle.comm_floor_ms`), so the floors are asked once per
        distinct such signature and ``k`` (dozens to hundreds), for the totals up to the largest
        ``most`` of its rows (extended when a later block needs more), with a subset of that
        signature as the members (:meth:`planner.oracle.Oracle.comm_floor_prefix_min` where the
        oracle has it: it stops early).  ``None`` where the oracle offers no comm floor."""
        if "speed" not in tables or len(combos) == 0:
            return None
        assert self.curves.comm_floor is not None
        k = combos.shape[1]
        rows = np.arange(len(combos))
        speed = tables["speed"][combos]
        slowest = combos[rows, np.argmin(np.nan_to_num(speed, nan=-1.0), axis=1)]  # argmin: the first
        link = tables["link"][combos]
        unknown = np.isnan(link).any(axis=1) | np.isnan(speed).any(axis=1)
        gpn_min = tables["gpn"][combos].min(axis=1)
        link_min = np.where(unknown, -1.0, np.nan_to_num(link).min(axis=1))
        efa_all = tables["efa"][combos].min(axis=1)
        # one integer per signature (np.unique over rows, axis=0, sorts them as bytes: far slower);
        # the slowest member enters by its GPU model, all the comm model sees of it
        _, g_code = np.unique(gpn_min, return_inverse=True)
        l_vals, l_code = np.unique(link_min, return_inverse=True)
        models = tables["model"]
        m_code = models[slowest]
        code = ((g_code.reshape(-1) * len(l_vals) + l_code.reshape(-1)) * 2 + efa_all.astype(np.int64)) * (
            int(models.max()) + 1
        ) + m_code
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        inverse = np.asarray(inverse).reshape(-1)
        offers = tables["offers"]
        most = (
            np.full(len(combos), self.N, dtype=np.int64) if most is None else np.asarray(most, dtype=np.int64)
        )
        upto_of = np.zeros(len(first), dtype=np.int64)  # per signature, the most nodes of its rows
        np.maximum.at(upto_of, inverse, most)
        # prefix minima of the floors over totals k..n per signature (nan: not asked yet or below
        # k; 0 or -inf: the oracle cannot say), then one gather for every row
        table = np.zeros((len(first), self.N + 1))
        for u, (r, upto) in enumerate(zip(first.tolist(), upto_of.tolist(), strict=True)):
            if link_min[r] < 0 or upto < k:
                continue  # a member without a network figure or datasheet: the oracle cannot say
            key = (
                k,
                float(gpn_min[r]),
                float(link_min[r]),
                float(efa_all[r]),
                offers[int(slowest[r])].gpu_model,
            )
            pmin = self._subset_comm.get(key)
            if pmin is None or np.isnan(pmin[upto]):
                pmin = self._subset_floor_prefix([offers[i] for i in combos[r]], upto)
                if len(self._subset_comm) >= self.comm_entries:
                    self._subset_comm.clear()  # a cache (COMM_CACHE_BYTES): asked again when needed
                self._subset_comm[key] = pmin
            table[u] = pmin
        f = table[inverse, most]
        return np.where(f > 0, f, 0.0)  # nan (most < k) and -inf (cannot say): none

    def _subset_floor_prefix(self, members: Sequence[Candidate], upto: int) -> np.ndarray:
        """``pmin[n]``, the least comm floor of ``members``' cluster over totals ``k..n``, for
        ``n = k..upto`` (nan elsewhere)."""
        k = len(members)
        pmin = np.full(self.N + 1, np.nan)
        if self.curves.comm_floor_prefix is not None:
            pmin[k : upto + 1] = self.curves.comm_floor_prefix(members, upto)[k:]
        else:
            assert self.curves.comm_floor is not None
            floor = np.asarray(self.curves.comm_floor(members, np.arange(k, upto + 1)), dtype=float)
            # 0: the oracle cannot say for that total, so no floor from it (nor any larger)
            floor = np.where(floor > 0, floor, -np.inf)
            pmin[k : upto + 1] = np.minimum.accumulate(floor)
        return pmin

    def member_limits(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        maxc: Mapping[Candidate, int],
        bound_pruning: bool,
        theta: float = math.inf,
        request: Any = None,
        ceiling: float = math.inf,
    ) -> list[int]:
        """Largest count of each member: availability, quota, ``N - (k - 1)``, the $/h cap (with
        one node of every other member) and the money: any count vector of the subset runs at
        most ``U = sum_i max_n term_i(n)`` samples/s, so its time is at least
        ``t_min = o + S / (3600 U)`` and its cost at least ``(p_i n_i + sum_{j != i} p_j) t_min``;
        a member count whose cost bound reaches the budget (or, minimising cost, the incumbent)
        cannot be part of a useful vector.  ``ceiling``: a cap on the subset's throughput
        whatever the counts (:meth:`subset_survivors`), which ``U`` never exceeds."""
        k = len(subset)
        ms = [min(maxc[c], self.N - (k - 1)) for c in subset]
        if self.curves.max_workers is not None:
            # every GPU needs a sample: a member's nodes leave room for one node of each other
            gpus = [int(c.gpus_per_node) for c in subset]
            ms = [
                min(m, (self.curves.max_workers - (sum(gpus) - g)) // max(1, g))
                for m, g in zip(ms, gpus, strict=True)
            ]
        cmax = math.inf
        if bound_pruning and request is not None:
            if spec.budget is not None:
                cmax = spec.budget * (1 + REL)
            if spec.objective == "cost" and math.isfinite(theta):
                cmax = min(cmax, lim(theta, spec.tie_tol))
        if math.isfinite(cmax):
            u = sum(
                float(self.term[c.instance_type][1 : m + 1].max(initial=0.0))
                for c, m in zip(subset, ms, strict=True)
            )
            u = min(u, ceiling)
            if u > 0:
                t_min = request.startup_overhead_h + request.total_samples / (3600.0 * u)
                total_p = sum(c.price_per_hour for c in subset)
                ms = [
                    min(
                        m,
                        int(
                            math.floor(
                                (cmax / t_min - (total_p - c.price_per_hour)) / c.price_per_hour + 1e-9
                            )
                        ),
                    )
                    for m, c in zip(ms, subset, strict=True)
                ]
        if spec.cap is not None and bound_pruning:
            total_p = sum(c.price_per_hour for c in subset)
            ms = [
                min(
                    m,
                    int(
                        math.floor(
                            (spec.cap * (1 + REL) - (total_p - c.price_per_hour)) / c.price_per_hour + 1e-9
                        )
                    ),
                )
                for m, c in zip(ms, subset, strict=True)
            ]
        return ms

    def total_limits(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        ms: Sequence[int],
        lam: Mapping[Candidate, float],
        theta: float,
        request: Any,
        ceiling: float = math.inf,
    ) -> tuple[float, np.ndarray | None]:
        """``(ceiling, totals)``: the total node counts ``n`` (a mask over ``0..N``) at which a
        vector of ``subset`` (member ``i`` at ``1..ms[i]`` nodes) may be feasible and beat
        ``theta``, and the subset's throughput cap over them (at most ``ceiling``).

        At total ``n`` a vector runs at most ``C(n)`` samples/s (:meth:`total_cap`, A5 per
        total: on few nodes the global batch leaves each GPU a large batch, on many the slowest
        member's one-sample step and the all-reduces bind), pays at least ``sum_i p_i + (n - k)
        min_i p_i`` per hour and has at least the hazard ``sum_i lam_i + (n - k) min_i lam_i``;
        time, cost and goodput are monotone in the three (:func:`planner.solver.evaluate.metrics`),
        so those bounds rule totals out exactly as the subset bounds rule out subsets.
        ``(ceiling, None)`` where the oracle offers no such cap."""
        if self.curves.total_cap is None or len(subset) < 2:
            return ceiling, None
        k = len(subset)
        top = min(self.N, int(sum(ms)))
        if self.curves.max_workers is not None:
            top = min(top, self.curves.max_workers // max(1, min(int(c.gpus_per_node) for c in subset)))
        totals = np.zeros(self.N + 1, dtype=bool)
        if top < k:
            return ceiling, totals
        n = np.arange(k, top + 1)
        cap = np.minimum(self.total_cap(subset, n), ceiling)
        price = [c.price_per_hour for c in subset]
        hazard = [lam[c] for c in subset]
        rate = sum(price) + (n - k) * min(price)
        haz = sum(hazard) + (n - k) * min(hazard)
        _, t, _, _ = metrics(cap, rate, haz, request)
        keep = self._subset_keep(spec, theta, cap, rate, haz, np.asarray(rate * t, dtype=float), request)
        keep &= cap > 0
        totals[n[keep]] = True
        return (float(cap[keep].max()) if keep.any() else 0.0), totals

    def allowed_counts(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        ms: Sequence[int],
        theta: float,
        request: Any,
        ceiling: float = math.inf,
    ) -> list[np.ndarray]:
        """The counts of each member that can be part of a useful vector, by two separable
        necessary conditions on the separability bound ``U(n) = sum_i term_i(n_i)``:

        * money (budget ``B``, or the incumbent when minimising cost): cost >= rate * S / (3600 U),
          so ``sum_i (p_i n_i S / 3600 - B term_i(n_i)) < 0``;
        * speed (deadline ``D``, or the incumbent when minimising time): time >= o + S / (3600 U),
          so ``sum_i term_i(n_i) >= S / (3600 (D - o))``.

        For ``sum_i g_i(n_i) < c`` a count ``n`` of member ``i`` survives only if
        ``g_i(n) + sum_{j != i} min g_j < c`` (iterated twice).  Beyond a type's scaling knee
        ``g_i`` grows with ``n`` (price grows, throughput does not), so those counts go.

        With a ``ceiling`` ``C`` on the subset's throughput whatever the counts, the time is at
        least ``t_C = o + S / (3600 C)``, so the money also needs ``sum_i p_i n_i <= B / t_C``
        (the rate), and the speed ``C >= S / (3600 (D - o))``."""
        k = len(subset)
        allowed = [np.arange(1, m + 1) for m in ms]
        if request is None:
            return allowed
        S = request.total_samples
        terms = [self.term[c.instance_type][1 : m + 1] for c, m in zip(subset, ms, strict=True)]
        conds: list[tuple[list[np.ndarray], float]] = []
        cmax = spec.budget * (1 + REL) if spec.budget is not None else math.inf
        if spec.objective == "cost" and math.isfinite(theta):
            cmax = min(cmax, lim(theta, spec.tie_tol))
        if math.isfinite(cmax):
            g = [
                c.price_per_hour * np.arange(1, m + 1) * S / 3600.0 - cmax * tm
                for c, m, tm in zip(subset, ms, terms, strict=True)
            ]
            conds.append((g, 0.0))
            if 0 < ceiling < math.inf:
                t_c = request.startup_overhead_h + S / (3600.0 * ceiling)
                rate = [c.price_per_hour * np.arange(1, m + 1) for c, m in zip(subset, ms, strict=True)]
                conds.append((rate, cmax / t_c * (1 + 1e-9)))
        tmax = spec.deadline * (1 + REL) if spec.deadline is not None else math.inf
        if spec.objective == "time" and math.isfinite(theta):
            tmax = min(tmax, lim(theta, spec.tie_tol))
        if math.isfinite(tmax) and tmax > request.startup_overhead_h:
            need = S / (3600.0 * (tmax - request.startup_overhead_h))
            if ceiling < need * (1 - 1e-9):
                return [np.zeros(0, dtype=int) for _ in range(k)]
            conds.append(([-tm for tm in terms], -need))
        if not conds:
            return allowed
        keep = [np.ones(m, dtype=bool) for m in ms]
        for _ in range(2):
            for g, c in conds:
                mins = [float(gi[kp].min()) if kp.any() else math.inf for gi, kp in zip(g, keep, strict=True)]
                total = sum(mins)
                if not math.isfinite(total):
                    return [np.zeros(0, dtype=int) for _ in range(k)]
                slack = 1e-9 * max(1.0, abs(c), *(abs(x) for x in mins))
                for i in range(k):
                    keep[i] &= g[i] + (total - mins[i]) < c + slack
        return [a[kp] for a, kp in zip(allowed, keep, strict=True)]

    def count_vectors(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        counts: Sequence[np.ndarray],
        totals: np.ndarray | None = None,
    ) -> Iterator[list[np.ndarray]]:
        """Count vectors of ``subset`` with ``n_i`` in ``counts[i]``, ``sum n_i <= N`` and the joint
        quotas of members sharing a (market, quota class), one slice at a time (a block of the
        first member's counts when ``k >= 3``); with ``totals`` (a mask over ``0..N``,
        :meth:`total_limits`) only the vectors whose sum it allows."""
        N = self.N
        k = len(subset)
        if any(len(a) == 0 for a in counts):
            return
        low = 0
        if totals is not None:
            allowed_totals = np.flatnonzero(totals)
            if not len(allowed_totals):
                return
            low, N = int(allowed_totals[0]), int(allowed_totals[-1])
        shared: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, c in enumerate(subset):
            shared[qkey(c)].append(i)
        joint = [
            (members, spec.quotas[q])
            for q, members in shared.items()
            if len(members) > 1 and q in spec.quotas
        ]
        rest_rows = math.prod(len(a) for a in counts[1:])
        step = max(1, SLICE_ROWS // max(1, rest_rows)) if k >= 3 else len(counts[0])
        for first in range(0, len(counts[0]), step):
            head = counts[0][first : first + step]
            if k in (2, 3):
                ns = _within_total(head, counts[1:], N, low)
            else:
                grids = np.meshgrid(head, *counts[1:], indexing="ij")
                ns = [g.ravel() for g in grids]
            if not len(ns[0]):
                continue
            mask: np.ndarray = np.asarray(sum(ns) <= N)
            if totals is not None:
                mask &= totals[np.minimum(sum(ns), self.N)]
            if self.curves.max_workers is not None:
                mask &= sum(ns[i] * int(subset[i].gpus_per_node) for i in range(k)) <= self.curves.max_workers
            for members, q in joint:
                used = sum(ns[i] * subset[i].vcpus for i in members)
                mask &= used <= q + 1e-9
            if mask.any():
                yield [x[mask] for x in ns]

    def bounds_of_ub(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        ns: Sequence[np.ndarray],
        ub: np.ndarray,
        lam: Mapping[Candidate, float],
        request: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`vector_bounds` for a throughput bound ``ub`` already known."""
        rate = np.asarray(sum(subset[i].price_per_hour * ns[i] for i in range(len(subset))), dtype=float)
        haz = sum(lam[subset[i]] * ns[i] for i in range(len(subset)))
        _, t, cost, good = metrics(ub, rate, haz, request)
        lb = value_of(spec.objective, t, cost, good, rate)
        return np.asarray(lb, dtype=float), spec.feasible_mask(t, cost, rate)

    def vector_bounds(
        self,
        spec: Spec,
        subset: Sequence[Candidate],
        ns: Sequence[np.ndarray],
        lam: Mapping[Candidate, float],
        level: int,
        request: Any,
        ceiling: float = math.inf,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(lower bound on the objective value, possibly feasible)`` of each count vector
        (``ceiling``: a cap on the subset's throughput whatever the counts)."""
        ub = np.minimum(self.ub(subset, ns, level), ceiling)
        rate = np.asarray(sum(subset[i].price_per_hour * ns[i] for i in range(len(subset))), dtype=float)
        haz = sum(lam[subset[i]] * ns[i] for i in range(len(subset)))
        _, t, cost, good = metrics(ub, rate, haz, request)
        lb = value_of(spec.objective, t, cost, good, rate)
        return np.asarray(lb, dtype=float), spec.feasible_mask(t, cost, rate)

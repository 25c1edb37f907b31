"""An upper bound on the throughput of a mix of instance types under the product oracle
(:class:`planner.oracle.Oracle`), for many count vectors at once: what lets the solver's
branch and bound (:mod:`planner.solver.search`) rule out a mix before asking the oracle for it.

The solver's other mix bounds (separability, replacement, comm floor: A1-A4 of
:mod:`planner.solver.candidates`) give each group its own best batch.  A mix runs one global
batch ``G`` over all its GPUs, so each GPU gets a smaller, less efficient batch than it would
alone (batch dilution), and its all-reduces wait for the slowest worker's backward: this bound
follows the oracle's batch split and deterministic timeline for that (A5, see
:meth:`MixBound.__call__`).  It mirrors how :meth:`planner.oracle.Oracle._estimate` adjusts the
phase times on more than one GPU (``1 + κ`` on backward, ``δ`` per input element on the
optimizer, times :func:`planner.oracle.host_share` where the oracle has it); the solver checks
every mix it evaluates against the bound and falls back to the weaker bounds on a violation,
and ``tests/planner/test_mix_bound.py`` checks it against the oracle on random mixes.

The bound asks the oracle only what :class:`BoundOracle` lists (typed methods: a renamed one
fails in mypy, not as a silent default), so this module imports nothing of ``planner.oracle``,
which imports it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from planner.hardware import Cluster
    from planner.input_pipeline import InputPipeline
    from planner.offers import Candidate
    from planner.perf.compute import PhaseTimes


@runtime_checkable
class BoundOracle(Protocol):
    """What the bound asks of the product oracle (:class:`planner.oracle.Oracle` is one; the
    solver tests for it with ``isinstance`` before it asks :meth:`MixBound.total_cap`)."""

    samples: int  # > 0: the Monte-Carlo oracle, which this bound does not cover

    @property
    def pipeline(self) -> InputPipeline | None: ...

    def max_batch(self, model: str) -> int: ...

    def phases(self, model: str, batch: int) -> PhaseTimes | None: ...

    def phases_many(self, model: str, batches: Sequence[int]) -> None: ...

    def multi_gpu_terms(self) -> tuple[float, float]: ...

    def host_share_of(self, candidate: Candidate) -> float: ...

    def input_elements(self) -> int: ...

    def profiled_layout(self) -> bool: ...

    def bucket_ready_fractions(self) -> list[float]: ...

    def cluster(self, config: tuple[tuple[Candidate, int], ...]) -> Cluster: ...

    def allreduce_p50_ms(self, cluster: Cluster) -> list[float]: ...

    def comm_floor_ms(self, members: Sequence[Candidate], nodes: np.ndarray) -> np.ndarray: ...


class MixBound:
    """:meth:`__call__` for one oracle, with its per-type step envelopes and per-cluster
    all-reduce sums cached (they depend on the oracle's workload and models only)."""

    def __init__(self, oracle: BoundOracle) -> None:
        self.oracle = oracle
        self._env: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, float] | None] = {}
        self._suffix: dict[tuple[Any, ...], np.ndarray] = {}
        # members -> the cluster they run on at their fewest nodes (None: unknown); only the node
        # count of a larger cluster of the same members differs (planner.oracle.Oracle.cluster)
        self._base: dict[tuple[Any, ...], Cluster | None] = {}

    def _envelopes(
        self, members: Sequence[Candidate], gpn: Sequence[int], gmax: int
    ) -> list[tuple[np.ndarray, np.ndarray, float]] | None:
        """Each member's :meth:`envelope` up to the most samples one of its GPUs can get at the
        largest batch ``gmax`` (``gmax`` less the other groups' one sample each, over its GPUs);
        ``None`` when one cannot say."""
        envs = []
        for c, per in zip(members, gpn, strict=True):
            env = self.envelope(c, 1 + max(0, gmax - per - 1) // per)
            if env is None:
                return None
            envs.append(env)
        return envs

    def envelope(self, candidate: Candidate, bmax: int) -> tuple[np.ndarray, np.ndarray, float] | None:
        """``(compute, paced, beta)`` of one instance type in a multi-GPU cluster, per-GPU batch
        ``b = 0..min(b_max, bmax)``: ``compute[b]`` the lower monotone envelope (``min`` over
        ``b' >= b``) of the κ-, δ-adjusted ``optimizer + forward + backward`` of
        :meth:`planner.oracle.Oracle._estimate`, ``paced[b]`` the same of ``max(compute, the node's loaders' time)``
        (``inf`` where the phases are unknown; index 0 is 0), ``beta`` the largest share of the
        adjusted backward in the adjusted step over those batches.  ``None``: no datasheet."""
        model, gpn = candidate.gpu_model, int(candidate.gpus_per_node)
        pipeline = self.oracle.pipeline
        ceiling = pipeline.ceiling(candidate.vcpus, gpn) if pipeline else math.inf
        share = float(self.oracle.host_share_of(candidate))
        key = (model, gpn, ceiling, share, int(bmax))
        if key in self._env:
            return self._env[key]
        try:
            top = min(self.oracle.max_batch(model), int(bmax))
        except KeyError:
            self._env[key] = None
            return None
        kappa, input_ns = self.oracle.multi_gpu_terms()
        elements = self.oracle.input_elements()
        self.oracle.phases_many(model, range(1, top + 1))  # every batch's phases in one pass
        b = np.arange(top + 1)
        table = np.zeros((top + 1, 3))  # (optimizer, forward, backward) at each batch
        known = np.zeros(top + 1, dtype=bool)
        for size in range(1, top + 1):
            try:
                phases = self.oracle.phases(model, size)
            except KeyError:
                phases = None
            if phases is not None:
                table[size] = (phases.optimizer, phases.forward, phases.backward)
                known[size] = True
        # the oracle's adjusted step, as _estimate computes it, at every batch at once
        sync_ms = input_ns * share * elements * b / 1e6
        bwd = table[:, 2] * (1 + kappa)
        step = ((table[:, 0] + sync_ms) + table[:, 1]) + bwd
        comp = np.where(known, step, np.inf)
        paced = np.where(known, np.maximum(step, b * gpn / ceiling * 1e3), np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = np.where(known & (step > 0), bwd / np.where(step > 0, step, 1.0), 0.0)
        beta = max(0.0, float(shares.max(initial=0.0)))
        comp[0] = paced[0] = 0.0
        out = (
            np.minimum.accumulate(comp[::-1])[::-1].copy(),
            np.minimum.accumulate(paced[::-1])[::-1].copy(),
            min(1.0, beta),
        )
        self._env[key] = out
        return out

    def ceiling_terms(self, candidate: Candidate, gmax: int) -> tuple[float, float, float] | None:
        """``(c(1), paced(1), beta)`` of one instance type (:meth:`envelope` with the batch cap
        :meth:`__call__` gives it at a largest batch ``gmax``), what :func:`ceiling` needs; ``None``
        where this bound cannot say (no datasheet, no finite step time, the Monte-Carlo oracle)."""
        if self.oracle.samples:
            return None
        per = int(candidate.gpus_per_node)
        env = self.envelope(candidate, 1 + max(0, int(gmax) - per - 1) // per)
        if env is None or len(env[0]) < 2 or not (math.isfinite(env[0][1]) and math.isfinite(env[1][1])):
            return None
        return float(env[0][1]), float(env[1][1]), float(env[2])

    def comm_suffix(self, members: Sequence[Candidate], nodes: int) -> np.ndarray | None:
        """``[sum_{j >= k} allreduce_j for k = 0..K-1]`` (ms) of the cluster ``members`` run on with
        ``nodes`` nodes (it does not depend on how they split), or ``None`` where unknown."""
        base = self._cluster(members, nodes)
        if base is None:
            return None
        key = (nodes, base.gpus_per_node, base.network_gbps, base.efa, base.device)
        hit = self._suffix.get(key)
        if hit is None:
            cluster = base if base.nodes == nodes else dataclasses.replace(base, nodes=int(nodes))
            comm = self.oracle.allreduce_p50_ms(cluster)
            hit = self._suffix[key] = np.cumsum(np.array(comm[::-1], dtype=float))[::-1].copy()
        return hit

    def _cluster(self, members: Sequence[Candidate], nodes: int) -> Cluster | None:
        """The oracle's cluster of ``members`` (``None``: unknown) with every field of the one on
        ``nodes`` nodes but, perhaps, the node count.  The cluster depends on the counts only
        through their total (fewest GPUs per node, slowest link, EFA for all, the first slowest
        GPU: :meth:`planner.oracle.Oracle.cluster`), so the members' cluster on their fewest nodes
        is built once: the bound asks for every total of every block of rows it bounds."""
        if len(members) < 2 or nodes < 2:  # a link only from two nodes on
            config = tuple((c, 1) for c in members[:-1]) + ((members[-1], nodes - len(members) + 1),)
            try:
                return self.oracle.cluster(config)
            except (KeyError, TypeError, ValueError):
                return None
        key = tuple(members)
        if key not in self._base:
            try:
                self._base[key] = self.oracle.cluster(tuple((c, 1) for c in members))
            except (KeyError, TypeError, ValueError):
                self._base[key] = None
        return self._base[key]

    def _comm_terms(
        self, members: Sequence[Candidate], totals: np.ndarray, beta: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(suffix, coef)``: per distinct total of ``totals`` (sorted, unique) the all-reduce
        suffix sums ``suffix[i, k]`` (ms; :meth:`comm_suffix`) and per bucket ``k`` the share
        ``coef[k] = 1 - (1 - f_k) beta`` of the slowest step by which bucket ``k`` is ready; with
        a profiled bucket layout the comm floor alone, after ``1 - beta`` of the step."""
        if self.oracle.profiled_layout():
            floors = np.asarray(self.oracle.comm_floor_ms(members, totals), dtype=float)
            return floors[:, None], np.array([1.0 - beta])
        rows = [self.comm_suffix(members, int(n)) if n >= len(members) else None for n in totals.tolist()]
        K = max((len(r) for r in rows if r is not None), default=0)
        suffix = np.zeros((len(totals), max(K, 1)))
        for i, r in enumerate(rows):
            if r is not None and len(r):
                suffix[i, : len(r)] = r
        fractions = self.oracle.bucket_ready_fractions()
        coef = np.array([1.0 - (1.0 - f) * beta for f in fractions] or [1.0])
        if len(coef) != suffix.shape[1]:
            coef = np.ones(suffix.shape[1])
            suffix = np.zeros_like(suffix)
        return suffix, coef

    def __call__(
        self, members: Sequence[Candidate], counts: Sequence[np.ndarray], grid: Sequence[int]
    ) -> np.ndarray:
        """An upper bound on ``max_G self(config, G).throughput_sps`` over the batches ``G`` of
        ``grid`` for every count vector ``(counts[0][v], counts[1][v], ...)`` of a mix of the
        distinct instance types ``members`` (each with at least one node; numpy, all vectors at
        once); ``inf`` where it cannot say (the Monte-Carlo oracle, a GPU without datasheet).

        Why it holds, for one ``G`` (``w_i`` GPUs of type ``i``, ``W = sum w_i``): the split gives
        every GPU of type ``i`` a batch ``b_i >= 1`` with ``sum w_i b_i = P``, ``G - max w_i < P``
        (:meth:`planner.oracle.Oracle.split` hands back whole groups' samples until the surplus is <= 0), and the
        throughput is ``min(P, G) / iteration``.  The deterministic timeline's iteration is at
        least every worker's adjusted ``optimizer + forward + backward`` (:meth:`envelope`,
        ``c_i(b_i)``), so at least ``tau* = min { tau : sum_i w_i B_i(tau) >= G - max w_i + 1 }``
        with ``B_i(tau)`` the largest batch whose envelope is <= ``tau`` (the batch dilution of a
        mix: the same ``G`` over more GPUs gives each a smaller, less efficient batch) and at
        least ``max_i c_i(1)``; with the loaders' floor (:meth:`planner.oracle.Oracle._input_floor`) the same holds
        for ``paced``.  The all-reduce of bucket ``k`` starts once every worker's backward has
        produced a fraction ``f_k`` of it, and the slowest worker (end ``>= tau*``) has done its
        optimizer and forward by then: ``ready_k >= tau* (1 - (1 - f_k) beta)``; the buckets run
        one after another, so ``iteration >= ready_k + sum_{j >= k} allreduce_j`` for every
        ``k`` (with a profiled bucket layout only ``k = 0`` and the smallest layout's sum, as in
        :meth:`planner.oracle.Oracle.comm_floor_ms`)."""
        ns = [np.asarray(n, dtype=np.int64) for n in counts]
        V = len(ns[0]) if ns else 0
        if self.oracle.samples or not members or V == 0:
            return np.full(V, np.inf)
        grid = sorted({int(g) for g in grid})
        gpn = [int(c.gpus_per_node) for c in members]
        gmax = grid[-1]
        envs = self._envelopes(members, gpn, gmax)
        if envs is None:
            return np.full(V, np.inf)
        beta = max(e[2] for e in envs)
        w = [n * p for n, p in zip(ns, gpn, strict=True)]
        W = sum(w)
        wmax = np.maximum.reduce(w) if len(w) > 1 else w[0]
        totals = sum(ns)
        # all-reduce terms per distinct total node count
        uniq, inv = np.unique(totals, return_inverse=True)
        suffix, coef = self._comm_terms(members, uniq, beta)
        suffix_v = suffix[inv]
        best = np.zeros(V)
        for which in (0, 1):  # 0: compute alone (the timeline terms), 1: with the loaders' floor
            tabs = [e[0] if which == 0 else e[1] for e in envs]
            values = np.unique(np.concatenate([t[1:][np.isfinite(t[1:])] for t in tabs]))
            if not len(values):
                return np.zeros(V)
            # B_i at every candidate tau (tau* is one of the envelopes' values)
            Bs = [np.searchsorted(t[1:], values, side="right") for t in tabs]
            first = max(float(t[1]) for t in tabs)
            steps = max(1, int(math.ceil(math.log2(len(values) + 1))) + 1)
            taus = []
            for g in grid:
                need = g - wmax + 1
                lo = np.zeros(V, dtype=np.int64)
                hi = np.full(V, len(values) - 1, dtype=np.int64)
                for _ in range(steps):
                    mid = (lo + hi) // 2
                    f = sum(wi * B[mid] for wi, B in zip(w, Bs, strict=True))
                    ge = f >= need
                    hi = np.where(ge, mid, hi)
                    lo = np.where(ge, lo, np.minimum(mid + 1, hi))
                full = sum(wi * B[-1] for wi, B in zip(w, Bs, strict=True))
                tau = np.where(full >= need, np.maximum(values[lo], first), np.inf)
                tau = np.where(W <= g, tau, np.inf)
                taus.append(tau)
            if which == 0:
                comp_taus = taus
            else:
                for g, t_full, t_comp in zip(grid, taus, comp_taus, strict=True):
                    comm = (coef[None, :] * t_comp[:, None] + suffix_v).max(axis=1)
                    it = np.maximum(t_full, np.where(np.isfinite(t_comp), comm, np.inf))
                    with np.errstate(divide="ignore"):
                        thr = np.where(np.isfinite(it) & (it > 0), g * 1e3 / np.where(it > 0, it, 1.0), 0.0)
                    best = np.maximum(best, np.where(it > 0, thr, np.inf))
        # a hair above: the bound must not fall below the timeline's own rounding
        return best * (1 + 1e-12)

    def total_cap(self, members: Sequence[Candidate], totals: np.ndarray, grid: Sequence[int]) -> np.ndarray:
        """For each total node count ``n`` of ``totals``, a bound on :meth:`__call__` at every
        count vector of the distinct types ``members`` (each at least one node) whose counts add
        up to ``n``: one array over the totals, asked once per type set, where :meth:`__call__`
        needs each vector (a 3-type mix on 512 nodes has tens of millions).

        Why it holds: the vector's GPUs number ``W <= W_hi(n) = sum_i g_i + (n - k) max_i g_i``
        (``g_i`` GPUs per node), and at ``G`` the split needs ``sum_i w_i B_i(tau) >= G - max w_i
        + 1 >= G - W + 1``, so some member takes a batch of at least ``m = ceil((G + 1) / W) - 1
        >= ceil((G - W_hi + 1) / W_hi)`` per GPU by ``tau*``: ``tau* >= min_i c_i(m)`` (and
        ``>= max_i c_i(1)``, as there), on both envelopes.  Those ``tau*`` and the all-reduce
        suffixes at ``n`` (which depend on the total only) bound the iteration exactly as in
        :meth:`__call__`, and ``G`` is out where even the fewest GPUs of total ``n``,
        ``W_lo(n) = sum_i g_i + (n - k) min_i g_i``, exceed it.  ``inf`` where it cannot say, 0
        for a total below ``k`` (no vector has it)."""
        n = np.asarray(totals, dtype=np.int64)
        V, k = len(n), len(members)
        if self.oracle.samples or k == 0 or V == 0:
            return np.full(V, np.inf)
        grid = sorted({int(g) for g in grid})
        gpn = [int(c.gpus_per_node) for c in members]
        gmax = grid[-1]
        envs = self._envelopes(members, gpn, gmax)
        if envs is None:
            return np.full(V, np.inf)
        beta = max(e[2] for e in envs)
        valid = n >= k
        n_ok = np.where(valid, n, k)
        w_hi = sum(gpn) + (n_ok - k) * max(gpn)
        w_lo = sum(gpn) + (n_ok - k) * min(gpn)
        uniq, inv = np.unique(n_ok, return_inverse=True)
        suffix, coef = self._comm_terms(members, uniq, beta)
        suffix_v = suffix[inv]
        taus: list[list[np.ndarray]] = []
        for which in (0, 1):  # as in __call__: compute alone, then with the loaders' floor
            tabs = [e[0] if which == 0 else e[1] for e in envs]
            first = max(float(t[1]) for t in tabs)
            row = []
            for g in grid:
                m = np.maximum(1, -(-(g - w_hi + 1) // w_hi))  # ceil, at least one sample
                tau = np.full(V, np.inf)
                for t in tabs:
                    tau = np.where(m < len(t), np.minimum(tau, t[np.minimum(m, len(t) - 1)]), tau)
                tau = np.maximum(tau, first)
                row.append(np.where(w_lo <= g, tau, np.inf))
            taus.append(row)
        best = np.zeros(V)
        for g, t_comp, t_full in zip(grid, taus[0], taus[1], strict=True):
            comm = (coef[None, :] * t_comp[:, None] + suffix_v).max(axis=1)
            it = np.maximum(t_full, np.where(np.isfinite(t_comp), comm, np.inf))
            with np.errstate(divide="ignore"):
                thr = np.where(np.isfinite(it) & (it > 0), g * 1e3 / np.where(it > 0, it, 1.0), 0.0)
            best = np.maximum(best, np.where(it > 0, thr, np.inf))
        return np.where(valid, best * (1 + 1e-12), 0.0)


def ceiling(first_ms: Any, paced_ms: Any, beta: Any, floor_ms: Any, gmax: int) -> np.ndarray:
    """A bound on what :meth:`MixBound.__call__` can give any count vector of a mix, from its
    members' largest ``c(1)`` (``first_ms``), ``paced(1)`` (``paced_ms``) and ``beta``
    (:meth:`MixBound.ceiling_terms`) and a floor on the sum of its all-reduces at any total it
    can have (``floor_ms``, 0 where unknown): at any ``G <= gmax`` the iteration is at least
    ``tau*`` over the paced envelopes, which is at least ``paced_ms``, and at least
    ``(1 - beta) tau* + floor`` over the compute ones, with ``tau* >= first_ms``; so
    ``T <= gmax / max(paced_ms, (1 - beta) first_ms + floor_ms)`` whatever the counts."""
    first, paced = np.asarray(first_ms, dtype=float), np.asarray(paced_ms, dtype=float)
    it = np.maximum(
        paced, (1.0 - np.minimum(1.0, beta)) * first + np.maximum(np.asarray(floor_ms, dtype=float), 0.0)
    )
    with np.errstate(divide="ignore"):
        return np.where(it > 0, gmax * 1e3 / np.where(it > 0, it, 1.0) * (1 + 1e-12), np.inf)


def mix_bound(oracle: BoundOracle) -> MixBound:
    """The :class:`MixBound` of ``oracle`` (one per oracle, kept on it)."""
    found = oracle.__dict__.get("_mix_bound")
    if not isinstance(found, MixBound) or found.oracle is not oracle:
        found = MixBound(oracle)
        oracle.__dict__["_mix_bound"] = found
    return found

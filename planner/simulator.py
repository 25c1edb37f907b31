"""DDP iteration simulator (steady state), deterministic core plus Monte-Carlo over the spreads.

Timeline of one steady-state iteration of ``W`` workers and ``K`` gradient buckets
(bucket 0 is all-reduced first).  Worker ``w`` runs its optimizer step of the previous
iteration, then forward, then backward::

    b_w        = opt_w + fwd_w                       (backward start)
    r_{w,k}    = b_w + f_{w,k} · bwd_w                (bucket k ready on w; f = ready fraction)
    R_k        = max_w r_{w,k}                        (the slowest worker gates every bucket)
    s_k        = max(R_k, e_{k−1}),  e_k = s_k + c_k  (all-reduces run one at a time, in order)
    T          = max(max_w (b_w + bwd_w), e_{K−1}) + tail

``c_k`` is the all-reduce time of bucket ``k`` on the cluster and ``tail`` the DDP work after
the last all-reduce (averaging and copying gradients back; default 0).  ``T`` is the time
between two consecutive "all gradients reduced" instants, i.e. the iteration period; for
identical workers it equals ``fwd + [backward ∥ all-reduce] + opt``.  Starting the clock at
the optimizer rather than at forward lets a worker with a short optimizer step start its
forward earlier, as it does in a real run.

Contention.  On GPUs (NCCL) the all-reduce runs beside the compute kernels and neither slows
the other noticeably: the default.  On CPUs (gloo) the all-reduce is executed by a thread that
competes with the backward pass for the same cores.  :class:`Contention` gives, per bucket, the
speed of the all-reduce and of the backward *while both run*, as fractions of their speed alone
(``comm_speed``, ``compute_speed``); the timeline is then simulated event by event.  Two ways to
get them: measured — all-reduce time alone over all-reduce time while every core computes, and
the compute rate with over without the all-reduce (what ``bench/accuracy_local.py`` does) —
or :meth:`Contention.from_cpu_share` for a thread that needs a fraction ``σ`` of a core under a
fair scheduler: the all-reduce gets ``min(σ, ½)`` of the core, i.e. speed ``min(σ, ½)/σ``, the
backward the rest, ``1 − min(σ, ½)``.  ``σ = 1`` conserves work: both then cost their sum.
:meth:`Contention.from_comm_profile` takes ``σ`` per bucket from the comm profile, whose agent
measures it on CPUs as process CPU time over wall time of each all-reduce: over a 1 Gbit/s link
σ is 0.06–0.35 and the all-reduce overlaps the backward almost freely.  On loopback it measured
0.7–1.0 beside an idle peer, but in training that peer computes on a busy core too, so the
waiting is CPU work as well: ``same_host=True`` takes ``σ = 1`` there.

Monte-Carlo.  Each phase of each worker is scaled by ``exp(s·z)`` with ``z ~ N(0, 1)`` and
``s`` the phase's relative spread (median preserving); the three ``z`` of one worker share
the profile's phase correlation ``ρ`` (``PhaseSpread.correlation``; one factor model
``z_p = √ρ·c + √(1−ρ)·e_p`` with ``c, e_p ~ N(0, 1)`` independent), independent between
workers.  Each all-reduce is log-normal with median ``p50`` and ``σ = ln(p90/p50) / 1.2816``,
or, where the measured times of its size are given (``CommTime.ratios``), ``p50`` times one of
their ratios to their median drawn at random (a bootstrap of the measured distribution).
Two factors common to a whole iteration — every phase of every worker, every all-reduce and
the tail — follow, each one draw per sample:

* ``exp(s_run·z)``, the machine's drift between runs (``run_spread``; 0 by default):
  per-iteration noise averages out over a run, drift does not, so without it the predicted
  p90 only covers the iterations of a run that happens to sit at the profile's speed.
  ``s_run`` comes from repeated profiles (:func:`planner.perf.compute.run_spread`);
* ``exp(s_it·z)``, per-iteration noise of the training loop that a compute profile does not
  see (``iteration_spread``; 0 by default): DDP's own work (gradient copies, hooks, the
  buffer broadcast that couples the ranks every forward), the allocator.  It is measured as
  the spread of a DDP run whose all-reduces are no-ops beyond the spread this simulation
  gives that run: ``s_it² = s_no-op² − s_sim²`` (``bench/accuracy_local.py``).

Scaling every duration of a sample by one factor scales its iteration time by it (the
timeline is homogeneous of degree 1; contention speeds are ratios), so both factors widen
the distribution of whole iterations.  Draws use ``numpy.random.default_rng(seed)``; a zero
``ρ``, ``run_spread`` or ``iteration_spread`` leaves the other draws as they were.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from planner.hardware import Cluster
from planner.perf.comm import CommModel, CommQuery, time_ratios
from planner.perf.compute import BucketSpec, ComputeModel, ComputeRangeError, PhaseTimes, interpolate
from planner.profiles import CommProfile

Z90 = 1.2815515655446004
COMM_BOUND_SHARE = 0.2  # exposed communication ≥ 20 % of the iteration → "communication"


@dataclass(frozen=True)
class WorkerLoad:
    """What one worker computes in an iteration."""

    phases: PhaseTimes
    buckets: tuple[BucketSpec, ...]
    batch_size: int
    device: str = ""
    tail_ms: float = 0.0


@dataclass(frozen=True)
class CommTime:
    """All-reduce time of one bucket: median and 90th percentile (ms).

    ``ratios``: measured times of single all-reduces over their median (e.g.
    :func:`planner.perf.comm.time_ratios`); when given, the Monte-Carlo draws ``p50 · ratio``
    from them instead of a log-normal — gloo's small messages on loopback take either ~0.4 ms
    or ~3–5 ms, a two-mode distribution that no log-normal through p50 and p90 reproduces.
    """

    p50_ms: float
    p90_ms: float | None = None
    link: str = ""
    ratios: tuple[float, ...] = ()

    @property
    def sigma(self) -> float:
        if not self.p90_ms or self.p50_ms <= 0 or self.p90_ms <= self.p50_ms:
            return 0.0
        return math.log(self.p90_ms / self.p50_ms) / Z90


@dataclass(frozen=True)
class Contention:
    """Speeds (fractions of solo speed) of one bucket's all-reduce and of the backward while both run."""

    comm_speed: float = 1.0
    compute_speed: float = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.comm_speed <= 1 and 0 < self.compute_speed <= 1):
            raise ValueError(
                f"contention speeds must be in (0, 1], got {self.comm_speed}, {self.compute_speed}"
            )

    @classmethod
    def from_cpu_share(cls, share: float) -> Contention:
        """Fair-share model for an all-reduce needing ``share`` of a core (see module docstring)."""
        if share <= 0:
            return cls()
        share = min(share, 1.0)
        grant = min(share, 0.5)
        return cls(grant / share, 1.0 - grant)

    @classmethod
    def from_comm_profile(
        cls, profile: CommProfile, sizes: Sequence[int], *, same_host: bool = False
    ) -> list[Contention]:
        """Per bucket size: :meth:`from_cpu_share` with the CPU share the comm profile measured
        (``cpu_share`` of its samples, interpolated linearly in log size, clamped at the ends).

        For CPU ranks with no spare core (one rank per core): the all-reduce then competes with
        the backward for that core. A profile without CPU shares (NCCL on GPUs) gives free
        overlap.

        ``same_host``: the ranks share one host's cores and talk through its memory (loopback).
        What an all-reduce waits for there is its peer's CPU work, which in training competes
        with the peer's backward on a busy core just as this rank's part does; the waiting the
        profile measured beside an idle peer (share 0.7–0.95 here) is then CPU work too, and the
        whole all-reduce is CPU-bound (share 1: all-reduce and backward cost their sum). Measured
        here: real-minus-no-op DDP periods are 1.0–1.1× the all-reduces alone for resnet18 and
        alexnet, where the measured shares predicted 0.85–0.95×. Over a real link (a shaped veth
        pair) the waiting is for the wire and overlaps the backward: the measured share holds.
        """
        points = sorted((s.size_bytes, s.cpu_share) for s in profile.samples if s.cpu_share is not None)
        if not points:
            return [cls()] * len(sizes)
        if same_host:
            return [cls.from_cpu_share(1.0)] * len(sizes)
        log_sizes, shares = [math.log(x) for x, _ in points], [y for _, y in points]
        return [cls.from_cpu_share(interpolate(math.log(size), log_sizes, shares)) for size in sizes]

    @property
    def free(self) -> bool:
        return self.comm_speed >= 1.0 and self.compute_speed >= 1.0


@dataclass(frozen=True)
class Breakdown:
    """Where the (median-input) iteration goes, ms; the parts add up to the iteration time."""

    forward: float
    backward: float
    optimizer: float
    exposed_communication: float
    tail: float = 0.0
    total_communication: float = 0.0


@dataclass(frozen=True)
class SimulationResult:
    iteration_ms_p50: float
    iteration_ms_p90: float
    iteration_ms_mean: float
    throughput_samples_s: float
    breakdown: Breakdown
    bottleneck: str
    bottleneck_link: str
    per_worker_batch: tuple[int, ...]
    global_batch: int
    slowest_worker: int
    deterministic_ms: float
    samples: int = 0
    sources: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Timeline:
    """Deterministic timeline: the iteration period and the all-reduce schedule."""

    iteration_ms: float
    backward_end_ms: float
    comm_start_ms: tuple[float, ...]
    comm_end_ms: tuple[float, ...]
    critical_worker: int


# --------------------------------------------------------------------------- core


ContentionSpec = Contention | Sequence[Contention] | None


def timeline(
    workers: Sequence[WorkerLoad], comm_ms: Sequence[float], *, contention: ContentionSpec = None
) -> Timeline:
    """Deterministic iteration with the median phase and all-reduce times."""
    opt = [w.phases.optimizer for w in workers]
    fwd = [w.phases.forward for w in workers]
    bwd = [w.phases.backward for w in workers]
    tail = max((w.tail_ms for w in workers), default=0.0)
    fractions = _ready_fractions(workers)
    return _run(opt, fwd, bwd, fractions, list(comm_ms), tail, _contentions(contention, len(comm_ms)))


def simulate_iteration(
    workers: Sequence[WorkerLoad],
    comm: Sequence[CommTime | float],
    *,
    samples: int = 2000,
    seed: int = 0,
    contention: ContentionSpec = None,
    run_spread: float = 0.0,
    iteration_spread: float = 0.0,
) -> SimulationResult:
    """Monte-Carlo simulation of one DDP iteration; ``comm`` (and a sequence ``contention``)
    has one entry per bucket; ``run_spread`` is the relative run-to-run drift,
    ``iteration_spread`` the training loop's own per-iteration noise (module docstring)."""
    for name, value in (("run_spread", run_spread), ("iteration_spread", iteration_spread)):
        if not 0.0 <= value <= 1.0:  # also refuses NaN
            raise ValueError(f"simulate: {name} must be in [0, 1], got {value}")
    if not workers:
        raise ValueError("simulate: at least one worker is needed")
    comm_t = [c if isinstance(c, CommTime) else CommTime(float(c)) for c in comm]
    n_buckets = len(workers[0].buckets)
    if len(comm_t) != n_buckets:
        raise ValueError(f"simulate: {len(comm_t)} comm times given for {n_buckets} buckets")
    det = timeline(workers, [c.p50_ms for c in comm_t], contention=contention)
    cont = _contentions(contention, n_buckets)
    draws = (
        _monte_carlo(workers, comm_t, samples, seed, cont, run_spread, iteration_spread)
        if samples > 0
        else [det.iteration_ms]
    )
    return _result(workers, comm_t, det, draws)


def simulate_ddp(
    models: Sequence[ComputeModel] | ComputeModel,
    batches: Sequence[int],
    comm_fn: Callable[[int], CommTime],
    *,
    samples: int = 2000,
    seed: int = 0,
    contention: ContentionSpec = None,
    tail_ms: float = 0.0,
    predict: Callable[[int, int], PhaseTimes] | None = None,
    run_spread: float = 0.0,
    iteration_spread: float = 0.0,
) -> SimulationResult:
    """Build worker loads from compute models and simulate.

    ``models`` is one model per worker (or one shared by all), ``batches`` the per-worker batch
    sizes, ``comm_fn(size_bytes)`` the all-reduce time of one bucket on the target cluster
    (e.g. from :class:`planner.perf.comm.CommModel`).  ``predict(worker, batch)`` overrides
    the phase-time prediction (used for transferred devices).
    """
    per_worker = [models] * len(batches) if isinstance(models, ComputeModel) else list(models)
    if len(per_worker) != len(batches):
        raise ValueError(f"simulate: {len(per_worker)} models for {len(batches)} batch sizes")
    loads = []
    for i, (model, batch) in enumerate(zip(per_worker, batches, strict=True)):
        phases = predict(i, batch) if predict else model.predict(batch)
        loads.append(WorkerLoad(phases, model.buckets(batch), batch, model.device, tail_ms))
    comm = [comm_fn(b.size_bytes) for b in loads[0].buckets]
    return simulate_iteration(
        loads,
        comm,
        samples=samples,
        seed=seed,
        contention=contention,
        run_spread=run_spread,
        iteration_spread=iteration_spread,
    )


def cluster_comm_fn(
    comm_model: CommModel, cluster: Cluster, *, profile: CommProfile | None = None, label: str | None = None
) -> Callable[[int], CommTime]:
    """``size_bytes -> CommTime`` for :func:`simulate_ddp`: the comm model on the cluster's slowest link.

    ``profile``: the comm profile measured on that cluster; each size then carries its nearest
    measured time distribution (:func:`planner.perf.comm.time_ratios`) for the Monte-Carlo.
    ``label`` names the link in the result (default: the link's kind)."""
    link = cluster.slowest_link()
    cache: dict[int, CommTime] = {}

    def comm(size_bytes: int) -> CommTime:
        if size_bytes not in cache:
            pred = comm_model.predict(CommQuery.from_link(size_bytes, cluster, link))
            ratios = time_ratios(profile, size_bytes) if profile is not None else ()
            cache[size_bytes] = CommTime(pred.p50_ms, pred.p90_ms, label or link.kind, ratios)
        return cache[size_bytes]

    return comm


def balance_batch(
    global_batch: int,
    time_fns: Sequence[Callable[[int], float]],
    max_batches: Sequence[int | None] | None = None,
    min_batches: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Split ``global_batch`` into integer per-worker batches minimising the slowest worker.

    Solves ``min_b max_w t_w(b_w)`` s.t. ``Σ b_w = B`` and ``lo_w ≤ b_w ≤ hi_w`` for
    nondecreasing ``t_w``: binary search on the time ``τ`` for the smallest one whose
    per-worker capacities ``b_w(τ) = max{b : t_w(b) ≤ τ}`` sum to ``≥ B``, then remove the
    surplus from the workers whose last sample costs the most.  ``t_w`` may raise
    :class:`ComputeRangeError` (or return ``inf``) for infeasible batches.
    """
    n = len(time_fns)
    if n == 0:
        raise ValueError("balance: no workers")
    lo = list(min_batches) if min_batches else [1] * n
    hi = [m if m is not None else global_batch for m in (max_batches or [None] * n)]
    hi = [min(h, global_batch) for h in hi]
    if sum(lo) > global_batch:
        raise ValueError(f"balance: global batch {global_batch} below the workers' minimum {sum(lo)}")
    if sum(hi) < global_batch:
        raise ValueError(f"balance: global batch {global_batch} above the workers' maximum {sum(hi)}")
    cost = [_safe_time(f) for f in time_fns]
    for w in range(n):
        if math.isinf(cost[w](lo[w])):
            raise ValueError(f"balance: worker {w} cannot run its minimum batch {lo[w]}")
    t_lo = max(cost[w](lo[w]) for w in range(n))
    t_hi = max(cost[w](hi[w]) for w in range(n) if not math.isinf(cost[w](hi[w]))) if n else t_lo
    caps = _capacities(cost, lo, hi, t_hi)
    if sum(caps) < global_batch:
        raise ValueError("balance: the workers cannot take the global batch within their feasible ranges")
    for _ in range(60):
        if t_hi - t_lo <= 1e-9 * max(t_hi, 1.0):
            break
        mid = (t_lo + t_hi) / 2
        if sum(_capacities(cost, lo, hi, mid)) >= global_batch:
            t_hi = mid
        else:
            t_lo = mid
    batches = _capacities(cost, lo, hi, t_hi)
    surplus = sum(batches) - global_batch
    heap = [(-cost[w](batches[w]), w) for w in range(n) if batches[w] > lo[w]]
    heapq.heapify(heap)
    while surplus > 0:
        _, w = heapq.heappop(heap)
        batches[w] -= 1
        surplus -= 1
        if batches[w] > lo[w]:
            heapq.heappush(heap, (-cost[w](batches[w]), w))
    return tuple(batches)


# --------------------------------------------------------------------------- internals


def _contentions(spec: ContentionSpec, n: int) -> list[Contention]:
    if spec is None:
        return [Contention()] * n
    if isinstance(spec, Contention):
        return [spec] * n
    out = list(spec)
    if len(out) != n:
        raise ValueError(f"simulate: {len(out)} contention values for {n} buckets")
    return out


def _safe_time(fn: Callable[[int], float]) -> Callable[[int], float]:
    cache: dict[int, float] = {}

    def wrapped(b: int) -> float:
        if b not in cache:
            try:
                cache[b] = float(fn(b))
            except ComputeRangeError:
                cache[b] = math.inf
        return cache[b]

    return wrapped


def _capacities(
    cost: Sequence[Callable[[int], float]], lo: Sequence[int], hi: Sequence[int], tau: float
) -> list[int]:
    """Largest batch per worker whose time is ≤ τ (at least the minimum), by bisection."""
    out = []
    for w, f in enumerate(cost):
        a, b = lo[w], hi[w]
        if f(a) > tau:
            out.append(lo[w])
            continue
        while a < b:
            m = (a + b + 1) // 2
            if f(m) <= tau:
                a = m
            else:
                b = m - 1
        out.append(a)
    return out


def _ready_fractions(workers: Sequence[WorkerLoad]) -> list[list[float]]:
    k = len(workers[0].buckets)
    for w in workers:
        if len(w.buckets) != k:
            raise ValueError("simulate: all workers must have the same bucket layout")
    return [[b.ready_fraction for b in w.buckets] for w in workers]


def _run(
    opt: Sequence[float],
    fwd: Sequence[float],
    bwd: Sequence[float],
    fractions: Sequence[Sequence[float]],
    comm: Sequence[float],
    tail: float,
    contention: Sequence[Contention],
) -> Timeline:
    if not all(c.free for c in contention):
        return _run_shared(opt, fwd, bwd, fractions, comm, tail, contention)
    n_w = len(opt)
    starts = [opt[w] + fwd[w] for w in range(n_w)]
    ends = [starts[w] + bwd[w] for w in range(n_w)]
    prev = 0.0
    c_start, c_end = [], []
    for k, d in enumerate(comm):
        ready = max(starts[w] + fractions[w][k] * bwd[w] for w in range(n_w))
        s = max(ready, prev)
        prev = s + d
        c_start.append(s)
        c_end.append(prev)
    bwd_end = max(ends)
    critical = max(range(n_w), key=lambda w: ends[w])
    return Timeline(max(bwd_end, prev) + tail, bwd_end, tuple(c_start), tuple(c_end), critical)


def _run_shared(
    opt: Sequence[float],
    fwd: Sequence[float],
    bwd: Sequence[float],
    fractions: Sequence[Sequence[float]],
    comm: Sequence[float],
    tail: float,
    contention: Sequence[Contention],
) -> Timeline:
    """Event simulation with the all-reduce and the backward slowing each other (module docstring)."""
    eps = 1e-12
    n_w, n_k = len(opt), len(comm)
    start = [opt[w] + fwd[w] for w in range(n_w)]
    thr = [[fractions[w][k] * bwd[w] for k in range(n_k)] for w in range(n_w)]
    done = [0.0] * n_w
    bwd_end = [start[w] + bwd[w] if bwd[w] <= eps else math.inf for w in range(n_w)]
    t, k_next, in_flight, remaining = 0.0, 0, False, 0.0
    c_start: list[float] = []
    c_end: list[float] = []
    for _ in range(10 * (n_k + 2) * (n_w + 2)):
        if (
            not in_flight
            and k_next < n_k
            and all(t >= start[w] - eps and done[w] >= thr[w][k_next] - eps for w in range(n_w))
        ):
            in_flight, remaining = True, comm[k_next]
            c_start.append(t)
        active = [w for w in range(n_w) if t >= start[w] - eps and done[w] < bwd[w] - eps]
        if not in_flight and k_next >= n_k and not active and t >= max(start) - eps:
            break
        rate = contention[k_next].compute_speed if in_flight else 1.0
        c_rate = contention[k_next].comm_speed if in_flight and active else 1.0
        dt = remaining / c_rate if in_flight else math.inf
        for w in range(n_w):
            if t < start[w] - eps:
                dt = min(dt, start[w] - t)
            elif w in active:
                nxt = min([thr[w][j] for j in range(k_next, n_k) if thr[w][j] > done[w] + eps] + [bwd[w]])
                dt = min(dt, (nxt - done[w]) / rate)
        dt = max(dt, 0.0)
        for w in active:
            done[w] = min(bwd[w], done[w] + dt * rate)
            if done[w] >= bwd[w] - eps:
                bwd_end[w] = t + dt
        if in_flight:
            remaining -= dt * c_rate
            if remaining <= eps:
                in_flight = False
                c_end.append(t + dt)
                k_next += 1
        t += dt
    last = c_end[-1] if c_end else 0.0
    ends = [e if not math.isinf(e) else start[w] + bwd[w] for w, e in enumerate(bwd_end)]
    critical = max(range(n_w), key=lambda w: ends[w])
    return Timeline(max(max(ends), last) + tail, max(ends), tuple(c_start), tuple(c_end), critical)


def _monte_carlo(
    workers: Sequence[WorkerLoad],
    comm: Sequence[CommTime],
    samples: int,
    seed: int,
    contention: Sequence[Contention],
    run_spread: float = 0.0,
    iteration_spread: float = 0.0,
) -> list[float]:
    import numpy as np

    rng = np.random.default_rng(seed)
    n_w, n_k = len(workers), len(comm)
    phases = ("optimizer", "forward", "backward")
    base = {p: np.array([w.phases.get(p) for w in workers]) for p in phases}
    spread = {p: np.array([w.phases.spread.get(p) for w in workers]) for p in phases}
    z = {p: rng.standard_normal((samples, n_w)) for p in phases}
    c50 = np.array([c.p50_ms for c in comm])
    csig = np.array([c.sigma for c in comm])
    comm_draws = c50[None, :] * np.exp(csig[None, :] * rng.standard_normal((samples, n_k)))
    # Factors drawn after the others, each only when it is non-zero, so that leaving one out
    # keeps every other draw (and seeded results) unchanged.
    run = np.exp(run_spread * rng.standard_normal(samples)) if run_spread > 0 else np.ones(samples)
    rho = np.array([w.phases.spread.correlation for w in workers])
    if rho.any():
        common = rng.standard_normal((samples, n_w))  # one per worker and sample, shared by its phases
        z = {p: np.sqrt(rho)[None, :] * common + np.sqrt(1.0 - rho)[None, :] * zp for p, zp in z.items()}
    if iteration_spread > 0:
        run = run * np.exp(iteration_spread * rng.standard_normal(samples))
    for k, c in enumerate(comm):
        if c.ratios:  # measured distribution of this bucket's all-reduce (CommTime docstring)
            comm_draws[:, k] = c.p50_ms * rng.choice(np.asarray(c.ratios, dtype=float), samples)
    draws = {p: base[p][None, :] * np.exp(spread[p][None, :] * z[p]) * run[:, None] for p in phases}
    comm_draws = comm_draws * run[:, None]
    tails = max((w.tail_ms for w in workers), default=0.0) * run  # DDP's own work drifts with the rest
    fractions = np.array(_ready_fractions(workers)) if n_k else np.zeros((n_w, 0))
    if not all(c.free for c in contention):
        frac_list = fractions.tolist()
        return [
            _run(
                draws["optimizer"][i],
                draws["forward"][i],
                draws["backward"][i],
                frac_list,
                comm_draws[i].tolist(),
                float(tails[i]),
                contention,
            ).iteration_ms
            for i in range(samples)
        ]
    starts = draws["optimizer"] + draws["forward"]  # (S, W)
    ends = (starts + draws["backward"]).max(axis=1)
    prev = np.zeros(samples)
    for k in range(n_k):
        ready = (starts + fractions[None, :, k] * draws["backward"]).max(axis=1)
        prev = np.maximum(ready, prev) + comm_draws[:, k]
    iteration_ms: list[float] = (np.maximum(ends, prev) + tails).tolist()
    return iteration_ms


def _result(
    workers: Sequence[WorkerLoad], comm: Sequence[CommTime], det: Timeline, draws: Sequence[float]
) -> SimulationResult:
    import numpy as np

    arr = np.asarray(draws, dtype=float)
    crit = workers[det.critical_worker].phases
    tail = max((w.tail_ms for w in workers), default=0.0)
    compute_only = max(w.phases.total for w in workers)
    exposed = max(det.iteration_ms - tail - compute_only, 0.0)
    total_comm = sum(c.p50_ms for c in comm)
    global_batch = sum(w.batch_size for w in workers)
    comm_bound = exposed >= COMM_BOUND_SHARE * det.iteration_ms
    links = [c.link for c in comm if c.link]
    mean = float(arr.mean())
    return SimulationResult(
        iteration_ms_p50=float(np.quantile(arr, 0.5)),
        iteration_ms_p90=float(np.quantile(arr, 0.9)),
        iteration_ms_mean=mean,
        throughput_samples_s=global_batch / mean * 1e3 if mean > 0 else 0.0,
        breakdown=Breakdown(crit.forward, crit.backward, crit.optimizer, exposed, tail, total_comm),
        bottleneck="communication" if comm_bound else "compute",
        bottleneck_link=links[0] if comm_bound and links else "",
        per_worker_batch=tuple(w.batch_size for w in workers),
        global_batch=global_batch,
        slowest_worker=det.critical_worker,
        deterministic_ms=det.iteration_ms,
        samples=len(draws),
        sources=tuple(sorted({w.phases.source for w in workers})),
    )

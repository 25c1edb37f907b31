"""Spot-interruption model: expected completion time, deadline-miss risk and p90 time.

Interruption rate
-----------------
AWS Spot Advisor publishes, per instance type and region, the share ``f`` of spot instances that
were interrupted during the last month, in five classes.  A class is mapped to its midpoint
(:data:`BUCKET_MONTHLY_FREQUENCY`; the open ">20 %" class is taken as 25 %) and turned into a
constant hourly hazard per node such that a node survives a 730-hour month with probability
``1 - f``::

    lambda_node = -ln(1 - f) / 730  [1/h]        e.g. 5-10 % -> f = 7.5 % -> 1.07e-4 / h

Synchronous DDP stalls when ANY node is lost, and interruptions of different nodes are assumed
independent, so a cluster with ``n_i`` spot nodes of class ``b_i`` has job hazard
``Lambda = sum_i n_i * lambda(b_i)``; on-demand nodes contribute 0.

Expected completion (first-order renewal model)
-----------------------------------------------
The user checkpoints every ``tau`` hours of progress (each checkpoint costs ``w`` hours, so the
work grows to ``W = base * (1 + w / tau)``; applied only when ``Lambda > 0``) and pays a restart
overhead ``r`` (replacement node, container start, checkpoint reload) after each interruption.
An interruption loses on average half a checkpoint interval plus the restart::

    loss = tau / 2 + r
    E[T] = W + Lambda * E[T] * loss   =>   E[T] = W / (1 - Lambda * loss)    (inf if Lambda*loss >= 1)

Distribution, risk and p90
--------------------------
The number of interruptions is taken as ``K ~ Poisson(Lambda * E[T])`` and each costs
``U_k * tau + r`` with ``U_k ~ Uniform(0, 1)`` (progress since the last checkpoint).  On top of
that the iterations themselves jitter: the oracle's p90 iteration time gives a per-iteration
standard deviation, and over the job's ``N`` iterations the total-time error is
``J ~ Normal(0, s^2)`` with ``s = jitter_sd_h`` (independent of the interruptions; the re-done
work adds a little more jitter, second order and ignored).  So::

    T = W + J + sum_{k=1..K} (r + tau U_k)

    P(T <= t) = sum_k Poisson(k; Lambda E[T]) * P(tau S_k + J <= t - W - k r),  S_k ~ IrwinHall(k)

Without jitter the last factor is the Irwin-Hall CDF ``IH_k((t - W - k r) / tau)``; with jitter
it is that CDF averaged over ``J``.  ``IH_k(x) = (1/k!) sum_j (-1)^j C(k, j) (x - j)_+^k`` is a
sum of truncated powers, and the mean of a truncated power of a normal has a closed form, so the
average is exact (no quadrature).  With ``y = (t - W - k r) / tau`` and ``X_j = y - j - J / tau
~ Normal(y - j, (s / tau)^2)``::

    P(tau S_k + J <= t - W - k r) = (1/k!) sum_j (-1)^j C(k, j) E[(X_j)_+^k]

    E[X_+^0] = Phi(mu/sigma),   E[X_+^1] = mu Phi(mu/sigma) + sigma phi(mu/sigma),
    E[X_+^m] = mu E[X_+^(m-1)] + (m - 1) sigma^2 E[X_+^(m-2)]                  (Stein's lemma)

(exact for ``k <= 12``; above, ``tau S_k + J`` is taken as normal with mean ``k tau / 2`` and
variance ``k tau^2 / 12 + s^2``).  ``k = 0`` contributes ``Poisson(0) * Phi((t - W) / s)``.  The
deadline-miss probability is ``1 - P(T <= deadline)`` and the p50/p90 times are found by
bisection on this CDF, so the p90 combines the jitter and the interruption cost in one
distribution: with no interruptions it is ``W + 1.2816 s``; with interruptions and no jitter it
is the Poisson/Irwin-Hall quantile; and as ``Lambda -> 0`` it tends continuously to the former.
(Before this, the jitter was dropped as soon as ``Lambda > 0``, so a spot plan with a tiny
hazard had a *smaller* p90 than the same plan on on-demand.)

:func:`simulate_completion` runs the underlying process directly (exponential interruption
clock, progress rolled back to the last checkpoint, restarts that can themselves be interrupted),
seeded, to validate the analytic model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

#: Spot Advisor class -> monthly interruption frequency (class midpoint; ">20 %" taken as 25 %).
BUCKET_MONTHLY_FREQUENCY: tuple[float, ...] = (0.025, 0.075, 0.125, 0.175, 0.25)
BUCKET_LABELS: tuple[str, ...] = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
HOURS_PER_MONTH = 730.0
_Z90 = 1.2815515655446004
_EXACT_IRWIN_HALL_MAX = 12


@dataclass(frozen=True)
class SpotParams:
    """User-set fault-tolerance parameters (hours)."""

    checkpoint_interval_h: float = 0.5
    restart_overhead_h: float = 0.1
    checkpoint_write_h: float = 0.0

    def __post_init__(self) -> None:
        if not self.checkpoint_interval_h > 0:
            raise ValueError("checkpoint_interval_h must be > 0")
        if self.restart_overhead_h < 0:
            raise ValueError("restart_overhead_h must be >= 0")
        if self.checkpoint_write_h < 0:
            raise ValueError("checkpoint_write_h must be >= 0")

    @property
    def loss_per_interruption_h(self) -> float:
        return self.checkpoint_interval_h / 2.0 + self.restart_overhead_h


@dataclass(frozen=True)
class Completion:
    """Completion-time summary for one plan (hours, excluding the solver's startup overhead)."""

    expected_h: float
    p90_h: float
    miss_probability: float | None
    expected_interruptions: float


@dataclass(frozen=True)
class SimulationResult:
    mean_h: float
    p90_h: float
    miss_probability: float | None
    samples: tuple[float, ...]


def hourly_hazard(bucket: int) -> float:
    """Per-node interruption hazard (1/h) for a Spot Advisor class 0..4."""
    if not 0 <= int(bucket) < len(BUCKET_MONTHLY_FREQUENCY):
        raise ValueError(f"interruption bucket must be 0..4, got {bucket}")
    f = BUCKET_MONTHLY_FREQUENCY[int(bucket)]
    return -math.log1p(-f) / HOURS_PER_MONTH


def job_hazard(nodes: Iterable[tuple[int, int, bool]]) -> float:
    """Cluster hazard from ``(count, bucket, is_spot)`` triples: ``sum count * lambda(bucket)`` over spot nodes."""
    return sum(n * hourly_hazard(b) for n, b, spot in nodes if spot and n > 0)


def work_h(base_h: float, hazard: float, params: SpotParams) -> float:
    """Uninterrupted work including checkpoint writes (only when the job can be interrupted)."""
    if hazard <= 0:
        return base_h
    return base_h * (1.0 + params.checkpoint_write_h / params.checkpoint_interval_h)


def expected_completion_h(base_h: float, hazard: float, params: SpotParams) -> float:
    """``W / (1 - Lambda * (tau/2 + r))``; ``inf`` when interruptions outpace progress."""
    w = work_h(base_h, hazard, params)
    x = hazard * params.loss_per_interruption_h
    if x >= 1.0:
        return math.inf
    return w / (1.0 - x)


def _irwin_hall_cdf(x: float, k: int) -> float:
    """P(sum of k iid U(0,1) <= x)."""
    if x <= 0:
        return 0.0
    if x >= k:
        return 1.0
    if k <= _EXACT_IRWIN_HALL_MAX:
        s = 0.0
        for j in range(int(math.floor(x)) + 1):
            s += (-1) ** j * math.comb(k, j) * (x - j) ** k
        return min(1.0, max(0.0, s / math.factorial(k)))
    mu, sd = k / 2.0, math.sqrt(k / 12.0)
    return 0.5 * math.erfc(-(x - mu) / (sd * math.sqrt(2.0)))


def _poisson_terms(mean: float) -> list[float]:
    kmax = int(math.ceil(mean + 10.0 * math.sqrt(mean) + 10.0))
    p = math.exp(-mean)
    out = [p]
    for k in range(1, kmax + 1):
        p *= mean / k
        out.append(p)
    return out


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _Phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _truncated_powers(mu: float, sigma: float, k: int) -> list[float]:
    """``E[X_+^m]`` for ``m = 0..k``, ``X ~ Normal(mu, sigma^2)`` (recursion of the docstring)."""
    a = mu / sigma
    out = [_Phi(a), mu * _Phi(a) + sigma * _phi(a)]
    for m in range(2, k + 1):
        out.append(mu * out[m - 1] + (m - 1) * sigma * sigma * out[m - 2])
    return out[: k + 1]


def _lost_cdf(x_h: float, k: int, tau: float, jitter_sd_h: float) -> float:
    """``P(tau * S_k + J <= x_h)``: ``k`` interruptions' lost work plus the jitter ``J``."""
    if jitter_sd_h <= 0:
        if k == 0:
            return 1.0 if x_h >= 0 else 0.0
        return _irwin_hall_cdf(x_h / tau, k)
    if k == 0:
        return _Phi(x_h / jitter_sd_h)
    y, sig = x_h / tau, jitter_sd_h / tau
    if k > _EXACT_IRWIN_HALL_MAX or sig > 1.0:
        # Many interruptions, or jitter as wide as a checkpoint interval: the sum is close to
        # normal, and the alternating sum below would lose its digits to cancellation.
        return _Phi((y - k / 2.0) / math.sqrt(k / 12.0 + sig * sig))
    s = 0.0
    for j in range(k + 1):
        if y - j < -10.0 * sig:
            break  # this and every later truncated power is zero to double precision
        s += (-1) ** j * math.comb(k, j) * _truncated_powers(y - j, sig, k)[k]
    return min(1.0, max(0.0, s / math.factorial(k)))


def completion_cdf(
    t_h: float, base_h: float, hazard: float, params: SpotParams, jitter_sd_h: float = 0.0
) -> float:
    """``P(T <= t_h)`` under the model of the module docstring (interruptions and jitter)."""
    jitter = max(0.0, jitter_sd_h)
    tau, r = params.checkpoint_interval_h, params.restart_overhead_h
    if hazard <= 0:
        return _lost_cdf(t_h - base_h, 0, tau, jitter)
    e = expected_completion_h(base_h, hazard, params)
    if not math.isfinite(e):
        return 0.0
    slack = t_h - work_h(base_h, hazard, params)
    total = 0.0
    for k, pk in enumerate(_poisson_terms(hazard * e)):
        rest = slack - k * r
        if rest < -10.0 * jitter:
            break  # k more restarts than the time allows: this and every larger k add nothing
        total += pk * _lost_cdf(rest, k, tau, jitter)
    return min(1.0, total)


def miss_probability(
    deadline_h: float, base_h: float, hazard: float, params: SpotParams, jitter_sd_h: float = 0.0
) -> float:
    """Probability that the job is not done ``deadline_h`` hours after it starts computing."""
    return max(0.0, 1.0 - completion_cdf(deadline_h, base_h, hazard, params, jitter_sd_h))


def completion_quantile(
    q: float, base_h: float, hazard: float, params: SpotParams, jitter_sd_h: float = 0.0
) -> float:
    """The ``q``-quantile of the completion time (bisection on :func:`completion_cdf`)."""
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    jitter = max(0.0, jitter_sd_h)
    if hazard <= 0:
        if jitter <= 0:
            return base_h
        # inverse normal via bisection on erfc (avoids a scipy dependency)
        lo, hi = base_h - 10 * jitter, base_h + 10 * jitter
    else:
        e = expected_completion_h(base_h, hazard, params)
        if not math.isfinite(e):
            return math.inf
        w = work_h(base_h, hazard, params)
        kmax = len(_poisson_terms(hazard * e))
        lo = w - 10 * jitter
        hi = w + kmax * (params.checkpoint_interval_h + params.restart_overhead_h) + 10 * jitter
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if completion_cdf(mid, base_h, hazard, params, jitter) >= q:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return hi


def completion(
    base_h: float,
    hazard: float,
    params: SpotParams,
    deadline_h: float | None = None,
    jitter_sd_h: float = 0.0,
) -> Completion:
    """Expected time, p90 time (jitter and interruptions together), miss probability, interruptions."""
    e = expected_completion_h(base_h, hazard, params)
    if hazard <= 0:
        p90 = base_h + _Z90 * max(0.0, jitter_sd_h)
    else:
        p90 = completion_quantile(0.9, base_h, hazard, params, jitter_sd_h)
    miss = None if deadline_h is None else miss_probability(deadline_h, base_h, hazard, params, jitter_sd_h)
    return Completion(expected_h=e, p90_h=p90, miss_probability=miss, expected_interruptions=hazard * e)


def simulate_completion(
    base_h: float,
    hazard: float,
    params: SpotParams,
    *,
    runs: int = 2000,
    seed: int = 0,
    deadline_h: float | None = None,
) -> SimulationResult:
    """Seeded Monte Carlo of the interruption process (for validation and what-if analysis).

    Progress is checkpointed every ``tau`` hours of work; an interruption (exponential clock with
    rate ``hazard``, also running during restarts) rolls progress back to the last checkpoint and
    costs a restart of ``r`` hours.
    """
    rng = random.Random(seed)
    w = work_h(base_h, hazard, params)
    tau, r = params.checkpoint_interval_h, params.restart_overhead_h
    samples: list[float] = []
    for _ in range(runs):
        t, progress = 0.0, 0.0
        while True:
            next_int = rng.expovariate(hazard) if hazard > 0 else math.inf
            if progress + next_int >= w:
                t += w - progress
                break
            t += next_int
            progress = math.floor((progress + next_int) / tau) * tau
            # restart; it may itself be interrupted (then it starts over)
            while True:
                nxt = rng.expovariate(hazard)
                if nxt >= r:
                    t += r
                    break
                t += nxt
            if t > 1e7:  # hopeless (hazard far too high): stop
                break
        samples.append(t)
    samples.sort()
    mean = sum(samples) / len(samples)
    p90 = samples[min(len(samples) - 1, int(math.ceil(0.9 * len(samples))) - 1)]
    miss = None if deadline_h is None else sum(1 for s in samples if s > deadline_h) / len(samples)
    return SimulationResult(mean_h=mean, p90_h=p90, miss_probability=miss, samples=tuple(samples))

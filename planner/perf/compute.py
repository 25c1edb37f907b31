"""Per (model, device) compute-time model: phase time as a function of per-worker batch size.

For each phase ``p ∈ {forward, backward, optimizer}`` the median time over iterations at
each profiled batch ``b_i`` is fitted with a continuous piecewise-linear function with at most
one knee ``k``::

    t_p(b) = a + s₁·b                     for b ≤ k
    t_p(b) = a + s₁·k + s₂·(b − k)        for b > k

The knee is searched over the interior profiled batch sizes.  Residuals are taken relative
(weights ``1/t_i``) so small batches count as much as large ones.  The knee is kept only when
it pays for its two extra parameters under the Bayesian information criterion::

    BIC = n·ln(RSS/n) + p·ln(n),    p = 2 (line) or 4 (hinge: a, s₁, s₂, k)

and only with at least four batch sizes (with three a hinge interpolates exactly).  The line
is the usual case on GPUs that are already saturated at the smallest batch; the knee captures
the flat-then-linear shape of an under-occupied GPU.

Two spreads are kept per phase, both relative (fractions of the predicted time):

* ``spread`` — iteration-to-iteration noise, the robust ``(p90 − p10) / (2·1.2816·median)``
  of the per-iteration samples (equal to ``std/median`` for a normal distribution),
  interpolated linearly in batch size between profiled batches;
* ``fit_error`` — RMS of the relative fit residuals (0 when the fit interpolates exactly).

The phases of one iteration are not independent: a slow spell of the machine slows the
forward and the backward alike (measured on 2-core CPU profiles: Pearson correlation of
forward and backward 0.1–0.6).  Drawn independently, the iteration total would come out too
narrow.  Per batch size the profile gives one correlation ``ρ`` (:func:`phase_correlation`),
the equicorrelation that reproduces the variance of the per-iteration totals::

    Var(Σ_p t_p) = Σ_p σ_p² + ρ · Σ_{p≠q} σ_p σ_q     →     ρ = clamp((Var(T) − Σ_p σ_p²) / Σ_{p≠q} σ_p σ_q, 0, 1)

(``σ_p`` the standard deviation of phase ``p`` over the iterations, ``T`` their sum); the
simulator draws the phases of a worker with that correlation.

Range: predictions are allowed from ``b_min·(1 − margin)`` to ``b_max·(1 + margin)`` with
``margin = EXTRAPOLATION_MARGIN`` (0.25) of the profiled batch sizes; beyond it
:class:`OutOfProfiledRangeError` is raised.  A batch above the profile's ``max_batch_size``
(the largest that fitted in memory) raises :class:`BatchTooLargeError` regardless.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planner.profiles import PHASES, ComputeProfile, ComputeSample

EXTRAPOLATION_MARGIN = 0.25
MIN_TIME_MS = 1e-6


class ComputeRangeError(ValueError):
    """A batch size the compute model cannot predict."""


class OutOfProfiledRangeError(ComputeRangeError):
    """Batch size too far outside the profiled batch sizes."""


class BatchTooLargeError(ComputeRangeError):
    """Batch size above the largest batch that fits on the device."""


@dataclass(frozen=True)
class PhaseSpread:
    """Relative standard deviations (fractions) per phase."""

    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0
    correlation: float = 0.0  # between the phases of one iteration (module docstring), in [0, 1]

    def get(self, phase: str) -> float:
        return float(getattr(self, phase))


@dataclass(frozen=True)
class PhaseTimes:
    """Predicted per-iteration phase times (ms) for one worker at one batch size.

    ``source`` is ``"measured"`` (fitted on a profile of this very device),
    ``"transferred"`` (scaled from a profile on another device) or ``"analytical"``
    (roofline only, no profile of this model).
    """

    forward: float
    backward: float
    optimizer: float
    spread: PhaseSpread = field(default_factory=PhaseSpread)
    fit_error: PhaseSpread = field(default_factory=PhaseSpread)
    source: str = "measured"
    batch_size: int | None = None

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.optimizer

    def get(self, phase: str) -> float:
        return float(getattr(self, phase))

    def scaled(self, forward: float, backward: float, optimizer: float, source: str) -> PhaseTimes:
        return replace(
            self,
            forward=self.forward * forward,
            backward=self.backward * backward,
            optimizer=self.optimizer * optimizer,
            source=source,
        )


@dataclass(frozen=True)
class PiecewiseLinear:
    """``t(b) = a + s1·min(b, k) + s2·max(b − k, 0)``; ``knee=None`` means a plain line."""

    intercept: float
    slope1: float
    slope2: float = 0.0
    knee: float | None = None
    rel_rmse: float = 0.0
    bic: float = 0.0

    def __call__(self, batch: float) -> float:
        if self.knee is None:
            return self.intercept + self.slope1 * batch
        return (
            self.intercept + self.slope1 * min(batch, self.knee) + self.slope2 * max(batch - self.knee, 0.0)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "intercept": self.intercept,
            "slope1": self.slope1,
            "slope2": self.slope2,
            "knee": self.knee,
            "rel_rmse": self.rel_rmse,
            "bic": self.bic,
        }


@dataclass(frozen=True)
class BucketSpec:
    """A gradient bucket for the simulator: size and when (fraction of backward) it is ready."""

    size_bytes: int
    ready_fraction: float


@dataclass(frozen=True)
class ComputeModel:
    """Fitted compute model of one (model, device, precision)."""

    model_spec: str
    device: str
    precision: str
    fits: Mapping[str, PiecewiseLinear]
    batch_sizes: tuple[int, ...]
    spreads: Mapping[str, tuple[float, ...]]
    buckets_by_batch: Mapping[int, tuple[BucketSpec, ...]] = field(default_factory=dict)
    max_batch_size: int | None = None
    margin: float = EXTRAPOLATION_MARGIN
    source: str = "measured"
    correlations: tuple[float, ...] = ()  # per batch size; () = independent phases (older models)

    def __post_init__(self) -> None:
        if self.correlations and len(self.correlations) != len(self.batch_sizes):
            raise ValueError(
                f"compute model: {len(self.correlations)} correlations for "
                f"{len(self.batch_sizes)} batch sizes"
            )
        if not all(0.0 <= r <= 1.0 for r in self.correlations):  # also refuses NaN
            raise ValueError(f"compute model: correlations must be in [0, 1], got {list(self.correlations)}")

    @property
    def min_batch(self) -> int:
        return max(1, math.ceil(self.batch_sizes[0] * (1 - self.margin) - 1e-9))

    @property
    def max_batch(self) -> int:
        upper = math.floor(self.batch_sizes[-1] * (1 + self.margin) + 1e-9)
        return min(upper, self.max_batch_size) if self.max_batch_size else upper

    def check_batch(self, batch: int) -> None:
        """Raise :class:`BatchTooLargeError` / :class:`OutOfProfiledRangeError` when unpredictable."""
        if batch < 1:
            raise OutOfProfiledRangeError(f"batch size must be >= 1, got {batch}")
        if self.max_batch_size is not None and batch > self.max_batch_size:
            raise BatchTooLargeError(
                f"batch size {batch} exceeds max_batch_size {self.max_batch_size} of {self.model_spec} on {self.device}"
            )
        lo, hi = self.batch_sizes[0], self.batch_sizes[-1]
        if batch < self.min_batch or batch > self.max_batch:
            raise OutOfProfiledRangeError(
                f"batch size {batch} outside the profiled range {lo}..{hi} of {self.model_spec} on {self.device} "
                f"(±{self.margin:.0%} extrapolation allowed: {self.min_batch}..{self.max_batch})"
            )

    def predict(self, batch: int) -> PhaseTimes:
        """Phase times (ms) at per-worker ``batch``; raises :class:`ComputeRangeError` if out of range."""
        self.check_batch(batch)
        times = {p: max(self.fits[p](batch), MIN_TIME_MS) for p in PHASES}
        rho = interpolate(batch, self.batch_sizes, self.correlations) if self.correlations else 0.0
        spread = PhaseSpread(
            **{p: interpolate(batch, self.batch_sizes, self.spreads[p]) for p in PHASES}, correlation=rho
        )
        fit_error = PhaseSpread(**{p: self.fits[p].rel_rmse for p in PHASES})
        return PhaseTimes(
            forward=times["forward"],
            backward=times["backward"],
            optimizer=times["optimizer"],
            spread=spread,
            fit_error=fit_error,
            source=self.source,
            batch_size=batch,
        )

    def buckets(self, batch: int | None = None) -> tuple[BucketSpec, ...]:
        """Bucket sizes and ready fractions, interpolated between the profiled batch sizes."""
        if not self.buckets_by_batch:
            return ()
        keys = sorted(self.buckets_by_batch)
        if batch is None or len(keys) == 1:
            return self.buckets_by_batch[keys[-1]]
        layouts = [self.buckets_by_batch[k] for k in keys]
        if len({len(lay) for lay in layouts}) != 1:
            nearest = min(keys, key=lambda k: abs(k - batch))
            return self.buckets_by_batch[nearest]
        out = []
        for i, bucket in enumerate(layouts[-1]):
            frac = interpolate(batch, keys, [lay[i].ready_fraction for lay in layouts])
            out.append(BucketSpec(bucket.size_bytes, min(max(frac, 0.0), 1.0)))
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "model_spec": self.model_spec,
            "device": self.device,
            "precision": self.precision,
            "fits": {p: f.to_dict() for p, f in self.fits.items()},
            "batch_sizes": list(self.batch_sizes),
            "spreads": {p: list(v) for p, v in self.spreads.items()},
            "correlations": list(self.correlations),
            "buckets_by_batch": {
                str(b): [[x.size_bytes, x.ready_fraction] for x in lay]
                for b, lay in self.buckets_by_batch.items()
            },
            "max_batch_size": self.max_batch_size,
            "margin": self.margin,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ComputeModel:
        if doc.get("version") != 1:
            raise ValueError(f"compute model: version must be 1, got {doc.get('version')!r}")
        return cls(
            model_spec=doc["model_spec"],
            device=doc["device"],
            precision=doc["precision"],
            fits={p: PiecewiseLinear(**f) for p, f in doc["fits"].items()},
            batch_sizes=tuple(doc["batch_sizes"]),
            spreads={p: tuple(v) for p, v in doc["spreads"].items()},
            correlations=tuple(float(r) for r in doc.get("correlations", ())),
            buckets_by_batch={
                int(b): tuple(BucketSpec(int(s), float(r)) for s, r in lay)
                for b, lay in doc.get("buckets_by_batch", {}).items()
            },
            max_batch_size=doc.get("max_batch_size"),
            margin=doc.get("margin", EXTRAPOLATION_MARGIN),
            source=doc.get("source", "measured"),
        )


def run_spread(profiles: Sequence[ComputeProfile]) -> float:
    """Run-to-run relative spread of one (model, device) from profiles repeated at different
    times (or by several processes at once): the pooled standard deviation of the log of each
    profile's median iteration time (forward + backward + optimizer), per batch size::

        s_run² = Σ_b Σ_i (ln t_{b,i} − mean_i ln t_{b,i})² / Σ_b (n_b − 1)

    over the batch sizes ``b`` that at least two profiles share.  0 when none does.  The
    per-iteration spread of one profile averages out over a run; this is what stays (a
    machine whose speed drifts, a process that runs slow for its whole life).
    """
    groups: dict[int, list[float]] = {}
    for profile in profiles:
        for s in profile.samples:
            total = sum(s.phases[p].median_ms for p in PHASES)
            if total > 0:
                groups.setdefault(s.batch_size, []).append(math.log(total))
    ss = dof = 0.0
    for logs in groups.values():
        if len(logs) > 1:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return math.sqrt(ss / dof) if dof else 0.0


def phase_correlation(sample: ComputeSample) -> float:
    """Equicorrelation ``ρ`` of the phases of one iteration from a sample's per-iteration
    times (module docstring); 0 with fewer than three iterations or phases of unequal length
    (summaries without their iterations)."""
    series = [sample.phases[p].times_ms for p in PHASES]
    n = len(series[0])
    if n < 3 or any(len(x) != n for x in series):
        return 0.0
    var = [statistics.pvariance(x) for x in series]
    cross = sum(math.sqrt(v) for v in var) ** 2 - sum(var)  # Σ_{p≠q} σ_p σ_q
    if cross <= 1e-9 * sum(var):  # at most one phase varies (rounding can leave a tiny positive)
        return 0.0
    total = statistics.pvariance([sum(ts) for ts in zip(*series, strict=True)])
    return float(min(max((total - sum(var)) / cross, 0.0), 1.0))


# --------------------------------------------------------------------------- fitting


def fit_compute_model(profile: ComputeProfile, *, margin: float = EXTRAPOLATION_MARGIN) -> ComputeModel:
    """Fit each phase of a compute profile; see the module docstring for the maths."""
    batches = [s.batch_size for s in profile.samples]
    fits = {}
    spreads = {}
    for phase in PHASES:
        medians = [s.phases[phase].median_ms for s in profile.samples]
        fits[phase] = fit_piecewise_linear(batches, medians)
        spreads[phase] = tuple(s.phases[phase].relative_spread for s in profile.samples)
    correlations = tuple(phase_correlation(s) for s in profile.samples)
    buckets = {
        s.batch_size: tuple(BucketSpec(b.size_bytes, b.ready_fraction) for b in s.buckets)
        for s in profile.samples
        if s.buckets
    }
    return ComputeModel(
        model_spec=profile.model.spec,
        device=profile.device.name,
        precision=profile.device.precision,
        fits=fits,
        batch_sizes=tuple(batches),
        spreads=spreads,
        buckets_by_batch=buckets,
        max_batch_size=profile.max_batch_size,
        margin=margin,
        correlations=correlations,
    )


def fit_piecewise_linear(batches: Sequence[float], times: Sequence[float]) -> PiecewiseLinear:
    """Best of the line and every interior-knee hinge by BIC on relative residuals."""
    if len(batches) != len(times) or not batches:
        raise ValueError("fit: batches and times must be non-empty and of equal length")
    xs = [float(b) for b in batches]
    ys = [float(t) for t in times]
    if len(xs) == 1:
        return PiecewiseLinear(intercept=0.0, slope1=ys[0] / xs[0])
    best = _fit_line(xs, ys)
    if len(xs) >= 4:
        for knee in xs[1:-1]:
            cand = _fit_hinge(xs, ys, knee)
            if cand is not None and cand.bic < best.bic - 1e-9:
                best = cand
    return best


def _weights(ys: Sequence[float]) -> list[float]:
    return [1.0 / max(abs(y), MIN_TIME_MS) for y in ys]


def _fit_line(xs: Sequence[float], ys: Sequence[float]) -> PiecewiseLinear:
    coef = _weighted_lstsq([[1.0, x] for x in xs], ys, _weights(ys))
    assert coef is not None  # two columns: a rank-deficient fit falls back to the mean, never None
    model = PiecewiseLinear(intercept=coef[0], slope1=coef[1])
    return _with_stats(model, xs, ys, n_params=2)


def _fit_hinge(xs: Sequence[float], ys: Sequence[float], knee: float) -> PiecewiseLinear | None:
    rows = [[1.0, min(x, knee), max(x - knee, 0.0)] for x in xs]
    coef = _weighted_lstsq(rows, ys, _weights(ys))
    if coef is None:
        return None
    model = PiecewiseLinear(intercept=coef[0], slope1=coef[1], slope2=coef[2], knee=knee)
    return _with_stats(model, xs, ys, n_params=4)


def _with_stats(
    model: PiecewiseLinear, xs: Sequence[float], ys: Sequence[float], n_params: int
) -> PiecewiseLinear:
    rel = [(model(x) - y) / max(abs(y), MIN_TIME_MS) for x, y in zip(xs, ys, strict=True)]
    n = len(xs)
    rss = sum(r * r for r in rel)
    # floor the RSS so that exact fits do not get -inf BIC and the parameter penalty decides
    bic = n * math.log(max(rss, 1e-12 * n) / n) + n_params * math.log(n)
    return replace(model, rel_rmse=math.sqrt(rss / n), bic=bic)


def _weighted_lstsq(
    rows: Sequence[Sequence[float]], ys: Sequence[float], ws: Sequence[float]
) -> list[float] | None:
    import numpy as np

    a = np.asarray(rows, dtype=float) * np.asarray(ws, dtype=float)[:, None]
    y = np.asarray(ys, dtype=float) * np.asarray(ws, dtype=float)
    coef, _, rank, _ = np.linalg.lstsq(a, y, rcond=None)
    if rank < a.shape[1]:
        if a.shape[1] == 2:
            return [float(np.mean(ys)), 0.0]
        return None
    return [float(c) for c in coef]


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Linear interpolation through sorted ``xs``, clamped to the end values."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    for i in range(1, len(xs)):
        if x <= xs[i]:
            t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return float(ys[i - 1] + t * (ys[i] - ys[i - 1]))
    return float(ys[-1])

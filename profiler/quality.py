"""Is a profiling run's measurement trustworthy? Flags for measurements too noisy to plan on.

Two signs, both cured by timing more iterations (the default run times 5):

* **spread**: the coefficient of variation of one measurement (a phase at one batch size, or an
  all-reduce at one message size) is above ``NOISY_CV``:
  ``CV = s / mean`` over its timed iterations, ``s`` the sample standard deviation. At CV 0.2 with
  5 iterations the standard error of the mean alone is ``0.2 / sqrt(5) ≈ 9 %`` of it.
* **order**: a larger batch whose iteration time is shorter than a smaller batch's. A step's work
  grows with the batch, so ``T(b) = forward + backward + optimizer`` medians can only stay flat or
  grow (up to noise); ``T(b_j) < max_{b_i < b_j} T(b_i)`` says the measurement is noise (clock
  boost, a cold cache, another process), not the device.

Pure functions of plain values: the pages and the API only show what these return
(``frontend/profiling.py``, ``profiler/serializers.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

NOISY_CV = 0.2
ADVICE = "use more iterations"
PHASES = ("forward", "backward", "optimizer")  # the phases the planner sums into one step


class ComputeMeasurement(Protocol):
    """One phase at one batch size (``profiler.models.ComputeSample`` has these)."""

    batch_size: int
    phase: str
    median_ms: float
    cv: float


class CommMeasurement(Protocol):
    """One all-reduce size (``profiler.models.CommSample`` has these)."""

    size_bytes: int
    cv: float


@dataclass(frozen=True)
class NoisyFlag:
    """One flagged measurement. ``phase`` is ``None`` for a whole batch (the order rule) and for
    an all-reduce size; ``batch_size`` is ``None`` for an all-reduce size, ``size_bytes`` for a
    compute one."""

    reason: str
    batch_size: int | None = None
    phase: str | None = None
    size_bytes: int | None = None
    advice: str = ADVICE

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def spread_flags(samples: Iterable[ComputeMeasurement]) -> list[NoisyFlag]:
    """A flag per phase and batch whose CV is above ``NOISY_CV``."""
    return [
        NoisyFlag(
            reason=f"CV {s.cv:.2f} > {NOISY_CV}: the iterations disagree",
            batch_size=s.batch_size,
            phase=s.phase,
        )
        for s in samples
        if s.cv > NOISY_CV
    ]


def iteration_ms(samples: Iterable[ComputeMeasurement]) -> dict[int, float]:
    """``T(b)``, the sum of the phase medians per batch size; only batches with all ``PHASES``."""
    medians: dict[int, dict[str, float]] = defaultdict(dict)
    for s in samples:
        medians[s.batch_size][s.phase] = s.median_ms
    return {b: sum(m[p] for p in PHASES) for b, m in medians.items() if all(p in m for p in PHASES)}


def order_flags(samples: Iterable[ComputeMeasurement]) -> list[NoisyFlag]:
    """A flag per batch size measured faster than some smaller batch: ``T(b_j) < T(b_i)`` for a
    ``b_i < b_j``; the reason names the slowest smaller batch."""
    flags = []
    slowest: tuple[int, float] | None = None  # (batch, T) of the slowest batch so far
    for b, t in sorted(iteration_ms(samples).items()):
        if slowest is not None and t < slowest[1]:
            flags.append(
                NoisyFlag(
                    reason=(
                        f"an iteration at batch {b} ({t:.3g} ms) is shorter than at the smaller "
                        f"batch {slowest[0]} ({slowest[1]:.3g} ms)"
                    ),
                    batch_size=b,
                )
            )
        if slowest is None or t > slowest[1]:
            slowest = (b, t)
    return flags


def compute_flags(samples: Iterable[ComputeMeasurement]) -> list[NoisyFlag]:
    """Every flag of a compute run: the order rule per batch, then the spread rule per phase."""
    rows = list(samples)
    return order_flags(rows) + spread_flags(rows)


def comm_flags(samples: Iterable[CommMeasurement]) -> list[NoisyFlag]:
    """A flag per all-reduce size whose CV is above ``NOISY_CV``. No order rule: NCCL switches
    algorithm and protocol with the size, so a larger message may really be faster."""
    return [
        NoisyFlag(reason=f"CV {s.cv:.2f} > {NOISY_CV}: the repeats disagree", size_bytes=s.size_bytes)
        for s in samples
        if s.cv > NOISY_CV
    ]


def flags_by_key(flags: Iterable[NoisyFlag]) -> dict[tuple[int | None, str | None], list[str]]:
    """Reasons per (batch or size, phase), for tables: a batch-wide flag (phase ``None``) is also
    listed under each phase of that batch by ``reasons_for``."""
    out: dict[tuple[int | None, str | None], list[str]] = defaultdict(list)
    for f in flags:
        key = f.batch_size if f.batch_size is not None else f.size_bytes
        out[(key, f.phase)].append(f.reason)
    return dict(out)


def reasons_for(
    by_key: dict[tuple[int | None, str | None], list[str]], key: int, phase: str | None = None
) -> list[str]:
    """The reasons a measurement is noisy: its own and its batch's (empty: not noisy)."""
    own = by_key.get((key, phase), []) if phase is not None else []
    return own + by_key.get((key, None), [])

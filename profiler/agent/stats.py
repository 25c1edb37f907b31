"""Summary statistics of a list of timings (milliseconds)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        raise ValueError("percentile of an empty list")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(times_ms: Sequence[float]) -> dict[str, Any]:
    """The profile's timing block: all times plus median/p10/p90/mean/std/cv.

    ``std_ms`` is the sample standard deviation (n-1), 0 for a single value;
    ``cv`` is std/mean, 0 when the mean is 0.
    """
    values = [float(t) for t in times_ms]
    if not values:
        raise ValueError("no timings to summarize")
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "times_ms": [round(v, 6) for v in values],
        "median_ms": statistics.median(values),
        "p10_ms": percentile(values, 10),
        "p90_ms": percentile(values, 90),
        "mean_ms": mean,
        "std_ms": std,
        "cv": std / mean if mean > 0 else 0.0,
    }

"""A synthetic compute profile with a known shape, for the profile-chart tests (page and browser).

Per-iteration phase times, flat-then-linear with the knee at batch 32 (an under-occupied device
that saturates), a few percent of seeded noise, three DDP buckets, and the largest batch that fits
at 256. Built on the tiny model's real profile (``tests/profiler/fixtures/tiny_compute.json``) so
it passes the agent's schema.
"""

from __future__ import annotations

import copy
import json
import random
import statistics
from pathlib import Path

TINY = Path(__file__).resolve().parents[1] / "profiler" / "fixtures" / "tiny_compute.json"
BATCHES = (4, 8, 16, 32, 64, 128, 256)
KNEE = 32
MAX_BATCH = 256


def forward_ms(b: int) -> float:
    return 6.0 + 0.02 * min(b, KNEE) + 0.3 * max(b - KNEE, 0)


def _stats(times: list[float]) -> dict:
    ordered = sorted(times)
    mean = statistics.fmean(times)
    std = statistics.stdev(times)

    def pct(q: float) -> float:
        k = (len(ordered) - 1) * q
        lo = int(k)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)

    return {
        "times_ms": times,
        "median_ms": statistics.median(times),
        "p10_ms": pct(0.1),
        "p90_ms": pct(0.9),
        "mean_ms": mean,
        "std_ms": std,
        "cv": std / mean,
    }


def knee_profile(seed: int = 7, iters: int = 6) -> dict:
    doc = json.loads(TINY.read_text())
    template = doc["samples"][0]
    rng = random.Random(seed)
    samples = []
    for b in BATCHES:
        fwd = [forward_ms(b) * (1 + rng.uniform(-0.04, 0.04)) for _ in range(iters)]
        bwd = [2 * forward_ms(b) * (1 + rng.uniform(-0.04, 0.04)) for _ in range(iters)]
        opt = [1.5 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(iters)]
        step = [f + w + o for f, w, o in zip(fwd, bwd, opt, strict=True)]
        s = copy.deepcopy(template)
        s["batch_size"] = b
        s["iters"] = iters
        s["phases"] = {
            "forward": _stats(fwd),
            "backward": _stats(bwd),
            "optimizer": _stats(opt),
            "step": _stats(step),
        }
        backward = statistics.median(bwd)
        s["buckets"] = [
            {
                "index": i,
                "size_bytes": size,
                "num_params": n,
                "ready_ms": frac * backward,
                "ready_fraction": frac,
            }
            for i, (size, n, frac) in enumerate(
                [(26_214_400, 4, 0.31), (18_874_368, 6, 0.66), (2_097_152, 9, 0.99)]
            )
        ]
        samples.append(s)
    doc["samples"] = samples
    doc["max_batch_size"] = MAX_BATCH
    doc["max_batch_capped"] = False
    doc["iters"] = iters
    return doc

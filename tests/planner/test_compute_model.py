"""Piecewise-linear compute model per (model, device)."""

from __future__ import annotations

import math
import random

import pytest

from planner.models.compute import (
    BatchTooLargeError,
    ComputeModel,
    ComputeRangeError,
    OutOfProfiledRangeError,
    fit_compute_model,
    fit_piecewise_linear,
    run_spread,
)
from planner.profiles import load_compute_profile


def profile_doc(points, *, max_batch=None, noise=0.0, seed=0):
    """points: {batch: (fwd, bwd, opt)}; 10 iterations each with optional relative noise."""
    rng = random.Random(seed)

    def times(t):
        return [t * (1 + noise * rng.gauss(0, 1)) for _ in range(10)]

    return {
        "schema_version": 1, "kind": "compute",
        "model": {"spec": "m"}, "device": {"type": "cuda", "name": "gpu"},
        "max_batch_size": max_batch,
        "samples": [{"batch_size": b,
                     "phases": {"forward": {"times_ms": times(f)}, "backward": {"times_ms": times(w)},
                                "optimizer": {"times_ms": times(o)}},
                     "buckets": [{"index": 0, "size_bytes": 100, "ready_ms": 0.1 * w},
                                 {"index": 1, "size_bytes": 200, "ready_ms": (0.5 + b / 1000) * w}]}
                    for b, (f, w, o) in points.items()],
    }


def linear_model(max_batch=None):
    pts = {b: (1 + 0.1 * b, 2 + 0.2 * b, 0.5) for b in (8, 16, 32, 64)}
    return fit_compute_model(load_compute_profile(profile_doc(pts, max_batch=max_batch)))


def test_it_fits_a_line_exactly_when_times_are_linear():
    fit = fit_piecewise_linear([8, 16, 32, 64], [1.8, 2.6, 4.2, 7.4])
    assert fit.knee is None
    assert fit.intercept == pytest.approx(1.0)
    assert fit.slope1 == pytest.approx(0.1)
    assert fit.rel_rmse == pytest.approx(0.0, abs=1e-9)


def test_it_finds_the_knee_of_a_flat_then_linear_curve():
    batches = [1, 2, 4, 8, 16, 32, 64]
    times = [5.0 if b <= 8 else 5.0 + 0.5 * (b - 8) for b in batches]
    fit = fit_piecewise_linear(batches, times)
    assert fit.knee == 8
    assert fit.slope1 == pytest.approx(0.0, abs=1e-9)
    assert fit.slope2 == pytest.approx(0.5)
    assert fit(24) == pytest.approx(13.0)


def test_it_keeps_a_line_when_the_knee_does_not_pay():
    rng = random.Random(1)
    batches = [8, 16, 24, 32, 48, 64]
    times = [(2 + 0.3 * b) * (1 + 0.01 * rng.gauss(0, 1)) for b in batches]
    fit = fit_piecewise_linear(batches, times)
    assert fit.knee is None
    assert fit(40) == pytest.approx(2 + 0.3 * 40, rel=0.02)


def test_it_predicts_each_phase_and_marks_the_source_measured():
    pred = linear_model().predict(32)
    assert (pred.forward, pred.backward, pred.optimizer) == pytest.approx((4.2, 8.4, 0.5))
    assert pred.total == pytest.approx(13.1)
    assert pred.source == "measured"
    assert pred.batch_size == 32


def test_it_interpolates_between_profiled_batches():
    assert linear_model().predict(40).forward == pytest.approx(5.0)


def test_it_keeps_the_iteration_spread_per_phase():
    pts = {b: (1 + 0.1 * b, 2 + 0.2 * b, 0.5) for b in (8, 16, 32)}
    model = fit_compute_model(load_compute_profile(profile_doc(pts, noise=0.05)))
    spread = model.predict(16).spread
    for p in ("forward", "backward", "optimizer"):
        assert 0.02 < spread.get(p) < 0.1


def test_it_rejects_batch_above_max():
    with pytest.raises(BatchTooLargeError, match="max_batch_size 48"):
        linear_model(max_batch=48).predict(49)


def test_it_rejects_a_batch_far_outside_the_profiled_range():
    model = linear_model()
    with pytest.raises(OutOfProfiledRangeError, match="profiled range 8..64"):
        model.predict(81)
    with pytest.raises(OutOfProfiledRangeError):
        model.predict(5)


def test_it_allows_a_25_percent_extrapolation_margin():
    model = linear_model()
    assert (model.min_batch, model.max_batch) == (6, 80)
    assert model.predict(80).forward == pytest.approx(9.0)
    assert model.predict(6).forward == pytest.approx(1.6)
    assert issubclass(OutOfProfiledRangeError, ComputeRangeError)
    assert issubclass(ComputeRangeError, ValueError)


def test_it_interpolates_bucket_ready_fractions_between_batches():
    buckets = linear_model().buckets(48)
    assert [b.size_bytes for b in buckets] == [100, 200]
    assert buckets[0].ready_fraction == pytest.approx(0.1)
    assert buckets[1].ready_fraction == pytest.approx(0.548)


def test_it_roundtrips_through_a_dict():
    model = linear_model(max_batch=64)
    again = ComputeModel.from_dict(model.to_dict())
    assert again.predict(20) == model.predict(20)
    assert again.buckets(20) == model.buckets(20)


def test_it_measures_the_run_to_run_spread_from_repeated_profiles():
    # totals at batch 8: 10 and 10·e^0.1 ms; at batch 16: 20, 20 and 20·e^0.3; batch 32 only once
    def prof(t8, t16=None):
        pts = {8: (t8 / 2, t8 / 2, 0.0)}
        if t16 is not None:
            pts[16] = (t16 / 2, t16 / 2, 0.0)
        return load_compute_profile(profile_doc(pts))

    profiles = [prof(10.0, 20.0), prof(10.0 * math.exp(0.1), 20.0),
                load_compute_profile(profile_doc({16: (10 * math.exp(0.3), 10 * math.exp(0.3), 0.0),
                                                  32: (30.0, 30.0, 0.0)}))]
    # pooled: batch 8 → deviations ±0.05 (1 dof); batch 16 → logs 0, 0, 0.3: ss 0.06 (2 dof)
    expected = math.sqrt((2 * 0.05 ** 2 + 0.06) / 3)
    assert run_spread(profiles) == pytest.approx(expected, rel=1e-9)


def test_it_gives_no_run_spread_without_a_repeated_batch_size():
    one = load_compute_profile(profile_doc({8: (1.0, 2.0, 0.5)}))
    other = load_compute_profile(profile_doc({16: (2.0, 4.0, 0.5)}))
    assert run_spread([one]) == 0.0
    assert run_spread([one, other]) == 0.0
    assert run_spread([]) == 0.0

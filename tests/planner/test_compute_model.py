"""Piecewise-linear compute model per (model, device)."""

from __future__ import annotations

import math
import random

import pytest

from planner.perf.compute import (
    BatchTooLargeError,
    ComputeModel,
    ComputeRangeError,
    OutOfProfiledRangeError,
    fit_compute_model,
    fit_piecewise_linear,
    phase_correlation,
    run_spread,
)
from planner.profiles import load_compute_profile


def profile_doc(points, *, max_batch=None, noise=0.0, seed=0):
    """points: {batch: (fwd, bwd, opt)}; 10 iterations each with optional relative noise."""
    rng = random.Random(seed)

    def times(t):
        return [t * (1 + noise * rng.gauss(0, 1)) for _ in range(10)]

    return {
        "schema_version": 1,
        "kind": "compute",
        "model": {"spec": "m"},
        "device": {"type": "cuda", "name": "gpu"},
        "max_batch_size": max_batch,
        "samples": [
            {
                "batch_size": b,
                "phases": {
                    "forward": {"times_ms": times(f)},
                    "backward": {"times_ms": times(w)},
                    "optimizer": {"times_ms": times(o)},
                },
                "buckets": [
                    {"index": 0, "size_bytes": 100, "ready_ms": 0.1 * w},
                    {"index": 1, "size_bytes": 200, "ready_ms": (0.5 + b / 1000) * w},
                ],
            }
            for b, (f, w, o) in points.items()
        ],
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

    profiles = [
        prof(10.0, 20.0),
        prof(10.0 * math.exp(0.1), 20.0),
        load_compute_profile(
            profile_doc({16: (10 * math.exp(0.3), 10 * math.exp(0.3), 0.0), 32: (30.0, 30.0, 0.0)})
        ),
    ]
    # pooled: batch 8 → deviations ±0.05 (1 dof); batch 16 → logs 0, 0, 0.3: ss 0.06 (2 dof)
    expected = math.sqrt((2 * 0.05**2 + 0.06) / 3)
    assert run_spread(profiles) == pytest.approx(expected, rel=1e-9)


def test_it_gives_no_run_spread_without_a_repeated_batch_size():
    one = load_compute_profile(profile_doc({8: (1.0, 2.0, 0.5)}))
    other = load_compute_profile(profile_doc({16: (2.0, 4.0, 0.5)}))
    assert run_spread([one]) == 0.0
    assert run_spread([one, other]) == 0.0
    assert run_spread([]) == 0.0


def sample_of(fwd, bwd, opt):
    """A one-batch profile sample with the given per-iteration phase times."""
    doc = profile_doc({8: (1.0, 1.0, 1.0)})
    doc["samples"][0]["phases"] = {
        "forward": {"times_ms": fwd},
        "backward": {"times_ms": bwd},
        "optimizer": {"times_ms": opt},
    }
    return load_compute_profile(doc).sample_for(8)


def test_phases_that_move_together_are_fully_correlated():
    # forward and backward rise and fall together, the optimizer is constant: Var(T) = (σf + σb)²
    assert phase_correlation(sample_of([1, 2, 3, 4], [2, 4, 6, 8], [1, 1, 1, 1])) == pytest.approx(1.0)


def test_phases_that_move_against_each_other_count_as_independent():
    # forward up while backward down: negative covariance, clamped to 0 (the one-factor model
    # in the simulator needs ρ ≥ 0)
    assert phase_correlation(sample_of([1, 2, 3, 4], [4, 3, 2, 1], [1, 1, 1, 1])) == 0.0


def test_the_correlation_reproduces_the_variance_of_the_iteration_totals():
    # forward 10, 12, 10, 12; backward 20, 20, 24, 24 (uncorrelated); optimizer 5, 6, 6, 5 (ρ_fo = 0,
    # ρ_bo = 0): Var(T) = Σ Var: ρ = 0
    assert phase_correlation(sample_of([10, 12, 10, 12], [20, 20, 24, 24], [5, 6, 6, 5])) == pytest.approx(
        0.0
    )
    # forward 10, 12, 10, 12 and backward 20, 24, 22, 22: cov = 1, σf = 1, σb = √2, optimizer constant
    # → ρ = 2·cov / (2·σf·σb) = 1/√2
    assert phase_correlation(sample_of([10, 12, 10, 12], [20, 24, 22, 22], [5, 5, 5, 5])) == pytest.approx(
        1 / math.sqrt(2)
    )


def test_too_few_iterations_give_no_correlation():
    assert phase_correlation(sample_of([1, 2], [2, 4], [1, 1])) == 0.0


def test_the_model_keeps_the_phase_correlation_per_batch_and_interpolates_it():
    rng = random.Random(1)
    doc = profile_doc({8: (1.0, 2.0, 0.5), 16: (2.0, 4.0, 0.5)})
    for sample, rho in zip(doc["samples"], (0.0, 1.0), strict=True):
        common = [rng.gauss(0, 1) for _ in range(40)]
        own = {p: [rng.gauss(0, 1) for _ in range(40)] for p in ("forward", "backward", "optimizer")}
        for p, base in zip(("forward", "backward", "optimizer"), (10.0, 20.0, 5.0), strict=True):
            sample["phases"][p] = {
                "times_ms": [
                    base * (1 + 0.05 * (math.sqrt(rho) * c + math.sqrt(1 - rho) * e))
                    for c, e in zip(common, own[p], strict=True)
                ]
            }
    model = fit_compute_model(load_compute_profile(doc))
    assert model.correlations[0] < 0.25
    assert model.correlations[1] == pytest.approx(1.0)
    assert model.predict(12).spread.correlation == pytest.approx(sum(model.correlations) / 2)
    assert ComputeModel.from_dict(model.to_dict()).predict(12) == model.predict(12)


def test_a_stored_model_without_correlations_reads_as_independent_phases():
    doc = linear_model().to_dict()
    del doc["correlations"]
    assert ComputeModel.from_dict(doc).predict(16).spread.correlation == 0.0


def test_it_rejects_correlations_that_do_not_match_the_batch_sizes_or_leave_0_1():
    doc = linear_model().to_dict()
    with pytest.raises(ValueError, match="correlations for 4 batch sizes"):
        ComputeModel.from_dict({**doc, "correlations": [0.5]})
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        ComputeModel.from_dict({**doc, "correlations": [0.5, 0.5, 1.5, 0.5]})


def test_a_single_varying_phase_has_no_correlation():
    assert phase_correlation(sample_of([1.1, 2.3, 3.7, 4.9], [2, 2, 2, 2], [1, 1, 1, 1])) == 0.0

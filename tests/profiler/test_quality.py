"""profiler.quality: which measurements are flagged noisy, and why."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from profiler import quality


@dataclass
class Row:
    batch_size: int
    phase: str
    median_ms: float
    cv: float = 0.05


@dataclass
class Comm:
    size_bytes: int
    cv: float


def batch(b: int, fwd: float, cv: float = 0.05) -> list[Row]:
    return [Row(b, "forward", fwd, cv), Row(b, "backward", 2 * fwd), Row(b, "optimizer", 1.0)]


def test_it_flags_a_phase_whose_cv_is_above_0_2_and_not_one_at_0_2():
    rows = batch(8, 1.0, cv=0.21) + batch(16, 2.0, cv=0.2)
    flags = quality.compute_flags(rows)
    assert [(f.batch_size, f.phase) for f in flags] == [(8, "forward")]
    assert "CV 0.21" in flags[0].reason and flags[0].advice == "use more iterations"


def test_it_flags_a_larger_batch_measured_faster_than_a_smaller_one():
    # T(128) = 3*10+1 = 31 ms, T(256) = 3*8+1 = 25 ms: 256 is flagged, naming 128
    rows = batch(64, 5.0) + batch(128, 10.0) + batch(256, 8.0)
    flags = quality.compute_flags(rows)
    assert [(f.batch_size, f.phase) for f in flags] == [(256, None)]
    assert "batch 256 (25 ms)" in flags[0].reason and "smaller batch 128 (31 ms)" in flags[0].reason


def test_it_compares_with_the_slowest_smaller_batch_not_only_the_previous_one():
    # 128 was already faster than 64; 256 is slower than 128 but still faster than 64
    rows = batch(64, 10.0) + batch(128, 6.0) + batch(256, 8.0)
    flagged = {f.batch_size: f.reason for f in quality.order_flags(rows)}
    assert set(flagged) == {128, 256} and "smaller batch 64" in flagged[256]


def test_a_monotone_profile_with_equal_times_is_not_flagged():
    rows = batch(4, 2.0) + batch(8, 2.0) + batch(16, 3.0)
    assert quality.compute_flags(rows) == []


def test_a_batch_missing_a_phase_is_left_out_of_the_order_rule():
    rows = batch(8, 10.0) + [Row(16, "forward", 1.0), Row(16, "backward", 1.0)]
    assert quality.iteration_ms(rows) == {8: 31.0}
    assert quality.order_flags(rows) == []


def test_comm_sizes_are_flagged_by_cv_only():
    flags = quality.comm_flags([Comm(1024, 0.5), Comm(2048, 0.1)])
    assert [f.size_bytes for f in flags] == [1024] and flags[0].batch_size is None


def test_reasons_for_a_phase_include_its_batch_wide_flag():
    rows = batch(64, 5.0) + batch(128, 10.0) + batch(256, 8.0, cv=0.4)
    by_key = quality.flags_by_key(quality.compute_flags(rows))
    forward = quality.reasons_for(by_key, 256, "forward")
    assert len(forward) == 2 and any("CV 0.40" in r for r in forward)
    assert len(quality.reasons_for(by_key, 256, "optimizer")) == 1
    assert quality.reasons_for(by_key, 128, "forward") == []
    assert quality.flags_by_key([]) == {}


@pytest.mark.django_db
def test_the_run_s_api_detail_lists_its_noisy_measurements(user_api, make_run):
    from profiler.models import ComputeSample

    run = make_run(status="succeeded")
    for b, fwd, cv in ((128, 10.0, 0.01), (256, 8.0, 0.5)):
        for phase, median in (("forward", fwd), ("backward", 2 * fwd), ("optimizer", 1.0)):
            ComputeSample.objects.create(
                run=run,
                batch_size=b,
                phase=phase,
                median_ms=median,
                p10_ms=median,
                p90_ms=median,
                mean_ms=median,
                std_ms=cv * median,
                cv=cv,
                times_ms=[median] * 5,
            )
    body = user_api.get(f"/api/v1/profiling-runs/{run.pk}/").json()
    keys = [(f["batch_size"], f["phase"]) for f in body["noisy"]]
    assert keys[0] == (256, None)  # the order rule first, then each phase's spread
    assert sorted(keys[1:]) == [(256, "backward"), (256, "forward"), (256, "optimizer")]
    assert {f["advice"] for f in body["noisy"]} == {"use more iterations"}
    assert user_api.get("/api/v1/profiling-runs/").status_code == 200  # the list stays without it

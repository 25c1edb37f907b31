"""``solve(..., progress=cb)``: evaluated/estimated counts as the solve goes; an exception from the
callback (how a caller cancels) propagates out of ``solve``."""

from __future__ import annotations

import pytest

from planner.solver import PlanRequest, solve
from tests.planner.test_solver import cand, toy_perf


def _request() -> PlanRequest:
    return PlanRequest(
        objective="cost",
        total_samples=5e7,
        deadline_hours=30,
        max_nodes=6,
        max_types=2,
        global_batch_min=64,
        global_batch_max=256,
    )


def _cands():
    return [cand(t) for t in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge")] + [
        cand("g5.xlarge", market="spot", bucket=1)
    ]


def test_progress_reports_evaluated_against_an_estimated_total():
    calls: list[tuple[int, int]] = []
    res = solve(_request(), _cands(), toy_perf, progress=lambda done, total: calls.append((done, total)))
    assert calls, "progress was never called"
    assert all(0 <= done <= total for done, total in calls)
    dones = [d for d, _ in calls]
    assert dones == sorted(dones)
    assert calls[-1][0] == calls[-1][1] > 0  # the last call says: done
    assert res.best is not None


def test_progress_is_throttled():
    calls: list[tuple[int, int]] = []
    solve(_request(), _cands(), toy_perf, progress=lambda d, t: calls.append((d, t)))
    # a fast solve reports once at the start and once at the end, not per evaluation
    assert len(calls) <= 5


class Cancelled(Exception):
    pass


def test_an_exception_from_progress_cancels_the_solve():
    def cancel(done, total):
        raise Cancelled

    with pytest.raises(Cancelled):
        solve(_request(), _cands(), toy_perf, progress=cancel)

"""A solve holds a counted memory budget; a request that cannot fit gets a RequestError naming
the field and the limit, and large requests stream instead of materialising every column."""

from __future__ import annotations

import pytest

from planner.solver import PlanRequest, RequestError, solve
from tests.planner.test_solver import cand, toy_perf


def _cands():
    return [cand(t) for t in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge")] + [
        cand(t, market="spot", bucket=1) for t in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge")
    ]


def test_a_request_over_the_memory_limit_names_the_field_and_the_limit():
    req = PlanRequest(
        objective="cost",
        total_samples=5e7,
        deadline_hours=30,
        max_nodes=64,
        global_batch_min=64,
        global_batch_max=256,
    )
    with pytest.raises(RequestError) as exc:
        solve(req, _cands(), toy_perf, max_memory_mb=0.001)
    assert exc.value.field == "max_nodes"
    assert "MB limit per plan" in str(exc.value) and "max_nodes (now 64)" in str(exc.value)


def test_a_bad_memory_limit_is_a_request_error():
    req = PlanRequest(objective="cost", total_samples=5e7, deadline_hours=30)
    with pytest.raises(RequestError) as exc:
        solve(req, _cands(), toy_perf, max_memory_mb=0)
    assert exc.value.field == "max_memory_mb"


def test_mixes_stream_within_the_default_budget_and_report_it():
    req = PlanRequest(
        objective="cost",
        total_samples=5e7,
        deadline_hours=30,
        max_nodes=24,
        max_types=3,
        global_batch_min=64,
        global_batch_max=256,
    )
    res = solve(req, _cands(), toy_perf)
    assert 0 < res.stats.search_memory_mb < 1000
    assert res.stats.mixed_vectors_bounded > 0
    assert len(res.points) <= 2 * 4000 + len(res.pareto)


def test_the_mixes_a_search_keeps_are_counted_against_the_budget(monkeypatch):
    """Every feasible mix the search evaluates is kept to the end: a search that would keep too
    many gets the budget's RequestError naming max_types, not an ever-growing list."""
    from planner.solver import search

    req = PlanRequest(
        objective="time",
        total_samples=5e7,
        budget_usd=500,
        max_nodes=24,
        max_types=3,
        global_batch_min=64,
        global_batch_max=256,
    )
    assert solve(req, _cands(), toy_perf).stats.mixed_configs_evaluated > 0  # it keeps some
    monkeypatch.setattr(search, "COL_BYTES", 10 * 1024**3)  # one kept mix is over any budget
    with pytest.raises(RequestError) as exc:
        solve(req, _cands(), toy_perf)
    assert exc.value.field == "max_types"
    assert "evaluated mixes" in str(exc.value) and "MB limit per plan" in str(exc.value)

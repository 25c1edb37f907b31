"""Young/Daly intervals, the uniform-progress deadline guard and interruption costs, by hand."""

from __future__ import annotations

import math

import pytest

from launcher.spot_policy import (
    MAX_INTERVAL_MIN,
    MIN_INTERVAL_MIN,
    NONE,
    ON_DEMAND,
    SPOT,
    Progress,
    checkpoint_interval_min,
    cluster_mtbf_h,
    decide,
    interruption_cost,
)
from planner.spot import hourly_hazard


def test_young_daly_by_hand():
    # w = 2 min, M = 25 h = 1500 min: sqrt(2 * 2 * 1500) - 2 = 77.46 - 2 -> capped at 60 min.
    assert checkpoint_interval_min(2.0, 25.0) == MAX_INTERVAL_MIN
    # w = 1 min, M = 5 h = 300 min: sqrt(600) - 1 = 23.49 min.
    assert checkpoint_interval_min(1.0, 5.0) == pytest.approx(math.sqrt(600) - 1)
    assert checkpoint_interval_min(0.01, 1.0) == MIN_INTERVAL_MIN  # sqrt(1.2) - 0.01 < 5
    assert checkpoint_interval_min(3.0, math.inf) == MAX_INTERVAL_MIN  # on-demand only
    with pytest.raises(ValueError):
        checkpoint_interval_min(-1, 5)


def test_cluster_mtbf_counts_every_spot_node():
    lam = hourly_hazard(4)  # >20 %: 25 % a month
    assert lam == pytest.approx(-math.log(0.75) / 730)
    assert cluster_mtbf_h([(8, 4, True), (2, 0, False)]) == pytest.approx(1 / (8 * lam))
    assert cluster_mtbf_h([(4, 4, False)]) == math.inf


# A hand-worked job: 10 h of work, a 20 h deadline, 0.1 h per restart. Uniform progress expects
# t / 2 hours of work at hour t; the switch-back margin is 0.1 * 10 / 20 = 0.05 h.
JOB = {"deadline_h": 20.0, "work_total_h": 10.0, "restart_h": 0.1}


def _decide(now, done, current):
    return decide(Progress(now_h=now, work_done_h=done, current=current, **JOB))


def test_a_job_ahead_of_uniform_progress_stays_on_spot():
    d = _decide(5.0, 4.0, SPOT)  # expects 2.5
    assert (d.market, d.reason) == (SPOT, "stay")


def test_a_job_behind_moves_to_on_demand_and_says_why():
    d = _decide(12.0, 5.0, SPOT)  # expects 6.0
    assert (d.market, d.reason) == (ON_DEMAND, "behind")
    assert "6.00 h" in d.why and "5.00 h of 10.00 h" in d.why


def test_it_returns_to_spot_only_past_the_restart_margin():
    assert _decide(12.0, 6.04, ON_DEMAND).market == ON_DEMAND  # 0.04 ahead < 0.05 margin
    d = _decide(12.0, 6.06, ON_DEMAND)
    assert (d.market, d.reason) == (SPOT, "ahead")


def test_an_interrupted_job_takes_spot_again_only_when_ahead():
    assert _decide(8.0, 4.5, NONE).market == SPOT  # expects 4.0, +0.5 ahead
    assert _decide(8.0, 4.02, NONE).market == ON_DEMAND  # inside the margin


def test_the_safety_net_commits_to_on_demand_before_the_deadline_is_lost():
    # At 9.75 h with nothing done: 10.25 h left for 10 h of work; a move to on-demand costs 0.1 h
    # and one more restart 0.1 h: 0.25 > 0.2, still room -> behind, not must.
    assert _decide(9.75, 0.0, SPOT).reason == "behind"
    # At 9.85 h: 0.15 <= 0.2 -> must.
    d = _decide(9.85, 0.0, SPOT)
    assert (d.market, d.reason) == (ON_DEMAND, "must") and "would miss" in d.why
    # Already on on-demand the switch is free: at 9.85 h, 0.15 > 0.1 -> not yet "must".
    assert _decide(9.85, 0.0, ON_DEMAND).reason == "behind"


def test_an_interruption_costs_the_work_since_the_checkpoint_and_the_restart():
    c = interruption_cost(interrupted_at_h=3.4, last_checkpoint_at_h=3.0, restart_h=0.1, hourly_usd=98.32)
    assert c.lost_h == pytest.approx(0.5) and c.lost_usd == pytest.approx(49.16)
    with pytest.raises(ValueError):
        interruption_cost(1.0, 2.0, 0.1, 1.0)

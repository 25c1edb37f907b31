"""Spot-interruption model: hazards, expected completion, risk, p90, and the solver's use of it."""

from __future__ import annotations

import math

import pytest

from planner import spot
from planner.offers import Candidate
from planner.solver import Estimate, PlanRequest, evaluate_config, solve

PARAMS = spot.SpotParams(checkpoint_interval_h=0.5, restart_overhead_h=0.1)


def node(market: str, bucket: int = 0) -> Candidate:
    return Candidate(
        instance_type="p3.2xlarge",
        family="p3",
        region="us-east-1",
        market=market,
        zone="use1-az1" if market == "spot" else None,
        price_per_hour=1.0,
        gpus_per_node=1,
        gpu_model="V100",
        vcpus=8,
        network_gbps=10.0,
        efa=False,
        interruption_bucket=bucket if market == "spot" else 0,
    )


def constant_perf(config, global_batch):
    """1,000 samples/s per node whatever the market: same hardware, same throughput."""
    nodes = sum(n for _, n in config)
    return Estimate(
        iter_time_s=global_batch / (1000.0 * nodes),
        iter_time_p90_s=global_batch / (1000.0 * nodes),
        throughput_sps=1000.0 * nodes,
    )


def test_bucket_midpoints_map_to_a_monthly_survival_probability():
    for bucket, f in enumerate(spot.BUCKET_MONTHLY_FREQUENCY):
        lam = spot.hourly_hazard(bucket)
        assert math.exp(-lam * spot.HOURS_PER_MONTH) == pytest.approx(1 - f)
    hazards = [spot.hourly_hazard(b) for b in range(5)]
    assert hazards == sorted(hazards) and hazards[0] > 0
    with pytest.raises(ValueError):
        spot.hourly_hazard(5)


def test_job_hazard_adds_up_over_spot_nodes_only():
    lam = spot.hourly_hazard(2)
    assert spot.job_hazard([(4, 2, True), (3, 4, False)]) == pytest.approx(4 * lam)
    assert spot.job_hazard([(3, 4, False)]) == 0.0


def test_expected_completion_is_work_over_one_minus_hazard_times_loss():
    lam = 0.1
    expected = 10.0 / (1 - lam * (0.25 + 0.1))
    assert spot.expected_completion_h(10.0, lam, PARAMS) == pytest.approx(expected)
    assert spot.expected_completion_h(10.0, 0.0, PARAMS) == 10.0
    assert spot.expected_completion_h(10.0, 1 / 0.35, PARAMS) == math.inf


def test_checkpoint_writes_inflate_work_only_when_interruptible():
    p = spot.SpotParams(checkpoint_interval_h=0.5, restart_overhead_h=0.1, checkpoint_write_h=0.05)
    assert spot.work_h(10.0, 0.01, p) == pytest.approx(11.0)
    assert spot.work_h(10.0, 0.0, p) == 10.0


def test_analytic_mean_and_p90_agree_with_seeded_simulation():
    for lam in (0.02, 0.1):
        c = spot.completion(20.0, lam, PARAMS, deadline_h=21.0)
        sim = spot.simulate_completion(20.0, lam, PARAMS, runs=3000, seed=11, deadline_h=21.0)
        assert c.expected_h == pytest.approx(sim.mean_h, rel=0.01)
        assert c.p90_h == pytest.approx(sim.p90_h, rel=0.02)
        assert c.miss_probability == pytest.approx(sim.miss_probability, abs=0.03)


def test_simulation_is_reproducible_with_a_seed():
    a = spot.simulate_completion(5.0, 0.2, PARAMS, runs=200, seed=3)
    b = spot.simulate_completion(5.0, 0.2, PARAMS, runs=200, seed=3)
    assert a == b


def test_miss_probability_falls_with_a_later_deadline_and_is_zero_without_interruptions():
    risks = [spot.miss_probability(d, 10.0, 0.2, PARAMS) for d in (10.5, 11.0, 12.0, 14.0)]
    assert risks == sorted(risks, reverse=True) and risks[0] > risks[-1]
    assert spot.miss_probability(10.5, 10.0, 0.0, PARAMS) == 0.0
    assert spot.miss_probability(9.5, 10.0, 0.0, PARAMS) == 1.0
    assert 0.0 < spot.miss_probability(10.0, 10.0, 0.0, PARAMS, jitter_sd_h=0.1) < 1.0


def test_p90_is_at_least_the_mean_and_quantiles_are_ordered():
    q50 = spot.completion_quantile(0.5, 10.0, 0.3, PARAMS)
    q90 = spot.completion_quantile(0.9, 10.0, 0.3, PARAMS)
    assert 10.0 <= q50 <= q90
    assert spot.completion(10.0, 0.3, PARAMS).p90_h == pytest.approx(q90)


def test_spot_expected_time_exceeds_on_demand_time_at_equal_throughput():
    req = PlanRequest(
        objective="cost",
        total_samples=3.6e7,
        deadline_hours=100,
        global_batch_min=256,
        global_batch_max=256,
        startup_overhead_h=0.0,
    )
    od = evaluate_config(((node("on-demand"), 2),), req, constant_perf)
    sp = evaluate_config(((node("spot", bucket=3), 2),), req, constant_perf)
    assert od.estimate.throughput_sps == sp.estimate.throughput_sps
    assert od.time_h == pytest.approx(5.0)
    assert sp.hazard_per_h == pytest.approx(2 * spot.hourly_hazard(3))
    assert sp.time_h > od.time_h
    assert sp.time_h == pytest.approx(spot.expected_completion_h(5.0, sp.hazard_per_h, req.spot_params))


def test_solver_reports_interruptions_risk_and_p90_for_spot_plans():
    req = PlanRequest(
        objective="cost",
        total_samples=3.6e7,
        deadline_hours=5.2,
        max_nodes=2,
        global_batch_min=256,
        global_batch_max=256,
        startup_overhead_h=0.0,
        checkpoint_interval_h=1.0,
        restart_overhead_h=0.2,
    )
    sp = node("spot", bucket=4)
    best = solve(req, [sp], constant_perf).best
    assert best.uses_spot and best.expected_interruptions > 0
    assert best.time_p90_h >= best.base_time_h
    assert 0 <= best.deadline_miss_risk <= 1
    assert "expected interruptions" in best.why


def test_a_spot_p90_exceeds_its_p50_by_the_hand_worked_interruption_cost():
    """16 spot nodes of the ">20 %" bucket for 20 h of work, checkpoints every 0.5 h, 0.1 h restarts.

    lambda = -ln(0.75) / 730 = 3.941e-4 /h per node; Lambda = 16 lambda = 6.306e-3 /h;
    E[T] = 20 / (1 - Lambda * (0.25 + 0.1)) = 20.0442 h; m = Lambda E[T] = 0.12640;
    P(K=0) = e^-m = 0.88127 < 0.9, so the median is the uninterrupted 20 h and the p90 lies among
    the one-interruption outcomes T = 20 + 0.1 + 0.5 U:  P0 + P1 u = 0.9 with P1 = m e^-m = 0.11139
    -> u = 0.1681 -> p90 = 20.1841 h: 0.1841 h (11 minutes) above the median.
    """
    params = spot.SpotParams(checkpoint_interval_h=0.5, restart_overhead_h=0.1)
    lam = spot.job_hazard([(16, 4, True)])
    assert lam == pytest.approx(16 * -math.log(0.75) / 730)
    e = 20 / (1 - lam * 0.35)
    m = lam * e
    p0, p1 = math.exp(-m), m * math.exp(-m)
    u = (0.9 - p0) / p1
    assert (round(e, 4), round(p0, 5), round(u, 4)) == (20.0442, 0.88127, 0.1681)
    c = spot.completion(20.0, lam, params)
    assert c.expected_h == pytest.approx(e)
    assert spot.completion_quantile(0.5, 20.0, lam, params) == pytest.approx(20.0)
    assert c.p90_h == pytest.approx(20.0 + 0.1 + 0.5 * u, abs=1e-6)
    assert c.p90_h - 20.0 == pytest.approx(0.1841, abs=1e-4)


def test_a_spot_p90_keeps_the_iteration_jitter_and_meets_the_on_demand_p90_as_the_hazard_vanishes():
    """The bug this pins: with any hazard > 0 the jitter was dropped, so a spot plan with a tiny
    hazard had a smaller p90 (20 h) than the same plan on on-demand (20 + 1.2816 s h)."""
    params = spot.SpotParams(checkpoint_interval_h=0.5, restart_overhead_h=0.1)
    s = 0.05
    on_demand = spot.completion(20.0, 0.0, params, jitter_sd_h=s).p90_h
    assert on_demand == pytest.approx(20.0 + 1.2815515655 * s)
    tiny = spot.completion(20.0, 1e-9, params, jitter_sd_h=s).p90_h
    assert tiny == pytest.approx(on_demand, abs=1e-5)
    assert spot.miss_probability(20.0, 20.0, 1e-9, params, s) == pytest.approx(0.5, abs=1e-6)


def test_the_jittered_spot_distribution_is_the_convolution_of_interruptions_and_jitter():
    """16 ">20 %" nodes, 20 h, tau 0.5 h, r 0.1 h and a jitter of s = 0.05 h (3 minutes).

    T = 20 + J + sum_{k<=K} (0.1 + 0.5 U_k); an independent numerical convolution (scipy quad over
    J of the Irwin-Hall CDF) gives P(T <= t), and its 0.9 root (brentq) is the p90 the planner
    must report: 20.1835 h. The p50 is checked by hand: P(K >= 1, T <= ~20.01) is nil, so
    P0 Phi(z) = 0.5 -> Phi(z) = 0.5674 -> z = 0.1696 -> p50 = 20 + 0.05 z = 20.0085 h.
    """
    from scipy import integrate, optimize, stats

    params = spot.SpotParams(checkpoint_interval_h=0.5, restart_overhead_h=0.1)
    lam, s = spot.job_hazard([(16, 4, True)]), 0.05
    m = lam * spot.expected_completion_h(20.0, lam, params)
    pk = [math.exp(-m) * m**k / math.factorial(k) for k in range(6)]

    def cdf(t):
        total = pk[0] * stats.norm.cdf((t - 20.0) / s)
        for k in range(1, 6):
            x = t - 20.0 - 0.1 * k

            def integrand(j, x=x, k=k):
                return stats.norm.pdf(j, 0.0, s) * spot._irwin_hall_cdf((x - j) / 0.5, k)

            total += pk[k] * integrate.quad(integrand, -10 * s, 10 * s, limit=200)[0]
        return total

    for t in (19.95, 20.0, 20.1, 20.2, 20.4, 20.8):
        assert spot.completion_cdf(t, 20.0, lam, params, s) == pytest.approx(cdf(t), abs=1e-7)
    p90 = optimize.brentq(lambda t: cdf(t) - 0.9, 20.0, 21.0, xtol=1e-9)
    p50 = optimize.brentq(lambda t: cdf(t) - 0.5, 19.9, 20.2, xtol=1e-9)
    c = spot.completion(20.0, lam, params, jitter_sd_h=s)
    assert c.p90_h == pytest.approx(p90, abs=1e-6)
    assert spot.completion_quantile(0.5, 20.0, lam, params, s) == pytest.approx(p50, abs=1e-6)
    assert (round(p90, 4), round(p50, 4)) == (20.1835, 20.0085)

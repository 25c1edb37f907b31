"""DDP iteration simulator: hand-computable timelines, Monte-Carlo, batch balancing."""

from __future__ import annotations

import math

import pytest

from planner.hardware import Cluster
from planner.perf.comm import CommModel, ring_allreduce_prior_ms
from planner.perf.compute import BucketSpec, ComputeRangeError, PhaseSpread, PhaseTimes, fit_compute_model
from planner.profiles import load_compute_profile
from planner.simulator import (
    CommTime,
    Contention,
    WorkerLoad,
    balance_batch,
    cluster_comm_fn,
    simulate_ddp,
    simulate_iteration,
    timeline,
)

BUCKETS = (BucketSpec(1 << 20, 0.25), BucketSpec(25 << 20, 0.5), BucketSpec(25 << 20, 1.0))


def worker(fwd=10.0, bwd=20.0, opt=5.0, batch=16, spread=0.0):
    s = PhaseSpread(spread, spread, spread)
    return WorkerLoad(PhaseTimes(fwd, bwd, opt, spread=s), BUCKETS, batch)


def test_zero_communication_equals_the_compute_sum():
    t = timeline([worker(), worker()], [0.0, 0.0, 0.0])
    assert t.iteration_ms == pytest.approx(10 + 20 + 5)


def test_hidden_communication_costs_only_the_last_bucket():
    # buckets ready at 5, 10, 20 ms into backward; 2 ms each: all but the last overlap
    t = timeline([worker(), worker()], [2.0, 2.0, 2.0])
    assert t.comm_start_ms == pytest.approx((20.0, 25.0, 35.0))
    assert t.iteration_ms == pytest.approx(35 + 2)


def test_communication_bound_equals_forward_first_ready_all_comms_and_optimizer():
    comm = [30.0, 40.0, 50.0]
    t = timeline([worker(), worker()], comm)
    # opt + fwd + first bucket ready (0.25·bwd) + Σ comm
    assert t.iteration_ms == pytest.approx(5 + 10 + 0.25 * 20 + sum(comm))


def test_one_slow_worker_gates_every_bucket():
    fast, slow = worker(), worker(fwd=20.0, bwd=40.0)
    t = timeline([fast, slow, fast], [1.0, 1.0, 1.0])
    # slow worker: backward starts at 5 + 20 = 25, buckets ready at 35, 45, 65
    assert t.comm_start_ms == pytest.approx((35.0, 45.0, 65.0))
    assert t.iteration_ms == pytest.approx(66.0)
    assert t.critical_worker == 1


def test_a_cpu_bound_all_reduce_sharing_the_core_costs_backward_plus_communication():
    # share 1: all-reduce and backward split one core, so the work adds up
    contention = Contention.from_cpu_share(1.0)
    assert (contention.comm_speed, contention.compute_speed) == (0.5, 0.5)
    t = timeline([worker(), worker()], [2.0, 2.0, 2.0], contention=contention)
    assert t.iteration_ms == pytest.approx(5 + 10 + 20 + 6)
    # no contention is the GPU case
    assert timeline([worker()], [2.0, 2.0, 2.0], contention=Contention()).iteration_ms == pytest.approx(37.0)


def test_a_mostly_waiting_all_reduce_barely_slows_the_backward():
    # share 0.1: the all-reduce runs at full speed, the backward at 90 % while it runs
    t = timeline([worker()], [2.0, 2.0, 2.0], contention=[Contention.from_cpu_share(0.1)] * 3)
    assert t.comm_end_ms[0] == pytest.approx(22.0)
    assert t.backward_end_ms == pytest.approx(35 + 2 * 2 * 0.1, rel=1e-6)
    assert t.iteration_ms == pytest.approx(t.backward_end_ms + 2.0)


def test_contention_comes_from_the_cpu_shares_a_comm_profile_measured():
    from planner.profiles import CommProfile, CommSample, TimingStats

    def sample(size, share):
        return CommSample(size, TimingStats((1.0,), 1.0, 1.0, 1.0, 1.0, 0.0), cpu_share=share)

    prof = CommProfile("gloo", 2, 1, 2, (sample(1 << 20, 0.2), sample(4 << 20, 0.8)))
    got = Contention.from_comm_profile(prof, [1 << 19, 1 << 20, 2 << 20, 4 << 20, 64 << 20])
    # below and above the measured sizes the end shares hold; 2 MiB is halfway in log size: 0.5
    assert got[0] == got[1] == Contention.from_cpu_share(0.2)
    assert got[2] == Contention.from_cpu_share(0.5)
    assert got[3] == got[4] == Contention.from_cpu_share(0.8)
    # an NCCL profile has no CPU shares: the all-reduce overlaps for free
    gpu = CommProfile("nccl", 2, 1, 2, (CommSample(1 << 20, TimingStats((1.0,), 1.0, 1.0, 1.0, 1.0, 0.0)),))
    assert all(c.free for c in Contention.from_comm_profile(gpu, [1 << 20, 8 << 20]))


def test_on_one_host_every_all_reduce_is_cpu_bound_whatever_share_was_measured():
    from planner.profiles import CommProfile, CommSample, TimingStats

    def sample(size, share):
        return CommSample(size, TimingStats((1.0,), 1.0, 1.0, 1.0, 1.0, 0.0), cpu_share=share)

    prof = CommProfile("gloo", 2, 1, 2, (sample(1 << 20, 0.2), sample(4 << 20, 0.8)))
    # loopback: what the all-reduce waited for beside an idle peer is the peer's CPU work
    assert (
        Contention.from_comm_profile(prof, [1 << 20, 4 << 20], same_host=True)
        == [Contention.from_cpu_share(1.0)] * 2
    )
    # GPUs (no shares measured) overlap freely on one host too
    gpu = CommProfile("nccl", 2, 1, 2, (CommSample(1 << 20, TimingStats((1.0,), 1.0, 1.0, 1.0, 1.0, 0.0)),))
    assert all(c.free for c in Contention.from_comm_profile(gpu, [1 << 20], same_host=True))


def test_a_two_mode_all_reduce_is_drawn_from_its_measured_times():
    # communication-bound: T = opt + fwd + 0.25·bwd + Σ comm = 20 + 30 + 40 + c₃, with c₃ = 50 ms
    # three times in four and 150 ms once (gloo's fast and slow modes): T is 140 or 240, never between
    comm = [CommTime(30, 30), CommTime(40, 40), CommTime(50, 150, ratios=(1.0, 1.0, 1.0, 3.0))]
    result = simulate_iteration([worker(), worker()], comm, samples=4000, seed=5)
    assert result.iteration_ms_p50 == pytest.approx(140.0)
    assert result.iteration_ms_p90 == pytest.approx(240.0)
    assert result.iteration_ms_mean == pytest.approx(140 + 100 / 4, abs=3.0)
    # the measured times, not the p90, set the spread: times all at their median give none
    steady = simulate_iteration(
        [worker(), worker()], comm[:2] + [CommTime(50, 150, ratios=(1.0,) * 4)], samples=500
    )
    assert steady.iteration_ms_p50 == steady.iteration_ms_p90 == pytest.approx(140.0)


def test_measured_contention_slows_both_sides_while_they_overlap():
    # bucket 0 (ready at 20 ms) runs at half speed beside the backward: 4 ms instead of 2,
    # during which the backward runs at 80 %; buckets 1 and 2 are not contended
    cont = [Contention(0.5, 0.8), Contention(), Contention()]
    t = timeline([worker()], [2.0, 2.0, 2.0], contention=cont)
    assert t.comm_end_ms[0] == pytest.approx(24.0)
    assert t.backward_end_ms == pytest.approx(35.0 + 4 * 0.2)
    with pytest.raises(ValueError, match="contention"):
        Contention(0.0, 1.0)


def test_without_spread_every_sample_equals_the_deterministic_timeline():
    result = simulate_iteration([worker(), worker()], [CommTime(30, 30)] * 3, samples=50)
    assert result.iteration_ms_p50 == pytest.approx(result.deterministic_ms)
    assert result.iteration_ms_p90 == pytest.approx(result.deterministic_ms)
    assert result.throughput_samples_s == pytest.approx(32 / result.deterministic_ms * 1e3)


def test_monte_carlo_is_seeded_and_p90_exceeds_p50():
    args = ([worker(spread=0.1), worker(spread=0.1)], [CommTime(3, 4)] * 3)
    a = simulate_iteration(*args, samples=500, seed=7)
    b = simulate_iteration(*args, samples=500, seed=7)
    assert a == b
    assert a.iteration_ms_p90 > a.iteration_ms_p50
    # the slowest of two noisy workers gates the iteration: median above the noiseless value
    assert a.iteration_ms_p50 > a.deterministic_ms


@pytest.mark.parametrize("contention", [None, Contention.from_cpu_share(1.0)], ids=["free", "shared core"])
def test_run_drift_scales_whole_iterations_and_widens_only_the_p90(contention):
    # no per-iteration noise: every sample is the deterministic timeline scaled by its run factor
    # (all phases, all-reduces and DDP's tail drift together), so p90 = T·exp(1.2816·s)
    loads = [WorkerLoad(worker().phases, BUCKETS, 16, tail_ms=3.0)] * 2
    comm = [CommTime(4, 4)] * 3
    base = simulate_iteration(loads, comm, samples=4000, seed=3, contention=contention)
    drift = simulate_iteration(loads, comm, samples=4000, seed=3, contention=contention, run_spread=0.05)
    det = base.deterministic_ms
    assert base.iteration_ms_p90 == pytest.approx(det)
    assert drift.deterministic_ms == pytest.approx(det)
    assert drift.iteration_ms_p50 == pytest.approx(det, rel=0.01)
    assert drift.iteration_ms_p90 == pytest.approx(det * math.exp(1.2816 * 0.05), rel=0.01)
    assert simulate_iteration(
        loads, comm, samples=200, seed=3, contention=contention, run_spread=0.0
    ) == simulate_iteration(loads, comm, samples=200, seed=3, contention=contention)


def test_it_rejects_a_negative_or_absurd_run_drift():
    for bad in (-0.01, 1.5, float("nan")):
        with pytest.raises(ValueError, match="run_spread"):
            simulate_iteration([worker()], [CommTime(1)] * 3, run_spread=bad)
        with pytest.raises(ValueError, match="iteration_spread"):
            simulate_iteration([worker()], [CommTime(1)] * 3, iteration_spread=bad)


def test_correlated_phases_widen_the_iteration_as_one_phase_would():
    # one worker, no communication: T = fwd + bwd + opt. Fully correlated phases with the same
    # relative spread s scale together, so T is log-normal with spread s: p90 = T·exp(1.2816·s);
    # independent ones partly cancel and give a narrower iteration
    def load(rho):
        phases = PhaseTimes(10.0, 20.0, 5.0, spread=PhaseSpread(0.1, 0.1, 0.1, correlation=rho))
        return [WorkerLoad(phases, BUCKETS, 16)]

    comm = [CommTime(0.0)] * 3
    full = simulate_iteration(load(1.0), comm, samples=8000, seed=5)
    half = simulate_iteration(load(0.5), comm, samples=8000, seed=5)
    independent = simulate_iteration(load(0.0), comm, samples=8000, seed=5)
    assert full.iteration_ms_p90 == pytest.approx(35.0 * math.exp(1.2816 * 0.1), rel=0.01)
    assert independent.iteration_ms_p90 < half.iteration_ms_p90 < full.iteration_ms_p90
    assert independent == simulate_iteration(
        [WorkerLoad(worker(spread=0.1).phases, BUCKETS, 16)], comm, samples=8000, seed=5
    )


def test_the_loops_own_noise_scales_whole_iterations_and_adds_to_the_drift():
    # independent log-normal factors: their log spreads add in quadrature, and a zero one draws nothing
    loads = [WorkerLoad(worker().phases, BUCKETS, 16, tail_ms=3.0)] * 2
    comm = [CommTime(4, 4)] * 3
    det = simulate_iteration(loads, comm, samples=0).deterministic_ms
    noisy = simulate_iteration(loads, comm, samples=8000, seed=3, iteration_spread=0.08)
    both = simulate_iteration(loads, comm, samples=8000, seed=3, iteration_spread=0.08, run_spread=0.06)
    assert noisy.iteration_ms_p50 == pytest.approx(det, rel=0.01)
    assert noisy.iteration_ms_p90 == pytest.approx(det * math.exp(1.2816 * 0.08), rel=0.01)
    assert both.iteration_ms_p90 == pytest.approx(det * math.exp(1.2816 * 0.1), rel=0.01)
    assert simulate_iteration(
        loads, comm, samples=200, seed=3, run_spread=0.05, iteration_spread=0.0
    ) == simulate_iteration(loads, comm, samples=200, seed=3, run_spread=0.05)


def test_the_result_names_the_bottleneck_link_and_breaks_the_time_down():
    result = simulate_iteration([worker(), worker()], [CommTime(30, 33, "efa")] * 3, samples=10)
    assert result.bottleneck == "communication"
    assert result.bottleneck_link == "efa"
    bd = result.breakdown
    assert bd.forward + bd.backward + bd.optimizer + bd.exposed_communication == pytest.approx(
        result.deterministic_ms
    )
    assert result.per_worker_batch == (16, 16)
    quiet = simulate_iteration([worker(), worker()], [CommTime(0.1)] * 3, samples=10)
    assert quiet.bottleneck == "compute" and quiet.bottleneck_link == ""


def test_balance_split_equalises_compute_time():
    # worker 1 is twice as fast per sample
    assert balance_batch(96, [lambda b: 2.0 * b, lambda b: 1.0 * b]) == (32, 64)


def test_balance_split_respects_max_batch_and_sums_exactly():
    split = balance_batch(100, [lambda b: b, lambda b: b, lambda b: b], max_batches=[10, None, None])
    assert split[0] == 10 and sum(split) == 100 and abs(split[1] - split[2]) <= 1


def test_balance_split_treats_range_errors_as_infeasible():
    def limited(b):
        if b > 40:
            raise ComputeRangeError("too big")
        return 1.0 + b

    assert balance_batch(70, [limited, lambda b: 1.0 + b]) == (35, 35)
    assert balance_batch(100, [limited, lambda b: 0.1 * b]) == (8, 92)
    assert balance_batch(100, [limited, lambda b: 10.0 + b]) == (40, 60)
    with pytest.raises(ValueError, match="above the workers' maximum"):
        balance_batch(100, [lambda b: b], max_batches=[50])
    with pytest.raises(ValueError, match="below the workers' minimum"):
        balance_batch(1, [lambda b: b, lambda b: b])


def test_simulate_ddp_builds_workers_from_compute_models():
    doc = {
        "schema_version": 1,
        "kind": "compute",
        "model": {"spec": "m"},
        "device": {"type": "cuda", "name": "g"},
        "samples": [
            {
                "batch_size": b,
                "phases": {
                    "forward": {"median_ms": 0.1 * b},
                    "backward": {"median_ms": 0.2 * b},
                    "optimizer": {"median_ms": 1.0},
                },
                "buckets": [
                    {"index": 0, "size_bytes": 1000, "ready_ms": 0.1 * b},
                    {"index": 1, "size_bytes": 3000, "ready_ms": 0.2 * b},
                ],
            }
            for b in (16, 32)
        ],
    }
    model = fit_compute_model(load_compute_profile(doc))
    result = simulate_ddp(model, [16, 32], lambda size: CommTime(size / 1000.0), samples=0)
    # worker 1 (batch 32): backward starts at 1 + 3.2 = 4.2; bucket 0 ready at 4.2 + 3.2 = 7.4 → ends 8.4;
    # bucket 1 ready at 10.6 → ends 13.6
    assert result.deterministic_ms == pytest.approx(13.6)
    assert result.slowest_worker == 1
    assert result.global_batch == 48


def test_cluster_comm_fn_uses_the_slowest_link_of_the_cluster():
    cluster = Cluster(nodes=2, gpus_per_node=4, network_gbps=50.0)
    comm = cluster_comm_fn(CommModel(), cluster)(25 << 20)
    assert comm.p50_ms == pytest.approx(ring_allreduce_prior_ms(25 << 20, 8, 50.0, 50.0))
    assert comm.link == "tcp"
    assert comm.ratios == ()


def test_cluster_comm_fn_carries_the_measured_times_of_a_profile_and_its_label():
    from planner.profiles import load_comm_profile

    profile = load_comm_profile(
        {
            "schema_version": 1,
            "kind": "comm",
            "backend": "gloo",
            "world_size": 8,
            "samples": [{"size_bytes": 16 << 20, "times_ms": [8.0, 10.0, 12.0]}],
        }
    )
    cluster = Cluster(nodes=2, gpus_per_node=4, network_gbps=50.0)
    comm = cluster_comm_fn(CommModel(), cluster, profile=profile, label="shaped")(25 << 20)
    assert comm.ratios == pytest.approx((0.8, 1.0, 1.2))
    assert comm.link == "shaped"

"""The training callback posts to a real HTTP server on 127.0.0.1: batching, seqs, retries,
a job that is over, and never blocking the training loop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from profiler.agent.posting import RetryPolicy
from profiler.agent.report import NullReporter, Reporter

FAST = RetryPolicy(attempts=4, initial_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0)
ROOT = Path(__file__).resolve().parents[2]


def _server(event_server) -> str:
    return event_server.url.split("/api/")[0]


def test_steps_are_posted_in_batches_with_the_token_rank_and_consecutive_seqs(event_server):
    reporter = Reporter(
        _server(event_server), 7, "job-token", rank=3, batch_size=4, flush_interval_s=30, retry=FAST
    )
    for i in range(1, 11):
        reporter.step(i, 0.25 + i / 1000, samples=32)
    reporter.close(timeout_s=10)
    posts = event_server.received
    assert [len(p.body["reports"]) for p in posts] == [4, 4, 2]  # two full batches, the rest at close
    assert all(p.path == "/api/v1/jobs/7/reports/" for p in posts)
    assert all(p.headers["Authorization"] == "Bearer job-token" and p.body["rank"] == 3 for p in posts)
    seqs = [p.body["seq"] for p in posts]
    assert seqs[1] == seqs[0] + 4 and seqs[2] == seqs[1] + 4  # report i of a post has seq + i
    reports = [r for p in posts for r in p.body["reports"]]
    assert [r["iteration"] for r in reports] == list(range(1, 11))
    assert reports[0] == {"iteration": 1, "iter_time_s": 0.251, "samples": 32}
    assert reporter.sent == 10 and reporter.dropped == 0


def test_a_partial_batch_goes_out_after_the_flush_interval(event_server):
    reporter = Reporter(_server(event_server), 1, "t", batch_size=100, flush_interval_s=0.1, retry=FAST)
    reporter.step(1, 0.5)
    deadline = time.monotonic() + 5
    while not event_server.received and time.monotonic() < deadline:
        time.sleep(0.02)
    assert event_server.received and event_server.received[0].body["reports"] == [
        {"iteration": 1, "iter_time_s": 0.5}
    ]
    reporter.close(timeout_s=5)


def test_a_failed_post_is_retried_with_the_same_seq(event_server):
    event_server.statuses = [503, 502]
    reporter = Reporter(_server(event_server), 1, "t", batch_size=2, flush_interval_s=30, retry=FAST)
    reporter.step(1, 0.1)
    reporter.step(2, 0.1)
    assert reporter.flush(timeout_s=10)
    assert event_server.attempts == 3 and len(event_server.received) == 1
    assert reporter.posts == 3 and reporter.sent == 2
    reporter.close(timeout_s=5)


def test_a_job_that_is_over_stops_the_reporting_for_good(event_server):
    event_server.statuses = [409]
    reporter = Reporter(_server(event_server), 1, "t", batch_size=1, flush_interval_s=30, retry=FAST)
    reporter.step(1, 0.1)
    reporter.flush(timeout_s=5)
    reporter.step(2, 0.1)
    reporter.close(timeout_s=5)
    assert reporter.disabled and event_server.attempts == 1 and reporter.dropped == 1


def test_steps_never_block_even_when_the_server_is_down(closed_port_url):
    slow = RetryPolicy(attempts=3, initial_delay_s=0.5, max_delay_s=1.0, timeout_s=1.0)
    reporter = Reporter(closed_port_url.rsplit("/", 1)[0], 1, "t", batch_size=10, max_pending=500, retry=slow)
    start = time.perf_counter()
    for i in range(5000):
        reporter.step(i, 0.01)
    assert time.perf_counter() - start < 0.5
    reporter.close(timeout_s=0.2)  # bounded: a dead server delays the exit a little, no more
    assert reporter.dropped >= 5000 - 500 - 10  # the queue stayed bounded
    reporter._thread.join(5)
    assert not reporter._thread.is_alive() and reporter.unreachable  # the rest was dropped, not waited for


def test_the_timer_measures_each_iteration_and_counts_them(event_server):
    reporter = Reporter(_server(event_server), 1, "t", batch_size=100, flush_interval_s=30, retry=FAST)
    for _ in range(3):
        with reporter.timer(samples=8) as t:
            time.sleep(0.02)
        assert t.elapsed_s >= 0.02
    reporter.close(timeout_s=5)
    reports = event_server.received[0].body["reports"]
    assert [r["iteration"] for r in reports] == [1, 2, 3]
    assert all(0.02 <= r["iter_time_s"] < 1 and r["samples"] == 8 for r in reports)


def test_bad_values_are_ignored_not_raised(event_server):
    reporter = Reporter(_server(event_server), 1, "t", batch_size=100, flush_interval_s=30, retry=FAST)
    reporter.step(1, float("nan"))
    reporter.step(2, -1)
    reporter.step(3, "slow")
    reporter.step(4, 0.2)
    reporter.close(timeout_s=5)
    assert [r["iteration"] for p in event_server.received for r in p.body["reports"]] == [4]


def test_outside_a_job_from_env_gives_a_reporter_that_does_nothing():
    reporter = Reporter.from_env({})
    assert isinstance(reporter, NullReporter) and not isinstance(reporter, Reporter)
    with reporter.timer():
        pass
    reporter.step(5, 0.1)
    reporter.close()


def test_from_env_reads_server_job_token_and_rank(event_server):
    env = {"SRIFTY_SERVER": _server(event_server), "SRIFTY_JOB_ID": "12", "SRIFTY_TOKEN": "tok", "RANK": "5"}
    reporter = Reporter.from_env(env, retry=FAST, batch_size=1)
    assert isinstance(reporter, Reporter) and reporter.rank == 5
    assert reporter.url == f"{_server(event_server)}/api/v1/jobs/12/reports/"
    reporter.step(1, 0.3)
    reporter.close(timeout_s=5)
    assert event_server.received[0].body["rank"] == 5


def test_a_restarted_process_does_not_reuse_the_seqs_of_the_previous_one(event_server):
    first = Reporter(_server(event_server), 1, "t", batch_size=1, retry=FAST)
    first.step(1, 0.1)
    first.close(timeout_s=5)
    second = Reporter(_server(event_server), 1, "t", batch_size=1, retry=FAST)
    second.step(1, 0.1)
    second.close(timeout_s=5)
    a, b = (p.body["seq"] for p in event_server.received)
    assert b > a


def test_importing_the_callback_does_not_import_torch():
    code = "import sys, profiler.agent.report; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)

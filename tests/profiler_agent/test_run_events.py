"""A profiling run's event poster posts to a real HTTP server on 127.0.0.1: auth, seq, retries, quiet timing."""

from __future__ import annotations

import json
import threading
import time

from profiler.agent.posting import RetryPolicy, _post_urllib
from profiler.agent.run_events import EventPoster

FAST = RetryPolicy(attempts=4, initial_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0)


def test_reporter_posts_events_with_bearer_token_and_increasing_seq(event_server):
    reporter = EventPoster(event_server.url, "secret-token", retry=FAST)
    reporter.progress(phase="compute", batch_size=8, iteration=0, time_ms=1.5, fraction=0.5)
    reporter.sample(phase="compute", batch_size=8, sample={"batch_size": 8})
    reporter.result({"kind": "compute"})
    reporter.close(timeout_s=10)
    events = event_server.events()
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert [e["type"] for e in events] == ["progress", "sample", "result"]
    assert events[0]["phase"] == "compute" and events[0]["fraction"] == 0.5
    assert events[2]["profile"] == {"kind": "compute"}
    for received in event_server.received:
        assert received.headers["Authorization"] == "Bearer secret-token"
        assert received.headers["Content-Type"] == "application/json"
        assert received.path == "/api/agent/events"


def test_reporter_retries_after_the_server_returns_500_once_and_keeps_the_seq(event_server):
    event_server.statuses = [500]
    reporter = EventPoster(event_server.url, "t", retry=FAST)
    reporter.error("boom")
    reporter.progress(phase="comm", fraction=1.0)
    reporter.close(timeout_s=10)
    assert event_server.attempts == 3  # one failure, then both events
    events = event_server.events()
    assert [(e["seq"], e["type"]) for e in events] == [(1, "error"), (2, "progress")]
    assert events[0]["message"] == "boom"


def test_client_errors_are_not_retried(event_server):
    event_server.statuses = [400]
    reporter = EventPoster(event_server.url, "t", retry=FAST)
    reporter.progress(phase="compute")
    reporter.result({"kind": "compute"})
    reporter.close(timeout_s=10)
    assert event_server.attempts == 2
    assert [e["type"] for e in event_server.events()] == ["result"]
    assert not reporter.unreachable


def test_unreachable_server_drops_later_events_but_still_tries_the_result(closed_port_url):
    calls: list[str] = []

    def transport(url, body, headers, timeout):
        calls.append(body.decode())
        return _post_urllib(url, body, headers, timeout)

    reporter = EventPoster(closed_port_url, "t", retry=FAST, transport=transport)
    reporter.progress(phase="compute")
    reporter.sample(phase="compute", batch_size=8)
    reporter.result({"kind": "compute"})
    reporter.close(timeout_s=10)
    assert reporter.unreachable and reporter.dropped == 1  # the sample, once the server was given up
    assert len(calls) == 2 * FAST.attempts  # first progress, then the result, each fully retried
    assert '"seq": 2' in calls[-1] and '"type": "result"' in calls[-1]


def test_no_post_starts_while_a_timed_region_is_held(event_server):
    starts: list[float] = []

    def transport(url, body, headers, timeout):
        starts.append(time.perf_counter())
        return _post_urllib(url, body, headers, timeout)

    reporter = EventPoster(event_server.url, "t", retry=FAST, transport=transport, drain_window_s=0.0)
    with reporter.hold():
        began = time.perf_counter()
        for i in range(5):
            reporter.sample(phase="compute", batch_size=i)
        time.sleep(0.3)  # the "timed region"
        ended = time.perf_counter()
    reporter.close(timeout_s=10)
    assert len(starts) == 5
    assert all(not began <= t <= ended for t in starts)
    assert [e["seq"] for e in event_server.events()] == [1, 2, 3, 4, 5]


def test_hold_gives_queued_events_a_short_window_first(event_server):
    reporter = EventPoster(event_server.url, "t", retry=FAST, drain_window_s=2.0)
    reporter.progress(phase="compute", iteration=0)
    with reporter.hold():
        delivered_before_timing = len(event_server.events())
    reporter.close(timeout_s=10)
    assert delivered_before_timing == 1


def test_the_standard_library_transport_posts_too(event_server):
    reporter = EventPoster(event_server.url, "tok", retry=FAST, transport=_post_urllib)
    reporter.result({"kind": "comm"})
    reporter.close(timeout_s=10)
    assert event_server.events()[0]["type"] == "result"
    assert event_server.received[0].headers["Authorization"] == "Bearer tok"


def test_emitting_never_blocks_and_unsent_progress_is_coalesced_on_a_slow_server(event_server):
    gate = threading.Event()
    bodies: list[dict] = []

    def slow(url, body, headers, timeout):
        gate.wait(5)
        bodies.append(json.loads(body))
        return 200

    reporter = EventPoster(event_server.url, "t", retry=FAST, transport=slow)
    began = time.perf_counter()
    reporter.sample(batch_size=1)
    for i in range(50):
        reporter.progress(iteration=i)
    reporter.result({"kind": "compute"})
    assert time.perf_counter() - began < 0.5
    gate.set()
    reporter.close(timeout_s=10)
    # The sample was in flight; the 50 progress events collapsed into the latest one.
    assert [(b["seq"], b["type"]) for b in bodies] == [(1, "sample"), (2, "progress"), (3, "result")]
    assert bodies[1]["iteration"] == 49
    assert reporter.coalesced == 49

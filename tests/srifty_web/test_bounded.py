"""``srifty_web.bounded.run_bounded``: one call in a forked child with a memory and a time limit,
its progress relayed, stopped on request; what the call raises comes back as itself."""

from __future__ import annotations

import os
import sys
import time

import pytest

from srifty_web import bounded

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux only")


class NamedError(ValueError):
    """An exception whose ``__init__`` differs from its ``args`` (as ``PlanInputError``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def test_it_returns_the_value_and_relays_progress_in_order():
    def work(n, *, progress):
        for i in range(n):
            progress("step", i)
        return {"pid": os.getpid(), "sum": sum(range(n))}

    seen = []
    done = bounded.run_bounded(
        work, 50, max_memory_mb=256, max_seconds=30, on_progress=lambda *a: seen.append(a)
    )
    assert done.value["sum"] == sum(range(50)) and done.value["pid"] == done.pid != os.getpid()
    assert seen == [("step", i) for i in range(50)]
    assert done.peak_rss_mb > 0 and _gone(done.pid)


def test_what_the_call_raises_is_raised_again_with_its_attributes():
    def fails():
        raise NamedError("model", "cannot build it")

    with pytest.raises(NamedError) as caught:
        bounded.run_bounded(fails, max_memory_mb=256, max_seconds=30)
    assert (caught.value.field, caught.value.message) == ("model", "cannot build it")
    assert str(caught.value) == "model: cannot build it"
    assert "raised in bounded child" in caught.value.__notes__[0] and "fails" in caught.value.__notes__[0]


def test_an_exit_in_the_child_does_not_stop_the_caller():
    with pytest.raises(RuntimeError, match="SystemExit: 4"):
        bounded.run_bounded(sys.exit, 4, max_memory_mb=256, max_seconds=30)


def test_an_allocation_past_the_memory_limit_fails_within_seconds():
    def grows():
        kept = []
        while True:
            kept.append(bytearray(8 << 20))  # touched: resident, not just reserved

    started = time.monotonic()
    with pytest.raises(bounded.OutOfMemory) as caught:
        bounded.run_bounded(grows, max_memory_mb=128, max_seconds=60)
    assert time.monotonic() - started < 10 and caught.value.max_memory_mb == 128
    assert "128 MB memory limit" in str(caught.value)


def test_a_call_past_the_time_limit_is_killed():
    pids = []
    started = time.monotonic()
    with pytest.raises(bounded.OutOfTime, match="ran past its 1 s limit"):
        bounded.run_bounded(
            lambda progress: (progress(os.getpid()), time.sleep(60)),
            max_memory_mb=256,
            max_seconds=1,
            on_progress=pids.append,
        )
    assert time.monotonic() - started < 3 and _gone(pids[0])


def test_should_stop_kills_the_child_within_a_poll():
    pids, started = [], time.monotonic()

    def stop() -> str | None:
        return "cancelled" if pids and time.monotonic() - started > 0.5 else None

    with pytest.raises(bounded.Stopped, match="cancelled"):
        bounded.run_bounded(
            lambda progress: (progress(os.getpid()), time.sleep(60)),
            max_memory_mb=256,
            max_seconds=60,
            on_progress=pids.append,
            should_stop=stop,
            poll_s=0.1,
        )
    assert time.monotonic() - started < 2 and _gone(pids[0])


def test_an_error_in_the_progress_callback_kills_the_child_and_propagates():
    pids = []

    def report(pid: int) -> None:
        pids.append(pid)
        raise LookupError("the plan is gone")

    with pytest.raises(LookupError, match="the plan is gone"):
        bounded.run_bounded(
            lambda progress: (progress(os.getpid()), time.sleep(60)),
            max_memory_mb=256,
            max_seconds=60,
            on_progress=report,
        )
    assert _gone(pids[0])


def test_a_child_killed_from_outside_is_reported():
    with pytest.raises(bounded.ChildDied, match="killed by SIGKILL"):
        bounded.run_bounded(lambda: os.kill(os.getpid(), 9), max_memory_mb=256, max_seconds=30)


@pytest.mark.django_db
def test_it_refuses_to_run_inside_a_transaction():
    with pytest.raises(RuntimeError, match="inside a transaction"):
        bounded.run_bounded(int, max_memory_mb=256, max_seconds=30)


def test_a_lower_address_space_limit_of_the_caller_still_holds():
    """An operator's ``ulimit -v`` on the worker: the child's limit is never above it."""
    import resource

    def limits():
        return resource.getrlimit(resource.RLIMIT_AS)

    def under_ulimit():
        hard = (bounded._vm_kb("VmSize") + 64 * 1024) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        return bounded.run_bounded(limits, max_memory_mb=4096, max_seconds=30).value, hard

    (soft, hard_seen), hard = bounded.run_bounded(under_ulimit, max_memory_mb=0, max_seconds=60).value
    assert soft == hard_seen == hard

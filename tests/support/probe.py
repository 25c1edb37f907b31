"""Run one request (or any call) in a forked child and measure what it cost that process.

The security probes (issue 33) assert that a hostile request is refused within seconds and that
the process serving it grows by less than a bound. Measuring that in the test process itself
would be polluted by everything the suite did before; a forked child starts from the test's
exact state (Django set up, the test database with its rows: SQLite only, since a forked
PostgreSQL connection must not be shared), runs the call once, and reports:

* ``elapsed_s`` - wall time of the call in the child;
* ``growth_mb`` - peak resident set during the call minus the resident set just before it.
  Linux only: writing ``5`` to ``/proc/self/clear_refs`` resets the peak (``VmHWM``) to the
  current RSS, so the peak read afterwards is the call's own high-water mark;
* ``result`` - what the call returned (it must pickle), or ``error`` - its exception as text;
* ``timed_out`` - the child was killed after ``timeout_s`` (then no figures come back).

A child that is killed at the timeout is a finding (the request ran on), not a flake: tests
give timeouts well above what a refused request needs.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass
class Probe:
    elapsed_s: float = 0.0
    growth_mb: float = 0.0
    result: Any = None
    error: str = ""
    timed_out: bool = False


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(fn: Callable[..., Any], args: tuple, kwargs: dict, w: int) -> None:
    out: dict[str, Any] = {}
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # peak RSS := current RSS
        before = _status_kb("VmRSS")
        t0 = time.monotonic()
        try:
            out["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # the probe reports it; the parent decides
            out["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        out["elapsed_s"] = time.monotonic() - t0
        out["growth_mb"] = (_status_kb("VmHWM") - before) / 1024
        try:
            data = pickle.dumps(out)
        except Exception as exc:
            out["result"] = repr(out.get("result"))
            out["error"] = out.get("error", "") or f"result did not pickle: {exc}"
            data = pickle.dumps(out)
        with os.fdopen(w, "wb") as fh:
            fh.write(data)
    finally:
        os._exit(0)


def in_child(fn: Callable[..., Any], *args: Any, timeout_s: float = 60, **kwargs: Any) -> Probe:
    """``fn(*args, **kwargs)`` in a forked child; see the module docstring."""
    from django.db import connections

    if any(c.vendor != "sqlite" for c in connections.all(initialized_only=True)):
        raise RuntimeError("in_child shares the test database by fork: SQLite only")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(r)
        _child(fn, args, kwargs, w)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    os.set_blocking(r, False)
    try:
        while True:
            try:
                chunk = os.read(r, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk:
                chunks.append(chunk)
                continue
            if chunk == b"":
                break  # the child closed its end: done
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Probe(elapsed_s=timeout_s, timed_out=True)
            time.sleep(0.01)
    finally:
        os.close(r)
    os.waitpid(pid, 0)
    if not chunks:
        return Probe(error="the child died without a report (killed?)")
    return Probe(**pickle.loads(b"".join(chunks)))

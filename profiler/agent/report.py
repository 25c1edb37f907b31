"""Report training iteration times to Srifty from inside a training script.

    from profiler.agent.report import Reporter

    reporter = Reporter.from_env()          # SRIFTY_SERVER, SRIFTY_JOB_ID, SRIFTY_TOKEN, RANK
    for batch in loader:
        with reporter.timer(samples=len(batch)):
            train_step(batch)
    reporter.close()                        # optional: also done at interpreter exit

or ``reporter.step(iteration, iter_time_s, samples=None)`` with your own timing. After writing a
checkpoint, ``reporter.checkpoint(iteration, path="s3://...", samples=n)`` tells Srifty (``POST
{server}/api/v1/jobs/{id}/checkpoints/``, on a short-lived thread with a few retries): a node
that replaces an interrupted one resumes from the last checkpoint reported, and the job page
counts the training lost since it. Without the
environment variables (a run outside Srifty) ``from_env`` returns a reporter that does
nothing, so the same script runs anywhere. Importing this module does not import torch.

How it behaves inside a training loop:

* ``step`` only appends to an in-memory queue under a lock; it never blocks on the network.
  A background thread posts batches ``POST {server}/api/v1/jobs/{id}/reports/`` with
  ``Authorization: Bearer {token}`` and the body ``{"seq", "rank", "reports": [{"iteration",
  "iter_time_s", "samples"}, ...]}`` (at most ``batch_size`` reports), when ``batch_size``
  steps are queued or every ``flush_interval_s``.
* Report ``i`` of a post has seq ``seq + i``; a retried post keeps its seqs, so the server
  stores each report once per ``(rank, seq)``. Seqs start at the process's start time in
  microseconds, so a restarted process never reuses the seqs of an earlier one.
* Failed posts (connection errors, 408/425/429/5xx) are retried with bounded exponential
  backoff (``profiler.agent.posting.RetryPolicy``); then the batch is dropped and counted,
  and the server counts as unreachable: later batches get one try each, ``max_delay_s`` apart,
  until one gets through, and at ``close`` what is left is dropped instead of waited for.
  401/403/404/409/410 (token expired, job over) stop reporting for good. The queue is bounded
  (``max_pending``): when the server is away for long, the oldest steps are dropped.
* ``timer()`` measures one iteration with ``time.perf_counter``; when torch has already been
  imported and CUDA is initialised it calls ``torch.cuda.synchronize()`` at both ends, so
  asynchronous kernels are counted in the iteration they belong to.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from profiler.agent.posting import (
    RETRYABLE,
    BackgroundPoster,
    PostError,
    RetryPolicy,
    Transport,
    default_transport,
)

log = logging.getLogger("profiler.agent.report")

_FATAL = {401, 403, 404, 409, 410}


def _cuda_sync() -> None:
    torch = sys.modules.get("torch")  # never import torch here: only sync if the script uses it
    if torch is None:
        return
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # a broken CUDA state must not break the training loop's timing
        pass


class _Timer:
    """Context manager that times one iteration and reports it."""

    def __init__(self, reporter: NullReporter, iteration: int | None, samples: int | None) -> None:
        self._reporter = reporter
        self.iteration = iteration
        self.samples = samples
        self.elapsed_s: float | None = None

    def __enter__(self) -> _Timer:
        _cuda_sync()
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _cuda_sync()
        self.elapsed_s = time.perf_counter() - self._start
        if exc_type is None:
            self._reporter.step(self.iteration, self.elapsed_s, self.samples)


class NullReporter:
    """What ``from_env`` returns outside a Srifty job: counts iterations, sends nothing."""

    def __init__(self) -> None:
        self._iteration = 0

    def step(self, iteration: int | None, iter_time_s: float, samples: int | None = None) -> None:
        self._iteration = int(iteration) if iteration is not None else self._iteration + 1

    def timer(self, samples: int | None = None, iteration: int | None = None) -> _Timer:
        """``with reporter.timer(samples=n): ...`` times the block as iteration ``iteration``
        (default: one more than the last)."""
        return _Timer(self, iteration, samples)

    def flush(self, timeout_s: float = 10.0) -> bool:
        return True

    def checkpoint(
        self, iteration: int, path: str = "", samples: int | None = None
    ) -> threading.Thread | None:
        """Report a checkpoint written at ``iteration`` (here: nothing to report to)."""
        return None

    def close(self, timeout_s: float | None = None) -> None:
        pass

    def __enter__(self) -> NullReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reporter(BackgroundPoster, NullReporter):
    """Posts one training process's iteration times (batched) and checkpoints, on its own thread."""

    thread_name = "srifty-job-reporter"

    def __init__(
        self,
        server: str,
        job_id: int | str,
        token: str,
        rank: int = 0,
        *,
        batch_size: int = 50,
        flush_interval_s: float = 5.0,
        max_pending: int = 10_000,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
        close_timeout_s: float = 10.0,
    ) -> None:
        NullReporter.__init__(self)
        BackgroundPoster.__init__(self, close_timeout_s)
        self.url = f"{server.rstrip('/')}/api/v1/jobs/{job_id}/reports/"
        self.checkpoint_url = f"{server.rstrip('/')}/api/v1/jobs/{job_id}/checkpoints/"
        self.checkpoints_sent = 0
        self.rank = int(rank)
        self._token = token
        self.batch_size = max(1, int(batch_size))
        self.flush_interval_s = float(flush_interval_s)
        self.retry = retry or RetryPolicy(attempts=5, initial_delay_s=0.5, max_delay_s=8.0, timeout_s=10.0)
        self._transport = transport or default_transport()
        self._queue: deque[dict[str, Any]] = deque(maxlen=max(1, int(max_pending)))
        self._next_seq = time.time_ns() // 1000  # see module doc
        self._flush_wanted = False
        self._in_flight = 0
        self.disabled = False
        self.unreachable = False
        self.sent = 0  # reports the server accepted
        self.dropped = 0  # reports given up on (retries used up, queue overflow, fatal answer)
        self.posts = 0
        self._start()
        atexit.register(self._at_exit)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> NullReporter:
        """A Reporter for the job this process belongs to, or a NullReporter outside a job."""
        env = os.environ if environ is None else environ
        server, job_id, token = env.get("SRIFTY_SERVER"), env.get("SRIFTY_JOB_ID"), env.get("SRIFTY_TOKEN")
        if not (server and job_id and token):
            return NullReporter()
        try:
            rank = int(env.get("RANK", "0") or 0)
        except ValueError:
            rank = 0
        return cls(server, job_id, token, rank, **kwargs)

    # -- the training loop's side -----------------------------------------------------
    def step(self, iteration: int | None, iter_time_s: float, samples: int | None = None) -> None:
        """Queue one iteration's time (seconds). Bad values are ignored, never raised."""
        super().step(iteration, iter_time_s, samples)
        try:
            t = float(iter_time_s)
        except (TypeError, ValueError):
            return
        if self.disabled or not math.isfinite(t) or t < 0:
            return
        item = {
            "iteration": max(0, self._iteration),
            "iter_time_s": t,
            "samples": int(samples) if samples is not None else None,
        }
        with self._cv:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1  # the deque drops the oldest
            self._queue.append(item)
            if len(self._queue) >= self.batch_size:
                self._cv.notify_all()

    def checkpoint(self, iteration: int, path: str = "", samples: int | None = None) -> threading.Thread:
        """Report a checkpoint written at ``iteration`` (where, and the samples trained so far),
        on a thread of its own: the training loop does not wait. Returns the thread (join it to
        be sure the report went out, e.g. right before the process exits)."""
        item: dict[str, Any] = {"iteration": int(iteration), "path": str(path)[:1024], "rank": self.rank}
        if samples is not None:
            item["samples"] = int(samples)
        thread = threading.Thread(
            target=self._send_checkpoint, args=(item,), name="srifty-checkpoint", daemon=True
        )
        thread.start()
        return thread

    def _send_checkpoint(self, item: dict[str, Any]) -> None:
        body = json.dumps(item).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"}
        delays = self.retry.delays()
        while True:
            try:
                status: int | None = self._transport(self.checkpoint_url, body, headers, self.retry.timeout_s)
            except PostError:
                status = None
            except Exception:  # reporting must never kill training
                log.exception("srifty report: checkpoint post failed")
                return
            if status is not None and 200 <= status < 300:
                self.checkpoints_sent += 1
                return
            delay = next(delays, None) if (status is None or status in RETRYABLE) else None
            if delay is None:
                log.warning(
                    "srifty report: checkpoint at iteration %s not reported (%s)", item["iteration"], status
                )
                return
            time.sleep(delay)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send what is queued now; wait up to ``timeout_s``. True when nothing is left."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            self._flush_wanted = True
            self._cv.notify_all()
            while (self._queue or self._in_flight) and not self.disabled:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    break
                self._cv.wait(left)
            return not self._queue and not self._in_flight

    def _unsent(self) -> str:
        return f"{len(self._queue)} unsent report(s)"

    def _at_exit(self) -> None:
        if self._thread.is_alive():
            self.close(self._close_timeout_s)

    # -- the background thread ---------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                first_wait = time.monotonic()
                while not self._stopping and not self._flush_wanted and len(self._queue) < self.batch_size:
                    left = self.flush_interval_s - (time.monotonic() - first_wait)
                    if left <= 0 and self._queue:
                        break
                    self._cv.wait(left if left > 0 else self.flush_interval_s)
                if not self._queue:
                    self._flush_wanted = False
                    self._cv.notify_all()
                    if self._stopping:
                        return
                    continue
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self.batch_size))]
                seq = self._next_seq
                self._next_seq += len(batch)
                self._in_flight = len(batch)
            try:
                self._deliver(seq, batch)
            except Exception:  # reporting must never kill training
                log.exception("srifty report: unexpected failure")
                self.dropped += len(batch)
            finally:
                with self._cv:
                    self._in_flight = 0
                    if not self._queue:
                        self._flush_wanted = False
                    self._cv.notify_all()
            if self.disabled or (self.unreachable and self._stopping):
                with self._cv:
                    self.dropped += len(self._queue)
                    self._queue.clear()
                    self._cv.notify_all()
                return
            if self.unreachable:
                with self._cv:  # pace the single tries; close() wakes it up
                    self._cv.wait_for(lambda: self._stopping, timeout=self.retry.max_delay_s)

    def _deliver(self, seq: int, batch: list[dict[str, Any]]) -> None:
        reports = [{k: v for k, v in r.items() if v is not None} for r in batch]
        body = json.dumps({"seq": seq, "rank": self.rank, "reports": reports}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"}
        delays = iter(()) if self.unreachable else self.retry.delays()
        while True:
            self.posts += 1
            try:
                status = self._transport(self.url, body, headers, self.retry.timeout_s)
                detail = f"HTTP {status}"
            except PostError as exc:
                status, detail = None, str(exc)
            if status is not None and 200 <= status < 300:
                self.sent += len(batch)
                self.unreachable = False
                return
            if status in _FATAL:
                log.warning("srifty report: server answered %s; reporting stops", detail)
                self.disabled = True
                self.dropped += len(batch)
                return
            delay = next(delays, None) if (status is None or status in RETRYABLE) else None
            if delay is None:
                retryable = status is None or status in RETRYABLE
                if not self.unreachable:
                    log.warning("srifty report: dropped %d report(s) (seq %d): %s", len(batch), seq, detail)
                self.unreachable = self.unreachable or retryable
                self.dropped += len(batch)
                return
            with self._cv:  # sleep, but wake up early to stop
                if self._stopping:
                    delay = min(delay, 0.5)
                self._cv.wait(delay)

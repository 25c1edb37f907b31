"""A profiling run's events, posted to the Srifty server while the profile runs.

Every event is ``POST {url}`` with ``Authorization: Bearer {token}`` and a JSON body
``{"seq": n, "type": "progress"|"sample"|"result"|"error", ...}``. ``seq`` starts at 1 and
grows by one per event actually sent, in order, so the server can drop duplicates (a retried
post keeps its seq).

Rules that keep the measurements honest and the result safe:

* Posts happen on a background thread, never inside a timed region: the profiler wraps each
  timed region in :meth:`EventPoster.hold`, which waits for an in-flight post to finish and keeps
  new ones from starting until the region ends. Before a hold starts, the poster gets a short
  window to drain what is queued, so progress still arrives live.
* A progress event still waiting to be sent is replaced by a newer one, so a slow server
  sees fewer progress events instead of an ever-growing backlog.
* Failed posts (connection errors, 408/429/5xx) are retried with bounded exponential
  backoff. Once an event has used up its retries the server counts as unreachable: later
  progress events are dropped (they do not use a seq), while ``result`` and ``error`` are
  still tried with their full retries.
* The caller writes the result file *before* calling :meth:`result`; :meth:`close` waits a
  bounded time, so a dead server can delay the exit but never lose the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from profiler.agent.posting import (
    RETRYABLE,
    BackgroundPoster,
    PostError,
    RetryPolicy,
    Transport,
    default_transport,
)

log = logging.getLogger("profiler.agent.run_events")

_ESSENTIAL = {"result", "error"}


class SharedSeq:
    """A seq counter that several processes can share (``multiprocessing.Value('q')``)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def next(self) -> int:
        with self._value.get_lock():
            self._value.value += 1
            return int(self._value.value)


class _LocalSeq:
    def __init__(self) -> None:
        self._n = 0

    def next(self) -> int:
        self._n += 1
        return self._n


class NullEventPoster:
    """What the profiler talks to without ``--report-to``: does nothing."""

    def emit(self, event_type: str, **fields: Any) -> None:
        pass

    def progress(self, **fields: Any) -> None:
        pass

    def sample(self, **fields: Any) -> None:
        pass

    def result(self, profile: dict[str, Any]) -> None:
        pass

    def error(self, message: str) -> None:
        pass

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        yield

    def close(self, timeout_s: float | None = None) -> None:
        pass


class EventPoster(BackgroundPoster, NullEventPoster):
    """Posts the events of one profiling run (``POST {url}``), in order, on its own thread."""

    thread_name = "srifty-reporter"

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        seq: SharedSeq | None = None,
        transport: Transport | None = None,
        drain_window_s: float = 0.25,
        close_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(close_timeout_s)
        self.url = url
        self.token = token
        self.retry = retry or RetryPolicy()
        self._seq = seq or _LocalSeq()
        self._transport = transport or default_transport()
        self._drain_window_s = drain_window_s
        self._items: deque[tuple[str, dict[str, Any]]] = deque()
        self._holding = False  # a timed region is running: no post may start
        self._posting = False  # a request is in flight
        self._pending = 0  # events queued or being sent
        self._backing_off = False
        self.unreachable = False
        self.sent = 0
        self.dropped = 0
        self.coalesced = 0
        self._start()

    # -- the profiler's side ------------------------------------------------------------
    def emit(self, event_type: str, **fields: Any) -> None:
        with self._cv:
            if event_type == "progress" and self._items and self._items[-1][0] == "progress":
                # Still unsent: the newer progress supersedes it, so a slow server cannot
                # build up a backlog (samples, results and errors are never coalesced).
                self._items[-1] = (event_type, fields)
                self.coalesced += 1
            else:
                self._items.append((event_type, fields))
                self._pending += 1
            self._cv.notify_all()

    def progress(self, **fields: Any) -> None:
        self.emit("progress", **fields)

    def sample(self, **fields: Any) -> None:
        self.emit("sample", **fields)

    def result(self, profile: dict[str, Any]) -> None:
        self.emit("result", profile=profile)

    def error(self, message: str) -> None:
        self.emit("error", message=message)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep the network quiet for the duration of a timed region."""
        with self._cv:
            if not self.unreachable and not self._backing_off:
                # Let queued events out first, briefly, so progress stays live.
                self._cv.wait_for(
                    lambda: self._pending == 0 or self._backing_off, timeout=self._drain_window_s
                )
            self._holding = True
            # A post that already started must finish before timing begins.
            self._cv.wait_for(lambda: not self._posting, timeout=self.retry.timeout_s + 1)
        try:
            yield
        finally:
            with self._cv:
                self._holding = False
                self._cv.notify_all()

    def _unsent(self) -> str:
        return f"{self._pending} unsent event(s)"

    # -- the background thread ----------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._items or self._stopping)
                if not self._items:
                    return  # stopping, and everything was sent
                event_type, fields = self._items.popleft()
            try:
                self._deliver(event_type, fields)
            except Exception:  # the reporter must never kill the profile
                log.exception("run events: unexpected failure sending %s", event_type)
            finally:
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()

    def _deliver(self, event_type: str, fields: dict[str, Any]) -> None:
        if self.unreachable and event_type not in _ESSENTIAL:
            self.dropped += 1
            return
        seq = self._seq.next()  # assigned once: retries reuse it
        body = json.dumps({"seq": seq, "type": event_type, **fields}, default=str).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        delays = self.retry.delays()
        while True:
            retryable, detail = self._attempt(body, headers)
            if detail is None:
                self.sent += 1
                return
            delay = next(delays, None) if retryable else None
            if delay is None:
                log.warning("run events: dropped %s event seq=%d: %s", event_type, seq, detail)
                self.unreachable = self.unreachable or retryable
                return
            with self._cv:
                self._backing_off = True
                self._cv.notify_all()
            time.sleep(delay)  # outside the lock: timed regions may run meanwhile
            with self._cv:
                self._backing_off = False

    def _attempt(self, body: bytes, headers: dict[str, str]) -> tuple[bool, str | None]:
        """One POST, started only outside timed regions. Returns (retryable, error or None)."""
        with self._cv:
            self._cv.wait_for(lambda: not self._holding)
            self._posting = True
        try:
            status = self._transport(self.url, body, headers, self.retry.timeout_s)
        except PostError as exc:
            return exc.retryable, str(exc)
        finally:
            with self._cv:
                self._posting = False
                self._cv.notify_all()
        if 200 <= status < 300:
            return False, None
        return status in RETRYABLE, f"HTTP {status}"


def make_event_poster(url: str | None, token: str | None, **kwargs: Any) -> NullEventPoster:
    return EventPoster(url, token, **kwargs) if url else NullEventPoster()

"""What the agent's two background posters share: the HTTP transport, the retry policy and the
thread that posts while the caller goes on.

* ``profiler.agent.run_events.EventPoster``: a profiling run's events (progress, samples, the
  result) to ``/api/v1/profiling-runs/{id}/events/``;
* ``profiler.agent.report.Reporter``: a training script's iteration times and checkpoints to
  ``/api/v1/jobs/{id}/reports/`` and ``.../checkpoints/``.

Standard library only (``requests`` when installed): the agent ships as a bare torch + HTTP
bundle (``fleet.bundle``).
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger("profiler.agent.posting")

# HTTP answers worth another try: the server is busy, restarting or throttling.
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})

# (url, body, headers, timeout in seconds) -> HTTP status; PostError when no answer came.
Transport = Callable[[str, bytes, dict[str, str], float], int]


class PostError(Exception):
    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def _post_requests(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    import requests

    try:
        response = requests.post(url, data=body, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        raise PostError(str(exc), retryable=True) from exc
    return response.status_code


def _post_urllib(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        raise PostError(str(exc), retryable=True) from exc


def default_transport() -> Transport:
    """``requests`` when installed, else the standard library (a bare GPU VM may lack requests)."""
    try:
        import requests  # noqa: F401
    except ImportError:
        return _post_urllib
    return _post_requests


@dataclass
class RetryPolicy:
    attempts: int = 6  # first try plus 5 retries
    initial_delay_s: float = 0.5
    max_delay_s: float = 8.0
    timeout_s: float = 10.0  # per request

    def delays(self) -> Iterator[float]:
        """The waits between tries: ``initial_delay_s``, doubling, at most ``max_delay_s``."""
        delay = self.initial_delay_s
        for _ in range(self.attempts - 1):
            yield delay
            delay = min(delay * 2, self.max_delay_s)


class BackgroundPoster:
    """A daemon thread that posts what the caller queues (``_run``, under ``_cv``), and the one
    way to stop it: ``close`` sends what is left, waiting a bounded time, so a dead server can
    delay the caller's exit but never hang it. A subclass sets its state, then ``_start()``."""

    thread_name = "srifty-poster"

    def __init__(self, close_timeout_s: float) -> None:
        self._close_timeout_s = close_timeout_s
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def _start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        """The thread's body: post until ``_stopping`` and nothing is left."""
        raise NotImplementedError

    def _unsent(self) -> str:
        """What is still queued, for the warning when ``close`` gives up (e.g. "3 event(s)")."""
        raise NotImplementedError

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued (bounded by ``timeout_s``, default ``close_timeout_s``) and stop
        the thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(self._close_timeout_s if timeout_s is None else timeout_s)
        if self._thread.is_alive():
            log.warning("%s: gave up waiting for %s", self.thread_name, self._unsent())

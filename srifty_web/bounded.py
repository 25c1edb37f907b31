"""Run one call in a forked child process with an address-space limit and a wall-clock limit.

Work that a request can make arbitrarily large (a model trace, a plan's search, unpacking an
archive) must not be able to take the process that runs it down, nor hold it for ever::

    done = run_bounded(fn, *args, max_memory_mb=1024, max_seconds=300, on_progress=report,
                       should_stop=cancelled, **kwargs)
    done.value  # what fn returned

* The child is a ``fork`` of the caller, so it starts with everything the caller has imported and
  cached (no start-up cost) and shares those pages until it writes them.
* ``max_memory_mb``: the memory the child may take of its own (0: no limit), held two ways:
  its address space may grow by at most this much over the caller's (``RLIMIT_AS`` = the
  caller's virtual size at the fork + this: an allocation past it fails in the child,
  ``MemoryError``), and its private resident memory (pages it allocated or copied from the
  caller, ``/proc/<pid>/smaps_rollup``), checked every ``poll_s``, may not pass it (the child
  is killed). Both give :class:`OutOfMemory`. Relative, because the caller's own virtual size is
  mostly libraries mapped and never touched (importing torch maps ~3.4 GB) and varies with the
  build; the resident check, because free memory inside the caller's heap is reused by the
  child without growing its address space (a caller with a large free heap would otherwise
  lend it all).
* ``max_seconds``: wall time from the fork; past it the child is killed: :class:`OutOfTime`.
* ``on_progress``: given, ``fn`` is called with ``progress=`` a callable whose arguments (they
  must pickle) reach ``on_progress`` in the caller, in order. An exception ``on_progress`` raises
  kills the child and propagates.
* ``should_stop()``: asked every ``poll_s`` in the caller; a true value (a reason) kills the child
  within that time: :class:`Stopped`. An exception it raises kills the child and propagates.
* What ``fn`` raises is raised again in the caller, as the same type with the same attributes
  (and the child's traceback as a note); what it returns must pickle.

The child runs in its own process group (a subprocess it starts, such as a MILP solver, is
killed with it), dies with the thread that forked it (Linux ``PR_SET_PDEATHSIG``), and has an
alarm at ``max_seconds`` + 10 s in case the caller is stuck. It ignores SIGINT/SIGTERM/SIGQUIT/
SIGHUP: the caller decides (its own Ctrl-C or a worker's second SIGTERM kills the child on the
way out).

Database connections: the caller's are closed before the fork (the child opens its own on first
use; one connection shared by two processes corrupts its protocol), so the caller must not be
inside a transaction (:class:`RuntimeError`). Threads: only the calling thread exists in the
child; locks held by the caller's other threads at the fork stay held there, so ``fn`` should not
need them (Django, numpy and torch calls are fine).
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import pickle
import resource
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: A child whose memory was refused reports it with this exit status when it cannot send the
#: error any more (pickling it needed memory too).
EXIT_OUT_OF_MEMORY = 3
#: The most one message from the child may weigh (a result, an error): the caller holds it whole,
#: so a child cannot grow the caller by sending.
MAX_MESSAGE_MB = 64
#: Seconds after ``max_seconds`` at which the child's own alarm kills it (if the caller is stuck).
ALARM_GRACE_S = 10
_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1
_FORK_LOCK = threading.Lock()


class BoundedError(Exception):
    """The bounded call did not finish: a limit, a stop, or a dead child. ``str()`` says which."""


class OutOfTime(BoundedError):
    def __init__(self, max_seconds: float):
        super().__init__(f"ran past its {max_seconds:g} s limit")
        self.max_seconds = max_seconds


class OutOfMemory(BoundedError):
    def __init__(self, max_memory_mb: float, detail: str = ""):
        super().__init__(
            f"needed more than its {max_memory_mb:g} MB memory limit" + (f" ({detail})" if detail else "")
        )
        self.max_memory_mb = max_memory_mb
        self.detail = detail


class Stopped(BoundedError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ChildDied(BoundedError):
    """The child ended without an answer: killed by a signal (``signal``), or exited (``code``)."""

    def __init__(self, message: str, *, signal: int | None = None, code: int | None = None):
        super().__init__(message)
        self.signal, self.code = signal, code


@dataclass(frozen=True)
class Finished:
    value: Any
    elapsed_s: float
    peak_rss_mb: float  # the child's peak resident set (its own rusage; shared pages included)
    pid: int


# --- the child ----------------------------------------------------------------------------------


def _vm_kb(field: str, pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _address_space_bytes() -> int | None:
    """This process's virtual size now (Linux); None where /proc is missing."""
    kb = _vm_kb("VmSize")
    return None if kb is None else kb * 1024


def _private_kb(pid: int) -> int | None:
    """Resident memory of ``pid`` that is its own (private pages: allocated, or copied on write
    from the caller), in KiB; None where ``smaps_rollup`` is missing."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return sum(
                int(line.split()[1]) for line in fh if line.startswith(("Private_Clean:", "Private_Dirty:"))
            )
    except (OSError, ValueError, IndexError):
        return None


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the thread that forked it ends (a killed worker takes
    its child along instead of leaving it running). Elsewhere: the alarm is the backstop."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _memory_in(exc: BaseException | None) -> bool:
    """A MemoryError anywhere in the chain (a caller may wrap it: "cannot build ...")."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, MemoryError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _portable(exc: BaseException) -> Any:
    """``(type, args, attributes)`` of an exception, to rebuild it in the caller: exceptions
    with their own ``__init__`` (``PlanInputError(field, message)``) do not unpickle from
    ``args`` alone. Falls back to a RuntimeError with the text when that does not pickle."""
    if not isinstance(exc, Exception):  # SystemExit & co. must not stop the caller
        return (RuntimeError, (f"{type(exc).__name__}: {exc}",), {})
    state = (type(exc), exc.args, dict(getattr(exc, "__dict__", {})))
    state[2].pop("__notes__", None)
    try:
        pickle.loads(pickle.dumps(state))
        return state
    except Exception:  # an attribute that does not pickle: keep the type's name and the text
        return (RuntimeError, (f"{type(exc).__name__}: {exc}",), {})


def _rebuild(state: Any) -> BaseException:
    cls, args, attrs = state
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(attrs)
    return exc


class _Sender:
    def __init__(self, fd: int):
        self.fd = fd

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view) :]

    def progress(self, *values: Any) -> None:
        self.send(("progress", values))


def _child(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    w: int,
    max_memory_mb: float,
    max_seconds: float,
    progress: bool,
) -> None:
    """The child's whole life; never returns (``os._exit``: no atexit handlers, no flushing of
    buffers inherited from the caller, no cleanup of the caller's objects)."""
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()  # the caller's is held across the fork: a new one for this process
    status = 0
    try:
        os.setpgid(0, 0)
        _die_with_parent()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        if max_seconds > 0:
            signal.alarm(int(max_seconds + ALARM_GRACE_S + 1))
        base = _address_space_bytes()
        if max_memory_mb > 0 and base is not None:
            limit = base + int(max_memory_mb * (1 << 20))
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)  # an operator's ``ulimit -v`` on the worker still holds
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        out = _Sender(w)
        if progress:
            kwargs = {**kwargs, "progress": out.progress}
        failure: Any = None
        out_of_memory = False
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # everything goes back to the caller, which decides
            out_of_memory = _memory_in(exc)
            if not out_of_memory:
                failure = (_portable(exc), "".join(traceback.format_exception(exc, limit=-8)))
            del exc  # with its traceback and frames: what filled the memory is freed here
        if out_of_memory:
            status = EXIT_OUT_OF_MEMORY
            out.send(("memory", None))
        elif failure is not None:
            out.send(("error", failure))
        else:
            out.send(("ok", value))
    except MemoryError:
        status = EXIT_OUT_OF_MEMORY
    except BaseException:  # a broken pipe (the caller is gone), a value that does not pickle
        status = 2
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except BaseException:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status)


# --- the caller ---------------------------------------------------------------------------------


def _kill(pid: int) -> None:
    """SIGKILL the child's process group (the child and what it started), then the child itself
    in case it had not made its group yet."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


class _Reader:
    """Length-prefixed pickles from the child's pipe."""

    def __init__(self, fd: int, max_bytes: int):
        self.fd, self.max_bytes = fd, max_bytes
        self.buffer = bytearray()
        self.eof = False

    def read(self) -> list[Any]:
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.eof = True
            return []
        self.buffer += chunk
        out = []
        while len(self.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buffer)
            if size > self.max_bytes:
                raise BoundedError(f"its answer was larger than {self.max_bytes >> 20} MB")
            if len(self.buffer) < _HEADER.size + size:
                break
            out.append(pickle.loads(bytes(self.buffer[_HEADER.size : _HEADER.size + size])))
            del self.buffer[: _HEADER.size + size]
        return out


def run_bounded(
    fn: Callable[..., Any],
    *args: Any,
    max_memory_mb: float,
    max_seconds: float,
    on_progress: Callable[..., None] | None = None,
    should_stop: Callable[[], str | None] | None = None,
    poll_s: float = 0.5,
    **kwargs: Any,
) -> Finished:
    """``fn(*args, **kwargs)`` in a bounded child; see the module docstring. Raises what ``fn``
    raised, :class:`OutOfMemory`, :class:`OutOfTime`, :class:`Stopped` or :class:`ChildDied`."""
    from django.db import connections

    if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        raise RuntimeError("run_bounded inside a transaction: the child could not see its rows")
    connections.close_all()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child's first write repeats what the caller had buffered
    base_kb = _vm_kb("VmSize") or 0
    with _FORK_LOCK:  # another thread's child must not inherit this pipe's write end (no EOF)
        r, w = os.pipe()
        started = time.monotonic()
        # Objects alive now are left out of the child's collections: a full collection writes to
        # every object it visits, which would copy the caller's whole heap into the child.
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            os.close(r)
            _child(fn, args, kwargs, w, max_memory_mb, max_seconds, on_progress is not None)
        gc.unfreeze()
        os.close(w)
    try:
        os.setpgid(pid, pid)  # also here: a kill before the child's own setpgid still hits its group
    except OSError:
        pass
    reader = _Reader(r, MAX_MESSAGE_MB << 20)
    outcome: tuple[str, Any] | None = None
    peak_vm_kb = 0
    status, peak_rss_mb = 0, 0.0
    try:
        deadline = started + max_seconds if max_seconds > 0 else math.inf
        next_check = started
        while not reader.eof:
            now = time.monotonic()
            if select.select([r], [], [], max(0.0, min(poll_s, deadline - now)))[0]:
                for kind, payload in reader.read():
                    if kind == "progress":
                        if on_progress is not None:
                            on_progress(*payload)
                    else:
                        outcome = (kind, payload)
                        deadline = min(deadline, time.monotonic() + ALARM_GRACE_S)  # it exits now
            now = time.monotonic()
            if outcome is None and now >= next_check:
                next_check = now + poll_s
                peak_vm_kb = max(peak_vm_kb, _vm_kb("VmPeak", pid) or 0)
                own_kb = _private_kb(pid) if max_memory_mb > 0 else None
                if own_kb is not None and own_kb > max_memory_mb * 1024:
                    raise OutOfMemory(max_memory_mb, f"{own_kb / 1024:.0f} MB resident of its own")
                reason = should_stop() if should_stop is not None else None
                if reason:
                    raise Stopped(str(reason))
            if now >= deadline:
                if outcome is None:
                    raise OutOfTime(max_seconds)
                break  # it answered but does not exit: killed below
    finally:
        os.close(r)
        if not reader.eof or outcome is None:
            _kill(pid)  # a stop, a limit, an error here, or an answer without an exit
        _, status, usage = os.wait4(pid, 0)
        peak_rss_mb = usage.ru_maxrss / 1024
    elapsed = time.monotonic() - started
    if outcome is not None:
        kind, payload = outcome
        if kind == "ok":
            return Finished(payload, elapsed, peak_rss_mb, pid)
        if kind == "memory":
            raise OutOfMemory(max_memory_mb)
        state, text = payload
        exc = _rebuild(state)
        exc.add_note(f"raised in bounded child {pid}:\n{text}")
        raise exc
    limit_kb = base_kb + max_memory_mb * 1024
    raise _died(
        status, max_memory_mb, max_seconds, near_limit=max_memory_mb > 0 and peak_vm_kb >= 0.9 * limit_kb
    )


def _died(status: int, max_memory_mb: float, max_seconds: float, *, near_limit: bool) -> BoundedError:
    """Why a child ended without an answer, from its wait status (``near_limit``: its address
    space, sampled at each poll, had reached 90 % of the limit)."""
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code == EXIT_OUT_OF_MEMORY and max_memory_mb > 0:
            return OutOfMemory(max_memory_mb)
        return ChildDied(f"its process exited with status {code} without an answer", code=code)
    sig = os.WTERMSIG(status)
    if sig == signal.SIGALRM and max_seconds > 0:
        return OutOfTime(max_seconds)
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if near_limit and sig in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS):
        # A C/C++ allocation that fails at the limit can abort instead of raising MemoryError.
        return OutOfMemory(max_memory_mb, f"its process died of {name} at the limit")
    return ChildDied(f"its process was killed by {name}", signal=sig)

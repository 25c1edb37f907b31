"""Plans as background work: queue, claim, solve with progress, cancel, recover.

A plan request is checked quickly and stored as ``queued``; :func:`queue_plan` hands its id to
the task backend (``planner.app.tasks.solve_plan_task``, run by ``manage.py db_worker``).
:func:`run_plan` is the one solve path: the worker's task and ``manage.py plan`` (in the
foreground) both call it.

States: ``queued`` → ``running`` → ``solved`` (ranked plans) or ``infeasible`` (no
configuration meets the constraints; the binding one is named) — both "done" — or ``failed``
(an error, with its message and, for a bad input, the field) or ``cancelled``.

Every transition is one conditional ``UPDATE`` (``status`` and, while running, the worker's
``attempts`` number as a lease), so a cancel, a recovery and a worker never overwrite each
other: whoever changes the row first wins, the others find nothing to update.

Bounds: the model trace and the solve run in a child process of the worker (``_solve``,
``srifty_web.bounded``) with an address-space limit (``PLAN_CHILD_MAX_MEMORY_MB`` beyond the
worker's own) and a wall-clock limit (``PLAN_MAX_SOLVE_S``); a plan that reaches one fails with a
message naming the setting and its value. The worker relays the child's progress, renews the
heartbeat and checks the row every :data:`POLL_S`: a cancel (or a lost lease) kills the child
within a second, even in a phase that reports no progress. So a runaway request holds one worker
for at most ``PLAN_MAX_SOLVE_S`` and can take no more than its memory limit; other teams' plans
wait at most that long on a single worker, and not at all while a second worker is free.

Liveness: while a plan runs, its worker writes ``heartbeat_at`` every ``PLAN_HEARTBEAT_S``;
progress writes (at most every ``PLAN_PROGRESS_EVERY_S``) do too. A worker killed mid-solve
(SIGKILL, out of memory; its child dies with it) leaves its plan ``running`` with a heartbeat
that stops; :func:`recover_stale_plans` queues such a plan again, or fails it once
``PLAN_MAX_ATTEMPTS`` workers have died on it: a request that kills workers does not kill them
forever. Recovery is the workers' job, never a read's: it runs when a plan task starts and in the
workers' recovery heartbeat (``planner.app.tasks.recover_stale_plans_task``, every
``PLAN_RECOVER_EVERY_S`` while a plan runs). A read (the API, the websocket, the page) writes
nothing: it shows a plan past its lease as it is, ``running``, with ``stale`` set and a notice
that its worker stopped answering (:func:`stale_notice`).

Live updates go to the websocket group ``plan-<id>`` with ``transaction.on_commit``
(``srifty_web.live``); pages without a channel layer that reaches the worker poll
``/api/v1/plans/<id>/progress/``, which returns the same message.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from planner.app.models import PLAN_ACTIVE, PLAN_FINISHED, PlanRecord, PlanStatus
from planner.plan_result import PlanResult
from srifty_web import bounded, queue
from srifty_web.live import send_on_commit

log = logging.getLogger(__name__)

#: ``echo(phase, evaluated, total)``: called on every progress report (``manage.py plan``'s bar).
Echo = Callable[[str, int, int], None]

LIVE_HANDLER = "plan.message"


def setting(name: str, default: float) -> float:
    return getattr(settings, name, default)


def lease_s() -> float:
    """Seconds without a heartbeat after which a running plan's worker counts as dead."""
    return float(setting("PLAN_LEASE_S", 60))


def _dead_q(cutoff: datetime) -> Q:
    """Running plans whose worker last answered before ``cutoff`` (no heartbeat yet: since it
    started)."""
    return Q(status=PlanStatus.RUNNING) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )


def last_answer(record: PlanRecord) -> datetime | None:
    """When the plan's worker last answered: its heartbeat, else the start of the solve."""
    return record.heartbeat_at or record.started_at


def is_stale(record: PlanRecord, now: datetime | None = None) -> bool:
    """A running plan whose worker has not answered for longer than the lease (the rows
    :func:`recover_stale_plans` takes); read from the row alone, no query."""
    beat = last_answer(record)
    if record.status != PlanStatus.RUNNING or beat is None:
        return False
    return beat < (now or timezone.now()) - timedelta(seconds=lease_s())


def stale_notice(record: PlanRecord, now: datetime | None = None) -> str:
    """What a reader is told about a stale plan ("" for any other): what the workers' recovery
    will do with it (queue it again, or fail it after ``PLAN_MAX_ATTEMPTS`` tries)."""
    beat = last_answer(record)
    if beat is None or not is_stale(record, now):
        return ""
    age = ((now or timezone.now()) - beat).total_seconds()
    fate = (
        "it will be queued again"
        if record.attempts < int(setting("PLAN_MAX_ATTEMPTS", 2))
        else f"it will fail (its workers stopped {record.attempts} times)"
    )
    return f"its worker stopped answering {age:.0f} s ago (lease {lease_s():.0f} s); {fate}"


class PlanStopped(Exception):
    """The plan is no longer this worker's: cancelled, or recovered and handed to another."""


# --- messages ---------------------------------------------------------------------------------


def group_name(plan_id: int) -> str:
    return f"plan-{plan_id}"


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def status_message(record: PlanRecord) -> dict[str, Any]:
    """The plan's state as the websocket, the progress endpoint and the page script see it."""
    total = max(record.progress_total or 0, record.progress_evaluated or 0)
    return {
        "type": "status",
        "id": record.pk,
        "status": record.status,
        "finished": record.status in PLAN_FINISHED,
        "phase": record.phase,
        "evaluated": record.progress_evaluated,
        "estimated_total": total,
        "fraction": (record.progress_evaluated / total) if total else (1.0 if record.finished else 0.0),
        "attempts": record.attempts,
        "created_at": _iso(record.created_at),
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
        "heartbeat_at": _iso(record.heartbeat_at),
        "stale": is_stale(record),
        "notice": stale_notice(record),
        "error": record.error,
        "error_field": record.error_field,
        "binding_constraint": record.binding_constraint,
        "url": f"/api/v1/plans/{record.pk}/",
        "page": f"/plans/{record.pk}/",
    }


def _push(plan_id: int) -> None:
    """Send the plan's state (as committed) to its viewers."""

    def send() -> None:
        record = PlanRecord.objects.filter(pk=plan_id).first()
        if record is not None:
            with transaction.atomic():
                send_on_commit(group_name(plan_id), LIVE_HANDLER, status_message(record))

    transaction.on_commit(send)


def _update(plan_id: int, only: Q, **fields: Any) -> bool:
    """One conditional transition; pushes the new state when it happened."""
    with transaction.atomic():
        changed = PlanRecord.objects.filter(Q(pk=plan_id) & only).update(**fields)
        if changed:
            _push(plan_id)
    return bool(changed)


# --- queue ------------------------------------------------------------------------------------


def store_plan(owner: Any, request: dict[str, Any], *, name: str = "") -> PlanRecord:
    record = PlanRecord(
        owner=owner, request=request, name=name or request.get("name", ""), status=PlanStatus.QUEUED
    )
    if request.get("model", {}).get("profile_run"):
        record.profile_run_id = request["model"]["profile_run"]
    record.save()
    return record


def queue_plan(owner: Any, request: dict[str, Any], *, name: str = "") -> PlanRecord:
    """Check ``request`` (validated by ``PlanRequestSerializer``), store it ``queued`` and queue
    its solve. Raises :class:`planner.app.service.PlanInputError` (nothing stored)."""
    from planner.app import service

    service.check_request(request, owner)
    with transaction.atomic():
        record = store_plan(owner, request, name=name)
        pk = record.pk
        transaction.on_commit(lambda: enqueue(pk))
    return record


def enqueue(plan_id: int) -> None:
    """Hand the plan to the task backend; a backend that refuses fails the plan (never a plan
    queued with no task behind it)."""
    try:
        queue.enqueue(queue.SOLVE_PLAN, plan_id)
    except Exception as exc:
        log.exception("queueing plan %s failed", plan_id)
        _update(
            plan_id,
            Q(status=PlanStatus.QUEUED),
            status=PlanStatus.FAILED,
            error=f"could not queue the plan: {exc}",
            finished_at=timezone.now(),
        )


def cancel_plan(record: PlanRecord, by: Any = None) -> bool:
    """Cancel a queued or running plan; False when it had already finished. A running worker
    notices within :data:`POLL_S` and kills the plan's child process (in-process, at its next
    progress write); its result, if any, is dropped."""
    who = f" by {by.get_username()}" if by is not None else ""
    return _update(
        record.pk,
        Q(status__in=PLAN_ACTIVE),
        status=PlanStatus.CANCELLED,
        error=f"cancelled{who}",
        finished_at=timezone.now(),
    )


def recover_stale_plans(now: datetime | None = None) -> list[tuple[int, str]]:
    """Running plans whose heartbeat is older than the lease: their worker is gone. Each is
    queued again (a new task), or failed after ``PLAN_MAX_ATTEMPTS`` tries. Returns
    ``[(plan id, new status)]``. Cheap when nothing is stale (one indexed query). Run by the
    workers only (a plan task's start, ``recover_stale_plans_task``), never by a read."""
    now = now or timezone.now()
    dead = _dead_q(now - timedelta(seconds=lease_s()))
    out: list[tuple[int, str]] = []
    max_attempts = int(setting("PLAN_MAX_ATTEMPTS", 2))
    for pk, attempts in PlanRecord.objects.filter(dead).values_list("pk", "attempts"):
        lost = dead & Q(attempts=attempts)
        if attempts < max_attempts:
            with transaction.atomic():
                if _update(
                    pk,
                    lost,
                    status=PlanStatus.QUEUED,
                    phase="",
                    heartbeat_at=None,
                    error=f"its worker stopped while solving it (try {attempts}); queued again",
                ):
                    transaction.on_commit(partial(enqueue, pk))
                    out.append((pk, PlanStatus.QUEUED))
                    log.warning("plan %s: worker lost mid-solve (try %s); queued again", pk, attempts)
        elif _update(
            pk,
            lost,
            status=PlanStatus.FAILED,
            error=f"its worker stopped while solving it, {attempts} times (killed, out of memory or "
            "restarted); not tried again: narrow the request (fewer nodes, types or regions)",
            finished_at=now,
        ):
            out.append((pk, PlanStatus.FAILED))
            log.warning("plan %s: worker lost mid-solve %s times; failed", pk, attempts)
    return out


def any_running() -> bool:
    """Is a plan running (so that a worker may die under it)? The recovery heartbeat goes on
    while one is."""
    return PlanRecord.objects.filter(status=PlanStatus.RUNNING).exists()


# --- run --------------------------------------------------------------------------------------


class _Lease:
    """``should_stop`` of a solve in a child process, asked by the worker every
    :data:`POLL_S` (or ``PLAN_HEARTBEAT_S`` if shorter): renews the plan's ``heartbeat_at`` every
    ``PLAN_HEARTBEAT_S`` and, between beats, checks that the plan is still this worker's. A
    cancel or a recovery thus kills the child within a poll, even in a phase that reports no
    progress (a model trace)."""

    def __init__(self, plan_id: int, attempt: int):
        self.plan_id, self.attempt = plan_id, attempt
        self.every = float(setting("PLAN_HEARTBEAT_S", 5))
        self.poll_s = min(POLL_S, self.every)
        self._next_beat = time.monotonic() + self.every

    def __call__(self) -> str | None:
        mine = PlanRecord.objects.filter(pk=self.plan_id, status=PlanStatus.RUNNING, attempts=self.attempt)
        now = time.monotonic()
        try:
            if now >= self._next_beat:
                self._next_beat = now + self.every
                alive = bool(mine.update(heartbeat_at=timezone.now()))
            else:
                alive = mine.exists()
        except DatabaseError:  # a locked or lost database: ask again at the next poll
            log.warning("plan %s: heartbeat failed", self.plan_id, exc_info=True)
            return None
        return None if alive else "the plan was cancelled or handed to another worker"


class _Reporter:
    """The ``progress(phase, evaluated, total)`` callback of one solve: stores the counts (at
    most every ``PLAN_PROGRESS_EVERY_S``, and at each new phase), pushes them to viewers, and
    raises :class:`PlanStopped` once the plan is no longer this worker's."""

    def __init__(self, plan_id: int, attempt: int, echo: Echo | None = None):
        self.plan_id, self.attempt, self.echo = plan_id, attempt, echo
        self.every = float(setting("PLAN_PROGRESS_EVERY_S", 0.5))
        self.phase, self.evaluated, self.total = "", 0, 0
        self._last = -1e9

    def __call__(self, phase: str, evaluated: int | None, total: int | None) -> None:
        if evaluated is not None:
            self.evaluated, self.total = int(evaluated), max(int(total or 0), int(evaluated))
        new_phase = phase != self.phase
        self.phase = phase
        if self.echo is not None:
            self.echo(phase, self.evaluated, self.total)
        now = time.monotonic()
        if new_phase or now - self._last >= self.every:
            self._last = now
            self.write()

    def write(self) -> None:
        if not _update(
            self.plan_id,
            Q(status=PlanStatus.RUNNING, attempts=self.attempt),
            phase=self.phase,
            progress_evaluated=self.evaluated,
            progress_total=self.total,
            heartbeat_at=timezone.now(),
        ):
            raise PlanStopped(self.plan_id)


def _claim(plan_id: int) -> int | None:
    """queued → running for this worker; returns its attempt number (the lease), or None."""
    now = timezone.now()
    with transaction.atomic():
        if not _update(
            plan_id,
            Q(status=PlanStatus.QUEUED),
            status=PlanStatus.RUNNING,
            attempts=F("attempts") + 1,
            started_at=now,
            heartbeat_at=now,
            phase="",
            progress_evaluated=0,
            progress_total=0,
        ):
            return None
        return PlanRecord.objects.values_list("attempts", flat=True).get(pk=plan_id)


def run_plan(plan_id: int, *, allow_code: bool = False, echo: Echo | None = None) -> str:
    """Solve a queued plan here and now; returns what became of it.

    ``allow_code``: the operator's ``manage.py plan`` may plan a factory (``service.workload``);
    ``echo(phase, evaluated, total)``: called on every progress report (the command's bar)."""
    from planner.app import service
    from planner.solver import Infeasible

    attempt = _claim(plan_id)
    if attempt is None:
        status = PlanRecord.objects.filter(pk=plan_id).values_list("status", flat=True).first()
        return f"plan {plan_id} is {status or 'gone'}; not solving it"
    record = PlanRecord.objects.select_related("owner").get(pk=plan_id)
    mine = Q(status=PlanStatus.RUNNING, attempts=attempt)
    reporter = _Reporter(plan_id, attempt, echo)
    done: dict[str, Any] = {"finished_at": timezone.now, "phase": ""}
    try:
        result = _solve(record, attempt, reporter, allow_code)
    except (PlanStopped, bounded.Stopped):
        return "stopped: the plan was cancelled or handed to another worker"
    except bounded.BoundedError as exc:
        log.warning("plan %s: %s", plan_id, exc)
        fields: dict[str, Any] = {
            "status": PlanStatus.FAILED,
            "error": limit_message(exc, reporter.phase),
            "error_field": "model" if reporter.phase == "model" else "",
        }
    except service.PlanInputError as exc:
        fields = {"status": PlanStatus.FAILED, "error": exc.message, "error_field": exc.field}
    except Infeasible as exc:
        fields = {
            "status": PlanStatus.INFEASIBLE,
            "error": str(exc),
            "binding_constraint": exc.constraint,
        }
    except Exception as exc:  # the solver's own failure (a bug, MemoryError): the plan says so
        log.exception("plan %s: solve failed", plan_id)
        fields = {"status": PlanStatus.FAILED, "error": f"the solver failed: {type(exc).__name__}: {exc}"}
    except BaseException:
        # The worker is being stopped (a second SIGTERM/SIGINT exits mid-task; its child, if any,
        # is killed on the way out): queue it again for the next worker rather than wait for the
        # lease to pass.
        if _update(plan_id, mine, status=PlanStatus.QUEUED, phase="", heartbeat_at=None):
            enqueue(plan_id)
        raise
    else:
        fields = {
            "status": PlanStatus.SOLVED,
            "result": result.to_json(),
            "solve_time_s": result.solve_time_s,
            "error": "",
            "progress_evaluated": reporter.evaluated,
            "progress_total": reporter.evaluated,
        }
    fields.update({k: (v() if callable(v) else v) for k, v in done.items()})
    if not _update(plan_id, mine, **fields):
        return "stopped: the plan was cancelled or handed to another worker; result dropped"
    return f"plan {plan_id} {fields['status']}"


# --- bounds -----------------------------------------------------------------------------------

#: Seconds between the worker's checks of a plan solving in a child (cancelled? still its lease?):
#: a cancel kills the child within about this long.
POLL_S = 0.5


def max_solve_s() -> float:
    """Wall time one plan's child may take, model trace included (``PLAN_MAX_SOLVE_S``; 0: none)."""
    return float(setting("PLAN_MAX_SOLVE_S", 300))


def child_memory_mb() -> float:
    """Memory one plan's child may take of its own (``PLAN_CHILD_MAX_MEMORY_MB``; 0: none): the
    address space it adds to the worker's, and its private resident pages."""
    return float(setting("PLAN_CHILD_MAX_MEMORY_MB", 1024))


def limit_message(exc: bounded.BoundedError, phase: str = "") -> str:
    """What a plan stopped by a bound says: the setting and its value, and the phase it was in."""
    where = f" (in its {phase} phase)" if phase else ""
    narrow = "; narrow the request (a smaller model, fewer nodes, types or regions) or ask the operator to raise it"
    if isinstance(exc, bounded.OutOfTime):
        return f"the solve ran past PLAN_MAX_SOLVE_S = {exc.max_seconds:g} s{where} and was stopped{narrow}"
    if isinstance(exc, bounded.OutOfMemory):
        return (
            f"the solve needed more than PLAN_CHILD_MAX_MEMORY_MB = {exc.max_memory_mb:g} MB{where} and was "
            f"stopped{narrow}"
        )
    return f"the solve's process stopped without an answer{where}: {exc}"


def _solve(record: PlanRecord, attempt: int, reporter: _Reporter, allow_code: bool) -> PlanResult:
    """``service.solve_request`` for the claimed plan, in a child process of this worker bounded
    by ``PLAN_CHILD_MAX_MEMORY_MB`` and ``PLAN_MAX_SOLVE_S`` (``srifty_web.bounded``): its progress
    comes back to ``reporter`` here, where the heartbeat and the cancel checks run too, and a
    cancel, a lost lease or a limit kills it within seconds.

    Inside a caller's transaction (a test's, an in-line task backend's) a child could neither
    see the plan's rows nor be waited for safely: the solve then runs here, unbounded, with
    progress writes as its heartbeat, as before. Where there is no ``fork`` either."""
    from planner.app import service

    if connection.in_atomic_block or not hasattr(os, "fork"):
        return service.solve_request(record.request, record.owner, allow_code=allow_code, progress=reporter)
    _warm(record.request)
    lease = _Lease(record.pk, attempt)
    done = bounded.run_bounded(
        service.solve_request,
        record.request,
        record.owner,
        allow_code=allow_code,
        max_memory_mb=child_memory_mb(),
        max_seconds=max_solve_s(),
        on_progress=reporter,
        should_stop=lease,
        poll_s=lease.poll_s,
    )
    log.info(
        "plan %s: solved in child %s in %.1f s, its peak RSS %.0f MB",
        record.pk,
        done.pid,
        done.elapsed_s,
        done.peak_rss_mb,
    )
    result: PlanResult = done.value  # solve_request's, from the child
    return result


#: What every model build of a spec kind imports (beyond torch): seconds each (transformers'
#: modeling_utils ~10 s and ~200 MB, with scipy's BLAS, whose start-up spins rather than fail
#: when its memory is refused).
WARM_MODULES = {
    "torchvision": ("torchvision.models",),
    "timm": ("timm",),
    "transformers": ("transformers.modeling_utils", "transformers.modeling_layers"),
}


def _warm(request: Mapping[str, Any]) -> None:
    """Import here, once per worker, what each child would otherwise import again (torch and the
    spec kind's :data:`WARM_MODULES`) and fill the service's per-process caches (GPU specs, the
    compute model): the fork shares them with every child, so a child's time and memory limits
    go to the request's own work. A failure here is left for the child to meet and report."""
    from planner.app import service
    from workload.specs import parse_spec

    modules = ["torch"]
    spec = (request.get("model") or {}).get("spec")
    try:
        parsed = parse_spec(spec) if spec else None
        if parsed is not None and parsed.is_library:
            modules += WARM_MODULES.get(parsed.kind, (parsed.kind,))
        for name in modules:
            if name not in sys.modules:
                importlib.import_module(name)
        service.transfer_model()
    except Exception:  # noqa: BLE001 - the child reports it, with the plan
        log.debug("warming the worker for a plan failed", exc_info=True)


def create_plan(
    owner: Any, request: dict[str, Any], *, name: str = "", allow_code: bool = False, echo: Echo | None = None
) -> PlanRecord:
    """Store ``request`` (already validated by ``PlanRequestSerializer``) and solve it here, in
    the foreground, on the same path as the background worker (``run_plan``).

    Raises :class:`planner.app.service.PlanInputError` for a contradictory request caught by the
    quick checks (nothing stored); otherwise returns the stored plan: ``solved``, ``infeasible`` (with the
    binding constraint, so it can be reopened and edited) or ``failed``. ``echo(phase,
    evaluated, total)``: see ``run_plan``.
    """
    from planner.app import service

    service.check_request(request, owner, allow_code=allow_code)
    record = store_plan(owner, request, name=name)
    run_plan(record.pk, allow_code=allow_code, echo=echo)
    record.refresh_from_db()
    return record

"""Every state change of a training job, one function each (as ``profiler.actions`` for runs).

Rows are locked with ``select_for_update`` while they change; websocket messages and background
tasks go out with ``transaction.on_commit``, so a viewer never sees a state that was rolled back
and a task never starts on a row that does not exist yet. Tasks are asked for by name
(``srifty_web.queue``; ``launcher.tasks`` binds the names): the tasks call these functions, so
this module never imports them. Agent reports are idempotent by
``(rank, seq)``: a retried post stores nothing twice.

Who may do what:

* launching (``create_job``, re-plan apply) needs the Django permission ``launcher.add_job`` (the
  default add permission of ``Job``; superusers have it, other users must be granted it, e.g.
  through a group) *and* an explicit confirmation (``confirm=True``; the API and the pages only
  pass it with a valid signed confirmation id from ``launcher.launch.confirmation_for``); each
  id launches one job: its digest is stored on the job under a unique index, in the transaction
  that creates it (``create_job(confirmation=...)``), and a second use is ``ConfirmationUsed``;
* stopping a job: its owner, or anyone with ``launcher.change_job`` who can see it;
* seeing a job: the owner's team (``Job.objects.visible_to``, ``srifty_web.teams.visible_owner_q``).
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import shlex
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from typing import Any, TypeGuard

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.crypto import salted_hmac

from launcher import envvalues, options, taskfile
from launcher.errors import ConfirmationUsed as ConfirmationUsed
from launcher.errors import JobClosed as JobClosed
from launcher.errors import JobError as JobError
from launcher.errors import NotAllowed as NotAllowed
from launcher.models import Job, JobEvent, JobReport, JobStatus
from planner.app.models import PlanRecord, PlanStatus
from planner.option import PlanOption
from srifty_web import queue
from srifty_web.live import send_on_commit
from srifty_web.money import money
from srifty_web.teams import acts_for_owner

log = logging.getLogger(__name__)

LAUNCH_PERMISSION = "launcher.add_job"
STOP_PERMISSION = "launcher.change_job"
MAX_TRAIN_COMMAND = 4000
MAX_SPEND_USD = Decimal("1000000")
MAX_HOURS = 24 * 30
BROADCAST_REPORTS = 200  # per post: a websocket message each, the rest only lands in the database
IMAGE_ID_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
# What a request may send as a number (a form's text, JSON); float() and int() take each.
NUMBER_TYPES = (int, float, str, Decimal)
TOKEN_GRACE = timedelta(minutes=15)  # the job token outlives the cap a little; ending the job revokes it


def _is_number(value: object) -> TypeGuard[int | float | str | Decimal]:
    """A number or numeric text as a request sends it; never a boolean (``True`` is an int)."""
    return isinstance(value, NUMBER_TYPES) and not isinstance(value, bool)


def setting(name: str, default: Any) -> Any:
    """A Srifty job setting (``settings.JOB_*`` / ``settings.RECONCILE_*``) or its default."""
    return getattr(settings, name, default)


# --- permissions --------------------------------------------------------------------------
# ``user``: whoever the request is for: a User, AnonymousUser or a token principal (the checks
# below and ``srifty_web.teams`` tell them apart), hence ``Any``.


def can_launch(user: Any) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(LAUNCH_PERMISSION))


def can_stop(user: Any, job: Job) -> bool:
    return acts_for_owner(user, job, STOP_PERMISSION)


def visible_jobs(user: Any) -> QuerySet[Job]:
    return Job.objects.visible_to(user).select_related("owner", "plan")


# --- what a job did ------------------------------------------------------------------------


def never_started(job: Job) -> bool:
    """A finished job that never had a node: its launch failed at its first AWS calls (or it
    was stopped before ``run_instances``). Nothing ran, so nothing was spent, whatever
    ``Job.spend_so_far`` (which counts from the job's creation) says. An instance started but
    not recorded is still found: the rollback's teardown writes a ``terminated`` event."""
    if not job.finished or job.instance_ids or job.started_at is not None:
        return False
    return not job.events.filter(kind="terminated").exists()


def never_started_ids(listed: Iterable[Job]) -> set[int]:
    """The ids of the jobs in ``listed`` that ``never_started``, in one query (the job list)."""
    candidates = [j.pk for j in listed if j.finished and not j.instance_ids and j.started_at is None]
    ran = set(
        JobEvent.objects.filter(job_id__in=candidates, kind="terminated").values_list("job_id", flat=True)
    )
    return set(candidates) - ran


def spend_usd(job: Job) -> float:
    """What the job has cost: 0 when it never started."""
    return 0.0 if never_started(job) else job.spend_so_far()


# --- websocket fan-out --------------------------------------------------------------------


def broadcast(job: Job, message: dict[str, Any]) -> None:
    """Send ``message`` to the job's websocket group once the current transaction commits."""
    send_on_commit(job.group_name, "job.message", message)


def status_message(job: Job) -> dict[str, Any]:
    return {
        "type": "status",
        "job": job.pk,
        "status": job.status,
        "reason": job.status_reason,
        "spend_usd": money(spend_usd(job)),  # a decimal string, as the API's spend_usd
        "never_started": never_started(job),
        "nodes": len(job.instance_ids),
        "drift": job.drift_since is not None,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def event_message(event: JobEvent) -> dict[str, Any]:
    return {"type": "event", "kind": event.kind, "message": event.message, "at": event.at.isoformat()}


# --- parameters ---------------------------------------------------------------------------


def clean_params(
    train_command: object, max_spend_usd: object, max_hours: object
) -> tuple[str, Decimal, float]:
    """Checked launch parameters (as a request sent them), or JobError naming the field."""
    if not isinstance(train_command, str) or not train_command.strip():
        raise JobError("train_command", "the training command is required, e.g. train.py --epochs 3")
    if len(train_command) > MAX_TRAIN_COMMAND or "\x00" in train_command:
        raise JobError("train_command", f"at most {MAX_TRAIN_COMMAND} characters, no NUL")
    try:
        if not shlex.split(train_command):
            raise ValueError("empty")
    except ValueError as exc:
        raise JobError("train_command", f"cannot be split into words like a shell would: {exc}") from exc
    try:
        spend = Decimal(str(max_spend_usd)).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    except (InvalidOperation, ValueError, TypeError) as exc:
        raise JobError("max_spend_usd", "a dollar amount, e.g. 250") from exc
    if not spend.is_finite() or spend <= 0 or spend > MAX_SPEND_USD:
        raise JobError("max_spend_usd", f"more than 0 and at most {MAX_SPEND_USD}")
    try:
        if not _is_number(max_hours):
            raise TypeError(type(max_hours).__name__)
        hours = float(max_hours)
    except (ValueError, TypeError) as exc:
        raise JobError("max_hours", "a number of hours, e.g. 12") from exc
    if not math.isfinite(hours) or hours <= 0 or hours > MAX_HOURS:
        raise JobError("max_hours", f"more than 0 and at most {MAX_HOURS}")
    return train_command.strip(), spend, round(hours, 4)


def clean_task(task: object) -> taskfile.TaskSpec | None:
    """The task file of a launch (None: none given), or JobError("task") listing every problem
    with its line and field. A local workdir is uploaded by ``manage.py launch``; the API and
    the dialog send text only, so there it must be ``git:`` (or absent)."""
    if task is None or (isinstance(task, str) and not task.strip()):
        return None
    if not isinstance(task, str):
        raise JobError("task", "the task file as text")
    try:
        spec = taskfile.parse_task(task, for_launch=True)  # no run: planned from, not launched
    except taskfile.TaskFileError as exc:
        raise JobError("task", str(exc), exc.as_dict()) from exc
    if spec.required_envs:  # SkyPilot's `envs: {NAME: null}`: no launch without a value
        raise missing_envs(spec)
    return spec


def missing_envs(spec: taskfile.TaskSpec) -> JobError:
    """JobError("task") naming each env or secret the file leaves to the launch (``null``) that
    has no value: each problem also says which name (``env``) and whether its value is a
    ``secret`` (a ``secrets`` name or a credential-like env name, hidden wherever the file is
    shown), so the launch dialog can ask for it (``launcher.envvalues`` writes the values in)."""
    issues = [
        taskfile.TaskIssue(
            None,
            f"{'secrets' if name in spec.secrets else 'envs'}.{name}",
            "must be given at launch: env {NAME: value} in the API, its field in the launch "
            "dialog, or manage.py launch --env NAME=VALUE",
        )
        for name in spec.required_envs
    ]
    sections = envvalues.declared(spec)
    details = [
        {**d, "env": name, "secret": envvalues.hidden(name, sections[name])}
        for d, name in zip(taskfile.TaskFileError(issues).as_dict(), spec.required_envs, strict=True)
    ]
    return JobError("task", "; ".join(str(i) for i in issues), details)


def clean_image_id(image_id: object) -> str:
    if not image_id:
        return ""
    if not isinstance(image_id, str) or not IMAGE_ID_RE.match(image_id):
        raise JobError("image_id", "an AMI id like ami-0123456789abcdef0")
    return image_id


def option_rank(rank: object) -> int:
    """A requested option number (a form's text, a JSON number), or JobError("rank")."""
    try:
        if not _is_number(rank):
            raise TypeError(type(rank).__name__)
        return int(rank)
    except (TypeError, ValueError) as exc:
        raise JobError("rank", "an option number of the plan") from exc


def plan_option(owner: Any, plan: PlanRecord, rank: object) -> dict[str, Any]:
    """The option ``rank`` of a solved plan the owner may see, or JobError."""
    if not PlanRecord.objects.visible_to(owner).filter(pk=plan.pk).exists():
        raise JobError("plan", "no such plan")
    if plan.status != PlanStatus.SOLVED:
        raise JobError("plan", f"the plan is {plan.status}, not solved")
    number = option_rank(rank)
    option = plan.option(number)
    if option is None:
        raise JobError("rank", f"the plan has no option {number}")
    if not PlanOption.from_json(option).groups:
        raise JobError("rank", "this option has no node groups")
    return option


def total_samples(plan: PlanRecord, option: PlanOption | dict[str, Any]) -> float:
    request = plan.request or {}
    value = request.get("total_samples")
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    # No explicit size: what the option was sized for (throughput x time).
    typed = PlanOption.read(option)
    return (typed.throughput_sps or 0.0) * (typed.time_h or 0.0) * 3600.0


def predicted_iter_s(option: PlanOption) -> float:
    """The option's predicted seconds per iteration: a job is checked against it (a solved row has it)."""
    if option.iter_time_s is None:
        raise JobError("rank", "this option has no predicted iteration time")
    return option.iter_time_s


# --- lifecycle ----------------------------------------------------------------------------


def confirmation_used(digest: str) -> int | None:
    """The job that the confirmation of this digest launched, if any."""
    if not digest:
        return None
    return Job.objects.filter(confirmation_digest=digest).values_list("pk", flat=True).first()


def create_job(
    owner: Any,
    plan: PlanRecord,
    rank: object,
    train_command: object,
    max_spend_usd: object,
    max_hours: object,
    confirm: bool,
    *,
    replaces: Job | None = None,
    task: str = "",
    image_id: str = "",
    workdir_archive: str = "",
    confirmation: str = "",
) -> Job:
    """A job for one plan option, launched by a background task once this commits.

    Nothing launches unless ``confirm`` is True and ``owner`` holds ``launcher.add_job``. The job's
    spend cap is ``min(max_spend_usd, hourly x max_hours)``; that is what is stored as
    ``max_spend_usd``, and ``Job.cap_at`` is when it is reached. With ``task`` (a task file's
    text) the nodes run its setup and run and ``train_command`` is ignored (the task's ``run`` is
    stored in its place); ``workdir_archive`` is its uploaded local workdir. ``image_id`` (or
    the task's ``resources.image_id``) replaces the Deep Learning AMI.

    ``confirmation``: the digest of the confirmation id (``launch.confirmation_digest``), stored
    on the job. A digest that already launched a job raises ``ConfirmationUsed`` naming it, and
    so does the loser of two concurrent uses: its insert fails on the unique index (PostgreSQL
    makes it wait for the winner's commit; SQLite's IMMEDIATE transactions queue the two), and
    its job, event and queued tasks are rolled back with the savepoint.
    """
    if not can_launch(owner):
        raise NotAllowed("launching a job needs the launcher.add_job permission")
    if confirm is not True:
        raise JobError("confirmation", "a launch needs an explicit confirmation of instances and spend")
    if (first := confirmation_used(confirmation)) is not None:
        raise ConfirmationUsed(first)
    spec = clean_task(task)
    checked, spend, hours = clean_params("task" if spec else train_command, max_spend_usd, max_hours)
    if spec is None:
        train_command = checked
    else:  # the job's command is the task's run (shown on the job page and kept by re-plans)
        train_command = spec.run.strip()[:MAX_TRAIN_COMMAND]
        if spec.workdir is not None and spec.workdir.kind == "local" and not workdir_archive:
            raise JobError("task", "workdir: a local folder needs its archive (manage.py launch uploads it)")
    option = plan_option(owner, plan, rank)  # stored on the job as it is (Job.option)
    typed = PlanOption.from_json(option)
    # The file's AMI, or its AMI for the option's region (``image_id: {us-east-1: ami-...}``)
    image_id = clean_image_id(image_id) or (spec.resources.image_for(typed.region) if spec else "")
    limits = options.limits(typed, spend, hours)
    options.check_user_data(spec or options.task_spec("", train_command), "task" if spec else "train_command")
    samples = total_samples(plan, typed)
    global_batch = max(1, typed.global_batch or 1)
    iter_s = predicted_iter_s(typed)
    try:
        with transaction.atomic():
            job = Job.objects.create(
                owner=owner,
                plan=plan,
                plan_rank=option_rank(rank),
                option=option,
                region=typed.region,
                train_command=train_command,
                hourly_usd=limits.hourly_usd,
                max_spend_usd=limits.max_spend_usd,
                max_hours=hours,
                predicted_iter_s=iter_s,
                predicted_iter_p90_s=typed.iter_time_p90_s or iter_s,
                total_iterations=math.ceil(samples / global_batch) if samples > 0 else 0,
                launch_token=f"job{secrets.token_hex(8)}",
                task=task if spec is not None else "",
                workdir_archive=workdir_archive,
                image_id=image_id,
                image_source="custom" if image_id else "",
                confirmation_digest=confirmation or None,
            )
            add_event(
                job,
                "created",
                f"launch confirmed: {options.describe_option(option)}, "
                f"${limits.hourly_usd}/h, at most ${limits.max_spend_usd} ({limits.cap_hours:.2f} h)",
                {"replaces": replaces.pk if replaces else None},
            )
            queue.enqueue_on_commit(queue.LAUNCH_JOB, job.pk)
            # The watch starts now, not after the launch: a launch that dies half-way is noticed too.
            queue.enqueue_on_commit(queue.WATCH_JOB, job.pk)
    except IntegrityError:
        # A concurrent use of the same confirmation committed first. The block above is rolled
        # back (a savepoint inside a caller's transaction), and Django drops the on_commit work it
        # queued: nothing launches. Asked here, outside it: an aborted PostgreSQL transaction
        # answers no query.
        if (first := confirmation_used(confirmation)) is None:
            raise
        raise ConfirmationUsed(first) from None
    return job


def derived_token(job: Job) -> str:
    """The job's agent token. Derived (HMAC of SECRET_KEY, job and launch token) rather than
    random so that a retried launch task writes the *same* token into the user-data of the
    instances an earlier attempt already started; only its hash is stored."""
    return salted_hmac("srifty.job-token", f"{job.pk}:{job.launch_token}", algorithm="sha256").hexdigest()


def issue_token(job: Job) -> str:
    """The raw job token, for the user-data only (never a task argument, a row or a log)."""
    raw = derived_token(job)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.token_hash = Job.hash_token(raw)
        locked.token_expires_at = locked.cap_at + TOKEN_GRACE
        locked.save(update_fields=["token_hash", "token_expires_at"])
    return raw


def mark_launched(
    job: Job,
    *,
    instance_ids: list[str],
    node_ips: dict[str, str | None],
    template_id: str | None = None,
    placement_group: str | None = None,
) -> Job:
    """Record instances of one node group right after ``run_instances`` returned (rendezvous needs
    them). The first launch starts the clock (spend, cap, token expiry)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        for instance_id in instance_ids:
            if instance_id not in locked.instance_ids:
                locked.instance_ids.append(instance_id)
        locked.node_ips.update({k: v for k, v in node_ips.items() if v})
        if template_id and template_id not in locked.launch_template_ids:
            locked.launch_template_ids.append(template_id)
        if placement_group is not None:
            locked.placement_group = placement_group
        if locked.started_at is None and instance_ids:
            locked.started_at = timezone.now()
            if locked.token_hash and not locked.finished:  # a job stopped mid-launch keeps a dead token
                locked.token_expires_at = locked.cap_at + TOKEN_GRACE
        locked.save()
    return locked


def set_cluster(job: Job, **fields: str) -> Job:
    """Record what the launch made or chose for the cluster (``placement_group``,
    ``security_group_id``, ``image_id``, ``image_source``) before the nodes start, so teardown
    finds it however the launch ends."""
    allowed = {"placement_group", "security_group_id", "image_id", "image_source"}
    if not set(fields) <= allowed:
        raise ValueError(f"not a cluster field: {sorted(set(fields) - allowed)}")
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.save(update_fields=sorted(fields))
    return locked


def set_node_ips(job: Job, node_ips: dict[str, str | None]) -> Job:
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.node_ips.update({k: v for k, v in node_ips.items() if v})
        locked.save(update_fields=["node_ips"])
    return locked


def mark_running(job: Job, message: str) -> Job:
    """Every node group is launched: the job runs."""
    return transition(job, JobStatus.RUNNING, message, kind="launched", only_from=(JobStatus.LAUNCHING,))


# Which status may follow which: a finished job never changes again (first writer wins).
TRANSITIONS = {
    JobStatus.LAUNCHING: (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED),
    JobStatus.RUNNING: (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED),
}


def transition(
    job: Job,
    status: str,
    reason: str,
    *,
    kind: str | None = None,
    data: dict[str, Any] | None = None,
    only_from: tuple[str, ...] | None = None,
) -> Job:
    """The one function that changes a job's status, and it always writes the event saying so
    (kind ``kind``, default the new status) in the same transaction: the status a page shows
    and the newest status event in its log never disagree. A change the job's current status
    does not allow (see ``TRANSITIONS``; ``only_from`` narrows it) changes nothing and writes
    nothing. Finishing revokes the job's token and asks for its teardown after commit.
    """
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        allowed = TRANSITIONS.get(JobStatus(locked.status), ())
        if status not in allowed or (only_from is not None and locked.status not in only_from):
            return locked
        now = timezone.now()
        locked.status = status
        fields = ["status"]
        if status == JobStatus.RUNNING:
            locked.started_at = locked.started_at or now
            fields.append("started_at")
        if locked.finished:
            locked.status_reason = reason[:10_000]
            locked.finished_at = now
            locked.token_expires_at = now
            fields += ["status_reason", "finished_at", "token_expires_at"]
        locked.save(update_fields=fields)
        event_data = dict(data or {})
        if status == JobStatus.RUNNING:
            event_data.setdefault("instance_ids", list(locked.instance_ids))
        add_event(locked, kind or status, reason, {**event_data, "status": status})
        broadcast(locked, status_message(locked))
        if locked.finished:
            queue.enqueue_on_commit(queue.STOP_JOB, locked.pk)
    return locked


def add_event(
    job: Job,
    kind: str,
    message: str,
    data: dict[str, Any] | None = None,
    *,
    once_for: str | None = None,
    at: datetime | None = None,
) -> JobEvent | None:
    """A JobEvent, also sent to viewers. With ``once_for`` (e.g. an instance id) an event of this
    kind about the same thing is stored only once. ``at``: when it happened (default now)."""
    data = dict(data or {})
    if once_for is not None:
        data["about"] = once_for
        if JobEvent.objects.filter(job=job, kind=kind, data__about=once_for).exists():
            return None
    event = JobEvent.objects.create(
        job=job, kind=kind, message=message[:10_000], data=data, at=at or timezone.now()
    )
    broadcast(job, event_message(event))
    return event


def record_reports(job: Job, rank: int, seq: int, reports: list[dict[str, Any]]) -> int:
    """Store a batch of iteration reports of one rank; report ``i`` has seq ``seq + i``.

    Returns how many were new (0 for a retried post). Raises JobClosed when the job has
    finished and the post holds something new.
    """
    seqs = [seq + i for i in range(len(reports))]
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        seen = set(
            JobReport.objects.filter(job=locked, rank=rank, seq__in=seqs).values_list("seq", flat=True)
        )
        fresh = [(s, r) for s, r in zip(seqs, reports, strict=True) if s not in seen]
        if not fresh:
            return 0
        if locked.finished:
            raise JobClosed(f"job {locked.pk} is {locked.status}")
        now = timezone.now()
        JobReport.objects.bulk_create(
            [
                JobReport(
                    job=locked,
                    rank=rank,
                    seq=s,
                    iteration=r["iteration"],
                    iter_time_s=r["iter_time_s"],
                    samples=r.get("samples"),
                    reported_at=now,
                )
                for s, r in fresh
            ]
        )
        locked.last_seq = max(locked.last_seq, seqs[-1])
        locked.save(update_fields=["last_seq"])
        for _, r in fresh[-BROADCAST_REPORTS:]:
            broadcast(
                locked,
                {
                    "type": "report",
                    "iteration": r["iteration"],
                    "iter_time_s": r["iter_time_s"],
                    "rank": rank,
                },
            )
    return len(fresh)


def set_drift(job: Job, message: str, data: dict[str, Any]) -> bool:
    """Flag drift (once per episode). Returns True when it was newly flagged."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.drift_since is not None or locked.finished:
            return False
        locked.drift_since = timezone.now()
        locked.save(update_fields=["drift_since"])
        add_event(locked, "drift", message, data)
        broadcast(locked, status_message(locked))
    return True


def clear_drift(job: Job, message: str, data: dict[str, Any]) -> bool:
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.drift_since is None:
            return False
        since = locked.drift_since
        locked.drift_since = None
        locked.save(update_fields=["drift_since"])
        add_event(locked, "drift_cleared", message, {**data, "since": since.isoformat()})
        broadcast(locked, status_message(locked))
    return True


def stop_job(job: Job, reason: str = "stopped by user") -> Job:
    """Stop a job (user, spend/time cap, re-plan, reconciler): its instances are terminated."""
    return _finish(job, JobStatus.STOPPED, reason)


def fail_job(job: Job, reason: str) -> Job:
    return _finish(job, JobStatus.FAILED, reason)


def succeed_job(job: Job, reason: str) -> Job:
    return _finish(job, JobStatus.SUCCEEDED, reason)


def _finish(job: Job, status: str, reason: str) -> Job:
    """End a job (first writer wins), revoke its token and terminate its cluster after commit."""
    return transition(job, status, reason)


def apply_replan(
    job: Job,
    user: Any,
    plan: PlanRecord,
    rank: object,
    max_spend_usd: object,
    max_hours: object,
    confirm: bool,
    *,
    confirmation: str = "",
) -> Job:
    """Stop ``job``'s cluster and launch option ``rank`` of ``plan`` (its re-plan) in its place.
    ``confirmation``: as ``create_job``'s; a used one (``ConfirmationUsed``) stops nothing."""
    if not can_launch(user):
        raise NotAllowed("launching a job needs the launcher.add_job permission")
    if not can_stop(user, job):
        raise NotAllowed("only the owner (or launcher.change_job) may replace this job")
    with transaction.atomic():
        new = create_job(
            user,
            plan,
            rank,
            job.train_command,
            max_spend_usd,
            max_hours,
            confirm,
            replaces=job,
            task=job.task,
            image_id=job.image_id if job.image_source == "custom" else "",
            workdir_archive=job.workdir_archive,
            confirmation=confirmation,
        )
        stop_job(job, f"replaced by job {new.pk} (re-plan)")
        add_event(
            job,
            "replan_applied",
            f"re-plan applied: job {new.pk} launches option {rank} of plan {plan.pk}",
            {"job": new.pk, "plan": plan.pk, "rank": option_rank(rank)},
        )
    return new

"""``manage.py launch --plan N --option K --task task.yaml [--env NAME=VALUE ...] [--max-spend USD]
[--max-hours H] [--yes]``.

Launches option K of solved plan N with a task file (Srifty's YAML or SkyPilot's, see
``launcher.taskfile``): the file is checked (every error with its line and field, exit 1), the
pre-checks ask AWS what it would refuse (``launcher.prechecks``, each failure with its fix;
``--no-prechecks`` skips them), the exact launch is shown, and after a ``y`` (or ``--yes``) the
pre-checks are asked again (the answer may have come minutes later), a local workdir is packed and
uploaded (``launcher.workdirs``) and the job is created and launched in the foreground; the job
row is printed at the end. The same confirmation rules as the web: ``launcher.add_job`` (the
``--user``, default the first superuser).

``--env NAME=VALUE`` (repeatable) gives a value to an env or secret of the file, as ``sky launch
--env`` does: required for each the file writes ``null``; ``--env NAME`` takes the value from this
shell's environment (so a secret need not be typed on the command line). Values are written into
the job's task file (``launcher.envvalues``) and never printed.
"""

from __future__ import annotations

import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from launcher import envvalues, jobs, launch, options, prechecks, taskfile, workdirs
from launcher.models import Job
from planner.app.models import PlanRecord
from planner.option import PlanOption
from srifty_web.commands import owner_for_command


class Command(BaseCommand):
    help = "Launch a plan option with a task file (setup + run on every node)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--plan", type=int, required=True, help="a solved plan's id")
        parser.add_argument("--option", type=int, default=1, help="the option's rank in the plan (default 1)")
        parser.add_argument("--task", required=True, help="task file (Srifty or SkyPilot YAML)")
        parser.add_argument("--max-spend", default=None, help="USD cap (default: 1.5x the option's p90 cost)")
        parser.add_argument(
            "--max-hours", type=float, default=None, help="hours cap (default: 1.5x p90 time)"
        )
        parser.add_argument("--image-id", default="", help="a custom AMI instead of the Deep Learning AMI")
        parser.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a value for the file's env or secret NAME (repeatable); NAME alone: from this shell's environment",
        )
        parser.add_argument("--user", default=None, help="who launches (default: the first superuser)")
        parser.add_argument("--yes", action="store_true", help="launch without asking")
        parser.add_argument("--no-prechecks", action="store_true", help="do not ask AWS before launching")

    def handle(self, *args: Any, **o: Any) -> None:
        path = Path(o["task"])
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"--task {path}: {exc.strerror}") from exc
        try:
            spec = taskfile.parse_task(text, filename=path, for_launch=True)
            folder = taskfile.check_workdir(spec, Path.cwd())
        except taskfile.TaskFileError as exc:
            raise CommandError(
                f"{path} has {len(exc.issues)} error(s):\n" + "\n".join(f"  {path}:{i}" for i in exc.issues)
            ) from exc
        task = _with_env(text.decode(), o["env"], path)
        spec = taskfile.parse_task(task, filename=path, for_launch=True)
        user = owner_for_command(o["user"])
        plan = PlanRecord.objects.visible_to(user).filter(pk=o["plan"]).first()
        if plan is None:
            raise CommandError(f"--plan {o['plan']}: no such plan")
        try:
            option = jobs.plan_option(user, plan, o["option"])
        except jobs.JobError as exc:
            raise CommandError(f"--{'option' if exc.field == 'rank' else exc.field}: {exc.message}") from exc
        for note in taskfile.plan_conflicts(spec, option):
            self.stdout.write(f"note: {note}")
        for warning in spec.warnings:  # read and kept, not acted on
            self.stdout.write(f"note: {path}:{warning}")
        if spec.required_envs:
            raise CommandError(
                f"{path}: {', '.join(spec.required_envs)} must be given at launch: --env NAME=VALUE "
                "(or --env NAME to take it from this shell's environment)"
            )
        if o["env"]:  # the names only: a value is never printed
            given = sorted({word.partition("=")[0] for word in o["env"]})
            self.stdout.write(f"env given at launch: {', '.join(given)}")
        spend, hours = _caps(option, o["max_spend"], o["max_hours"])
        if not o["no_prechecks"]:
            self._prechecks(option)
        shown = options.preview(option, spend, hours)
        self.stdout.write(
            f"launch: {shown['label']} · {shown['nodes']} node(s), {shown['gpus']} GPU(s) · "
            f"${shown['hourly_usd']}/h · at most ${shown['max_spend_usd']} ({shown['cap_hours']} h)"
        )
        if not o["yes"]:
            if not _confirmed(self):
                raise CommandError("not launched (answer y, or pass --yes)")
            if not o["no_prechecks"]:
                self._prechecks(option, quiet=True)  # again on submit, as the web's second step
        archive = ""
        if folder is not None:
            data = workdirs.pack(folder)
            archive = workdirs.store(data, PlanOption.from_json(option).region)
            self.stdout.write(f"workdir: {folder} -> {archive} ({len(data)} bytes)")
        try:
            job = jobs.create_job(
                user,
                plan,
                o["option"],
                "",
                spend,
                hours,
                confirm=True,
                task=task,
                image_id=o["image_id"],
                workdir_archive=archive,
            )
        except (jobs.JobError, jobs.NotAllowed) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"job {job.pk}: {launch.launch_job(job)}")
        job = Job.objects.get(pk=job.pk)
        self.stdout.write(render(job))
        if job.status == "failed":
            raise CommandError(f"job {job.pk} failed: {job.status_reason}")

    def _prechecks(self, option: dict[str, Any], *, quiet: bool = False) -> None:
        """Every check with its fix (``quiet``: only the failed ones); a failure stops the
        command before anything is created."""
        checks = prechecks.run(option)
        for c in checks:
            if not quiet or c.failed:
                self.stdout.write(
                    f"check {c.name}: {c.status}: {c.message}" + (f"\n  fix: {c.fix}" if c.fix else "")
                )
        failed = [c for c in checks if c.failed]
        if failed:
            raise CommandError(
                f"{len(failed)} pre-check(s) failed; nothing launched (fix them or --no-prechecks)"
            )


def _with_env(text: str, words: list[str], path: Path) -> str:
    """The task file's text with the ``--env`` values written in (``envvalues.with_values``):
    ``NAME=VALUE``, or ``NAME`` for this shell's value of it. A later word for a name wins, as
    with ``sky launch``."""
    values: dict[str, str] = {}
    for word in words:
        name, has_value, value = word.partition("=")
        if not has_value:
            if name not in os.environ:
                raise CommandError(f"--env {name}: not set in this shell's environment; give NAME=VALUE")
            value = os.environ[name]
        values[name] = value
    try:
        return envvalues.with_values(text, envvalues.check_values(values))
    except envvalues.EnvValueError as exc:
        raise CommandError(f"--env: {'; '.join(exc.problems)}") from exc
    except taskfile.TaskFileError as exc:  # parsed above; only a file the values break gets here
        raise CommandError(f"{path}: {exc}") from exc


def _caps(option: dict[str, Any], max_spend: str | None, max_hours: float | None) -> tuple[Decimal, float]:
    typed = PlanOption.from_json(option)
    hours = max_hours or max(0.5, round((typed.time_p90_h or typed.time_h or 1.0) * 1.5, 1))
    spend = max_spend or f"{options.option_hourly(option) * hours:.2f}"
    try:
        _, checked_spend, checked_hours = jobs.clean_params("task", spend, hours)
    except jobs.JobError as exc:
        raise CommandError(f"--{exc.field.replace('_usd', '').replace('_', '-')}: {exc.message}") from exc
    return checked_spend, checked_hours


def _confirmed(cmd: BaseCommand) -> bool:
    if not sys.stdin.isatty():
        return False
    cmd.stdout.write("Launch these instances? [y/N] ", ending="")
    cmd.stdout.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def render(job: Job) -> str:
    lines = [
        f"job {job.pk}: {job.status} · region {job.region} · {len(job.instance_ids)} instance(s) · "
        f"${job.hourly_usd}/h · cap ${job.max_spend_usd} / {job.max_hours:g} h",
        f"  image: {job.image_id} ({job.image_source})",
        f"  placement group: {job.placement_group or '-'} · security group: {job.security_group_id or '-'}",
        f"  workdir: {job.workdir_archive or '-'}",
    ]
    lines += [
        f"  node {rank}: {iid} {job.node_ips.get(iid, '')}" for rank, iid in enumerate(job.instance_ids)
    ]
    if job.status_reason:
        lines.append(f"  reason: {job.status_reason}")
    return "\n".join(lines)

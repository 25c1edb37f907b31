"""``manage.py plan --model SPEC|--profile-run ID --samples N --epochs E --objective cost ...``"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from planner.app import service, solving
from planner.app.models import PlanStatus
from planner.app.serializers import PlanRequestSerializer
from planner.defaults import MARKET_DEFAULTS, PLAN_DEFAULTS
from srifty_web.commands import owner_for_command

if TYPE_CHECKING:
    from planner.app.models import PlanRecord


class Command(BaseCommand):
    help = "Plan a DDP training job over the catalog: cheapest by a deadline, fastest within a budget, ..."

    def add_arguments(self, parser: CommandParser) -> None:
        src = parser.add_mutually_exclusive_group(required=True)
        src.add_argument(
            "--model",
            help="torchvision:NAME, timm:NAME, transformers:MODEL_TYPE or package.module:factory (predicted analytically)",
        )
        src.add_argument("--profile-run", type=int, help="a finished compute profiling run")
        parser.add_argument("--input-shape", default="3,224,224")
        parser.add_argument("--precision", default="amp")
        parser.add_argument("--samples", type=int, help="samples per epoch")
        parser.add_argument("--epochs", type=float)
        parser.add_argument("--iterations", type=int)
        parser.add_argument("--objective", choices=["cost", "time", "throughput"], required=True)
        parser.add_argument("--deadline-hours", type=float)
        parser.add_argument("--budget", type=float, help="USD")
        parser.add_argument("--max-hourly", type=float, help="USD per hour")
        parser.add_argument("--regions", nargs="*")
        parser.add_argument(
            "--spot",
            action=argparse.BooleanOptionalAction,
            default=MARKET_DEFAULTS["spot"],
            help="allow spot instances (default: yes; --no-spot for on-demand only)",
        )
        parser.add_argument("--no-on-demand", action="store_true", default=not MARKET_DEFAULTS["on_demand"])
        parser.add_argument(
            "--max-nodes",
            type=int,
            default=None,
            help=f"default {PLAN_DEFAULTS['max_nodes']}; with --task, the file's num_nodes when it has one",
        )
        parser.add_argument("--max-types", type=int, default=PLAN_DEFAULTS["max_types"])
        batch_range = f"{PLAN_DEFAULTS['global_batch_min']}..{PLAN_DEFAULTS['global_batch_max']}"
        parser.add_argument(
            "--batch-min",
            type=int,
            default=None,
            help=f"smallest global batch (default range {batch_range}, narrowed from below for large --max-nodes)",
        )
        parser.add_argument("--batch-max", type=int, default=None, help="largest global batch")
        parser.add_argument(
            "--min-batch-per-gpu",
            type=int,
            default=None,
            help="no GPU below this per-GPU batch unless nothing else fits (default: the profile's knee, else 32)",
        )
        parser.add_argument(
            "--accumulation-steps",
            type=int,
            default=None,
            help="gradient accumulation: micro-steps per optimizer step; the global batch is one micro-step's (default 1)",
        )
        parser.add_argument(
            "--quota",
            action="append",
            default=[],
            metavar="CLASS=VCPUS",
            help="on-demand vCPU quota, e.g. P=96 (repeat)",
        )
        parser.add_argument("--spot-quota", action="append", default=[], metavar="CLASS=VCPUS")
        parser.add_argument("--baseline-gpu", default="", help="the GPU a SkyPilot-style user would request")
        parser.add_argument(
            "--task",
            metavar="FILE",
            help="a task file (Srifty's or SkyPilot's YAML): its resources become the plan's constraints "
            "(accelerators, cpus, memory, use_spot, region/zone, num_nodes, network_tier, instance_type)",
        )
        parser.add_argument("--user", default=None)
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--export-sky",
            metavar="DIR",
            help="also write option --export-option as SkyPilot task files into DIR (one per instance type)",
        )
        parser.add_argument("--export-option", type=int, default=1, metavar="K")

    def handle(self, *args: Any, **o: Any) -> None:
        data = {
            "model": (
                {"profile_run": o["profile_run"]}
                if o["profile_run"]
                else {"spec": o["model"], "input_shape": o["input_shape"], "precision": o["precision"]}
            ),
            "objective": o["objective"],
            "deadline_hours": o["deadline_hours"],
            "budget_usd": o["budget"],
            "max_hourly_usd": o["max_hourly"],
            "spot": o["spot"],
            "on_demand": not o["no_on_demand"],
            "max_types": o["max_types"],
            "quotas_on_demand": _quotas(o["quota"], "--quota"),
            "quotas_spot": _quotas(o["spot_quota"], "--spot-quota"),
            "baseline_gpu": o["baseline_gpu"],
        }
        for key, value in (
            ("samples_per_epoch", o["samples"]),
            ("epochs", o["epochs"]),
            ("iterations", o["iterations"]),
            ("regions", o["regions"]),
            ("global_batch_min", o["batch_min"]),
            ("global_batch_max", o["batch_max"]),
            ("min_batch_per_gpu", o["min_batch_per_gpu"]),
            ("accumulation_steps", o["accumulation_steps"]),
            ("max_nodes", o["max_nodes"]),
        ):
            if value is not None:
                data[key] = value
        if o["task"]:
            data.update(_task(o["task"]))
        # The operator runs this command, so it may plan the operator's own factory directly.
        checked = PlanRequestSerializer(data=data, context={"allow_code": True})
        if not checked.is_valid():
            raise CommandError(
                "; ".join(
                    f"{k}: {' '.join(map(str, v if isinstance(v, list) else [v]))}"
                    for k, v in checked.errors.items()
                )
            )
        # In the foreground, on the worker's path (planner.app.solving.run_plan); a bar on a terminal.
        bar = ProgressBar(self.stdout) if self.stdout.isatty() else None
        try:
            record = solving.create_plan(
                owner_for_command(o["user"]), dict(checked.validated_data), allow_code=True, echo=bar
            )
        except service.PlanInputError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if bar is not None:
                bar.clear()
        if record.status == PlanStatus.INFEASIBLE:
            raise CommandError(f"infeasible ({record.binding_constraint}): {record.error}")
        if record.status != PlanStatus.SOLVED:
            field = f"{record.error_field}: " if record.error_field else ""
            raise CommandError(f"plan {record.pk} {record.status}: {field}{record.error}")
        if o["export_sky"]:
            _export_sky(self, record, o["export_option"], o["export_sky"])
        if o["json"]:
            self.stdout.write(json.dumps({"plan": record.pk, **(record.result or {})}, indent=2, default=str))
            return
        self.stdout.write(render(record))


def _task(path: str) -> dict[str, str]:
    """The request fields of ``--task FILE``: its text and its name (a file without ``name:``
    is named after its stem)."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"--task {path}: {exc}") from None
    return {"task": text, "task_filename": Path(path).name}


class ProgressBar:
    """``echo(phase, evaluated, total)`` for ``solving.create_plan``: one line redrawn in place
    (at most 10 times a second), erased at the end."""

    WIDTH = 30

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self._last = 0.0
        self._len = 0

    def __call__(self, phase: str, evaluated: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        frac = evaluated / total if total else 0.0
        filled = int(round(frac * self.WIDTH))
        line = (
            f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * frac:3.0f}% {phase or 'starting'}: "
            f"{evaluated:,} of ~{total:,} configurations"
        )
        self.out.write("\r" + line.ljust(self._len), ending="")
        self.out.flush()
        self._len = len(line)

    def clear(self) -> None:
        if self._len:
            self.out.write("\r" + " " * self._len + "\r", ending="")
            self.out.flush()


def _export_sky(cmd: BaseCommand, record: PlanRecord, rank: int, folder: str) -> None:
    """Option ``rank`` as SkyPilot task files (``launcher.taskfile.to_skypilot``: one per type,
    a mixed plan's files say so at the top), for teams who launch with ``sky launch``."""
    from pathlib import Path

    from launcher.skyexport import plan_task
    from launcher.taskfile import to_skypilot  # the task-file format lives with the launcher

    option = record.option(rank)
    if option is None:
        raise CommandError(f"--export-option {rank}: plan {record.pk} has no option {rank}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = to_skypilot(option, plan_task(record.request))  # the plan's task file, when it has one
    for name, text in files:
        (out / name).write_text(text)
        cmd.stderr.write(f"wrote {out / name}")
    if len(files) > 1:
        cmd.stderr.write(f"note: option {rank} mixes {len(files)} instance types: one SkyPilot file per type")


def _quotas(items: list[str], flag: str) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise CommandError(f"{flag} {item!r}: use CLASS=VCPUS, e.g. P=96") from None
        if not sep or not key.strip():
            raise CommandError(f"{flag} {item!r}: use CLASS=VCPUS, e.g. P=96")
    return out


def render(record: PlanRecord) -> str:
    from planner.plan_result import PlanResult
    from planner.solver.explain import saves_or_costs, sooner_or_longer

    r = PlanResult.read(record.result)

    def num(value: float | None) -> float:
        return float("nan") if value is None else value  # a row without it says nan, not 0

    lines = [
        f"plan {record.pk}: {r.model.spec} ({r.model.source}), solved in {r.solve_time_s or 0:.2f} s "
        f"over {r.stats.get('candidates_in')} candidates ({r.stats.get('candidates_kept')} after pruning)"
    ]
    lines.append(
        f"{'#':>2} {'configuration':<48} {'$/h':>9} {'total $':>10} {'hours':>7} {'p90 h':>7} "
        f"{'samples/s':>10}  bottleneck / why"
    )
    for p in r.plans:
        o = p.option
        lines.append(
            f"{o.rank:>2} {p.label[:48]:<48} {num(o.hourly_usd):>9.2f} {num(p.total_usd):>10.2f} "
            f"{num(o.time_h):>7.2f} {num(o.time_p90_h):>7.2f} {num(o.throughput_sps):>10.0f}  "
            f"{p.bottleneck}; {p.why}"
        )
    best = r.best
    for b in r.baselines:
        if b.plan:
            versus = (
                f" — plan #1 {saves_or_costs(num(best.total_usd), num(b.plan.total_usd))}, "
                f"{sooner_or_longer(num(best.time_h), num(b.plan.time_h))}"
                if best
                else ""
            )
            lines.append(
                f"baseline {b.name}: {b.plan.label} ${num(b.plan.total_usd):.2f} {num(b.plan.time_h):.2f} h{versus}"
            )
        else:
            lines.append(f"baseline {b.name}: {b.infeasible_reason}")
    lines += [
        f"from the task file: {c['field']} {c['value']}"
        + (f" (line {c['line']})" if c.get("line") else "")
        + f": {c['means']}"
        for c in r.constraints_from_task or ()
    ]
    return "\n".join(lines)

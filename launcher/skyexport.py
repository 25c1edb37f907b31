"""A plan option as SkyPilot task files (``launcher.taskfile.to_skypilot``), as one download.

One instance type: the YAML file itself. A mixed-type option: a zip holding one file per type
(each with the note at its top) and ``README.txt`` saying why there are several.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from launcher import spot_policy, taskfile
from planner.option import PlanOption


def plan_task(request: dict[str, Any] | None) -> taskfile.TaskSpec | None:
    """The task file a plan was made from (its request's ``task`` text), read; None without one."""
    text = (request or {}).get("task")
    return taskfile.parse_task(text) if isinstance(text, str) and text.strip() else None


def checkpoint_interval_s(
    option: PlanOption | dict[str, Any],
    spec: taskfile.TaskSpec | None,
    checkpoint_write_s: float | None = None,
) -> float | None:
    """Seconds between checkpoints for ``checkpoint: {interval: auto}``: Young/Daly from the
    option's interruption rate (``spot_policy.option_interval_min``), as a Srifty launch sets
    ``SRIFTY_CHECKPOINT_INTERVAL_S``; None when the file sets its own or has no checkpoint."""
    if spec is None or spec.checkpoint is None or not spec.checkpoint.auto:
        return None
    minutes, _why = spot_policy.option_interval_min(PlanOption.read(option).groups, checkpoint_write_s, None)
    return minutes * 60.0


def download(
    option: PlanOption | dict[str, Any],
    plan_id: int,
    spec: taskfile.TaskSpec | None = None,
    checkpoint_write_s: float | None = None,
) -> tuple[str, bytes, str]:
    """(file name, content, content type) of option ``option`` of plan ``plan_id``, running
    ``spec``'s task when given (else a torchrun template)."""
    typed = PlanOption.read(option)
    interval = checkpoint_interval_s(typed, spec, checkpoint_write_s)
    files = taskfile.to_skypilot(typed, spec, checkpoint_interval_s=interval)
    if len(files) == 1:
        [(name, text)] = files
        return f"plan-{plan_id}-{name}", text.encode(), "application/yaml"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files:
            archive.writestr(name, text)
        archive.writestr(
            "README.txt",
            f"Plan {plan_id}, option {'?' if typed.rank is None else typed.rank} mixes {len(files)} instance types.\n"
            "SkyPilot launches one instance type per cluster, so each type has its own task file.\n"
            "Launch them as separate clusters only if your training code joins them (one torchrun\n"
            "rendezvous across clusters); otherwise launch this option with Srifty, which runs\n"
            "them as one cluster.\n",
        )
    return (
        f"plan-{plan_id}-option-{1 if typed.rank is None else typed.rank}.sky.zip",
        buf.getvalue(),
        "application/zip",
    )

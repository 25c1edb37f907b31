"""What a plan option launches and what it may cost, before anything starts.

A plan option (one row of a solved plan, ``PlanRecord.option``) becomes ``node_launches``: one
``run_instances`` per node group and batch size. ``limits`` turns the asked spend and hours into
the job's cap, ``preview`` is what the launch confirmation shows, and ``user_data`` is the script
each node boots with (``fleet.boot.task_user_data``: fetch the workdir, get the node's
environment from the server, run the task's setup and run). Nothing here touches the database or
AWS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings

from fleet.boot import task_user_data
from launcher import taskfile
from launcher.errors import JobError
from planner.option import NodeGroup, PlanOption
from srifty_web.money import money


@dataclass(frozen=True)
class NodeLaunch:
    """One ``run_instances`` call: ``count`` nodes of one type/market/zone with one batch size."""

    index: int  # launch order; rank 0 is the first node of launch 0
    group: int  # index into PlanOption.groups
    instance_type: str
    market: str
    zone: str | None
    count: int
    gpus_per_node: int
    batch_per_node: int
    price_per_hour: float

    @property
    def hourly_usd(self) -> float:
        return self.count * self.price_per_hour


@dataclass(frozen=True)
class Limits:
    hourly_usd: Decimal
    max_spend_usd: Decimal  # min(asked max spend, hourly x max hours)
    cap_hours: float  # min(max hours, max spend / hourly)


def node_launches(option: PlanOption | Mapping[str, Any]) -> list[NodeLaunch]:
    out: list[NodeLaunch] = []
    for g, group in enumerate(PlanOption.read(option).groups):
        count = group.count
        batches = list(group.batch_per_node) or [0] * count
        if len(batches) != count:
            raise JobError("rank", f"group {g} has {count} nodes but {len(batches)} batch sizes")
        runs: list[tuple[int, int]] = []  # (batch, nodes) in node order
        for b in batches:
            if runs and runs[-1][0] == b:
                runs[-1] = (b, runs[-1][1] + 1)
            else:
                runs.append((b, 1))
        market, price = _launchable(g, group) if runs else ("", 0.0)
        for batch, n in runs:
            out.append(
                NodeLaunch(
                    index=len(out),
                    group=g,
                    instance_type=group.instance_type,
                    market=market,
                    zone=group.zone,
                    count=n,
                    gpus_per_node=group.gpus_per_node,
                    batch_per_node=batch,
                    price_per_hour=price,
                )
            )
    return out


def _launchable(g: int, group: NodeGroup) -> tuple[str, float]:
    """The group's market and price: a launch needs both (a solved row has both)."""
    if group.market is None or group.price_per_hour is None:
        raise JobError("rank", f"group {g} has no market or price")
    return group.market, group.price_per_hour


def option_hourly(option: PlanOption | Mapping[str, Any]) -> float:
    typed = PlanOption.read(option)
    if typed.hourly_usd is not None and typed.hourly_usd > 0:
        return typed.hourly_usd
    return sum(g.count * (g.price_per_hour or 0.0) for g in typed.groups)


def limits(option: PlanOption | Mapping[str, Any], max_spend_usd: Decimal, max_hours: float) -> Limits:
    hourly = Decimal(str(round(option_hourly(option), 4)))
    if hourly <= 0:
        raise JobError("rank", "this option has no price")
    by_time = (hourly * Decimal(str(max_hours))).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    spend = min(max_spend_usd, by_time).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    if spend <= 0:
        raise JobError("max_spend_usd", "the cap allows less than one cent of compute")
    return Limits(hourly_usd=hourly, max_spend_usd=spend, cap_hours=min(max_hours, float(spend / hourly)))


def describe_option(option: PlanOption | Mapping[str, Any]) -> str:
    typed = PlanOption.read(option)
    parts = [
        f"{g.count}x {g.instance_type} ({g.market}{', ' + g.zone if g.zone else ''})" for g in typed.groups
    ]
    return " + ".join(parts) + f" in {typed.region}"


def preview(
    option: PlanOption | Mapping[str, Any], max_spend_usd: Decimal, max_hours: float
) -> dict[str, Any]:
    """Exactly what a launch starts and what it may cost."""
    typed = PlanOption.read(option)
    lim = limits(typed, max_spend_usd, max_hours)
    launches = node_launches(typed)
    return {
        "region": typed.region,
        "instances": [
            {
                "instance_type": n.instance_type,
                "count": n.count,
                "market": n.market,
                "zone": n.zone,
                "gpus_per_node": n.gpus_per_node,
                "gpu_model": typed.groups[n.group].gpu_model,
                "batch_per_node": n.batch_per_node,
                # decimal strings, as the schema says (LaunchInstanceSerializer, srifty_web.money);
                # count x the price's exact decimal, not a float product
                "price_per_hour": money(n.price_per_hour, 4),
                "hourly_usd": money(n.count * Decimal(str(n.price_per_hour)), 4),
            }
            for n in launches
        ],
        "nodes": sum(n.count for n in launches),
        "gpus": sum(n.count * n.gpus_per_node for n in launches),
        "hourly_usd": format(lim.hourly_usd.normalize(), "f"),
        "max_spend_usd": str(lim.max_spend_usd),
        "cap_hours": round(lim.cap_hours, 4),
        "predicted_iter_s": typed.iter_time_s,
        "predicted_iter_p90_s": typed.iter_time_p90_s,
        "predicted_time_h": typed.time_h,
        "global_batch": typed.global_batch,
        "placement_group": "cluster",
        "label": describe_option(typed),
    }


def agent_url(job_id: int) -> str:
    return f"{settings.SITE_URL.rstrip('/')}/api/v1/jobs/{job_id}/agent.tar.gz"


def workdir_url(job_id: int) -> str:
    """Where the nodes download the job's uploaded workdir (with the job token)."""
    return f"{settings.SITE_URL.rstrip('/')}/api/v1/jobs/{job_id}/workdir.tar.gz"


def task_spec(task: str, train_command: str) -> taskfile.TaskSpec:
    """What the nodes run: the job's task file, or its training command under torchrun."""
    if task:
        return taskfile.parse_task(task)
    return taskfile.from_command(train_command)


def user_data(
    job_id: int, spec: taskfile.TaskSpec, token: str, max_minutes: int, *, archive_url: str | None = None
) -> str:
    """The node script (``fleet.boot.task_user_data``), the same on every node: fetch the
    workdir, ask the server for the node's environment (``taskfile.node_env``), run ``setup``
    once and ``run``. ``archive_url``: where the uploaded local workdir is (Srifty or S3)."""
    git = spec.workdir if spec.workdir is not None and spec.workdir.kind == "git" else None
    return task_user_data(
        server_url=settings.SITE_URL,
        job_id=job_id,
        token=token,
        setup=spec.setup,
        run=spec.run,
        max_minutes=max(1, max_minutes),
        workdir_url=archive_url,
        git_url=git.url if git else None,
        git_ref=git.ref if git else "HEAD",
        agent_url=agent_url(job_id),
    )


def check_user_data(spec: taskfile.TaskSpec, field: str = "train_command") -> None:
    """Build the node script once with a placeholder token: a task that cannot become a script
    (too long for EC2's 16 KiB, say) is refused before anything launches."""
    try:
        user_data(0, spec, "x" * 64, 60, archive_url=workdir_url(0))
    except ValueError as exc:
        raise JobError(field, str(exc)) from exc

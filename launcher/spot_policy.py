"""Checkpoint interval, spot-or-on-demand decisions and what an interruption cost (pure).

Checkpoint interval (Young/Daly)
--------------------------------
With a checkpoint that costs ``w`` hours to write and a cluster that fails on average every
``M`` hours, the first-order optimal interval between checkpoints is Young's
``tau = sqrt(2 w M)`` (Daly's refinement adds ``- w`` and matters only when ``w`` is a sizeable
share of ``M``; we use it: ``tau = sqrt(2 w M) - w`` for ``w < M / 2``, else ``M``). A
synchronous DDP cluster stops when any node is lost, so with ``n_i`` spot nodes of Spot Advisor
bucket ``b_i`` (:func:`planner.spot.job_hazard`)::

    M = 1 / sum_i n_i * lambda(b_i)                                        [h]

The interval is clamped to ``[MIN_INTERVAL_MIN, MAX_INTERVAL_MIN]``; an all on-demand cluster
(``M`` infinite) checkpoints every ``MAX_INTERVAL_MIN`` minutes, against node failures.

Deadline guard (uniform progress, "Can't Be Late", NSDI'24)
-----------------------------------------------------------
A job needs ``C`` hours of work (at the plan's speed) by the deadline ``D`` (hours after start);
a change of capacity (a replacement node, a move to or from on-demand) costs ``d`` hours of
restart. At time ``t`` with ``p`` hours of work done, uniform progress expects ``C * t / D``::

    must      : D - t - (C - p) <= d + (d if not on on-demand now else 0)
                -> on-demand now, and stay: any further restart would miss the deadline
    behind    : p < C * t / D                     -> on-demand (and back when ahead again)
    ahead     : p >= C * t / D + d * C / D        -> spot
                (the margin ``d * C / D`` is the work a switch costs, so that the job does not
                 flip between markets at the line)

Spot capacity is not the policy's question: a replacement that finds none is launched
on-demand (``launcher.interruptions._replace``).

Between "behind" and "ahead" the job stays where it is. A job whose spot node was just
interrupted (``current == "none"``) takes spot again only when it is ahead.

Interruption cost
-----------------
An interruption at time ``t_i`` loses the work since the last checkpoint ``t_c`` plus the restart
``d``; in money, those hours times the cluster's hourly rate (the replacement bills from its
start)::

    lost_h = (t_i - t_c) + d,       lost_usd = lost_h * rate

No Django import: the monitor, the launch code and the tests share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.option import NodeGroup
from planner.spot import job_hazard

MIN_INTERVAL_MIN = 5.0
MAX_INTERVAL_MIN = 60.0
SPOT, ON_DEMAND, NONE = "spot", "on_demand", "none"


def cluster_mtbf_h(groups: Iterable[tuple[int, int, bool]]) -> float:
    """Mean hours between interruptions of a cluster of ``(count, bucket, is_spot)`` groups."""
    hazard = job_hazard(groups)
    return math.inf if hazard <= 0 else 1.0 / hazard


def checkpoint_interval_min(checkpoint_cost_min: float, mtbf_h: float) -> float:
    """Young/Daly checkpoint interval in minutes (see the module docstring)."""
    if checkpoint_cost_min < 0:
        raise ValueError("checkpoint_cost_min must be >= 0")
    if math.isinf(mtbf_h):
        return MAX_INTERVAL_MIN
    m = mtbf_h * 60.0
    w = checkpoint_cost_min
    tau = math.sqrt(2.0 * w * m) - w if w < m / 2 else m
    return min(MAX_INTERVAL_MIN, max(MIN_INTERVAL_MIN, tau))


DEFAULT_CHECKPOINT_COST_MIN = 1.0  # writing a checkpoint, when the plan does not say (assumption)


def option_interval_min(
    groups: Iterable[NodeGroup | Mapping[str, Any]],
    checkpoint_write_s: float | None = None,
    task_interval_min: float | None = None,
) -> tuple[float, str]:
    """Minutes between checkpoints for a plan option's node ``groups`` and why: the task file's
    interval when it gives one, else ``auto``: Young/Daly from the cluster's interruption rate
    with the plan's checkpoint write time (``DEFAULT_CHECKPOINT_COST_MIN`` when it has none)."""
    if task_interval_min is not None:
        return float(task_interval_min), "the task file's checkpoint.interval"
    cost = checkpoint_write_s / 60.0 if checkpoint_write_s and checkpoint_write_s > 0 else None
    w = cost if cost is not None else DEFAULT_CHECKPOINT_COST_MIN
    typed = [NodeGroup.read(g) for g in groups]
    mtbf = cluster_mtbf_h((g.count, g.interruption_bucket, g.is_spot) for g in typed)
    minutes = checkpoint_interval_min(w, mtbf)
    if math.isinf(mtbf):
        return minutes, "auto: no spot nodes, so the longest interval (against node failures)"
    return minutes, (
        f"auto (Young/Daly): sqrt(2 x {w:g} min checkpoint{'' if cost is not None else ', assumed'} "
        f"x {mtbf:,.0f} h between interruptions)"
    )


@dataclass(frozen=True)
class Progress:
    """Where a job stands (hours since it started; work in hours at the plan's speed)."""

    now_h: float
    deadline_h: float
    work_total_h: float
    work_done_h: float
    restart_h: float
    current: str  # SPOT, ON_DEMAND or NONE (just interrupted)


@dataclass(frozen=True)
class Decision:
    market: str  # SPOT or ON_DEMAND
    reason: str  # "must", "behind", "ahead", "stay"
    why: str  # one sentence for the job page


def decide(p: Progress) -> Decision:
    """Spot or on-demand for the next stretch (uniform progress with a deadline safety net)."""
    remaining = max(0.0, p.work_total_h - p.work_done_h)
    time_left = p.deadline_h - p.now_h
    switch = 0.0 if p.current == ON_DEMAND else p.restart_h
    expected = (
        p.work_total_h * min(1.0, max(0.0, p.now_h / p.deadline_h)) if p.deadline_h > 0 else p.work_total_h
    )
    margin = p.restart_h * p.work_total_h / p.deadline_h if p.deadline_h > 0 else 0.0
    done, total = p.work_done_h, p.work_total_h
    if time_left - remaining <= p.restart_h + switch:
        return Decision(
            ON_DEMAND,
            "must",
            f"{remaining:.2f} h of work left and {time_left:.2f} h to the deadline: another restart "
            f"({p.restart_h:.2f} h) would miss it, so the job runs on on-demand capacity to the end",
        )
    if done < expected:
        return Decision(
            ON_DEMAND,
            "behind",
            f"{done:.2f} h of {total:.2f} h done at {p.now_h:.2f} h; uniform progress to the "
            f"{p.deadline_h:.2f} h deadline needs {expected:.2f} h, so the job runs on on-demand",
        )
    if done >= expected + margin:
        if p.current != SPOT:
            return Decision(
                SPOT,
                "ahead",
                f"{done:.2f} h done, {done - expected:.2f} h ahead of uniform progress "
                f"(more than a restart's {margin:.2f} h): spot capacity again",
            )
        return Decision(SPOT, "stay", "on spot and ahead of uniform progress")
    if p.current == SPOT:
        return Decision(SPOT, "stay", "on spot and on track")
    if p.current == NONE:
        return Decision(
            ON_DEMAND,
            "behind",
            f"interrupted with {done:.2f} h done, not ahead of uniform progress ({expected:.2f} h) "
            f"by a restart's margin: the replacement is on-demand",
        )
    return Decision(ON_DEMAND, "stay", "on on-demand until the job is ahead of uniform progress")


@dataclass(frozen=True)
class InterruptionCost:
    lost_h: float
    lost_usd: float


def interruption_cost(
    interrupted_at_h: float, last_checkpoint_at_h: float, restart_h: float, hourly_usd: float
) -> InterruptionCost:
    """Work and money one interruption cost (see the module docstring)."""
    if last_checkpoint_at_h > interrupted_at_h:
        raise ValueError("the last checkpoint cannot be after the interruption")
    lost = (interrupted_at_h - last_checkpoint_at_h) + restart_h
    return InterruptionCost(lost, lost * hourly_usd)

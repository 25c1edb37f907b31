"""Words for pages: the plan form's field names in errors, and the plans list's "Best" cell.

The API's validation messages name API fields (``samples_per_epoch``, ``global_batch_max``),
which is right for API clients and wrong on a form whose labels say "Samples / epoch": the form
rewrites each API field name in a message into the label its input has on the page.
"""

from __future__ import annotations

import re

from planner.plan_result import PlanResult

# API field -> how the plan form (frontend/templates/frontend/plans.html) labels it, in words.
FIELD_LABELS = {
    "samples_per_epoch": "samples per epoch",
    "epochs": "epochs",
    "iterations": "iterations",
    "deadline_hours": "deadline (hours)",
    "budget_usd": "budget ($)",
    "max_hourly_usd": "max $/hour",
    "max_nodes": "max nodes",
    "max_types": "types mixed",
    "global_batch_min": "global batch min",
    "global_batch_max": "global batch max",
    "min_batch_per_gpu": "min batch per GPU",
    "checkpoint_interval_h": "checkpoint interval (hours)",
    "restart_overhead_h": "restart cost (hours)",
    "baseline_gpu": "compare-with GPU",
    "quotas_on_demand": "on-demand quota",
    "quotas_spot": "spot quota",
    "gpu_models": "GPU models",
    "input_shape": "input shape",
    "spec": "model spec",
    "precision": "precision",
    "objective": "objective",
    "regions": "regions",
    "spot": "spot",
    "on_demand": "on-demand",
    "profile_run": "profiling run",
    "max_miss_risk": "max risk of missing the deadline",
    "top_k": "plans shown",
    "task": "task file",
    "task_filename": "task file name",
    "accumulation_steps": "gradient accumulation steps",
}
OBJECTIVE_WORDS = {
    "cost": "cheapest by a deadline",
    "time": "fastest within a budget",
    "throughput": "most throughput within $/hour",
}
# Longest names first, so "global_batch_max" is not read as "global_batch" + "_max"; only whole
# identifiers (no letter, digit or _ on either side) are replaced.
_NAMES = re.compile(
    r"(?<![A-Za-z0-9_])("
    + "|".join(sorted(map(re.escape, FIELD_LABELS), key=len, reverse=True))
    + r")(?![A-Za-z0-9_])"
)
_OBJECTIVE = re.compile(r"objective '(cost|time|throughput)'")


def humanize(message: str) -> str:
    """``"must not exceed global_batch_max"`` -> ``"must not exceed global batch max"``."""
    text = _NAMES.sub(lambda m: FIELD_LABELS[m.group(1)], message)
    return _OBJECTIVE.sub(lambda m: f"objective “{OBJECTIVE_WORDS[m.group(1)]}”", text)


def humanize_errors(errors: dict[str, str]) -> dict[str, str]:
    """The form's ``{field: message}`` with API names in the messages replaced (keys kept: they
    place each message next to its input)."""
    return {field: humanize(message) for field, message in errors.items()}


def best_words(status: str, result: PlanResult | dict | None, binding_constraint: str = "") -> str:
    """The plans list's "Best" cell: the top plan and its cost, or why there is none.

    ``"2x p4d.24xlarge (spot) in us-east-1"`` is the label; an infeasible plan says which
    constraint bound it in form words ("no plan fits the deadline (hours)").
    """
    best = PlanResult.read(result).best
    if best is not None:
        return best.label
    if status == "infeasible":
        bound = FIELD_LABELS.get(binding_constraint, binding_constraint.replace("_", " "))
        return f"no plan fits the {bound}" if bound else "no plan fits"
    if status in ("queued", "running"):
        return "solving…"
    return "—" if status == "solved" else f"no plan ({status})"

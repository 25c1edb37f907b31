"""Golden plans: a fixed set of requests solved with the product's oracle on the bundled catalog.

Recorded before the solver and the job code were moved (issue 20, item 8), so that a refactor
can show that it changed no plan.  ``test_golden_plans.py`` re-solves every request and compares
the result option by option with ``golden_plans.json``.

Re-record (only when a change of plans is intended, and say why in the commit)::

    .venv/bin/python -m tests.planner.golden_plans
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden_plans.json")
IMAGENET = 1_281_167
REGIONS = ("us-east-1", "us-west-2", "eu-west-1")

# name -> (model spec, PlanRequest fields).  Objectives, spot on/off, mixes, quotas, risk caps.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "resnet50-cost-24h": ("torchvision:resnet50", {"objective": "cost", "deadline_hours": 24.0}),
    "resnet50-cost-3h-on-demand": (
        "torchvision:resnet50",
        {"objective": "cost", "deadline_hours": 3.0, "_markets": ("on_demand",)},
    ),
    "resnet50-cost-8h-risk": (
        "torchvision:resnet50",
        {"objective": "cost", "deadline_hours": 8.0, "max_miss_risk": 0.05},
    ),
    "vgg19-time-500usd": ("torchvision:vgg19", {"objective": "time", "budget_usd": 500.0}),
    "vgg19-throughput-60usd-h": ("torchvision:vgg19", {"objective": "throughput", "max_hourly_usd": 60.0}),
    "resnet50-cost-6h-quotas": (
        "torchvision:resnet50",
        {
            "objective": "cost",
            "deadline_hours": 6.0,
            "quotas_on_demand": {"P": 192, "G": 384},
            "quotas_spot": {"P": 96, "G": 192},
        },
    ),
    "resnet50-cost-2h-mix2": (
        "torchvision:resnet50",
        {"objective": "cost", "deadline_hours": 2.0, "max_types": 2, "max_nodes": 8},
    ),
    "vgg19-time-800usd-mix2-batches": (
        "torchvision:vgg19",
        {
            "objective": "time",
            "budget_usd": 800.0,
            "max_types": 2,
            "max_nodes": 8,
            "global_batch_min": 256,
            "global_batch_max": 1024,
        },
    ),
}


@cache
def catalog(markets: tuple[str, ...] = ("on_demand", "spot")) -> tuple:
    # The solver bench's loader and oracle: the golden plans are solved the way the bench solves.
    from bench.solver import load_catalog

    return tuple(
        load_catalog(regions=REGIONS, allow_spot="spot" in markets, allow_on_demand="on_demand" in markets)
    )


def solve_with_and_without(monkeypatch: Any, request: Any, oracle: Any, attr: str, regions=("us-east-1",)):
    """``(plan, plan without the oracle's attr)`` of ``request`` on the catalog's offers in
    ``regions``, ``oracle()`` building a fresh oracle each time, after asserting they have the
    same optimum (a bound may only prune); the caller checks that it pruned."""
    from planner.oracle import Oracle
    from planner.solver import solve

    cands = [c for c in catalog() if c.region in regions]
    with_it = solve(request, cands, oracle())
    with monkeypatch.context() as m:
        m.delattr(Oracle, attr)
        without = solve(request, cands, oracle())
    assert with_it.best.label == without.best.label
    assert with_it.best.effective_throughput_sps == without.best.effective_throughput_sps
    assert with_it.best.time_h == without.best.time_h
    return with_it, without


#: The global batch the plans were recorded at when their request named none: the default was
#: 256..256 then (it is a range now, planner.defaults), so these requests name it to stay the
#: requests that were recorded.
RECORDED_BATCH = {"global_batch_min": 256, "global_batch_max": 256}


def solve_named(name: str) -> list[dict[str, Any]]:
    """Solve one golden request; the ranked options as plain JSON (or the infeasibility)."""
    from bench.solver import ModelSpec, product_oracle
    from planner.solver import Infeasible, PlanRequest, solve

    spec, fields = REQUESTS[name]
    fields = {**RECORDED_BATCH, **fields}
    markets = tuple(fields.pop("_markets", ("on_demand", "spot")))
    oracle = product_oracle(ModelSpec(spec, spec))  # amp, 3x224x224
    request = PlanRequest(total_samples=90 * IMAGENET, **fields)
    try:
        result = solve(request, list(catalog(markets)), oracle)
    except Infeasible as exc:
        return [{"infeasible": exc.constraint}]
    return [
        {
            "rank": p.rank,
            "region": p.region,
            "groups": [
                [g.instance_type, g.market, g.zone, g.count, list(g.batch_per_node)] for g in p.groups
            ],
            "global_batch": p.global_batch,
            "hourly_usd": p.hourly_usd,
            "total_usd": p.total_usd,
            "time_h": p.time_h,
            "time_p90_h": p.time_p90_h,
        }
        for p in result.plans
    ]


def record() -> None:
    golden = {name: solve_named(name) for name in REQUESTS}
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    record()

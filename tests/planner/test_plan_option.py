"""A plan option read back from its stored JSON (``planner.option``) is the option the solver chose.

The plan service stores each solver ``Plan`` as ``dataclasses.asdict(plan)`` plus its own fields
(``planner.app.service._plan_row``); the launcher, the pages and the monitor read that JSON only
through ``PlanOption.from_json``. Two golden requests (a mix of two types with per-node batches,
and on-demand rows without a zone) are solved again and every option is read back.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

import pytest

from planner.option import NodeGroup, PlanOption
from tests.planner.golden_plans import GOLDEN, IMAGENET, RECORDED_BATCH, REQUESTS, catalog

GOLDEN_PLANS = json.loads(GOLDEN.read_text())
READ_BACK = ("vgg19-time-800usd-mix2-batches", "resnet50-cost-3h-on-demand")


@cache
def solved(name: str) -> tuple[Any, ...]:
    """The solver's ``Plan`` rows of golden request ``name`` (as ``golden_plans.solve_named``)."""
    from bench.solver import ModelSpec, product_oracle
    from planner.solver import PlanRequest, solve

    spec, fields = REQUESTS[name]
    fields = {**RECORDED_BATCH, **fields}
    markets = tuple(fields.pop("_markets", ("on_demand", "spot")))
    request = PlanRequest(total_samples=90 * IMAGENET, **fields)
    return solve(request, list(catalog(markets)), product_oracle(ModelSpec(spec, spec))).plans


def stored(plan: Any) -> dict[str, Any]:
    """The row as the plan service stores it and a job keeps it: ``asdict``, through JSON."""
    return json.loads(json.dumps(dataclasses.asdict(plan)))


def same_fields(cls: type, source: Any) -> dict[str, Any]:
    """``cls``'s fields taken by name from the solver's object: a field the solver renamed fails."""
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(cls)}


def expected(plan: Any) -> PlanOption:
    groups = tuple(NodeGroup(**same_fields(NodeGroup, g)) for g in plan.groups)
    return PlanOption(**{**same_fields(PlanOption, plan), "groups": groups})


@pytest.mark.parametrize("name", READ_BACK)
def test_it_reads_every_solved_option_back_as_the_solver_made_it(name):
    plans = solved(name)
    assert [p.rank for p in plans] == [row["rank"] for row in GOLDEN_PLANS[name]]
    for plan in plans:
        assert PlanOption.from_json(stored(plan)) == expected(plan)


@pytest.mark.parametrize("name", READ_BACK)
def test_it_reads_the_recorded_groups_of_every_golden_option(name):
    for plan, row in zip(solved(name), GOLDEN_PLANS[name], strict=True):
        option = PlanOption.from_json(stored(plan))
        groups = [[g.instance_type, g.market, g.zone, g.count, list(g.batch_per_node)] for g in option.groups]
        assert (option.rank, option.region, groups, option.global_batch) == (
            row["rank"],
            row["region"],
            row["groups"],
            row["global_batch"],
        )
        assert option.nodes == plan.nodes and option.gpus == plan.gpus
        assert option.time_h == pytest.approx(row["time_h"], rel=1e-6)


def test_it_reads_a_row_without_the_later_group_fields_as_the_consumers_did():
    option = PlanOption.from_json({"groups": [{"instance_type": "p3.2xlarge", "count": 2}]})
    [group] = option.groups
    assert group == NodeGroup(instance_type="p3.2xlarge", count=2)
    assert (group.market, group.price_per_hour, group.gpus_per_node, group.gpu_model) == (None, None, 1, "")
    assert not group.is_spot and group.batch_per_node == () and group.interruption_bucket == 0
    assert (option.region, option.rank, option.global_batch, option.iter_time_s) == ("", None, None, None)


def test_it_reads_the_apis_decimal_strings_as_numbers():
    doc = {
        "region": "us-east-1",
        "hourly_usd": "1.0000",
        "groups": [{"instance_type": "c5.xlarge", "count": 2, "price_per_hour": "0.5000"}],
    }
    option = PlanOption.from_json(doc)
    assert option.hourly_usd == 1.0 and option.groups[0].price_per_hour == 0.5
    assert option.price_of("c5.xlarge") == 0.5 and option.price_of("p3.2xlarge") == 0.0


def test_it_refuses_a_group_without_an_instance_type():
    with pytest.raises(KeyError, match="instance_type"):
        PlanOption.from_json({"groups": [{"count": 1}]})


def test_read_keeps_a_typed_option_and_reads_a_stored_one():
    option = PlanOption(region="us-east-1", groups=(NodeGroup("g5.xlarge", 1, "spot"),))
    assert PlanOption.read(option) is option
    assert (
        PlanOption.read(
            {"region": "us-east-1", "groups": [{"instance_type": "g5.xlarge", "count": 1, "market": "spot"}]}
        )
        == option
    )
    assert option.instance_types == ("g5.xlarge",) and option.groups[0].is_spot

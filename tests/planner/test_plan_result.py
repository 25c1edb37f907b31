"""A stored plan result read typed (``planner.plan_result``): older rows read with defaults, and
what is read is what is written back."""

from __future__ import annotations

from planner.option import PlanOption
from planner.plan_result import BAND_KEYS, BatchInfo, ModelInfo, PlanResult, PlanRow

#: A result as the first versions stored it: no batch, warnings, assumptions, mix reasons,
#: bands, prediction sources or accumulation steps.
OLDER = {
    "plans": [
        {
            "rank": 1,
            "region": "us-east-1",
            "label": "2x g5.xlarge (spot) in us-east-1",
            "groups": [{"instance_type": "g5.xlarge", "count": 2, "market": "spot", "gpus_per_node": 1}],
            "global_batch": 256,
            "hourly_usd": 1.0,
            "total_usd": 12,
            "time_h": 12.0,
            "uses_spot": True,
        }
    ],
    "baselines": [{"name": "largest", "plan": None, "infeasible_reason": "no candidate"}],
    "points": [],
    "pareto": [],
    "stats": {"candidates_in": 3},
    "solve_time_s": 0.5,
    "model": {
        "spec": "torchvision:resnet50",
        "input_shape": [3, 224, 224],
        "precision": "fp32",
        "source": "analytical",
    },
}


def test_an_older_result_reads_with_the_defaults_its_readers_used():
    r = PlanResult.from_json(OLDER)
    assert r.best is not None and r.best.label == OLDER["plans"][0]["label"] and r.best.uses_spot
    assert r.best.option == PlanOption.from_json(OLDER["plans"][0]) and r.best.option.nodes == 2
    assert r.best.total_usd == 12 and isinstance(r.best.total_usd, int)  # stored numbers as they are
    assert r.best.prediction_source is None and r.best.band == dict.fromkeys(BAND_KEYS)
    assert r.batch is None and r.warnings == () and r.assumptions is None and r.mix_reasons == {}
    assert r.model == ModelInfo(spec="torchvision:resnet50", input_shape=(3, 224, 224), precision="fp32")
    assert r.model.accumulation_steps == 1 and r.total_samples is None and r.points_seen == 0
    assert r.constraints_from_task is None and "constraints_from_task" not in r.to_json()
    (b,) = r.baselines
    assert b.plan is None and b.infeasible_reason == "no candidate"


def test_an_unsolved_plan_reads_as_an_empty_result():
    empty = PlanResult.read(None)
    assert (
        empty.best is None
        and empty.plans == ()
        and empty.baselines == ()
        and empty.model.source == "analytical"
    )


def test_a_plan_row_writes_back_the_row_it_read():
    row = PlanRow.from_json(OLDER["plans"][0])
    assert row.to_json() == OLDER["plans"][0] and row.to_json() is not OLDER["plans"][0]


def test_the_apis_decimal_strings_read_as_numbers():
    api = {"plans": [{**OLDER["plans"][0], "total_usd": "12.5000", "cost_p90_usd": "14.0000"}]}
    best = PlanResult.from_json(api).best
    assert best is not None and best.total_usd == 12.5 and best.band["cost_p90_usd"] == 14.0


def test_a_result_written_then_read_is_the_same_result():
    r = PlanResult.from_json(
        {
            **OLDER,
            "batch": BatchInfo(256, 1024, 32, "default", (2,), "scale the learning rate").to_json(),
            "warnings": [{"code": "precision_mismatch", "message": "asked amp, the profile ran fp32"}],
            "mix_reasons": {"1": "a alone: ...; the mix ..."},
            "alternatives": {"spot": {"plan": OLDER["plans"][0], "reason": None}},
            "constraints_from_task": [{"field": "num_nodes", "value": "2", "line": 3, "means": "..."}],
        }
    )
    assert PlanResult.from_json(r.to_json()) == r
    assert r.mix_reason(r.plans[0]) == "a alone: ...; the mix ..."
    assert r.alternatives["spot"].plan == r.best and r.to_json()["batch"]["below_min_ranks"] == [2]

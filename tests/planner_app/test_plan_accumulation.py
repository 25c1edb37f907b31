"""Gradient accumulation in a plan request (``accumulation_steps``): the request's k reaches the
oracle's workload through the one planning path, so the all-reduce and the optimizer step run once
per k micro-steps (issue 34: NVIDIA's BERT pre-training rows accumulate 2-128 micro-batches)."""

from __future__ import annotations

import pytest

from planner.app import service
from planner.app.serializers import PlanRequestSerializer

pytestmark = pytest.mark.django_db

REQUEST = {
    "model": {"spec": "torchvision:resnet50", "input_shape": "3,224,224", "precision": "amp"},
    "samples_per_epoch": 1_281_167,
    "epochs": 1,
    "objective": "time",
    "budget_usd": 1000,
    "regions": ["us-east-1"],
    "gpu_models": ["T4"],
    "max_nodes": 4,
    "global_batch_min": 512,
    "global_batch_max": 512,
}


def _checked(**fields) -> PlanRequestSerializer:
    return PlanRequestSerializer(data={**REQUEST, **fields})


def _fastest(result: dict, nodes: int) -> dict:
    rows = [p for p in result["plans"] if sum(g["count"] for g in p["groups"]) == nodes]
    assert rows, [p["label"] for p in result["plans"]]
    return min(rows, key=lambda p: p["time_h"])


def test_it_defaults_to_one_micro_step_and_refuses_zero_or_too_many(catalog):
    ok = _checked()
    assert ok.is_valid(), ok.errors
    assert ok.validated_data["accumulation_steps"] == 1
    for bad in (0, -2, 1025, "many"):
        checked = _checked(accumulation_steps=bad)
        assert not checked.is_valid()
        assert set(checked.errors) == {"accumulation_steps"}, checked.errors


def test_accumulating_makes_a_multi_node_tcp_cluster_faster(catalog, user):
    plain, accumulated = (_checked(accumulation_steps=k) for k in (1, 16))
    assert plain.is_valid() and accumulated.is_valid()
    once = service.solve_request(dict(plain.validated_data), user).to_json()
    every16 = service.solve_request(dict(accumulated.validated_data), user).to_json()
    # the same multi-node T4 cluster: 15 of 16 micro-steps skip the all-reduce over TCP
    many_plain, many_acc = _fastest(once, 4), _fastest(every16, 4)
    assert many_acc["time_h"] < many_plain["time_h"], (many_plain["label"], many_acc["label"])
    assert every16["model"]["accumulation_steps"] == 16 and once["model"]["accumulation_steps"] == 1

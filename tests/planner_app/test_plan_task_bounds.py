"""A plan's task file sent by anyone: its numbers are bounded before they reach the search, and a
file without ``run`` is enough to plan from (issue 37 review)."""

import pytest

from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}


def _request(**over):
    body = {
        "model": TINY,
        "samples_per_epoch": 1_281_167,
        "epochs": 10,
        "objective": "cost",
        "deadline_hours": 24,
        "regions": ["us-east-1", "us-west-2"],
        "global_batch_min": 256,
        "global_batch_max": 1024,
    }
    body.update(over)
    return body


def test_a_num_nodes_above_what_a_plan_may_search_is_a_400_naming_task_and_num_nodes(catalog, user_api):
    task = "num_nodes: 1000000000\nresources:\n  accelerators: A10G:1\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 400
    [message] = resp.json()["task"]
    assert "num_nodes" in message and "512" in message
    assert not PlanRecord.objects.exists()


@pytest.mark.parametrize("key", ["cpus", "memory"])
def test_an_infinite_cpus_or_memory_is_a_400_naming_it(catalog, user_api, key):
    task = f"resources:\n  accelerators: A10G:1\n  {key}: .inf\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 400
    [message] = resp.json()["task"]
    assert f"resources.{key}" in message and message.startswith("line 3")


def test_a_file_without_run_plans_from_its_resources(catalog, user_api, run_queued_plans):
    task = "resources:\n  accelerators: A10G:1\n  use_spot: false\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 202, resp.json()
    assert run_queued_plans() == [resp.json()["id"]]
    plan = user_api.get(resp["Location"]).json()
    assert plan["status"] == "solved", plan["error"]
    groups = [g for p in plan["result"]["plans"] for g in p["groups"]]
    assert groups and {(g["gpu_model"], g["market"]) for g in groups} == {("A10G", "on-demand")}

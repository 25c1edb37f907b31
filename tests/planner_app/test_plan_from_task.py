"""Plans from a task file (issue 37 item 2): its resources are the plan's constraints."""

import pytest
from django.core.management import call_command

from planner.app import service
from planner.app import task_constraints as tc
from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}

SKY_TASK = """\
resources:
  accelerators: {A100: 8, H100: 8}
  cpus: 32+
  use_spot: true
run: python train.py
"""


def _request(**over):
    body = {
        "model": TINY,
        "samples_per_epoch": 1_281_167,
        "epochs": 10,
        "objective": "cost",
        "deadline_hours": 24,
        "max_nodes": 4,
        "regions": ["us-east-1", "us-west-2"],
        "global_batch_min": 256,
        "global_batch_max": 1024,
    }
    body.update(over)
    return body


@pytest.fixture
def solve(user_api, run_queued_plans):
    def post_and_solve(body: dict) -> dict:
        resp = user_api.post("/api/v1/plans/", body, format="json")
        assert resp.status_code == 202, resp.json()
        assert run_queued_plans() == [resp.json()["id"]]
        plan = user_api.get(resp["Location"]).json()
        assert plan["status"] == "solved", plan["error"]
        return plan

    return post_and_solve


def _types():
    """Instance type name -> (GPU, GPUs per node, vCPUs, memory GiB, EFA) of the catalog."""
    from catalog.models import InstanceType

    return {
        t.name: (
            t.accelerator.name if t.accelerator else "",
            int(t.gpu_count),
            t.vcpus,
            t.memory_gib,
            t.efa_supported,
        )
        for t in InstanceType.objects.select_related("accelerator")
    }


def _groups(plan: dict):
    return [(p, g) for p in plan["result"]["plans"] for g in p["groups"]]


def test_it_ranks_only_a100_or_h100_at_8_per_node_with_32_vcpus_on_spot(catalog, solve):
    plan = solve(_request(task=SKY_TASK))
    types = _types()
    ranked = _groups(plan)
    assert ranked
    for p, g in ranked:
        gpu, count, vcpus, _memory, _efa = types[g["instance_type"]]
        assert gpu in ("A100", "H100") and count == 8 and g["gpus_per_node"] == 8
        assert vcpus >= 32
        assert g["market"] == "spot" and p["uses_spot"]
    said = {c["field"]: c for c in plan["constraints_from_task"]}
    assert said["accelerators"]["value"] == "A100:8 or H100:8" and said["accelerators"]["line"] == 2
    assert said["cpus"]["value"] == "32+" and said["cpus"]["line"] == 3
    assert said["use_spot"]["value"] == "true" and said["use_spot"]["line"] == 4
    assert plan["result"]["constraints_from_task"] == plan["constraints_from_task"]
    assert plan["request"]["spot"] is True and plan["request"]["on_demand"] is False


def test_a_plan_without_a_task_file_says_no_constraints_came_from_one(catalog, solve):
    plan = solve(_request())
    assert plan["constraints_from_task"] == [] and "constraints_from_task" not in plan["result"]


def test_a_fixed_num_nodes_ranks_only_clusters_of_that_many_nodes_of_one_type(catalog, solve):
    task = "num_nodes: 3\nresources:\n  accelerators: A10G:1\nrun: python train.py\n"
    plan = solve(_request(task=task, max_nodes=8, max_types=2))
    ranked = plan["result"]["plans"]
    assert ranked
    for p in ranked:
        assert sum(g["count"] for g in p["groups"]) == 3 and len(p["groups"]) == 1
        assert p["groups"][0]["gpu_model"] == "A10G" and p["groups"][0]["gpus_per_node"] == 1
    assert plan["request"]["max_nodes"] == 3 and plan["request"]["max_types"] == 1
    [nodes] = [c for c in plan["constraints_from_task"] if c["field"] == "num_nodes"]
    assert nodes["line"] == 1 and "exactly 3 nodes" in nodes["means"]


def test_memory_and_exact_cpus_keep_only_the_types_that_have_them(catalog, solve):
    task = "resources:\n  accelerators: L4:1\n  cpus: 16\n  memory: 60+\nrun: python train.py\n"
    plan = solve(_request(task=task))
    types = _types()
    assert _groups(plan)
    for _p, g in _groups(plan):
        gpu, count, vcpus, memory, _efa = types[g["instance_type"]]
        assert (gpu, count, vcpus) == ("L4", 1, 16) and memory >= 60


def test_an_instance_type_and_a_region_pin_the_plan_to_them(catalog, solve):
    task = "resources:\n  instance_type: g5.12xlarge\n  infra: aws/us-west-2\nrun: python train.py\n"
    plan = solve(_request(task=task, regions=[]))
    assert {(p["region"], g["instance_type"]) for p, g in _groups(plan)} == {("us-west-2", "g5.12xlarge")}
    said = {c["field"]: c["line"] for c in plan["constraints_from_task"]}
    assert said == {"instance_type": 2, "region": 3}


def test_network_tier_best_keeps_efa_types_only(catalog, solve):
    task = "resources:\n  network_tier: best\n  use_spot: false\nrun: python train.py\n"
    plan = solve(_request(task=task))
    types = _types()
    assert _groups(plan)
    for p, g in _groups(plan):
        assert types[g["instance_type"]][4] is True and g["market"] == "on-demand" and not p["uses_spot"]


def test_a_zone_plans_in_its_region(catalog, solve):
    task = "resources:\n  accelerators: A10G:1\n  zone: us-west-2b\nrun: python train.py\n"
    plan = solve(_request(task=task, regions=[]))
    assert {p["region"] for p in plan["result"]["plans"]} == {"us-west-2"}
    assert [c["value"] for c in plan["constraints_from_task"] if c["field"] == "zone"] == ["us-west-2b"]


def test_any_of_entries_are_alternatives_each_with_its_own_market(catalog, solve):
    task = (
        "resources:\n  any_of:\n    - {accelerators: A10G:1, use_spot: true}\n"
        "    - {accelerators: L4:1, use_spot: false}\nrun: python train.py\n"
    )
    plan = solve(_request(task=task, top_k=20))
    seen = {(g["gpu_model"], g["market"]) for _p, g in _groups(plan)}
    assert seen and seen <= {("A10G", "spot"), ("L4", "on-demand")}


def test_bad_yaml_is_a_400_naming_task_with_the_parsers_message_and_line(catalog, user_api):
    resp = user_api.post("/api/v1/plans/", _request(task="run: [python\nresources: {\n"), format="json")
    assert resp.status_code == 400
    [message] = resp.json()["task"]
    assert "not valid YAML" in message and message.startswith("line ")
    assert not PlanRecord.objects.exists()


def test_a_file_pinning_another_cloud_is_a_400_with_the_aws_only_message(catalog, user_api):
    task = "resources:\n  accelerators: A100:8\n  infra: gcp\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 400
    [message] = resp.json()["task"]
    assert "Srifty plans and launches on AWS only" in message and "line 3" in message


def test_an_unknown_gpu_is_a_400_naming_task_and_its_line(catalog, user_api):
    task = "resources:\n  accelerators: Z999:8\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 400
    [message] = resp.json()["task"]
    assert message.startswith("line 2: resources.accelerators: unknown GPU Z999")


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"gpu_models": ["L4"]}, "gpu_models"),
        ({"regions": ["eu-west-1"]}, "regions"),
        ({"spot": False}, "spot"),
    ],
)
def test_a_request_field_that_disagrees_with_the_file_is_a_400_naming_it(catalog, user_api, over, field):
    task = SKY_TASK.replace("run:", "infra: aws/us-east-1\nrun:").replace("infra", "  infra")
    resp = user_api.post("/api/v1/plans/", _request(task=task, **over), format="json")
    assert resp.status_code == 400, resp.json()
    assert list(resp.json()) == [field] and "task file" in resp.json()[field][0]


def test_num_nodes_above_the_requests_max_nodes_is_a_400_naming_max_nodes(catalog, user_api):
    task = "num_nodes: 6\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task, max_nodes=4), format="json")
    assert resp.status_code == 400 and "num_nodes: 6" in resp.json()["max_nodes"][0]


def test_a_request_field_that_agrees_narrows_the_plan_to_both(catalog, user_api):
    resp = user_api.post("/api/v1/plans/", _request(task=SKY_TASK, gpu_models=["H100", "L4"]), format="json")
    assert resp.status_code == 202, resp.json()
    offers = service.candidates(service.PlanInput.from_request(PlanRecord.objects.get().request))
    assert offers and {(c.gpu_model, c.gpus_per_node, c.market) for c in offers} == {("H100", 8, "spot")}


def test_a_file_no_offer_satisfies_is_a_400_naming_task(catalog, user_api):
    task = "resources:\n  accelerators: A100:1\nrun: python train.py\n"  # p4d has 8
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 400
    assert resp.json()["task"][0].endswith("has the task file's resources (accelerators A100:1)")


def test_the_stored_task_file_shows_no_credential(catalog, user_api):
    task = SKY_TASK + "envs:\n  HF_TOKEN: hf_abcdefgh12345\nsecrets:\n  WANDB_API_KEY: wandb-secret-9876\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task), format="json")
    assert resp.status_code == 202, resp.json()
    shown = user_api.get(resp["Location"]).json()["request"]["task"]
    assert "hf_abcdefgh12345" not in shown and "wandb-secret-9876" not in shown
    assert "HF_TOKEN: <redacted>" in shown and "accelerators: {A100: 8, H100: 8}" in shown


def test_the_fixed_count_marks_every_other_count_as_unable_to_run():
    import numpy as np

    class Perf:
        def __call__(self, config, g):
            return "estimate"

        def throughput_bound(self, c, counts, g):
            return np.ones(len(counts))

        def throughput_curve(self, c, counts, g):
            return np.full(len(counts), 2.0)

    fixed = tc.with_node_count(Perf(), {"choices": [], "num_nodes": 3})
    assert fixed((("a", 3),), 256) == "estimate" and fixed((("a", 2),), 256) is None
    assert fixed((("a", 1), ("b", 2)), 256) == "estimate"
    assert fixed.throughput_bound("a", [1, 2, 3, 4], 256).tolist() == [0, 0, 1, 0]
    assert fixed.throughput_curve("a", [2, 3], 256).tolist() == [0, 2]
    assert tc.with_node_count(Perf, None) is Perf


def test_skypilots_own_gpu_names_match_the_types_it_gives_them(catalog, user_api):
    task = "resources:\n  accelerators: rtxpro6000:8\nrun: python train.py\n"
    resp = user_api.post("/api/v1/plans/", _request(task=task, regions=[]), format="json")
    assert resp.status_code == 202, resp.json()
    offers = service.candidates(service.PlanInput.from_request(PlanRecord.objects.get().request))
    assert offers and {c.instance_type for c in offers} == {"g7e.48xlarge"}


def test_the_plan_command_plans_from_a_task_file(catalog, staff, tmp_path, capsys):
    path = tmp_path / "train.sky.yaml"
    path.write_text(SKY_TASK)
    call_command(
        "plan",
        "--model",
        TINY["spec"],
        "--input-shape",
        TINY["input_shape"],
        "--objective",
        "cost",
        "--samples",
        "1281167",
        "--epochs",
        "10",
        "--deadline-hours",
        "24",
        "--regions",
        "us-east-1",
        "--task",
        str(path),
        "--json",
    )
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["plans"] and all(
        g["gpu_model"] in ("A100", "H100") and g["market"] == "spot"
        for p in out["plans"]
        for g in p["groups"]
    )
    assert {c["field"] for c in out["constraints_from_task"]} == {"accelerators", "cpus", "use_spot"}

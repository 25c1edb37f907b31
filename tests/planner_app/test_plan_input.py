"""A plan request is parsed once (``planner.app.plan_input.PlanInput``): the service reads its
typed fields, never the request dict."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from planner.app import service, solving
from planner.app.plan_input import ModelRef, PlanInput, PlanInputError
from planner.app.serializers import PlanRequestSerializer
from tests.planner_app.test_plan_from_task import SKY_TASK
from tests.support.plans import plan_body

pytestmark = pytest.mark.django_db

SERVICE = Path(service.__file__)


def _validated(**fields) -> dict:
    checked = PlanRequestSerializer(data=plan_body(**fields))
    assert checked.is_valid(), checked.errors
    return dict(checked.validated_data)


def test_the_parsed_request_holds_every_setting_the_service_reads(catalog):
    inp = PlanInput.from_request(
        _validated(
            spot=False,
            gpu_models=["T4", "A10G"],
            accumulation_steps=4,
            min_batch_per_gpu=8,
            baseline_gpu="A100",
        )
    )
    assert inp.model == ModelRef(spec="torchvision:squeezenet1_1", input_shape=(3, 32, 32), precision="amp")
    assert inp.request.objective == "cost" and inp.request.total_samples == 1_000_000
    assert inp.request.deadline_hours == 12 and inp.regions == ("us-east-1",) == inp.request.regions
    assert not inp.spot and inp.on_demand and inp.gpu_models == ("T4", "A10G")
    assert (inp.accumulation_steps, inp.min_batch_per_gpu, inp.baseline_gpu) == (4, 8, "A100")
    assert inp.task_constraints is None and inp.constraints_from_task == () and inp.task_nodes is None


def test_a_task_files_constraints_are_parsed_with_the_request(catalog):
    validated = _validated(task=SKY_TASK + "num_nodes: 2\n", max_nodes=4, regions=["us-east-1", "us-west-2"])
    inp = PlanInput.from_request(validated)
    assert inp.task_constraints == validated["task_constraints"] and inp.task_nodes == 2
    assert list(inp.constraints_from_task) == validated["constraints_from_task"] != []


def test_a_profile_run_request_names_the_run_and_no_shape():
    inp = ModelRef.from_request({"profile_run": 12, "input_shape": "3,224,224"})
    assert inp == ModelRef(profile_run=12) and inp.planned_precision == "fp32"


def test_a_request_the_pure_planner_refuses_is_an_input_error_naming_the_field(catalog):
    with pytest.raises(PlanInputError) as caught:
        PlanInput.from_request({**_validated(), "deadline_hours": None})
    assert caught.value.field == "deadline_hours"
    with pytest.raises(PlanInputError) as caught:
        ModelRef.from_request({"spec": "torchvision:resnet50", "input_shape": "3,x,224"})
    assert caught.value.field == "input_shape"


def test_the_service_solves_the_request_as_parsed_from_the_stored_one(catalog, user, monkeypatch):
    used = []
    real = service._model_inputs

    def keep(inp, *args, **kwargs):
        used.append(inp)
        return real(inp, *args, **kwargs)

    monkeypatch.setattr(service, "_model_inputs", keep)
    record = solving.create_plan(user, _validated(accumulation_steps=2, baseline_gpu="A100"))
    assert record.status == "solved", record.error
    assert used == [PlanInput.from_request(record.request)]
    assert record.result["model"]["accumulation_steps"] == 2


def test_the_service_reads_no_request_dict_after_parsing_it():
    """No ``req[...]`` or ``req.get(...)`` in the service: every step takes the PlanInput."""
    reads = []
    for node in ast.walk(ast.parse(SERVICE.read_text())):
        target = None
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        if isinstance(target, ast.Name) and target.id in {"req", "request"}:
            reads.append(f"{node.lineno}: {ast.unparse(node)}")
    assert reads == []

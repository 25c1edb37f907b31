"""The OpenAPI schema (/api/schema/) marks what a plan request and a profiling run require, with
examples, and validates real requests the way the serializers do."""

from __future__ import annotations

import jsonschema
import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(user_api):
    return user_api.get("/api/schema/", {"format": "json"}).json()


def resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].split("/")[-1]]
    return node


def request_schema(schema: dict, path: str) -> dict:
    """The JSON body schema of ``POST path``, standalone (components inlined by reference)."""
    body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return {**body["schema"], "components": schema["components"]}


def test_the_plan_model_is_either_a_spec_with_its_input_shape_or_a_profiling_run(schema):
    plan = resolve(schema, {"$ref": "#/components/schemas/PlanRequest"})
    assert set(plan["required"]) == {"model", "objective"}
    model = resolve(schema, plan["properties"]["model"])
    spec, run = (resolve(schema, alt) for alt in model["oneOf"])
    assert set(spec["required"]) == {"spec", "input_shape"}
    assert spec["properties"]["input_shape"]["example"] == "3,224,224"
    assert spec["properties"]["spec"]["example"] == "torchvision:resnet50"
    assert run["required"] == ["profile_run"]


def test_the_plan_request_examples_are_valid_against_the_schema_and_the_serializer(schema):
    from planner.app.serializers import PlanRequestSerializer

    body = schema["paths"]["/api/v1/plans/"]["post"]["requestBody"]["content"]["application/json"]
    assert len(body["examples"]) >= 2
    for example in body["examples"].values():
        jsonschema.validate(example["value"], request_schema(schema, "/api/v1/plans/"))
    spec_example = next(e["value"] for e in body["examples"].values() if "spec" in e["value"]["model"])
    checked = PlanRequestSerializer(data=spec_example)
    assert checked.is_valid(), checked.errors


def test_a_plan_model_without_its_input_shape_fails_the_schema_as_it_fails_the_api(schema, user_api):
    body = {"model": {"spec": "torchvision:resnet50"}, "objective": "cost", "deadline_hours": 24}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, request_schema(schema, "/api/v1/plans/"))
    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 400 and "input_shape" in resp.json()["model"]


def test_a_compute_profiling_run_requires_its_model_and_input_shape_in_the_schema(schema):
    create = resolve(schema, request_schema(schema, "/api/v1/profiling-runs/"))
    compute, comm = (resolve(schema, alt) for alt in create["oneOf"])
    assert set(compute["required"]) == {"model_spec", "input_shape"}
    assert compute["properties"]["input_shape"]["example"] == "3,224,224"
    assert comm["required"] == ["kind"]
    whole = request_schema(schema, "/api/v1/profiling-runs/")
    jsonschema.validate({"model_spec": "torchvision:resnet18", "input_shape": "3,64,64"}, whole)
    jsonschema.validate({"kind": "comm", "world_size": 2}, whole)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model_spec": "torchvision:resnet18"}, whole)  # no input_shape
    examples = schema["paths"]["/api/v1/profiling-runs/"]["post"]["requestBody"]["content"][
        "application/json"
    ]
    for example in examples["examples"].values():
        jsonschema.validate(example["value"], whole)


def test_a_stored_plan_documents_its_assumptions_and_mix_reasons(schema):
    plan = resolve(schema, {"$ref": "#/components/schemas/Plan"})["properties"]
    assumptions = resolve(schema, plan["assumptions"]["allOf"][0])
    assert {"types", "scaling", "precision", "data_loader", "p90"} <= set(assumptions["required"])
    precision = resolve(schema, assumptions["properties"]["precision"])
    assert "mismatch" in precision["required"]
    assert plan["mix_reasons"]["additionalProperties"] == {"type": "string"}

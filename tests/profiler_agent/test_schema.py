"""The version-1 JSON Schema and validate_profile, with and without jsonschema."""

from __future__ import annotations

import builtins
import copy

import pytest

from profiler.agent.schema import ProfileValidationError, load_schema, validate_profile

TIMING = {
    "times_ms": [1.0, 1.2],
    "median_ms": 1.1,
    "p10_ms": 1.0,
    "p90_ms": 1.2,
    "mean_ms": 1.1,
    "std_ms": 0.1,
    "cv": 0.09,
}
ENV = {
    "torch": "2.14.1",
    "cuda": None,
    "cudnn": None,
    "gpu_count": 0,
    "cpu_model": "x",
    "threads": 2,
    "python": "3.11.7",
    "hostname": "h",
}
COMPUTE = {
    "schema_version": 1,
    "kind": "compute",
    "created_at": "2026-12-02T13:00:00Z",
    "model": {
        "spec": "torchvision:resnet18",
        "input_shape": [3, 64, 64],
        "num_classes": 1000,
        "num_params": 11689512,
        "param_bytes": 46758048,
        "forward_flops_per_sample": 1.2e9,
    },
    "device": {"type": "cpu", "name": "cpu", "precision": "fp32"},
    "environment": ENV,
    "max_batch_size": 256,
    "batch_search": [{"batch_size": 512, "fits": False, "reason": "out of memory"}],
    "iters": 10,
    "warmup": 3,
    "samples": [
        {
            "batch_size": 8,
            "phases": {"forward": dict(TIMING), "backward": dict(TIMING), "optimizer": dict(TIMING)},
            "buckets": [
                {"index": 0, "size_bytes": 1048576, "num_params": 3, "ready_ms": 0.3, "ready_fraction": 0.12}
            ],
            "peak_memory_bytes": 123456,
        }
    ],
}
COMM = {
    "schema_version": 1,
    "kind": "comm",
    "created_at": "2026-12-02T13:00:00Z",
    "backend": "gloo",
    "world_size": 2,
    "nodes": 1,
    "ranks_per_node": 2,
    "environment": ENV,
    "samples": [{"size_bytes": 1024, **TIMING, "algbw_gbps": 0.08, "busbw_gbps": 0.08}],
}


@pytest.fixture(params=["jsonschema", "hand"])
def validator(request, monkeypatch):
    if request.param == "hand":
        real_import = builtins.__import__

        def no_jsonschema(name, *args, **kwargs):
            if name == "jsonschema":
                raise ImportError("no jsonschema on this VM")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_jsonschema)
    return validate_profile


def test_schema_is_itself_valid_draft_2020_12():
    import jsonschema

    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_documented_examples_validate_and_extra_fields_are_allowed(validator):
    validator(COMPUTE)
    validator(COMM)
    extended = copy.deepcopy(COMPUTE)
    extended["samples"][0]["phases"]["step"] = TIMING
    extended["something_new"] = {"a": 1}
    validator(extended)


def test_missing_field_is_reported_with_its_path(validator):
    doc = copy.deepcopy(COMPUTE)
    del doc["samples"][0]["phases"]["backward"]["median_ms"]
    with pytest.raises(ProfileValidationError) as info:
        validator(doc)
    assert "samples/0/phases/backward" in str(info.value)
    assert "median_ms" in str(info.value)


def test_unknown_kind_and_wrong_version_are_rejected(validator):
    with pytest.raises(ProfileValidationError):
        validator({**COMM, "kind": "memory"})
    with pytest.raises(ProfileValidationError):
        validator({**COMM, "schema_version": 2})


def test_comm_sample_needs_bandwidths(validator):
    doc = copy.deepcopy(COMM)
    del doc["samples"][0]["busbw_gbps"]
    with pytest.raises(ProfileValidationError, match="busbw_gbps"):
        validator(doc)


def test_negative_time_is_rejected_by_the_schema():
    doc = copy.deepcopy(COMM)
    doc["samples"][0]["median_ms"] = -1
    with pytest.raises(ProfileValidationError, match="samples/0/median_ms"):
        validate_profile(doc)

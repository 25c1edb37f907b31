"""Validating a profile document against ``schemas/profile-v1.schema.json``.

``jsonschema`` is used when it is importable; the agent must also run on a bare GPU VM
without it, where a smaller hand-written check of the required structure is used instead.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("schemas") / "profile-v1.schema.json"

_TIMING_KEYS = ("times_ms", "median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms", "cv")
_ENV_KEYS = ("torch", "cuda", "cudnn", "gpu_count", "cpu_model", "threads", "python", "hostname")
_COMPUTE_KEYS = (
    "schema_version",
    "kind",
    "created_at",
    "model",
    "device",
    "environment",
    "max_batch_size",
    "batch_search",
    "iters",
    "warmup",
    "samples",
)
_COMM_KEYS = (
    "schema_version",
    "kind",
    "created_at",
    "backend",
    "world_size",
    "nodes",
    "ranks_per_node",
    "environment",
    "samples",
)
_MODEL_KEYS = ("spec", "input_shape", "num_classes", "num_params", "param_bytes", "forward_flops_per_sample")
_BUCKET_KEYS = ("index", "size_bytes", "num_params", "ready_ms", "ready_fraction")


class ProfileValidationError(ValueError):
    """The document is not a valid version-1 profile; ``path`` points at the bad part."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(f"invalid profile at {path or '<root>'}: {message}")


@cache
def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return schema


def validate_profile(doc: Any) -> None:
    """Raise :class:`ProfileValidationError` unless ``doc`` is a valid version-1 profile."""
    try:
        import jsonschema
    except ImportError:
        _hand_check(doc)
        return
    _jsonschema_check(jsonschema, doc)


def _jsonschema_check(jsonschema: Any, doc: Any) -> None:
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(doc))
    if not errors:
        return
    # A oneOf failure hides the useful message; pick the deepest error of the branch for
    # the document's own kind, when there is one.
    kind = doc.get("kind") if isinstance(doc, dict) else None
    branch = {"compute": 0, "comm": 1}.get(kind) if isinstance(kind, str) else None
    candidates: list[Any] = []
    for error in errors:
        if error.validator == "oneOf" and branch is not None and error.context:
            candidates.extend(e for e in error.context if e.schema_path and e.schema_path[0] == branch)
        else:
            candidates.append(error)
    best = max(candidates or errors, key=lambda e: len(e.absolute_path))
    path = "/".join(str(part) for part in best.absolute_path)
    raise ProfileValidationError(best.message, path)


def _require(obj: Any, keys: tuple[str, ...], path: str) -> None:
    if not isinstance(obj, dict):
        raise ProfileValidationError("expected an object", path)
    for key in keys:
        if key not in obj:
            raise ProfileValidationError(f"{key!r} is a required property", path)


def _check_timing(obj: Any, path: str) -> None:
    _require(obj, _TIMING_KEYS, path)
    times = obj["times_ms"]
    if not isinstance(times, list) or not times or not all(isinstance(t, (int, float)) for t in times):
        raise ProfileValidationError("times_ms must be a non-empty list of numbers", f"{path}/times_ms")
    for key in _TIMING_KEYS[1:]:
        value = obj[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ProfileValidationError(f"{key} must be a non-negative number", f"{path}/{key}")


def _hand_check(doc: Any) -> None:
    _require(doc, ("schema_version", "kind"), "")
    if doc["schema_version"] != 1:
        raise ProfileValidationError("schema_version must be 1", "schema_version")
    kind = doc["kind"]
    if kind == "compute":
        _require(doc, _COMPUTE_KEYS, "")
        _require(doc["model"], _MODEL_KEYS, "model")
        _require(doc["environment"], _ENV_KEYS, "environment")
        if not isinstance(doc["samples"], list):
            raise ProfileValidationError("samples must be a list", "samples")
        for i, sample in enumerate(doc["samples"]):
            base = f"samples/{i}"
            _require(sample, ("batch_size", "phases", "buckets", "peak_memory_bytes"), base)
            for phase in ("forward", "backward", "optimizer"):
                _require(sample["phases"], (phase,), f"{base}/phases")
                _check_timing(sample["phases"][phase], f"{base}/phases/{phase}")
            for j, bucket in enumerate(sample["buckets"]):
                _require(bucket, _BUCKET_KEYS, f"{base}/buckets/{j}")
    elif kind == "comm":
        _require(doc, _COMM_KEYS, "")
        _require(doc["environment"], _ENV_KEYS, "environment")
        if not isinstance(doc["samples"], list) or not doc["samples"]:
            raise ProfileValidationError("samples must be a non-empty list", "samples")
        for i, sample in enumerate(doc["samples"]):
            _check_timing(sample, f"samples/{i}")
            _require(sample, ("size_bytes", "algbw_gbps", "busbw_gbps"), f"samples/{i}")
    else:
        raise ProfileValidationError(f"unknown kind {kind!r}: expected 'compute' or 'comm'", "kind")

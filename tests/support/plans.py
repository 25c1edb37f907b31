"""One plan request of the planner app's tests, as the API's body and as the ``plan``
management command's arguments: squeezenet 1.1 on 3x32x32 images, 200,000 samples x 5 epochs,
the cheapest plan within 12 h in us-east-1."""

from __future__ import annotations

from typing import Any

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}


def plan_body(**fields: Any) -> dict[str, Any]:
    """The request as ``POST /api/v1/plans/``'s body, with ``fields`` added (a new dict each call)."""
    return {
        "model": dict(TINY),
        "samples_per_epoch": 200_000,
        "epochs": 5,
        "objective": "cost",
        "deadline_hours": 12,
        "regions": ["us-east-1"],
        **fields,
    }


def plan_command(**options: object) -> list[str]:
    """The request as ``call_command`` arguments of ``plan``, with ``options`` added, each as
    ``--name value`` (``max_nodes=8`` -> ``--max-nodes 8``)."""
    request: dict[str, object] = {
        "model": TINY["spec"],
        "input_shape": TINY["input_shape"],
        "samples": 200000,
        "epochs": 5,
        "objective": "cost",
        "deadline_hours": 12,
        "regions": "us-east-1",
    }
    args = ["plan"]
    for name, value in {**request, **options}.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


#: The same plan asked through the web form (``POST /plans/``): 100,000 samples x 5 epochs,
#: the cheapest within 12 h in us-east-1 on up to 4 nodes, global batch 256..512.
PLAN_FORM: dict[str, Any] = {
    "model_source": "spec",
    "spec": "torchvision:squeezenet1_1",
    "input_shape": "3,32,32",
    "precision": "amp",
    "samples_per_epoch": "100000",
    "epochs": "5",
    "objective": "cost",
    "deadline_hours": "12",
    "regions": ["us-east-1"],
    "spot": "on",
    "on_demand": "on",
    "max_nodes": "4",
    "max_types": "1",
    "global_batch_min": "256",
    "global_batch_max": "512",
    "checkpoint_interval_h": "0.5",
    "restart_overhead_h": "0.1",
    "baseline_gpu": "A100",
}

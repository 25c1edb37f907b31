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

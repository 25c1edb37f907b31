"""A plan request, parsed once: what the plan service reads instead of the request dict.

``PlanRequestSerializer`` validates the request and the plan stores it as JSON
(``PlanRecord.request``, unchanged); :meth:`PlanInput.from_request` turns that dict into the
pure :class:`planner.solver.PlanRequest` and the service's own settings (the model, the markets,
the regions and GPU models, the task file's constraints...). Every step of
:mod:`planner.app.service` after it reads these typed fields, so a renamed request key fails
here and mypy checks the rest. No Django import: parsing needs no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.defaults import PLAN_DEFAULTS

if TYPE_CHECKING:
    from planner.solver import PlanRequest


class PlanInputError(ValueError):
    """A field of the request is wrong or contradictory; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def plan_request(req: Mapping[str, Any]) -> PlanRequest:
    """The pure :class:`planner.solver.PlanRequest` for a validated request dict."""
    from planner.solver import PlanRequest, RequestError

    try:
        pr = PlanRequest(
            objective=req["objective"],
            total_samples=float(req["total_samples"]),
            deadline_hours=req.get("deadline_hours"),
            budget_usd=req.get("budget_usd"),
            max_hourly_usd=req.get("max_hourly_usd"),
            quotas_on_demand=req.get("quotas_on_demand") or {},
            quotas_spot=req.get("quotas_spot") or {},
            regions=tuple(req["regions"]) if req.get("regions") else None,
            max_miss_risk=req.get("max_miss_risk"),
            **{k: req.get(k, v) for k, v in PLAN_DEFAULTS.items()},
        )
        pr.validate()
    except RequestError as exc:
        raise PlanInputError(exc.field, str(exc).split(": ", 1)[-1]) from exc
    return pr


@dataclass(frozen=True)
class ModelRef:
    """The request's model: a finished compute profiling run (``profile_run``), or a library
    ``spec`` with its ``input_shape`` counted on the meta device.

    ``precision`` is the one the request names (None: a profile run's own, or fp32)."""

    spec: str = ""
    input_shape: tuple[int, ...] = ()
    precision: str | None = None
    profile_run: int | None = None

    @property
    def planned_precision(self) -> str:
        """The precision a workload is counted at when nothing else says one."""
        return self.precision or "fp32"

    @classmethod
    def from_request(cls, model: Mapping[str, Any]) -> ModelRef:
        run = model.get("profile_run")
        shape = model.get("input_shape")
        try:
            # a profile run's shape is the profile's: the request's, if any, is not read
            parsed = tuple(int(x) for x in str(shape).split(",")) if shape and not run else ()
        except ValueError as exc:
            raise PlanInputError("input_shape", "comma-separated positive integers, e.g. 3,224,224") from exc
        return cls(
            spec=str(model.get("spec") or ""),
            input_shape=parsed,
            precision=model.get("precision"),
            profile_run=int(run) if run else None,
        )


@dataclass(frozen=True)
class PlanInput:
    """A validated plan request, parsed: the pure request and the service's settings.

    * ``spot`` / ``on_demand``: the markets allowed; ``regions`` / ``gpu_models``: None = all.
    * ``task_constraints``: a task file's resources (:mod:`planner.app.task_constraints`'s
      JSON), ``constraints_from_task`` their words for the result (both empty without one).
    * ``accumulation_steps``: gradient accumulation (the request's, not a cached trace's);
      ``min_batch_per_gpu``: the user's per-GPU minimum (None: the profile's knee or the
      default); ``baseline_gpu``: the GPU of the SkyPilot-style baseline (None: no such row).
    """

    request: PlanRequest
    model: ModelRef
    spot: bool = True
    on_demand: bool = True
    regions: tuple[str, ...] | None = None
    gpu_models: tuple[str, ...] | None = None
    task_constraints: dict[str, Any] | None = None
    constraints_from_task: tuple[Mapping[str, Any], ...] = ()
    accumulation_steps: int = 1
    min_batch_per_gpu: int | None = None
    baseline_gpu: str | None = None

    @property
    def task_nodes(self) -> int | None:
        """The task file's ``num_nodes`` (None: it names none, or there is no task file)."""
        nodes = (self.task_constraints or {}).get("num_nodes")
        return int(nodes) if nodes is not None else None

    @classmethod
    def from_request(cls, req: Mapping[str, Any]) -> PlanInput:
        """The parsed request ``req`` (validated by ``PlanRequestSerializer``, or stored by it).

        Raises :class:`PlanInputError` naming the field the pure request refuses."""
        return cls(
            request=plan_request(req),
            model=ModelRef.from_request(req.get("model") or {}),
            spot=bool(req.get("spot", True)),
            on_demand=bool(req.get("on_demand", True)),
            regions=tuple(req["regions"]) if req.get("regions") else None,
            gpu_models=tuple(req["gpu_models"]) if req.get("gpu_models") else None,
            task_constraints=dict(req["task_constraints"]) if req.get("task_constraints") else None,
            constraints_from_task=tuple(req.get("constraints_from_task") or ()),
            accumulation_steps=int(req.get("accumulation_steps") or 1),
            min_batch_per_gpu=int(req["min_batch_per_gpu"]) if req.get("min_batch_per_gpu") else None,
            baseline_gpu=req.get("baseline_gpu") or None,
        )

"""A solved plan's result as it is stored: typed, written and read in one place.

The plan service (``planner.app.service.solve_request``) returns a :class:`PlanResult`; the
worker stores :meth:`PlanResult.to_json` in ``PlanRecord.result`` and every reader (the API,
the pages, ``manage.py plan``, the profile-first offers, the launcher's re-plan) reads it back
with :meth:`PlanResult.from_json`. (``planner.solver.PlanResult`` is the search's in-memory
result that this is made from.) The JSON is what the pages' scripts and the stored rows have
always had: this module does not change its format.

The reader is tolerant of rows stored by older versions: a key they lack has a default (an
empty list, None). Plan rows keep their stored JSON (:class:`PlanRow`: the solver plan's fields,
which the launcher keeps a copy of, and the service's); what the readers use is typed beside
it, the option itself as :class:`planner.option.PlanOption`. Pure: no Django, no solver import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.option import PlanOption

#: The p10/p50/p90 time and cost of a ranked plan (``PlanRow.band``), None in older rows.
BAND_KEYS = (
    "time_p10_h",
    "time_p50_h",
    "time_p90_h",
    "cost_p10_usd",
    "cost_p50_usd",
    "cost_p90_usd",
    "iter_time_p10_s",
    "iter_time_p50_s",
    "iter_time_p90_s",
)
#: The time and cost part of it (what a plan's summary shows beside its best row).
TIME_COST_BAND_KEYS = BAND_KEYS[:6]


@dataclass(frozen=True)
class PlanRow:
    """One plan row of a result (a ranked plan, a baseline's or a market alternative's plan).

    ``doc`` is the row as stored (``planner.app.service._plan_row`` writes it; the launcher
    copies it into ``Job.option``), and :meth:`to_json` gives it back unchanged; the fields
    beside it are read from it by :meth:`from_json`, the one way to make a row."""

    option: PlanOption
    label: str
    total_usd: float | None
    uses_spot: bool
    bottleneck: str
    why: str
    prediction_source: str | None
    model_error: Mapping[str, Any] | None
    comm_source: str | None
    comm_near_points: int
    band: Mapping[str, float | None]
    doc: Mapping[str, Any] = field(repr=False)

    @property
    def rank(self) -> int | None:
        return self.option.rank

    @property
    def time_h(self) -> float | None:
        return self.option.time_h

    @property
    def hourly_usd(self) -> float | None:
        return self.option.hourly_usd

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanRow:
        return cls(
            option=PlanOption.from_json(doc),
            label=str(doc.get("label") or ""),
            total_usd=_number(doc.get("total_usd")),
            uses_spot=bool(doc.get("uses_spot")),
            bottleneck=str(doc.get("bottleneck") or ""),
            why=str(doc.get("why") or ""),
            prediction_source=_str_or_none(doc.get("prediction_source")),
            model_error=doc.get("model_error"),
            comm_source=_str_or_none(doc.get("comm_source")),
            comm_near_points=int(doc.get("comm_near_points") or 0),
            # the stored numbers as they are (an int stays an int in the API's JSON)
            band={k: _number(doc.get(k)) for k in BAND_KEYS},
            doc=doc,
        )

    def to_json(self) -> dict[str, Any]:
        return dict(self.doc)


@dataclass(frozen=True)
class Baseline:
    """What a user would otherwise pick (``planner.baselines``), planned on the same oracle:
    its plan, or why it has none."""

    name: str
    description: str = ""
    candidate: str | None = None
    plan: PlanRow | None = None
    infeasible_reason: str | None = None
    throughput_gain_pct: float | None = None
    cost_gain_pct: float | None = None
    time_gain_pct: float | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Baseline:
        plan = doc.get("plan")
        return cls(
            name=str(doc.get("name") or ""),
            description=str(doc.get("description") or ""),
            candidate=_str_or_none(doc.get("candidate")),
            plan=PlanRow.from_json(plan) if plan else None,
            infeasible_reason=_str_or_none(doc.get("infeasible_reason")),
            throughput_gain_pct=_number(doc.get("throughput_gain_pct")),
            cost_gain_pct=_number(doc.get("cost_gain_pct")),
            time_gain_pct=_number(doc.get("time_gain_pct")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "candidate": self.candidate,
            "plan": self.plan.to_json() if self.plan else None,
            "infeasible_reason": self.infeasible_reason,
            "throughput_gain_pct": self.throughput_gain_pct,
            "cost_gain_pct": self.cost_gain_pct,
            "time_gain_pct": self.time_gain_pct,
        }


@dataclass(frozen=True)
class Alternative:
    """The best plan of one market alone (spot-only, on-demand-only), or why there is none."""

    plan: PlanRow | None = None
    reason: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Alternative:
        plan = doc.get("plan")
        return cls(plan=PlanRow.from_json(plan) if plan else None, reason=_str_or_none(doc.get("reason")))

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json() if self.plan else None, "reason": self.reason}


@dataclass(frozen=True)
class ModelInfo:
    """The model the plan predicted: its spec and input shape, the precision planned (and the
    one asked, and the profile's), the profiling run and GPU it was measured on, the prediction
    source of plan #1, and the gradient accumulation steps."""

    spec: str | None = None
    input_shape: tuple[int, ...] = ()
    precision: str | None = None
    profile_run: int | None = None
    measured_on: str | None = None
    source: str = "analytical"
    precision_requested: str | None = None
    profile_precision: str | None = None
    accumulation_steps: int = 1

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelInfo:
        run = doc.get("profile_run")
        return cls(
            spec=_str_or_none(doc.get("spec")),
            input_shape=tuple(int(x) for x in doc.get("input_shape") or ()),
            precision=_str_or_none(doc.get("precision")),
            profile_run=int(run) if run is not None else None,
            measured_on=_str_or_none(doc.get("measured_on")),
            source=str(doc.get("source") or "analytical"),
            precision_requested=_str_or_none(doc.get("precision_requested")),
            profile_precision=_str_or_none(doc.get("profile_precision")),
            accumulation_steps=int(doc.get("accumulation_steps") or 1),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "input_shape": list(self.input_shape),
            "precision": self.precision,
            "profile_run": self.profile_run,
            "measured_on": self.measured_on,
            "source": self.source,
            "precision_requested": self.precision_requested,
            "profile_precision": self.profile_precision,
            "accumulation_steps": self.accumulation_steps,
        }


@dataclass(frozen=True)
class BatchInfo:
    """The batch settings: the global batch range searched, the per-GPU minimum and where it
    came from, the ranks below it (nothing at it fitted) and the learning-rate note."""

    global_batch_min: int
    global_batch_max: int
    min_per_gpu: int
    min_per_gpu_source: str
    below_min_ranks: tuple[int, ...] = ()
    note: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BatchInfo:
        return cls(
            global_batch_min=int(doc["global_batch_min"]),
            global_batch_max=int(doc["global_batch_max"]),
            min_per_gpu=int(doc["min_per_gpu"]),
            min_per_gpu_source=str(doc.get("min_per_gpu_source") or ""),
            below_min_ranks=tuple(int(r) for r in doc.get("below_min_ranks") or ()),
            note=str(doc.get("note") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "global_batch_min": self.global_batch_min,
            "global_batch_max": self.global_batch_max,
            "min_per_gpu": self.min_per_gpu,
            "min_per_gpu_source": self.min_per_gpu_source,
            "below_min_ranks": list(self.below_min_ranks),
            "note": self.note,
        }


@dataclass(frozen=True)
class PlanWarning:
    """What a user must know about how the plan was predicted (``code``: precision_mismatch)."""

    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class PlanResult:
    """A solved plan: the ranked plans, the chart's points and Pareto frontier, the baselines
    and market alternatives, the search's statistics and times, the model, the batch settings,
    the warnings and assumptions, why each mix beats its types alone (rank -> words), and the
    task file's constraints (None: the request had no task file, and the JSON has no key).

    ``pareto``, ``points``, ``stats`` and ``assumptions`` are chart and page data, kept as
    their JSON (``planner.solver.Point._asdict()``, ``SolveStats``, ``planner.assumptions``)."""

    plans: tuple[PlanRow, ...] = ()
    pareto: tuple[Mapping[str, Any], ...] = ()
    points: tuple[Mapping[str, Any], ...] = ()
    baselines: tuple[Baseline, ...] = ()
    alternatives: Mapping[str, Alternative] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)
    solve_time_s: float | None = None
    total_time_s: float | None = None
    model: ModelInfo = field(default_factory=ModelInfo)
    total_samples: float | None = None
    batch: BatchInfo | None = None
    warnings: tuple[PlanWarning, ...] = ()
    assumptions: Mapping[str, Any] | None = None
    mix_reasons: Mapping[str, str] = field(default_factory=dict)
    constraints_from_task: tuple[Mapping[str, Any], ...] | None = None

    @property
    def best(self) -> PlanRow | None:
        """Plan #1 (None: no plan)."""
        return self.plans[0] if self.plans else None

    @property
    def points_seen(self) -> int:
        """Configurations evaluated before the chart's thinning (0 in older results)."""
        return int(self.stats.get("points_seen") or 0)

    def mix_reason(self, row: PlanRow) -> str | None:
        """Why the mixed plan ``row`` beats its types alone (None: not a mix, or no reason)."""
        return self.mix_reasons.get(str(row.rank))

    @classmethod
    def read(cls, doc: PlanResult | Mapping[str, Any] | None) -> PlanResult:
        """``doc`` typed: as it is when it already is, else read (None, an unsolved plan's
        result, reads as an empty one)."""
        return doc if isinstance(doc, PlanResult) else cls.from_json(doc or {})

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanResult:
        """The stored result ``doc`` (``PlanRecord.result``), typed."""
        batch = doc.get("batch")
        assumptions = doc.get("assumptions")
        constraints = doc.get("constraints_from_task")
        return cls(
            plans=tuple(PlanRow.from_json(p) for p in doc.get("plans") or ()),
            pareto=tuple(doc.get("pareto") or ()),
            points=tuple(doc.get("points") or ()),
            baselines=tuple(Baseline.from_json(b) for b in doc.get("baselines") or ()),
            alternatives={k: Alternative.from_json(a) for k, a in (doc.get("alternatives") or {}).items()},
            stats=dict(doc.get("stats") or {}),
            solve_time_s=_number(doc.get("solve_time_s")),
            total_time_s=_number(doc.get("total_time_s")),
            model=ModelInfo.from_json(doc.get("model") or {}),
            total_samples=_number((doc.get("request") or {}).get("total_samples")),
            batch=BatchInfo.from_json(batch) if batch else None,
            warnings=tuple(
                PlanWarning(code=str(w.get("code") or ""), message=str(w.get("message") or ""))
                for w in doc.get("warnings") or ()
            ),
            assumptions=dict(assumptions) if assumptions is not None else None,
            mix_reasons={str(k): str(v) for k, v in (doc.get("mix_reasons") or {}).items()},
            constraints_from_task=tuple(constraints) if constraints is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The result as stored and served (the one writer of its JSON)."""
        doc: dict[str, Any] = {
            "plans": [p.to_json() for p in self.plans],
            "pareto": [dict(p) for p in self.pareto],
            "points": [dict(p) for p in self.points],
            "baselines": [b.to_json() for b in self.baselines],
            "alternatives": {k: a.to_json() for k, a in self.alternatives.items()},
            "stats": dict(self.stats),
            "solve_time_s": self.solve_time_s,
            "total_time_s": self.total_time_s,
            "model": self.model.to_json(),
            "request": {"total_samples": self.total_samples},
            "batch": self.batch.to_json() if self.batch else None,
            "warnings": [w.to_json() for w in self.warnings],
            "assumptions": dict(self.assumptions) if self.assumptions is not None else None,
            "mix_reasons": dict(self.mix_reasons),
        }
        if self.constraints_from_task is not None:
            doc["constraints_from_task"] = [dict(c) for c in self.constraints_from_task]
        return doc


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    """A stored number as it is (an int stays an int); the API's decimal strings as floats."""
    if value is None or isinstance(value, (int, float)):
        return value
    return float(value)

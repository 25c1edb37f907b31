"""A plan option as the launcher, the pages and the profiler read it: typed, read in one place.

The solver returns :class:`planner.solver.Plan` rows; the plan service stores each one as JSON
(``dataclasses.asdict(plan)`` plus the service's fields, ``planner.app.service._plan_row``, the
one writer), and the launcher keeps a copy of the chosen row (``launcher.models.Job.option``).
Every consumer reads that JSON through :meth:`PlanOption.from_json`, so a renamed key fails here
and mypy checks the rest. The stored format does not change: this is a reader, not a writer.

The reader is as tolerant as the consumers were of older or hand-made rows: a field that some
stored rows lack has a default (the consumers' own) or is ``None`` (a value the consumer must
not invent: a price, a market, a predicted time). Pure: no Django, no solver import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPOT = "spot"


@dataclass(frozen=True)
class NodeGroup:
    """``count`` nodes of one instance type, market and zone in a stored plan option.

    ``market`` is None in rows written without one (the pages' test rows); such a group is not
    spot. ``price_per_hour`` (USD per node-hour) is None where the row has none.
    ``batch_per_node`` is one global-batch share per node (empty in rows without it)."""

    instance_type: str
    count: int
    market: str | None = None
    zone: str | None = None
    gpus_per_node: int = 1
    gpu_model: str = ""
    price_per_hour: float | None = None
    batch_per_node: tuple[int, ...] = ()
    interruption_bucket: int = 0  # AWS Spot Advisor class 0..4 (planner.offers)

    @property
    def is_spot(self) -> bool:
        return self.market == SPOT

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node

    @classmethod
    def read(cls, group: NodeGroup | Mapping[str, Any]) -> NodeGroup:
        """``group`` typed: as it is when it already is, else read from its stored JSON."""
        return group if isinstance(group, NodeGroup) else cls.from_json(group)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> NodeGroup:
        return cls(
            instance_type=str(doc["instance_type"]),
            count=int(doc.get("count") or 0),
            market=_str_or_none(doc.get("market")),
            zone=_str_or_none(doc.get("zone")),
            gpus_per_node=max(1, int(doc.get("gpus_per_node") or 1)),
            gpu_model=str(doc.get("gpu_model") or ""),
            price_per_hour=_float_or_none(doc.get("price_per_hour")),
            batch_per_node=tuple(int(b) for b in doc.get("batch_per_node") or ()),
            interruption_bucket=int(doc.get("interruption_bucket") or 0),
        )


@dataclass(frozen=True)
class PlanOption:
    """One ranked row of a solved plan: where, which node groups, at what batch, and the
    predictions a launch is checked against.

    ``region`` is ``""`` in rows without one. The predictions (hours, iteration seconds,
    samples/s, USD/h) are None where the row has none; ``rank`` and ``global_batch`` too."""

    region: str = ""
    groups: tuple[NodeGroup, ...] = ()
    rank: int | None = None
    global_batch: int | None = None
    hourly_usd: float | None = None
    time_h: float | None = None
    time_p90_h: float | None = None
    iter_time_s: float | None = None
    iter_time_p90_s: float | None = None
    throughput_sps: float | None = None

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.groups)

    @property
    def instance_types(self) -> tuple[str, ...]:
        """The option's instance types, each once, in group order."""
        return tuple(dict.fromkeys(g.instance_type for g in self.groups))

    def price_of(self, instance_type: str) -> float:
        """USD per node-hour of ``instance_type`` in this option (its first group's); 0 when none."""
        return next((g.price_per_hour or 0.0 for g in self.groups if g.instance_type == instance_type), 0.0)

    @classmethod
    def read(cls, option: PlanOption | Mapping[str, Any]) -> PlanOption:
        """``option`` typed: as it is when it already is, else read from its stored JSON."""
        return option if isinstance(option, PlanOption) else cls.from_json(option)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanOption:
        """The stored row ``doc`` (``result["plans"][i]`` or ``Job.option``), typed."""
        return cls(
            region=str(doc.get("region") or ""),
            groups=tuple(NodeGroup.from_json(g) for g in doc.get("groups") or ()),
            rank=_int_or_none(doc.get("rank")),
            global_batch=_int_or_none(doc.get("global_batch")),
            hourly_usd=_float_or_none(doc.get("hourly_usd")),
            time_h=_float_or_none(doc.get("time_h")),
            time_p90_h=_float_or_none(doc.get("time_p90_h")),
            iter_time_s=_float_or_none(doc.get("iter_time_s")),
            iter_time_p90_s=_float_or_none(doc.get("iter_time_p90_s")),
            throughput_sps=_float_or_none(doc.get("throughput_sps")),
        )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _float_or_none(value: Any) -> float | None:
    """Numbers and the API's decimal strings ("0.5000", srifty_web.money) alike."""
    return None if value is None else float(value)

"""A task file's resources as the constraints of a plan (issue 37 item 2).

A task file (either dialect, :func:`launcher.taskfile.parse_task`) sent with a plan request asks
for machines. Each ``resources`` choice (the block, or one ``any_of``/``ordered`` entry laid over
the block) is a conjunction; a node offer passes when it satisfies *some* choice:

* ``accelerators``: the offer's GPU is one of the alternatives at exactly that count per node
  (``{A100: 8, H100: 8}``: p4d.24xlarge or p5.48xlarge, not p5.4xlarge);
* ``instance_type``: that type only;
* ``cpus``/``memory``: ``N+`` at least N vCPUs (GiB) per node, ``N`` exactly N (SkyPilot's
  meaning; catalog vCPUs and memory);
* ``use_spot``: that market only (``true``: spot, ``false``: on-demand);
* ``region`` (or ``infra: aws/REGION``): that region. A zone narrows the plan to its region: the
  catalog prices zones by zone ID, and zone names (``us-east-1a``) differ per AWS account;
* ``network_tier: best``: EFA instance types only.

``num_nodes`` is a fixed count, as SkyPilot means it: a SkyPilot cluster is ``num_nodes`` nodes
of one resources choice, so the plan ranks clusters of exactly that many nodes of one instance
type (``max_nodes`` N, ``max_types`` 1, and :class:`FixedNodeCount` marks every other count as
unable to run, the way ``planner.solver.search.MinBatchPerGpu`` marks a too-small batch).

The constraints reach the solver through the one planning path (``planner.app.service``): the
request's own fields where they say the same thing (``regions``, ``spot``/``on_demand``,
``max_nodes``, ``max_types``), and ``task_constraints`` (JSON, in the stored request) as a filter
on the candidates (:func:`filter_candidates`) and on the offer counts the request is checked
with (:func:`allowed_type_ids`). A request field the user gave (``gpu_models`` too) must allow
something the file asks for, and the plan takes what both allow; where nothing is left the
request is refused naming that field (:func:`merge`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import yaml

from launcher.taskfile import (
    Amount,
    Resources,
    TaskFileError,
    TaskIssue,
    TaskSpec,
    load_bounded,
    parse_task,
    sky_accelerator,
)


class TaskConstraintError(ValueError):
    """The file asks for something the catalog cannot give (an unknown GPU name): its issues."""

    def __init__(self, issues: list[TaskIssue]) -> None:
        super().__init__("; ".join(str(i) for i in issues))
        self.issues = issues


@dataclass(frozen=True)
class Choice:
    """One resources choice of the file, in the catalog's words (JSON-able as a dict)."""

    gpus: tuple[tuple[str, int], ...] = ()  # (catalog GPU name, GPUs per node) alternatives
    instance_type: str = ""
    cpus: tuple[float, bool] | None = None  # (value, or more)
    memory: tuple[float, bool] | None = None  # GiB
    spot: bool | None = None
    region: str = ""
    zone: str = ""
    efa: bool = False

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["gpus"] = [list(g) for g in self.gpus]
        doc["cpus"] = list(self.cpus) if self.cpus else None
        doc["memory"] = list(self.memory) if self.memory else None
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Choice:
        def amount(v: Any) -> tuple[float, bool] | None:
            return (float(v[0]), bool(v[1])) if v else None

        return cls(
            gpus=tuple((str(g), int(n)) for g, n in doc.get("gpus") or ()),
            instance_type=str(doc.get("instance_type") or ""),
            cpus=amount(doc.get("cpus")),
            memory=amount(doc.get("memory")),
            spot=doc.get("spot"),
            region=str(doc.get("region") or ""),
            zone=str(doc.get("zone") or ""),
            efa=bool(doc.get("efa")),
        )

    def fits_type(self, name: str, gpu: str, gpus: int, vcpus: float, memory_gib: float, efa: bool) -> bool:
        """Does an instance type satisfy this choice's machine part (all but market and place)?
        Its GPU is named as our catalog or as SkyPilot's AWS catalog names it (``RTXPRO6000``:
        g7e's "RTX PRO Server 6000", :func:`launcher.taskfile.sky_accelerator`)."""
        if self.gpus and not any(
            int(gpus) == n and asked.lower() in _gpu_names(name, gpu) for asked, n in self.gpus
        ):
            return False
        if self.instance_type and name != self.instance_type:
            return False
        if self.efa and not efa:
            return False
        return _amount_fits(self.cpus, vcpus) and _amount_fits(self.memory, memory_gib)

    def fits(self, c: Any) -> bool:
        """Does a :class:`planner.offers.Candidate` satisfy this choice?"""
        if self.spot is not None and c.is_spot != self.spot:
            return False
        if self.region and c.region != self.region:
            return False
        return self.fits_type(c.instance_type, c.gpu_model, c.gpus_per_node, c.vcpus, c.memory_gib, c.efa)


def _gpu_names(instance_type: str, gpu: str) -> set[str]:
    return {gpu.lower(), sky_accelerator(instance_type, gpu).lower()}


def gpu_aliases(types: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """A GPU name a file may write (lower case: ours or SkyPilot's) -> our catalog's names, for
    the ``(instance type, catalog GPU)`` of the catalog's types."""
    out: dict[str, set[str]] = {}
    for name, gpu in types:
        for alias in _gpu_names(name, gpu):
            out.setdefault(alias, set()).add(gpu)
    return out


def _amount_fits(asked: tuple[float, bool] | None, have: float) -> bool:
    """``N+``: at least N; ``N``: N (memory to the GiB the catalog rounds to)."""
    if asked is None:
        return True
    value, or_more = asked
    return have >= value - 1e-6 if or_more else math.isclose(have, value, abs_tol=0.5)


# ------------------------------------------------------------------------ reading the file
def read(text: str, filename: str = "") -> TaskSpec:
    """The task file, read (:class:`launcher.taskfile.TaskFileError` lists its problems)."""
    return parse_task(text, filename or None)


def resource_lines(text: str) -> dict[str, int]:
    """Line of each key of the file's ``resources`` block (``"accelerators"`` -> 4), and of the
    top-level keys (``"num_nodes"``); the file has been read already, so it loads."""
    node, _ = load_bounded(text)
    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        lines[str(key.value)] = key.start_mark.line + 1
        if key.value == "resources" and isinstance(value, yaml.MappingNode):
            for sub, _v in value.value:
                if isinstance(sub, yaml.ScalarNode):
                    lines[f"resources.{sub.value}"] = sub.start_mark.line + 1
    return lines


def _line(lines: dict[str, int], *keys: str) -> int | None:
    """The first of ``resources.KEY`` for ``keys``, else the alternatives' list, else the block."""
    paths = [f"resources.{k}" for k in (*keys, "any_of", "ordered")] + ["resources"]
    return next((lines[p] for p in paths if p in lines), None)


def choices_of(
    spec: TaskSpec, aliases: dict[str, set[str]], lines: dict[str, int], known_regions: Collection[str] = ()
) -> tuple[Choice, ...]:
    """The file's resources choices; a GPU no catalog type has (``aliases``: :func:`gpu_aliases`;
    case-insensitive) or, given ``known_regions``, an unknown region is a
    :class:`TaskConstraintError` naming its line."""
    out: list[Choice] = []
    unknown: list[str] = []
    regions = [r.region for r in spec.resources.choices if r.region]
    bad = [r for r in dict.fromkeys(regions) if known_regions and r not in known_regions]
    if bad:
        raise TaskConstraintError(
            [
                TaskIssue(
                    _line(lines, "region", "infra", "zone"),
                    "resources.region",
                    f"unknown AWS region {', '.join(bad)}",
                )
            ]
        )
    for res in spec.resources.choices:
        gpus = []
        for name, count in res.accelerators:
            if name.lower() in aliases:
                gpus.append((name, int(count)))
            else:
                unknown.append(name)
        out.append(_choice(res, tuple(gpus)))
    if unknown:
        line = _line(lines, "accelerators")
        said = ", ".join(dict.fromkeys(unknown))
        known = ", ".join(sorted({g for names in aliases.values() for g in names})) or "none (import_catalog)"
        raise TaskConstraintError(
            [TaskIssue(line, "resources.accelerators", f"unknown GPU {said}; the catalog has: {known}")]
        )
    return tuple(out)


def _choice(res: Resources, gpus: tuple[tuple[str, int], ...]) -> Choice:
    def amount(a: Amount | None) -> tuple[float, bool] | None:
        return (a.value, a.or_more) if a is not None else None

    return Choice(
        gpus=gpus,
        instance_type=res.instance_type,
        cpus=amount(res.cpus),
        memory=amount(res.memory),
        spot=res.use_spot,
        region=res.region,
        zone=res.zone,
        efa=res.efa,
    )


# ------------------------------------------------------------------ what the page and API say
def _either(values: list[str]) -> str:
    return " or ".join(dict.fromkeys(values))


def _amount_text(a: tuple[float, bool] | None) -> str:
    return "" if a is None else f"{a[0]:g}{'+' if a[1] else ''}"


def from_task(
    choices: Sequence[Choice], num_nodes: int | None, lines: dict[str, int]
) -> list[dict[str, Any]]:
    """``[{"field", "value", "line", "means"}]``: each constraint the file set, for the stored
    plan (``field`` is the file's key; a key some choice leaves free reads "... or any")."""

    places = {"region": ("region", "infra", "cloud"), "zone": ("zone", "infra")}

    def line(key: str) -> int | None:
        return _line(lines, *places.get(key, (key,)))

    def entry(key: str, texts: list[str], means: str) -> dict[str, Any] | None:
        if not any(texts):
            return None
        value = _either([t or "any" for t in texts])
        return {"field": key, "value": value, "line": line(key), "means": means}

    rows = [
        entry(
            "accelerators",
            [_either([f"{g}:{n}" for g, n in c.gpus]) for c in choices],
            "only instance types with one of these GPUs, at that many per node",
        ),
        entry("instance_type", [c.instance_type for c in choices], "only this instance type"),
        entry(
            "cpus", [_amount_text(c.cpus) for c in choices], "vCPUs per node (N+: at least N; N: exactly N)"
        ),
        entry(
            "memory", [_amount_text(c.memory) for c in choices], "GiB per node (N+: at least N; N: exactly N)"
        ),
        entry(
            "use_spot",
            ["" if c.spot is None else str(c.spot).lower() for c in choices],
            "true: spot only; false: on-demand only",
        ),
        entry("region", [c.region for c in choices], "only this region"),
        entry(
            "zone",
            [c.zone for c in choices],
            "planned in the zone's region (the catalog prices zones by ID; zone names differ per "
            "AWS account)",
        ),
        entry("network_tier", ["best" if c.efa else "" for c in choices], "EFA instance types only"),
    ]
    out = [r for r in rows if r is not None]
    if num_nodes is not None:
        out.append(
            {
                "field": "num_nodes",
                "value": str(num_nodes),
                "line": lines.get("num_nodes"),
                "means": f"exactly {num_nodes} node{'s' if num_nodes != 1 else ''} of one instance type",
            }
        )
    return out


# ------------------------------------------------------------------ the request's own fields
def _all_set(values: list[Any]) -> bool:
    return bool(values) and all(v not in (None, "") for v in values)


def merge(
    attrs: dict[str, Any],
    choices: Sequence[Choice],
    num_nodes: int | None,
    given: set[str],
    aliases: dict[str, set[str]],
) -> dict[str, str]:
    """Narrow the validated request ``attrs`` to what the file asks; field -> message where a
    field the user gave (``given``) allows none of it.

    Request fields are *allowances* (gpu_models, regions, the markets, a node maximum): the file
    agrees with one when some value it asks for is allowed, and the plan takes both (the GPUs
    through the candidate filter, which also knows SkyPilot's GPU names)."""
    errors: dict[str, str] = {}
    asked = [g for c in choices for g, _ in c.gpus]
    if all(c.gpus for c in choices) and asked and "gpu_models" in given and attrs.get("gpu_models"):
        ours = {name for g in asked for name in aliases.get(g.lower(), ())}
        if not ours & set(attrs["gpu_models"]):
            errors["gpu_models"] = (
                f"the task file asks for accelerators {_either(asked)}; this request allows "
                f"{', '.join(attrs['gpu_models'])}"
            )
    regions = [c.region for c in choices]
    if _all_set(regions):
        errors.update(_narrow(attrs, "regions", regions, given, "region"))
    markets = {c.spot for c in choices}
    if None not in markets and len(markets) == 1:
        spot = markets.pop()
        field = "spot" if spot else "on_demand"
        if field in given and not attrs.get(field):
            errors[field] = (
                f"the task file asks for use_spot: {str(spot).lower()}, which this request rules out"
            )
        else:
            attrs["spot"], attrs["on_demand"] = bool(spot), not spot
    if num_nodes is not None and num_nodes > (limit := _max_nodes_limit()):
        # the request's own max_nodes bound: the file's count becomes max_nodes, so it is bounded
        # the same way (the user sent no max_nodes, so the 400 names the file)
        errors["task"] = (
            f"the task file asks for num_nodes: {num_nodes}; a plan searches at most {limit} nodes"
        )
    elif num_nodes is not None:
        if "max_nodes" in given and int(attrs["max_nodes"]) < num_nodes:
            errors["max_nodes"] = (
                f"the task file asks for num_nodes: {num_nodes}, more than max_nodes {attrs['max_nodes']}"
            )
        else:
            attrs["max_nodes"], attrs["max_types"] = num_nodes, 1
    return errors


def _max_nodes_limit() -> int:
    """The most nodes a plan request may search (``PlanRequestSerializer.max_nodes``'s bound)."""
    from planner.defaults import MAX_NODES

    return MAX_NODES


def _narrow(
    attrs: dict[str, Any], field: str, wanted: list[str], given: set[str], key: str
) -> dict[str, str]:
    asked = list(dict.fromkeys(wanted))
    if field in given and attrs.get(field):
        both = [v for v in asked if v in attrs[field]]
        if not both:
            return {
                field: f"the task file asks for {key} {' or '.join(asked)}; this request allows "
                f"{', '.join(attrs[field])}"
            }
        attrs[field] = both
    else:
        attrs[field] = asked
    return {}


# ----------------------------------------------------------------------- the candidates
def constraints_json(choices: Sequence[Choice], num_nodes: int | None) -> dict[str, Any]:
    """What the stored request carries (``task_constraints``)."""
    return {"choices": [c.to_json() for c in choices], "num_nodes": num_nodes}


def parsed(doc: dict[str, Any] | None) -> tuple[tuple[Choice, ...], int | None]:
    if not doc:
        return (), None
    nodes = doc.get("num_nodes")
    return tuple(Choice.from_json(c) for c in doc.get("choices") or ()), int(nodes) if nodes else None


def filter_candidates(doc: dict[str, Any] | None, cands: Sequence[Any]) -> list[Any]:
    """The candidates that satisfy some choice of the request's ``task_constraints``."""
    choices, _ = parsed(doc)
    if not choices:
        return list(cands)
    return [c for c in cands if any(ch.fits(c) for ch in choices)]


def allowed_type_ids(doc: dict[str, Any] | None) -> list[int] | None:
    """Primary keys of the DDP-capable instance types some choice's machine part allows
    (the offer counts of the request checks); None: no constraint."""
    from catalog.models import InstanceType

    choices, _ = parsed(doc)
    if not choices:
        return None
    rows = InstanceType.objects.ddp_capable().values_list(
        "pk", "name", "accelerator__name", "gpu_count", "vcpus", "memory_gib", "efa_supported"
    )
    return [
        pk
        for pk, name, gpu, count, vcpus, memory, efa in rows
        if any(ch.fits_type(name, gpu or "", int(count or 0), vcpus, memory, efa) for ch in choices)
    ]


# ------------------------------------------------------------------ a fixed node count
class FixedNodeCount:
    """``perf`` with every configuration of other than ``nodes`` nodes in all marked as unable to
    run (``None``; 0 in the homogeneous curves and bounds). Only with ``max_types`` 1 (what
    :func:`merge` sets): a mix's bounds add its groups' curves at their own counts, which this
    zeroes."""

    def __init__(self, perf: Any, nodes: int) -> None:
        self.perf = perf
        self.nodes = int(nodes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.perf, name)

    def __call__(self, config: Any, global_batch: int) -> Any:
        if sum(int(n) for _, n in config) != self.nodes:
            return None
        return self.perf(config, global_batch)

    def _keep(self, counts: Any, got: Any) -> np.ndarray:
        return np.where(
            np.asarray(counts, dtype=np.int64) == self.nodes, np.asarray(got, dtype=np.float64), 0.0
        )

    def throughput_bound(self, c: Any, counts: Any, g: int) -> np.ndarray:
        return self._keep(counts, self.perf.throughput_bound(c, counts, g))

    def throughput_curve(self, c: Any, counts: Any, g: int) -> np.ndarray | None:
        curve = getattr(self.perf, "throughput_curve", None)
        got = curve(c, counts, g) if callable(curve) else None
        return None if got is None else self._keep(counts, got)


class _FixedNoBound(FixedNodeCount):
    throughput_bound = None  # type: ignore[assignment]
    throughput_curve = None  # type: ignore[assignment]


def with_node_count(perf: Any, doc: dict[str, Any] | None) -> Any:
    """``perf`` under the file's ``num_nodes`` (:class:`FixedNodeCount`); unchanged without one."""
    _, nodes = parsed(doc)
    if nodes is None:
        return perf
    if not callable(getattr(perf, "throughput_bound", None)):
        return _FixedNoBound(perf, nodes)
    return FixedNodeCount(perf, nodes)


def issues_text(exc: TaskFileError | TaskConstraintError) -> list[str]:
    """One message per issue: ``line 3: resources.cpus: ...`` (a 400's list under ``task``)."""
    return [str(i) for i in exc.issues]

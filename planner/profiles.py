"""Parse Srifty profile JSON (format v1, see ``docs/profile-format.md``) into dataclasses.

Two kinds exist:

* ``compute`` — per-batch-size forward / backward / optimizer timings of one model on one
  device plus the DDP gradient buckets and when each became ready during backward;
* ``comm`` — all-reduce timings over message sizes for one process-group configuration.

Everything here is pure Python (no Django, no torch).  Bad input raises :class:`ProfileError`
(a ``ValueError``) whose message names the offending field with a JSON-path-like location,
e.g. ``samples[2].phases.backward.times_ms[4]: must be >= 0, got -1.0``.

Summary statistics (median, p10, p90, mean, std, cv) are recomputed from ``times_ms`` when
the list is present, so a hand-edited file cannot carry inconsistent summaries; when only
summaries are given, ``median_ms`` is required and the rest default from it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")


class ProfileError(ValueError):
    """A profile document is malformed; the message starts with the offending field."""

    def __init__(self, where: str, problem: str) -> None:
        self.field = where
        super().__init__(f"{where}: {problem}")


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class TimingStats:
    """Per-iteration times (ms) of one measured quantity and their summary."""

    times_ms: tuple[float, ...]
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    std_ms: float

    @property
    def cv(self) -> float:
        """Coefficient of variation ``std / mean`` (0 when the mean is 0)."""
        return self.std_ms / self.mean_ms if self.mean_ms > 0 else 0.0

    @property
    def relative_spread(self) -> float:
        """Robust relative spread ``(p90 - p10) / (2 · 1.2816 · median)``.

        For a normal distribution this equals ``std / median``; it is insensitive to one
        outlier iteration (a page fault, a scheduler hiccup), unlike ``cv``.
        """
        if self.median_ms <= 0:
            return 0.0
        return max(0.0, (self.p90_ms - self.p10_ms) / (2 * 1.2816 * self.median_ms))


@dataclass(frozen=True)
class Bucket:
    """One DDP gradient bucket; bucket 0 is all-reduced first."""

    index: int
    size_bytes: int
    num_params: int
    ready_ms: float
    ready_fraction: float


@dataclass(frozen=True)
class ComputeSample:
    """Measurements at one per-worker batch size."""

    batch_size: int
    phases: Mapping[str, TimingStats]
    buckets: tuple[Bucket, ...] = ()
    peak_memory_bytes: int | None = None

    def phase(self, name: str) -> TimingStats:
        return self.phases[name]


@dataclass(frozen=True)
class ModelInfo:
    spec: str
    input_shape: tuple[int, ...] = ()
    num_classes: int | None = None
    num_params: int | None = None
    param_bytes: int | None = None
    forward_flops_per_sample: float | None = None


@dataclass(frozen=True)
class DeviceInfo:
    """``precision`` is the one the profile ran; ``precision_requested`` the one asked for."""

    type: str
    name: str
    precision: str = "fp32"
    precision_requested: str | None = None


@dataclass(frozen=True)
class InputPipelineRate:
    """What one data-loader worker prepared per second on the profiling machine
    (``profiler.agent.dataloader.profile_entry``) for the model's data kind."""

    kind: str
    samples_per_s_per_vcpu: float
    seconds: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class ComputeProfile:
    model: ModelInfo
    device: DeviceInfo
    samples: tuple[ComputeSample, ...]
    max_batch_size: int | None = None
    iters: int | None = None
    warmup: int | None = None
    created_at: str | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "compute"
    input_pipeline: InputPipelineRate | None = None  # None: not measured (older profiles)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(s.batch_size for s in self.samples)

    def sample_for(self, batch_size: int) -> ComputeSample:
        for s in self.samples:
            if s.batch_size == batch_size:
                return s
        raise KeyError(f"batch size {batch_size} was not profiled (have {self.batch_sizes})")

    def bucket_layout(self) -> tuple[Bucket, ...]:
        """Buckets of the largest profiled batch (sizes do not depend on the batch)."""
        with_buckets = [s for s in self.samples if s.buckets]
        return with_buckets[-1].buckets if with_buckets else ()


@dataclass(frozen=True)
class CommSample:
    size_bytes: int
    stats: TimingStats
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    cpu_share: float | None = None  # CPU time / wall time of a CPU collective (docs/profile-format.md)


@dataclass(frozen=True)
class CommProfile:
    backend: str
    world_size: int
    nodes: int
    ranks_per_node: int
    samples: tuple[CommSample, ...]
    created_at: str | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "comm"


Profile = ComputeProfile | CommProfile


# --------------------------------------------------------------------------- public loaders


def load_profile(source: Mapping[str, Any] | str | Path) -> Profile:
    """Parse a profile of either kind from a dict, a JSON string or a path to a JSON file."""
    doc = _as_document(source)
    kind = _require(doc, "kind", "")
    if kind == "compute":
        return parse_compute_profile(doc)
    if kind == "comm":
        return parse_comm_profile(doc)
    raise ProfileError("kind", f"must be 'compute' or 'comm', got {kind!r}")


def load_compute_profile(source: Mapping[str, Any] | str | Path) -> ComputeProfile:
    profile = load_profile(source)
    if not isinstance(profile, ComputeProfile):
        raise ProfileError("kind", f"expected a compute profile, got {profile.kind!r}")
    return profile


def load_comm_profile(source: Mapping[str, Any] | str | Path) -> CommProfile:
    profile = load_profile(source)
    if not isinstance(profile, CommProfile):
        raise ProfileError("kind", f"expected a comm profile, got {profile.kind!r}")
    return profile


def parse_compute_profile(doc: Mapping[str, Any]) -> ComputeProfile:
    _check_version(doc)
    model = _parse_model(_require_mapping(doc, "model", ""))
    device = _parse_device(_require_mapping(doc, "device", ""))
    raw_samples = _require_list(doc, "samples", "")
    if not raw_samples:
        raise ProfileError("samples", "must contain at least one batch size")
    samples = tuple(_parse_compute_sample(s, f"samples[{i}]") for i, s in enumerate(raw_samples))
    seen: set[int] = set()
    for i, s in enumerate(samples):
        if s.batch_size in seen:
            raise ProfileError(f"samples[{i}].batch_size", f"duplicate batch size {s.batch_size}")
        seen.add(s.batch_size)
    samples = tuple(sorted(samples, key=lambda s: s.batch_size))
    max_batch = _optional_int(doc, "max_batch_size", "", minimum=1)
    return ComputeProfile(
        model=model,
        device=device,
        samples=samples,
        max_batch_size=max_batch,
        iters=_optional_int(doc, "iters", "", minimum=0),
        warmup=_optional_int(doc, "warmup", "", minimum=0),
        created_at=doc.get("created_at"),
        environment=dict(doc.get("environment") or {}),
        input_pipeline=_parse_input_pipeline(doc.get("input_pipeline")),
    )


def parse_comm_profile(doc: Mapping[str, Any]) -> CommProfile:
    _check_version(doc)
    world = _int_field(doc, "world_size", "", minimum=1)
    nodes = _optional_int(doc, "nodes", "", minimum=1) or 1
    per_node = _optional_int(doc, "ranks_per_node", "", minimum=1) or max(1, world // nodes)
    raw_samples = _require_list(doc, "samples", "")
    if not raw_samples:
        raise ProfileError("samples", "must contain at least one message size")
    samples = tuple(_parse_comm_sample(s, f"samples[{i}]") for i, s in enumerate(raw_samples))
    return CommProfile(
        backend=str(doc.get("backend", "unknown")),
        world_size=world,
        nodes=nodes,
        ranks_per_node=per_node,
        samples=tuple(sorted(samples, key=lambda s: s.size_bytes)),
        created_at=doc.get("created_at"),
        environment=dict(doc.get("environment") or {}),
    )


def timing_stats(times_ms: Sequence[float]) -> TimingStats:
    """Summary of per-iteration times; quantiles by linear interpolation."""
    xs = sorted(float(t) for t in times_ms)
    mean = statistics.fmean(xs)
    std = statistics.pstdev(xs) if len(xs) > 1 else 0.0
    return TimingStats(
        times_ms=tuple(float(t) for t in times_ms),
        median_ms=_quantile(xs, 0.5),
        p10_ms=_quantile(xs, 0.1),
        p90_ms=_quantile(xs, 0.9),
        mean_ms=mean,
        std_ms=std,
    )


# --------------------------------------------------------------------------- helpers


def _as_document(source: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ProfileError("<file>", f"cannot read {path}: {exc}") from exc
    else:
        text = str(source)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError("<document>", f"not valid JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ProfileError("<document>", "top level must be a JSON object")
    return doc


def _check_version(doc: Mapping[str, Any]) -> None:
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ProfileError("schema_version", f"must be {SCHEMA_VERSION}, got {version!r}")


def _path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _require(doc: Mapping[str, Any], key: str, prefix: str) -> Any:
    if not isinstance(doc, Mapping):
        raise ProfileError(prefix or "<document>", "must be an object")
    if key not in doc or doc[key] is None:
        raise ProfileError(_path(prefix, key), "is missing")
    return doc[key]


def _require_mapping(doc: Mapping[str, Any], key: str, prefix: str) -> Mapping[str, Any]:
    value = _require(doc, key, prefix)
    if not isinstance(value, Mapping):
        raise ProfileError(_path(prefix, key), "must be an object")
    return value


def _require_list(doc: Mapping[str, Any], key: str, prefix: str) -> list[Any]:
    value = _require(doc, key, prefix)
    if not isinstance(value, list):
        raise ProfileError(_path(prefix, key), "must be a list")
    return value


def _number(value: Any, where: str, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(where, f"must be a number, got {value!r}")
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        raise ProfileError(where, f"must be finite, got {value!r}")
    if minimum is not None and x < minimum:
        raise ProfileError(where, f"must be >= {minimum:g}, got {value!r}")
    return x


def _int_field(doc: Mapping[str, Any], key: str, prefix: str, *, minimum: int = 0) -> int:
    value = _require(doc, key, prefix)
    return _as_int(value, _path(prefix, key), minimum)


def _optional_int(doc: Mapping[str, Any], key: str, prefix: str, *, minimum: int = 0) -> int | None:
    value = doc.get(key)
    return None if value is None else _as_int(value, _path(prefix, key), minimum)


def _as_int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or float(value) != int(value):
        raise ProfileError(where, f"must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ProfileError(where, f"must be >= {minimum}, got {value!r}")
    return int(value)


def _optional_number(doc: Mapping[str, Any], key: str, prefix: str) -> float | None:
    value = doc.get(key)
    return None if value is None else _number(value, _path(prefix, key))


def _parse_stats(doc: Mapping[str, Any], where: str) -> TimingStats:
    if not isinstance(doc, Mapping):
        raise ProfileError(where, "must be an object")
    times = doc.get("times_ms")
    if times is not None:
        if not isinstance(times, list) or not times:
            raise ProfileError(f"{where}.times_ms", "must be a non-empty list")
        values = [_number(t, f"{where}.times_ms[{i}]") for i, t in enumerate(times)]
        for key in ("median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms"):
            if doc.get(key) is not None:
                _number(doc[key], f"{where}.{key}")
        return timing_stats(values)
    median = _number(_require(doc, "median_ms", where), f"{where}.median_ms")
    p10 = _optional_number(doc, "p10_ms", where)
    p90 = _optional_number(doc, "p90_ms", where)
    mean = _optional_number(doc, "mean_ms", where)
    std = _optional_number(doc, "std_ms", where)
    return TimingStats(
        times_ms=(),
        median_ms=median,
        p10_ms=median if p10 is None else p10,
        p90_ms=median if p90 is None else p90,
        mean_ms=median if mean is None else mean,
        std_ms=0.0 if std is None else std,
    )


def _parse_model(doc: Mapping[str, Any]) -> ModelInfo:
    spec = _require(doc, "spec", "model")
    shape = doc.get("input_shape") or ()
    if not isinstance(shape, list | tuple):
        raise ProfileError("model.input_shape", "must be a list of integers")
    flops = doc.get("forward_flops_per_sample")
    return ModelInfo(
        spec=str(spec),
        input_shape=tuple(_as_int(v, f"model.input_shape[{i}]", 1) for i, v in enumerate(shape)),
        num_classes=_optional_int(doc, "num_classes", "model", minimum=1),
        num_params=_optional_int(doc, "num_params", "model"),
        param_bytes=_optional_int(doc, "param_bytes", "model"),
        forward_flops_per_sample=None if flops is None else _number(flops, "model.forward_flops_per_sample"),
    )


def _parse_device(doc: Mapping[str, Any]) -> DeviceInfo:
    from workload.runs import precision_run  # the agent's rule for what a precision runs as

    kind = str(_require(doc, "type", "device"))
    precision = str(doc.get("precision") or "fp32")
    requested = doc.get("precision_requested")
    if requested is None:
        # An older agent recorded the requested precision only (its CPU "amp" ran bf16 autocast).
        requested, precision = precision, precision_run(precision, kind)
    return DeviceInfo(
        type=kind, name=str(doc.get("name") or kind), precision=precision, precision_requested=str(requested)
    )


def _parse_input_pipeline(doc: Any) -> InputPipelineRate | None:
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise ProfileError("input_pipeline", "must be an object or null")
    from workload.runs import KINDS

    kind = _require(doc, "kind", "input_pipeline")
    if kind not in KINDS:
        raise ProfileError("input_pipeline.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    rate = _number(
        _require(doc, "samples_per_s_per_vcpu", "input_pipeline"), "input_pipeline.samples_per_s_per_vcpu"
    )
    if rate <= 0:
        raise ProfileError("input_pipeline.samples_per_s_per_vcpu", f"must be > 0, got {rate!r}")
    detail = doc.get("detail")
    return InputPipelineRate(
        kind=kind,
        samples_per_s_per_vcpu=rate,
        seconds=_optional_number(doc, "seconds", "input_pipeline"),
        detail=detail if isinstance(detail, str) else "",
    )


def _parse_compute_sample(doc: Any, where: str) -> ComputeSample:
    if not isinstance(doc, Mapping):
        raise ProfileError(where, "must be an object")
    batch = _int_field(doc, "batch_size", where, minimum=1)
    phases_doc = _require_mapping(doc, "phases", where)
    phases: dict[str, TimingStats] = {}
    for name in PHASES:
        if name not in phases_doc:
            raise ProfileError(f"{where}.phases.{name}", "is missing (need forward, backward, optimizer)")
        phases[name] = _parse_stats(phases_doc[name], f"{where}.phases.{name}")
    raw_buckets = doc.get("buckets") or []
    if not isinstance(raw_buckets, list):
        raise ProfileError(f"{where}.buckets", "must be a list")
    backward_ms = phases["backward"].median_ms
    buckets = tuple(_parse_bucket(b, f"{where}.buckets[{i}]", backward_ms) for i, b in enumerate(raw_buckets))
    return ComputeSample(
        batch_size=batch,
        phases=phases,
        buckets=tuple(sorted(buckets, key=lambda b: b.index)),
        peak_memory_bytes=_optional_int(doc, "peak_memory_bytes", where),
    )


def _parse_bucket(doc: Any, where: str, backward_ms: float) -> Bucket:
    """A bucket; ``ready_fraction`` defaults to ``ready_ms / median backward time``."""
    if not isinstance(doc, Mapping):
        raise ProfileError(where, "must be an object")
    fraction = doc.get("ready_fraction")
    ready_ms = _number(_require(doc, "ready_ms", where), f"{where}.ready_ms")
    if fraction is None:
        frac = ready_ms / backward_ms if backward_ms > 0 else 1.0
    else:
        frac = _number(fraction, f"{where}.ready_fraction")
    if frac > 1.0 + 1e-6:
        raise ProfileError(f"{where}.ready_fraction", f"must be <= 1, got {fraction!r}")
    return Bucket(
        index=_int_field(doc, "index", where),
        size_bytes=_int_field(doc, "size_bytes", where, minimum=1),
        num_params=_optional_int(doc, "num_params", where) or 0,
        ready_ms=ready_ms,
        ready_fraction=min(frac, 1.0),
    )


def _parse_comm_sample(doc: Any, where: str) -> CommSample:
    if not isinstance(doc, Mapping):
        raise ProfileError(where, "must be an object")
    return CommSample(
        size_bytes=_int_field(doc, "size_bytes", where, minimum=1),
        stats=_parse_stats(doc, where),
        algbw_gbps=_optional_number(doc, "algbw_gbps", where),
        busbw_gbps=_optional_number(doc, "busbw_gbps", where),
        cpu_share=_cpu_share(doc, where),
    )


def _cpu_share(doc: Mapping[str, Any], where: str) -> float | None:
    share = _optional_number(doc, "cpu_share", where)
    # Several threads (gloo's workers, the kernel's loopback) can exceed one core; 8 is absurd.
    if share is not None and not 0 <= share <= 8:
        raise ProfileError(f"{where}.cpu_share", f"must be between 0 and 8, got {share!r}")
    return share


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def merge_comm_profiles(profiles: Sequence[CommProfile]) -> CommProfile:
    """Pool repeated comm profiles of one group (same backend, world size and placement) into
    one: per message size the per-collective times are concatenated and re-summarised, the
    bandwidths recomputed from the pooled median and the CPU shares averaged.

    Used when a profile was repeated around a measurement (before and after it), so that slow
    drift of the machine averages out instead of landing on one side.
    """
    if not profiles:
        raise ValueError("merge: no profiles")
    first = profiles[0]
    for i, p in enumerate(profiles[1:], start=1):
        if (p.backend, p.world_size, p.nodes, p.ranks_per_node) != (
            first.backend,
            first.world_size,
            first.nodes,
            first.ranks_per_node,
        ):
            raise ProfileError(
                f"profiles[{i}]", "backend, world size, nodes and ranks per node must match the first"
            )
    by_size: dict[int, list[CommSample]] = {}
    for p in profiles:
        for s in p.samples:
            by_size.setdefault(s.size_bytes, []).append(s)
    merged = []
    for size in sorted(by_size):
        group = by_size[size]
        stats = timing_stats([t for s in group for t in (s.stats.times_ms or (s.stats.median_ms,))])
        shares = [s.cpu_share for s in group if s.cpu_share is not None]
        algbw = size * 8 / (stats.median_ms * 1e6) if stats.median_ms > 0 else None  # Gbit/s
        ratios = [s.busbw_gbps / s.algbw_gbps for s in group if s.busbw_gbps and s.algbw_gbps]
        merged.append(
            CommSample(
                size,
                stats,
                algbw,
                algbw * statistics.fmean(ratios) if algbw and ratios else None,
                statistics.fmean(shares) if shares else None,
            )
        )
    return CommProfile(
        backend=first.backend,
        world_size=first.world_size,
        nodes=first.nodes,
        ranks_per_node=first.ranks_per_node,
        samples=tuple(merged),
        created_at=first.created_at,
        environment=first.environment,
    )


def merge_compute_profiles(profiles: Sequence[ComputeProfile], *, align: bool = False) -> ComputeProfile:
    """Pool repeated profiles of one (model, device) into one: per batch size the per-iteration
    times of every phase are concatenated and re-summarised; bucket ready times are averaged.

    Used when several identical profiling processes ran at once (e.g. one per core, to load
    the machine as a multi-process DDP job would) or when a profile was repeated.

    ``align``: each profile's times of a phase are first scaled to the geometric mean of the
    profiles' medians, so the pooled spread stays the iteration-to-iteration one and the
    difference between the profiles (drift, a slow process) is left out of it — to be modelled
    as run-to-run spread instead (:func:`planner.perf.compute.run_spread`); otherwise two
    profiles 10 % apart would look like very noisy iterations.
    """
    if not profiles:
        raise ValueError("merge: no profiles")
    first = profiles[0]
    for i, p in enumerate(profiles[1:], start=1):
        if p.model.spec != first.model.spec or p.device.name != first.device.name:
            raise ProfileError(f"profiles[{i}]", "model spec and device must match the first profile")
    merged = []
    for batch in first.batch_sizes:
        samples = [p.sample_for(batch) for p in profiles if batch in p.batch_sizes]
        phases = {}
        for name in PHASES:
            stats = [s.phases[name] for s in samples]
            scale = [1.0] * len(stats)
            if align and len(stats) > 1 and all(st.median_ms > 0 for st in stats):
                centre = math.exp(statistics.fmean(math.log(st.median_ms) for st in stats))
                scale = [centre / st.median_ms for st in stats]
            phases[name] = timing_stats(
                [t * k for st, k in zip(stats, scale, strict=True) for t in (st.times_ms or (st.median_ms,))]
            )
        buckets = samples[0].buckets
        if buckets and all(len(s.buckets) == len(buckets) for s in samples):
            buckets = tuple(
                Bucket(
                    b.index,
                    b.size_bytes,
                    b.num_params,
                    statistics.fmean(s.buckets[i].ready_ms for s in samples),
                    statistics.fmean(s.buckets[i].ready_fraction for s in samples),
                )
                for i, b in enumerate(buckets)
            )
        merged.append(ComputeSample(batch, phases, buckets, samples[0].peak_memory_bytes))
    return ComputeProfile(
        model=first.model,
        device=first.device,
        samples=tuple(merged),
        max_batch_size=first.max_batch_size,
        iters=first.iters,
        warmup=first.warmup,
        created_at=first.created_at,
        environment=first.environment,
        input_pipeline=first.input_pipeline,
    )

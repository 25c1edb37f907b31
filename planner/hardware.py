"""Plain descriptions of GPUs, workers and clusters used by the performance models.

Units (read carefully, the catalog CSV column names are misleading):

* ``catalog/fixtures/gpu_specs.csv`` columns ``memory_bandwidth_gbps`` and ``nvlink_gbps_per_gpu``
  hold **gigabytes** per second as printed on NVIDIA datasheets (V100: 900 GB/s HBM2, 300 GB/s
  NVLink aggregate over both directions).  :class:`GpuSpec` stores them as ``*_gb_s`` (GB/s).
* Network figures (``aws_instance_network.csv``: ``BaselineBandwidthGbps``, ``PeakBandwidthGbps``)
  are **gigabits** per second; :class:`Cluster` stores them as ``*_gbps`` (Gbit/s).
* An NVLink aggregate figure counts both directions, so one direction carries half of it;
  :meth:`Cluster.intra_node_link` returns that unidirectional figure, in Gbit/s.

Nothing here imports Django; the web side builds these from catalog rows with ``from_dict``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The catalog's network field, parsed once there; the planner's link models read it from here too.
from catalog.network import efa_gbps as efa_gbps

# PCIe fallback for GPU-to-GPU traffic inside a node without NVLink (Gen4 x16 ≈ 25 GB/s per
# direction on paper, ~20 GB/s achieved through host memory) — in Gbit/s.
PCIE_GBPS = 160.0
# Per-message start-up latency α of one ring step, microseconds.
ALPHA_US = {"nvlink": 8.0, "pcie": 12.0, "efa": 20.0, "tcp": 50.0, "loopback": 30.0}

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp")

# Board power limit (W) and boost clock (MHz) from NVIDIA's datasheets.  A datasheet peak
# assumes every SM at the boost clock; under sustained tensor or FP32 load a board holds the
# clock its power limit allows, so the power it may draw per SM-GHz of boost,
# ``W / (SMs · boost GHz)``, says how far below its peak it settles: a T4 (70 W, 40 SMs,
# 1.59 GHz) has 1.1 W per SM-GHz, an L4 (72 W, 58 SMs, 2.04 GHz) 0.6, an H100 SXM (700 W,
# 132 SMs, 1.98 GHz) 2.7.  The compute model uses it for chips without training rows
# (``planner.perf.opclass``); no figure here was chosen by looking at any fit.
BOARD_POWER: dict[str, tuple[float, float]] = {
    "V100": (300, 1530),  # SXM2 (p3)
    "V100-32GB": (300, 1530),  # SXM2 32 GB (p3dn)
    "T4": (70, 1590),
    "A10G": (300, 1710),  # nvidia-smi's power limit on g5; the A10 PCIe card is 150 W
    "L4": (72, 2040),
    "L40S": (350, 2520),
    "A100": (400, 1410),  # SXM4
    "A100-80GB": (400, 1410),
    "A100-PCIe-40GB": (250, 1410),
    "A100-PCIe-80GB": (300, 1410),
    "A40": (300, 1740),
    "RTX-3090": (350, 1695),
    "H100": (700, 1980),  # SXM5
    "H200": (700, 1980),
    "H100-PCIe-80GB": (350, 1755),
}


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model; ``None`` where unknown."""

    name: str
    architecture: str = ""
    sm_count: int | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    fp16_tflops: float | None = None
    memory_bandwidth_gb_s: float | None = None
    memory_gib: float | None = None
    nvlink_gb_s: float = 0.0

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> GpuSpec:
        """Build from a ``gpu_specs.csv`` row (its column names) or from this class's own names."""
        name = row.get("name") or row.get("gpu")
        if not name:
            raise ValueError("gpu spec: field 'gpu' (or 'name') is missing")
        return cls(
            name=str(name),
            architecture=str(row.get("architecture") or ""),
            sm_count=_opt_int(row.get("sm_count")),
            fp32_tflops=_opt_float(row.get("fp32_tflops")),
            tf32_tflops=_opt_float(_first(row, "tf32_tflops", "tf32_tensor_tflops_dense")),
            fp16_tflops=_opt_float(_first(row, "fp16_tflops", "fp16_tensor_tflops_dense")),
            memory_bandwidth_gb_s=_opt_float(_first(row, "memory_bandwidth_gb_s", "memory_bandwidth_gbps")),
            memory_gib=_opt_float(row.get("memory_gib")),
            nvlink_gb_s=_opt_float(_first(row, "nvlink_gb_s", "nvlink_gbps_per_gpu")) or 0.0,
        )

    def watts_per_sm_ghz(self) -> float | None:
        """Board power limit per SM-GHz of boost clock (:data:`BOARD_POWER`); None when unknown."""
        power = BOARD_POWER.get(self.name)
        if power is None or not self.sm_count:
            return None
        return power[0] / (self.sm_count * power[1] / 1e3)

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for a training precision.

        ``fp32`` → CUDA-core FP32; ``tf32`` → TF32 tensor cores, falling back to FP32 on GPUs
        without them (Volta, Turing); ``fp16``/``bf16``/``amp`` → FP16 tensor cores.
        """
        p = precision.lower()
        if p == "fp32":
            return self.fp32_tflops
        if p == "tf32":
            return self.tf32_tflops or self.fp32_tflops
        if p in ("fp16", "bf16", "amp"):
            return self.fp16_tflops
        raise ValueError(f"precision: unknown {precision!r} (expected one of {PRECISIONS})")


@dataclass(frozen=True)
class Worker:
    """One training process (one GPU) as the simulator sees it."""

    device: str
    gpu: GpuSpec | None = None
    node: int = 0
    max_batch_size: int | None = None

    @classmethod
    def from_dict(cls, row: Mapping[str, Any], specs: Mapping[str, GpuSpec] | None = None) -> Worker:
        device = row.get("device") or row.get("gpu")
        if not device:
            raise ValueError("worker: field 'device' is missing")
        gpu = row.get("gpu_spec")
        if isinstance(gpu, Mapping):
            gpu = GpuSpec.from_dict(gpu)
        elif gpu is None and specs is not None:
            gpu = specs.get(str(device))
        return cls(
            device=str(device),
            gpu=gpu,
            node=int(row.get("node", 0)),
            max_batch_size=_opt_int(row.get("max_batch_size")),
        )


@dataclass(frozen=True)
class Link:
    """The link a ring all-reduce is bottlenecked on: bandwidth in Gbit/s, α in µs."""

    kind: str
    gbps: float
    alpha_us: float
    peak_gbps: float | None = None

    @property
    def bytes_per_ms(self) -> float:
        return self.gbps * 1e9 / 8 / 1e3


@dataclass(frozen=True)
class Cluster:
    """A homogeneous-network DDP cluster: ``nodes × gpus_per_node`` workers.

    ``network_gbps`` is the node's baseline network bandwidth (Gbit/s; for "up to" instance
    classes the sustained baseline, not the burst peak), ``peak_gbps`` the burst figure.
    ``intra_node_gbps`` overrides the GPU-to-GPU figure inside a node (default: NVLink of the
    GPU spec, unidirectional, or :data:`PCIE_GBPS`).  ``workers`` may list per-worker devices
    for heterogeneous clusters; otherwise all workers are ``device``.
    """

    nodes: int = 1
    gpus_per_node: int = 1
    network_gbps: float | None = None
    peak_gbps: float | None = None
    efa: bool = False
    placement_group: bool = False
    intra_node_gbps: float | None = None
    instance_type: str = ""
    device: str = ""
    gpu: GpuSpec | None = None
    workers: tuple[Worker, ...] = field(default_factory=tuple)
    alpha_us: float | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(
                f"cluster: nodes and gpus_per_node must be >= 1 (got {self.nodes}, {self.gpus_per_node})"
            )
        if self.nodes > 1 and not self.network_gbps:
            raise ValueError("cluster: network_gbps is required when nodes > 1")
        if self.workers and len(self.workers) != self.world_size:
            raise ValueError(f"cluster: {len(self.workers)} workers given for world size {self.world_size}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def worker_list(self) -> tuple[Worker, ...]:
        if self.workers:
            return self.workers
        return tuple(
            Worker(device=self.device, gpu=self.gpu, node=i // self.gpus_per_node)
            for i in range(self.world_size)
        )

    def intra_node_link(self) -> Link:
        if self.intra_node_gbps is not None:
            return Link("intra", self.intra_node_gbps, self.alpha_us or ALPHA_US["pcie"])
        nvlink = self.gpu.nvlink_gb_s if self.gpu else 0.0
        if nvlink > 0:
            return Link("nvlink", nvlink / 2 * 8, self.alpha_us or ALPHA_US["nvlink"])
        return Link("pcie", PCIE_GBPS, self.alpha_us or ALPHA_US["pcie"])

    def inter_node_link(self) -> Link:
        if not self.network_gbps:
            raise ValueError("cluster: network_gbps is required for the inter-node link")
        kind = "efa" if self.efa else "tcp"
        return Link(kind, float(self.network_gbps), self.alpha_us or ALPHA_US[kind], self.peak_gbps)

    def slowest_link(self) -> Link:
        """The ring's bottleneck: the network between nodes if any, else the intra-node link.

        A ring over ``nodes × g`` GPUs crosses every node boundary; each inter-node hop carries
        the same bytes as an intra-node hop but over the node NIC, so for ``nodes > 1`` the
        slower of the two links bounds the ring.
        """
        intra = self.intra_node_link()
        if not self.multi_node:
            return intra
        inter = self.inter_node_link()
        return inter if inter.gbps <= intra.gbps else intra

    @classmethod
    def from_dict(cls, row: Mapping[str, Any], specs: Mapping[str, GpuSpec] | None = None) -> Cluster:
        """Build from plain values; accepts catalog network column names too."""
        gpu = row.get("gpu")
        if isinstance(gpu, Mapping):
            gpu = GpuSpec.from_dict(gpu)
        device = str(row.get("device") or (gpu.name if isinstance(gpu, GpuSpec) else "") or "")
        if gpu is None and specs is not None and device:
            gpu = specs.get(device)
        workers = tuple(
            Worker.from_dict(w, specs) if isinstance(w, Mapping) else w for w in row.get("workers") or ()
        )
        return cls(
            nodes=int(row.get("nodes", 1)),
            gpus_per_node=int(row.get("gpus_per_node", 1)),
            network_gbps=_opt_float(
                _first(row, "network_gbps", "BaselineBandwidthGbps", "PeakBandwidthGbps")
            ),
            peak_gbps=_opt_float(_first(row, "peak_gbps", "PeakBandwidthGbps")),
            efa=_as_bool(_first(row, "efa", "EfaSupported")),
            placement_group=_as_bool(row.get("placement_group")),
            intra_node_gbps=_opt_float(row.get("intra_node_gbps")),
            instance_type=str(_first(row, "instance_type", "InstanceType") or ""),
            device=device,
            gpu=gpu if isinstance(gpu, GpuSpec) else None,
            workers=workers,
            alpha_us=_opt_float(row.get("alpha_us")),
        )


def load_gpu_specs(path: str | Path) -> dict[str, GpuSpec]:
    """Read ``gpu_specs.csv`` into ``{name: GpuSpec}``."""
    with open(path, newline="") as fh:
        return specs_from_rows(csv.DictReader(fh))


def specs_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, GpuSpec]:
    specs = (GpuSpec.from_dict(r) for r in rows)
    return {s.name: s for s in specs}


def _first(row: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = row.get(key)
        if value not in (None, ""):
            return value
    return None


def _opt_float(value: Any) -> float | None:
    if value in (None, ""):
        return None
    x = float(value)
    return None if math.isnan(x) else x


def _opt_int(value: Any) -> int | None:
    x = _opt_float(value)
    return None if x is None else int(x)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "y", "cluster")
    return bool(value)

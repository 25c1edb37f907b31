"""Solver bench: optimality vs brute force, full-catalog speed, and gain over baselines.

Run:  .venv/bin/python bench/solver.py  [--quick]

It uses a simple *analytical* DDP performance oracle (``AnalyticalOracle``) instead of the learned
models, so it runs anywhere without profiles:

* per-GPU speed: ``fp16 dense tensor TFLOPS x efficiency / (3 x forward FLOPs per sample)``,
  saturating in the per-GPU batch ``b`` as ``b / (b + b_half)``; the efficiency (6 % for ResNet-50)
  is calibrated on the single-GPU ResNet-50 AMP figures in
  ``catalog/fixtures/calibration_resnet50_single_gpu.csv`` (A10: 639 img/s, A100: 1,527 img/s);
* GPU memory caps the per-GPU batch (weights + gradients + Adam state, plus activations/sample);
* gradients (fp32) are all-reduced inside a node over NVLink (or PCIe when the GPU has none), then
  with a ring over the nodes at the slowest node's network bandwidth (85 % efficiency with EFA,
  60 % over TCP) plus a per-bucket latency;
* communication overlaps the backward pass (2/3 of compute) at 80 %;
* a heterogeneous cluster splits the global batch in proportion to node speed (capped by memory),
  and the iteration takes as long as the slowest node plus the exposed communication.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.candidates import Candidate, load_candidates, load_network  # noqa: E402
from planner.solver import Estimate  # noqa: E402

FIXTURES = ROOT / "catalog" / "fixtures"
PCIE_GBYTES_S = 12.0  # effective all-reduce bandwidth between GPUs without NVLink
BUCKET_BYTES = 25 * 2**20  # DDP gradient bucket


@dataclass(frozen=True)
class GpuSpec:
    name: str
    fp16_tflops: float
    memory_gib: float
    nvlink_gbytes_s: float


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: float  # parameters
    forward_flops: float  # per sample
    activation_gib: float  # per sample (mixed precision)
    efficiency: float  # of fp16 dense tensor peak
    b_half: float = 16.0  # per-GPU batch at which half the peak efficiency is reached


RESNET50 = ModelSpec("ResNet-50", 25.6e6, 4.1e9, 0.07, 0.06)
VGG19 = ModelSpec("VGG-19", 143.7e6, 19.6e9, 0.16, 0.09)
IMAGENET_SAMPLES = 1_281_167


def load_gpu_specs(path: Path = FIXTURES / "gpu_specs.csv") -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if not r["fp16_tensor_tflops_dense"]:
                continue
            out[r["gpu"]] = GpuSpec(r["gpu"], float(r["fp16_tensor_tflops_dense"]), float(r["memory_gib"]),
                                    float(r["nvlink_gbps_per_gpu"] or 0.0))
    return out


def load_catalog(**kwargs) -> list[Candidate]:
    with open(FIXTURES / "aws_instance_network.csv", newline="") as f:
        net = load_network(csv.DictReader(f))
    with open(FIXTURES / "aws_gpu_instances.csv", newline="") as f:
        return load_candidates(csv.DictReader(f), net, **kwargs)


class AnalyticalOracle:
    """``perf(config, global_batch) -> Estimate | None`` for one model (see the module docstring)."""

    def __init__(self, model: ModelSpec, specs: dict[str, GpuSpec] | None = None) -> None:
        self.model = model
        self.specs = specs if specs is not None else load_gpu_specs()
        self.calls = 0

    def gpu(self, c: Candidate) -> GpuSpec | None:
        spec = self.specs.get(c.gpu_model) or self.specs.get(c.gpu_model.split("-")[0])
        if spec is None:
            return None
        mem = c.gpu_memory_gib or spec.memory_gib
        return replace(spec, memory_gib=mem)

    def __call__(self, config: tuple[tuple[Candidate, int], ...], global_batch: int) -> Estimate | None:
        self.calls += 1
        m = self.model
        merged: dict[str, list] = {}
        for c, n in config:
            if c.instance_type in merged:
                merged[c.instance_type][1] += n
            else:
                merged[c.instance_type] = [c, n]
        groups = list(merged.values())
        nodes = sum(n for _, n in groups)
        gpus = sum(c.gpus_per_node * n for c, n in groups)
        if global_batch < gpus:
            return None
        peak, cap, hw = [], [], []
        state_gib = m.params * 16 / 2**30
        for c, _n in groups:
            g = self.gpu(c)
            if g is None:
                return None
            per_gpu_peak = g.fp16_tflops * 1e12 * m.efficiency / (3.0 * m.forward_flops)
            max_b = math.floor((g.memory_gib * 0.9 - state_gib) / m.activation_gib)
            if max_b < 1:
                return None
            peak.append(per_gpu_peak)
            cap.append(max_b * c.gpus_per_node)  # per node
            hw.append(g)
        # water-filling split of the global batch, proportional to node peak speed, capped by memory
        share = [0.0] * len(groups)
        free = set(range(len(groups)))
        left = float(global_batch)
        while free and left > 1e-9:
            w = sum(peak[i] * groups[i][0].gpus_per_node * groups[i][1] for i in free)
            capped = False
            for i in list(free):
                want = left * peak[i] * groups[i][0].gpus_per_node * groups[i][1] / w
                if want / groups[i][1] > cap[i] - share[i] + 1e-9:
                    left -= (cap[i] - share[i]) * groups[i][1]
                    share[i] = cap[i]
                    free.discard(i)
                    capped = True
            if not capped:
                for i in free:
                    share[i] += left * peak[i] * groups[i][0].gpus_per_node * groups[i][1] / w / groups[i][1]
                left = 0.0
        if left > 1e-6:
            return None  # does not fit in GPU memory
        t_compute = 0.0
        for i, (c, _n) in enumerate(groups):
            b = share[i] / c.gpus_per_node
            if b <= 0:
                continue
            t_compute = max(t_compute, (b + m.b_half) / peak[i])
        grad_bytes = m.params * 4
        intra = 0.0
        for i, (c, _n) in enumerate(groups):
            gp = c.gpus_per_node
            if gp > 1:
                bw = hw[i].nvlink_gbytes_s or PCIE_GBYTES_S
                intra = max(intra, 2 * (gp - 1) / gp * grad_bytes / (bw * 1e9))
        inter = 0.0
        if nodes > 1:
            bw = min(c.network_gbps for c, _ in groups) or 1.0
            efa = all(c.efa for c, _ in groups)
            eta, alpha = (0.85, 15e-6) if efa else (0.6, 50e-6)
            buckets = math.ceil(grad_bytes / BUCKET_BYTES)
            inter = 2 * (nodes - 1) / nodes * grad_bytes * 8 / (bw * 1e9 * eta) + 2 * (nodes - 1) * alpha * buckets
        comm = intra + inter
        exposed = max(0.0, comm - 0.8 * (2.0 / 3.0) * t_compute)
        it = t_compute + exposed + 0.005
        hetero = len(groups) > 1
        p90 = it * (1.03 + 0.01 * math.log2(max(1, nodes)) + (0.04 if hetero else 0.0))
        if exposed > 0.5 * t_compute:
            bottleneck = "network (inter-node)" if inter >= intra else "intra-node interconnect"
        elif any(share[i] >= cap[i] - 1e-9 for i in range(len(groups))):
            bottleneck = "GPU memory (batch capped)"
        else:
            bottleneck = "compute"
        per_node = tuple(int(round(share[i])) for i in range(len(groups)))
        # report per config entry (the solver may have passed same-type groups separately)
        by_type = {groups[i][0].instance_type: per_node[i] for i in range(len(groups))}
        return Estimate(iter_time_s=it, iter_time_p90_s=p90, throughput_sps=global_batch / it,
                        bottleneck=bottleneck, per_node_batch=tuple(by_type[c.instance_type] for c, _ in config))

"""The input-pipeline limit: a node trains no faster than its data loaders feed it (pure).

Each DDP training process keeps one vCPU; the node's other vCPUs run data-loader workers, one
process each (``profiler/agent/dataloader.py`` measures what one such worker prepares per
second). So a node of ``v`` vCPUs and ``g`` GPUs is fed at most::

    ceiling = max(1, v - g) * rate_per_vcpu          [samples/s]

and a synchronous step of ``B`` samples on that node takes at least ``B / ceiling`` seconds
(loaders prefetch, so input overlaps compute, and the iteration is the longer of the two).

``rate_per_vcpu`` is the profile's measured figure when there is one for the input's kind (the
compute profile's ``input_pipeline``, :func:`measured_rate`), times :data:`HYPERTHREAD_SHARE`:
the agent measures one thread beside idle ones, while in training every vCPU of the node loads
at once (the same 0.6 as the defaults below); else the default of the data kind (:data:`DEFAULT_RATE_PER_VCPU`), an *assumption* that every plan row it binds states:

* ``image`` 100 samples/s per vCPU: the PyTorch ImageNet reference pipeline (``ImageFolder``,
  PIL decode of a 500x375 JPEG, RandomResizedCrop 224, flip, ToTensor, Normalize; collated and
  passed between processes by a ``DataLoader`` with one worker) measured 179 images/s on one
  full core of this project's build machine (AMD EPYC, 2026-12-06; decode + transform alone:
  260/s with PIL, 354/s with ``torchvision.io.decode_jpeg``). An EC2 vCPU is one hyperthread:
  with every vCPU of a node loading, a core's two threads give it about 1.2 threads' worth, so
  0.6 x 179 = 107 per vCPU, rounded down to 100.
* ``small_image`` 1,400 samples/s per vCPU, for images of at most 64 x 64 pixels (CIFAR, SVHN,
  downsampled ImageNet): those datasets ship as in-memory ``uint8`` arrays, so no file is read or
  decoded. The CIFAR-10 reference pipeline (``Image.fromarray``, RandomCrop with 1/8 padding, flip,
  ToTensor, Normalize; a ``DataLoader`` with one worker) measured 3,185 images/s at 32 x 32 and
  2,488/s at 64 x 64 on one core of the same machine; 0.6 x 2,488 = 1,493, rounded down.
* ``text`` 90,000 samples/s per vCPU: ``dataloader.py``'s pre-tokenised windows (512 tokens)
  measured 159k/s on one core, times the same 0.6; it practically never binds.

The kind comes from the model's input shape (``workload.runs.data_kind``, the rule
the agent measures by): ``(C, H, W)`` is image data (``small_image`` when
``max(H, W) <= 64``: a JPEG-decoding assumption would make a CIFAR model look 15x input-bound),
``(seq_len,)`` is token data; anything else has no known pipeline and is not capped.

When the pipeline binds, the plan row names it and suggests the smallest instance type with the
same GPU whose loader vCPUs keep each GPU fed, from the bundled instance-type list
(``catalog/fixtures/aws_gpu_instances.csv``: vCPUs and GPUs are hardware, the same everywhere).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# The agent reads the data kind the same way when it measures the rate (workload.runs is the one
# place the rule lives: the agent may not import the planner, nor the planner the agent).
from workload.runs import KINDS as KINDS
from workload.runs import SMALL_IMAGE_MAX_SIDE as SMALL_IMAGE_MAX_SIDE
from workload.runs import data_kind as data_kind

DEFAULT_RATE_PER_VCPU: dict[str, float] = {"image": 100.0, "small_image": 1_400.0, "text": 90_000.0}
# What one vCPU (a hyperthread) keeps of a rate measured on one thread when all vCPUs load at
# once: a core's two threads give it ~1.2 threads' worth (see the image default below).
HYPERTHREAD_SHARE = 0.6
LABELS = {"image": "JPEG image", "small_image": "in-memory small-image", "text": "token"}
TYPES_CSV = Path(__file__).resolve().parents[1] / "catalog" / "fixtures" / "aws_gpu_instances.csv"


def measured_rate(input_shape: Sequence[int], measured: tuple[str, float] | None) -> float | None:
    """A profile's measured ``(kind, samples/s on one thread)`` as samples/s per vCPU of a fully
    loading node (x :data:`HYPERTHREAD_SHARE`) when it was measured for this input's data kind,
    else None (the default of the kind applies). A rate of another kind -- the profile ran at
    another input shape -- says nothing about this input."""
    if measured is None:
        return None
    kind, rate = measured
    if kind != data_kind(input_shape) or not math.isfinite(rate) or rate <= 0:
        return None
    return float(rate) * HYPERTHREAD_SHARE


def loader_vcpus(vcpus: float, gpus: int) -> int:
    """vCPUs left for data-loader workers once every GPU's training process has one."""
    return max(1, int(vcpus) - max(1, int(gpus)))


@dataclass(frozen=True)
class InputPipeline:
    """What one vCPU's loader worker prepares per second, and where the figure comes from."""

    kind: str
    rate_per_vcpu: float
    measured: bool

    @classmethod
    def for_workload(
        cls, input_shape: Sequence[int], measured_rate: float | None = None
    ) -> InputPipeline | None:
        """The profile's measured rate, else the default of the data kind (None: no cap)."""
        kind = data_kind(input_shape)
        if kind is None:
            return None
        if measured_rate is not None and measured_rate > 0:
            return cls(kind, float(measured_rate), True)
        return cls(kind, DEFAULT_RATE_PER_VCPU[kind], False)

    @property
    def label(self) -> str:
        """The data kind in words (``small_image`` -> ``in-memory small-image``)."""
        return LABELS.get(self.kind, self.kind)

    def ceiling(self, vcpus: float, gpus: int) -> float:
        """Samples/s a node's loaders deliver; ``inf`` when its vCPUs are unknown (0)."""
        if vcpus <= 0:
            return math.inf
        return loader_vcpus(vcpus, gpus) * self.rate_per_vcpu

    def describe(self, instance_type: str, vcpus: float, gpus: int, gpu_model: str, wanted_sps: float) -> str:
        """The plan row's bottleneck text: the figures, the assumption and a better-fed type."""
        workers = loader_vcpus(vcpus, gpus)
        source = "measured" if self.measured else f"assumed for {self.label} data"
        text = (
            f"input pipeline: {instance_type} feeds {workers} loader vCPUs x {self.rate_per_vcpu:,.0f} "
            f"samples/s ({source}) = {workers * self.rate_per_vcpu:,.0f}/s per node, the GPUs could "
            f"take {wanted_sps:,.0f}/s"
        )
        better = suggest_type(gpu_model, gpus, wanted_sps, self.rate_per_vcpu, exclude=instance_type)
        if better is not None:
            name, v, g = better
            text += f"; {name} ({v} vCPUs for {g} {gpu_model}) keeps them fed"
        else:
            text += f"; no {gpu_model} type has enough vCPUs per GPU"
        return text


@cache
def bundled_types() -> tuple[tuple[str, str, int, int], ...]:
    """``(instance type, GPU model, GPUs, vCPUs)`` of every bundled GPU instance type."""
    seen: dict[str, tuple[str, str, int, int]] = {}
    with TYPES_CSV.open(newline="") as f:
        for row in csv.DictReader(f):
            name = row.get("InstanceType") or ""
            if not name or name in seen:
                continue
            try:
                gpus, vcpus = int(float(row["AcceleratorCount"])), int(float(row["vCPUs"]))
            except (KeyError, TypeError, ValueError):
                continue
            seen[name] = (name, str(row.get("AcceleratorName") or ""), gpus, vcpus)
    return tuple(sorted(seen.values()))


def suggest_type(
    gpu_model: str, gpus: int, wanted_sps: float, rate_per_vcpu: float, *, exclude: str = ""
) -> tuple[str, int, int] | None:
    """The type with the same GPU model whose loaders feed each GPU ``wanted_sps / gpus``: fewest
    GPUs first (the nearest to the type asked about), then fewest vCPUs. ``(name, vCPUs, GPUs)``."""
    per_gpu = wanted_sps / max(1, gpus)
    fits = [
        (g, v, name)
        for name, model, g, v in bundled_types()
        if model.lower() == gpu_model.lower()
        and name != exclude
        and g >= 1
        and loader_vcpus(v, g) * rate_per_vcpu >= per_gpu * g
    ]
    if not fits:
        return None
    g, v, name = min(fits, key=lambda t: (abs(t[0] - gpus), t[0], t[1], t[2]))
    return name, v, g
